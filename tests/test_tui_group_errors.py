"""A metric group that carries an ``error`` has no figures: neuron-top shows N/A (never 0) and,
on the process screen, the group's error; and the process screen's memory totals are the
runtime's reported ones, the table's, with the categories as their parts."""
from __future__ import annotations

import orjson

from monitor.report import Report
from tests.test_tui_support import FIXTURES, make_app, run_async, settle
from tui.history import History
from tui.procdetail import process_detail
from tui.procs import cell_text, process_rows
from tui.snapshot import overview_text
from tui.status import stream_faults
from tui.view import memory_summary, runtimes_for, vcpu_usage
from tui.widgets.processes import ProcessTable
from tui.widgets.procscreen import ProcessDetailView

GROUP_ERROR = FIXTURES / "neuron_monitor_group_error.json"
K8S = FIXTURES / "neuron_monitor_sdk_k8s.json"
INF1 = FIXTURES / "neuron_monitor_sdk_inf1.json"
AWS = FIXTURES / "neuron_monitor_aws_example.json"


def load(path) -> Report:
    return Report.from_json(path.read_bytes())


def text(widget) -> str:
    return "\n".join(line.text for line in widget.lines_for(widget.size.width))


def with_failed_execution_stats() -> Report:
    doc = orjson.loads(AWS.read_bytes())
    doc["neuron_runtime_data"][0]["report"]["execution_stats"] = {
        "period": 1.0, "error": "stats unavailable"}
    return Report.from_dict(doc)


async def detail_text(pilot, app, tag: str) -> str:
    """The process screen of the runtime tagged ``tag`` (p, its row, enter), as text."""
    await settle(pilot, app, 1)
    await pilot.press("p")
    table = app.query_one(ProcessTable)
    table.cursor = [row.tag for row in table.rows].index(tag)
    await pilot.press("enter")
    await pilot.pause(0.05)
    return text(app.screen.query_one(ProcessDetailView))


def test_failed_vcpu_and_memory_groups_read_n_a_in_the_view_data():
    report = load(GROUP_ERROR)
    app_1 = runtimes_for(report, "my_app_1")
    usage = vcpu_usage(report, app_1)
    assert (usage.runtime_user, usage.runtime_system) == (None, None)   # was 0.0, 0.0
    summary = memory_summary(app_1)
    assert summary.reported and (summary.host_total, summary.device_total) == (None, None)
    row = next(r for r in process_rows(report) if r.tag == "my_app_1")
    assert (row.device_bytes, row.host_bytes, row.vcpu, row.vcpu_host) == (None,) * 4


def test_a_failed_execution_stats_group_reads_n_a_not_zero_executions():
    (row,) = process_rows(with_failed_execution_stats())
    assert (row.executions_per_second, row.errors, row.latency_p50) == (None, None, None)


def test_dash_1_shows_the_failed_groups_as_n_a():
    text_out = overview_text(load(GROUP_ERROR), width=100)
    assert "Runtime vCPU Usage  user N/A  system N/A" in text_out
    assert "Total 0B" not in text_out and "Total N/A" in text_out
    my_app = next(line for line in text_out.splitlines()   # its row (the banner names it too)
                  if line.split()[:2] == ["12345", "my_app_1"])
    assert " 0B" not in my_app and "N/A" in my_app


def test_dash_1_at_80_columns_names_every_failed_group():
    """The line of failed groups was cut at 80 columns ("· neuron_r…"); it wraps, as on screen."""
    narrow = overview_text(load(GROUP_ERROR), width=80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    for group in ("memory_used failed", "neuron_runtime_vcpu_usage failed",
                  "neuron_hw_counters failed"):
        assert group in " ".join(narrow.split())


@run_async
async def test_the_process_screen_shows_n_a_and_each_failed_groups_error():
    app = make_app([load(GROUP_ERROR)])
    async with app.run_test(size=(120, 40)) as pilot:
        shown = await detail_text(pilot, app, "my_app_1")
    assert "vCPU N/A (failed: process exited)" in shown
    assert "memory_used failed: failed to read memory usage: permission denied" in shown
    assert "0B" not in shown and "not in this stream" not in shown   # it failed, not absent
    assert not any(line.rstrip().endswith("·") for line in shown.splitlines())


@run_async
async def test_the_process_screen_of_a_failed_runtime_shows_no_zero_memory():
    app = make_app([load(GROUP_ERROR)])
    async with app.run_test(size=(120, 40)) as pilot:
        shown = await detail_text(pilot, app, "trainer")
    assert "0B" not in shown and "no memory_used for this runtime" in shown
    assert "errors: none in the period" not in shown   # no execution_stats to say so


@run_async
async def test_the_process_screen_names_a_failed_execution_stats_group():
    app = make_app([with_failed_execution_stats()])
    async with app.run_test(size=(120, 40)) as pilot:
        shown = await detail_text(pilot, app, "my_app_1")
    assert "execution_stats failed: stats unavailable" in shown
    assert "0.0/s" not in shown and "errors: none" not in shown


def test_the_process_detail_totals_are_the_runtimes_reported_ones():
    report = load(K8S)
    detail = process_detail(report, 12345, History(8), "my_app_1")
    runtime = report.runtime("my_app_1")
    assert (detail.row.device_bytes, detail.row.host_bytes) == (
        runtime.memory_used.device_bytes, runtime.memory_used.host_bytes)
    parts = runtime.memory_used.core_breakdown.values()
    assert dict(detail.device_memory)["Tensors"] == sum(p["tensors"] for p in parts)
    assert sum(v for _, v in detail.device_memory) < detail.row.device_bytes   # parts of it


@run_async
async def test_the_process_screen_memory_totals_match_the_table():
    """Device Total was the sum of the category breakdown (373.1MB), the table the runtime's
    reported total (11.7GB); without a host breakdown, Host Total read 0B next to 6.5GB."""
    for path, device, host in ((K8S, "Total 11.7GB", "Total 6.5GB · Tensors 0B"),
                               (AWS, "Total 11.7GB", "Total 6.5GB · Tensors 0B"),
                               (INF1, "Total 11.7GB", "Total 6.5GB · Tensors N/A")):
        app = make_app([load(path)])
        async with app.run_test(size=(160, 50)) as pilot:
            shown = await detail_text(pilot, app, "my_app_1")
        lines = shown.splitlines()
        assert any(line.strip().startswith(f"Device {device}") for line in lines), shown
        assert any(line.strip().startswith(f"Host {host}") for line in lines), shown
        assert not any(line.rstrip().endswith("·") for line in lines)


# ------------------------------------------------------------------ whose groups failed
def with_a_healthy_neighbour() -> Report:
    """group_error's my_app_1 (memory_used and vCPU failed) beside a healthy copy of it."""
    doc = orjson.loads(GROUP_ERROR.read_bytes())
    failing = doc["neuron_runtime_data"][0]
    healthy = orjson.loads(AWS.read_bytes())["neuron_runtime_data"][0]
    healthy["pid"], healthy["neuron_runtime_tag"] = 4242, "healthy_app"
    doc["neuron_runtime_data"] = [failing, healthy]
    return Report.from_dict(doc)


def test_the_banner_names_the_runtime_with_each_failed_group():
    """It said "memory_used failed: …" with two runtimes on screen: whose?"""
    faults = stream_faults(with_a_healthy_neighbour(), (), [])
    (warning,) = [f.text for f in faults if f.severity == "warning"]
    assert "my_app_1: memory_used failed: failed to read memory usage" in warning
    assert "my_app_1: neuron_runtime_vcpu_usage failed: process exited" in warning
    assert "healthy_app" not in warning


def test_dash_1_names_the_runtime_with_each_failed_group():
    shown = " ".join(overview_text(with_a_healthy_neighbour(), width=80).split())
    assert "my_app_1: memory_used failed" in shown


def test_a_runtime_whose_groups_failed_is_not_ok_in_the_table():
    """Its memory, vCPU (and executions) read N/A while STATUS said "ok"."""
    rows = {row.tag: row for row in process_rows(with_a_healthy_neighbour())}
    assert rows["my_app_1"].status == "memory_used, neuron_runtime_vcpu_usage failed"
    assert rows["healthy_app"].status == ""
    assert cell_text(rows["healthy_app"], "status") == "ok"


@run_async
async def test_the_table_shows_the_failed_groups_at_80_columns():
    app = make_app([with_a_healthy_neighbour()])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("p")
        rows = text(app.query_one(ProcessTable)).splitlines()
    failing = next(row for row in rows if "my_app_1" in row)
    assert "memory_used" in failing and not failing.rstrip().endswith(" ok"), failing
