"""The instrumentation: what a NeuronCore's counters accumulate while it executes Runs.

An `ExecutionProfile` condenses one execution's instruction timeline, once, into cumulative
curves on a time grid: for every counter quantity, how much of it had accrued `t` seconds into the
execution. Engine activity merges overlapping instructions and excludes semaphore waits (P1);
additive quantities (instructions, FLOPs, bytes) are binned with `np.bincount`, never a Python
loop per instruction. A runtime then adds `profile.between(t0, t1)` deltas (or `totals * n` for
n whole executions) into `Counters`, which only grow.

Profile quantities are per *physical* core; `Counters` scales FLOPs and bytes by LNC for the
logical core, as `Run.metrics()` does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.isa import E_CC, E_DMA, E_GPSIMD, E_SCALAR, E_TENSOR, E_VECTOR
from . import layout as L
from .layout import DMA_QUEUES, ENGINES, ERROR_KINDS, EXEC_STATUS, FLOP_KINDS

# Layout of a profile's quantity vector.
Q_BUSY = 0
Q_ENGINE = slice(1, 1 + len(ENGINES))
Q_INSTR = slice(Q_ENGINE.stop, Q_ENGINE.stop + len(ENGINES))
Q_FLOPS = slice(Q_INSTR.stop, Q_INSTR.stop + len(FLOP_KINDS))
Q_HBM_R = Q_FLOPS.stop
Q_HBM_W = Q_HBM_R + 1
Q_DMA = slice(Q_HBM_W + 1, Q_HBM_W + 1 + len(DMA_QUEUES))
Q_CC_BYTES = Q_DMA.stop
Q_CC_S = Q_CC_BYTES + 1
Q_THROTTLED = Q_CC_S + 1
NQ = Q_THROTTLED + 1
INTERVAL_QUANTITIES = (Q_BUSY, *range(Q_ENGINE.start, Q_ENGINE.stop), Q_CC_S, Q_THROTTLED)

# Timeline engine groups behind each counter engine; "dma" counts DMA rings carrying collectives too.
_ENGINE_GROUPS = ((E_TENSOR,), (E_VECTOR,), (E_SCALAR,), (E_GPSIMD,), (E_DMA, E_CC))
GRID_BINS = 256


def merged_blocks(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted intervals covering the union of [start, end)."""
    if start.size == 0:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.concatenate([[True], s[1:] > reach[:-1]])
    block = np.cumsum(new) - 1
    bend = np.zeros(block[-1] + 1)
    np.maximum.at(bend, block, e)
    return s[new], bend


def coverage(bs: np.ndarray, be: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the blocks' union inside [0, t] for each t (blocks disjoint and sorted)."""
    if bs.size == 0:
        return np.zeros_like(t)
    before = np.concatenate([[0.0], np.cumsum(be - bs)])
    i = np.searchsorted(bs, t, side="right") - 1
    inside = np.clip(t - bs[np.maximum(i, 0)], 0.0, (be - bs)[np.maximum(i, 0)])
    return np.where(i >= 0, before[np.maximum(i, 0)] + inside, 0.0)


@dataclass(frozen=True, slots=True)
class ExecutionProfile:
    """Cumulative counter curves of one execution: `cum[k]` is what accrued by `grid[k]`."""
    wall: float
    grid: np.ndarray          # (K+1,) seconds from the execution's start, grid[-1] == wall
    cum: np.ndarray           # (K+1, NQ), non-decreasing in k

    @property
    def totals(self) -> np.ndarray:
        return self.cum[-1]

    @classmethod
    def from_run(cls, run, bins: int = GRID_BINS) -> "ExecutionProfile":
        """Condense `run.timeline` (one physical core's instructions)."""
        tl = run.timeline
        cols = tl.columns
        wall = max(tl.wall, 1e-12)
        start, end = cols["start"] - tl.t0, cols["end"] - tl.t0
        grid = np.linspace(0.0, wall, bins + 1)
        cum = np.zeros((bins + 1, NQ))
        cum[:, Q_BUSY] = grid
        engine = tl.engine_of_rows()
        for i, group in enumerate(_ENGINE_GROUPS):
            sel = np.isin(engine, group)
            cum[:, Q_ENGINE.start + i] = coverage(*merged_blocks(start[sel], end[sel]), grid)
        cc = engine == E_CC
        cum[:, Q_CC_S] = coverage(*merged_blocks(start[cc], end[cc]), grid)
        if tl.throttles:
            ts = np.array([ev.start for ev in tl.throttles]) - tl.t0
            td = np.array([ev.duration for ev in tl.throttles])
            cum[:, Q_THROTTLED] = coverage(*merged_blocks(ts, ts + td), grid)
        # Additive quantities land in the bin of their instruction's midpoint (starts for counts).
        mid_bin = np.minimum((0.5 * (start + end) / wall * bins).astype(np.int64), bins - 1)
        start_bin = np.minimum((start / wall * bins).astype(np.int64), bins - 1)
        group_of_engine = np.full(8, -1)
        for i, group in enumerate(_ENGINE_GROUPS):
            group_of_engine[list(group)] = i
        g = group_of_engine[engine]
        counted = g >= 0
        flat = start_bin[counted] * len(ENGINES) + g[counted]
        instr = np.bincount(flat, minlength=bins * len(ENGINES)).reshape(bins, len(ENGINES))
        per_bin = np.zeros((bins, NQ))
        per_bin[:, Q_INSTR] = instr
        for j, col in enumerate(("flops", "hw_flops", "adj_flops", "adj_hw_flops")):
            per_bin[:, Q_FLOPS.start + j] = np.bincount(mid_bin, cols[col], minlength=bins)
        per_bin[:, Q_HBM_R] = np.bincount(mid_bin, cols["hbm_r"], minlength=bins)
        per_bin[:, Q_HBM_W] = np.bincount(mid_bin, cols["hbm_w"], minlength=bins)
        dma = engine == E_DMA
        moved = cols["hbm_r"] + cols["hbm_w"]
        queue = np.minimum(cols["queue"].astype(np.int64), len(DMA_QUEUES) - 1)
        flat = mid_bin[dma] * len(DMA_QUEUES) + queue[dma]
        per_bin[:, Q_DMA] = np.bincount(flat, moved[dma], minlength=bins * len(DMA_QUEUES)).reshape(
            bins, len(DMA_QUEUES))
        per_bin[:, Q_DMA.start + len(DMA_QUEUES) - 1] += np.bincount(mid_bin[cc], cols["hbm_r"][cc],
                                                                     minlength=bins)
        per_bin[:, Q_CC_BYTES] = np.bincount(mid_bin[cc], cols["hbm_r"][cc], minlength=bins)
        additive = np.ones(NQ, dtype=bool)
        additive[list(INTERVAL_QUANTITIES)] = False
        cum[1:, additive] = np.cumsum(per_bin[:, additive], axis=0)
        return cls(wall, grid, cum)

    @classmethod
    def uniform(cls, wall: float, amounts: dict[int, float], active: tuple[int, ...] = ()) -> "ExecutionProfile":
        """A synthetic phase (model load, checkpoint): `amounts` accrue evenly, `active` quantities
        are busy the whole time."""
        grid = np.array([0.0, wall])
        cum = np.zeros((2, NQ))
        for q, v in amounts.items():
            cum[1, q] = v
        for q in active:
            cum[1, q] = wall
        return cls(wall, grid, cum)

    @classmethod
    def concat(cls, parts: list[tuple["ExecutionProfile", int]], gap: float = 0.0,
               bins: int = 4 * GRID_BINS) -> "ExecutionProfile":
        """Executions run back to back (`count` times each, `gap` idle seconds after each),
        resampled onto `bins` uniform steps. Each resampled point is found in closed form (which
        execution of its part it falls in, and where in it), so a step of a million
        micro-batches costs what one does."""
        t = sum((prof.wall + gap) * count for prof, count in parts)
        new_grid = np.linspace(0.0, t, bins + 1)
        new_cum = np.zeros((bins + 1, NQ))
        start, base = 0.0, np.zeros(NQ)
        for prof, count in parts:
            period = prof.wall + gap
            if count < 1 or period <= 0:
                continue
            span = period * count
            sel = (new_grid >= start) & (new_grid <= start + span)
            tau = new_grid[sel] - start
            k = np.minimum(np.floor(tau / period), count - 1)      # executions done before
            r = np.minimum(tau - k * period, prof.wall)             # into this one (gap: its end)
            within = np.stack([np.interp(r, prof.grid, prof.cum[:, q]) for q in range(NQ)], axis=1)
            new_cum[sel] = base + k[:, None] * prof.totals + within
            start, base = start + span, base + count * prof.totals
        new_cum[-1] = base
        return cls(t, new_grid, new_cum)

    def at(self, t: float) -> np.ndarray:
        """Cumulative quantities `t` seconds into the execution (clipped to [0, wall])."""
        t = min(max(t, 0.0), self.wall)
        k = int(np.searchsorted(self.grid, t, side="right")) - 1
        if k >= self.grid.size - 1:
            return self.cum[-1]
        frac = (t - self.grid[k]) / (self.grid[k + 1] - self.grid[k])
        return self.cum[k] + frac * (self.cum[k + 1] - self.cum[k])

    def between(self, t0: float, t1: float) -> np.ndarray:
        return self.at(t1) - self.at(t0)


class Counters:
    """Accumulates into a runtime's counter record (see `runtime.layout.record_dtype`)."""

    def __init__(self, record: np.ndarray, lnc: int, core_devices: np.ndarray) -> None:
        self.r = record
        self.lnc = lnc
        self.core_devices = np.asarray(core_devices, dtype=np.int64)   # index into dev_* arrays
        self.n_devices = record["dev_energy_j"].shape[0]
        self.ring = record["latency_total"].shape[0]

    def add_activity(self, delta: np.ndarray, cores: np.ndarray | None = None) -> None:
        """Add one physical-core delta (NQ,) to every physical core of `cores` (default: all)."""
        if np.any(delta < -1e-9):
            raise ValueError("counter deltas must be non-negative")
        delta = np.maximum(delta, 0.0)
        sel = slice(None) if cores is None else cores
        r, lnc = self.r, self.lnc
        r["core_busy_s"][sel] += delta[Q_BUSY]
        r["phys_busy_s"][sel] += delta[Q_BUSY]
        r["engine_active_s"][sel] += delta[Q_ENGINE]
        r["instructions"][sel] += np.rint(delta[Q_INSTR]).astype(np.uint64)
        r["flops"][sel] += delta[Q_FLOPS] * lnc
        r["hbm_read_bytes"][sel] += delta[Q_HBM_R] * lnc
        r["hbm_write_bytes"][sel] += delta[Q_HBM_W] * lnc
        r["dma_bytes"][sel] += delta[Q_DMA] * lnc
        r["collective_bytes"][sel] += delta[Q_CC_BYTES] * lnc
        r["collective_s"][sel] += delta[Q_CC_S]
        r["throttled_s"][sel] += delta[Q_THROTTLED]
        self._device_hbm()

    def _device_hbm(self) -> None:
        r, d = self.r, self.n_devices
        r["dev_hbm_read_bytes"] = np.bincount(self.core_devices, r["hbm_read_bytes"], minlength=d)
        r["dev_hbm_write_bytes"] = np.bincount(self.core_devices, r["hbm_write_bytes"], minlength=d)

    def add_executions(self, status: str, count: int = 1, error: str | None = None) -> None:
        self.r["exec_status"][EXEC_STATUS.index(status)] += count
        if error is not None:
            self.r["errors"][ERROR_KINDS.index(error)] += count

    def add_latencies(self, total: np.ndarray, device: np.ndarray,
                      executions: int | None = None) -> None:
        """Append to the latency ring (only the newest `ring` values are kept), and count
        `executions` (default: one per value) in the histograms, the values standing for them
        in equal shares: a tick's many executions are sampled, never dropped."""
        total, device = np.asarray(total, float), np.asarray(device, float)
        self._histogram(total, device, total.size if executions is None else int(executions))
        total, device = total[-self.ring:], device[-self.ring:]
        count = int(self.r["latency_count"])
        pos = (count + np.arange(total.size)) % self.ring
        self.r["latency_total"][pos] = total
        self.r["latency_device"][pos] = device
        self.r["latency_count"] = count + total.size

    def _histogram(self, total: np.ndarray, device: np.ndarray, executions: int) -> None:
        if total.size == 0 or executions <= 0:
            return
        share = np.full(total.size, executions // total.size, dtype=np.uint64)
        share[: executions % total.size] += 1
        r = self.r
        np.add.at(r["latency_hist_total"], L.latency_bins(total), share)
        np.add.at(r["latency_hist_device"], L.latency_bins(device), share)
        r["latency_executions"] += np.uint64(executions)

    def add_ecc(self, device_slot: int, kind_index: int, count: int = 1) -> None:
        self.r["dev_ecc"][device_slot, kind_index] += count
