"""Pilot tests: every key of neuron-top, sources through the app, stale and malformed handling."""
from __future__ import annotations

import os

from monitor.report import Report
from tests.test_tui_support import (AWS_EXAMPLE, FIXED_NOW, demo_reports, make_app, run_async,
                                     settle)
from tui.app import VANISHED_KEEP_S, NeuronTopApp
from tui.cli import build_parser, make_source
from tui.keys import GLOBAL_KEYS, help_lines
from tui.procs import SORT_KEYS
from tui.widgets.engines import EngineView
from tui.widgets.grid import CoreGridView
from tui.widgets.help import HelpScreen
from tui.widgets.panels import AppsBar, Banner, TitleBar
from tui.widgets.processes import ProcessTable
from tui.widgets.procscreen import ProcessScreen
from tui.widgets.tree import MemoryTreeView


def text(widget) -> str:
    return "\n".join(line.text for line in widget.lines_for(widget.size.width))


@run_async
async def test_shows_title_grid_and_tabs():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        assert "neuron-top" in text(app.query_one(TitleBar))
        assert "running on i-0d3e0000000000001 (trn2.48xlarge)" in text(app.query_one(TitleBar))
        grid = app.query_one(CoreGridView)
        assert grid.border_title.startswith("NeuronCore v3d Utilization (Avg: ")
        assert "ND15" in text(grid) and "NC3" in text(grid)
        assert ">[1]:all<" in text(app.query_one(AppsBar))


@run_async
async def test_f_toggles_tflops():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("f")
        grid = app.query_one(CoreGridView)
        assert "TFLOPs (Total: " in grid.border_title and "TF]" in text(grid)
        await pilot.press("f")
        assert "%]" in text(grid)


@run_async
async def test_tab_keys_a_d_and_digits():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("d")
        assert app.tab == "llama3-70b-train"
        assert ">[2]:llama3-70b-train<" in text(app.query_one(AppsBar))
        await pilot.press("a", "a")
        assert app.tab == "60313"
        await pilot.press("3")
        assert app.tab == "bert-large-infer"
        grid = app.query_one(CoreGridView).grid
        assert set(grid.in_use.nonzero()[0]) == set(range(32, 48))
        await pilot.press("9")  # no ninth tab: nothing changes
        assert app.tab == "bert-large-infer"
        await pilot.press("1")
        assert app.tab == "all"


@run_async
async def test_an_app_tab_scrolls_its_own_devices_into_view():
    """At 80x24 the grid shows a few device rows; choosing an app's tab brought its first
    core's row in at the bottom, under other apps' idle rows."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        grid = app.query_one(CoreGridView)
        await pilot.press("3")
        assert app.tab == "bert-large-infer" and app.core == 32
        assert grid.top_row == 32 // grid.grid.cores_per_device         # ND8 on top
        await pilot.press("1")                          # all: scrolled up, the selection kept
        row = 1 + app.core // grid.grid.cores_per_device
        assert app.tab == "all" and grid.top_row < 32 // grid.grid.cores_per_device
        assert grid.top_row < row < grid.top_row + grid.size.height


@run_async
async def test_tree_enter_arrows_and_x():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        tree = app.query_one(MemoryTreeView)
        assert tree.has_focus
        assert text(tree).splitlines()[1].strip().startswith("[+] ND 0")
        await pilot.press("enter")
        assert "[-] ND 0" in text(tree) and "[+] NC 0" in text(tree)
        await pilot.press("down", "enter")
        assert "[-] NC 0" in text(tree) and "llama3_70b_tp32" in text(tree)
        await pilot.press("x")
        assert "[+]" not in text(tree)
        await pilot.press("x")
        assert "[-]" not in text(tree)


@run_async
async def test_space_pauses_and_resumes():
    reports = demo_reports(3)
    app = make_app(reports[:1])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("space")
        assert "PAUSED" in text(app.query_one(TitleBar))
        shown = app.report
        app.post_message(__import__("tui.messages", fromlist=["x"]).ReportArrived(
            reports[2], app.malformed, FIXED_NOW))
        await pilot.pause()
        assert app.report is shown and app.pending is reports[2]
        await pilot.press("space")
        assert app.report is reports[2] and "PAUSED" not in text(app.query_one(TitleBar))


@run_async
async def test_while_paused_the_graphs_stay_with_the_report_shown():
    """A report that arrives while paused goes into the history, but the graphs on screen (a
    process's detail, its history's last point) stay with the paused report: the detail's
    heading and its history's last value were from two reports."""
    from tui.messages import ReportArrived
    from tui.widgets.procscreen import ProcessDetailView
    reports = demo_reports(8)
    app = make_app(reports[:4])
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, 4)
        await pilot.press("p", "end", "space")
        shown = app.report
        for report in reports[4:]:
            app.post_message(ReportArrived(report, app.malformed, FIXED_NOW))
        await pilot.pause()
        await pilot.press("enter")                      # opened after reports came in, paused
        await pilot.pause()
        assert isinstance(app.screen, ProcessScreen) and app.paused
        assert app.report is shown and app.history.core_util.count == 8
        detail = app.screen.query_one(ProcessDetailView).detail
        cores = [u for _, u, _ in detail.cores]
        assert float(detail.history[0][1][-1]) == sum(cores) / len(cores)
        assert detail.history[0][1].size == 4
        await pilot.press("escape", "space")            # resumed: the newest report and history
        assert app.report is reports[-1] and app.shown_history is app.history


@run_async
async def test_views_o_e_p_and_core_keys():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("e")
        engines = app.query_one(EngineView)
        assert engines.display and "NC0 on ND0" in text(engines)
        for label in ("Tensor", "Vector", "Scalar", "GpSimd", "DMA", "HBM read", "HBM write",
                      "Power", "Temp", "Throttle", "modelled"):
            assert label in text(engines)
        await pilot.press("right_square_bracket")
        assert app.core == 1 and "NC1 on ND0" in text(engines)
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert app.core == 0
        await pilot.press("p")
        table = app.query_one(ProcessTable)
        assert table.has_focus and "llama3-70b-train" in text(table)
        await pilot.press("o")
        assert app.query_one(MemoryTreeView).has_focus


@run_async
async def test_grid_arrows_and_click_select_core():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        app.query_one(CoreGridView).focus()
        await pilot.press("down", "right")
        assert app.core == 5
        grid = app.query_one(CoreGridView)
        column = grid.column_width(grid.size.width)
        # border + padding, then the ND label and two columns; border, the NC header, three devices
        await pilot.click(CoreGridView, offset=(2 + 5 + column * 2 + 3, 1 + 1 + 3))
        assert app.core == 3 * 4 + 2


@run_async
async def test_process_sort_reverse_filter_and_pick():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("p", "s")
        assert app.sort_key == SORT_KEYS[1]
        await pilot.press("r")
        table = app.query_one(ProcessTable)
        assert table.reverse and [r.tag for r in table.rows][0] == "mistral-7b-serve"
        await pilot.press("slash")
        await pilot.press(*"bert", "enter")
        assert [r.tag for r in table.rows] == ["bert-large-infer"]
        await pilot.press("escape")
        assert len(table.rows) == 4
        await pilot.press("down")
        target = table.rows[table.cursor]
        await pilot.press("enter")
        assert isinstance(app.screen, ProcessScreen) and app.screen.pid == target.pid
        await pilot.press("o")
        assert app.tab == target.tag and app.view == "overview"


@run_async
async def test_the_sort_is_named_by_its_column_and_a_hidden_one_says_so():
    """The footer named the sort by its field (`host_bytes`), and at 80 columns rows reordered
    by a column not on screen with nothing to say so."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("p")
        table = app.query_one(ProcessTable)
        shown = {key for (key, *_), _ in table._columns(table.size.width)}
        assert "host_bytes" not in shown and "utilization" in shown
        footer = text(table)
        assert "sorted by PID, lowest first" in footer
        while app.sort_key != "host_bytes":
            await pilot.press("s")
        assert "sorted by HOST MEM (not shown at this width)" in " ".join(text(table).split())
        while app.sort_key != "utilization":
            await pilot.press("s")
        footer = " ".join(text(table).split())
        assert "sorted by NC UTIL," in footer and "not shown" not in footer


@run_async
async def test_small_prompts_and_hints_say_what_holds():
    """At 80 columns the filter's hint was cut ("…enter applies, es"); with the tree on, the
    footer still offered "t: tree of parents"; a source that ended with no report left the
    grid "waiting for the first report"."""
    from collections import Counter

    from textual.widgets import Input

    from tui.messages import SourceEnded
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("p", "slash")
        box = app.query_one("#filter", Input)
        assert len(box.placeholder) <= box.content_region.width
        await pilot.press("escape", "t")
        footer = " ".join(text(app.query_one(ProcessTable)).split())
        assert "t: flat list" in footer and "tree of parents" not in footer
    empty = make_app([])
    async with empty.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        empty.post_message(SourceEnded(Counter(), FIXED_NOW))
        await pilot.pause()
        grid = empty.query_one(CoreGridView)
        assert "no report: the source ended" in text(grid) + grid.border_title
        assert "waiting" not in text(grid) + grid.border_title


@run_async
async def test_help_lists_every_key_and_closes():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
    documented = {k for k, _ in help_lines()}
    for key, *_ in GLOBAL_KEYS:
        assert key.isdigit() or {"question_mark": "?", "space": "space", "slash": "/",
                                 "left_square_bracket": "[", "right_square_bracket": "]"
                                 }.get(key, key) in documented


@run_async
async def test_c_changes_theme_and_q_quits():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 1)
        before = app.theme
        await pilot.press("c")
        assert app.theme != before
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
    assert app.source.closed


@run_async
async def test_stale_banner_uses_the_injected_clock(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    __import__("time").tzset()
    now = [FIXED_NOW]
    app = make_app(demo_reports(1), clock=lambda: now[0])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 1)
        banner = app.query_one(Banner)
        assert not banner.stale
        now[0] += 30
        app._check_stale()
        await pilot.pause()
        assert banner.stale == ("stale since 05:20:00: no report for 30s from test stream")
        assert banner.display


@run_async
async def test_faults_banner_for_execution_errors_and_vanished_runtime():
    reports = demo_reports(14)
    app = make_app(reports)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 14)
        assert "FAULT: 60313: 3 execution errors (numerical)" in text(app.query_one(Banner))
    gone = Report.from_dict({**reports[0].to_dict(), "neuron_runtime_data":
                             [r.dump() for r in reports[0].runtimes[1:]]})
    app = make_app([reports[0], gone, gone, gone])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 4)
        # still said three reports on (it was gone with the next report, unread)
        assert "llama3-70b-train (pid 41872) stopped reporting" in text(app.query_one(Banner))
        key = (41872, "llama3-70b-train")
        since = app.vanished[key]
        app._track_vanished(gone, since + VANISHED_KEEP_S - 1)
        assert key in app.vanished                           # kept for VANISHED_KEEP_S
        app._track_vanished(gone, since + VANISHED_KEEP_S)
        assert key not in app.vanished                       # and not for ever
        app.vanished = {key: since}
        app._track_vanished(reports[0], since + 1)
        assert key not in app.vanished                       # it reports again: no longer gone


@run_async
async def test_aws_example_through_input_with_malformed_lines(tmp_path):
    stream = tmp_path / "monitor.jsonl"
    example = AWS_EXAMPLE.read_bytes().strip()
    stream.write_bytes(b"not json\n" + example + b"\n" + example[:50] + b"\n[1, 2]\n" + example + b"\n")
    source = make_source(build_parser().parse_args(["--input", str(stream)]))
    app = NeuronTopApp(source, clock=lambda: FIXED_NOW)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 2)
        for _ in range(100):
            if app.ended is not None:
                break
            await pilot.pause(0.01)
        title = text(app.query_one(TitleBar))
        assert "i-0011223344556677a (trn2n.48xlarge)" in title
        assert "malformed lines skipped: 3" in title
        assert app.malformed == {"not_json": 1, "truncated": 1, "not_object": 1}
        grid = app.query_one(CoreGridView)
        assert "[ 42.01%]" in text(grid)
        assert "source ended at" in app.query_one(Banner).stale
        await pilot.press("x")
        assert "neff" in text(app.query_one(MemoryTreeView))


@run_async
async def test_reads_a_real_pipe_and_survives_a_stall():
    read_fd, write_fd = os.pipe()
    source = make_source(build_parser().parse_args(["--input", f"/dev/fd/{read_fd}"]))
    app = NeuronTopApp(source, clock=lambda: FIXED_NOW)
    async with app.run_test(size=(160, 50)) as pilot:
        os.write(write_fd, AWS_EXAMPLE.read_bytes().strip() + b"\n")
        await settle(pilot, app, 1)
        await pilot.pause(0.3)  # the writer stays silent: still running, nothing ended
        assert app.ended is None and app.is_running
    os.close(write_fd)
    os.close(read_fd)


@run_async
async def test_no_color_is_monochrome_and_still_readable(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 6)
        assert app.no_color
        assert any(type(f).__name__ in ("Monochrome", "NoColor") for f in app._filters)
        grid = text(app.query_one(CoreGridView))
        assert "ND0" in grid and "%]" in grid
        assert ">[1]:all<" in text(app.query_one(AppsBar))
