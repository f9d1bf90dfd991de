"""The process table as nvitop users expect it: details, parents tree, signals, filters, history."""
from __future__ import annotations

import os
import subprocess
import sys

from monitor.report import Report
from tests.test_tui_support import demo_reports, make_app, run_async, settle
from tui.procs import matches, process_rows
from tui.ptree import Ancestor, lineage, tree_lines
from tui.widgets.grid import CoreGridView
from tui.widgets.processes import ProcessTable
from tui.widgets.procscreen import ConfirmSignal, ProcessDetailView, ProcessScreen

NO_SUCH_PID = 4_194_000  # above any pid_max the tests run under


def text(widget) -> str:
    return "\n".join(line.text for line in widget.lines_for(widget.size.width))


def with_pids(report: Report, pids: list[int]) -> Report:
    """The same report with its runtimes renumbered to ``pids`` (real processes here)."""
    doc = report.to_dict()
    for runtime, pid in zip(doc["neuron_runtime_data"], pids):
        runtime["pid"] = pid
    return Report.from_dict(doc)


async def open_processes(pilot, app, frames: int = 6) -> ProcessTable:
    await settle(pilot, app, frames)
    await pilot.press("p")
    return app.query_one(ProcessTable)


@run_async
async def test_enter_shows_the_runtime_in_detail_and_escape_returns():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        table = await open_processes(pilot, app)
        pid = table.selected_pid
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ProcessScreen)
        detail = text(app.screen.query_one(ProcessDetailView))
        for part in (f"pid {pid} · llama3-70b-train · 32 cores (0-31)",
                     "Utilization history, mean over its 32 cores", "NeuronCore", "Tensor",
                     "Executions in the last", "latency p0", "errors:", "Memory", "Device",
                     "model llama3_70b_tp32", "Cores", "NC31"):
            assert part in detail, part
        await pilot.press("escape")
        assert not isinstance(app.screen, ProcessScreen) and app.view == "processes"


@run_async
async def test_detail_screen_follows_new_reports_and_its_history_grows():
    reports = demo_reports(14)
    app = make_app(reports)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await open_processes(pilot, app, 3)
        await pilot.press("end", "enter")  # the last row: pid 60313, whose errors come later
        view = app.screen.query_one(ProcessDetailView)
        assert view.pid == table.rows[-1].pid
        await settle(pilot, app, 14)
        await pilot.pause()
        assert view.detail.history[0][1].size == 14
        assert "errors: numerical 3" in text(view)


@run_async
async def test_detail_screen_scrolls_at_80x24():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_processes(pilot, app)
        await pilot.press("enter")
        view = app.screen.query_one(ProcessDetailView)
        assert len(view.lines_for(view.size.width)) > view.size.height
        await pilot.press("end")
        assert view.top_row > 0
        assert "NC31" in "\n".join(view.render_line(y).text for y in range(view.size.height))


def test_tree_lines_group_runtimes_under_shared_parents():
    rows = process_rows(demo_reports(1)[0])
    init, shell = Ancestor(1, "init", "root"), Ancestor(100, "bash", "alice")
    lineages = {rows[0].pid: (init, shell), rows[1].pid: (init, shell), rows[2].pid: (init,),
                rows[3].pid: None}
    lines = tree_lines(rows, lineages)
    drawn = [(line.prefix, line.ancestor.name if line.ancestor else line.row.tag) for line in lines]
    assert drawn == [("└─ ", "init"), ("   ├─ ", "bash"), ("   │  ├─ ", rows[0].tag),
                     ("   │  └─ ", rows[1].tag), ("   └─ ", rows[2].tag), ("? ", rows[3].tag)]


@run_async
async def test_t_shows_the_runtimes_under_their_real_parent_processes():
    report = with_pids(demo_reports(1)[0], [os.getpid(), NO_SUCH_PID])
    app = make_app([report], lineage=lineage)
    async with app.run_test(size=(160, 50)) as pilot:
        table = await open_processes(pilot, app, 1)
        await pilot.press("t")
        for _ in range(100):
            if app.lineages:
                break
            await pilot.pause(0.02)
        await pilot.pause()
        shown = text(table)
        assert f"{os.getppid():>7} " in shown  # the test runner's parent, from psutil
        assert lineage(NO_SUCH_PID) is None and "? " in shown
        assert [r.pid for r in table.rows][-1] == NO_SUCH_PID or NO_SUCH_PID in [
            r.pid for r in table.rows]
        await pilot.press("t")
        assert table.parents_tree is None


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@run_async
async def test_signal_keys_ask_first_then_signal_the_real_process():
    child = sleeper()
    try:
        report = with_pids(demo_reports(1)[0], [child.pid])
        app = make_app([report], lineage=lineage)
        async with app.run_test(size=(160, 50)) as pilot:
            table = await open_processes(pilot, app, 1)
            assert table.selected_pid == child.pid
            await pilot.press("K")
            assert isinstance(app.screen, ConfirmSignal)
            await pilot.press("T")  # a second signal key while asked: still the one question
            assert len(app.screen_stack) == 2
            await pilot.press("n")
            assert child.poll() is None  # declined: still running
            await pilot.press("T")
            assert "SIGTERM to pid" in str(app.screen.query_one("#question").render())
            await pilot.press("y")
            assert child.wait(timeout=10) == -15
    finally:
        child.kill()
        child.wait()


@run_async
async def test_readonly_and_foreign_sources_send_no_signal():
    child = sleeper()
    try:
        report = with_pids(demo_reports(1)[0], [child.pid])
        for kwargs in ({"readonly": True, "lineage": lineage}, {"lineage": None}):
            app = make_app([report], **kwargs)
            async with app.run_test(size=(160, 50)) as pilot:
                await open_processes(pilot, app, 1)
                await pilot.press("I", "T", "K")
                assert not isinstance(app.screen, ConfirmSignal)
                assert app._notifications  # says why
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


@run_async
async def test_signal_from_the_detail_screen():
    child = sleeper()
    try:
        report = with_pids(demo_reports(1)[0], [child.pid])
        app = make_app([report], lineage=lineage)
        async with app.run_test(size=(160, 50)) as pilot:
            await open_processes(pilot, app, 1)
            await pilot.press("enter", "I")
            assert isinstance(app.screen, ConfirmSignal)
            await pilot.press("y")
            assert child.wait(timeout=10) != 0
    finally:
        child.kill()
        child.wait()


def test_filter_terms_pid_and_tag():
    rows = process_rows(demo_reports(1)[0])
    pick = lambda query: [r.tag for r in rows if matches(r, query)]  # noqa: E731
    assert pick("pid:52011") == ["bert-large-infer"]
    assert pick("pid:5201") == []  # pid: is exact
    assert pick("tag:llama,tag:bert") == ["llama3-70b-train", "bert-large-infer"]
    assert pick("serve 60313") == ["mistral-7b-serve", "60313"]


@run_async
async def test_filter_box_takes_pid_and_tag_terms():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        table = await open_processes(pilot, app)
        await pilot.press("slash", *"pid:52240", "enter")
        assert [r.pid for r in table.rows] == [52240]
        await pilot.press("slash", "ctrl+a", *"tag:bert", "enter")  # ctrl+a: start of the line
        assert "tag:bert" in app.filter_text


@run_async
async def test_overview_draws_utilization_history_per_app():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        grid = app.query_one(CoreGridView)
        assert len(grid.groups) == 4 and all(series.size == 6 for _, _, series in grid.groups)
        history = grid.history_width(grid.size.width)
        assert history > 0
        shown = "\n".join(line.text[-history:] for line in grid.lines_for(grid.size.width))
        assert "llama3-70b-train · NC 0-31" in shown and "60313 · NC 60-61" in shown
        assert any(0x2801 <= ord(c) <= 0x28FF for c in shown)  # braille dots drawn
        await pilot.press("3")
        assert [tag for tag, _, _ in grid.groups] == ["bert-large-infer"]
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        grid = app.query_one(CoreGridView)
        assert grid.history_width(grid.size.width) == 0 and "│" not in text(grid)
