"""Counters accumulated from executed Runs: monotonic, utilisation within [0, 1], bytes and FLOPs
conserved between the instruction timeline and the counters; the power model's invariants."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from device_model import Program, instance
from device_model.runtime.counters import (NQ, Q_BUSY, Q_CC_BYTES, Q_DMA, Q_ENGINE, Q_FLOPS, Q_HBM_R, Q_HBM_W,
                                   Q_INSTR, Counters, ExecutionProfile)
from device_model.runtime.power import PowerModel
from device_model.runtime.layout import record_dtype
from device_model.runtime.segments import Segment

INST = instance("trn2.48xlarge", lnc=2)


def _program(kind: int, size: int) -> Program:
    p = Program()
    if kind == 0:
        p.matmul(128 * size, 512, 512 * size, "bf16")
    elif kind == 1:
        p.activation("gelu", 1 << (14 + size), "bf16")
        p.dma(1 << (16 + size), direction="store")
    else:
        p.layernorm(256 * size, 1024, rms=True)
        p.softmax(128 * size, 512)
        p.matmul(128, 1024, 1024)
    return p


@pytest.fixture(scope="module")
def matmul_run():
    return INST.run(_program(0, 4))


def test_profile_totals_match_timeline(matmul_run):
    tl = matmul_run.timeline
    prof = ExecutionProfile.from_run(matmul_run)
    t = prof.totals
    assert t[Q_BUSY] == pytest.approx(tl.wall)
    assert t[Q_FLOPS.start] == pytest.approx(tl.total("flops"))
    assert t[Q_FLOPS.start + 1] == pytest.approx(tl.total("hw_flops"))
    assert t[Q_HBM_R] == pytest.approx(tl.total("hbm_r"))
    assert t[Q_HBM_W] == pytest.approx(tl.total("hbm_w"))
    assert t[Q_INSTR].sum() <= len(tl)
    active = tl.engine_active()
    assert t[Q_ENGINE.start] == pytest.approx(active["tensor"])
    assert t[Q_ENGINE.stop - 1] == pytest.approx(matmul_run.timeline.dma_ring_active())
    dma = tl.dma_bytes_by_queue()
    assert t[Q_DMA].sum() == pytest.approx(sum(dma.values()))
    assert np.all(np.diff(prof.cum, axis=0) >= -1e-9)


@settings(max_examples=25, deadline=None)
@given(kind=st.integers(0, 2), size=st.integers(1, 3),
       cuts=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12), executions=st.integers(1, 50))
def test_counters_only_grow_and_conserve_bytes(kind, size, cuts, executions):
    run = INST.run(_program(kind, size))
    prof = ExecutionProfile.from_run(run)
    period = prof.wall * 1.3
    seg = Segment("executing", "idle", executions * period, prof, executions, period)
    rec = np.zeros((), dtype=record_dtype(3, 2, 1, 16))
    counters = Counters(rec, 2, np.zeros(3, dtype=np.int64))
    taus = sorted(c * seg.duration for c in cuts) + [seg.duration]
    prev_tau, prev = 0.0, rec.copy()
    for tau in taus:
        counters.add_activity(seg.cumulative(tau) - seg.cumulative(prev_tau))
        for name in ("core_busy_s", "engine_active_s", "instructions", "flops", "hbm_read_bytes",
                     "dma_bytes", "dev_hbm_write_bytes"):
            assert np.all(rec[name] >= prev[name] - 1e-6), name
        elapsed = max(tau, 1e-12)
        assert np.all(rec["core_busy_s"] <= elapsed * (1 + 1e-9))
        assert np.all(rec["engine_active_s"] <= rec["phys_busy_s"][..., None] * (1 + 1e-9) + 1e-12)
        prev_tau, prev = tau, rec.copy()
    tl = run.timeline
    # Bytes and FLOPs are conserved: every core holds `executions` x the timeline, scaled to LNC=2.
    assert rec["hbm_read_bytes"] == pytest.approx(np.full(3, executions * tl.total("hbm_r") * 2))
    assert rec["flops"][:, 0] == pytest.approx(np.full(3, executions * tl.total("flops") * 2))
    assert rec["dev_hbm_read_bytes"][0] == pytest.approx(3 * executions * tl.total("hbm_r") * 2)
    util = rec["core_busy_s"] / seg.duration
    assert np.all((0 <= util) & (util <= 1))
    assert util[0] == pytest.approx(1 / 1.3)
    assert seg.completions(seg.duration) == executions


def test_concat_preserves_totals(matmul_run):
    a = ExecutionProfile.from_run(matmul_run)
    b = ExecutionProfile.from_run(INST.run(_program(1, 2)))
    both = ExecutionProfile.concat([(a, 2), (b, 3)], gap=1e-4)
    assert both.wall == pytest.approx(2 * a.wall + 3 * b.wall + 5e-4)
    assert both.totals == pytest.approx(2 * a.totals + 3 * b.totals)
    assert np.all(np.diff(both.cum, axis=0) >= -1e-6)


def test_negative_delta_rejected():
    rec = np.zeros((), dtype=record_dtype(1, 1, 1, 4))
    with pytest.raises(ValueError):
        Counters(rec, 1, np.zeros(1, dtype=np.int64)).add_activity(-np.ones(NQ))


def test_collective_bytes_counted():
    from device_model import CollectiveGroup
    p = Program()
    p.collective("all_reduce", 64 << 20, CollectiveGroup(ranks=8, ranks_per_device=4, devices=2))
    prof = ExecutionProfile.from_run(INST.run(p))
    assert prof.totals[Q_CC_BYTES] > 0
    assert prof.totals[Q_DMA.stop - 1] >= prof.totals[Q_CC_BYTES]


@settings(max_examples=50, deadline=None)
@given(activity=st.lists(st.floats(0.0, 1.0), min_size=5, max_size=5), hbm=st.floats(0.0, 1.0),
       cores=st.integers(1, 8))
def test_power_between_idle_and_tdp(activity, hbm, cores):
    dev = INST.device
    pm = PowerModel(dev)
    dt = 2.0
    engine_s = np.array([activity]) * dt * cores
    hbm_bytes = np.array([hbm * dt * cores * dev.hbm_bw / dev.physical_cores])
    energy = pm.energy(dt, engine_s, hbm_bytes, np.array([cores]))
    share = cores / dev.physical_cores
    watts = pm.device_power(energy / dt, np.array([share]))
    assert dev.idle_watts - 1e-9 <= watts[0] <= dev.tdp_watts + 1e-9
    temp = pm.step_temperature(np.array([dev.ambient_c]), watts, 1e6)
    assert temp[0] == pytest.approx(pm.steady_temperature(watts)[0])
    assert 0.0 <= pm.thermal_throttle(temp)[0] <= 1.0


def test_concat_repeats_in_closed_form(matmul_run):
    """Three executions as one part equal three parts of one; a trillion cost what one does."""
    a = ExecutionProfile.from_run(matmul_run)
    whole = ExecutionProfile.concat([(a, 3)], gap=2e-5)
    parts = ExecutionProfile.concat([(a, 1), (a, 1), (a, 1)], gap=2e-5)
    assert whole.cum == pytest.approx(parts.cum) and whole.grid == pytest.approx(parts.grid)
    period = a.wall + 2e-5
    half = whole.cum[len(whole.grid) // 2]             # half way: one execution and a half period
    assert half == pytest.approx(a.totals + a.at(0.5 * period), rel=1e-9, abs=1e-9)
    huge = ExecutionProfile.concat([(a, 10 ** 12)], gap=2e-5)
    assert huge.wall == pytest.approx(10 ** 12 * (a.wall + 2e-5))
    assert huge.totals == pytest.approx(10 ** 12 * a.totals)
    assert np.all(np.diff(huge.cum, axis=0) >= -1e-6 * np.abs(huge.cum).max())


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1e-6, max_value=1e5, allow_nan=False))
def test_a_latency_bins_to_within_one_percent(seconds):
    from device_model.runtime.layout import latency_bin_values, latency_bins
    value = latency_bin_values()[latency_bins(np.array([seconds]))[0]]
    assert value == pytest.approx(seconds, rel=0.0101)


def test_latency_histograms_count_every_execution_the_ring_samples():
    """A tick's 10,000 executions, sampled by 1,024 latencies: the ring keeps its size, the
    histograms count all 10,000 (in equal shares), and never the ring's sample count."""
    from device_model.runtime.layout import latency_bins
    r = np.zeros((), dtype=record_dtype(1, 1, 1, 64))
    c = Counters(r, 1, np.array([0]))
    total = np.linspace(0.01, 0.02, 1024)
    c.add_latencies(total, total * 0.9, 10_000)
    assert int(r["latency_count"]) == 64 and int(r["latency_executions"]) == 10_000
    assert int(r["latency_hist_total"].sum()) == 10_000 == int(r["latency_hist_device"].sum())
    occupied = np.flatnonzero(r["latency_hist_total"])
    assert occupied.min() == latency_bins(np.array([0.01]))[0]
    assert occupied.max() == latency_bins(np.array([0.02]))[0]
    c.add_latencies([0.5], [0.4])                       # one value: one execution by default
    assert int(r["latency_executions"]) == 10_001
    assert r["latency_hist_total"][latency_bins(np.array([0.5]))[0]] == 1
