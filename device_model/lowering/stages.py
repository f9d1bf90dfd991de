"""The lowered form of an operator: per-lane instruction *stages* with vectorised costs.

A stage is a run of same-opcode instructions on one lane, in program order. Each instruction may
wait on instructions of earlier stages of the same op (`Dep` with an index map), on the op's
inputs (`INPUTS`), or only on the prefetch window (`PREFETCH`: weights can load while the previous
op still computes). Quantities are per instruction (arrays) or the same for all (floats).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..catalog.costs import CostParams
from ..engine.isa import Q_NONE
from ..catalog.specs import DeviceSpec

INPUTS = -1
PREFETCH = -2


@dataclass(frozen=True, slots=True)
class Dep:
    stage: int                       # index of an earlier stage of this op, or INPUTS / PREFETCH
    index: np.ndarray | None = None  # per instruction: which instruction of `stage`; None = all
    mask: np.ndarray | None = None   # per instruction: whether this dep applies; None = all


@dataclass(slots=True)
class Stage:
    lane: int
    opcode: int
    dur: np.ndarray                  # seconds per instruction
    deps: tuple[Dep, ...]
    latency: float                   # seconds after an instruction ends before dependents start
    queue: int = Q_NONE
    deferred: bool = False           # a store: issued after the next op's loads (prefetch order)
    dma_share: float = 0.0           # collectives: share of the core's DMA bandwidth they claim
    flops: np.ndarray | float = 0.0  # model FLOPs (2*MACs) per instruction
    hw_flops: np.ndarray | float = 0.0
    transpose_flops: np.ndarray | float = 0.0
    adj_flops: np.ndarray | float = 0.0    # model FLOPs normalised to the BF16 rate (P1 adjusted_*)
    adj_hw_flops: np.ndarray | float = 0.0
    hbm_r: np.ndarray | float = 0.0
    hbm_w: np.ndarray | float = 0.0
    sbuf_r: np.ndarray | float = 0.0
    sbuf_w: np.ndarray | float = 0.0
    psum_r: np.ndarray | float = 0.0
    psum_w: np.ndarray | float = 0.0

    @property
    def n(self) -> int:
        return len(self.dur)


QUANTITIES = ("flops", "hw_flops", "transpose_flops", "adj_flops", "adj_hw_flops", "hbm_r", "hbm_w", "sbuf_r", "sbuf_w",
              "psum_r", "psum_w")


@dataclass(frozen=True, slots=True)
class CoreContext:
    """What lowering needs to know about the physical core it targets."""
    device: DeviceSpec
    costs: CostParams
    shard: int = 1            # physical cores sharing each op (LNC)
    dma_bw: float = 0.0       # achievable DMA bytes/s of one physical core (HBM share applied)

    @property
    def sbuf_budget(self) -> float:
        return self.device.sbuf_bytes * self.costs.sbuf_usable_fraction

    def cycles(self, n: np.ndarray | float, hz: float) -> np.ndarray:
        return np.asarray(n, dtype=np.float64) / hz


def tile_sizes(size: int, tile: int) -> np.ndarray:
    """Sizes of the tiles covering `size` in steps of `tile` (last one partial)."""
    full, rem = divmod(int(size), int(tile))
    sizes = np.full(full + (1 if rem else 0), tile, dtype=np.float64)
    if rem:
        sizes[-1] = rem
    return sizes


def spread(n_from: int, n_to: int) -> np.ndarray:
    """For each of `n_from` instructions, the index of the `n_to`-long stage it waits on, so that
    progress through both is proportional (data streams in as it is consumed)."""
    if n_to <= 0:
        raise ValueError("empty dependency stage")
    return np.minimum(((np.arange(n_from) + 1) * n_to + n_from - 1) // n_from - 1, n_to - 1)


def spread_bytes(sizes: np.ndarray, n_to: int) -> np.ndarray:
    """As `spread`, for transfers of the given sizes that carry the output of `n_to` equal
    producing instructions: each waits on the one that finishes its last byte. A short last
    transfer (the remainder of a tensor that is not a whole number of transfers) leaves the
    long ones before it waiting for nearly all the output, as it would on the chip; `spread`
    would have let them start halfway."""
    if n_to <= 0:
        raise ValueError("empty dependency stage")
    total = float(np.sum(sizes))
    if total <= 0:
        return spread(len(sizes), n_to)
    done = np.cumsum(sizes) / total
    return np.clip(np.ceil(done * n_to - 1e-9).astype(np.int64) - 1, 0, n_to - 1)


@dataclass(slots=True)
class LoweredOp:
    """An op ready for scheduling: its stages, and which earlier ops it waits on."""
    index: int
    name: str
    kind: str
    phase: str
    deps: tuple[int, ...]
    stages: list[Stage] = field(default_factory=list)
