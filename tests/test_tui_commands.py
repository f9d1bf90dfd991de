"""The command palette offers neuron-top's own commands; screenshots land where the user is."""
from __future__ import annotations

import pytest

from textual.command import CommandList, CommandPalette

from tests.test_tui_support import make_app, run_async, settle
from tui.cli import build_parser


def _palette_offers(app, words: str) -> bool:
    """The palette's search is over and its highlighted command is the one named ``words``."""
    palette = app.screen
    if not isinstance(palette, CommandPalette):
        return False
    if any(w.group == CommandPalette._GATHER_COMMANDS_GROUP and not w.is_finished for w in app.workers):
        return False
    commands = palette.query_one(CommandList)
    if commands.highlighted is None:
        return False
    prompt = commands.get_option_at_index(commands.highlighted).prompt
    return str(getattr(prompt, "plain", prompt)).splitlines()[0] == words


async def run_command(pilot, words: str) -> None:
    await pilot.press("ctrl+p")
    await pilot.pause()
    await pilot.press(*words)
    for _ in range(250):  # the palette searches asynchronously: wait until it offers the command
        if _palette_offers(pilot.app, words):
            break
        await pilot.pause(0.02)
    assert _palette_offers(pilot.app, words), f"the palette does not offer {words!r}"
    await pilot.press("enter")
    await pilot.pause()


@pytest.mark.parametrize("words,check", [
    ("View: engines", lambda app: app.view == "engines"),
    ("View: processes", lambda app: app.view == "processes"),
    ("App: bert-large-infer", lambda app: app.tab == "bert-large-infer"),
    ("Sort processes by NC UTIL", lambda app: (app.view, app.sort_key, app.sort_reverse)
     == ("processes", "utilization", True)),
    ("Pause", lambda app: app.paused),
    ("Show TFLOPs", lambda app: app.show_flops),
    ("Process tree", lambda app: app.tree_mode and app.view == "processes"),
], ids=["engines", "processes", "app", "sort", "pause", "flops", "tree"])
@run_async
async def test_palette_runs_neuron_top_commands(words, check):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, 6)
        await run_command(pilot, words)
        assert check(app)


@run_async
async def test_S_saves_an_svg_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("S")
        await pilot.pause()
        saved = list(tmp_path.glob("neuron-top_*.svg"))
        assert len(saved) == 1 and saved[0].read_text().lstrip().startswith("<svg")
        assert any(str(saved[0]) in n.message for n in app._notifications)


@run_async
async def test_palette_screenshot_is_ours(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, 6)
        await run_command(pilot, "Save screenshot")
        await pilot.pause(0.2)
        assert len(list(tmp_path.glob("neuron-top_*.svg"))) == 1


@run_async
async def test_screenshot_to_an_unwritable_directory_says_so(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    monkeypatch.chdir(locked)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("S")
        await pilot.pause()
        assert any("screenshot not saved" in n.message for n in app._notifications) or \
            list(locked.glob("*.svg"))  # root may write anyway


def test_readonly_flag():
    assert build_parser().parse_args(["--readonly"]).readonly
    assert not build_parser().parse_args([]).readonly
    assert "--readonly" in build_parser().format_help()
