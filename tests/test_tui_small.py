"""80x24 is a first-class size: nothing cut mid-word, keys in the footer, space used, focus shown."""
from __future__ import annotations

import pytest

from tests.test_tui_support import make_app, run_async, settle
from tui.keys import footer_entries
from tui.widgets.engines import EngineView
from tui.widgets.footer import KeyFooter
from tui.widgets.grid import CoreGridView
from tui.widgets.panels import AppsBar, TitleBar
from tui.widgets.tree import MemoryTreeView

MUST_SHOW = {  # (view, width) -> keys that have to be in the footer
    ("overview", 80): {"q", "?", "o/e/p", "f", "x", "space", "a/d"},
    ("engines", 80): {"q", "?", "o/e/p", "[ ]", "space", "a/d"},
    ("processes", 80): {"q", "?", "o/e/p", "enter", "s/r", "/", "I/T/K"},
    ("overview", 120): {keys for keys, *_ in footer_entries("overview")},
    ("engines", 120): {keys for keys, *_ in footer_entries("engines")},
    ("processes", 120): {keys for keys, *_ in footer_entries("processes")},
}
VIEW_KEY = {"overview": "o", "engines": "e", "processes": "p"}


def text(widget) -> str:
    return "\n".join(line.text for line in widget.lines_for(widget.size.width))


@pytest.mark.parametrize("view,width", sorted(MUST_SHOW), ids=[f"{v}-{w}" for v, w in sorted(MUST_SHOW)])
@run_async
async def test_footer_keeps_the_priority_keys_whole(view, width):
    app = make_app()
    async with app.run_test(size=(width, 24 if width == 80 else 40)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press(VIEW_KEY[view])
        footer = app.query_one(KeyFooter)
        line = footer.text()
        assert len(line.rstrip()) <= width
        shown = footer.fitting_entries(width)
        for keys, label, _ in shown:
            assert f"{keys} {label}" in line  # every entry shown is whole
        assert MUST_SHOW[(view, width)] <= {keys for keys, *_ in shown}


@run_async
async def test_readonly_footer_has_no_signal_keys():
    app = make_app(readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("p")
        assert "I/T/K" not in app.query_one(KeyFooter).text()


@run_async
async def test_footer_click_runs_its_action():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        footer = app.query_one(KeyFooter)
        start = footer.text().index("o/e/p")
        await pilot.click(KeyFooter, offset=(start, 0))
        assert app.view == "engines"


@run_async
async def test_title_and_tabs_fit_80_columns_without_cutting_words():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        title = text(app.query_one(TitleBar))
        assert len(title.splitlines()) == 1 and len(title) <= 80
        assert "i-0d3e0000000000001 (trn2.48xlarge)" in title and "test stream" in title
        await pilot.press("space")
        title = text(app.query_one(TitleBar))
        assert "PAUSED" in title and "…" not in title
        bar = text(app.query_one(AppsBar))
        assert len(bar.rstrip()) <= 80
        for number in range(1, 6):
            assert f"[{number}]:" in bar
        assert bar.rstrip().endswith("60313")


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (160, 50)], ids=["80x24", "120x40", "160x50"])
@run_async
async def test_engine_graphs_fill_the_view(size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("e")
        await pilot.pause()
        engines = app.query_one(EngineView)
        lines = engines.lines_for(engines.size.width)
        assert len(lines) == engines.size.height  # no blank rows under one-row graphs
        assert all(len(line.text) <= engines.size.width for line in lines)
        assert min(engines._heights.values()) >= 1
        if size[1] >= 40:
            assert min(engines._heights.values()) >= 2


@run_async
async def test_grid_scroll_resets_when_the_terminal_grows():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        app.select_core(60)
        await pilot.pause()
        grid = app.query_one(CoreGridView)
        assert grid.top_row > 0
        await pilot.resize_terminal(160, 50)
        await pilot.pause()
        assert grid.top_row == 0
        assert "ND15" in "\n".join(grid.render_line(y).text for y in range(grid.size.height))


@run_async
async def test_tree_scroll_resets_when_the_terminal_grows():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        tree = app.query_one(MemoryTreeView)
        await pilot.press("end")
        assert tree.top_row > 0
        await pilot.resize_terminal(160, 50)
        await pilot.pause()
        assert tree.top_row == 0


@run_async
async def test_the_focused_section_is_marked():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        tree, grid = app.query_one(MemoryTreeView), app.query_one(CoreGridView)
        assert tree.border_title.startswith("▶ ") and not grid.border_title.startswith("▶")
        await pilot.press("tab")
        focused = app.focused
        assert focused is not tree and focused.border_title.startswith("▶ ")
        assert not tree.border_title.startswith("▶")
