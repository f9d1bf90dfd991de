"""Pilot tests of the fleet screen over a recorded Prometheus: rows, totals, down instances,
sort, filter, Enter/Escape into the host screens, an outage banner, a failing panel, AWS's
exporter only."""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import re

import pytest

from tests.test_fleet_support import (RECORDING, ReplayServer, aws_only, make_fleet_app,
                                      replay, settle_fleet, settle_host)  # noqa: F401
from tests.test_tui_commands import _palette_offers, run_command
from tests.test_tui_support import run_async
from monitor.fleet_queries import QUERIES, RECORDED_PROBE
from tui.fleet import FleetArrived, FleetScreen
from tui.fleet_view import SORT_KEYS
from tui.keys import FLEET_FOOTER, FLEET_KEYS, display_key
from tui.widgets.engines import EngineView
from tui.widgets.fleet import FleetTable
from tui.widgets.footer import KeyFooter
from tui.widgets.help import HelpScreen
from tui.widgets.panels import TitleBar, VcpuPanel
from tui.widgets.processes import ProcessTable
from tui.widgets.procscreen import ConfirmSignal, ProcessDetailView

UP = ("i-e2583a0625220499b", "i-f3b2721b8a60e300b")
DOWN = "i-8fc4237f41827d5a8"


def text(widget) -> str:
    return "\n".join(line.text for line in widget.lines_for(widget.size.width))


def ids(app) -> list[str]:
    return [r.instance_id for r in app.fleet_screen.table.rows]


@run_async
async def _rows(url):
    app = make_fleet_app(url)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle_fleet(pilot, app)
        return text(app.fleet_screen.header), text(app.fleet_screen.table), ids(app)


def test_one_row_per_instance_with_totals_and_the_down_one_marked(replay):
    header, table, order = _rows(replay.url)
    assert order == sorted([*UP, DOWN])
    assert "2 up, 1 down" in header and "NeuronCores busy" in header and "MFU" in header
    assert "FLOP/s model" in header and "(modelled)" in header
    down_line = next(line for line in table.splitlines() if DOWN in line)
    assert "down " in down_line and ":" in down_line.split("down ")[1][:8]
    for iid in UP:
        line = next(line for line in table.splitlines() if iid in line)
        assert " up " in line and "%" in line and "W " in line and "llama" in line


def test_few_queries_per_refresh(replay):
    _rows(replay.url)
    fleet_queries = [k for k in replay.requests if "instance_id=\"" not in k
                     and k != f"/api/v1/query {RECORDED_PROBE}"]
    assert f"/api/v1/query {RECORDED_PROBE}" in replay.requests   # none here: raw queries
    # one instant query per panel and one range query, whatever the number of instances
    assert len([k for k in fleet_queries if k.startswith("/api/v1/query ")]) == len(QUERIES)
    assert len([k for k in fleet_queries if k.startswith("/api/v1/query_range")]) == 1


@run_async
async def test_sort_reverse_and_filter(replay):
    app = make_fleet_app(replay.url)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle_fleet(pilot, app)
        screen = app.fleet_screen
        await pilot.press("s")            # next column: state (down first)
        assert screen.sort_key == SORT_KEYS[1] and ids(app)[0] == DOWN
        assert "STATE▲" in text(screen.table)
        await pilot.press("r")
        assert ids(app)[-1] == DOWN and "STATE▼" in text(screen.table)
        for _ in range(4):                # ... util_mean: highest last unless reversed
            await pilot.press("s")
        assert screen.sort_key == "util_mean"
        utils = [r.util_mean for r in screen.table.rows if r.util_mean is not None]
        assert utils == sorted(utils, reverse=True) and ids(app)[-1] == DOWN  # missing last
        await pilot.press("slash")
        for key in "trn1":
            await pilot.press(key)
        await pilot.press("enter")
        assert screen.filter_text == "trn1" and ids(app) == ["i-e2583a0625220499b"]
        await pilot.press("escape")
        assert screen.filter_text == "" and len(ids(app)) == 3
        await pilot.press("slash", "d", "o", "w", "n", "enter")
        assert ids(app) == [DOWN]
        await pilot.press("slash", "z", "z", "enter")
        assert "no instance matches 'zz'" in text(screen.table)


@pytest.mark.parametrize("width", [80, 160])
@run_async
async def test_fleet_footer_shows_the_fleet_keys_and_a_click_runs_each(replay, width):
    app = make_fleet_app(replay.url)
    async with app.run_test(size=(width, 24)) as pilot:
        await settle_fleet(pilot, app)
        screen = app.fleet_screen
        footer = screen.query_one(KeyFooter)
        line = footer.text()
        assert len(line.rstrip()) <= width
        for keys, label, _ in FLEET_FOOTER:   # all of them fit at 80 columns, each whole
            assert f"{keys} {label}" in line
        assert "o/e/p" not in line            # the host views' keys are not the fleet's

        async def click(keys: str) -> None:
            await pilot.click(KeyFooter, offset=(line.index(keys), 0))
            await pilot.pause()

        await click("s/r")
        assert screen.sort_key == SORT_KEYS[1]
        await click("/ filter")
        assert screen.query_one("#fleet-filter").has_class("-visible")
        await pilot.press("escape")
        await click("enter")                  # the first row (sorted by id) is the down one
        assert isinstance(app.screen, FleetScreen) and "is down since" in text(screen.header)
        await click("? help")
        assert not isinstance(app.screen, FleetScreen)


@run_async
async def test_help_on_the_fleet_lists_the_fleet_keys_and_on_an_instance_the_way_back(replay):
    app = make_fleet_app(replay.url)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle_fleet(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen) and app.screen.title == "fleet keys"
        documented = " / ".join(key for key, _ in app.screen.lines)
        for key, _, _ in FLEET_KEYS:
            assert display_key(key) in documented
        for binding in [*FleetScreen.BINDINGS, *FleetTable.BINDINGS]:   # every key is in it
            key = {"up": "arrows", "down": "arrows", "pageup": "pgup", "pagedown": "pgdn"}.get(
                binding.key, display_key(binding.key))
            assert key in documented
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("down", "enter")        # the first up instance
        await settle_host(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen) and app.screen.title == "keys"
        assert ("esc", "back to the fleet (clears a process filter first)") in app.screen.lines
        await pilot.press("escape")
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)


@run_async
async def test_palette_on_the_fleet_offers_the_fleets_commands(replay):
    app = make_fleet_app(replay.url)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle_fleet(pilot, app)
        screen = app.fleet_screen
        await run_command(pilot, "Sort instances by UTIL")
        assert screen.sort_key == "util_mean" and isinstance(app.screen, FleetScreen)
        await run_command(pilot, "Reverse the sort order")
        assert screen.reverse
        await run_command(pilot, "Filter instances")
        assert screen.query_one("#fleet-filter").has_class("-visible")
        await pilot.press("escape")
        await pilot.press("ctrl+p")             # the host views' commands are not the fleet's
        await pilot.press(*"View: engines")
        for _ in range(25):
            await pilot.pause(0.02)
        assert not _palette_offers(app, "View: engines")
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("home")               # reversed by utilization: the busiest first
        await run_command(pilot, "Open the selected instance")
        await settle_host(pilot, app)
        assert not isinstance(app.screen, FleetScreen) and app.opened is not None


@run_async
async def test_c_and_S_on_the_fleet_change_the_theme_and_save_a_screenshot(replay, tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_fleet_app(replay.url)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle_fleet(pilot, app)
        before = app.theme
        await pilot.press("c", "S")
        await pilot.pause()
        assert app.theme != before and isinstance(app.screen, FleetScreen)
        saved = list(tmp_path.glob("neuron-top_*.svg"))
        assert len(saved) == 1 and "INSTANCE" in saved[0].read_text()


@run_async
async def test_cursor_keys_move_over_the_instances(replay):
    app = make_fleet_app(replay.url)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle_fleet(pilot, app)
        table = app.fleet_screen.table
        last = len(table.rows) - 1
        for key, row in (("end", last), ("home", 0), ("down", 1), ("up", 0), ("pagedown", last),
                         ("pageup", 0), ("up", 0)):
            await pilot.press(key)
            assert table.cursor == row, key
            assert table.selected.instance_id == ids(app)[row]


@run_async
async def test_enter_opens_the_host_screens_and_escape_returns(replay):
    app = make_fleet_app(replay.url)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle_fleet(pilot, app)
        table = app.fleet_screen.table
        target = table.rows.index(next(r for r in table.rows if r.instance_id == UP[1]))
        for _ in range(target):
            await pilot.press("down")
        await pilot.press("enter")
        await settle_host(pilot, app)
        assert not isinstance(app.screen, FleetScreen)
        assert app.report.instance.id == UP[1] and app.report.instance.type == "trn2.48xlarge"
        assert f"running on {UP[1]} (trn2.48xlarge)" in text(app.query_one(TitleBar))
        assert {r.tag for r in app.report.runtimes} == {"llama-serve", "llama-train"}
        await pilot.press("e")            # the engines view has the extension data
        assert "Tensor" in text(app.query_one(EngineView))
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        assert app.opened is None and table.selected.instance_id == UP[1]


@run_async
async def test_enter_on_a_down_instance_says_so(replay):
    app = make_fleet_app(replay.url)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle_fleet(pilot, app)
        await pilot.press("enter")        # the first row (sorted by id) is the down one
        assert isinstance(app.screen, FleetScreen)
        screen = app.fleet_screen
        assert f"{DOWN} is down since" in text(screen.header)
        # the line is about that instance: it goes when the cursor leaves it ...
        await pilot.press("down")
        await pilot.pause()
        assert "is down since" not in text(screen.header)
        await pilot.press("up")
        await pilot.pause()
        assert "is down since" not in text(screen.header)   # back on it: until enter again
        await pilot.press("enter")
        assert f"{DOWN} is down since" in text(screen.header)
        # ... or when the instance is up again
        snapshot = screen.snapshot
        screen.snapshot = dataclasses.replace(snapshot, rows=tuple(
            dataclasses.replace(r, up=True) if r.instance_id == DOWN else r for r in snapshot.rows))
        screen.redraw()
        await pilot.pause()
        assert "is down since" not in text(screen.header)


@run_async
async def test_unreachable_prometheus_banner_keeps_the_last_data():
    server = ReplayServer(RECORDING)
    app = make_fleet_app(server.url)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle_fleet(pilot, app)
        server.close()
        app.fetch_once()
        await pilot.pause(0.05)
        header = text(app.fleet_screen.header)
        assert "cannot reach Prometheus at http://127.0.0.1:" in header
        assert "showing data from" in header and len(ids(app)) == 3
    server = ReplayServer(RECORDING)
    app = make_fleet_app(server.url)
    async with app.run_test(size=(80, 24)) as pilot:       # wrapped, not cut mid-timestamp
        await settle_fleet(pilot, app)
        server.close()
        app.fetch_once()
        await pilot.pause(0.05)
        header = " ".join(text(app.fleet_screen.header).split())
        assert re.search(r"\(since \d\d:\d\d:\d\d\); showing data from \d\d:\d\d:\d\d", header)


@run_async
async def test_a_failing_panel_is_one_line_and_only_that_column_is_empty():
    broken = {k: v for k, v in RECORDING.items() if "neuron_device_power_watts" not in k}
    server = ReplayServer(broken)
    app = make_fleet_app(server.url)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle_fleet(pilot, app)
            header = text(app.fleet_screen.header)
            assert "power: query failed (bad_data)" in header
            assert all(r.power_watts is None for r in app.fleet_screen.table.rows)
            assert any(r.util_mean is not None for r in app.fleet_screen.table.rows)
    finally:
        server.close()


@run_async
async def test_a_down_instance_keeps_the_errors_it_raised_in_the_window():
    """Prometheus still holds the window's increase for a host that died: its row and the
    header's total keep its 7 errors (they read '–' and 0 before)."""
    key = "/api/v1/query sum by (instance_id) (increase(execution_errors_total[300s]))"
    recording = copy.deepcopy(RECORDING)
    for sample in recording[key]["body"]["data"]["result"]:
        if sample["metric"]["instance_id"] == DOWN:
            sample["value"][1] = "7"
    server = ReplayServer(recording)
    app = make_fleet_app(server.url)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle_fleet(pilot, app)
            row = next(r for r in app.fleet_screen.table.rows if r.instance_id == DOWN)
            assert not row.up and row.errors == 7
            up_errors = sum(r.errors or 0 for r in app.fleet_screen.table.rows if r.up)
            assert f"errors {up_errors + 7:.0f} " in text(app.fleet_screen.header)
    finally:
        server.close()


@run_async
async def test_aws_exporter_only_says_so_instead_of_zeros():
    server = ReplayServer(aws_only(RECORDING))
    app = make_fleet_app(server.url)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle_fleet(pilot, app)
            header = text(app.fleet_screen.header)
            assert "AWS metrics only: no engines, HBM, power, FLOP/s or MFU" in header
            assert "MFU" not in header.splitlines()[0]
            line = next(l for l in text(app.fleet_screen.table).splitlines() if UP[0] in l)
            assert "%" in line and " 0W" not in line
            table = app.fleet_screen.table
            for _ in range(table.rows.index(next(r for r in table.rows if r.instance_id == UP[0]))):
                await pilot.press("down")
            await pilot.press("enter")
            await settle_host(pilot, app)
            assert all(r.engine_counters is None for r in app.report.runtimes)
            assert app.report.system.device_counters is None
            await pilot.press("e")
            engines = text(app.query_one(EngineView))
            assert "no neuroncore_engine_counters" in engines
            assert "no neuron_device_counters" in engines
    finally:
        server.close()


@run_async
async def test_aws_exporter_only_drill_down_says_which_pids_and_models_are_unknown():
    """AWS labels runtimes by tag only: a tag that is not a pid leaves the pid unknown (N/A, not
    0), loaded models are not in the stream, and the host's vCPU count still labels the runtime
    vCPU figures (system_vcpu_count)."""
    server = ReplayServer(aws_only(RECORDING))
    app = make_fleet_app(server.url)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle_fleet(pilot, app)
            table = app.fleet_screen.table
            for _ in range(table.rows.index(next(r for r in table.rows if r.instance_id == UP[1]))):
                await pilot.press("down")
            await pilot.press("enter")
            await settle_host(pilot, app)
            assert "of 2 vCPUs" in text(app.query_one(VcpuPanel))
            assert {r.tag: r.known_pid for r in app.report.runtimes} == {
                "llama-serve": None, "llama-train": None}
            await pilot.press("p")
            await pilot.pause()
            procs = text(app.query_one(ProcessTable)).splitlines()
            for tag in ("llama-serve", "llama-train"):
                line = next(l for l in procs if tag in l)
                assert line.split()[0] == "N/A", line
            await pilot.press("down", "enter")   # the second runtime, told apart by its tag
            await pilot.pause()
            view = app.screen.query_one(ProcessDetailView)
            for _ in range(100):
                if view.detail is not None:
                    break
                await pilot.pause(0.01)
            detail = text(view)
            assert "pid unknown · llama-train" in detail
            assert "loaded models: not in this stream" in detail and "pid 0" not in detail
            await pilot.press("T")                # runtimes elsewhere: nothing to signal
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmSignal)
    finally:
        server.close()


@run_async
async def test_no_neuron_metrics_is_one_line():
    empty = dict(RECORDING)   # a Prometheus that scrapes no neuron exporter: empty answers
    for key, entry in RECORDING.items():
        if key.startswith("/api/v1/query"):
            data = entry["body"]["data"]
            empty[key] = {"status": 200, "body": {"status": "success", "data": {
                "resultType": data["resultType"], "result": []}}}
    server = ReplayServer(empty)
    app = make_fleet_app(server.url)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle_fleet(pilot, app)
            assert f"no neuron metrics at {server.url}: no instance_info series" in text(
                app.fleet_screen.table)
    finally:
        server.close()


@run_async
async def test_escape_on_the_host_screens_clears_a_process_filter_first(replay):
    app = make_fleet_app(replay.url)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle_fleet(pilot, app)
        await pilot.press("down", "enter")
        await settle_host(pilot, app)
        await pilot.press("slash", "s", "e", "r", "v", "enter")
        assert app.filter_text == "serv" and app.view == "processes"
        await pilot.press("escape")
        assert app.filter_text == "" and not isinstance(app.screen, FleetScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("down", "enter")     # another instance: its own Report, fresh history
        await settle_host(pilot, app)
        assert app.report.instance.id == app.opened.instance_id


@run_async
async def _refresh_without_new_samples(url):
    app = make_fleet_app(url)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle_fleet(pilot, app)
        screen, table = app.fleet_screen, app.fleet_screen.table
        first, shown = screen.snapshot, list(table.rows)
        await asyncio.to_thread(app.fetch_once)   # the recording answers the same again
        for _ in range(200):
            if screen.snapshot is not first:
                break
            await pilot.pause(0.01)
        await pilot.pause()
        kept = screen.snapshot is not first and all(a is b for a, b in zip(table.rows, shown))
        # a snapshot whose readings moved is drawn
        busy = dataclasses.replace(screen.snapshot.rows[0], util_mean=0.987)
        moved = dataclasses.replace(screen.snapshot, rows=(busy, *screen.snapshot.rows[1:]))
        app.post_message(FleetArrived(moved))
        await pilot.pause()
        return kept, len(table.rows) == len(shown), text(table)


def test_a_refresh_without_new_samples_keeps_the_table_and_a_moved_reading_redraws(replay):
    kept, same_count, after = _refresh_without_new_samples(replay.url)
    assert kept and same_count
    assert "98.7%" in after


def test_same_rows_sees_every_reading_and_the_history():
    import numpy as np
    from monitor.fleet import InstanceRow, same_rows
    row = InstanceRow("i-1", "trn2.48xlarge", "az", "h:1", "neuron", 16, 64, 64, 0.5, 0.7,
                      {"tensor": 0.4}, 1e9, 2e9, 3e9, 100.0, True, 1e12, 0.3, 0.0, 0.0,
                      ("train",), True, "", None, np.array([np.nan, 0.5]))
    copy = dataclasses.replace(row, history=np.array([np.nan, 0.5]), engines={"tensor": 0.4})
    assert same_rows((row,), (copy,))
    assert not same_rows((row,), (dataclasses.replace(row, power_watts=101.0),))
    assert not same_rows((row,), (dataclasses.replace(row, engines={"tensor": 0.41}),))
    assert not same_rows((row,), (dataclasses.replace(row, history=np.array([0.1, 0.5])),))
    assert not same_rows((row,), (dataclasses.replace(row, up=False, since=5.0),))
    assert not same_rows((row,), (row, row))


def test_an_empty_table_under_a_selector_says_what_the_selector_filters():
    """`--selector 'runtime_tag="serve"'` matched no instance and was told "is
    neuron-monitor-prometheus being scraped?", which it was."""
    from tui.fleet import no_rows_text
    text = no_rows_text("http://p:9090", 'runtime_tag="serve"')
    assert text.startswith('no instance at http://p:9090 matches {runtime_tag="serve"}')
    assert "instance_info's labels" in text and "being scraped" not in text
    assert "being scraped" in no_rows_text("http://p:9090", "")
