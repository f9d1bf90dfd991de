"""Turn two cumulative counter samples of one runtime into the period's Report groups.

A runtime publishes counters that only grow (busy seconds, FLOPs, bytes, execution counts) and
a bounded ring of its most recent latencies. A report covers the interval between two samples:
utilization is Δbusy / Δt, FLOP/s is ΔFLOPs / Δt, counts are the increase within the interval,
and latency percentiles are over the executions that finished in it.

Δt, and the ``period`` of every group built here, is the *simulated* time between the samples
(Δsim_time): the counters accumulate in simulated seconds, which run ``--speed`` times faster
than the wall clock, so only Δsim keeps ratios in [0, 1] and makes ``total / period`` a rate at
any speed. A source without a simulated clock (sim_time that does not advance) falls back to the
samples' wall times, which is the same thing at speed 1.

Everything is vectorised over cores with numpy; Python loops run once per core only to build the
output mappings (the Report contract holds plain dicts).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from monitor.report import (
    CoreCounters, CoreEngineCounters, EngineCounters, ExecutionStats, Latency,
    NeuronCoreCounters,
)
from monitor.vocab import DMA_QUEUES, ENGINES, ERROR_KINDS, EXEC_STATUS, PERCENT_POINTS

__all__ = ["Sample", "physical_keys", "ENGINES", "DMA_QUEUES", "STATUS_KEYS", "ERROR_KEYS",
           "neuroncore_counters",
           "engine_counters", "execution_stats", "zero_like"]

STATUS_KEYS = EXEC_STATUS
ERROR_KEYS = ERROR_KINDS
_PERCENT_POINTS = np.array(PERCENT_POINTS)


@dataclass(frozen=True, slots=True, eq=False)
class Sample:
    """One runtime's cumulative counters at one instant; per-core arrays follow ``cores``."""
    wall_time: float            # unix seconds the counters refer to
    sim_time: float             # device seconds the runtime has simulated (busy times are in these)
    cores: tuple[int, ...]      # logical NeuronCore ids
    physical_keys: tuple[tuple[str, ...], ...]  # "nc_v3.<physical id>" of each logical core
    busy: np.ndarray            # (n,) seconds
    physical_busy: np.ndarray   # (n, lnc) seconds
    engine_active: np.ndarray   # (n, len(ENGINES)) seconds
    model_flops: np.ndarray     # (n,)
    hardware_flops: np.ndarray  # (n,)
    hbm_read: np.ndarray        # (n,) bytes
    hbm_write: np.ndarray       # (n,) bytes
    dma_bytes: np.ndarray       # (n, len(DMA_QUEUES)) bytes
    collective_bytes: np.ndarray  # (n,)
    collective_time: np.ndarray   # (n,) seconds
    statuses: np.ndarray        # (len(STATUS_KEYS),) executions since start
    errors: np.ndarray          # (len(ERROR_KEYS),)
    finished: int               # executions finished since start (indexes the latency ring)
    total_latency: np.ndarray   # most recent latencies, oldest first, seconds
    device_latency: np.ndarray
    # every execution's latency, binned: executions counted, executions per bin, and the
    # latency each bin stands for (seconds); None where the source keeps no histogram
    executions: int = 0
    total_histogram: np.ndarray | None = None
    device_histogram: np.ndarray | None = None
    bin_values: np.ndarray | None = None


def zero_like(s: Sample, wall_time: float) -> Sample:
    """The same runtime with every counter at zero: the baseline at the runtime's start."""
    z = np.zeros_like
    return Sample(wall_time, 0.0, s.cores, s.physical_keys, z(s.busy), z(s.physical_busy),
                  z(s.engine_active), z(s.model_flops), z(s.hardware_flops), z(s.hbm_read),
                  z(s.hbm_write), z(s.dma_bytes), z(s.collective_bytes), z(s.collective_time),
                  z(s.statuses), z(s.errors), 0, s.total_latency[:0], s.device_latency[:0], 0,
                  None if s.total_histogram is None else z(s.total_histogram),
                  None if s.device_histogram is None else z(s.device_histogram), s.bin_values)


def physical_keys(cores: tuple[int, ...], lnc: int, core_version: str
                  ) -> tuple[tuple[str, ...], ...]:
    """The per-physical-core keys of each logical core: logical core c at LNC=L spans physical
    cores c*L .. c*L+L-1, named ``nc_<version without the d>.<id>`` (``v3d`` -> ``nc_v3.0``)."""
    prefix = "nc_" + (core_version[:-1] if core_version.endswith("d") else core_version) + "."
    return tuple(tuple(f"{prefix}{c * lnc + j}" for j in range(lnc)) for c in cores)


def _wall_interval(prev: Sample, cur: Sample) -> float:
    return max(0.0, cur.wall_time - prev.wall_time)


def _covered(prev: Sample, cur: Sample) -> float:
    """The time the counters' growth between two samples covers, and so each group's period:
    simulated seconds (busy, active and collective seconds are simulated seconds, which run
    faster than the wall clock when the simulation is sped up); wall seconds when the simulated
    clock did not advance."""
    dt = cur.sim_time - prev.sim_time
    return dt if dt > 0 else _wall_interval(prev, cur)


def _rates(delta: np.ndarray, dt: float) -> np.ndarray:
    # A counter that went backwards (a restarted runtime reusing the file) counts as no work.
    return np.clip(delta, 0.0, None) / dt if dt > 0 else np.zeros_like(delta, dtype=float)


def _aligned(prev: Sample, cur: Sample) -> bool:
    return prev.cores == cur.cores and prev.physical_busy.shape == cur.physical_busy.shape


def neuroncore_counters(prev: Sample, cur: Sample, core_version: str) -> NeuronCoreCounters:
    """``neuroncore_counters``: utilization and FLOP/s per logical core, plus the per-physical
    core breakdown keyed ``<core_version>`` / ``nc_<v>.<physical id>`` when a logical core spans
    several physical cores (Trn2 at LNC=2: ``v3d`` / ``nc_v3.0``)."""
    if not _aligned(prev, cur):
        prev = zero_like(cur, prev.wall_time)
    dt = _covered(prev, cur)
    util = np.minimum(_rates(cur.busy - prev.busy, dt), 1.0).tolist()
    flops = int64_counts(_rates(cur.hardware_flops - prev.hardware_flops, dt))
    if cur.physical_busy.shape[1] > 1:
        phys = np.minimum(_rates(cur.physical_busy - prev.physical_busy, dt), 1.0).tolist()
        cores = {core: CoreCounters(u, fl, dict(zip(keys, p)), core_version)
                 for core, u, fl, keys, p in zip(cur.cores, util, flops, cur.physical_keys, phys)}
    else:
        cores = {core: CoreCounters(u, fl) for core, u, fl in zip(cur.cores, util, flops)}
    return NeuronCoreCounters(dt, "", cores)


def engine_counters(prev: Sample, cur: Sample) -> EngineCounters:
    """``neuroncore_engine_counters`` (extension): engine busy shares and totals in the period,
    so that ``total / period`` is the rate (``hardware_flops / period`` is neuroncore_counters'
    ``flops``) and ``collective_time <= period``."""
    if not _aligned(prev, cur):
        prev = zero_like(cur, prev.wall_time)
    dt = _covered(prev, cur)
    util = np.minimum(_rates(cur.engine_active - prev.engine_active, dt), 1.0).tolist()

    def grown(a: np.ndarray, b: np.ndarray) -> list:
        return int64_counts(b - a)

    model, hw = grown(prev.model_flops, cur.model_flops), grown(prev.hardware_flops,
                                                                 cur.hardware_flops)
    rd, wr = grown(prev.hbm_read, cur.hbm_read), grown(prev.hbm_write, cur.hbm_write)
    dma, coll = grown(prev.dma_bytes, cur.dma_bytes), grown(prev.collective_bytes,
                                                            cur.collective_bytes)
    coll_time = np.clip(cur.collective_time - prev.collective_time, 0.0, None).tolist()
    cores = {core: CoreEngineCounters(dict(zip(ENGINES, u)), *rest[:4], dict(zip(DMA_QUEUES, d)),
                                      *rest[4:])
             for core, u, d, *rest in zip(cur.cores, util, dma, model, hw, rd, wr, coll, coll_time)}
    return EngineCounters(dt, "", cores)


def execution_stats(prev: Sample, cur: Sample) -> ExecutionStats:
    """``execution_stats``: counts within the period; latency percentiles over the executions
    that finished in it (None when none did, which the JSON writes as null)."""
    dt = _covered(prev, cur)
    statuses = dict(zip(STATUS_KEYS, np.clip(cur.statuses - prev.statuses, 0, None).tolist()))
    errors = dict(zip(ERROR_KEYS, np.clip(cur.errors - prev.errors, 0, None).tolist()))
    restarted = cur.finished < prev.finished or cur.executions < prev.executions
    new = cur.finished - (0 if restarted else prev.finished)
    executions = cur.executions - (0 if restarted else prev.executions)
    if executions > min(new, len(cur.total_latency)) and cur.total_histogram is not None \
            and prev.total_histogram is not None and cur.bin_values is not None:
        # more executions than the ring holds (or samples): the histograms have all of them
        def period(name: str, ring: np.ndarray) -> Latency | None:
            grown = getattr(cur, name).astype(np.int64)
            if not restarted:
                grown = grown - getattr(prev, name).astype(np.int64)
            return _binned_percentiles(np.clip(grown, 0, None), cur.bin_values, ring)
        return ExecutionStats(dt, "", errors, statuses,
                              period("total_histogram", cur.total_latency),
                              period("device_histogram", cur.device_latency))
    return ExecutionStats(dt, "", errors, statuses, _percentiles(cur.total_latency, new),
                          _percentiles(cur.device_latency, new))


def _binned_percentiles(counts: np.ndarray, values: np.ndarray, ring: np.ndarray
                        ) -> Latency | None:
    """The percentiles of binned latencies: each the bin holding that rank, as the median of
    the ring's latencies in that bin where it holds some (exact when they are all alike, as
    timed-out executions are), else the bin's middle (within 1%)."""
    cumulative = np.cumsum(counts)
    if cumulative.size == 0 or cumulative[-1] <= 0:
        return None
    rank = np.floor(_PERCENT_POINTS / 100.0 * (cumulative[-1] - 1))
    bins = np.searchsorted(cumulative, rank, side="right")
    out = values[bins]
    if ring.size and values.size > 2:
        # bin k holds [first * r^(k-1), first * r^k): its upper edge is its middle times sqrt(r)
        edges = values * np.sqrt(values[2] / values[1])
        edges[0] = values[0]
        ring_bins = np.minimum(np.searchsorted(edges, ring, side="right"), values.size - 1)
        for i, b in enumerate(bins.tolist()):
            alike = ring[ring_bins == b]
            if alike.size:
                out[i] = float(np.median(alike))
    return Latency(*out.tolist())


def _percentiles(ring: np.ndarray, new: int) -> Latency | None:
    # The ring is bounded: when more finished than it holds, the newest it holds stand in
    # (a source without histograms only).
    recent = ring[len(ring) - min(new, len(ring)):] if new > 0 else ring[:0]
    if recent.size == 0:
        return None
    # np.percentile's linear interpolation, written out: a tenth of its overhead on small rings.
    ordered = np.sort(recent)
    position = _PERCENT_POINTS / 100.0 * (ordered.size - 1)
    low = np.floor(position).astype(np.intp)
    high = np.minimum(low + 1, ordered.size - 1)
    values = ordered[low] + (ordered[high] - ordered[low]) * (position - low)
    return Latency(*values.tolist())


_INT64_CEILING = float(2 ** 63 - 1024)  # the largest float below 2**63


def int64_counts(values: np.ndarray) -> list[int]:
    """Float counts as JSON's non-negative 64-bit integers (clipped, never wrapped)."""
    return np.rint(np.clip(values, 0.0, _INT64_CEILING)).astype(np.int64).tolist()
