"""The runtime in-process, driven through simulated time: phases, executions, faults, power,
memory and loaded models, as a reader sees them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from device_model import instance
from device_model.errors import SpecError
from device_model.runtime.faults import parse_fault
from device_model.runtime.apps import default_apps, format_cores, parse_app, parse_cores
from device_model.runtime.process import Runtime, RuntimeConfig
from device_model.runtime.segments import CHECKPOINT_EVERY_S
from device_model.runtime.shm import list_runtimes


@pytest.fixture
def root(tmp_path: Path) -> Path:
    d = tmp_path / "rt"
    d.mkdir(mode=0o700)
    return d


def _runtime(root, workload="matmul:m=2048,k=2048,n=2048", cores=(0, 1, 2, 3), faults=(), **kw):
    cfg = RuntimeConfig(instance="trn2.48xlarge", workload=workload, cores=cores, tag="t", root=root,
                        faults=tuple(parse_fault(f) for f in faults), **kw)
    return Runtime(cfg, pid=31337, wall_clock=lambda: 1000.0)


def _read(root):
    [h] = list_runtimes(root)
    return h.read()


def test_loop_runtime_counts_executions_and_utilisation(root):
    rt = _runtime(root)
    s0 = _read(root)
    assert s0.phase == "starting" and s0.sim_time == 0.0
    rt.advance(30.0)
    rt.publish()
    s = _read(root)
    assert s.sim_time == pytest.approx(30.0)
    util = s.core_busy_s / s.sim_time
    assert np.all((0.5 < util) & (util <= 1.0))
    assert s.exec_status["completed"] > 1000
    assert sum(s.errors.values()) == 0
    assert s.latency_count > 0 and np.all(s.latency_total >= s.latency_device)
    assert s.engine_active_s[:, :, 0].max() <= s.core_busy_s.max() + 1e-9
    assert s.hbm_read_bytes.sum() > 0 and s.dev_hbm_read_bytes.sum() == pytest.approx(s.hbm_read_bytes.sum())
    dev = rt.inst.device
    share = 4 * 2 / dev.physical_cores
    assert share * dev.idle_watts < s.dev_power_w[0] <= share * dev.tdp_watts
    assert s.dev_temperature_c[0] > dev.ambient_c
    assert s.dev_energy_j[0] > 30 * share * dev.idle_watts
    assert s.device_memory[:, 0].min() == 2048 * 2048 * 2          # the weights
    assert s.host_memory["dma_buffers"] == 4 << 20 and s.host_memory["application_memory"] > 0
    [model] = s.models
    assert [sg.core for sg in model.subgraphs] == [0, 1, 2, 3]
    assert {sg.device for sg in model.subgraphs} == {0}
    rt.close()
    assert list_runtimes(root) == []


def test_same_seed_same_counters(root, tmp_path):
    other = tmp_path / "rt2"
    other.mkdir(mode=0o700)
    a = _runtime(root, faults=("numerical@rate=0.01",), seed=5)
    b = _runtime(other, faults=("numerical@rate=0.01",), seed=5)
    for t in (3.0, 7.5, 20.0):
        a.advance(t)
        b.advance(t)
    a.publish()
    b.publish()
    sa, sb = _read(root), _read(other)
    assert sa.exec_status == sb.exec_status and sa.errors["numerical"] > 0
    assert np.array_equal(sa.latency_total, sb.latency_total)
    a.close()
    b.close()


def test_timed_faults_reach_counters(root):
    rt = _runtime(root, faults=("mem_ecc_uncorrected@5s,device=0", "sram_ecc_corrected@every=2s",
                                "numerical@6s", "incorrect_input@7s", "failed_to_queue@8s"))
    rt.advance(10.0)
    rt.publish()
    s = _read(root)
    ecc = dict(zip(("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"),
                   s.dev_ecc[0].tolist()))
    assert ecc["mem_ecc_uncorrected"] == 1 and ecc["sram_ecc_corrected"] == 5
    assert s.exec_status["completed_with_err"] == 1 and s.errors["hardware"] == 1
    assert s.exec_status["completed_with_num_err"] == 1 and s.errors["numerical"] == 1
    assert s.exec_status["incorrect_input"] == 1 and s.exec_status["failed_to_queue"] == 1
    rt.close()


def test_timeout_hangs_the_core(root):
    rt = _runtime(root, faults=("timeout@3s",), exec_timeout_s=4.0)
    rt.advance(3.2)
    before = _snapshot_after(rt, root)
    rt.advance(5.0)
    mid = _snapshot_after(rt, root)
    assert mid.phase == "timeout"
    assert mid.exec_status["completed"] == before.exec_status["completed"] or \
        mid.exec_status["completed"] - before.exec_status["completed"] < 50
    assert mid.engine_active_s[0, 0, 0] - before.engine_active_s[0, 0, 0] < 0.2
    rt.advance(10.0)
    end = _snapshot_after(rt, root)
    assert end.exec_status["timed_out"] == 1 and end.errors["transient"] == 1
    rt.close()


def _snapshot_after(rt, root):
    rt.publish()
    return _read(root)


def test_training_has_data_loading_and_checkpoint_phases(root):
    rt = _runtime(root, workload="demo-train:layers=1,hidden=512,seq=256", cores=tuple(range(8)))
    phases = set()
    t = 0.0
    while t < CHECKPOINT_EVERY_S + 12:
        t += 0.05 if t < 5 else 0.5
        rt.advance(t)
        phases.add(rt.phase)
    assert {"starting", "executing", "checkpoint"} <= phases
    rt.publish()
    s = _read(root)
    assert s.dma_bytes[:, 1].min() > 0         # the checkpoint streamed state out (output queue)
    assert s.collective_bytes.min() > 0        # gradients were all-reduced
    rt.close()


def test_inference_service_idles_between_requests(root):
    rt = _runtime(root, workload="demo-serve:layers=1,hidden=512,seq=128", cores=(60, 61, 62, 63))
    rt.advance(60.0)
    rt.publish()
    s = _read(root)
    util = s.core_busy_s / s.sim_time
    assert np.all(util < 0.9) and np.all(util > 0.05)
    assert s.devices == (15,)
    rt.close()


def test_model_workload_from_library(root):
    rt = _runtime(root, workload="llama3-8b:mode=decode,batch=1,in=128,out=16", cores=tuple(range(48, 64)))
    rt.advance(20.0)
    rt.publish()
    s = _read(root)
    assert s.exec_status["completed"] > 16
    assert s.device_memory[:, 0].min() > 0 and s.models[0].name == "llama3-8b"
    rt.close()


def test_core_lists_and_apps():
    assert parse_cores("0-3", 64) == (0, 1, 2, 3)
    assert parse_cores("4,5", 64) == (4, 5)
    assert parse_cores("0-1, 6-7", 8) == (0, 1, 6, 7)
    assert format_cores((0, 1, 2, 3, 6, 8, 9)) == "0-3,6,8-9"
    for bad, needle in (("0-99", "allowed: 0-63"), ("3-1", "end before start"), ("a", "bad core list"),
                        ("1,1", "twice"), ("\uff10-\uff13", "bad core list")):  # full-width digits
        with pytest.raises(SpecError, match=needle):
            parse_cores(bad, 64)
    app = parse_app("svc=matmul:m=128,k=128,n=128@4-7", 64)
    assert (app.tag, app.workload, app.cores) == ("svc", "matmul:m=128,k=128,n=128", (4, 5, 6, 7))
    with pytest.raises(SpecError, match="TAG=WORKLOAD_SPEC@CORES"):
        parse_app("matmul@0", 64)
    with pytest.raises(SpecError, match="unknown workload"):
        parse_app("x=nosuch@0", 64)
    apps = default_apps(instance("trn2.48xlarge"))
    assert [a.tag for a in apps] == ["llama-train", "llama-serve"]
    assert apps[0].cores == tuple(range(48)) and apps[1].cores == tuple(range(48, 64))


def test_the_default_apps_fall_back_to_the_demo_transformers_where_llama_does_not_fit():
    """trn1.2xlarge has one core per app: Llama 3 8B fits neither, and `neuron-sim start`
    without --app used to stop at 'llama3-8b training does not fit'."""
    apps = default_apps(instance("trn1.2xlarge"))
    assert [(a.tag, a.workload.split(":")[0], a.cores) for a in apps] == [
        ("demo-train", "demo-train", (0,)), ("demo-serve", "demo-serve", (1,))]
    assert [a.tag for a in default_apps(instance("trn1.32xlarge"))] == ["llama-train",
                                                                          "llama-serve"]


def test_an_unknown_app_workload_lists_what_a_runtime_can_run():
    with pytest.raises(SpecError, match="unknown workload 'nosuch'; allowed: .*demo-serve, "
                                        "demo-train"):
        parse_app("x=nosuch@0", 64)


def test_workload_too_big_for_hbm(root):
    with pytest.raises(SpecError, match="GiB"):
        _runtime(root, workload="demo-train:layers=8,hidden=16384,seq=8192", cores=(0,))


def test_a_step_of_a_trillion_micro_batches_runs_in_closed_form(root):
    """Its step profile repeated the micro-batch's execution 2.7e11 times into a list (a
    MemoryError); now the step's profile is found point by point and its latencies sampled from
    the first few executions, so the job starts and its first micro-batches complete."""
    rt = _runtime(root, workload="llama2-7b:seq=1024,gbs=1099511627776", cores=tuple(range(8)))
    assert rt.app.executions_per_step > 10 ** 11
    rt.advance(60.0)
    rt.publish()
    s = _read(root)
    assert s.sim_time == pytest.approx(60.0) and sum(s.errors.values()) == 0
    assert np.all(s.core_busy_s > 0)
    rt.close()


def test_a_demo_program_of_absurd_depth_is_refused_before_any_child_builds_it():
    with pytest.raises(SpecError, match="at most 1024"):
        parse_app("t=demo-train:layers=100000000@0-7", 64)


def test_a_fast_simulation_covers_its_speed_each_tick(root):
    """At --speed 1e6 a 0.1 s tick is 1e5 simulated seconds: a fixed 600 s catch-up cap had
    held every tick to 600 (about 6,000x whatever the speed asked)."""
    fast = _runtime(root, speed=1e6, interval=0.1)
    fast.advance(50_000.0)
    assert fast.sim == pytest.approx(50_000.0)
    fast.close()
    slow = _runtime(root, speed=1.0, interval=0.1)
    slow.advance(50_000.0)                  # a stalled process at speed 1 catches up 600 s
    assert slow.sim == pytest.approx(600.0)
    slow.close()


def test_a_tick_that_runs_out_of_wall_time_publishes_what_it_reached_and_goes_on(root):
    """At --speed 50000 one tick walked thousands of executions for 1.5-3 s of wall time, so a
    collector's 2 s staleness limit read the live runtime as hung. A tick stops at the end of
    the execution its wall budget runs out in; the next one goes on from there, and the
    counters are those of one long advance."""
    ticks = iter(range(10 ** 9))
    clock = lambda: float(next(ticks))          # noqa: E731 (one "second" per look)
    budgeted = _runtime(root, speed=1e6, interval=0.1)
    budgeted.advance(5_000.0, budget_s=200.0, clock=clock)
    assert 0 < budgeted.sim < 5_000.0
    calls = 1
    while budgeted.sim < 5_000.0:
        budgeted.advance(5_000.0, budget_s=200.0, clock=clock)
        calls += 1
    assert calls > 2
    kept = ("exec_status", "core_busy_s", "flops", "hbm_read_bytes", "engine_active_s")
    parts = {k: np.array(budgeted.counters.r[k], dtype=float) for k in kept}
    budgeted.close()
    whole = _runtime(root, speed=1e6, interval=0.1)
    whole.advance(5_000.0)
    assert whole.sim == pytest.approx(budgeted.sim)
    for k in kept:
        assert np.allclose(np.array(whole.counters.r[k], dtype=float), parts[k], rtol=1e-9), k
    assert parts["exec_status"].sum() > 0
    whole.close()
