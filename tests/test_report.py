"""Report: reading and writing the neuron-monitor JSON schema."""
from __future__ import annotations

import math
import pathlib

import orjson
import pytest

from monitor.report import PERCENTILES, Report, ReportError

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
AWS_EXAMPLE = FIXTURES / "neuron_monitor_aws_example.json"

# Keys whose values are floats in our model even when the JSON has an int (percentages,
# periods, seconds, watts); everywhere else an int must come back as an int.
FLOAT_KEYS = frozenset({"period", "neuroncore_utilization", "user", "nice", "system", "idle",
                        "io_wait", "irq", "soft_irq", "tensor", "vector", "scalar", "gpsimd",
                        "dma", "collective_time", "hbm_bandwidth_utilization", "power_watts",
                        "energy_joules", "temperature_celsius", "throttle_ratio", *PERCENTILES})


def canonical(doc):
    """The documented rewrites of a read: inference_stats -> execution_stats, a null
    latency_stats -> both latencies null. Everything else must survive unchanged."""
    if isinstance(doc, dict):
        out = {}
        for key, value in doc.items():
            if key == "inference_stats":
                key = "execution_stats"
                value = dict(value)
                if "inference_summary" in value:
                    value["execution_summary"] = value.pop("inference_summary")
            if key == "latency_stats" and value is None:
                value = {"total_latency": None, "device_latency": None}
            out[key] = canonical(value)
        return out
    if isinstance(doc, list):
        return [canonical(v) for v in doc]
    return doc


def assert_same(expected, actual, path="doc", key=""):
    if isinstance(expected, dict):
        assert isinstance(actual, dict), path
        assert set(expected) == set(actual), f"{path}: keys {set(expected) ^ set(actual)}"
        for k in expected:
            assert_same(expected[k], actual[k], f"{path}.{k}", k)
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(expected) == len(actual), path
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_same(e, a, f"{path}[{i}]", key)
    elif isinstance(expected, bool) or expected is None or isinstance(expected, str):
        assert expected == actual and type(expected) is type(actual), path
    else:
        if type(expected) is int and key not in FLOAT_KEYS:
            assert type(actual) is int, f"{path}: int became {type(actual).__name__}"
        assert math.isclose(expected, actual, rel_tol=1e-9, abs_tol=1e-12), f"{path}: {expected} != {actual}"


def round_trip(raw: bytes) -> None:
    out = Report.from_json(raw).to_json()
    assert b"\n" not in out
    assert_same(canonical(orjson.loads(raw)), orjson.loads(out))


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("neuron_monitor_*.json")), ids=lambda p: p.stem)
def test_every_fixture_round_trips(path):
    raw = path.read_bytes()
    assert raw.count(b"\n") <= 1, "fixtures are one JSON line"
    round_trip(raw)


def test_aws_example_in_base_units():
    report = Report.from_json(AWS_EXAMPLE.read_bytes())
    rt = report.runtimes[0]
    assert (rt.pid, rt.tag, rt.error, rt.address) == (12345, "my_app_1", "", "")
    core = rt.neuroncore_counters.cores[0]
    assert core.utilization == pytest.approx(0.4201)
    assert core.flops == 1234567891011
    assert core.physical == pytest.approx({"nc_v3.0": 0.2101, "nc_v3.1": 0.6301})
    stats = rt.execution_stats
    assert stats.statuses["completed"] == 123 and stats.errors["numerical"] == 0
    assert stats.total_latency.p99 == pytest.approx(0.011)
    assert stats.device_latency.p0 == pytest.approx(0.010)
    mem = rt.memory_used
    assert (mem.host_bytes, mem.device_bytes) == (6997643264, 12519788544)
    assert mem.core_breakdown[0]["tensors"] == 20971520
    model = mem.loaded_models[0]
    assert (model.name, model.model_id, model.is_running) == ("neff", 10005, False)
    assert model.subgraphs["sg_00"].neuron_device_index == 12
    assert model.subgraphs["sg_00"].device_breakdown["constants"] == 20971520
    assert rt.vcpu.user == pytest.approx(0.4201) and rt.vcpu.system == pytest.approx(0.1234)
    sysd = report.system
    assert sysd.hw_counters.devices[0].index == 0
    assert sysd.vcpu.context_switches == 123456
    assert sysd.vcpu.average["idle"] == pytest.approx(0.3936)
    assert sysd.vcpu.per_cpu[0]["system"] == pytest.approx(0.2796)
    assert sysd.memory.total_bytes == 49345835008
    assert report.instance.type == "trn2n.48xlarge" and report.instance.region == "us-west-2"
    hw = report.hardware
    assert (hw.device_type, hw.core_version, hw.device_count, hw.lnc) == ("trainium2", "v3d", 16, 2)
    assert hw.device_memory_bytes == 96 * 2**30
    assert report.k8s["period"] == 15.03
    assert report.received_at is None


def test_received_at_is_not_serialised():
    report = Report.from_json(AWS_EXAMPLE.read_bytes(), received_at=123.0)
    assert report.received_at == 123.0
    assert b"received_at" not in report.to_json()


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["neuron_runtime_data"][0].update(pid="x"), "neuron_runtime_data[0].pid"),
    (lambda d: d["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]
     ["0"].update(neuroncore_utilization="42"),
     "neuron_runtime_data[0].report.neuroncore_counters.neuroncores_in_use.0.neuroncore_utilization"),
    (lambda d: d["system_data"]["memory_info"].update(memory_used_bytes=-1),
     "system_data.memory_info.memory_used_bytes"),
    (lambda d: d["system_data"]["vcpu_usage"]["usage_data"].update(x={}),
     "system_data.vcpu_usage.usage_data.x"),
    (lambda d: d.update(neuron_runtime_data={}), "neuron_runtime_data"),
    (lambda d: d["neuron_runtime_data"][0]["report"]["execution_stats"]["latency_stats"]
     ["total_latency"].pop("p99"),
     "neuron_runtime_data[0].report.execution_stats.latency_stats.total_latency.p99"),
])
def test_bad_field_is_named(mutate, field):
    doc = orjson.loads(AWS_EXAMPLE.read_bytes())
    mutate(doc)
    with pytest.raises(ReportError) as info:
        Report.from_json(doc)
    message = str(info.value)
    assert message.startswith(field + ":") and "\n" not in message


@pytest.mark.parametrize("data", [b"", b"not json", b"[1]", "42", 3.5, None, b'{"a": 1'])
def test_non_documents_raise_report_error(data):
    with pytest.raises(ReportError):
        Report.from_json(data)
