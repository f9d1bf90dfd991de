"""Every neuron-monitor stream shape is read: absent fields are marked absent, never zero.

The fixtures (tests/fixtures/sdk_streams.py) cover each device generation and SDK release. Only
what AWS's exporter needs to read a group is required (docs/report.md lists it); the property
tests delete or null every other field of every fixture and still get a Report that the
exporter and neuron-top's views render.
"""
from __future__ import annotations

import pathlib
import re

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporters.exporter import PrometheusExporter
from monitor.report import Report, ReportError
from tui.faults import report_faults
from tui.memtree import build_tree
from tui.procs import process_rows
from tui.snapshot import overview_text
from tui.view import core_grid, core_layout, memory_summary, vcpu_usage

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SHAPES = sorted(p for p in FIXTURES.glob("neuron_monitor_*.json") if "extensions" not in p.name)

# The document's structure: a document that breaks it is rejected.
STRUCTURE = ("neuron_runtime_data.*", "neuron_runtime_data.*.pid", "neuron_runtime_data.*.report")
# What AWS's neuron-monitor-prometheus.py reads to process each group: a group without it is
# ignored (and named in Report.dropped), the report is kept. Everything else is optional.
GROUP_NEEDS = (
    "neuron_runtime_data.*.report.neuroncore_counters.neuroncores_in_use",
    "neuron_runtime_data.*.report.neuroncore_counters.neuroncores_in_use.*",
    "neuron_runtime_data.*.report.neuroncore_counters.neuroncores_in_use.*.neuroncore_utilization",
    "neuron_runtime_data.*.report.*_stats.error_summary",
    "neuron_runtime_data.*.report.*_stats.*_summary",
    "neuron_runtime_data.*.report.memory_used.neuron_runtime_used_bytes",
    "neuron_runtime_data.*.report.memory_used.neuron_runtime_used_bytes.host",
    "neuron_runtime_data.*.report.memory_used.neuron_runtime_used_bytes.neuron_device",
    "neuron_runtime_data.*.report.memory_used.neuron_runtime_used_bytes.usage_breakdown",
    "neuron_runtime_data.*.report.memory_used.neuron_runtime_used_bytes.usage_breakdown"
    ".neuroncore_memory_usage",
    "neuron_runtime_data.*.report.memory_used.neuron_runtime_used_bytes.usage_breakdown"
    ".neuroncore_memory_usage.*",
    "neuron_runtime_data.*.report.neuron_runtime_vcpu_usage.vcpu_usage",
    "neuron_runtime_data.*.report.neuron_runtime_vcpu_usage.vcpu_usage.*",
    "system_data.neuron_hw_counters.neuron_devices.*",
    "system_data.neuron_hw_counters.neuron_devices.*.neuron_device_index",
    "system_data.vcpu_usage.average_usage", "system_data.vcpu_usage.usage_data",
    "system_data.vcpu_usage.usage_data.*",
)


def _patterns(paths):
    return [re.compile("^" + re.escape(p).replace(r"\*", r"[^.]+") + "$") for p in paths]


STRUCTURE_RE, GROUP_NEEDS_RE = _patterns(STRUCTURE), _patterns(GROUP_NEEDS)


def matches(patterns, path: tuple) -> bool:
    dotted = ".".join(str(k) for k in path)
    return any(r.match(dotted) for r in patterns)


def group_error(doc: dict, path: tuple) -> str | None:
    """The error text of the group holding `path` (None outside a group)."""
    if path[:1] == ("system_data",) and len(path) > 2:
        return doc["system_data"][path[1]].get("error", "")
    if path[:1] == ("neuron_runtime_data",) and len(path) > 4 and path[2] == "report":
        group = doc["neuron_runtime_data"][path[1]]["report"][path[3]]
        return group.get("error", "") if isinstance(group, dict) else None
    return None


def leaves(doc, path=()):
    children = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, child in children:
        yield path + (key,)
        yield from leaves(child, path + (key,))


def edited(doc: dict, path: tuple, how: str) -> dict:
    out = orjson.loads(orjson.dumps(doc))
    node = out
    for key in path[:-1]:
        node = node[key]
    if how == "null" or isinstance(node, list):
        node[path[-1]] = None
    else:
        del node[path[-1]]
    return out


def render_everywhere(report: Report) -> None:
    """The sinks: the exporter's exposition and each of neuron-top's views of the report."""
    exporter = PrometheusExporter(clock=lambda: 1.0)
    assert exporter.ingest(report).text.startswith(b"")
    grid = core_grid(report, report.runtimes)
    core_layout(report)
    vcpu_usage(report, report.runtimes)
    memory_summary(report.runtimes)
    build_tree(report.runtimes, grid.cores_per_device)
    process_rows(report)
    report_faults(report)
    assert "neuron-top" in overview_text(report, width=80)


OPTIONAL_EDITS = [(shape, path, how) for shape in SHAPES
                  for path in leaves(orjson.loads(shape.read_bytes()))
                  if not matches(STRUCTURE_RE, path) for how in ("delete", "null")]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(OPTIONAL_EDITS))
def test_deleting_or_nulling_any_optional_field_keeps_the_report(edit):
    shape, path, how = edit
    original = orjson.loads(shape.read_bytes())
    report = Report.from_json(edited(original, path, how))
    render_everywhere(report)
    orjson.loads(report.to_json())
    ignored = [n for n in report.dropped if n.endswith("ignored)")]
    entry = isinstance(path[-1], str) and path[-1].isdigit()  # removing one map entry is fine
    if matches(GROUP_NEEDS_RE, path) and not (entry and how == "delete"):
        assert ignored, "a group without what its reader needs is named as ignored"
    elif group_error(original, path) == "":
        assert not ignored, f"an optional field cost its group: {ignored}"


WRONG = st.one_of(st.just("x"), st.just(-1), st.just([]), st.just({}), st.just(True),
                  st.just(1e300), st.just("\x1b[2J"))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([(s, p) for s, p, how in OPTIONAL_EDITS if how == "null" and p[0] not in
                         ("neuron_runtime_data", "system_data", "instance_info",
                          "neuron_hardware_info") or len(p) > 1]), WRONG)
def test_a_wrong_type_in_an_optional_field_drops_the_field_not_the_report(edit, value):
    shape, path = edit
    doc = orjson.loads(shape.read_bytes())
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    report = Report.from_json(doc)
    render_everywhere(report)
    for note in report.dropped:
        assert "\n" not in note and "\x1b" not in note


def test_every_shape_is_covered():
    names = {p.stem.removeprefix("neuron_monitor_") for p in SHAPES}
    assert {"sdk_inf1", "sdk_inf2", "sorted_keys_trn1", "sdk_trn2_lnc1", "aws_example", "sdk_trn3",
            "inference_stats", "group_error", "missing_groups", "latency_null",
            "sdk_percentiles_null", "sdk_k8s", "unknown_groups", "no_device"} <= names


def load(name: str) -> Report:
    return Report.from_json((FIXTURES / f"neuron_monitor_{name}.json").read_bytes())


def test_inf1_is_read_with_what_it_has_and_marks_the_rest_absent():
    report = load("sdk_inf1")
    core = report.runtimes[0].neuroncore_counters.cores[0]
    assert core.utilization == pytest.approx(0.10) and core.flops is None and core.physical is None
    hw = report.hardware
    assert (hw.device_type, hw.core_version, hw.device_memory_bytes, hw.lnc) == (None, None, None, None)
    assert (hw.device_count, hw.cores_per_device) == (4, 4)
    ecc = report.system.hw_counters.devices[0]
    assert ecc.sram_ecc_corrected is None and ecc.mem_ecc_corrected == 0
    assert report.runtimes[0].execution_stats.statuses["completed"] == 123
    assert report.runtimes[0].memory_used.host_breakdown is None
    assert report.dropped == ()
    grid = core_grid(report, report.runtimes)
    assert grid.total_flops is None and (grid.devices, grid.cores_per_device) == (4, 4)


def test_inf1_exposition_has_no_series_it_has_no_data_for():
    text = PrometheusExporter(clock=lambda: 1.0).ingest(load("sdk_inf1")).text.decode()
    assert 'neuroncore_utilization_ratio{' in text and 'neuroncore="3"' in text
    assert 'event_type="mem_ecc_corrected"' in text
    assert 'event_type="sram_ecc_corrected"' not in text
    assert "neuron_device_memory_total_bytes{" not in text   # memory size not in the stream
    assert 'execution_status_total{' in text


def test_a_wrong_type_drops_that_field_and_says_so():
    doc = orjson.loads((FIXTURES / "neuron_monitor_aws_example.json").read_bytes())
    doc["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]["0"][
        "flops"] = "lots"
    doc["system_data"]["memory_info"]["memory_used_bytes"] = -1
    report = Report.from_json(doc)
    assert report.runtimes[0].neuroncore_counters.cores[0].flops is None
    assert report.system.memory.used_bytes is None and report.system.memory.total_bytes > 0
    assert report.dropped == (
        "neuron_runtime_data[0].report.neuroncore_counters.neuroncores_in_use.0.flops: "
        "expected number, got string",
        "system_data.memory_info.memory_used_bytes: expected a non-negative 64-bit integer, got -1")
    assert b"dropped" not in report.to_json()


def test_a_group_missing_what_aws_reads_is_ignored_the_rest_kept():
    doc = orjson.loads((FIXTURES / "neuron_monitor_sdk_inf1.json").read_bytes())
    del doc["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]["0"][
        "neuroncore_utilization"]
    report = Report.from_json(doc)
    assert report.runtimes[0].neuroncore_counters is None
    assert report.runtimes[0].memory_used is not None
    assert "neuroncores_in_use.0.neuroncore_utilization: missing" in report.dropped[0]
    doc["neuron_runtime_data"][0]["pid"] = "12"
    with pytest.raises(ReportError, match=r"neuron_runtime_data\[0\]\.pid"):
        Report.from_json(doc)


def test_k8s_info_is_parsed_per_core_and_device():
    k8s = load("sdk_k8s").k8s
    assert k8s.cores[0].pod == "trainer-0" and k8s.cores[4].namespace == "serving"
    assert k8s.devices[1].containers == ("main", "sidecar")
    assert [p.pod for p in k8s.pods_of([5, 4, 0])] == ["trainer-0", "server-7f9c"]


def test_null_percentiles_are_absent_not_zero():
    report = load("sdk_percentiles_null")
    latency = report.runtimes[0].execution_stats.total_latency
    assert latency.p50 == pytest.approx(0.012) and latency.p99 is None
    text = PrometheusExporter(clock=lambda: 1.0).ingest(report).text.decode()
    assert 'percentile="p50"' in text and 'percentile="p99"' not in text


@pytest.mark.parametrize("name, cores, version", [
    ("sdk_inf2", (12, 2), "v2"), ("sorted_keys_trn1", (16, 2), "v2"),
    ("sdk_trn2_lnc1", (16, 8), "v3"), ("aws_example", (16, 4), "v3d"), ("sdk_trn3", (16, 4), "v4d")])
def test_each_generation_lays_out_its_cores(name, cores, version):
    report = load(name)
    assert core_layout(report) == cores and report.hardware.core_version == version
    render_everywhere(report)
