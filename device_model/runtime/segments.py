"""The life of a job in simulated time, as a stream of segments.

A segment is either a batch of `count` identical executions, one every `period` seconds (the
execution first, then the host-side gap: data loading for training, waiting for requests for
inference), or a phase without executions (model load, checkpoint, a hung execution). Accounting
at any offset into a segment is closed-form, so a fast demo speed never loops per execution.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .counters import NQ, Q_BUSY, Q_DMA, Q_ENGINE, Q_HBM_R, Q_HBM_W, ExecutionProfile
from .layout import DMA_QUEUES, ENGINES

BATCH_SPAN_S = 0.5              # a batch covers about this much simulated time
CHECKPOINT_EVERY_S = 120.0      # assumption: a training job checkpoints every 2 minutes
CHECKPOINT_S = 8.0              # assumption: pause while state streams to host
DATA_GAP_RATIO = 0.04           # assumption: data loading adds ~4 % to a step
SLOW_LOADER_P = 0.05            # assumption: share of batches whose loader stalls
SERVE_LOAD = 0.6                # assumption: mean request rate as a share of capacity
SERVE_CYCLE_S = 300.0           # assumption: the request rate swings over 5 minutes
LOAD_BW = 2e9                   # assumption: host-to-device model load, bytes/s per core
Q_DMA_WEIGHT = Q_DMA.start + DMA_QUEUES.index("weight")
Q_DMA_OUTPUT = Q_DMA.start + DMA_QUEUES.index("output")
Q_ACTIVE_DMA = Q_ENGINE.start + ENGINES.index("dma")


@dataclass(frozen=True, slots=True)
class Segment:
    phase: str                       # phase while executing (or the whole segment's phase)
    gap_phase: str                   # phase during the gaps between executions
    duration: float
    profile: ExecutionProfile | None  # None: nothing accrues
    count: int = 0                   # executions; 0: `profile` spans the whole segment
    period: float = 0.0
    status: str = "completed"        # how the executions end (a hung one: timed_out)

    def cumulative(self, tau: float) -> np.ndarray:
        """Counter quantities accrued `tau` seconds into the segment."""
        if self.profile is None:
            return np.zeros(NQ)
        tau = min(max(tau, 0.0), self.duration)
        if self.count == 0:
            return self.profile.at(tau)
        k = min(int(tau // self.period), self.count)
        done = k * self.profile.totals
        return done if k >= self.count else done + self.profile.at(tau - k * self.period)

    def completions(self, tau: float) -> int:
        """Executions finished by `tau` (each ends `wall` after its start)."""
        if self.count == 0 or self.profile is None:
            return 0
        wall = self.profile.wall
        if tau < wall:
            return 0
        return min(self.count, int((tau - wall) // self.period) + 1)

    def phase_at(self, tau: float) -> str:
        if self.count == 0 or self.profile is None:
            return self.phase
        return self.phase if (tau % self.period) < self.profile.wall else self.gap_phase


def load_segment(bytes_per_core: int) -> Segment:
    wall = min(10.0, max(1.0, bytes_per_core / LOAD_BW))
    prof = ExecutionProfile.uniform(wall, {Q_DMA_WEIGHT: bytes_per_core, Q_HBM_W: bytes_per_core},
                                    active=(Q_ACTIVE_DMA,))
    return Segment("starting", "starting", wall, prof)


def checkpoint_segment(bytes_per_core: int) -> Segment:
    prof = ExecutionProfile.uniform(CHECKPOINT_S, {Q_DMA_OUTPUT: bytes_per_core, Q_HBM_R: bytes_per_core},
                                    active=(Q_ACTIVE_DMA,))
    return Segment("checkpoint", "checkpoint", CHECKPOINT_S, prof)


def hung_segment(timeout_s: float) -> Segment:
    """A hung execution: the core stays busy with no engine progress until the timeout."""
    prof = ExecutionProfile.uniform(timeout_s, {}, active=(Q_BUSY,))
    return Segment("timeout", "timeout", timeout_s, prof, count=1, period=timeout_s, status="timed_out")


def job_segments(kind: str, profile: ExecutionProfile, overhead_s: float, rng: np.random.Generator,
                 model_bytes: int, state_bytes: int):
    """Endless segments of a job of `kind` ("train", "serve", "loop")."""
    yield load_segment(model_bytes)
    t = 0.0
    next_checkpoint = CHECKPOINT_EVERY_S
    wall = profile.wall
    while True:
        if kind == "train":
            gap = overhead_s + wall * DATA_GAP_RATIO * float(rng.lognormal(0.0, 0.4))
            if rng.random() < SLOW_LOADER_P:
                gap += wall * float(rng.uniform(1.0, 5.0))
            seg = _batch("executing", "data_loading", profile, wall + gap)
            if t + seg.duration >= next_checkpoint:
                yield seg
                yield checkpoint_segment(state_bytes)
                t += seg.duration + CHECKPOINT_S
                next_checkpoint = t + CHECKPOINT_EVERY_S
                continue
        elif kind == "serve":
            capacity = 1.0 / (wall + overhead_s)
            swing = 1.0 + 0.5 * math.sin(2.0 * math.pi * t / SERVE_CYCLE_S)
            rate = SERVE_LOAD * capacity * swing * float(rng.lognormal(0.0, 0.15))
            n = int(rng.poisson(rate * BATCH_SPAN_S))
            if n == 0:
                seg = Segment("idle", "idle", BATCH_SPAN_S, None)
            else:
                period = max(wall + overhead_s, BATCH_SPAN_S / n)
                seg = Segment("executing", "idle", n * period, profile, n, period)
        else:
            seg = _batch("executing", "idle", profile, wall + overhead_s)
        t += seg.duration
        yield seg


def _batch(phase: str, gap_phase: str, profile: ExecutionProfile, period: float) -> Segment:
    n = max(1, int(BATCH_SPAN_S // period))
    return Segment(phase, gap_phase, n * period, profile, n, period)
