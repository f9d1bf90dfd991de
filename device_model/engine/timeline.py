"""The instruction timeline of one physical core, columnar (numpy), and what it adds up to."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .isa import ENGINES, LANE_ENGINE, QUEUES, E_DMA, E_CC
from .schedule import Scheduler, ThrottleEvent
from ..lowering.stages import QUANTITIES

LANE_ENGINE_ARR = np.array(LANE_ENGINE, dtype=np.int64)


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Total length covered by intervals (overlaps merged), vectorised."""
    if start.size == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    return _merged(start[order], end[order])


def _merged(s: np.ndarray, e: np.ndarray) -> float:
    """Length of the union of intervals sorted by start."""
    reach = np.maximum.accumulate(e)
    new_block = np.concatenate([[True], s[1:] > reach[:-1]])
    block_id = np.cumsum(new_block) - 1
    block_start = s[new_block]
    block_end = np.zeros(block_id[-1] + 1)
    np.maximum.at(block_end, block_id, e)
    return float(np.sum(block_end - block_start))


def _per_row(values: list, counts: list[int], offsets: np.ndarray) -> np.ndarray:
    """One stage quantity per instruction row: a stage gives one number for all its
    instructions (most do) or one per instruction. The numbers are repeated in one numpy call
    and the per-instruction arrays copied into their rows, where broadcasting each stage and
    concatenating cost a numpy call per stage: most of a decode bucket's timeline build."""
    scalars = [0.0 if isinstance(v, np.ndarray) else v for v in values]
    column = np.repeat(np.array(scalars, dtype=np.float64), counts)
    for i, v in enumerate(values):
        if isinstance(v, np.ndarray):
            column[offsets[i]:offsets[i + 1]] = v
    return column


@dataclass(frozen=True, slots=True)
class Timeline:
    """Columns of equal length, one row per instruction; times in seconds."""
    columns: dict[str, np.ndarray]
    op_names: tuple[str, ...]
    op_kinds: tuple[str, ...]
    op_phases: tuple[str, ...]
    op_start: np.ndarray
    op_end: np.ndarray
    throttles: tuple[ThrottleEvent, ...]
    t0: float

    @classmethod
    def from_scheduler(cls, sched: Scheduler, ops) -> "Timeline":
        sched.finish()
        placed = sched.placed
        n = [p.start.size for p in placed]
        cols: dict[str, np.ndarray] = {}
        cols["lane"] = np.repeat(np.array([p.stage.lane for p in placed], dtype=np.uint8), n)
        cols["opcode"] = np.repeat(np.array([p.stage.opcode for p in placed], dtype=np.uint8), n)
        cols["op"] = np.repeat(np.array([p.op for p in placed], dtype=np.int32), n)
        cols["queue"] = np.repeat(np.array([p.stage.queue for p in placed], dtype=np.uint8), n)
        cols["start"] = np.concatenate([p.start for p in placed]) if placed else np.zeros(0)
        cols["end"] = np.concatenate([p.end for p in placed]) if placed else np.zeros(0)
        offsets = np.concatenate(([0], np.cumsum(n, dtype=np.int64)))
        for q in QUANTITIES:
            cols[q] = _per_row([getattr(p.stage, q) for p in placed], n, offsets)
        return cls(cols, tuple(o.name for o in ops), tuple(o.kind for o in ops),
                   tuple(o.phase for o in ops), np.array(sched.op_start), np.array(sched.op_end),
                   tuple(sched.throttles), sched.t0)

    # --- sizes and spans --------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.columns["start"].size)

    @property
    def start(self) -> float:
        return float(self.columns["start"].min()) if len(self) else self.t0

    @property
    def end(self) -> float:
        return float(self.columns["end"].max()) if len(self) else self.t0

    @property
    def wall(self) -> float:
        return max(0.0, self.end - self.t0)

    def total(self, quantity: str) -> float:
        return float(self.columns[quantity].sum())

    # --- engines ----------------------------------------------------------------------------
    def engine_of_rows(self) -> np.ndarray:
        return LANE_ENGINE_ARR[self.columns["lane"]]

    def engine_active(self) -> dict[str, float]:
        """Seconds each engine processes >= 1 instruction (semaphore waits excluded, P1)."""
        eng = self.engine_of_rows()
        out = {}
        for e, name in enumerate(ENGINES):
            sel = eng == e
            out[name] = union_length(self.columns["start"][sel], self.columns["end"][sel])
        return out

    def dma_ring_active(self) -> float:
        """Seconds with a DMA transfer or a collective's ring traffic in flight."""
        eng = self.engine_of_rows()
        sel = (eng == E_DMA) | (eng == E_CC)
        return union_length(self.columns["start"][sel], self.columns["end"][sel])


    def dma_bytes_by_queue(self) -> dict[str, float]:
        sel = self.engine_of_rows() == E_DMA
        q = self.columns["queue"][sel].astype(np.int64)
        b = self.columns["hbm_r"][sel] + self.columns["hbm_w"][sel]
        sums = np.bincount(q, weights=b, minlength=len(QUEUES))[: len(QUEUES)]
        out = {name: float(sums[i]) for i, name in enumerate(QUEUES)}
        cc = self.engine_of_rows() == E_CC
        out["collective"] += float(self.columns["hbm_r"][cc].sum())
        return out

    # --- operators --------------------------------------------------------------------------
    def per_op(self) -> dict[str, np.ndarray]:
        """Per-operator sums of every quantity, plus instruction counts and spans."""
        n_ops = len(self.op_names)
        op = self.columns["op"]
        out = {q: np.bincount(op, weights=self.columns[q], minlength=n_ops) for q in QUANTITIES}
        out["instructions"] = np.bincount(op, minlength=n_ops)
        out["start"], out["end"] = self.op_start, self.op_end
        return out

