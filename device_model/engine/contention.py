"""DMA bandwidth shared between a core's collectives and its compute DMA (C4: one set of engines).

A collective in flight claims a share of the core's DMA/HBM bandwidth (`Stage.dma_share`, set when
it is lowered). The compute DMA queues get the rest, never less than what round-robin arbitration
at packet boundaries guarantees them (N5: queues are served round-robin and switch only at packet
boundaries; C4: compute packets are 4 KiB, collective packets 64 KiB):

    available(t) = 1 - min(share, 1 - floor)    while a collective runs, else 1
    floor        = p_dma / (p_dma + p_cc)       = 4 / (4 + 64) with the default packets

The collective itself is not slowed: it wins p_cc / (p_dma + p_cc) = 16/17 of the arbitration
whenever both sides are backlogged, which is more than the rate its alpha-beta cost asks for
unless its share is above 16/17; then it loses at most 1/17 (docs/chip-model.md).

The DMA lane stays a closed-form in-order lane: time is mapped to *work time*
tau = W(t) = integral of available(t), strictly increasing and piecewise linear. On the tau axis
every transfer runs at full rate, so the usual recurrence places the stage there, and W^-1 maps
starts and ends back. W is monotonic, so max(lane_free, ready) commutes with it and the mapping is
exact, not a re-placement.
"""
from __future__ import annotations

import numpy as np

from ..catalog.costs import CostParams


def compute_dma_floor(costs: CostParams) -> float:
    """Share of DMA bandwidth compute queues keep however busy the collective queues are."""
    return costs.dma_packet_bytes / (costs.dma_packet_bytes + costs.cc_dma_packet_bytes)


class DmaContention:
    """The collectives placed so far on one core, as intervals of reduced compute DMA rate."""

    def __init__(self, costs: CostParams) -> None:
        self.max_loss = 1.0 - compute_dma_floor(costs)
        self._start: list[np.ndarray] = []
        self._end: list[np.ndarray] = []
        self._loss: list[float] = []
        self._table: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def __bool__(self) -> bool:
        return bool(self._loss)

    def add(self, start: np.ndarray, end: np.ndarray, share: float) -> None:
        """A collective stage placed at [start, end) claiming `share` of the DMA bandwidth."""
        keep = end > start
        if share <= 0.0 or not keep.any():
            return
        self._start.append(start[keep])
        self._end.append(end[keep])
        self._loss.append(min(float(share), self.max_loss))
        self._table = None

    def forget_before(self, t: float) -> None:
        """Drop collectives that ended by `t`: no later transfer can start before it."""
        alive = [i for i, e in enumerate(self._end) if e[-1] > t]
        if len(alive) < len(self._end):
            self._start = [self._start[i] for i in alive]
            self._end = [self._end[i] for i in alive]
            self._loss = [self._loss[i] for i in alive]
            self._table = None

    def overlaps(self, t_from: float, t_to: float) -> bool:
        return bool(self._loss) and t_from < self._end[-1][-1] and t_to > self._start[0][0]

    def to_work(self, t: np.ndarray) -> np.ndarray:
        """Work time W(t): wall time less the bandwidth-seconds collectives took before t."""
        times, lost, _ = self._breakpoints()
        return t - np.interp(t, times, lost)

    def to_wall(self, tau: np.ndarray) -> np.ndarray:
        """W^-1: linear between interval edges; outside them the rate is full (slope 1)."""
        times, _, work = self._breakpoints()
        inside = np.interp(tau, work, times) + np.maximum(tau - work[-1], 0.0)
        return np.where(tau <= work[0], tau, inside)      # before the first collective: W(t) = t

    def _breakpoints(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Interval edges, the bandwidth-seconds lost up to each, and W at each edge.
        Collectives share one in-order lane, so intervals never overlap; the running maximum
        only absorbs rounding between back-to-back steps (np.interp needs sorted edges)."""
        if self._table is None:
            times = np.empty(2 * sum(s.size for s in self._start))
            times[0::2] = np.concatenate(self._start)
            times[1::2] = np.concatenate(self._end)
            times = np.maximum.accumulate(times)
            loss = np.concatenate([np.full(s.size, x) for s, x in zip(self._start, self._loss)])
            steps = np.zeros(times.size)
            steps[1::2] = loss * (times[1::2] - times[0::2])
            lost = np.cumsum(steps)
            self._table = (times, lost, times - lost)
        return self._table
