"""Collectives and compute DMA share a core's DMA engines and HBM (C4): compute transfers that
overlap a collective run at the bandwidth it leaves them; engines without DMA do not notice."""
from __future__ import annotations

import io
import re
import tokenize
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from device_model import CollectiveGroup, Program, instance
from device_model.engine.contention import compute_dma_floor
from device_model.core import Lowerer
from device_model.catalog.costs import DEFAULT_COSTS, CostParams
from device_model.engine.isa import L_ACT, L_CC, L_DMA, L_DVE, OP
from device_model.catalog.overrides import apply, load_overrides
from device_model.engine.schedule import Scheduler
from device_model.lowering.stages import INPUTS, Dep, LoweredOp, Stage
from device_model.engine.timeline import Timeline

TRN2 = instance("trn2.48xlarge", lnc=1)
BIG_ALL_REDUCE = (256 << 20, CollectiveGroup(16, 1, 16))   # 16 chips: bandwidth-bound, long
ELEMENTS = 64 << 20                                        # a DMA-bound residual add


def elementwise_program(collective: tuple | None) -> Program:
    """A tiny producer, then (optionally) an all-reduce of its output, and an elementwise op
    that also needs only the producer, so it may run while the all-reduce is in flight."""
    p = Program()
    src = p.activation("exp", 128 * 64, name="producer")
    if collective is not None:
        p.collective("all_reduce", *collective, deps=(src,), dtype="fp32")
    p.binary("add", ELEMENTS, "bf16", deps=(src,), name="residual")
    return p


def op_span(tl: Timeline, name: str) -> float:
    i = tl.op_names.index(name)
    return float(tl.op_end[i] - tl.op_start[i])


def test_dma_bound_op_beside_a_large_all_reduce_takes_longer_than_alone():
    alone = TRN2.run(elementwise_program(None)).timeline
    beside = TRN2.run(elementwise_program(BIG_ALL_REDUCE)).timeline
    assert op_span(beside, "residual") > 1.5 * op_span(alone, "residual")
    # its transfers were stretched, its VectorE instructions were not
    i, j = beside.op_names.index("residual"), alone.op_names.index("residual")
    assert _busy(beside, i, L_DMA) > 1.5 * _busy(alone, j, L_DMA)
    assert _busy(alone, j, L_DVE) > 0
    assert _busy(beside, i, L_DVE) == pytest.approx(_busy(alone, j, L_DVE))


def _busy(tl: Timeline, op: int, lane: int) -> float:
    c = tl.columns
    sel = (c["op"] == op) & (c["lane"] == lane)
    return float((c["end"][sel] - c["start"][sel]).sum())


def test_slowdown_grows_with_the_collectives_bandwidth_share():
    spans = []
    for nbytes in (1 << 10, 8 << 20, 256 << 20):
        tl = TRN2.run(elementwise_program((nbytes, CollectiveGroup(16, 1, 16)))).timeline
        spans.append(op_span(tl, "residual"))
    assert spans[0] < spans[1] < spans[2]


def test_bytes_flops_and_instructions_are_conserved_under_contention():
    alone = TRN2.run(elementwise_program(None)).timeline
    beside = TRN2.run(elementwise_program(BIG_ALL_REDUCE)).timeline
    i, j = beside.op_names.index("residual"), alone.op_names.index("residual")
    a, b = alone.per_op(), beside.per_op()
    for q in ("flops", "hbm_r", "hbm_w", "sbuf_r", "sbuf_w", "instructions"):
        assert b[q][i] == pytest.approx(a[q][j])


def test_transfers_inside_a_collective_run_at_the_bandwidth_it_leaves():
    """Fully inside the all-reduce, a transfer takes dur / (1 - loss); loss = min(share, 16/17)."""
    lower = Lowerer(TRN2.context())
    p = elementwise_program(BIG_ALL_REDUCE)
    share = lower(1, p.ops[1]).stages[0].dma_share
    loss = min(share, 1 - compute_dma_floor(DEFAULT_COSTS))
    full = lower(2, p.ops[2]).stages
    full_dur = np.concatenate([s.dur for s in full if s.lane == L_DMA and not s.deferred])
    tl = TRN2.run(p).timeline
    c = tl.columns
    cc = c["lane"] == L_CC
    inside = ((c["op"] == 2) & (c["lane"] == L_DMA) & (c["opcode"] == OP["DMA_LOAD"])
              & (c["start"] >= c["start"][cc].min()) & (c["end"] <= c["end"][cc].max()))
    assert inside.sum() >= 10
    took = (c["end"] - c["start"])[inside]
    np.testing.assert_allclose(took, full_dur[: took.size] / (1 - loss), rtol=1e-9)


def _share(nbytes: int, group: CollectiveGroup, inst=TRN2) -> float:
    p = Program()
    p.collective("all_reduce", nbytes, group, dtype="fp32")
    return Lowerer(inst.context())(0, p.ops[0]).stages[0].dma_share


def test_a_collectives_share_follows_its_traffic_rate():
    """A bandwidth-bound all-reduce on 16 chips moves its bytes at the calibrated per-rank rate
    (the NeuronCore generation's cc_dma_fraction of the DMA bandwidth), each read from and
    written to HBM: twice that share of the core's DMA rate. A latency-bound one barely registers; a 'collective' of one
    rank moves nothing. At LNC=2 a rank has two cores' DMA engines and spreads its traffic over
    both: the same share of each."""
    big = _share(*BIG_ALL_REDUCE)
    assert big == pytest.approx(2 * DEFAULT_COSTS.cc_fraction(TRN2.device), rel=0.05)
    assert _share(1 << 10, CollectiveGroup(16, 1, 16)) < 0.01
    assert _share(1 << 20, CollectiveGroup(1)) == 0.0
    lnc2 = instance("trn2.48xlarge", lnc=2)
    assert _share(256 << 20, CollectiveGroup(16, 1, 16), lnc2) == pytest.approx(big, rel=0.05)


# --- scheduler level: ops built by hand -------------------------------------------------------

def _collective_op(index: int, dur: np.ndarray, share: float) -> LoweredOp:
    stage = Stage(L_CC, OP["ALL_REDUCE"], dur, (Dep(INPUTS),), 0.0, dma_share=share)
    return LoweredOp(index, "all_reduce", "collective", "forward", (), [stage])


def _compute_op(index: int, lane: int, dur: np.ndarray, deps: tuple[int, ...]) -> LoweredOp:
    opcode = OP["DMA_LOAD"] if lane == L_DMA else OP["ACTIVATE"]
    stage = Stage(lane, opcode, dur, (Dep(INPUTS),), 0.0)
    return LoweredOp(index, "op", "activation", "forward", deps, [stage])


def _schedule(ops: list[LoweredOp]) -> Scheduler:
    sched = Scheduler(DEFAULT_COSTS)
    sched.run(ops)
    sched.finish()
    return sched


def test_an_op_without_dma_is_unaffected_by_a_collective():
    act = np.full(500, 2e-6)
    with_cc = _schedule([_compute_op(0, L_ACT, np.array([1e-7]), ()),
                         _collective_op(1, np.full(4, 1e-3), 0.99),
                         _compute_op(2, L_ACT, act, (0,))])
    alone = _schedule([_compute_op(0, L_ACT, np.array([1e-7]), ()),
                       _compute_op(1, L_ACT, act, (0,))])
    got, base = with_cc.placed[-1], alone.placed[-1]
    np.testing.assert_array_equal(got.start, base.start)
    np.testing.assert_array_equal(got.end, base.end)


def test_a_collective_is_not_slowed_by_compute_dma():
    cc = np.full(4, 1e-3)
    sched = _schedule([_compute_op(0, L_ACT, np.array([1e-7]), ()),
                       _collective_op(1, cc, 0.5),
                       _compute_op(2, L_DMA, np.full(1000, 1e-5), (0,))])
    placed = next(p for p in sched.placed if p.stage.lane == L_CC)
    np.testing.assert_allclose(placed.end - placed.start, cc)


def _reference_ends(dur, ready, lane_free, intervals, floor):
    """The obvious loop: each transfer integrates the available rate from its start."""
    edges = sorted({t for s, e, _ in intervals for t in (s, e)})

    def rate(t):
        for s, e, share in intervals:
            if s <= t < e:
                return 1.0 - min(share, 1.0 - floor)
        return 1.0

    prev, out = lane_free, []
    for w, r in zip(dur, ready):
        t = max(prev, r)
        while w > 0:
            nxt = next((x for x in edges if x > t), np.inf)
            a = rate(t)
            if w <= a * (nxt - t):
                t, w = t + w / a, 0.0
            else:
                w -= a * (nxt - t)
                t = nxt
        prev = t
        out.append(t)
    return np.array(out)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-6, 1e-4), st.floats(0, 2e-4), st.floats(0, 1)),
                min_size=1, max_size=4),
       st.lists(st.tuples(st.floats(1e-7, 5e-5), st.floats(0, 1e-3)), min_size=1, max_size=60))
def test_vectorised_contended_lane_matches_the_obvious_loop(collectives, transfers):
    """Collectives of random length, gap and share; then DMA transfers whose ready times come
    from a VectorE stage (per-instruction semaphores)."""
    ops = [_compute_op(0, L_ACT, np.array([1e-9]), ())]
    for dur, gap, share in collectives:
        ops.append(_compute_op(len(ops), L_ACT, np.array([gap + 1e-9]), (len(ops) - 1,)))
        ops.append(_collective_op(len(ops), np.array([dur]), share))
    dma_dur = np.array([d for d, _ in transfers])
    ready_gaps = np.array([g for _, g in transfers])
    wait = Stage(L_ACT, OP["ACTIVATE"], ready_gaps + 1e-9, (Dep(INPUTS),), 0.0)
    load = Stage(L_DMA, OP["DMA_LOAD"], dma_dur, (Dep(0, index=np.arange(dma_dur.size)),), 0.0)
    ops.append(LoweredOp(len(ops), "op", "activation", "forward", (0,), [wait, load]))
    sched = _schedule(ops)
    cc = [(float(p.start[0]), float(p.end[0]), p.stage.dma_share)
          for p in sched.placed if p.stage.lane == L_CC]
    act, dma = sched.placed[-2], sched.placed[-1]
    assert dma.stage.lane == L_DMA
    want = _reference_ends(dma_dur, act.end, 0.0, cc, compute_dma_floor(DEFAULT_COSTS))
    np.testing.assert_allclose(dma.end, want, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(dma.end - dma.start, dma.stage.dur, rtol=1e-12, atol=1e-15)


# --- constants --------------------------------------------------------------------------------

def test_packet_sizes_set_the_bandwidth_compute_dma_keeps():
    assert compute_dma_floor(DEFAULT_COSTS) == pytest.approx(4 / (4 + 64))
    even = replace(DEFAULT_COSTS, cc_dma_packet_bytes=DEFAULT_COSTS.dma_packet_bytes)
    assert compute_dma_floor(even) == pytest.approx(0.5)
    # a collective that claims the whole DMA rate, so the packet floor is what compute keeps
    hungry = replace(DEFAULT_COSTS, cc_dma_fraction=0.5, cc_dma_fraction_v3=0.5)
    spans = {}
    for label, costs in (("default", hungry), ("even", replace(hungry, cc_dma_packet_bytes=
                                                                 hungry.dma_packet_bytes))):
        inst = instance("trn2.48xlarge", lnc=1, costs=costs)
        spans[label] = op_span(inst.run(elementwise_program(BIG_ALL_REDUCE)).timeline, "residual")
    assert spans["even"] < spans["default"]


def test_packet_sizes_are_overridable_from_a_file(tmp_path):
    path = tmp_path / "over.toml"
    path.write_text("[costs]\ncc_dma_packet_bytes = 4096\ndma_packet_bytes = 8192\n")
    costs = apply(load_overrides(path)).costs
    assert (costs.cc_dma_packet_bytes, costs.dma_packet_bytes) == (4096, 8192)
    assert compute_dma_floor(costs) == pytest.approx(2 / 3)


LABEL = re.compile(r"^(A[1-6]|N[1-9]'?|P[1-3]|C[1-4]|derived|assumption)\b")


def test_every_cost_constant_names_its_source():
    import device_model.catalog.costs as module
    text = Path(module.__file__).read_text(encoding="utf-8")
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                if tok.type == tokenize.COMMENT}
    lines = text.splitlines()
    names = {f.name for f in fields(CostParams)}
    sources = {}
    for number, line in enumerate(lines, start=1):
        m = re.match(r"\s+(\w+): \w+ = ", line)
        if m and m.group(1) in names:
            sources[m.group(1)] = comments.get(number, "")
    assert set(sources) == names
    assert [n for n, s in sources.items() if not LABEL.match(s)] == []


def test_the_collective_share_is_per_neuroncore_generation(tmp_path):
    """trn1 (NC-v2) moves collective data at the C1 share, trn2 (NC-v3) at the J2 one, trn3
    (NC-v4) as trn2 until it has its own; each is its own constant in an override file."""
    trn1 = instance("trn1.32xlarge")
    trn3 = instance("trn3-ultraserver")
    assert DEFAULT_COSTS.cc_fraction(trn1.device) == DEFAULT_COSTS.cc_dma_fraction
    assert DEFAULT_COSTS.cc_fraction(TRN2.device) == DEFAULT_COSTS.cc_dma_fraction_v3
    assert DEFAULT_COSTS.cc_dma_fraction_v3 > DEFAULT_COSTS.cc_dma_fraction
    assert DEFAULT_COSTS.cc_fraction(trn3.device) == DEFAULT_COSTS.cc_dma_fraction_v4
    path = tmp_path / "over.toml"
    path.write_text("[costs]\ncc_dma_fraction_v3 = 0.21\n")
    costs = apply(load_overrides(path)).costs
    assert costs.cc_fraction(TRN2.device) == 0.21
    assert costs.cc_fraction(trn1.device) == DEFAULT_COSTS.cc_dma_fraction
    # the trn2 share is what a bandwidth-bound collective on trn2 gets: slower at C1's
    slow = instance("trn2.48xlarge", lnc=1, costs=costs)
    fast_span = op_span(TRN2.run(elementwise_program(BIG_ALL_REDUCE)).timeline, "all_reduce")
    slow_span = op_span(slow.run(elementwise_program(BIG_ALL_REDUCE)).timeline, "all_reduce")
    ratio = DEFAULT_COSTS.cc_dma_fraction_v3 / 0.21        # bandwidth-bound: time ~ 1 / share
    assert slow_span == pytest.approx(fast_span * ratio, rel=0.03) and ratio > 1.1
