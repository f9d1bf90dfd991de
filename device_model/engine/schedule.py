"""The engine scheduler: places lowered ops' instructions on in-order lanes, vectorised.

Each lane runs its instructions in program order (N2: one sequencer per engine). An instruction
starts when its lane is free and its dependencies (semaphores) have signalled:

    end[i] = dur[i] + max(end[i-1], ready[i])

This max-plus recurrence has a closed form over a whole stage, so a stage of any length is
scheduled with a handful of numpy calls:  with C = cumsum(dur),
    end = C + max(lane_free, cummax(ready - (C - dur)))
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .contention import DmaContention
from ..catalog.costs import CostParams
from .isa import L_CC, L_DMA, L_PE_MM, LANES
from ..lowering.stages import INPUTS, PREFETCH, QUANTITIES, LoweredOp, Stage

COLUMNS = ("lane", "opcode", "op", "queue", "start", "end") + QUANTITIES


def place(dur: np.ndarray, ready: np.ndarray, lane_free: float) -> np.ndarray:
    """End times of `dur`-long instructions run in order on a lane free from `lane_free`."""
    c = np.cumsum(dur)
    return c + np.maximum(lane_free, np.maximum.accumulate(ready - (c - dur)))


@dataclass(slots=True)
class Placed:
    stage: Stage
    op: int
    start: np.ndarray
    end: np.ndarray


@dataclass(frozen=True, slots=True)
class ThrottleEvent:
    start: float
    duration: float
    ratio: float        # utilization limit at the restart (P2: ~50%)


class Scheduler:
    """Schedules a stream of lowered ops for one physical core. Keeps lane state between calls,
    so a long run can be fed op by op (or in chunks)."""

    def __init__(self, costs: CostParams, t0: float = 0.0) -> None:
        self.costs = costs
        self.lane_free = np.full(len(LANES), t0)
        self.op_start: list[float] = []
        self.op_end: list[float] = []
        self.compute_end: list[float] = []
        self.placed: list[Placed] = []
        self.throttles: list[ThrottleEvent] = []
        self._pending: list[tuple[int, Placed | None, Stage, list[np.ndarray]]] = []
        self.t0 = t0
        self._pe_used = False
        self._contention = DmaContention(costs)
        self._weight_ops: list[int] = []    # ops that load weights ahead (PREFETCH), in order

    # --- public ------------------------------------------------------------------------------
    def run(self, ops: list[LoweredOp]) -> None:
        for op in ops:
            self.add(op)

    def add(self, op: LoweredOp) -> None:
        idx = len(self.op_start)
        deps = op.deps if op.deps else ((idx - 1,) if idx else ())
        if op.kind == "collective" and any(p[0] in deps for p in self._pending):
            # a collective reads its input from HBM: its producers' stores land first
            self._flush()
            inputs_ready = max((self.op_end[d] for d in deps), default=self.t0)
        else:
            inputs_ready = max((self.compute_end[d] for d in deps), default=self.t0)
        prefetch_ready = self._prefetch_ready(idx)
        ends: list[np.ndarray] = []
        first_start, last_end = np.inf, inputs_ready
        flushed = False
        for s_i, stage in enumerate(op.stages):
            if not flushed and not self._keeps_stores_pending(stage):
                self._flush()
                flushed = True
            ready = self._ready(stage, ends, inputs_ready, prefetch_ready)
            if stage.deferred:
                self._pending.append((idx, None, stage, [ready]))
                ends.append(np.full(stage.n, np.inf))      # nothing in this op waits on stores
                continue
            p = self._place(stage, idx, ready)
            ends.append(p.end + stage.latency)
            first_start = min(first_start, float(p.start[0])) if stage.n else first_start
            last_end = max(last_end, float(p.end[-1])) if stage.n else last_end
        if not flushed:
            self._flush()
        self.op_start.append(first_start if np.isfinite(first_start) else inputs_ready)
        if any(d.stage == PREFETCH and (d.mask is None or d.mask.any())
               for st in op.stages for d in st.deps):
            self._weight_ops.append(idx)
        self.compute_end.append(last_end)
        self.op_end.append(last_end)

    def finish(self) -> None:
        self._flush()

    # --- internals ---------------------------------------------------------------------------
    def _prefetch_ready(self, idx: int) -> float:
        """When op `idx`'s weights may start loading. Weights depend on nothing computed, so
        the compiler streams them ahead: with `weight_prefetch_ops` = k, from the start of the
        k-th earlier op that loads weights (1: double-buffered, the next matmul's weights load
        while the current one computes, through the elementwise ops between them), never later
        than the previous op's start (the rule with k = 0)."""
        if not idx:
            return self.t0
        previous = self.op_start[idx - 1]
        depth = int(self.costs.weight_prefetch_ops)
        if depth <= 0 or len(self._weight_ops) < depth:
            return previous
        return min(previous, self.op_start[self._weight_ops[-depth]])

    @staticmethod
    def _keeps_stores_pending(stage: Stage) -> bool:
        """Prefetchable loads go ahead of the previous op's stores. So does a collective (it
        does not use the DMA lane): placed first, it slows the stores that overlap it."""
        return stage.lane == L_CC or (stage.lane == L_DMA and not stage.deferred and all(
            d.stage in (INPUTS, PREFETCH) for d in stage.deps))

    def _ready(self, stage: Stage, ends: list[np.ndarray], inputs_ready: float,
               prefetch_ready: float) -> np.ndarray:
        ready = np.full(stage.n, self.t0)
        for dep in stage.deps:
            if dep.stage == INPUTS:
                value = np.full(stage.n, inputs_ready)
            elif dep.stage == PREFETCH:
                value = np.full(stage.n, prefetch_ready)
            else:
                src = ends[dep.stage]
                if src.size == 0:
                    continue
                value = src[dep.index] if dep.index is not None else np.full(stage.n, src.max())
            if dep.mask is not None:
                value = np.where(dep.mask, value, self.t0)
            np.maximum(ready, value, out=ready)
        return ready

    def _place(self, stage: Stage, op: int, ready: np.ndarray) -> Placed:
        lane = stage.lane
        dur = stage.dur
        end = place(dur, ready, self.lane_free[lane])
        start = end - dur
        if lane == L_PE_MM and stage.n:
            dur, end = self._throttle(dur, ready, end)
            start = end - dur
            self._pe_used = True
        elif lane == L_DMA and stage.n and self._contention:
            contended = self._contend(dur, ready, start, end)
            if contended is not None:
                start, end = contended
                dur = end - start
        elif lane == L_CC and stage.n:
            self._contention.add(start, end, stage.dma_share)
        if stage.n:
            self.lane_free[lane] = end[-1]
        p = Placed(stage, op, start, end)
        if dur is not stage.dur:
            p.stage = _with_dur(stage, dur)
        self.placed.append(p)
        return p

    def _throttle(self, dur: np.ndarray, ready: np.ndarray, end: np.ndarray):
        """P2: after >= 3 us idle, TensorE restarts at ~50% and ramps linearly to full over ~3 us
        of work. Each instruction inside a ramp is slowed by the integral of 1/rate over the part
        of the ramp it covers; then the stage is placed again."""
        c = self.costs
        start = end - dur
        first_prev = self.lane_free[L_PE_MM] if self._pe_used else -np.inf
        prev_end = np.concatenate([[first_prev], end[:-1]])
        restart = (start - prev_end) >= c.throttle_idle_s
        # A restart at full rate (ratio 1, allowed by the overrides) or a ramp of no length: no ramp.
        if not restart.any() or c.throttle_start_ratio >= 1.0 or c.throttle_ramp_s <= 0.0:
            return dur, end
        seg = np.cumsum(restart)
        done = np.cumsum(dur) - dur                       # work before each instruction
        seg_origin = np.concatenate([[0.0], done[restart]])[seg]
        ramp, r0 = c.throttle_ramp_s, c.throttle_start_ratio
        a = np.clip(done - seg_origin, 0.0, ramp)
        b = np.clip(done - seg_origin + dur, 0.0, ramp)
        k = (1.0 - r0) / ramp
        extra = (np.log(r0 + k * b) - np.log(r0 + k * a)) / k - (b - a)
        extra[seg == 0] = 0.0
        dur = dur + extra
        end = place(dur, ready, self.lane_free[L_PE_MM])
        for t in (end - dur)[restart]:
            self.throttles.append(ThrottleEvent(float(t), ramp, r0))
        return dur, end

    def _contend(self, dur: np.ndarray, ready: np.ndarray, start: np.ndarray, end: np.ndarray):
        """Re-place a DMA stage in work time where it overlaps collectives (contention.py)."""
        c = self._contention
        c.forget_before(self.lane_free[L_DMA])
        if not c.overlaps(float(start[0]), float(end[-1])):
            return None
        tau_end = place(dur, c.to_work(ready), float(c.to_work(self.lane_free[L_DMA:L_DMA + 1])[0]))
        return c.to_wall(tau_end - dur), c.to_wall(tau_end)

    def _flush(self) -> None:
        for op, _, stage, (ready,) in self._pending:
            p = self._place(stage, op, ready)
            if stage.n:
                self.op_end[op] = max(self.op_end[op], float(p.end[-1]))
        self._pending.clear()


def _with_dur(stage: Stage, dur: np.ndarray) -> Stage:
    from dataclasses import replace
    return replace(stage, dur=dur)
