"""Report: reading and writing the neuron-monitor JSON schema."""
from __future__ import annotations

import json
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
    latency_stats -> both latencies null, a null device_latency beside a total one -> none.
    Everything else must survive unchanged."""
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
            elif key == "latency_stats" and value.get("total_latency") is None:
                value = {"total_latency": None, "device_latency": value.get("device_latency")}
            elif key == "latency_stats" and value.get("device_latency", 0) is None:
                value = {"total_latency": value["total_latency"]}   # a null one is not written
            if key in PERCENTILES and value is None:
                continue  # a null percentile is absent: written without it
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
    assert report.k8s.period == 15.03
    assert report.k8s.cores[0].pod == "p0" and report.k8s.cores[0].namespace == "n0"
    assert report.k8s.devices[0].containers == ("c0",)
    assert report.received_at is None


def test_received_at_is_not_serialised():
    report = Report.from_json(AWS_EXAMPLE.read_bytes(), received_at=123.0)
    assert report.received_at == 123.0
    assert b"received_at" not in report.to_json()


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["neuron_runtime_data"][0].update(pid="x"), "neuron_runtime_data[0].pid"),
    (lambda d: d.update(neuron_runtime_data={}), "neuron_runtime_data"),
    (lambda d: d["neuron_runtime_data"][0].update(report=[]), "neuron_runtime_data[0].report"),
])
def test_bad_structure_is_named(mutate, field):
    doc = orjson.loads(AWS_EXAMPLE.read_bytes())
    mutate(doc)
    with pytest.raises(ReportError) as info:
        Report.from_json(doc)
    message = str(info.value)
    assert message.startswith(field + ":") and "\n" not in message


RT = "neuron_runtime_data[0].report."


@pytest.mark.parametrize("mutate, field, group", [
    (lambda d: d["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]
     ["0"].update(neuroncore_utilization="42"),
     RT + "neuroncore_counters.neuroncores_in_use.0.neuroncore_utilization", "neuroncore_counters"),
    (lambda d: d["system_data"]["vcpu_usage"].update(average_usage=5),
     "system_data.vcpu_usage.average_usage", "vcpu_usage"),
    (lambda d: d["system_data"]["vcpu_usage"]["usage_data"].update(x={}),
     "system_data.vcpu_usage.usage_data.x", "vcpu_usage"),
    (lambda d: d["neuron_runtime_data"][0]["report"]["neuroncore_counters"].update(
        neuroncores_in_use=None), RT + "neuroncore_counters.neuroncores_in_use", "neuroncore_counters"),
])
def test_a_group_missing_what_its_reader_needs_is_ignored_and_named(mutate, field, group):
    doc = orjson.loads(AWS_EXAMPLE.read_bytes())
    mutate(doc)
    report = Report.from_json(doc)
    (note,) = report.dropped
    assert note.startswith(field + ":") and note.endswith(f"(group {group} ignored)")
    assert "\n" not in note
    written = orjson.loads(report.to_json())
    kept = {**written["system_data"], **written["neuron_runtime_data"][0]["report"]}
    assert group not in kept and "memory_used" in kept and "memory_info" in kept


@pytest.mark.parametrize("data", [b"", b"not json", b"[1]", "42", 3.5, None, b'{"a": 1'])
def test_non_documents_raise_report_error(data):
    with pytest.raises(ReportError):
        Report.from_json(data)


def load(name: str) -> Report:
    return Report.from_json((FIXTURES / f"neuron_monitor_{name}.json").read_bytes())


def test_percentiles_are_written_in_numeric_order():
    out = orjson.loads(load("sorted_keys_trn1").to_json())
    latency = out["neuron_runtime_data"][0]["report"]["execution_stats"]["latency_stats"]
    assert list(latency["total_latency"]) == list(PERCENTILES)


def test_trn1_capture_has_no_physical_breakdown_or_lnc():
    report = load("sorted_keys_trn1")
    assert report.runtimes[0].address is None
    assert report.runtimes[0].neuroncore_counters.cores[0].physical is None
    assert report.hardware.lnc is None
    assert b"logical_neuroncore_config" not in report.to_json()
    assert b'"address"' not in report.to_json()


def test_integer_percentages_become_ratios():
    report = load("integer_percent")
    assert report.runtimes[0].neuroncore_counters.cores[0].utilization == 1.0
    assert report.system.vcpu.average == {"user": 0.5, "nice": 0.0, "system": 0.25, "idle": 0.25,
                                          "io_wait": 0.0, "irq": 0.0, "soft_irq": 0.0}
    assert report.system.vcpu.per_cpu[0]["user"] == 1.0


def test_missing_groups_are_none():
    report = load("missing_groups")
    rt = report.runtimes[0]
    assert rt.execution_stats is None and rt.memory_used is None and rt.vcpu is None
    assert report.system.vcpu is None and report.system.hw_counters is None
    assert report.system.memory is not None and report.k8s is None


def test_no_device_document():
    report = load("no_device")
    assert report.runtimes == ()
    assert report.system.hw_counters.devices is None
    assert b'"neuron_devices":null' in report.to_json()


def test_group_and_runtime_errors_are_kept():
    report = load("group_error")
    ok, failed = report.runtimes
    assert ok.memory_used.error.startswith("failed to read memory usage")
    # a failed group has no figures: None, never 0 (which would read as an idle runtime)
    assert ok.memory_used.loaded_models is None
    assert ok.memory_used.host_bytes is None and ok.memory_used.device_bytes is None
    assert ok.vcpu.error == "process exited"
    assert ok.vcpu.user is None and ok.vcpu.system is None
    assert ok.neuroncore_counters.error == ""
    assert failed.error == "runtime not responding" and failed.neuroncore_counters is None
    assert report.system.hw_counters.error and report.system.hw_counters.devices is None


def test_a_failed_runtime_with_a_null_report_keeps_the_document():
    """Go writes an empty map as null: the whole document was refused for it, losing every
    other runtime and the system groups."""
    doc = json.loads(AWS_EXAMPLE.read_text())
    doc["neuron_runtime_data"].append({"pid": 999, "neuron_runtime_tag": "hung",
                                       "error": "runtime not responding", "report": None})
    report = Report.from_dict(doc)
    *kept, failed = report.runtimes
    assert len(kept) == len(doc["neuron_runtime_data"]) - 1 and report.system.vcpu is not None
    assert failed.error == "runtime not responding" and failed.neuroncore_counters is None
    doc["neuron_runtime_data"][-1]["error"] = ""
    with pytest.raises(ReportError, match=r"neuron_runtime_data\[\d+\]\.report"):
        Report.from_dict(doc)


def test_untagged_runtime_tag_is_pid_string():
    assert load("untagged").runtimes[0].tag == "4242"
    doc = orjson.loads(AWS_EXAMPLE.read_bytes())
    del doc["neuron_runtime_data"][0]["neuron_runtime_tag"]
    assert Report.from_json(doc).runtimes[0].tag == "12345"


def test_inference_stats_is_read_as_execution_stats_and_written_renamed():
    report = load("inference_stats")
    stats = report.runtimes[0].execution_stats
    assert stats.statuses["completed"] == 123
    text = report.to_json()
    assert b'"execution_stats"' in text and b"inference" not in text


def test_null_latency_reads_as_none():
    a, b = load("latency_null").runtimes
    for rt in (a, b):
        assert rt.execution_stats.total_latency is None
        assert rt.execution_stats.device_latency is None


def test_unknown_groups_are_preserved():
    report = load("unknown_groups")
    assert report.runtimes[0].extra_groups["future_group"]["values"] == [1, 2.5, None, "x"]
    assert "neuron_power" in report.system.extra_groups
    assert report.instance.extra == {"ultraserver_id": "us-1234"}
    assert report.hardware.extra == {"neuron_device_family": "trn2"}
    assert report.extra == {"some_top_level_key": {"a": [1, 2]}}


def test_extension_groups():
    report = load("extensions")
    engines = report.runtimes[0].engine_counters
    core = engines.cores[1]
    assert core.engine_utilization["tensor"] == pytest.approx(0.8125)
    assert core.model_flops == 650000000001 and core.hardware_flops == 700000000001
    assert core.dma_bytes["weight"] == 3000000 and core.collective_time == 0.0125
    devices = report.system.device_counters.devices
    assert [d.index for d in devices] == [0, 1]
    assert devices[0].hbm_bandwidth_utilization == pytest.approx(0.182)
    assert devices[0].power_watts == 412.5 and devices[0].modelled is True


def test_runtime_lookup_by_tag():
    report = load("latency_null")
    assert report.runtime("my_app_2").pid == 12346
    assert report.runtime("nope") is None


# --------------------------------------------------------------------------- properties
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PERIOD = st.floats(0.0, 3600.0, allow_nan=False)
PERCENT = st.one_of(st.floats(0.0, 100.0, allow_nan=False), st.integers(0, 100))
COUNT = st.integers(0, 2**63)
SECONDS = st.floats(0.0, 100.0, allow_nan=False)
ERROR = st.sampled_from(["", "", "", "read failed"])
NAME = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
INDEX = st.integers(0, 127).map(str)


def group(body):
    return st.fixed_dictionaries({"period": PERIOD, "error": st.just("")}, optional={}).flatmap(
        lambda head: body.map(lambda b: {**head, **b}))


def latency():
    return st.one_of(st.none(), st.fixed_dictionaries({p: SECONDS for p in PERCENTILES}))


CORE = st.fixed_dictionaries(
    {"neuroncore_utilization": PERCENT, "flops": COUNT},
    optional={"v3d": st.dictionaries(st.sampled_from(["nc_v3.0", "nc_v3.1"]),
                                     st.fixed_dictionaries({"neuroncore_utilization": PERCENT}),
                                     min_size=1)})
NEURONCORE_COUNTERS = group(st.fixed_dictionaries(
    {"neuroncores_in_use": st.dictionaries(INDEX, CORE, max_size=4)}))
EXECUTION_STATS = group(st.fixed_dictionaries({
    "error_summary": st.dictionaries(st.sampled_from(
        ["generic", "numerical", "transient", "model", "runtime", "hardware"]), COUNT),
    "execution_summary": st.dictionaries(st.sampled_from(
        ["completed", "completed_with_err", "timed_out", "failed_to_queue"]), COUNT),
    # older runtimes time the whole execution only: no device_latency key
    "latency_stats": st.fixed_dictionaries({"total_latency": latency()},
                                           optional={"device_latency": latency()}),
}))
BREAKDOWN = st.dictionaries(st.sampled_from(["constants", "model_code", "tensors", "runtime_memory"]), COUNT)
SUBGRAPH = st.fixed_dictionaries({
    "neuroncore_index": st.integers(0, 127), "neuron_device_index": st.integers(0, 63),
    "memory_used_bytes": st.fixed_dictionaries({"host": COUNT, "neuron_device": COUNT,
        "usage_breakdown": st.fixed_dictionaries({"host": BREAKDOWN, "neuron_device": BREAKDOWN})})})
MODEL = st.fixed_dictionaries({"name": NAME, "uuid": NAME, "model_id": COUNT, "is_running": st.booleans(),
                               "subgraphs": st.dictionaries(NAME, SUBGRAPH, max_size=2)})
MEMORY_USED = group(st.fixed_dictionaries({
    "neuron_runtime_used_bytes": st.fixed_dictionaries({"host": COUNT, "neuron_device": COUNT,
        "usage_breakdown": st.fixed_dictionaries({"host": BREAKDOWN,
            "neuroncore_memory_usage": st.dictionaries(INDEX, BREAKDOWN, max_size=3)})}),
    "loaded_models": st.lists(MODEL, max_size=2)}))
RUNTIME_VCPU = group(st.fixed_dictionaries({"vcpu_usage": st.fixed_dictionaries(
    {"user": PERCENT, "system": PERCENT})}))
ENGINE = group(st.fixed_dictionaries({"neuroncores_in_use": st.dictionaries(INDEX, st.fixed_dictionaries({
    "engine_utilization": st.dictionaries(st.sampled_from(["tensor", "vector", "scalar", "gpsimd", "dma"]), PERCENT),
    "model_flops": COUNT, "hardware_flops": COUNT, "hbm_read_bytes": COUNT, "hbm_write_bytes": COUNT,
    "dma_bytes": st.dictionaries(st.sampled_from(["input", "output", "weight", "collective"]), COUNT),
    "collective_bytes": COUNT, "collective_time": SECONDS}), max_size=3)}))
RUNTIME = st.fixed_dictionaries(
    {"pid": st.integers(1, 2**22), "neuron_runtime_tag": NAME, "error": ERROR,
     "report": st.fixed_dictionaries({}, optional={
         "neuroncore_counters": NEURONCORE_COUNTERS, "execution_stats": EXECUTION_STATS,
         "memory_used": MEMORY_USED, "neuron_runtime_vcpu_usage": RUNTIME_VCPU,
         "neuroncore_engine_counters": ENGINE})},
    optional={"address": NAME})
CPU_KEYS = ["user", "nice", "system", "idle", "io_wait", "irq", "soft_irq"]
CPU = st.fixed_dictionaries({k: PERCENT for k in CPU_KEYS})
SYSTEM = st.fixed_dictionaries({}, optional={
    "neuron_hw_counters": group(st.fixed_dictionaries({"neuron_devices": st.one_of(st.none(), st.lists(
        st.fixed_dictionaries({"neuron_device_index": st.integers(0, 63), "mem_ecc_corrected": COUNT,
                               "mem_ecc_uncorrected": COUNT, "sram_ecc_corrected": COUNT,
                               "sram_ecc_uncorrected": COUNT}), max_size=3))})),
    "vcpu_usage": group(st.fixed_dictionaries({"context_switch_count": COUNT, "average_usage": CPU,
                                               "usage_data": st.dictionaries(INDEX, CPU, max_size=4)})),
    "memory_info": group(st.fixed_dictionaries({k: COUNT for k in (
        "memory_total_bytes", "memory_used_bytes", "swap_total_bytes", "swap_used_bytes")})),
    "neuron_device_counters": group(st.fixed_dictionaries({"neuron_devices": st.lists(st.fixed_dictionaries({
        "neuron_device_index": st.integers(0, 63), "hbm_read_bytes": COUNT, "hbm_write_bytes": COUNT,
        "hbm_bandwidth_utilization": PERCENT, "power_watts": SECONDS, "energy_joules": SECONDS,
        "temperature_celsius": st.floats(-40, 150), "throttle_ratio": st.floats(0, 1),
        "modelled": st.booleans()}), max_size=2)}))})
DOCUMENT = st.fixed_dictionaries({
    "neuron_runtime_data": st.lists(RUNTIME, max_size=3),
    "system_data": SYSTEM,
    # every key optional: an instance_info that failed carries only its error
    "instance_info": st.fixed_dictionaries({}, optional={k: NAME for k in (
        "instance_name", "instance_id", "instance_type", "instance_availability_zone",
        "instance_availability_zone_id", "instance_region", "ami_id", "subnet_id", "error")}),
    "neuron_hardware_info": st.fixed_dictionaries({
        "neuron_device_type": NAME, "neuron_device_version": NAME, "neuroncore_version": NAME,
        "neuron_device_count": st.integers(0, 64), "neuron_device_memory_size": COUNT,
        "neuroncore_per_device_count": st.integers(0, 8), "error": ERROR},
        optional={"logical_neuroncore_config": st.integers(1, 2)})})

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=5),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4),
                    max_leaves=30)
LOOSE_DOCUMENT = st.dictionaries(st.sampled_from(
    ["neuron_runtime_data", "system_data", "instance_info", "neuron_hardware_info", "neuron_k8s_info"]),
    JSON, max_size=5)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENT)
def test_generated_documents_round_trip(doc):
    round_trip(orjson.dumps(doc))


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON, LOOSE_DOCUMENT, DOCUMENT.flatmap(lambda d: st.just(d) | mutated(d))))
@example({"\n": -9223372036854775809})          # a path with a newline: the message stays one line
def test_arbitrary_json_raises_only_report_error(value):
    try:
        report = Report.from_json(value if isinstance(value, dict) else json.dumps(value))
    except ReportError as exc:
        assert "\n" not in str(exc)
    else:
        orjson.loads(report.to_json())  # whatever was accepted can be written back


def mutated(doc):
    """Replace one leaf of a valid document with an arbitrary JSON value."""
    paths = []

    def walk(node, path):
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in children:
            paths.append(path + (key,))
            walk(child, path + (key,))
    walk(doc, ())
    if not paths:
        return st.just(doc)

    def apply(args):
        path, value = args
        out = orjson.loads(orjson.dumps(doc))
        node = out
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return out
    return st.tuples(st.sampled_from(paths), JSON).map(apply)


@settings(max_examples=100, deadline=None)
@given(DOCUMENT)
def test_utilization_ratios_are_within_unit_interval(doc):
    report = Report.from_json(doc)
    ratios = []
    for rt in report.runtimes:
        if rt.neuroncore_counters:
            for core in rt.neuroncore_counters.cores.values():
                ratios.append(core.utilization)
                ratios.extend((core.physical or {}).values())
        if rt.vcpu:
            ratios += [rt.vcpu.user, rt.vcpu.system]
        if rt.engine_counters:
            for core in rt.engine_counters.cores.values():
                ratios.extend(core.engine_utilization.values())
    if report.system.vcpu:
        ratios.extend(report.system.vcpu.average.values())
        for cpu in report.system.vcpu.per_cpu.values():
            ratios.extend(cpu.values())
    if report.system.device_counters:
        ratios += [d.hbm_bandwidth_utilization for d in report.system.device_counters.devices]
    assert all(0.0 <= r <= 1.0 for r in ratios)


def test_an_object_with_none_of_the_top_level_groups_is_not_a_report():
    """Each top-level group may be absent, but an object with none of them is some other
    program's JSON: counted as a bad line, not shown as an empty instance."""
    with pytest.raises(ReportError, match="not a neuron-monitor report"):
        Report.from_json(b'{"a": 1}')
    with pytest.raises(ReportError, match="not a neuron-monitor report"):
        Report.from_json(b'{"neuron_k8s_info": {}}')
    for key in ("instance_info", "neuron_hardware_info", "system_data"):
        assert Report.from_json(orjson.dumps({key: {}})).runtimes == ()
    assert Report.from_json(b'{"neuron_runtime_data": []}').runtimes == ()
