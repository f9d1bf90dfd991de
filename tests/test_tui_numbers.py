"""Figures neuron-top prints must mean what they say: one test per number that used to mislead."""
from __future__ import annotations

import numpy as np
import orjson
import pytest

from monitor.report import Report
from tests.test_tui_support import AWS_EXAMPLE, demo_reports, make_app, run_async, settle
from tui.fmt import human_bytes, percent
from tui.memtree import all_branch_keys, build_tree, visible_rows
from tui.procs import COLUMNS, process_rows
from tui.snapshot import overview_text
from tui.view import core_grid, host_vcpu_count, vcpu_usage
from tui.widgets.engines import EngineView
from tui.widgets.grid import LABEL_WIDTH, CoreGridView
from tui.widgets.panels import Banner, TitleBar, VcpuPanel
from tui.widgets.processes import ProcessTable, _cell
from tui.widgets.procscreen import ProcessDetailView


def text(widget) -> str:
    return "\n".join(line.text for line in widget.lines_for(widget.size.width))


def cell_bar(grid: CoreGridView, core: int) -> str:
    """The bar drawn for ``core``: the glyphs before its ``[value]``."""
    per_device = grid.grid.cores_per_device
    line = grid.lines_for(grid.size.width)[1 + core // per_device].text
    col = grid.column_width(grid.size.width)
    start = LABEL_WIDTH + (core % per_device) * col
    return line[start:start + col].split("[")[0].rstrip()


@run_async
async def test_tflops_bars_follow_the_tflops_printed():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("f")
        grid = app.query_one(CoreGridView)
        flops = grid.grid.flops
        busy = flops > 0
        busiest = int(flops.argmax())
        quiet = int(busy.nonzero()[0][flops[busy].argmin()])
        full = cell_bar(grid, busiest)
        assert full and set(full) == {"█"}  # the busiest core is the full scale
        ratio = len(cell_bar(grid, quiet)) / len(full)
        assert abs(ratio - flops[quiet] / flops[busiest]) <= 1.5 / len(full)
        assert "full bar: busiest core" in grid.border_title


@run_async
async def test_app_tab_average_counts_only_that_apps_cores():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("3")
        bert = next(r for r in app.report.runtimes if r.tag == "bert-large-infer")
        cores = bert.neuroncore_counters.cores
        mean = sum(c.utilization for c in cores.values()) / len(cores)
        title = app.query_one(CoreGridView).border_title
        assert f"Avg over its {len(cores)} cores: {percent(mean)}" in title


def test_memory_tree_children_add_up_to_their_core():
    for report in demo_reports(2):
        for device in build_tree(report.runtimes, 4):
            assert device.device_bytes == sum(core.device_bytes for core in device.children)
            for core in device.children:
                assert core.device_bytes == sum(child.device_bytes for child in core.children)
                labels = [child.label for child in core.children]
                assert "Tensors" not in labels and "Constants" not in labels


def test_memory_tree_expanded_lists_each_category_once_per_owner():
    report = demo_reports(1)[0]
    roots = build_tree(report.runtimes, 4)[:1]
    rows = visible_rows(roots, all_branch_keys(roots))
    category_depths = {row.depth for row in rows if row.node.label == "Tensors"}
    assert category_depths == {3}  # always under a model (or the "not in a model" node)


@run_async
async def test_engines_view_follows_the_selected_app_tab():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("3", "e")
        engines = text(app.query_one(EngineView))
        assert "NC32 on ND8 · bert-large-infer" in engines
        await pilot.press(*["left_square_bracket"] * 3)
        assert app.core == 32  # never leaves the app's cores
        await pilot.press("right_square_bracket")
        assert app.core == 33 and "bert-large-infer" in text(app.query_one(EngineView))
        await pilot.press("4")
        assert "mistral-7b-serve" in text(app.query_one(EngineView))


def stopped_report(like: Report) -> Report:
    """What a collector reads once its instance has gone: no runtime, no device, no id."""
    return Report.from_dict({"neuron_runtime_data": [], "system_data": like.to_dict()["system_data"],
                             "instance_info": {}, "neuron_hardware_info": {}})


@run_async
async def test_a_stopped_instance_says_so_and_keeps_its_last_state():
    reports = demo_reports(2)
    app = make_app([reports[0], stopped_report(reports[0])])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 2)
        assert "instance stopped at" in app.query_one(Banner).stale
        title = text(app.query_one(TitleBar))
        assert "i-0d3e0000000000001" in title and "instance stopped" in title
        grid = text(app.query_one(CoreGridView))
        assert "ND15" in grid and app.report is reports[0]


@run_async
async def test_a_stream_without_an_instance_from_its_start_shows_every_report():
    """A host without the driver or instance metadata: its first report was shown, every later
    one dropped as an "instance stopped", and the vCPU figures froze."""
    like = demo_reports(1)[0]
    empty = [stopped_report(like) for _ in range(3)]
    docs = [r.to_dict() for r in empty]
    for n, doc in enumerate(docs):
        doc["system_data"]["vcpu_usage"]["average_usage"]["user"] = 10.0 * (n + 1)
    reports = [Report.from_dict(doc) for doc in docs]
    app = make_app(reports)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 3)
        assert app.report.system.vcpu.average["user"] == pytest.approx(0.30)
        assert app.stopped_at is None
        assert "instance stopped" not in app.query_one(Banner).stale


def test_a_runtime_that_failed_whole_leaves_the_cores_no_one_reports_unknown():
    """A runtime entry with its error and no groups (hung, or counters unreadable) drew its
    cores as idle 0.00 % and counted them in the average."""
    doc = orjson.loads(AWS_EXAMPLE.read_bytes())
    doc["neuron_runtime_data"].append({"pid": 999, "neuron_runtime_tag": "hung", "report": {},
                                       "error": "runtime counters not updated for 12 s"})
    report = Report.from_dict(doc)
    grid = core_grid(report, report.runtimes)
    assert (~grid.in_use).any() and np.isnan(grid.utilization[~grid.in_use]).all()
    assert not np.isnan(grid.utilization[grid.in_use]).any()


@run_async
async def test_the_processes_view_follows_the_selected_app_tab():
    """An app tab filters every section to its runtime: the process table listed them all."""
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("3", "p")
        table = text(app.query_one(ProcessTable))
        assert "bert-large-infer" in table and "llama3-70b-train" not in table
        await pilot.press("1")
        assert "llama3-70b-train" in text(app.query_one(ProcessTable))


@pytest.mark.parametrize("readonly", [False, True])
def test_the_processes_hint_offers_signal_keys_only_where_they_send_one(readonly):
    """Under --readonly the footer leaves the signal keys out but the table's hint still
    offered them."""
    async def check():
        app = make_app(readonly=readonly)
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(pilot, app, 2)
            await pilot.press("p")
            hint = text(app.query_one(ProcessTable))
            assert ("SIGKILL" in hint) is not readonly
    run_async(check)()


def test_runtime_vcpu_is_a_share_of_the_host():
    report = demo_reports(1)[0]
    raw = sum(r.vcpu.user for r in report.runtimes)
    usage = vcpu_usage(report, report.runtimes)
    assert host_vcpu_count(report) == 192
    assert usage.runtime_user == pytest.approx(raw)  # already of the host: summed, not divided
    assert usage.host_vcpus == 192


def on_a_host_of(vcpus: int, user: float = 50.0, system: float = 0.0) -> Report:
    """AWS's example document on a host of ``vcpus`` vCPUs, its runtime at ``user`` % of it."""
    doc = orjson.loads(AWS_EXAMPLE.read_bytes())
    usage = doc["system_data"]["vcpu_usage"]
    usage["usage_data"] = {str(i): usage["usage_data"]["0"] for i in range(vcpus)}
    runtime = doc["neuron_runtime_data"][0]["report"]["neuron_runtime_vcpu_usage"]
    runtime["vcpu_usage"] = {"user": user, "system": system}
    return Report.from_dict(doc)


@pytest.mark.parametrize("vcpus", [2, 192])
def test_a_runtime_at_half_the_host_shows_50_percent_not_50_over_the_vcpu_count(vcpus):
    """neuron-monitor's runtime vCPU figure is already a share of the whole host: neuron-top used
    to divide it by the vCPU count a second time (user 25.00% on a 2-vCPU host)."""
    report = on_a_host_of(vcpus)
    usage = vcpu_usage(report, report.runtimes)
    assert (usage.runtime_user, usage.runtime_system, usage.host_vcpus) == (0.5, 0.0, vcpus)
    snapshot = overview_text(report, width=100)
    assert "Runtime vCPU Usage  user 50.00%  system 0.00%" in snapshot
    # top's figure of one vCPU is the host share times the vCPU count: 100 % on 2 vCPUs
    row = process_rows(report)[0]
    assert (row.vcpu_host, row.vcpu) == (0.5, 0.5 * vcpus)


@run_async
async def test_the_vcpu_panel_shows_the_runtime_share_of_the_host_as_reported():
    app = make_app([on_a_host_of(2)])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 1)
        runtime_line = next(line for line in text(app.query_one(VcpuPanel)).splitlines()
                            if "Runtime" in line)
        assert "user 50.00%" in runtime_line and "of 2 vCPUs" in runtime_line
        await pilot.press("p")
        await pilot.pause()
        table = text(app.query_one(ProcessTable)).splitlines()
        assert "100.0%" in table[1]  # the vCPU column: of one vCPU, as top counts it
        await pilot.press("enter")
        await settle(pilot, app, 1)
        await pilot.pause()
        head = text(app.screen.query_one(ProcessDetailView))
        assert "vCPU 50.00% of the host (100.0% of one)" in " ".join(head.split())


def test_past_ten_vcpus_the_vcpu_column_drops_the_decimal_to_stay_six_cells_wide():
    row = process_rows(on_a_host_of(192, user=10.0))[0]   # 19.2 vCPUs busy
    assert _cell(row, "vcpu") == "1920%"
    assert _cell(process_rows(on_a_host_of(2))[0], "vcpu") == "100.0%"


def test_without_a_vcpu_count_the_share_of_the_host_still_shows():
    doc = orjson.loads(AWS_EXAMPLE.read_bytes())
    del doc["system_data"]["vcpu_usage"]
    report = Report.from_dict(doc)
    usage = vcpu_usage(report, report.runtimes)
    assert usage.host_vcpus == 0 and usage.runtime_user == pytest.approx(0.4201)
    row = process_rows(report)[0]
    assert row.vcpu is None and row.vcpu_host == pytest.approx(0.4201 + 0.1234)


@run_async
async def test_vcpu_panel_names_what_the_share_is_of():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        panel = text(app.query_one(VcpuPanel))
        assert "of 192 vCPUs" in panel
        runtime_line = next(line for line in panel.splitlines() if "Runtime" in line)
        user = float(runtime_line.split("user")[1].split("%")[0])
        assert 0 <= user <= 100


@run_async
async def test_sort_arrow_keeps_the_header_on_its_columns():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("p")
        table = app.query_one(ProcessTable)
        for _ in COLUMNS[:-1]:
            lines = text(table).splitlines()
            header, row = lines[0], lines[1]
            x = 0
            for (key, title, _, right, _), width in table._columns(table.size.width):
                head_cell = header[x:x + width]
                assert head_cell.strip().strip("▲▼") == title, (key, head_cell)
                x += width + 1
            assert len(header.rstrip()) <= len(row) + 1
            await pilot.press("s")


@run_async
async def test_first_choice_of_a_column_sorts_highest_first():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 6)
        await pilot.press("p")
        table = app.query_one(ProcessTable)
        start = next(s for s, _, key in table._header_spans if key == "utilization")
        await pilot.click(ProcessTable, offset=(2 + start + 2, 1))
        utils = [r.utilization for r in table.rows]
        assert app.sort_key == "utilization" and utils == sorted(utils, reverse=True)
        assert "▼" in text(table).splitlines()[0]
        await pilot.click(ProcessTable, offset=(2 + start + 2, 1))
        assert [r.utilization for r in table.rows] == sorted(utils)
        await pilot.press("s")  # the next column, device memory: highest first too
        assert app.sort_key == "device_bytes"
        mem = [r.device_bytes for r in table.rows]
        assert mem == sorted(mem, reverse=True)


@pytest.mark.parametrize("value,shown", [
    (1023, "1023B"), (1024, "1.0KB"), (1048575, "1.0MB"), (1048576, "1.0MB"),
    (1048575 * 1024, "1.0GB"), (1_500_000, "1.4MB"), (-1048575, "-1.0MB"),
])
def test_human_bytes_rolls_over_when_the_figure_rounds_up_to_1024(value, shown):
    """1048575 B read "1024.0KB": compared before rounding, printed after."""
    assert human_bytes(value) == shown
