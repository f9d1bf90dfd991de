"""DMA transfers: HBM <-> SBUF with a per-transfer size efficiency (trn2-arch.md §2, §6)."""
from __future__ import annotations

import numpy as np

from ..engine.isa import L_DMA, OP
from .stages import CoreContext, Dep, Stage

PARTITIONS = 128  # N2: SBUF transfers spread over 128 partitions (8 per DMA engine)


def eta(bytes_per_partition: np.ndarray, ctx: CoreContext) -> np.ndarray:
    """Share of DMA bandwidth a transfer of this size per partition reaches (assumption, §6)."""
    s = np.asarray(bytes_per_partition, dtype=np.float64)
    return s / (s + ctx.costs.dma_eta_half_bytes)


def chunk(total_bytes: float, ctx: CoreContext, size: float | None = None) -> np.ndarray:
    """Split a tensor's bytes into the transfers the compiler would issue."""
    size = float(size or ctx.costs.dma_transfer_bytes)
    total = float(total_bytes)
    if total <= 0:
        return np.zeros(0)
    full = int(total // size)
    rem = total - full * size
    sizes = np.full(full + (1 if rem > 0 else 0), size)
    if rem > 0:
        sizes[-1] = rem
    return sizes


def transfer_seconds(sizes: np.ndarray, ctx: CoreContext, *, per_partition: np.ndarray | None = None,
                     efficiency: float = 1.0) -> np.ndarray:
    s = per_partition if per_partition is not None else np.maximum(sizes / PARTITIONS, 1.0)
    return sizes / (ctx.dma_bw * efficiency * eta(s, ctx))


def load_stage(sizes: np.ndarray, queue: int, ctx: CoreContext, deps: tuple[Dep, ...], *,
               per_partition: np.ndarray | None = None, efficiency: float = 1.0,
               opcode: str = "DMA_LOAD") -> Stage:
    """HBM -> SBUF transfers."""
    return Stage(L_DMA, OP[opcode], transfer_seconds(sizes, ctx, per_partition=per_partition,
                                                     efficiency=efficiency),
                 deps, ctx.costs.dma_fixed_latency_s, queue=queue, hbm_r=sizes, sbuf_w=sizes)


def store_stage(sizes: np.ndarray, queue: int, ctx: CoreContext, deps: tuple[Dep, ...]) -> Stage:
    """SBUF -> HBM transfers, issued after the next op's loads (deferred)."""
    return Stage(L_DMA, OP["DMA_STORE"], transfer_seconds(sizes, ctx), deps,
                 ctx.costs.dma_fixed_latency_s, queue=queue, deferred=True, hbm_w=sizes, sbuf_r=sizes)
