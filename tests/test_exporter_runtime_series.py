"""neuron_runtime_info and neuron_runtime_model_memory_used_bytes: what a runtime is, for a
scrape to rebuild its process details. They hold only what the runtime's latest report carries."""
from __future__ import annotations

import copy
import json
import pathlib

from prometheus_client.parser import text_string_to_metric_families

from exporters.exporter import PrometheusExporter
from monitor.report import Report

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
BASE = json.loads((FIXTURES / "neuron_monitor_aws_example.json").read_text())
MODEL = "neuron_runtime_model_memory_used_bytes"


def series(exporter: PrometheusExporter, name: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(exporter.current.text.decode()):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def ingest(exporter: PrometheusExporter, doc: dict) -> None:
    exporter.ingest(Report.from_json(json.dumps(doc).encode(), received_at=1.0))


def runtime(doc: dict) -> dict:
    return doc["neuron_runtime_data"][0]


def test_the_pid_behind_each_tag_and_a_replaced_pid_leaves_no_stale_series():
    exporter = PrometheusExporter(clock=lambda: 1.0)
    doc = copy.deepcopy(BASE)
    ingest(exporter, doc)
    assert series(exporter, "neuron_runtime_info") == {
        (("pid", "12345"), ("runtime_tag", "my_app_1")): 1.0}
    runtime(doc)["pid"] = 23456           # the job restarted under the same tag
    ingest(exporter, doc)
    assert series(exporter, "neuron_runtime_info") == {
        (("pid", "23456"), ("runtime_tag", "my_app_1")): 1.0}
    doc["neuron_runtime_data"] = []       # gone: its series go with the other per-runtime ones
    ingest(exporter, doc)
    assert series(exporter, "neuron_runtime_info") == {}
    assert series(exporter, MODEL) == {}


def test_model_device_memory_per_core_and_category():
    exporter = PrometheusExporter(clock=lambda: 1.0)
    ingest(exporter, BASE)
    got = series(exporter, MODEL)
    model = runtime(BASE)["report"]["memory_used"]["loaded_models"][0]
    sub = model["subgraphs"]["sg_00"]
    breakdown = sub["memory_used_bytes"]["usage_breakdown"]
    per_device = BASE["neuron_hardware_info"]["neuroncore_per_device_count"]
    # the subgraph names core 0 of its device: exported as the host-wide logical index
    core = sub["neuron_device_index"] * per_device + sub["neuroncore_index"]
    expected = {}
    for location in ("neuron_device",):   # host-side model memory is the runtime's total only
        for category, value in breakdown[location].items():
            expected[tuple(sorted({"runtime_tag": "my_app_1", "model_id": str(model["model_id"]),
                                   "model_name": model["name"],
                                   "neuron_device_index": str(sub["neuron_device_index"]),
                                   "neuroncore": str(core), "memory_location": location,
                                   "category": category}.items()))] = float(value)
    assert got == expected
    device = sum(v for k, v in got.items() if ("memory_location", "neuron_device") in k)
    assert device == sub["memory_used_bytes"]["neuron_device"]


def test_an_unloaded_model_goes_and_a_failing_group_keeps_its_last_models():
    exporter = PrometheusExporter(clock=lambda: 1.0)
    doc = copy.deepcopy(BASE)
    ingest(exporter, doc)
    loaded = series(exporter, MODEL)
    assert loaded
    failing = copy.deepcopy(doc)
    failing_group = runtime(failing)["report"]["memory_used"]
    failing_group["error"] = "memory query failed"
    failing_group.pop("loaded_models")
    ingest(exporter, failing)
    assert series(exporter, MODEL) == loaded          # AWS's rule: an errored group keeps its values
    runtime(doc)["report"]["memory_used"]["loaded_models"] = []
    ingest(exporter, doc)
    assert series(exporter, MODEL) == {}
    assert series(exporter, "neuron_runtime_info")    # the runtime itself is still there


def test_a_source_that_does_not_know_the_pid_exports_no_runtime_info():
    exporter = PrometheusExporter(clock=lambda: 1.0)
    doc = copy.deepcopy(BASE)
    runtime(doc)["pid"] = 0
    ingest(exporter, doc)
    assert series(exporter, "neuron_runtime_info") == {}
    assert series(exporter, "neuroncore_utilization_ratio")


def test_a_device_whose_runtime_has_no_memory_reading_keeps_its_last_value():
    """my_app_1 holds core 0 (device 0), a second runtime core 4 (device 1). When the second's
    memory_used fails, or is not due, device 1's gauge keeps its last value rather than dropping
    by that runtime's share; device 0 goes on updating."""
    exporter = PrometheusExporter(clock=lambda: 1.0)
    doc = copy.deepcopy(BASE)
    other = copy.deepcopy(runtime(doc))
    other["pid"], other["neuron_runtime_tag"] = 555, "other"
    other["report"]["neuroncore_counters"]["neuroncores_in_use"] = {
        "4": other["report"]["neuroncore_counters"]["neuroncores_in_use"]["0"]}
    usage = other["report"]["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"]
    usage["neuroncore_memory_usage"] = {"4": usage["neuroncore_memory_usage"]["0"]}
    doc["neuron_runtime_data"].append(other)
    ingest(exporter, doc)
    used = "neuron_device_memory_used_bytes"
    first = series(exporter, used)
    assert first[(("neuron_device_index", "0"),)] == first[(("neuron_device_index", "1"),)] > 0
    for grown, missing in enumerate(({"period": 1.0, "error": "cannot read memory"}, None), 1):
        later = copy.deepcopy(doc)
        if missing is None:
            del later["neuron_runtime_data"][1]["report"]["memory_used"]
        else:
            later["neuron_runtime_data"][1]["report"]["memory_used"] = missing
        breakdown = runtime(later)["report"]["memory_used"]["neuron_runtime_used_bytes"]
        breakdown["usage_breakdown"]["neuroncore_memory_usage"]["0"]["tensors"] += grown
        ingest(exporter, later)
        now = series(exporter, used)
        assert now[(("neuron_device_index", "1"),)] == first[(("neuron_device_index", "1"),)]
        assert now[(("neuron_device_index", "0"),)] > first[(("neuron_device_index", "0"),)]
        first = now


def test_device_series_go_when_the_host_reports_no_devices():
    """The simulated instance stopped: the monitor's reports say 0 devices. Power, temperature,
    ECC and memory of the devices are no longer served (they were, at their last values, for
    as long as the exporter ran)."""
    exporter = PrometheusExporter(clock=lambda: 1.0)
    doc = copy.deepcopy(json.loads((FIXTURES / "neuron_monitor_extensions.json").read_text()))
    ingest(exporter, doc)

    def per_device():
        text = exporter.current.text.decode()
        return [line for line in text.splitlines()
                if not line.startswith("#") and "neuron_device_index=" in line]
    assert per_device()
    gone = dict(doc, neuron_runtime_data=[],          # as neuron-monitor writes a host without
                system_data={"neuron_hw_counters": {  # devices (aws-neuron-sdk issue #633)
                    "period": 1.0, "error": "", "neuron_devices": None}},
                neuron_hardware_info={"neuron_device_count": 0, "neuron_device_memory_size": 0,
                                      "neuroncore_per_device_count": 0, "error": ""})
    ingest(exporter, gone)
    assert per_device() == []
