"""Collector: period values from cumulative counters in real counter files (shm.CounterWriter)."""
from __future__ import annotations

import os

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector_sim import START, Clock, FakeRuntime, write_instance
from monitor import collector_groups as g
from monitor.collector import Collector
from monitor.config import RUNTIME_GROUPS, SYSTEM_GROUPS, MonitorConfig
from monitor.report import Report

ALL = {"period": "1s",
       "neuron_runtimes": [{"metrics": [{"type": t} for t in RUNTIME_GROUPS]}],
       "system_metrics": [{"type": t} for t in SYSTEM_GROUPS]}


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "rt"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def runtimes():
    made: list[FakeRuntime] = []
    yield made
    for rt in made:
        rt.close()


def make(root, runtimes, pid, tag, cores, **kw) -> FakeRuntime:
    rt = FakeRuntime(root, pid, tag, cores, cores_per_device=4, **kw)
    runtimes.append(rt)
    return rt


def collector(root, clock, config=ALL) -> Collector:
    return Collector(MonitorConfig.from_dict(config), root=root, clock=clock)


def test_utilization_flops_and_physical_breakdown_are_period_deltas(root, runtimes):
    write_instance(root)
    rt = make(root, runtimes, 4242, "train", [0, 1, 2, 3, 4])
    rt.step(10.0, busy=0.9)  # history before the monitor starts must not leak into the report
    clock = Clock(START + 10)
    c = collector(root, clock)
    rt.step(2.0, busy=0.25, flops=3e12)
    clock.advance(2.0)
    report = c.collect()
    (entry,) = report.runtimes
    assert (entry.pid, entry.tag, entry.error) == (4242, "train", "")
    nc = entry.neuroncore_counters
    assert nc.period == pytest.approx(2.0)
    assert sorted(nc.cores) == [0, 1, 2, 3, 4]
    for core, counters in nc.cores.items():
        assert counters.utilization == pytest.approx(0.25)
        assert counters.flops == 3_000_000_000_000
        assert counters.physical == pytest.approx(
            {f"nc_v3.{2 * core}": 0.2, f"nc_v3.{2 * core + 1}": 0.3})
    eng = entry.engine_counters.cores[0]
    assert eng.engine_utilization == pytest.approx(
        {"tensor": 0.25, "vector": 0.125, "scalar": 0.0625, "gpsimd": 0.025, "dma": 0.1875})
    assert eng.hardware_flops == 6_000_000_000_000
    assert eng.hbm_read_bytes == 2_000_000_000 and eng.hbm_write_bytes == 1_000_000_000
    assert eng.collective_time == pytest.approx(0.2)


def test_execution_counts_and_latency_percentiles_cover_the_period_only(root, runtimes):
    write_instance(root)
    rt = make(root, runtimes, 4242, "serve", [8], ring=16)
    rt.step(1.0, executions=5, latency=1.0)  # before the monitor: not in any report
    clock = Clock(START + 1)
    c = collector(root, clock)
    rt.step(1.0, executions=4, latency=0.010)
    clock.advance(1)
    stats = c.collect().runtimes[0].execution_stats
    assert stats.statuses["completed"] == 4 and sum(stats.errors.values()) == 0
    # The four latencies of the period: 10, 12.5, 15, 17.5 ms.
    assert stats.total_latency.p0 == pytest.approx(0.010)
    assert stats.total_latency.p100 == pytest.approx(0.0175)
    assert stats.total_latency.p50 == pytest.approx(0.01375)
    assert stats.device_latency.p50 == pytest.approx(0.009)
    rt.step(1.0, executions=0)
    clock.advance(1)
    idle = c.collect().runtimes[0].execution_stats
    assert idle.statuses["completed"] == 0
    assert idle.total_latency is None and idle.device_latency is None


def test_latency_percentiles_cover_every_execution_beyond_the_ring(root, runtimes):
    """More executions in a period than the ring holds: the percentiles are over all of them
    (the histograms, to within 1%), so a slow execution early in the period is still p100."""
    write_instance(root)
    rt = make(root, runtimes, 4242, "serve", [8], ring=8)
    clock = Clock(START)
    c = collector(root, clock)
    rt.step(0.5, executions=1, latency=1.0)     # one slow execution, then 20 fast ones
    rt.step(0.5, executions=20, latency=0.010)  # 10 .. 19.5 ms: more than the ring holds
    clock.advance(1)
    stats = c.collect().runtimes[0].execution_stats
    assert stats.statuses["completed"] == 21
    lat = stats.total_latency
    assert lat.p100 == pytest.approx(1.0, rel=0.011)             # the ring had lost it
    assert lat.p0 == pytest.approx(0.010, rel=0.011)
    assert lat.p50 == pytest.approx(0.010 * (1 + 10 / 20), rel=0.011)
    assert lat.p0 <= lat.p1 <= lat.p25 <= lat.p50 <= lat.p75 <= lat.p99 <= lat.p100
    assert stats.device_latency.p50 == pytest.approx(0.009, rel=0.011)
    # the next period holds only its own executions
    rt.step(1.0, executions=3, latency=0.002)
    clock.advance(1)
    stats = c.collect().runtimes[0].execution_stats
    assert stats.total_latency.p100 < 0.004 and stats.statuses["completed"] == 3


def test_null_latency_is_written_as_aws_does(root, runtimes):
    write_instance(root)
    rt = make(root, runtimes, 4242, "serve", [8])
    clock = Clock(START)
    c = collector(root, clock)
    rt.step(1.0, executions=0)     # a live runtime publishes: no executions in the period
    clock.advance(1)
    doc = orjson.loads(c.collect().to_json())
    stats = doc["neuron_runtime_data"][0]["report"]["execution_stats"]
    assert stats["latency_stats"] == {"total_latency": None, "device_latency": None}


def test_tag_filter_selects_runtimes(root, runtimes):
    write_instance(root)
    make(root, runtimes, 100, "train_llama", [0, 1])
    make(root, runtimes, 200, "serve", [4, 5])
    config = {"period": "1s", "neuron_runtimes": [
        {"tag_filter": "^train", "metrics": [{"type": "neuroncore_counters"}]}]}
    clock = Clock(START)
    c = collector(root, clock, config)
    clock.advance(1)
    report = c.collect()
    assert [r.tag for r in report.runtimes] == ["train_llama"]
    assert report.runtimes[0].memory_used is None  # only the configured group


def each_second(root, runtimes, config, look, seconds: int = 6) -> list:
    """`look(report)` of a report collected every second from one runtime stepping along."""
    write_instance(root)
    rt = make(root, runtimes, 100, "train", [0])
    clock = Clock(START)
    c = collector(root, clock, config)
    seen = []
    for _ in range(seconds):
        rt.step(1.0)
        clock.advance(1)
        seen.append(look(c.collect()))
    return seen


def test_groups_follow_their_own_periods(root, runtimes):
    config = {"period": "1s", "neuron_runtimes": [{"metrics": [
        {"type": "neuroncore_counters"}, {"type": "memory_used", "period": "2s"}]}],
        "system_metrics": [{"type": "memory_info", "period": "3s"}]}
    seen = each_second(root, runtimes, config, lambda r: (
        r.runtimes[0].neuroncore_counters is not None, r.runtimes[0].memory_used is not None,
        r.system.memory is not None))
    assert seen == [(True, True, True), (True, False, False), (True, True, False),
                    (True, False, True), (True, True, False), (True, False, False)]


def test_a_runtime_whose_groups_are_not_due_is_still_listed(root, runtimes):
    """Runtime groups every 3 s, system groups every second: the runtime is in every report,
    with an empty one in between, so that no reader takes it for gone (and drops its series)."""
    config = {"period": "1s", "neuron_runtimes": [{"period": "3s", "metrics": [
        {"type": "neuroncore_counters"}, {"type": "execution_stats"}]}],
        "system_metrics": [{"type": "vcpu_usage"}]}
    listed = each_second(root, runtimes, config, lambda r: [
        (e["pid"], bool(e["report"])) for e in orjson.loads(r.to_json())["neuron_runtime_data"]])
    assert listed == [[(100, True)], [(100, False)], [(100, False)],
                      [(100, True)], [(100, False)], [(100, False)]]


def test_a_tick_with_nothing_due_writes_no_report_though_runtimes_run(root, runtimes):
    """Runtime groups every 2 s and a system group every 3 s tick every second (their greatest
    common divisor). Counted from the first report (every group): the runtime's at 2 and 4 s,
    the system's at 3 s, nothing at 1 and 5 s, where a report of runtimes listed with empty
    reports and no system data was written (nine lines in ten at some periods)."""
    config = {"period": "2s", "neuron_runtimes": [{"metrics": [{"type": "neuroncore_counters"}]}],
              "system_metrics": [{"type": "memory_info", "period": "3s"}]}
    write_instance(root)
    rt = make(root, runtimes, 100, "train", [0])
    clock = Clock(START)
    c = collector(root, clock, config)
    owed = []
    for _ in range(6):
        rt.step(1.0)
        clock.advance(1)
        report = c.collect()
        owed.append(not c.quiet)
        if c.quiet:
            assert all(r.empty for r in report.runtimes) and not report.system.dump()
    assert owed == [True, False, True, True, True, False]


def test_memory_used_and_loaded_models(root, runtimes):
    write_instance(root)
    model = {"name": "llama", "uuid": "91f2f66e83ea419dace1da07617ad39f", "model_id": 10005,
             "subgraphs": [{"name": "sg_00", "core": 0, "device": 0,
                            "host_memory": {"application_memory": 20480, "constants": 0,
                                            "dma_buffers": 0, "tensors": 0},
                            "device_memory": {"constants": 20971520, "model_code": 29504,
                                              "runtime_memory": 0, "tensors": 0}}]}
    rt = make(root, runtimes, 100, "train", [0, 1], models=[model])
    rt.r["host_memory"] = [6996594688, 0, 1048576, 0]
    rt.r["device_memory"][0] = [193986816, 176285056, 0, 0, 20971520]
    rt.r["phase"] = 1  # executing
    rt.writer.publish()
    clock = Clock(START)
    c = collector(root, clock)
    clock.advance(1)
    mem = c.collect().runtimes[0].memory_used
    assert mem.host_bytes == 6996594688 + 1048576
    assert mem.device_bytes == 193986816 + 176285056 + 20971520
    assert mem.core_breakdown[0]["model_code"] == 176285056
    assert mem.core_breakdown[1] == dict.fromkeys(mem.core_breakdown[1], 0)
    (loaded,) = mem.loaded_models
    assert (loaded.name, loaded.model_id, loaded.is_running) == ("llama", 10005, True)
    assert loaded.subgraphs["sg_00"].device_bytes == 21001024


def test_dead_runtime_is_dropped_and_its_file_removed(root, runtimes):
    write_instance(root)
    keep = make(root, runtimes, 100, "train", [0])
    dead = make(root, runtimes, 200, "serve", [4])
    clock = Clock(START)
    c = collector(root, clock)
    clock.advance(1)
    assert [r.pid for r in c.collect().runtimes] == [100, 200]
    dead.die()
    assert dead.path.exists()
    keep.step(1.0)
    clock.advance(1)
    assert [r.pid for r in c.collect().runtimes] == [100]
    assert not dead.path.exists() and c.removed == 1


def test_corrupted_counter_file_reports_an_error_and_spares_the_others(root, runtimes):
    write_instance(root)
    good = make(root, runtimes, 100, "train", [0])
    bad = make(root, runtimes, 200, "serve", [4])
    clock = Clock(START)
    c = collector(root, clock)
    # Flip bytes inside both record slots: the checksum no longer matches.
    data = bytearray(bad.path.read_bytes())
    for i in range(len(data) - 200, len(data) - 100):
        data[i] ^= 0xFF
    with open(bad.path, "r+b") as fh:
        fh.write(data)
    good.step(1.0)
    clock.advance(1)
    report = c.collect()
    by_pid = {r.pid: r for r in report.runtimes}
    assert by_pid[200].error and "checksum" in by_pid[200].error
    assert by_pid[200].tag == "serve" and by_pid[200].neuroncore_counters is None
    assert by_pid[100].error == "" and by_pid[100].neuroncore_counters.cores[0].utilization > 0
    Report.from_json(report.to_json())  # still a valid document


def test_truncated_counter_file_reports_an_error(root, runtimes):
    write_instance(root)
    bad = make(root, runtimes, 200, "serve", [4])
    clock = Clock(START)
    c = collector(root, clock)  # holds the file mapped from now on
    os.truncate(bad.path, 100)
    clock.advance(1)
    (entry,) = c.collect().runtimes  # reading the old mapping past the end would be SIGBUS
    assert entry.pid == 200 and entry.tag == "serve"
    assert entry.error.startswith("cannot read runtime counters: runtime-200.ctr")


def test_no_instance_gives_the_real_tools_no_device_output(root, runtimes):
    make(root, runtimes, 100, "train", [0])  # counter files without an instance are ignored
    clock = Clock(START)
    c = collector(root, clock)
    clock.advance(1)
    doc = orjson.loads(c.collect().to_json())
    assert doc["neuron_runtime_data"] == []
    assert doc["system_data"]["neuron_hw_counters"]["neuron_devices"] is None
    assert doc["neuron_hardware_info"]["neuron_device_count"] == 0
    assert "logical_neuroncore_config" not in doc["neuron_hardware_info"]
    assert set(doc) == {"neuron_runtime_data", "system_data", "instance_info",
                        "neuron_hardware_info"}


def test_static_groups_always_present_and_from_the_instance(root):
    write_instance(root, "trn1.32xlarge", lnc=1)
    clock = Clock(START)
    c = collector(root, clock, {"period": "1s"})
    clock.advance(1)
    doc = orjson.loads(c.collect().to_json())
    assert doc["instance_info"]["instance_id"] == "i-0a1b2c3d4e5f60718"
    hw = doc["neuron_hardware_info"]
    assert (hw["neuron_device_type"], hw["neuroncore_version"], hw["neuron_device_count"],
            hw["neuroncore_per_device_count"]) == ("trainium1", "v2", 16, 2)
    assert "logical_neuroncore_config" not in hw  # absent on trn1, as AWS's


def test_device_groups_sum_runtimes_and_keep_idle_devices(root, runtimes):
    inst = write_instance(root)
    a = make(root, runtimes, 100, "a", [0, 1])   # device 0
    b = make(root, runtimes, 200, "b", [2, 3])   # device 0 too (4 cores per device)
    clock = Clock(START)
    c = collector(root, clock)
    for rt in (a, b):
        rt.step(1.0, power=300.0, hbm=1e9, ecc=2)
    clock.advance(1)
    system = c.collect().system
    from device_model.catalog.specs import get_instance
    dev = get_instance(inst.catalog_name).device
    shared, idle = system.device_counters.devices[0], system.device_counters.devices[5]
    # Each runtime holds 2 of device 0's 4 logical cores and reports its share's power.
    assert shared.power_watts == pytest.approx(600.0)
    assert shared.energy_joules == pytest.approx(600.0)
    assert shared.hbm_read_bytes == pytest.approx(4e9)
    assert shared.hbm_bandwidth_utilization == pytest.approx(6e9 / dev.hbm_bw)
    assert idle.power_watts == pytest.approx(dev.idle_watts) and idle.hbm_read_bytes == 0
    assert len(system.device_counters.devices) == 16
    ecc = system.hw_counters.devices
    assert ecc[0].mem_ecc_corrected == 4 and ecc[1].mem_ecc_corrected == 0


def test_report_round_trips_and_has_aws_keys(root, runtimes):
    write_instance(root)
    rt = make(root, runtimes, os.getpid(), "train", [0, 1, 2, 3])
    clock = Clock(START)
    c = collector(root, clock)
    rt.step(1.0, executions=3)
    clock.advance(1)
    line = c.collect().to_json()
    assert b"\n" not in line
    again = Report.from_json(line)
    assert again.to_json() == line
    report = orjson.loads(line)["neuron_runtime_data"][0]["report"]
    assert set(report) == {"neuroncore_counters", "execution_stats", "memory_used",
                           "neuron_runtime_vcpu_usage", "neuroncore_engine_counters"}
    assert report["neuron_runtime_vcpu_usage"]["error"] == ""  # our own pid: real psutil data


# --------------------------------------------------------------------------- properties
def _sample(wall, busy, phys, finished=0, sim=None) -> g.Sample:
    n = len(busy)
    z = np.zeros(n)
    return g.Sample(wall, wall if sim is None else sim, tuple(range(n)), g.physical_keys(tuple(range(n)), 2, "v3d"),
                    np.asarray(busy, float), np.asarray(phys, float), np.zeros((n, 5)), z, z,
                    z, z, np.zeros((n, 4)), z, z, np.zeros(6, np.int64), np.zeros(6, np.int64),
                    finished, np.zeros(0), np.zeros(0))


counters = st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(counters, counters, st.floats(0, 100, allow_nan=False))
def test_utilization_is_a_ratio_for_any_counters(before, after, dt):
    n = min(len(before), len(after))
    prev = _sample(START, before[:n], np.c_[before[:n], before[:n]])
    cur = _sample(START + dt, after[:n], np.c_[after[:n], after[:n]])
    nc = g.neuroncore_counters(prev, cur, "v3d")
    for core in nc.cores.values():
        assert 0.0 <= core.utilization <= 1.0 and core.flops >= 0
        assert all(0.0 <= v <= 1.0 for v in core.physical.values())
    assert nc.period >= 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1e-6, 10, allow_nan=False), min_size=1, max_size=40),
       st.integers(0, 60))
def test_latency_percentiles_are_ordered_and_within_range(values, new):
    ring = np.asarray(values)
    latency = g._percentiles(ring, new)
    if new == 0:
        assert latency is None
        return
    ps = [latency.p0, latency.p1, latency.p25, latency.p50, latency.p75, latency.p99,
          latency.p100]
    assert ps == sorted(ps)
    recent = ring[len(ring) - min(new, len(ring)):]
    assert ps[0] == pytest.approx(recent.min()) and ps[-1] == pytest.approx(recent.max())
    assert ps == pytest.approx(np.percentile(recent, [0, 1, 25, 50, 75, 99, 100]).tolist())


def test_a_runtime_catching_up_after_a_stall_leaves_the_other_devices_right(root, runtimes):
    """One runtime stopped for 3 s resumes: its counters cover 4 s where the others' cover 1 s.
    The group's period was the longest advance (4 s), so a busy device of the healthy runtimes
    read a quarter of its bandwidth and of its power. Each device's bandwidth is now over its
    own runtimes' time, its energy their mean power times the period, and the period the
    runtimes' median advance."""
    inst = write_instance(root)
    healthy = [make(root, runtimes, 100 + i, f"h{i}", [4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3])
               for i in range(2)]                                  # devices 0 and 1
    stalled = make(root, runtimes, 300, "s", [8, 9, 10, 11])       # device 2
    clock = Clock(START)
    c = collector(root, clock)
    for rt in (*healthy, stalled):
        rt.step(1.0, power=300.0, hbm=1e11)
    clock.advance(1)
    c.collect()
    for rt in healthy:
        rt.step(1.0, power=300.0, hbm=1e11)
    stalled.step(4.0, power=300.0, hbm=1e11)                     # its 3 s stall, caught up
    clock.advance(1)
    group = c.collect().system.device_counters
    from device_model.catalog.specs import get_instance
    dev = get_instance(inst.catalog_name).device
    assert group.period == pytest.approx(1.0)
    first = group.devices[0]
    rate = (first.hbm_read_bytes + first.hbm_write_bytes) / (dev.hbm_bw * 1.0)   # in 1 s
    assert rate > 0.1
    for d in group.devices[:3]:
        assert d.hbm_bandwidth_utilization == pytest.approx(rate), d
        assert d.energy_joules == pytest.approx(d.power_watts * group.period)
    # bytes are as counted: the stalled runtime's four seconds, the others' one
    assert group.devices[2].hbm_read_bytes == pytest.approx(4 * group.devices[0].hbm_read_bytes)


def test_partly_held_device_adds_idle_power_for_the_free_cores(root, runtimes):
    inst = write_instance(root)
    rt = make(root, runtimes, 100, "a", [4])  # one of device 1's four logical cores
    clock = Clock(START)
    c = collector(root, clock)
    rt.step(1.0, power=100.0)
    clock.advance(1)
    from device_model.catalog.specs import get_instance
    idle = get_instance(inst.catalog_name).device.idle_watts
    device = c.collect().system.device_counters.devices[1]
    assert device.power_watts == pytest.approx(100.0 + 0.75 * idle)
    assert device.energy_joules == pytest.approx(100.0 + 0.75 * idle)
    assert device.temperature_celsius == pytest.approx(40.0)  # the runtime's own estimate


def test_next_due_follows_the_shortest_period(root, runtimes):
    write_instance(root)
    rt = make(root, runtimes, 100, "a", [0])
    config = {"period": "2s", "neuron_runtimes": [{"metrics": [
        {"type": "neuroncore_counters", "period": "500ms"}]}],
        "system_metrics": [{"type": "memory_info"}]}
    clock = Clock(START)
    c = collector(root, clock, config)
    assert c.next_due() == 0.0  # nothing collected yet
    rt.step(0.1)
    c.collect()
    assert c.next_due() == pytest.approx(0.5)
    clock.advance(0.5)
    rt.step(0.5)
    report = c.collect()
    assert report.runtimes and report.system.memory is None
    assert c.next_due() == pytest.approx(0.5)


def test_utilization_is_measured_in_device_time_when_the_simulation_is_sped_up():
    # 1 wall second at speed 10 simulates 10 device seconds; 5 of them busy is 50%, not 500%,
    # and the period is those 10 simulated seconds.
    prev = _sample(100.0, [0.0], [[0.0, 0.0]], sim=0.0)
    cur = _sample(101.0, [5.0], [[5.0, 4.0]], sim=10.0)
    counters = g.neuroncore_counters(prev, cur, "v3d")
    assert counters.period == pytest.approx(10.0)
    assert counters.cores[0].utilization == pytest.approx(0.5)
    assert counters.cores[0].physical["nc_v3.1"] == pytest.approx(0.4)


def test_every_counter_group_covers_simulated_time_when_sped_up(root, runtimes):
    """1 wall second at speed 10: each counter group's period is the 10 simulated seconds its
    counts cover, so energy / period is the power and bytes / period a bandwidth."""
    inst = write_instance(root)
    rt = make(root, runtimes, 100, "a", [0, 1, 2, 3])   # all of device 0
    clock = Clock(START)
    c = collector(root, clock)
    rt.step(1.0, power=300.0, hbm=1e10, speed=10)
    clock.advance(1)
    report = c.collect()
    (entry,) = report.runtimes
    for group in (entry.neuroncore_counters, entry.execution_stats, entry.engine_counters,
                  report.system.device_counters, report.system.hw_counters):
        assert group.period == pytest.approx(10.0)
    assert entry.memory_used.period == pytest.approx(1.0)   # a reading, on the wall clock
    eng = entry.engine_counters.cores[0]
    assert eng.collective_time == pytest.approx(1.0) and eng.hardware_flops == 10 ** 13
    from device_model.catalog.specs import get_instance
    dev = get_instance(inst.catalog_name).device
    held, idle = report.system.device_counters.devices[0], report.system.device_counters.devices[1]
    assert held.energy_joules == pytest.approx(300.0 * 10)
    assert held.hbm_bandwidth_utilization == pytest.approx(6e11 / (dev.hbm_bw * 10))
    assert idle.energy_joules == pytest.approx(dev.idle_watts * 10)


def test_binned_percentiles_take_the_rings_exact_values_where_it_has_them():
    """Timed-out executions all last the timeout: the histogram's bin says 9.91 s for 10 s
    (within its 1%); the ring's latencies in that bin give the exact 10 s back."""
    from device_model.runtime.layout import latency_bin_values, latency_bins
    values = latency_bin_values()
    counts = np.zeros(values.size, dtype=np.int64)
    counts[latency_bins(np.array([0.000053]))[0]] = 9097
    counts[latency_bins(np.array([10.0]))[0]] = 99
    ring = np.array([0.000053] * 6 + [10.0] * 2)
    exact = g._binned_percentiles(counts, values, ring)
    assert (exact.p0, exact.p50, exact.p99, exact.p100) == (0.000053, 0.000053, 10.0, 10.0)
    binned = g._binned_percentiles(counts, values, ring[:0])
    assert binned.p100 == pytest.approx(10.0, rel=0.0101) and binned.p100 != 10.0
    assert g._binned_percentiles(np.zeros_like(counts), values, ring) is None
