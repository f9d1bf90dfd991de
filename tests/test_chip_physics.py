"""Physics of the chip model: peaks, minimum instruction costs, bandwidth bounds, conservation."""
from __future__ import annotations

import numpy as np
import pytest

from device_model import CollectiveGroup, Program, instance
from device_model.catalog.costs import DEFAULT_COSTS
from device_model.catalog.dtypes import get_dtype
from device_model.engine.isa import E_TENSOR, L_DMA, L_PE_MM

TRN2 = instance("trn2.48xlarge", lnc=1)
BF16_PEAK_V3 = 2 * 128 * 128 * 2.4e9     # trn2-arch.md §2: 128x128 PEs x 2 FLOP x 2.4 GHz


def run(prog: Program, inst=TRN2):
    return inst.run(prog)


def test_large_bf16_matmul_reaches_the_sustained_tensor_rate():
    """Compute-bound: within 5% of the peak times TensorE's sustained issue rate (M1's, on
    every generation until one is measured), and no faster."""
    p = Program()
    p.matmul(8192, 8192, 8192, "bf16")
    m = run(p).metrics()
    sustained = DEFAULT_COSTS.pe_efficiency(instance("trn2.48xlarge").device)
    assert 0.95 * sustained <= m["model_flops"] / m["time_s"] / BF16_PEAK_V3 <= sustained
    assert 0.95 * sustained <= m["mfu"] <= sustained


def test_fp8_double_row_doubles_throughput():
    times = {}
    for dtype in ("bf16", "fp8"):
        p = Program()
        p.matmul(8192, 8192, 8192, dtype)
        times[dtype] = run(p).metrics()["time_s"]
    assert times["bf16"] / times["fp8"] == pytest.approx(2.0, rel=0.05)


def test_fp32_matmul_is_four_times_slower():
    times = {}
    for dtype in ("bf16", "fp32"):
        p = Program()
        p.matmul(4096, 4096, 4096, dtype)
        times[dtype] = run(p).metrics()["time_s"]
    assert times["fp32"] / times["bf16"] == pytest.approx(4.0, rel=0.1)


def test_tiny_matmul_is_bound_by_64_cycle_minimum():
    p = Program()
    p.matmul(8, 8, 8, "bf16", batch=2000, weights=False)   # many tiny matmuls back to back
    tl = run(p).timeline
    mm = tl.columns["lane"] == L_PE_MM
    dur = tl.columns["end"][mm] - tl.columns["start"][mm]
    sustained = DEFAULT_COSTS.pe_efficiency(TRN2.device)
    # N2: max(N, 64) cycles, N = 8, at TensorE's sustained issue rate; never under 64
    assert np.median(dur) == pytest.approx(64 / 2.4e9 / sustained)
    assert dur.min() >= 64 / 2.4e9 * (1 - 1e-9)


def test_large_unfused_elementwise_is_dma_bound():
    p = Program()
    p.binary("add", 256 * 1024 * 1024, "bf16")
    m = run(p).metrics()
    assert m["engine_active"]["dma"] > 0.95
    assert m["engine_active"]["vector"] < 0.5


def test_small_dma_transfers_run_far_below_peak():
    def rate(nbytes: int) -> float:
        p = Program()
        p.dma(nbytes)
        tl = run(p).timeline
        sel = tl.columns["lane"] == L_DMA
        return tl.columns["hbm_r"][sel].sum() / (tl.columns["end"][sel] - tl.columns["start"][sel]).sum()
    small, large = rate(512), rate(64 << 20)
    assert large > 0.9 * TRN2.context().dma_bw
    assert small < 0.05 * large


@pytest.mark.parametrize("build", [
    lambda p: p.matmul(2048, 4096, 1024, "bf16"),
    lambda p: (p.layernorm(4096, 4096), p.softmax(4096, 2048, causal=True),
               p.softmax(4096, 2048, backward=True)),
    lambda p: (p.embedding(4096, 4096), p.transpose(4096, 4096, engine="tensor"),
               p.transpose(1024, 1024, engine="vector"), p.cast(1 << 20, "fp32", "bf16")),
    lambda p: p.collective("all_reduce", 8 << 20, CollectiveGroup(8, 4, 2)),
])
def test_engine_active_never_exceeds_wall_time(build):
    p = Program()
    build(p)
    r = run(p)
    wall = r.timeline.wall
    for engine, active in r.timeline.engine_active().items():
        assert 0.0 <= active <= wall * (1 + 1e-9), engine
    for ratio in r.metrics()["engine_active"].values():
        assert 0.0 <= ratio <= 1.0


def test_flops_and_bytes_agree_between_instructions_and_operators():
    p = Program()
    a = p.matmul(1000, 3000, 700, "bf16")
    p.collective("all_reduce", 64 << 20, CollectiveGroup(16, 1, 16), deps=(a,))
    p.activation("gelu", 1000 * 700, deps=(a,))
    p.matmul(1000, 700, 3000, "fp8")
    tl = run(p).timeline
    per_op = tl.per_op()
    for q in ("flops", "hw_flops", "hbm_r", "hbm_w", "sbuf_r", "psum_w"):
        assert per_op[q].sum() == pytest.approx(tl.total(q))
    assert per_op["flops"][0] == pytest.approx(2 * 1000 * 3000 * 700)
    assert per_op["flops"][3] == pytest.approx(2 * 1000 * 700 * 3000)


def test_instructions_on_a_lane_never_overlap_and_respect_program_order():
    p = Program()
    for _ in range(3):
        mm = p.matmul(512, 1024, 2048)
        p.collective("all_reduce", 16 << 20, CollectiveGroup(16, 1, 16), deps=(mm,))
        p.activation("silu", 512 * 2048, deps=(mm,))     # its DMA contends with the all-reduce
        p.layernorm(512, 2048)
    tl = run(p).timeline
    c = tl.columns
    for lane in np.unique(c["lane"]):
        sel = c["lane"] == lane
        s, e = c["start"][sel], c["end"][sel]
        assert np.all(e >= s)
        assert np.all(s[1:] >= e[:-1] - 1e-15)


def test_ops_start_after_their_producers_finish_computing():
    p = Program()
    a = p.matmul(1024, 1024, 1024)
    b = p.activation("exp", 1024 * 1024, deps=(a,))
    tl = run(p).timeline
    c = tl.columns
    first_act = c["start"][(c["op"] == b)].min()
    last_mm = c["end"][(c["op"] == a) & (c["lane"] == L_PE_MM)].max()
    assert first_act >= last_mm


def test_lnc2_halves_per_core_work_and_shares_hbm():
    p = Program()
    p.matmul(8192, 8192, 8192)
    one = instance("trn2.48xlarge", lnc=1).run(p).metrics()
    two = instance("trn2.48xlarge", lnc=2).run(p).metrics()
    assert two["time_s"] == pytest.approx(one["time_s"] / 2, rel=0.05)
    assert two["model_flops"] == pytest.approx(one["model_flops"])
    ctx1, ctx2 = instance("trn2.48xlarge", lnc=1).context(), instance("trn2.48xlarge", lnc=2).context()
    assert ctx2.dma_bw <= ctx1.dma_bw
    assert ctx2.dma_bw == pytest.approx(2.9e12 / 4 / 2, rel=0.01)


@pytest.mark.parametrize("m, k, n", [(3, 100, 7), (1, 1, 1), (9, 64, 4), (1001, 256, 64)])
def test_lnc2_counts_an_odd_split_matmuls_flops_once(m, k, n):
    """An odd split leaves one physical core a row short: counting the other core's share on
    both gave up to twice the FLOPs (MFU, model FLOPs) of the matmul."""
    p = Program()
    p.matmul(m, k, n)
    one = instance("trn2.48xlarge", lnc=1).run(p).metrics()
    two = instance("trn2.48xlarge", lnc=2).run(p).metrics()
    assert one["model_flops"] == pytest.approx(2 * m * k * n)
    assert two["model_flops"] == pytest.approx(2 * m * k * n)
    assert two["hardware_flops"] == pytest.approx(one["hardware_flops"])


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("q_rows", [64, 128, 256, 4 * 8192])
def test_lnc2_splits_one_attention_pair_over_both_physical_cores(backward, q_rows):
    """One (sequence, KV head) pair a rank (batch 1, tp >= kv_heads) is split, by its query
    tiles or (one query tile) its keys: the same FLOPs as LNC=1, and a pair costs what it does
    in a batch of two; a long one in half the time of LNC=1, a short one in less than LNC=1's."""
    def run(pairs: int, lnc: int) -> dict:
        p = Program()
        p.attention(pairs, q_rows, 8192, 128, causal=True, backward=backward)
        return instance("trn2.48xlarge", lnc=lnc).run(p).metrics()
    one, two, pair_of_two = run(1, 1), run(1, 2), run(2, 2)
    assert two["model_flops"] == pytest.approx(one["model_flops"], rel=1e-9)
    assert pair_of_two["model_flops"] == pytest.approx(2 * two["model_flops"], rel=1e-9)
    assert two["time_s"] < 0.9 * one["time_s"]
    if q_rows > 8192:
        assert two["time_s"] == pytest.approx(one["time_s"] / 2, rel=0.08)
        assert pair_of_two["time_s"] == pytest.approx(2 * two["time_s"], rel=0.08)


def test_tensor_engine_throttles_after_idle_gaps():
    p = Program()
    p.matmul(512, 512, 512)
    p.dma(256 << 20)                     # a long DMA leaves TensorE idle
    p.matmul(512, 512, 512)
    r = run(p)
    assert len(r.timeline.throttles) >= 1
    assert all(t.ratio == pytest.approx(0.5) for t in r.timeline.throttles)


def test_collectives_overlap_independent_compute():
    p = Program()
    grad = p.matmul(4096, 4096, 4096)
    p.collective("all_reduce", 64 << 20, CollectiveGroup(16, 1, 16), deps=(grad,))
    p.matmul(4096, 4096, 4096, deps=(grad,))
    r = run(p)
    eng = r.timeline.engine_of_rows()
    assert r.timeline.wall < (r.timeline.engine_active()["collective"]
                              + r.timeline.engine_active()["tensor"])
    assert (eng == E_TENSOR).any()


def test_runs_are_deterministic():
    p = Program()
    p.matmul(3000, 2000, 1000)
    p.softmax(3000, 1000, causal=True)
    a, b = run(p).timeline, run(p).timeline
    for key in a.columns:
        np.testing.assert_array_equal(a.columns[key], b.columns[key])


def test_m1_kernel_blocks_k_in_sbuf_and_is_compute_bound():
    """M1 (NKI matmul tutorial): with K blocked and FP32 partial sums in SBUF the kernel reads
    each operand a few times, not ~9x, and TensorE, not DMA, bounds it."""
    p = Program()
    p.matmul(4096, 8192, 8192, "bf16")
    m = instance("trn1.2xlarge").run(p).metrics()
    operands = (4096 * 8192 + 8192 * 8192) * 2
    assert m["hbm_read_bytes"] < 4 * operands
    assert m["engine_active"]["tensor"] > 0.95 and m["engine_active"]["dma"] < 0.6


@pytest.mark.parametrize("compute, left, right", [
    ("bf16", "fp32", "fp32"),   # an FP32 model under neuronx-cc's matmul auto-cast
    ("fp8", "bf16", "bf16"),    # FP8 training: BF16 activations and weights, cast per matmul
    ("fp8", "bf16", "fp8"),     # FP8 inference: FP8 weights against BF16 activations
    ("bf16", "bf16", "bf16"),   # stored as computed: as without the arguments
])
def test_matmul_reads_each_operand_at_the_width_it_is_stored_in(compute, left, right):
    def reads(**stored):
        p = Program()
        p.matmul(512, 512, 512, compute, **stored)   # both operands fit in SBUF: read once
        return TRN2.run(p).metrics()["hbm_read_bytes"]   # one physical core
    assert reads() == pytest.approx(2 * 512 * 512 * get_dtype(compute).bytes, rel=0.01)
    expected = 512 * 512 * (get_dtype(left).bytes + get_dtype(right).bytes)
    assert reads(left_dtype=left, right_dtype=right) == pytest.approx(expected, rel=0.01)


def test_tensor_engine_efficiency_is_per_generation_and_overridable():
    from device_model.catalog.costs import DEFAULT_COSTS
    p = Program()
    p.matmul(4096, 8192, 8192, "bf16")
    base = instance("trn1.2xlarge").run(p).metrics()
    ideal = instance("trn1.2xlarge", costs=DEFAULT_COSTS.with_overrides(
        {"pe_efficiency_v2": 1.0})).run(p).metrics()
    assert base["hfu"] == pytest.approx(DEFAULT_COSTS.pe_efficiency_v2 * ideal["hfu"], rel=0.02)
    assert DEFAULT_COSTS.pe_efficiency(instance("trn2.48xlarge").device) == DEFAULT_COSTS.pe_efficiency_v3


# --- collectives ------------------------------------------------------------------------------

def _allreduce(nbytes: int, group: CollectiveGroup, inst=None):
    from device_model.engine.collectives import collective_cost
    inst = inst or instance("trn1.32xlarge")
    return collective_cost("all_reduce", nbytes, group, inst.device, inst.costs, lnc=inst.lnc)


def test_collective_bandwidth_is_the_same_dma_mechanism_on_and_off_chip():
    """C4: the same DMA engines move the data; C1's and C3's bus bandwidths are close."""
    on_chip = _allreduce(1 << 30, CollectiveGroup(2, 2, 1))
    two_chips = _allreduce(1 << 30, CollectiveGroup(2, 1, 2))
    two_nodes = _allreduce(1 << 30, CollectiveGroup(64, 2, 32, 2))
    assert two_chips.busbw == pytest.approx(on_chip.busbw, rel=0.05)
    assert two_nodes.busbw == pytest.approx(on_chip.busbw, rel=0.15)


def test_trn1_rings_flat_across_instances_and_pays_per_step_latency():
    small = _allreduce(1 << 10, CollectiveGroup(64, 2, 32, 2))
    assert small.algorithm == "flat-ring" and small.steps == 2 * 63
    assert small.seconds > 10 * _allreduce(1 << 10, CollectiveGroup(32, 2, 16)).seconds
    trn2 = instance("trn2.48xlarge")
    assert _allreduce(1 << 10, CollectiveGroup(128, 4, 32, 2), trn2).algorithm == "hierarchical"


def test_trn1_ring_steps_with_data_keep_fewer_chunks_in_flight():
    """C3: an empty ring step only passes semaphores (`cc_ring_slots` per EFA hop); a step that
    carries data receives, reduces and sends, so fewer of them overlap (`cc_ring_slots_data`)
    once its DMA is bandwidth-bound. The latency term then grows with the chunk and saturates."""
    from device_model.engine.collectives import collective_cost
    inst = instance("trn1.32xlarge")
    g = CollectiveGroup(64, 2, 32, 2)
    steps, alpha = 2 * 63, inst.costs.cc_alpha_inter_s

    def latency(nbytes, costs=inst.costs):
        # the bandwidth term is the same under both costs; their difference is the hop term
        c = collective_cost("all_reduce", nbytes, g, inst.device, costs)
        same = costs.with_overrides({"cc_ring_slots_data": costs.cc_ring_slots})
        return c.seconds - collective_cost("all_reduce", nbytes, g, inst.device, same).seconds

    assert latency(8) == 0.0                                   # empty chunks: semaphores only
    grow = [latency(b) for b in (4 << 10, 64 << 10, 1 << 20, 256 << 20)]
    assert grow == sorted(grow) and grow[0] > 0
    full = steps * alpha * (1 / inst.costs.cc_ring_slots_data - 1 / inst.costs.cc_ring_slots)
    assert grow[-1] == pytest.approx(full, rel=0.01)            # saturates at the data depth
    deeper = inst.costs.with_overrides({"cc_ring_slots_data": 1.0})   # overridable
    assert latency(1 << 20, deeper) > latency(1 << 20)


def test_efa_is_shared_by_every_core_running_its_own_collective():
    """A DP group of one rank per node: alone it has its chip's EFA; with every core of the chip
    in a DP group of its own, they split it."""
    alone = _allreduce(256 << 20, CollectiveGroup(32, 1, 32, 32))
    shared = _allreduce(256 << 20, CollectiveGroup(32, 1, 32, 32, active_per_device=2))
    assert shared.seconds == pytest.approx(2 * alone.seconds, rel=0.05)


def test_a_ring_crosses_each_chip_boundary_once_however_many_of_its_ranks_a_chip_holds():
    """KangaRing passes data between a chip's own ranks through HBM and crosses to the next chip
    once, so a chip's links carry one rank's traffic, not every rank's. Before, 8 LNC=2 ranks on
    two trn2 chips took 1.9x as long as 16 on four (the links split four ways)."""
    trn2 = instance("trn2.48xlarge", lnc=2)
    one_chip, two, four, sixteen = (_allreduce(256 << 20, CollectiveGroup(4 * d, 4, d), trn2)
                                    for d in (1, 2, 4, 16))
    assert {c.algorithm for c in (two, four, sixteen)} == {"kangaring"}
    assert one_chip.seconds < two.seconds < four.seconds < sixteen.seconds
    assert two.busbw == pytest.approx(one_chip.busbw, rel=0.1)      # both DMA-bound
    # concurrent groups on a chip still share its links
    shared = _allreduce(256 << 20, CollectiveGroup(8, 4, 2, active_per_device=16), trn2)
    assert shared.seconds > 1.5 * two.seconds


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("name, lnc, ranks", [("trn2.48xlarge", 2, 8), ("trn2.48xlarge", 1, 16),
                                              ("trn2.48xlarge", 2, 64), ("trn1.32xlarge", 1, 4),
                                              ("trn1.32xlarge", 1, 32)])
def test_no_collective_gets_faster_as_its_buffer_grows_past_the_ring_switch(kind, name, lnc, ranks):
    """RDH reduces within a chip before it crosses chips (C2), so a chip's links carry its data
    once, as a ring's do. Charged as Mesh, each rank's share of the links made RDH on 2-4 chips
    2.4x slower than KangaRing: one byte past 56 MiB an all-reduce took 625 us, not 1491 us."""
    from device_model.engine.collectives import collective_cost
    inst = instance(name, lnc=lnc)
    per_chip = inst.spec.device.physical_cores // lnc
    group = CollectiveGroup(ranks, per_chip, max(1, ranks // per_chip))
    sizes = [(56 << 20) + d for d in (-4096, -1, 0, 1, 4096)]
    times = [collective_cost(kind, n, group, inst.device, inst.costs, lnc=lnc).seconds
             for n in sizes]
    assert times == sorted(times), list(zip(sizes, times))


def test_group_footprint_sets_links_and_mesh_hops():
    from device_model.engine.collectives import footprint, intra_algorithm
    assert footprint(2, "torus2d") == (1, 1)
    assert footprint(4, "torus2d") == (2, 2)       # one torus row: 2 in-group links, 2 hops
    assert footprint(16, "torus2d") == (4, 4)
    assert intra_algorithm(64 << 10, 8)[:2] == ("mesh", 2)
    row = _allreduce(16 << 10, CollectiveGroup(8, 2, 4))
    torus = _allreduce(16 << 10, CollectiveGroup(32, 2, 16))
    assert torus.seconds > row.seconds          # farther hops on the whole torus


def test_dma_reductions_run_at_fp32_width():
    """EVRF061: DMA collective compute reduces in FP32, so a BF16 reduce-scatter of B bytes (B/2
    elements) takes as long as an FP32 one of 2B; an all-gather only moves bytes."""
    from device_model.engine.collectives import collective_cost
    inst = instance("trn1.32xlarge")
    g = CollectiveGroup(32, 2, 16, active_per_device=2)

    def t(kind, nbytes, b):
        return collective_cost(kind, nbytes, g, inst.device, inst.costs, dtype_bytes=b).seconds
    assert t("reduce_scatter", 512 << 20, 2) == pytest.approx(2 * t("reduce_scatter", 512 << 20, 4), rel=0.05)
    assert t("all_gather", 512 << 20, 2) == pytest.approx(t("all_gather", 512 << 20, 4), rel=0.01)
    # an all-reduce gathers its FP32 partial sums (cc_allreduce_fp32_fraction = 1): all of it
    # at FP32 width; with the gather in BF16 only its reduce-scatter half is
    assert t("all_reduce", 512 << 20, 2) == pytest.approx(2 * t("all_reduce", 512 << 20, 4), rel=0.05)
    half = inst.costs.with_overrides({"cc_allreduce_fp32_fraction": 0.0})
    bf16_gather = collective_cost("all_reduce", 512 << 20, g, inst.device, half, dtype_bytes=2)
    assert bf16_gather.seconds == pytest.approx(1.5 * t("all_reduce", 512 << 20, 4), rel=0.05)


def test_fused_softmax_backward_reads_its_two_inputs_once_and_writes_once():
    """neuronx-cc's softmax-backward op (AwsNeuronSoftmaxBackward) keeps a row tile in SBUF
    through its four instructions; the decomposed graph pays HBM for each of its four ops."""
    rows, cols = 4096, 2048
    tensor = rows * cols * get_dtype("bf16").bytes

    def hbm(build) -> tuple[float, float, float]:
        p = Program()
        build(p)
        r = run(p)
        cols = r.timeline.columns
        return cols["hbm_r"].sum(), cols["hbm_w"].sum(), r.metrics()["time_s"]

    fused_r, fused_w, fused_t = hbm(lambda p: p.softmax(rows, cols, backward=True))
    assert fused_r == pytest.approx(2 * tensor, rel=0.01)
    assert fused_w == pytest.approx(tensor, rel=0.01)

    def decomposed(p: Program) -> None:
        p.binary("mul", rows * cols)
        p.reduce(rows, cols)
        p.binary("sub", rows * cols)
        p.binary("mul", rows * cols)
    dec_r, dec_w, dec_t = hbm(decomposed)
    assert dec_r + dec_w > 3 * (fused_r + fused_w)
    assert fused_t < dec_t


@pytest.mark.parametrize("m, k", [(4096, 4096), (2048, 8192)])
def test_a_wider_output_never_stores_sooner(m, k):
    """An output of exactly 1 MiB (one store transfer) took longer than one a column wider (two
    transfers), because the second's short remainder let the first start halfway through the
    evictions. A transfer waits for the eviction that finishes its last byte."""
    times = []
    for n in (127, 128, 129, 130):
        p = Program()
        p.matmul(m, k, n, "bf16")
        times.append(run(p).metrics()["time_s"])
    assert times == sorted(times)
