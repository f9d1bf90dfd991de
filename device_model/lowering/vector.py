"""ScalarE / VectorE / GpSimdE operators (trn2-arch.md §4 cost table, §6 recipes).

Elements are laid out over 128 partitions and tiled along the free axis; each tile is loaded from
HBM, computed, and stored back (unfused ops pay their DMA, which makes big ones HBM-bound, §6).
"""
from __future__ import annotations

import math

import numpy as np

from ..catalog.dtypes import get_dtype
from ..engine.isa import L_ACT, L_DVE, L_PE_MM, L_POOL, OP, Q_INPUT, Q_OUTPUT
from .dma import PARTITIONS, chunk, load_stage, store_stage
from ..program import Op
from .stages import INPUTS, CoreContext, Dep, Stage, spread, tile_sizes

BF16_LIKE = ("bf16", "fp16", "fp8")


def _resident(op: Op) -> bool:
    return bool(op.get("resident"))


def _shard(count: int, ctx: CoreContext) -> int:
    return max(1, math.ceil(count / ctx.shard))


def _engine_stage(lane: int, opcode: str, cycles: np.ndarray, hz: float, ctx: CoreContext,
                  deps: tuple[Dep, ...], **quantities) -> Stage:
    return Stage(lane, OP[opcode], ctx.cycles(cycles, hz), deps, ctx.costs.semaphore_latency_s,
                 **quantities)


def _tiled(elements: int, ctx: CoreContext) -> np.ndarray:
    """Free-axis sizes per tile for `elements` spread over 128 partitions."""
    return tile_sizes(math.ceil(elements / PARTITIONS), ctx.costs.tile_free_elems)


def _io(free: np.ndarray, in_bytes: list[float], out_bytes: float, ctx: CoreContext,
        compute: list[Stage], resident: bool = False) -> list[Stage]:
    """Wrap per-tile compute stages (which depend on stage 0) with loads and a store. A
    `resident` op (inference: its tensors fit SBUF) reads and writes SBUF only: both DMA stages
    are empty and it waits on its producers directly."""
    n = len(free)
    if resident:
        first = compute[0]
        first.deps = (Dep(INPUTS),) + tuple(first.deps)
        empty = np.zeros(0)
        return ([load_stage(empty, Q_INPUT, ctx, (Dep(INPUTS),))] + compute
                + [store_stage(empty, Q_OUTPUT, ctx, ())])
    tile_elems = free * PARTITIONS
    sizes = np.concatenate([tile_elems * b for b in in_bytes]) if in_bytes else np.zeros(0)
    # per tile, its inputs are consecutive transfers: interleave so tile i's loads are adjacent
    if len(in_bytes) > 1:
        sizes = np.stack([tile_elems * b for b in in_bytes], axis=1).ravel()
    loads = load_stage(sizes, Q_INPUT, ctx, (Dep(INPUTS),))
    last_load = (np.arange(n) + 1) * max(len(in_bytes), 1) - 1
    first = compute[0]
    first.deps = (Dep(0, last_load),) + tuple(first.deps)
    stages = [loads] + compute
    stages.append(store_stage(tile_elems * out_bytes, Q_OUTPUT, ctx,
                              (Dep(len(stages) - 1, np.arange(n)),)))
    return stages


def lower_activation(op: Op, ctx: CoreContext) -> list[Stage]:
    dev, c = ctx.device, ctx.costs
    dt = get_dtype(op.get("dtype"))
    free = _tiled(_shard(op.get("elements"), ctx), ctx)
    speed = dev.scalar_bf16_speedup if dt.name in BF16_LIKE else 1.0
    cyc = np.maximum(c.min_ii_cycles, free / speed)            # N8': activation max(MIN_II, N)
    elems = free * PARTITIONS
    act = _engine_stage(L_ACT, "ACTIVATE", cyc, dev.scalar_hz, ctx, (),
                        sbuf_r=elems * dt.bytes * op.get("inputs"), sbuf_w=elems * dt.bytes)
    return _io(free, [dt.bytes] * op.get("inputs"), dt.bytes, ctx, [act], resident=_resident(op))


def lower_binary(op: Op, ctx: CoreContext) -> list[Stage]:
    dev, c = ctx.device, ctx.costs
    dt = get_dtype(op.get("dtype"))
    out = get_dtype(op.get("out_dtype") or dt.name)
    free = _tiled(_shard(op.get("elements"), ctx), ctx)
    elems = free * PARTITIONS
    if op.get("operands", 2) == 1:        # tensor_scalar: one operand streamed, as a copy is
        speed = dev.vector_bf16_copy_speedup if dt.name in BF16_LIKE else 1.0
        ts = _engine_stage(L_DVE, "TENSOR_SCALAR", np.maximum(c.min_ii_cycles, free / speed),
                           dev.vector_hz, ctx, (), sbuf_r=elems * dt.bytes,
                           sbuf_w=elems * out.bytes)
        return _io(free, [dt.bytes], out.bytes, ctx, [ts], resident=_resident(op))
    if dt.name in BF16_LIKE and op.get("func") in ("add", "sub", "mul"):
        cyc = np.maximum(c.min_ii_cycles, free / dev.vector_bf16_tt_speedup)   # N8', N1 perf mode
    else:
        cyc = np.maximum(c.min_ii_cycles, 2 * free)                            # N8'
    tt = _engine_stage(L_DVE, "TENSOR_TENSOR", cyc, dev.vector_hz, ctx, (),
                       sbuf_r=2 * elems * dt.bytes, sbuf_w=elems * out.bytes)
    return _io(free, [dt.bytes, dt.bytes], out.bytes, ctx, [tt], resident=_resident(op))


def lower_cast(op: Op, ctx: CoreContext) -> list[Stage]:
    dev, c = ctx.device, ctx.costs
    src, dst = get_dtype(op.get("dtype")), get_dtype(op.get("out_dtype"))
    free = _tiled(_shard(op.get("elements"), ctx), ctx)
    both_bf16 = src.name in BF16_LIKE and dst.name in BF16_LIKE
    speed = dev.vector_bf16_copy_speedup if both_bf16 else 1.0
    cyc = np.maximum(c.min_ii_cycles, free / speed)             # N8': tensor_copy max(MIN_II, N)
    elems = free * PARTITIONS
    cp = _engine_stage(L_DVE, "TENSOR_COPY", cyc, dev.vector_hz, ctx, (),
                       sbuf_r=elems * src.bytes, sbuf_w=elems * dst.bytes)
    return _io(free, [src.bytes], dst.bytes, ctx, [cp], resident=_resident(op))


def _row_tiles(rows: int, ctx: CoreContext) -> np.ndarray:
    return tile_sizes(_shard(rows, ctx), PARTITIONS)


def _chain(steps: list[tuple[int, str, np.ndarray, float]], ctx: CoreContext,
           sbuf_bytes: np.ndarray) -> list[Stage]:
    """Per row tile, a chain of dependent instructions (stage i+1 waits on stage i, tile by tile)."""
    out = []
    for i, (lane, opcode, cyc, hz) in enumerate(steps):
        deps = () if i == 0 else (Dep(i, np.arange(len(cyc))),)  # +1 for the load stage in _io
        out.append(_engine_stage(lane, opcode, cyc, hz, ctx, deps, sbuf_r=sbuf_bytes, sbuf_w=sbuf_bytes))
    return out


def lower_reduce(op: Op, ctx: CoreContext) -> list[Stage]:
    dev, c = ctx.device, ctx.costs
    dt = get_dtype(op.get("dtype"))
    rows, cols = _row_tiles(op.get("rows"), ctx), float(op.get("cols"))
    fast = dt.name == "bf16" and op.get("func") in ("add", "max")
    cyc = np.full(len(rows), max(c.min_ii_cycles, cols / 2 if fast else cols))   # N8' tensor_reduce
    red = _engine_stage(L_DVE, "TENSOR_REDUCE", cyc, dev.vector_hz, ctx, (),
                        sbuf_r=rows * cols * dt.bytes, sbuf_w=rows * dt.bytes)
    return _io(rows * cols / PARTITIONS, [dt.bytes], dt.bytes / cols, ctx, [red], resident=_resident(op))


def lower_softmax(op: Op, ctx: CoreContext) -> list[Stage]:
    """A row softmax on row tiles whose whole row sits in SBUF. `backward`: dx = y * (dy -
    sum(y * dy)) on the same tiles, y and dy read once and dx written once (the product, its row
    sum, the shift and the scale are four instructions on the tile, not four passes over HBM)."""
    dev, c = ctx.device, ctx.costs
    dt = get_dtype(op.get("dtype"))
    rows, L = _row_tiles(op.get("rows"), ctx), float(op.get("cols"))
    n, mii = len(rows), c.min_ii_cycles
    full = lambda v: np.full(n, float(v))  # noqa: E731 - a tiny local helper reads better inline
    row_sum = (L_DVE, "TENSOR_REDUCE", full(max(mii, L / 2 if dt.name == "bf16" else L)),
               dev.vector_hz)
    if op.get("backward"):
        tt = full(max(mii, L / dev.vector_bf16_tt_speedup if dt.name in BF16_LIKE else 2 * L))
        steps = [(L_DVE, "TENSOR_TENSOR", tt, dev.vector_hz),                    # y * dy
                 row_sum,
                 (L_ACT, "ACTIVATE", full(max(mii, L)), dev.scalar_hz),          # dy - sum
                 (L_DVE, "TENSOR_TENSOR", tt, dev.vector_hz)]                    # * y
        inputs = 2
    else:
        steps = []
        if op.get("causal"):
            steps.append((L_POOL, "AFFINE_SELECT", full(c.gpsimd_start_cycles + L), dev.gpsimd_hz))
        steps += [
            row_sum,
            (L_ACT, "ACTIVATE_REDUCE", full(max(mii, L) + mii), dev.scalar_hz),   # exp, free sum
            (L_DVE, "RECIPROCAL", full(mii), dev.vector_hz),
            (L_ACT, "ACTIVATE", full(max(mii, L)), dev.scalar_hz),                 # scale by 1/sum
        ]
        inputs = 1
    compute = _chain(steps, ctx, rows * L * dt.bytes)
    return _io(rows * L / PARTITIONS, [dt.bytes] * inputs, dt.bytes, ctx, compute,
               resident=_resident(op))


def lower_norm(op: Op, ctx: CoreContext) -> list[Stage]:
    dev, c = ctx.device, ctx.costs
    dt = get_dtype(op.get("dtype"))
    rows, H = _row_tiles(op.get("rows"), ctx), float(op.get("hidden"))
    n, mii = len(rows), c.min_ii_cycles
    full = lambda v: np.full(n, float(v))  # noqa: E731
    tt = H if dt.name in BF16_LIKE else 2 * H
    if op.kind == "rmsnorm":
        steps = [
            (L_ACT, "ACTIVATE_REDUCE", full(H + mii), dev.scalar_hz),          # square + accumulate
            (L_ACT, "ACTIVATE", full(mii), dev.scalar_hz),                      # rsqrt of one value
            (L_DVE, "TENSOR_SCALAR", full(max(mii, H / dev.vector_bf16_copy_speedup)), dev.vector_hz),
            (L_DVE, "TENSOR_TENSOR", full(max(mii, tt / dev.vector_bf16_tt_speedup)), dev.vector_hz),
        ]
    else:
        chunks = math.ceil(H / 512)
        steps = [
            (L_DVE, "BN_STATS", full(max(mii, H)), dev.vector_hz),
            (L_DVE, "BN_AGGR", full(max(mii, 13 * 6 * chunks / 3)), dev.vector_hz),
            (L_ACT, "ACTIVATE", full(mii), dev.scalar_hz),                      # rsqrt
            (L_ACT, "ACTIVATE", full(max(mii, H)), dev.scalar_hz),              # (x-mean)*rstd
            (L_DVE, "TENSOR_TENSOR", full(max(mii, tt / dev.vector_bf16_tt_speedup)), dev.vector_hz),
            (L_DVE, "TENSOR_TENSOR", full(max(mii, tt / dev.vector_bf16_tt_speedup)), dev.vector_hz),
        ]
    compute = _chain(steps, ctx, rows * H * dt.bytes)
    return _io(rows * H / PARTITIONS, [dt.bytes], dt.bytes, ctx, compute, resident=_resident(op))


def lower_transpose(op: Op, ctx: CoreContext) -> list[Stage]:
    dev, c = ctx.device, ctx.costs
    dt = get_dtype(op.get("dtype"))
    rows, cols, engine = _shard(op.get("rows"), ctx), op.get("cols"), op.get("engine")
    total = float(rows) * cols * dt.bytes
    if engine == "dma":   # N1: DMA transpose at up to 90% of DMA throughput HBM->SBUF
        loads = load_stage(chunk(total, ctx), Q_INPUT, ctx, (Dep(INPUTS),), efficiency=0.9,
                           opcode="DMA_TRANSPOSE")
        return [loads, store_stage(chunk(total, ctx), Q_OUTPUT, ctx, (Dep(0, spread(
            len(chunk(total, ctx)), loads.n)),))]
    if engine == "tensor":   # N8': max(P, min(64, F)) per 128x128 tile, then eviction
        r, cc = tile_sizes(rows, 128), tile_sizes(cols, 128)
        P, F = np.repeat(r, len(cc)), np.tile(cc, len(r))
        cyc = np.maximum(P, np.minimum(c.mm_min_cycles, F))
        hw = 2.0 * P * F * 128
        te = _engine_stage(L_PE_MM, "TRANSPOSE", cyc, dev.tensor_hz, ctx, (), hw_flops=hw,
                           transpose_flops=hw, adj_hw_flops=hw, sbuf_r=P * F * dt.bytes, psum_w=P * F * dt.bytes)
        ev = _engine_stage(L_ACT, "TENSOR_COPY", np.maximum(c.min_ii_cycles, P), dev.scalar_hz, ctx,
                           (Dep(1, np.arange(len(P))),), psum_r=P * F * dt.bytes, sbuf_w=P * F * dt.bytes)
        free = P * F / PARTITIONS
        return _io(free, [dt.bytes], dt.bytes, ctx, [te, ev], resident=_resident(op))
    blocks = max(1, math.ceil(rows * cols / (PARTITIONS * 32)))      # 32x32 blocks on VectorE
    cyc = np.full(blocks, max(c.min_ii_cycles, 32.0))
    ve = _engine_stage(L_DVE, "TRANSPOSE", cyc, dev.vector_hz, ctx, (),
                       sbuf_r=total / blocks, sbuf_w=total / blocks)
    return _io(np.full(blocks, 32.0), [dt.bytes], dt.bytes, ctx, [ve], resident=_resident(op))


def lower_embedding(op: Op, ctx: CoreContext) -> list[Stage]:
    """Indirect DMA gather of one table row per token (row bytes per partition), indices on GpSimd."""
    dev, c = ctx.device, ctx.costs
    dt = get_dtype(op.get("dtype"))
    tokens, hidden = _shard(op.get("tokens"), ctx), op.get("hidden")
    row_bytes = hidden * dt.bytes
    tiles = tile_sizes(tokens, PARTITIONS)
    idx = _engine_stage(L_POOL, "IOTA", c.gpsimd_start_cycles + tiles, dev.gpsimd_hz, ctx,
                        (Dep(INPUTS),))
    sizes = tiles * row_bytes
    gather = load_stage(sizes, Q_INPUT, ctx, (Dep(0, np.arange(len(tiles))),),
                        per_partition=np.full(len(tiles), float(row_bytes)), opcode="GATHER")
    gather.latency = c.dge_latency_s + c.dma_fixed_latency_s
    store = store_stage(sizes, Q_OUTPUT, ctx, (Dep(1, np.arange(len(tiles))),))
    return [idx, gather, store]


def lower_im2col(op: Op, ctx: CoreContext) -> list[Stage]:
    """A strided DMA gather: contiguous runs are short, so transfers are inefficient."""
    dt = get_dtype(op.get("dtype"))
    total = _shard(op.get("elements"), ctx) * dt.bytes
    sizes = chunk(total, ctx)
    loads = load_stage(sizes, Q_INPUT, ctx, (Dep(INPUTS),),
                       per_partition=np.full(len(sizes), 256.0), opcode="DMA_TRANSPOSE")
    return [loads, store_stage(sizes, Q_OUTPUT, ctx, (Dep(0, np.arange(len(sizes))),))]


def lower_dma(op: Op, ctx: CoreContext) -> list[Stage]:
    sizes = chunk(_shard(op.get("bytes"), ctx), ctx)
    if op.get("direction") == "store":
        st = store_stage(sizes, Q_OUTPUT, ctx, (Dep(INPUTS),))
        st.deferred = False
        return [st]
    loads = load_stage(sizes, Q_INPUT, ctx, (Dep(INPUTS),))
    if op.get("direction") == "copy":
        return [loads, store_stage(sizes, Q_OUTPUT, ctx, (Dep(0, np.arange(len(sizes))),))]
    return [loads]
