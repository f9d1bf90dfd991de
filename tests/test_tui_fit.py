"""Fitting the width and height given: the memory tree stays in sight at 80x24, ``-1`` lays the
grid and the process table out to the terminal, the process table keeps every column that fits,
and the figures carry their units and their value as read."""
from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from monitor.report import Report
from monitor.sources import ListSource
from tests.test_tui_support import FIXED_NOW, FIXTURES, run_async, settle
from tui.app import NeuronTopApp
from tui.snapshot import overview_text
from tui.view import core_grid
from tui.widgets.grid import CoreGridView
from tui.widgets.panels import Banner, MemorySummaryView, VcpuPanel
from tui.widgets.processes import ProcessTable
from tui.widgets.tree import MemoryTreeView

ROOT = FIXTURES.parent.parent


def fixture(name: str) -> Report:
    return Report.from_json((FIXTURES / f"neuron_monitor_{name}.json").read_bytes())


def text(widget) -> str:
    return "\n".join(line.text for line in widget.lines_for(widget.size.width))


def stream_app(name: str) -> NeuronTopApp:
    """As ``neuron-top --input tests/fixtures/…`` names its source: a title of two lines at 80."""
    source = ListSource([fixture(name)], label=f"tests/fixtures/neuron_monitor_{name}.json",
                        hold_open=True)
    return NeuronTopApp(source, clock=lambda: FIXED_NOW)


# ------------------------------------------------------------------ the tree at 80x24
@pytest.mark.parametrize("name", ["sdk_k8s", "group_error", "sdk_inf1", "aws_example"])
@run_async
async def test_the_memory_tree_keeps_three_rows_on_screen_at_80x24(name):
    """It showed its heading and column line only (no row at all under group_error's banner),
    while focused: the arrows moved a selection nobody could see."""
    app = stream_app(name)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        await pilot.pause(0.05)
        tree = app.query_one(MemoryTreeView)
        visible = min(tree.region.bottom, app.query_one("#overview").region.bottom)
        assert visible - tree.content_region.y >= 4   # its column line and three rows
        grid = app.query_one(CoreGridView)
        assert grid.size.height >= 2   # the grid keeps its header and a device row


@run_async
async def test_the_memory_tree_keeps_three_rows_at_80x16_under_a_three_line_banner():
    """The sections above it took every row: its heading showed, then the Apps bar. The memory
    summary steps aside (and the vCPU panel after it) until the terminal grows again."""
    app = stream_app("group_error")
    async with app.run_test(size=(80, 16)) as pilot:
        await settle(pilot, app, 1)
        await pilot.pause(0.05)
        assert app.query_one(Banner).size.height == 3
        tree = app.query_one(MemoryTreeView)
        visible = min(tree.region.bottom, app.query_one("#overview").region.bottom)
        assert visible - tree.content_region.y >= 4   # its column line and three rows
        assert app.query_one(CoreGridView).size.height >= 2
        assert not app.query_one(MemorySummaryView).display
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.1)
        assert app.query_one(MemorySummaryView).display and app.query_one(VcpuPanel).display


@run_async
async def test_the_grid_takes_its_rows_back_when_the_terminal_grows():
    app = stream_app("group_error")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        await pilot.pause(0.05)
        assert app.query_one(CoreGridView).size.height < 7
        await pilot.resize_terminal(160, 50)
        await pilot.pause(0.1)
        assert app.query_one(CoreGridView).size.height == 17   # NC header and 16 devices


# ------------------------------------------------------------------ -1 to the width
def test_dash_1_wraps_the_grid_columns_instead_of_cutting_them():
    out = overview_text(fixture("sdk_trn2_lnc1"), width=80)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    grid_lines = [line for line in lines if line.startswith(("ND", "      "))]
    assert not any(line.endswith("…") for line in grid_lines)
    for core in range(8):
        assert any(f"NC{core}" in line for line in grid_lines), core
    nd0 = [line for line in lines if line.startswith("ND0 ")]
    assert "[ 55.00%]" in "".join(nd0) and "[ 62.50%]" in "".join(nd0)   # NC6 and NC7


def test_dash_1_keeps_one_line_per_device_when_the_cores_fit():
    out = overview_text(fixture("sdk_trn2_lnc1"), width=100)
    assert sum(line.startswith("ND0 ") for line in out.splitlines()) == 1


@pytest.mark.parametrize("width", [40, 80, 120])
def test_dash_1_process_table_is_never_cut(width):
    report = fixture("sdk_k8s")
    lines = overview_text(report, width=width).splitlines()
    table = lines[lines.index("Processes") + 1:]
    assert all(len(line) <= width and not line.endswith("…") for line in table), table


def test_dash_1_shows_pod_and_status_whole_when_they_fit():
    lines = overview_text(fixture("sdk_k8s"), width=160).splitlines()
    table = lines[lines.index("Processes") + 1:]
    assert "POD" in table[0] and "STATUS" in table[0]
    assert table[1].endswith("ml/trainer-0         ok")


def test_dash_1_shows_a_failed_runtimes_reason_at_80_columns():
    lines = overview_text(fixture("group_error"), width=80).splitlines()
    trainer = next(line for line in lines if line.split()[:2] == ["777", "trainer"])
    assert "runtime not" in trainer   # the table's STATUS, not the banner's FAULT line


# ------------------------------------------------------------------ the process table at 80
@pytest.mark.parametrize("name,columns", [
    ("sdk_k8s", ("DEV MEM", "EXEC/s")),
    ("group_error", ("DEV MEM", "STATUS")),
])
@run_async
async def test_narrow_process_table_keeps_the_columns_that_still_fit(name, columns):
    """At 80 columns POD (20 cells) went, then every column of lower priority than it too:
    PID TAG CORES NC UTIL ERRORS, and ~18 empty cells; a failed runtime showed no reason."""
    app = stream_app(name)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("p")
        await pilot.pause()
        table = app.query_one(ProcessTable)
        header = text(table).splitlines()[0]
        for title in columns:
            assert title in header, header
        used = sum(width + 1 for _, width in table._columns(table.size.width))
        assert table.size.width - used < 8   # nothing that fits is left out


@run_async
async def test_a_failed_runtimes_status_shows_at_80_columns():
    app = stream_app("group_error")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("p")
        await pilot.pause()
        rows = text(app.query_one(ProcessTable)).splitlines()
    assert "runtime not" in next(row for row in rows if "trainer" in row)


# ------------------------------------------------------------------ units and values as read
def test_the_tflops_total_has_its_unit():
    report = fixture("sdk_trn2_lnc1")
    assert "(Total: 8.00TF)" in overview_text(report, width=100, show_flops=True)
    view = CoreGridView()
    view.grid, view.show_flops = core_grid(report, report.runtimes), True
    assert "Total: 8.00TF;" in view.heading()


def test_json_writes_each_percentage_as_read():
    """55.0 % was read as 0.55 and written back as 55.00000000000001."""
    raw = (FIXTURES / "neuron_monitor_sdk_trn2_lnc1.json").read_bytes()
    assert b'"neuroncore_utilization":55.0' in raw.replace(b" ", b"")
    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run([sys.executable, "-m", "tui.cli", "--json", "-"], input=raw,
                         capture_output=True, cwd=ROOT, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert b"55.00000000000001" not in out.stdout and b'"neuroncore_utilization":55.0' in out.stdout
    doc = orjson.loads(raw)
    percents = [55.0, 42.01, 0.1, 33.33, 100.0, 12345.67, 1e-05]
    for value in percents:
        doc["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"][
            "0"]["neuroncore_utilization"] = value
        again = orjson.loads(Report.from_dict(doc).to_json())
        cores = again["neuron_runtime_data"][0]["report"]["neuroncore_counters"]
        assert cores["neuroncores_in_use"]["0"]["neuroncore_utilization"] == value
