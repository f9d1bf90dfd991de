"""Matmul on TensorE (trn2-arch.md §4, §6): tiling to 128 x 128 x 512, stationary/moving choice,
FP8 double row, FP32 at 4x, PSUM eviction split over ScalarE and VectorE, SBUF blocking."""
from __future__ import annotations

import math

import numpy as np

from ..catalog.dtypes import get_dtype
from ..engine.isa import L_ACT, L_DVE, L_PE_LS, L_PE_MM, OP, Q_INPUT, Q_OUTPUT, Q_WEIGHT
from .dma import PARTITIONS, chunk, load_stage, store_stage
from ..program import Op
from .stages import INPUTS, PREFETCH, CoreContext, Dep, Stage, spread, spread_bytes, tile_sizes

PSUM_ACC_BYTES = 4  # N2: PSUM accumulates in FP32
SBUF_ACC_BYTES = 4  # M1 (NKI matmul tutorial): K-blocked partial sums kept in FP32 in SBUF


def contraction_tile(ctx: CoreContext, kind: str) -> int:
    dev = ctx.device
    if kind == "fp8" and dev.fp8_speedup > 1:
        return int(dev.pe_rows * dev.fp8_speedup)       # N1: double_row contracts 256 per MM
    if kind == "mx" and dev.mx_speedup > 0:
        return int(dev.pe_rows * dev.mx_speedup)        # N3: MX at 4x the BF16 rate
    return dev.pe_rows


def bf16_rate(ctx: CoreContext, kind: str) -> float:
    """TensorE throughput of this dtype relative to BF16; P1's adjusted FLOPs divide by it."""
    dev = ctx.device
    if kind == "fp32":
        return 1.0 / dev.fp32_slowdown
    if kind == "fp8":
        return dev.fp8_speedup
    if kind == "mx":
        return dev.mx_speedup or 1.0
    return 1.0


def mm_cycles(stat: np.ndarray, mov: np.ndarray, ctx: CoreContext, slow: float) -> np.ndarray:
    """Cycles per MM, outer over (stationary tile, moving tile). N2: the MM initiation interval is
    max(N_moving, 64); N8' writes the floor as min(64, N_stationary), which only differs for
    stationary tiles under 64 columns — there we keep N2's 64-cycle minimum. FP32 at 4x."""
    mm_min = ctx.costs.mm_min_cycles
    per = slow / ctx.costs.pe_efficiency(ctx.device)          # sustained issue rate (calibrated on M1)
    return np.broadcast_to(np.maximum(mm_min, mov)[None, :], (len(stat), len(mov))) * per


def blocking(m: int, k: int, n: int, b_left: float, b_right: float,
             ctx: CoreContext) -> tuple[float, float]:
    """SBUF blocks (Bm, Bn) minimising HBM reads b_left*M*K*ceil(N/Bn) + b_right*K*N*ceil(M/Bm)
    (§6), each operand at the width it is stored in. Either a block pair holds the whole
    contraction, (Bm*b_left + Bn*b_right)*K within the SBUF budget, or K is blocked: the output
    block accumulates in FP32 in SBUF (PSUM partial sums added per K block, as the NKI matmul
    tutorial's optimised kernel does) beside double-buffered K blocks of both operands,
    Bm*Bn*4 + 2*(Bm*b_left + Bn*b_right)*Bk within the budget."""
    bm = np.arange(1, max(1, math.ceil(m / 128)) + 1) * 128.0
    bn = np.arange(1, max(1, math.ceil(n / 128)) + 1) * 128.0
    bm, bn = np.minimum(bm, m), np.minimum(bn, n)
    BM, BN = np.meshgrid(bm, bn, indexing="ij")
    budget = ctx.sbuf_budget
    row_bytes = BM * b_left + BN * b_right
    whole_k = row_bytes * k <= budget
    bk = min(k, ctx.costs.mm_k_block)
    k_blocked = BM * BN * SBUF_ACC_BYTES + 2 * row_bytes * bk <= budget
    fits = whole_k | k_blocked
    if not fits.any():
        fits = (BM == bm[0]) & (BN == bn[0])
    left = m * k * np.ceil(n / BN)
    right = k * n * np.ceil(m / BM)
    cost = np.where(fits, left + right, np.inf)
    i = np.unravel_index(np.argmin(cost), cost.shape)
    return float(left[i] * b_left), float(right[i] * b_right)


def fed_rows(op: Op) -> tuple[int, int]:
    """(M, batch) as TensorE is fed: shared weights fold the batch into M."""
    m, batch = op.get("m"), op.get("batch")
    return (m * batch, 1) if op.get("weights") else (m, batch)


def lower_matmul(op: Op, ctx: CoreContext) -> list[Stage]:
    dev, costs = ctx.device, ctx.costs
    dt = get_dtype(op.get("dtype"))
    out_b = get_dtype(op.get("out_dtype")).bytes
    k, n = op.get("k"), op.get("n")
    weights = op.get("weights")
    m, batch = fed_rows(op)
    exact = 1.0
    if ctx.shard > 1:                 # LNC: the op is split over the physical cores of the pair
        split = m if m >= n else n
        share = math.ceil(split / ctx.shard)
        # an odd split leaves the last core a row short: its FLOPs, counted on every core, are
        # scaled to the rows there are (the time is the busier core's)
        exact = split / (ctx.shard * share)
        if m >= n:
            m = share
        else:
            n = share
    slow = dev.fp32_slowdown if dt.kind == "fp32" else 1.0
    kt = contraction_tile(ctx, dt.kind)
    k_sizes = tile_sizes(k, kt)

    # Orientation: which side is stationary (tiles of <=128) and which moving (<=512).
    options = []
    for stat_dim, mov_dim in ((m, n), (n, m)):
        stat, mov = tile_sizes(stat_dim, dev.pe_cols), tile_sizes(mov_dim, dev.moving_free_max)
        options.append((float(mm_cycles(stat, mov, ctx, slow).sum()), stat, mov))
    _, stat, mov = min(options, key=lambda o: o[0])
    ns, nm, nk = len(stat), len(mov), len(k_sizes)

    # Loop order per batch: stationary tile s, group g of <= psum_banks moving tiles, k, moving j.
    group = min(dev.psum_banks, nm)
    ng = math.ceil(nm / group)
    S, G, K, J = np.meshgrid(np.arange(ns), np.arange(ng), np.arange(nk), np.arange(group), indexing="ij")
    M_idx = G * group + J
    keep = (M_idx < nm).ravel()
    s_i, k_i, m_i = S.ravel()[keep], K.ravel()[keep], M_idx.ravel()[keep]
    if batch > 1:
        s_i, k_i, m_i = (np.tile(a, batch) for a in (s_i, k_i, m_i))
    n_mm = len(s_i)
    cyc = mm_cycles(stat, mov, ctx, slow)[s_i, m_i]
    rows, cols, elems = k_sizes[k_i], stat[s_i], mov[m_i]
    flops = 2.0 * rows * cols * elems * exact

    # LoadStationary: once per (batch, s, g, k) — the first MM of each run of moving tiles.
    first = np.ones(n_mm, dtype=bool)
    first[1:] = (s_i[1:] != s_i[:-1]) | (k_i[1:] != k_i[:-1]) | (m_i[1:] < m_i[:-1] + 1) \
        | ((m_i[1:] // group) != (m_i[:-1] // group))
    ls_pos = np.flatnonzero(first)
    ls_of_mm = np.cumsum(first) - 1
    ls_cyc = np.maximum(stat[s_i[ls_pos]], costs.mm_min_cycles) / costs.fast_ls_speedup

    # HBM traffic with SBUF blocking; transfers interleave activations and weights. An operand
    # stored wider than the matmul runs (neuronx-cc's auto-cast of an FP32 model, BF16 weights of
    # FP8 training) is read at its stored width and converted as it is loaded (assumption: the
    # conversion costs no engine pass of its own).
    left_w, right_w = (get_dtype(op.get(key) or dt.name).bytes
                       for key in ("left_dtype", "right_dtype"))
    left_b, right_b = blocking(m, k, n, left_w, right_w, ctx)
    left_b, right_b = left_b * batch, right_b * batch
    resident = bool(op.get("resident")) and weights     # activations already in SBUF (inference)
    if resident:
        left_b = 0.0
    left, right = chunk(left_b, ctx), chunk(right_b, ctx)
    order = np.argsort(np.concatenate([(np.arange(len(left)) + 0.5) / max(len(left), 1),
                                       (np.arange(len(right)) + 0.5) / max(len(right), 1)]),
                       kind="stable")
    sizes = np.concatenate([left, right])[order]
    is_weight = (order >= len(left)) if weights else np.zeros(len(order), dtype=bool)
    queue = Q_WEIGHT if weights and right_b >= left_b else Q_INPUT
    per_partition = np.maximum(sizes / PARTITIONS, 1.0)
    run = op.get("run_bytes", 0)
    if run and costs.kv_cache_position_major:     # the cache arrives one run per partition
        is_right = order >= len(left)
        per_partition[is_right] = np.minimum(per_partition[is_right], float(run))
    loads = load_stage(sizes, queue, ctx, (Dep(INPUTS, mask=~is_weight), Dep(PREFETCH, mask=is_weight)),
                       per_partition=per_partition)

    stages = [loads]
    dequant = _dequant_stages(sizes, is_weight, right_w, dt.bytes, ctx) if weights else []
    ls_deps = (Dep(0, spread(len(ls_pos), len(sizes))),) if len(sizes) else ()
    for stage in dequant:
        ls_deps += (Dep(len(stages), spread(len(ls_pos), stage.n)),)
        stages.append(stage)
    if resident:
        ls_deps += (Dep(INPUTS),)
    ls_id = len(stages)
    ls = Stage(L_PE_LS, OP["LOAD_STATIONARY"], ctx.cycles(ls_cyc, dev.tensor_hz),
               ls_deps, costs.semaphore_latency_s,
               sbuf_r=rows[ls_pos] * cols[ls_pos] * dt.bytes)
    adj = flops / bf16_rate(ctx, dt.kind)
    mm = Stage(L_PE_MM, OP["MATMUL"], ctx.cycles(cyc, dev.tensor_hz), (Dep(ls_id, ls_of_mm),),
               costs.semaphore_latency_s, flops=flops, hw_flops=flops, adj_flops=adj, adj_hw_flops=adj,
               sbuf_r=rows * elems * dt.bytes, psum_w=cols * elems * PSUM_ACC_BYTES)

    # Eviction of each finished output tile, alternating ScalarE and VectorE (N1: parallel PSUM reads).
    last = np.flatnonzero(k_i == nk - 1)
    out_elems = cols[last] * elems[last]
    evict_cyc = np.maximum(costs.min_ii_cycles, elems[last])
    stages += [ls, mm]
    mm_id = ls_id + 1
    evict_stage_ids = []
    for parity, lane, hz in ((0, L_ACT, dev.scalar_hz), (1, L_DVE, dev.vector_hz)):
        sel = np.arange(len(last)) % 2 == parity
        if not sel.any():
            continue
        evict_stage_ids.append(len(stages))
        stages.append(Stage(lane, OP["TENSOR_COPY"], ctx.cycles(evict_cyc[sel], hz),
                            (Dep(mm_id, last[sel]),), costs.semaphore_latency_s,
                            psum_r=out_elems[sel] * PSUM_ACC_BYTES, sbuf_w=out_elems[sel] * out_b))
    out = chunk(0.0 if resident else float(m) * n * batch * out_b, ctx)
    deps = tuple(Dep(s, spread_bytes(out, stages[s].n)) for s in evict_stage_ids)
    stages.append(store_stage(out, Q_OUTPUT, ctx, deps))
    return stages


def _dequant_stages(sizes: np.ndarray, is_weight: np.ndarray, stored: float, mm_bytes: float,
                    ctx: CoreContext) -> list[Stage]:
    """Weights stored narrower than the matmul reads them (weight-only int8/FP8 quantization)
    are dequantized tile by tile as they arrive: `weight_dequant_passes` passes over each loaded
    weight transfer, alternating ScalarE and VectorE (each depends on its own transfer). A
    wider stored dtype (an FP32 model's auto-cast) converts as it loads instead (see above)."""
    passes = ctx.costs.weight_dequant_passes
    at = np.flatnonzero(is_weight)
    if stored >= mm_bytes or passes <= 0 or not len(at):
        return []
    dev = ctx.device
    elems = sizes[at] / stored
    cyc = np.maximum(ctx.costs.min_ii_cycles, elems / PARTITIONS) * passes
    out = []
    for parity, lane, opcode, hz in ((0, L_ACT, "ACTIVATE", dev.scalar_hz),
                                     (1, L_DVE, "TENSOR_SCALAR", dev.vector_hz)):
        sel = np.arange(len(at)) % 2 == parity
        if sel.any():
            out.append(Stage(lane, OP[opcode], ctx.cycles(cyc[sel], hz), (Dep(0, at[sel]),),
                             ctx.costs.semaphore_latency_s, sbuf_r=elems[sel] * stored * passes,
                             sbuf_w=elems[sel] * mm_bytes * passes))
    return out
