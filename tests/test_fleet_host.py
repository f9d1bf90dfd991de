"""The drill-down's Report from instant-query answers: pids, loaded models and the vCPU count,
with neuronscope's exporter behind Prometheus and with AWS's only."""
from __future__ import annotations

import pytest

from monitor.coverage import stream_gaps
from monitor.fleet_host import host_queries, host_report
from monitor.promql import Sample
from monitor.report import Report
from tui.history import History
from tui.procdetail import process_detail
from tui.procs import process_rows
from tui.view import vcpu_usage

INSTANCE = {"instance_id": "i-0abc", "instance_type": "trn2.48xlarge", "instance_name": "n",
            "availability_zone": "us-east-2a", "region": "us-east-2", "subnet_id": "s"}
HARDWARE = {"neuron_device_count": "16", "neuron_device_memory_size": "103079215104",
            "neuroncore_per_device_count": "4"}


def sample(name: str, value: float, **labels: str) -> Sample:
    return Sample({"__name__": name, **labels}, value, 0.0)


def aws_answers(tags=("llama-train", "4242")) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {
        "info": [sample("instance_info", 1, **INSTANCE)],
        "hardware": [sample("neuron_hardware_info", 1, **HARDWARE)],
        "util": [], "runtime_memory": [], "core_memory": [], "runtime_vcpu": [],
        "system": [sample("system_vcpu_count", 192), sample("system_vcpu_usage_ratio", 0.25, usage_type="user"),
                   sample("system_vcpu_usage_ratio", 0.05, usage_type="system")],
    }
    for n, tag in enumerate(tags):
        out["util"].append(sample("neuroncore_utilization_ratio", 0.5, runtime_tag=tag, neuroncore=str(n)))
        out["runtime_memory"].append(sample("neuron_runtime_memory_used_bytes", 1000, runtime_tag=tag,
                                            memory_location="neuron_device"))
        out["core_memory"].append(sample("neuroncore_memory_usage_tensors", 1000, runtime_tag=tag,
                                         neuroncore=str(n), memory_location="None"))
        out["runtime_vcpu"].append(sample("neuron_runtime_vcpu_usage_ratio", 0.015, runtime_tag=tag,
                                          usage_type="user"))
    return out


def model(tag: str, core: int, location: str, category: str, value: float, model_id: str = "10005",
          name: str = "llama-7b") -> Sample:
    return sample("neuron_runtime_model_memory_used_bytes", value, runtime_tag=tag, model_id=model_id,
                  model_name=name, neuron_device_index=str(core // 4), neuroncore=str(core),
                  memory_location=location, category=category)


def test_the_new_queries_select_by_the_exporters_target():
    q = host_queries("i-0abc", "10.0.0.7:8000", "neuron", "60s")
    assert q["runtime_info"] == 'neuron_runtime_info{instance="10.0.0.7:8000",job="neuron"}'
    assert q["models"] == ('neuron_runtime_model_memory_used_bytes'
                           '{instance="10.0.0.7:8000",job="neuron"}')


def test_aws_only_a_pid_is_known_where_the_tag_is_one_and_models_are_unknown():
    report = host_report(aws_answers(), 2.0)
    pids = {r.tag: r.known_pid for r in report.runtimes}
    assert pids == {"llama-train": None, "4242": 4242}
    assert all(r.memory_used.loaded_models is None for r in report.runtimes)
    rows = {r.tag: r for r in process_rows(report)}
    assert rows["llama-train"].pid is None and rows["4242"].pid == 4242
    assert [r.tag for r in process_rows(report, "pid")] == ["4242", "llama-train"]  # unknown last
    assert process_rows(report, query="none") == [] and process_rows(report, query="pid:0") == []
    detail = process_detail(report, None, History(8), "llama-train")
    assert detail is not None and detail.row.tag == "llama-train" and detail.models is None


def test_flops_are_unknown_without_flops_series_and_hardware_flops_with_them():
    """The drill-down drew 0.00 TF on every core of a host AWS's exporter serves (it has no
    FLOPs series), and model FLOPs, not the host view's hardware FLOPs, where it had them."""
    aws = host_report(aws_answers(), 2.0)
    assert [c.flops for r in aws.runtimes for c in r.neuroncore_counters.cores.values()] == \
        [None, None]
    answers = aws_answers(("llama-train",))
    answers["engine_util"] = [sample("neuron_core_engine_utilization_ratio", 0.5,
                                     runtime_tag="llama-train", neuroncore="0", engine="tensor")]
    answers["model_flops"] = [sample("x", 9e12, runtime_tag="llama-train", neuroncore="0")]
    answers["hardware_flops"] = [sample("x", 11e12, runtime_tag="llama-train", neuroncore="0")]
    (runtime,) = host_report(answers, 2.0).runtimes
    assert runtime.neuroncore_counters.cores[0].flops == pytest.approx(11e12)


def test_extension_series_give_pids_and_models_per_core():
    answers = aws_answers(("llama-train", "serve"))
    answers["runtime_info"] = [sample("neuron_runtime_info", 1, runtime_tag="llama-train", pid="31337"),
                               sample("neuron_runtime_info", 1, runtime_tag="serve", pid="31338")]
    answers["models"] = [model("llama-train", 0, "neuron_device", "tensors", 600),
                         model("llama-train", 0, "neuron_device", "constants", 300),
                         model("llama-train", 0, "host", "dma_buffers", 64),
                         model("llama-train", 5, "neuron_device", "tensors", 100, "10006", "head")]
    answers["runtime_info"].reverse()
    report = host_report(answers, 2.0)
    by_tag = {r.tag: r for r in report.runtimes}
    assert {t: r.pid for t, r in by_tag.items()} == {"llama-train": 31337, "serve": 31338}
    # in pid order, as the host's own collector lists them: tab 2 is one app in both views
    assert [r.tag for r in report.runtimes] == ["llama-train", "serve"]
    answers["runtime_info"] = [sample("neuron_runtime_info", 1, runtime_tag="llama-train", pid="9"),
                               sample("neuron_runtime_info", 1, runtime_tag="serve", pid="8")]
    assert [r.tag for r in host_report(answers, 2.0).runtimes] == ["serve", "llama-train"]
    models = by_tag["llama-train"].memory_used.loaded_models
    assert [(m.name, m.model_id) for m in models] == [("llama-7b", 10005), ("head", 10006)]
    sub = next(iter(models[0].subgraphs.values()))
    assert (sub.neuroncore_index, sub.neuron_device_index, sub.device_bytes, sub.host_bytes) == \
        (0, 0, 900, 64)
    assert dict(sub.device_breakdown) == {"tensors": 600, "constants": 300}
    head = next(iter(models[1].subgraphs.values()))
    assert head.global_core(4) == 5
    # no host-located series for it (the exporter's are device memory): unknown, not 0 B, in
    # the report and in the memory tree
    assert head.host_bytes is None and "host" not in head.dump()["memory_used_bytes"]
    from tui.memtree import build_tree
    tree = list(_nodes(build_tree(report.runtimes, 4)))
    assert [n.host_bytes for n in tree if n.label == "head"] == [None]
    assert [n.host_bytes for n in tree if n.label == "NC 5"] == [None]     # its core's too
    assert by_tag["serve"].memory_used.loaded_models == ()   # ours, and nothing loaded
    detail = process_detail(report, 31337, History(8), "llama-train")
    assert detail.models == (("llama-7b", 10005, 900), ("head", 10006, 100))


def _nodes(nodes):
    for node in nodes:
        yield node
        yield from _nodes(node.children)


def test_a_model_query_that_failed_leaves_models_unknown():
    answers = aws_answers()
    answers["runtime_info"] = [sample("neuron_runtime_info", 1, runtime_tag="llama-train", pid="7")]
    report = host_report(answers, 2.0)   # no "models" answer at all
    assert {r.tag: r.pid for r in report.runtimes}["llama-train"] == 7
    assert all(r.memory_used.loaded_models is None for r in report.runtimes)


def test_the_vcpu_count_travels_without_per_cpu_usage():
    report = host_report(aws_answers(), 2.0)
    vcpu = report.system.vcpu
    assert vcpu.per_cpu == {} and vcpu.vcpu_count == 192
    usage = vcpu_usage(report, report.runtimes)
    assert usage.host_vcpus == 192
    assert abs(usage.runtime_user - 0.03) < 1e-9      # two runtimes at 1.5 % of the host each
    again = Report.from_dict(report.to_dict())             # the extension key round-trips
    assert again.system.vcpu.vcpu_count == 192 and again.system.vcpu.per_cpu == {}


def test_without_system_vcpu_count_the_count_stays_unknown():
    answers = aws_answers()
    answers["system"] = [s for s in answers["system"] if s.labels["__name__"] != "system_vcpu_count"]
    report = host_report(answers, 2.0)
    assert report.system.vcpu.vcpu_count == 0
    assert vcpu_usage(report, report.runtimes).host_vcpus == 0


def _hardware_of(instance_type: str, **hardware: str) -> Report:
    answers = aws_answers()
    answers["info"] = [sample("instance_info", 1, **(INSTANCE | {"instance_type": instance_type}))]
    answers["hardware"] = [sample("neuron_hardware_info", 1, **hardware)]
    return host_report(answers, 2.0)


def test_the_instance_type_names_the_devices_prometheus_does_not():
    """Prometheus's neuron_hardware_info has only counts: the drill-down names the chip, its
    versions and the LNC from the instance type, as neuron-monitor on that host does, so the
    host screens do not report a stream lacking the device type."""
    trn2 = _hardware_of("trn2.48xlarge", **HARDWARE).hardware
    assert (trn2.device_type, trn2.device_version, trn2.core_version, trn2.lnc) == (
        "trainium2", "v4", "v3d", 2)
    assert (trn2.device_count, trn2.cores_per_device) == (16, 4)
    lnc1 = _hardware_of("trn2.48xlarge", **(HARDWARE | {"neuroncore_per_device_count": "8"}))
    assert (lnc1.hardware.core_version, lnc1.hardware.lnc) == ("v3", 1)
    trn1 = _hardware_of("trn1.32xlarge", neuron_device_count="16",
                        neuroncore_per_device_count="2").hardware
    # trn1 has no LNC choice: neuron-monitor writes no logical_neuroncore_config there
    assert (trn1.device_type, trn1.core_version, trn1.lnc) == ("trainium1", "v2", None)
    report = _hardware_of("trn2n.48xlarge", **HARDWARE)   # an alias AWS's material uses
    assert report.hardware.device_type == "trainium2"
    assert "neuron_device_type" not in stream_gaps(report).missing


def test_an_unknown_type_or_a_core_count_that_fits_no_lnc_leaves_out_what_is_not_known():
    unknown = _hardware_of("inf2.xlarge", neuron_device_count="1", neuroncore_per_device_count="2")
    assert unknown.hardware.device_type is None and unknown.hardware.device_count == 1
    assert "neuron_device_type" in stream_gaps(unknown).missing
    odd = _hardware_of("trn2.48xlarge", neuron_device_count="16",
                       neuroncore_per_device_count="3").hardware
    assert odd.device_type == "trainium2" and odd.core_version is None and odd.lnc is None


def test_labels_the_series_carries_win_and_bad_counts_read_as_none_known():
    named = _hardware_of("trn2.48xlarge", **HARDWARE, neuron_device_type="trainium2x").hardware
    assert named.device_type == "trainium2x"
    bad = _hardware_of("trn2.48xlarge", neuron_device_count="lots",
                       neuroncore_per_device_count="").hardware
    assert (bad.device_count, bad.cores_per_device, bad.device_type) == (0, 0, "trainium2")


def test_host_memory_by_category_from_the_extension_series_and_unknown_with_aws_only():
    answers = aws_answers(("llama-train",))
    answers["host_memory"] = [
        sample("neuron_runtime_host_memory_used_bytes", value, runtime_tag="llama-train",
               category=category)
        for category, value in (("application_memory", 7e9), ("dma_buffers", 1048576),
                                ("tensors", 0), ("constants", 0))]
    memory = host_report(answers, 2.0).runtimes[0].memory_used
    assert dict(memory.host_breakdown) == {"application_memory": 7_000_000_000,
                                           "dma_buffers": 1048576, "tensors": 0, "constants": 0}
    aws = host_report(aws_answers(("llama-train",)), 2.0).runtimes[0].memory_used
    assert not aws.host_breakdown   # AWS's exporter has no such series: nothing to show, not 0


def test_a_label_value_with_quotes_newlines_or_backslashes_stays_one_valid_matcher():
    """The drill-down escaped only backslash and quote: a newline in an instance id or target
    broke the query. The selector reads back as the value it was made from."""
    from monitor.promql import parse_selector
    odd = 'i-1\n"x"\\y\t'
    q = host_queries(odd, "10.0.0.7:8000\n", "neu\"ron", "60s")
    inner = q["info"][len("instance_info{"):-1]
    assert [(m.label, m.op, m.value) for m in parse_selector(inner)] == [("instance_id", "=", odd)]
    own = q["runtime_info"][len("neuron_runtime_info{"):-1]
    assert [m.value for m in parse_selector(own)] == ["10.0.0.7:8000\n", 'neu"ron']
    assert "\n" not in q["info"] and "\n" not in q["runtime_info"]


def _hbm_answers(instance_type: str) -> dict[str, list[Sample]]:
    answers = aws_answers()
    answers["info"] = [sample("instance_info", 1, **(INSTANCE | {"instance_type": instance_type}))]
    # the exporter's last period ran hot (the gauge); over the rate window less moved
    answers["device"] = [sample("neuron_device_hbm_bandwidth_utilization_ratio", 0.73,
                                neuron_device_index="0")]
    answers["hbm_read"] = [sample("", 871e9, neuron_device_index="0"),
                           sample("", 100e9, neuron_device_index="1")]
    answers["hbm_write"] = [sample("", 623e9, neuron_device_index="0")]
    return answers


def test_hbm_utilization_is_over_the_same_window_as_the_hbm_bytes_beside_it():
    """The drill-down's HBM line showed the bytes moved over the rate window (1.5 TB/s here)
    beside the exporter's last period's utilization gauge (73%): two windows, and on a 2.9 TB/s
    Trainium2 the two disagreed. The utilization is now those bytes' share of the peak."""
    from device_model.catalog.specs import get_instance
    peak = get_instance("trn2.48xlarge").device.hbm_bw
    report = host_report(_hbm_answers("trn2.48xlarge"), 2.0)
    devices = {d.index: d for d in report.system.device_counters.devices}
    assert devices[0].hbm_bandwidth_utilization == pytest.approx((871e9 + 623e9) / peak)
    assert devices[0].hbm_read_bytes + devices[0].hbm_write_bytes == (871e9 + 623e9) * 2.0
    assert devices[1].hbm_bandwidth_utilization == pytest.approx(100e9 / peak)
    # a type the catalog does not know keeps the gauge, the only share of peak there is
    other = host_report(_hbm_answers("inf2.xlarge"), 2.0).system.device_counters.devices
    assert {d.index: d.hbm_bandwidth_utilization for d in other}[0] == 0.73
