"""Fused (flash) attention: scores, softmax and the weighted sum stay in SBUF/PSUM, so HBM sees
only Q, K, V and the output (trn2-arch.md §6 recipes; the NKI flash-attention kernel's loop).

Per (query tile of 128 rows, key tile of 512): TensorE computes S = Q K^T (one MM per 128 of the
head dimension), ScalarE exponentiates with a free row sum (activation_reduce), VectorE keeps the
running max and rescales, TensorE transposes P (4 tiles of 128) and multiplies by V. A causal
mask skips the tiles above the diagonal. The backward pass recomputes S and runs five matmuls
(S, dP, dV, dQ, dK) per tile pair instead of two.
"""
from __future__ import annotations

import math

import numpy as np

from ..catalog.dtypes import get_dtype
from ..engine.isa import L_ACT, L_DVE, L_PE_MM, OP, Q_INPUT, Q_OUTPUT
from .dma import chunk, load_stage, store_stage
from ..program import Op
from .stages import INPUTS, CoreContext, Dep, Stage, spread, spread_bytes

Q_TILE, KV_TILE = 128, 512


def _pairs(q_rows: int, kv_len: int, causal: bool) -> int:
    nq, nk = math.ceil(q_rows / Q_TILE), math.ceil(kv_len / KV_TILE)
    if not causal:
        return nq * nk
    return max(1, math.ceil(nq * nk * (0.5 + 0.5 / nk)))


def _core_share(pairs: int, shard: int) -> tuple[int, int]:
    """(sequence, KV head) pairs one physical core of a logical core takes, and the number of
    parts each pair is split into. With LNC=2 the pairs are shared out; where there are fewer
    pairs than physical cores (one sequence, one KV head a rank: GQA at tp >= kv_heads) a
    pair is split instead, by its query tiles or, for a single query tile, by its keys (as
    flash decoding does), or one core would do all the work while the model counted it on both."""
    if pairs >= shard:
        return math.ceil(pairs / shard), 1
    return 1, shard // pairs


def lower_attention(op: Op, ctx: CoreContext) -> list[Stage]:
    dev, c = ctx.device, ctx.costs
    dt = get_dtype(op.get("dtype"))
    groups, q_parts = _core_share(op.get("batch"), ctx.shard)
    q_rows, kv_len, d = op.get("q_rows"), op.get("kv_len"), op.get("head_dim")
    backward = op.get("backward")
    # the (query tile, key tile) pairs are shared out whole, the tiles as large as unsplit;
    # each core reads its part of the split side (its query rows, or its keys) and all the other
    pairs = _pairs(q_rows, kv_len, op.get("causal"))
    per_core = math.ceil(pairs / q_parts)
    n = groups * per_core
    # an odd count leaves the last core a pair short: its FLOPs, counted on every core, are
    # scaled to the pairs there are (the time is the busier core's)
    exact = pairs / (q_parts * per_core)
    q_io, kv_io = q_rows, kv_len
    if q_parts > 1 and math.ceil(q_rows / Q_TILE) < q_parts:
        kv_io = math.ceil(kv_len / q_parts)     # one query tile: each core takes part of the keys
    elif q_parts > 1:
        q_io = math.ceil(q_rows / q_parts)      # each core its query tiles, against all the keys
    kv_cols = min(KV_TILE, kv_len)
    q_cols = min(Q_TILE, q_rows)
    k_tiles = math.ceil(d / dev.pe_rows)
    mm = lambda moving: max(c.mm_min_cycles, moving) / c.pe_efficiency(dev)  # noqa: E731
    qk_cyc = k_tiles * mm(kv_cols) * (2 if backward else 1)              # S (and dP)
    pv_mms = math.ceil(kv_cols / dev.pe_rows)
    transpose_cyc = pv_mms * max(q_cols, min(c.mm_min_cycles, dev.pe_cols))
    pv_cyc = (pv_mms * mm(d) + transpose_cyc) * (3 if backward else 1)   # PV (dV, dQ, dK)
    flops_qk = 2.0 * q_cols * kv_cols * d * (2 if backward else 1) * exact
    flops_pv = 2.0 * q_cols * kv_cols * d * (3 if backward else 1) * exact
    t_flops = 2.0 * q_cols * kv_cols * dev.pe_rows * (3 if backward else 1) * exact

    io = float(groups) * (q_io + 2 * kv_io) * d * dt.bytes * (2 if backward else 1)
    sizes = chunk(io, ctx)
    loads = load_stage(sizes, Q_INPUT, ctx, (Dep(INPUTS),))
    full = lambda v: np.full(n, float(v))                                  # noqa: E731
    qk = Stage(L_PE_MM, OP["MATMUL"], ctx.cycles(full(qk_cyc), dev.tensor_hz),
               (Dep(0, spread(n, loads.n)),), c.semaphore_latency_s, flops=flops_qk,
               hw_flops=flops_qk, adj_flops=flops_qk, adj_hw_flops=flops_qk,
               psum_w=q_cols * kv_cols * 4.0)
    exp = Stage(L_ACT, OP["ACTIVATE_REDUCE"], ctx.cycles(full(max(c.min_ii_cycles, kv_cols) + c.min_ii_cycles),
                                                         dev.scalar_hz),
                (Dep(1, np.arange(n)),), c.semaphore_latency_s, psum_r=q_cols * kv_cols * 4.0,
                sbuf_w=q_cols * kv_cols * dt.bytes)
    stat_cyc = max(c.min_ii_cycles, kv_cols / 2) + c.min_ii_cycles
    stats = Stage(L_DVE, OP["TENSOR_REDUCE"], ctx.cycles(full(stat_cyc * (2 if backward else 1)),
                                                         dev.vector_hz),
                  (Dep(2, np.arange(n)),), c.semaphore_latency_s, sbuf_r=q_cols * kv_cols * dt.bytes)
    pv = Stage(L_PE_MM, OP["MATMUL"], ctx.cycles(full(pv_cyc), dev.tensor_hz),
               (Dep(3, np.arange(n)),), c.semaphore_latency_s, flops=flops_pv,
               hw_flops=flops_pv + t_flops, transpose_flops=t_flops, adj_flops=flops_pv,
               adj_hw_flops=flops_pv + t_flops, sbuf_r=q_cols * kv_cols * dt.bytes)
    out = chunk(float(groups) * (q_io + (2 * kv_io if backward else 0)) * d * dt.bytes, ctx)
    store = store_stage(out, Q_OUTPUT, ctx, (Dep(4, spread_bytes(out, n)),))
    return [loads, qk, exp, stats, pv, store]
