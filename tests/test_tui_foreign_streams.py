"""neuron-top on streams AWS's tools write in other states: a failed neuroncore_counters group, a
host without Neuron devices, a failed instance_info, an older runtime's latencies, no runtime
running; what an audit found shown as figures the stream did not give."""
from __future__ import annotations

import math

import orjson
import pytest

from monitor.report import Report
from tests.test_tui_support import FIXTURES, make_app, run_async, settle
from tui.memtree import build_tree
from tui.snapshot import overview_text
from tui.view import NO_DEVICE, core_grid, memory_summary
from tui.widgets.engines import EngineView
from tui.widgets.grid import CoreGridView
from tui.widgets.panels import TitleBar

AWS = FIXTURES / "neuron_monitor_aws_example.json"
NO_DRIVER = FIXTURES / "neuron_monitor_no_device.json"


def aws(edit=None) -> Report:
    doc = orjson.loads(AWS.read_bytes())
    if edit:
        edit(doc)
    return Report.from_dict(doc)


def failed_core_counters(doc: dict) -> None:
    for runtime in doc["neuron_runtime_data"]:
        runtime["report"]["neuroncore_counters"] = {"period": 1.0, "error": "failed to read"}


def no_devices() -> Report:
    doc = orjson.loads(NO_DRIVER.read_bytes())
    doc["neuron_hardware_info"] = {"neuron_device_count": 0, "neuroncore_per_device_count": 0,
                                   "error": ""}
    return Report.from_dict(doc)


def text(widget) -> str:
    return "\n".join(line.text for line in widget.lines_for(widget.size.width))


def test_a_failed_core_counters_group_reads_n_a_not_an_idle_0_percent():
    """Every cell read 0.00% and the average 0.00%: the runtime's cores are unknown, not idle."""
    report = aws(failed_core_counters)
    grid = core_grid(report, report.runtimes)
    assert grid.average is None and all(math.isnan(u) for u in grid.utilization)
    shown = overview_text(report, width=80)
    assert "Utilization (Avg: N/A)" in shown and "0.00%" not in shown
    assert "[    N/A]" in shown


def test_a_core_another_runtime_reports_keeps_its_figure_beside_a_failed_one():
    def one_failed(doc: dict) -> None:
        second = orjson.loads(orjson.dumps(doc["neuron_runtime_data"][0]))
        second["pid"] += 1
        second["neuron_runtime_tag"] = "other"
        second["report"]["neuroncore_counters"] = {"period": 1.0, "error": "failed to read"}
        doc["neuron_runtime_data"].append(second)
    report = aws(one_failed)
    grid = core_grid(report, report.runtimes)
    known = grid.in_use
    assert known.any() and not any(math.isnan(u) for u in grid.utilization[known])
    assert all(math.isnan(u) for u in grid.utilization[~known]) and grid.average is None


def test_a_host_without_devices_draws_no_device_rows():
    """The grid invented "ND0 [0.00%] [0.00%]" for a report whose hardware info says 0."""
    report = no_devices()
    assert core_grid(report, report.runtimes).devices == 0
    shown = overview_text(report, width=80)
    assert NO_DEVICE in shown.splitlines() and "ND0" not in shown
    assert "Utilization (Avg: N/A)" in shown


def test_without_hardware_info_the_average_is_over_the_cores_reported():
    """A stream without neuron_hardware_info: the grid's layout is a guess, so the average is of
    the cores runtimes report (one core at 42% had read 21%, half of a guessed pair)."""
    def without_hardware(doc: dict) -> None:
        del doc["neuron_hardware_info"]
    report = aws(without_hardware)
    grid = core_grid(report, report.runtimes)
    reported = grid.utilization[grid.in_use]
    assert not grid.layout_known and reported.size < grid.utilization.size
    assert grid.average == pytest.approx(float(reported.mean()))
    n = reported.size
    assert f"Utilization (Avg over the {n} core{'s' if n != 1 else ''} reported: " \
        in overview_text(report, width=80)
    full = aws()                      # with the layout given: over every core of the host
    assert core_grid(full, full.runtimes).layout_known
    assert "Utilization (Avg: " in overview_text(full, width=80)


@run_async
async def test_every_key_works_on_a_host_without_devices():
    app = make_app([no_devices()])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        assert NO_DEVICE.strip() in text(app.query_one(CoreGridView))
        for keys in (("right", "down", "left", "up"), ("e",), ("x",), ("p",), ("o",),
                     ("escape",)):
            await pilot.press(*keys)
            await pilot.pause(0.05)
        assert app.is_running


def test_a_cores_memory_is_what_its_models_and_the_rest_add_up_to():
    """AWS's own example: NC 48 read 0B with a 20 MB model under it (the core breakdown leaves
    the model's memory out); a core is never smaller than its children."""
    report = aws()
    per_device = report.hardware.cores_per_device
    for device in build_tree(report.runtimes, per_device):
        assert device.device_bytes == sum(core.device_bytes for core in device.children)
        for core in device.children:
            assert core.device_bytes == sum(child.device_bytes for child in core.children)
            assert all(child.device_bytes <= core.device_bytes for child in core.children)
    assert any(core.device_bytes >= 20 * 2**20 for device in
               build_tree(report.runtimes, per_device) for core in device.children)


@run_async
async def test_a_failed_instance_info_titles_the_screen_as_dash_1_does():
    """The screen's title read "running on " and nothing; -1 said "unknown instance"."""
    report = aws(lambda doc: doc.__setitem__("instance_info", {"error": "IMDS unreachable"}))
    assert "running on unknown instance" in overview_text(report, width=80)
    app = make_app([report])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        assert "running on unknown instance" in text(app.query_one(TitleBar))


def test_no_runtime_running_is_not_a_stream_without_memory_used():
    report = aws(lambda doc: doc.__setitem__("neuron_runtime_data", []))
    assert memory_summary(report.runtimes).missing == "no runtime is running"
    assert "N/A (no runtime is running)" in overview_text(report, width=80)


def test_json_writes_no_field_the_stream_did_not_carry():
    """--json added eight empty instance fields beside a failed instance_info's error, and a
    null device_latency beside an older runtime's total_latency."""
    def older(doc: dict) -> None:
        doc["instance_info"] = {"error": "IMDS unreachable"}
        stats = doc["neuron_runtime_data"][0]["report"]["execution_stats"]
        stats["latency_stats"].pop("device_latency")
    out = orjson.loads(aws(older).to_json())
    assert out["instance_info"] == {"error": "IMDS unreachable"}
    latency = out["neuron_runtime_data"][0]["report"]["execution_stats"]["latency_stats"]
    assert set(latency) == {"total_latency"}


@run_async
async def test_the_engines_views_notes_wrap_at_80_columns():
    """"...(a neuronscope exten" was cut at 80 columns."""
    app = make_app([aws()])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("e")
        await pilot.pause(0.05)
        shown = text(app.query_one(EngineView))
    assert "extension group)" in " ".join(shown.split())
    assert max(len(line.rstrip()) for line in shown.splitlines()) <= 80
