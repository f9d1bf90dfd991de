"""What a real stream does to the exporter's series over time: a pod that takes over a core, a
driver or instance metadata that shows up after the exporter started, readings a stream carried
malformed, and two processes under one tag. Each is read as Prometheus would scrape it."""
from __future__ import annotations

import copy
import json
import pathlib

from exporters.exporter import PrometheusExporter
from monitor.report import Report
from tests.test_exporter_runtime_series import ingest
from tests.test_exporter_runtime_series import series as scrape

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def feed(exporter: PrometheusExporter, *docs: dict) -> None:
    for doc in docs:
        ingest(exporter, doc)


def test_a_core_moved_to_another_pod_is_counted_once():
    first = load("neuron_monitor_sdk_k8s.json")
    moved = copy.deepcopy(first)
    moved["neuron_k8s_info"]["neuroncores_k8s_info"]["0"]["pod_name"] = "trainer-1"
    gone = copy.deepcopy(first)
    del gone["neuron_k8s_info"]["neuroncores_k8s_info"]["0"]
    exporter = PrometheusExporter(clock=lambda: 1.0, k8s_labels=True)

    def pods_of_core0() -> list[str]:
        return sorted(dict(key)["pod_name"] for key in scrape(exporter, "neuroncore_utilization_ratio")
                      if dict(key)["neuroncore"] == "0")
    feed(exporter, first)
    assert pods_of_core0() == ["trainer-0"]
    feed(exporter, moved)
    assert pods_of_core0() == ["trainer-1"]
    feed(exporter, gone)
    assert pods_of_core0() == [""]


def test_pods_stay_between_k8s_periods_and_counters_keep_counting():
    """neuron_k8s_info comes every 15 s beside 1 s groups: the reports between carry none, and
    one may carry its error. Neither says a pod left, so the labels and the counts stay."""
    placed = load("neuron_monitor_sdk_k8s.json")
    placed["system_data"]["neuron_hw_counters"]["neuron_devices"][0]["mem_ecc_corrected"] = 5
    between = copy.deepcopy(placed)
    del between["neuron_k8s_info"]
    failed = copy.deepcopy(placed)
    failed["neuron_k8s_info"] = {"period": 15.03, "error": "kubelet socket not reachable"}
    notices: list[str] = []
    exporter = PrometheusExporter(clock=lambda: 1.0, k8s_labels=True, notice=notices.append)

    def core0() -> dict:
        return {dict(key)["pod_name"]: value
                for key, value in scrape(exporter, "neuroncore_utilization_ratio").items()
                if dict(key)["neuroncore"] == "0"}

    def ecc_totals() -> list[float]:
        return sorted(scrape(exporter, "hardware_ecc_events_total").values())
    feed(exporter, placed)
    first_ecc = ecc_totals()
    assert list(core0()) == ["trainer-0"] and first_ecc and max(first_ecc) > 0
    for doc in (between, failed, between, placed):
        feed(exporter, doc)
        assert list(core0()) == ["trainer-0"]
    assert ecc_totals() == [5 * value for value in first_ecc]
    assert exporter.problems["group_error"] == 1
    assert any("neuron_k8s_info: kubelet socket not reachable" in line for line in notices)


def test_instance_and_devices_known_only_later_are_taken_up():
    late = load("neuron_monitor_extensions.json")
    early = copy.deepcopy(late)
    early["instance_info"] = {"error": "IMDS not reachable"}
    early["neuron_hardware_info"] = {"error": "no driver"}
    exporter = PrometheusExporter(clock=lambda: 1.0)
    feed(exporter, early, late)
    (hardware,) = scrape(exporter, "neuron_hardware_info")
    assert dict(hardware)["neuron_device_count"] == str(late["neuron_hardware_info"]["neuron_device_count"])
    ids = {dict(key).get("instance_id") for key in scrape(exporter, "neuroncore_utilization_ratio")}
    assert ids == {late["instance_info"]["instance_id"]}


def test_counts_from_before_the_instance_was_known_are_kept_under_its_labels():
    """The first reports came before IMDS answered: once a report names the instance, the
    series take its labels and keep their counts (they had started over, losing them); a report
    naming another instance starts them over."""
    late = load("neuron_monitor_aws_example.json")
    early = copy.deepcopy(late)
    early["instance_info"] = {"error": "IMDS not reachable"}
    exporter = PrometheusExporter(clock=lambda: 1.0)
    feed(exporter, early)
    (before,) = [v for k, v in scrape(exporter, "execution_status_total").items()
                 if dict(k)["status_type"] == "completed"]
    assert before > 0
    feed(exporter, late)
    done = {k: v for k, v in scrape(exporter, "execution_status_total").items()
            if dict(k)["status_type"] == "completed"}
    assert list(done.values()) == [2 * before]
    assert {dict(k)["instance_id"] for k in done} == {late["instance_info"]["instance_id"]}
    created = [k for k in scrape(exporter, "execution_status_created")]
    assert created and all(dict(k)["instance_id"] for k in created)
    other = copy.deepcopy(late)
    other["instance_info"]["instance_id"] = "i-0another000000000"
    feed(exporter, other)
    done = {k: v for k, v in scrape(exporter, "execution_status_total").items()
            if dict(k)["status_type"] == "completed"}
    assert list(done.values()) == [before]
    assert {dict(k)["instance_id"] for k in done} == {"i-0another000000000"}


def test_a_malformed_reading_is_left_out_not_exported_as_zero():
    doc = load("neuron_monitor_extensions.json")
    doc["system_data"]["vcpu_usage"]["average_usage"]["user"] = -5
    devices = doc["system_data"]["neuron_device_counters"]["neuron_devices"]
    devices[0]["power_watts"] = -5
    exporter = PrometheusExporter(clock=lambda: 1.0)
    feed(exporter, doc)
    usage = {dict(k)["usage_type"] for k in scrape(exporter, "system_vcpu_usage_ratio")}
    assert usage == {"system"}
    power = {dict(k)["neuron_device_index"] for k in scrape(exporter, "neuron_device_power_watts")}
    assert power == {str(d["neuron_device_index"]) for d in devices[1:]} and power
    bad = load("neuron_monitor_aws_example.json")
    core = next(iter(bad["neuron_runtime_data"][0]["report"]["neuroncore_counters"]
                     ["neuroncores_in_use"].values()))
    core["flops"] = -1
    report = Report.from_json(json.dumps(bad))
    assert any("flops" in note for note in report.dropped)


def test_processes_under_one_tag_add_their_memory():
    doc = load("neuron_monitor_aws_example.json")
    one = doc["neuron_runtime_data"][0]
    two = copy.deepcopy(one)
    two["pid"] = one["pid"] + 1
    doc["neuron_runtime_data"] = [one, two]
    exporter = PrometheusExporter(clock=lambda: 1.0)
    feed(exporter, doc)
    alone = PrometheusExporter(clock=lambda: 1.0)
    single = copy.deepcopy(doc)
    single["neuron_runtime_data"] = [one]
    feed(alone, single)
    both, each = (scrape(e, "neuron_runtime_memory_used_bytes") for e in (exporter, alone))
    assert both.keys() == each.keys() and each
    for key, value in each.items():
        assert both[key] == 2 * value
    latency = scrape(exporter, "execution_latency_seconds")
    assert latency == scrape(alone, "execution_latency_seconds")      # not added: the larger


def test_metadata_read_differently_under_the_same_id_keeps_the_counters():
    """Only a new instance id starts the series over: a report missing another field of the
    instance's metadata once must not reset every counter."""
    first = load("neuron_monitor_aws_example.json")
    again = copy.deepcopy(first)
    del again["instance_info"]["instance_name"]
    exporter = PrometheusExporter(clock=lambda: 1.0)
    feed(exporter, first)
    before = sum(scrape(exporter, "execution_status_total").values())
    feed(exporter, again)
    after = sum(scrape(exporter, "execution_status_total").values())
    assert before > 0 and after == 2 * before
