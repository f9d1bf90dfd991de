"""What a hostile environment or stream must not achieve: a module planted in the working
directory running inside the simulated runtimes, and a runtime tag read as Textual markup (a
tag "[/]" ended neuron-top with a markup error; "[link=...]" drew a live link)."""
from __future__ import annotations

import subprocess

from collector_sim import console_script, stop_instance
from textual.content import Content

from monitor.report import Report
from tests.test_tui_support import demo_reports, make_app, run_async, settle
from tui.widgets.procscreen import ConfirmSignal, ProcessScreen

PAYLOAD = "import pathlib\npathlib.Path(__file__).with_name('ran').write_text('planted code ran')\n"


def test_runtimes_do_not_import_modules_planted_in_the_working_directory(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    for name in ("numpy.py", "orjson.py"):
        (shared / name).write_text(PAYLOAD)
    (shared / "device_model").mkdir()          # an empty package shadowing ours broke start-up
    root = tmp_path / "rt"
    try:
        out = subprocess.run([*console_script("neuron-sim"), "start", "--root", str(root),
                              "--instance", "trn1.2xlarge", "--app", "t=demo-train@0"],
                             cwd=shared, capture_output=True, timeout=120)
        assert out.returncode == 0, out.stderr.decode()
    finally:
        stop_instance(root)
    assert not (shared / "ran").exists()


def tagged(tag: str) -> list[Report]:
    reports = []
    for report in demo_reports(3):
        doc = report.to_dict()
        doc["neuron_runtime_data"][0]["neuron_runtime_tag"] = tag
        reports.append(Report.from_dict(doc))
    return reports


@run_async
async def test_a_tag_that_looks_like_markup_is_shown_as_written():
    tag = "[/][link=https://example.invalid]x[/link]"
    app = make_app(tagged(tag))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, 3)
        await pilot.press("p", "home", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ProcessScreen)
        title = app.screen.query_one("#detail").border_title   # markup, as Textual draws it
        assert f"({tag})" in Content.from_markup(title).plain
        app.notify(f"sent SIGTERM to pid 1 ({tag})")
        await app.push_screen(ConfirmSignal(f"Send SIGTERM to pid 1 ({tag})?"))
        await pilot.pause()
        assert tag in str(app.screen.query_one("#question").render())


def test_a_profile_path_that_is_not_a_regular_file_is_one_line_not_a_hang(tmp_path):
    """`neuron-profile view -s /dev/zero` read until memory ran out; a FIFO hung for ever."""
    import os
    import sys

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        out = subprocess.run([sys.executable, "-m", "profiler.cli", "view", "-s", str(path)],
                             capture_output=True, timeout=60, text=True)
        assert out.returncode == 2 and out.stderr.count("\n") == 1
        assert "not a regular file" in out.stderr


def _planted_link(tmp_path, name: str):
    """A sticky world-writable folder holding `name`, another user's link to a file of ours:
    (the folder, the link, our file). Skips unless root (only root can plant as another)."""
    import os

    import pytest
    if os.getuid() != 0:
        pytest.skip("planting a link as another user needs root")
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    ours = tmp_path / "ours.txt"
    ours.write_text("precious")
    trap = shared / name
    trap.symlink_to(ours)
    os.lchown(trap, 65534, 65534)
    return shared, trap, ours


def test_a_symlink_another_user_left_in_a_shared_directory_is_not_followed(tmp_path):
    """`--output-file /tmp/trace.json` where another user had planted that name as a link to a
    file of ours replaced our file; the kernel's protected_symlinks is not on every host."""
    import pytest

    from device_model.fileio import followed, write_atomic
    shared, trap, ours = _planted_link(tmp_path, "trace.json")
    with pytest.raises(PermissionError):
        write_atomic(trap, b"trace")
    assert ours.read_text() == "precious"
    mine = shared / "mine.json"             # a link of our own there is followed
    mine.symlink_to(ours)
    assert followed(mine) == ours.resolve()


def test_appending_writers_do_not_follow_a_planted_link_in_a_shared_directory(tmp_path):
    """`neuron-monitor --record` and `neuron-monitor-cloudwatch --output` append, and appended
    through another user's link in a sticky directory; a link of our own there still works."""
    import sys

    shared, trap, ours = _planted_link(tmp_path, "out.jsonl")
    commands = ([sys.executable, "-m", "monitor.cli", "--count", "1", "--record", str(trap)],
                [sys.executable, "-m", "exporters.cloudwatch_cli", "--emf", "--output", str(trap)])
    for command in commands:
        out = subprocess.run(command, input="{}\n", capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and out.stderr.count("\n") == 1, out.stderr
        assert "not following a symlink" in out.stderr
        assert ours.read_text() == "precious"
    mine = shared / "mine.jsonl"
    mine.symlink_to(ours)
    out = subprocess.run(commands[0][:-1] + [str(mine)], capture_output=True, timeout=60)
    assert out.returncode == 0 and ours.read_text().startswith("precious{")


def test_a_screenshot_never_writes_through_a_planted_name(tmp_path):
    from tui.app import write_new_file
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "shot.svg").symlink_to(victim)
    path = write_new_file(str(tmp_path), "shot", ".svg", "<svg/>")
    assert path.endswith("shot_2.svg") and victim.read_text() == "precious"
    assert (tmp_path / "shot_2.svg").read_text() == "<svg/>"


def test_a_private_directorys_missing_parents_are_private_too(tmp_path):
    import os

    from device_model.fileio import private_dir
    old = os.umask(0)
    try:
        private_dir(tmp_path / "a" / "b" / "rt")
    finally:
        os.umask(old)
    assert {oct((tmp_path / p).stat().st_mode & 0o777) for p in ("a", "a/b", "a/b/rt")} == {"0o700"}


def test_control_characters_in_a_profiles_names_never_reach_the_terminal(tmp_path):
    """An operator named with an escape sequence (a title change, a screen clear) was printed
    as is by `neuron-profile view` and `diff`; it shows as `\\x1b...` now."""
    import sys

    from device_model import instance
    from profiler.capture.builtin import capture_workload
    from profiler.model import fileformat
    from profiler.model.profile import Profile
    p = capture_workload("matmul:m=128,k=128,n=128", instance("trn2.48xlarge"), num_exec=1)
    strings = list(p.strings)
    for i in set(p.table("ops")["name_s"].tolist()):
        strings[i] = "evil\x1b]0;pwned\x07\x1b[2J" + strings[i]
    path = tmp_path / "evil.nsprof"
    path.write_bytes(fileformat.encode(Profile(p.meta, strings, p.tables)))
    for args in (["view", "-s", str(path)], ["diff", str(path), str(path)]):
        out = subprocess.run([sys.executable, "-m", "profiler.cli", *args], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout and "\x07" not in out.stdout
        assert "evil\\x1b]0;pwned\\x07\\x1b[2J" in out.stdout
