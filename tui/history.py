"""Bounded history of the values the graphs draw, filled from successive Reports.

Ring buffers of numpy arrays: pushing one trn2.48xlarge report writes a few hundred floats;
reading a series for one core or device is one concatenate. NaN marks "no reading".
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from monitor.report import Report, RuntimeReport
from monitor.vocab import ENGINES
from tui.view import core_layout, counters_failed

DEVICE_SERIES = ("hbm_read", "hbm_write", "power", "temperature", "throttle")


class Ring:
    """A fixed-length ring of rows of shape ``shape``; ``series`` returns oldest-first."""

    def __init__(self, shape: tuple[int, ...], length: int) -> None:
        self._data = np.full((*shape, length), np.nan)
        self._next = 0
        self._count = 0

    def push(self, values: np.ndarray) -> None:
        self._data[..., self._next] = values
        self._next = (self._next + 1) % self._data.shape[-1]
        self._count = min(self._count + 1, self._data.shape[-1])

    def series(self, *index: int) -> np.ndarray:
        row = self._data[index]
        ordered = np.concatenate((row[..., self._next:], row[..., :self._next]), axis=-1)
        return ordered[..., ordered.shape[-1] - self._count:]

    @property
    def count(self) -> int:
        return self._count


RuntimeKey = tuple  # (known pid or None, tag): how the app tells runtimes apart


def runtime_key(runtime: RuntimeReport) -> RuntimeKey:
    return (runtime.known_pid, runtime.tag)


class RuntimeRings:
    """One runtime's own share of its cores, sample by sample: what its views draw. Two
    runtimes reporting one core each keep their own share here; only the host-wide rings of
    ``History`` add them up (the ``all`` tab)."""

    def __init__(self, cores: tuple[int, ...], length: int) -> None:
        self.cores = cores
        self.rows = {core: row for row, core in enumerate(cores)}
        self.util = Ring((len(cores),), length)
        self.engines = Ring((len(cores), len(ENGINES)), length)


class History:
    """Per-core engine/utilization history (host-wide and per runtime) and per-device
    HBM/power history."""

    def __init__(self, length: int = 300) -> None:
        self.length = length
        self._layout: tuple[int, int] | None = None
        self.core_util = self.engines = self.devices = Ring((0,), 1)
        self.runtimes: dict[RuntimeKey, RuntimeRings] = {}

    def _reset(self, layout: tuple[int, int]) -> None:
        cores = layout[0] * layout[1]
        self._layout = layout
        self.core_util = Ring((cores,), self.length)
        self.engines = Ring((cores, len(ENGINES)), self.length)
        self.devices = Ring((layout[0], len(DEVICE_SERIES)), self.length)
        self.runtimes = {}

    def push(self, report: Report) -> None:
        layout = core_layout(report)
        if layout != self._layout:
            self._reset(layout)
        devices, per_device = layout
        cores = devices * per_device
        util = np.zeros(cores)
        engines = np.full((cores, len(ENGINES)), np.nan)
        hbm = np.zeros((devices, 2))
        seen: dict[RuntimeKey, RuntimeRings] = {}
        reported = np.zeros(cores, dtype=bool)
        failed = False
        for runtime in report.runtimes:
            own_util, own_engines = self._push_runtime(runtime, cores, seen)
            failed |= counters_failed(runtime)
            for core, value in own_util.items():
                util[core] += value   # the host-wide figure: the runtimes' shares added up
                reported[core] = True
            for core, values in own_engines.items():   # added up too; NaN: no reading
                now = engines[core]
                engines[core] = np.where(np.isnan(now), values,
                                         np.where(np.isnan(values), now, now + values))
            group = runtime.engine_counters
            if group is None:
                continue
            period = group.period or 1.0
            for core, counters in group.cores.items():
                if core < cores:
                    hbm[core // per_device] += (counters.hbm_read_bytes / period,
                                                counters.hbm_write_bytes / period)
        self.runtimes = seen   # a runtime gone from the report takes its history with it
        if failed:   # as the grid: a core no one reports may be the failed runtime's
            util[~reported] = np.nan
        self.core_util.push(np.minimum(util, 1.0))
        self.engines.push(np.minimum(engines, 1.0))
        self.devices.push(self._device_values(report, devices, hbm))

    def _push_runtime(self, runtime: RuntimeReport, cores: int,
                      seen: dict[RuntimeKey, RuntimeRings]
                      ) -> tuple[dict[int, float], dict[int, np.ndarray]]:
        """Push one runtime's own share of its cores; returns it by core for the host totals."""
        counters, group = runtime.neuroncore_counters, runtime.engine_counters
        util = {core: values.utilization for core, values in
                (counters.cores.items() if counters else ()) if core < cores}
        engines = {core: np.array([c.engine_utilization.get(e, np.nan) for e in ENGINES])
                   for core, c in (group.cores.items() if group else ()) if core < cores}
        own = tuple(sorted(set(util) | set(engines)))
        if own:
            key = runtime_key(runtime)
            rings = self.runtimes.get(key)
            if rings is None or rings.cores != own:   # new, or its cores changed: start afresh
                rings = RuntimeRings(own, self.length)
            rings.util.push(np.array([util.get(core, np.nan) for core in own]))
            rings.engines.push(np.array([engines.get(core, np.full(len(ENGINES), np.nan))
                                         for core in own]))
            seen[key] = rings
        return util, engines

    @staticmethod
    def _device_values(report: Report, devices: int, hbm_from_cores: np.ndarray) -> np.ndarray:
        values = np.full((devices, len(DEVICE_SERIES)), np.nan)
        if hbm_from_cores.any():
            values[:, 0:2] = hbm_from_cores
        group = report.system.device_counters
        if group is not None:
            period = group.period or 1.0
            for dev in group.devices:
                if dev.index < devices:
                    values[dev.index] = (dev.hbm_read_bytes / period, dev.hbm_write_bytes / period,
                                         dev.power_watts, dev.temperature_celsius,
                                         dev.throttle_ratio)
        return values

    def engine_series(self, core: int, engine: int,
                      runtimes: Iterable[RuntimeKey] | None = None) -> np.ndarray:
        """One engine of ``core``: the host-wide figure, or only ``runtimes``' share of it."""
        if not self._valid_core(core):
            return np.array([])
        if runtimes is None:
            return self.engines.series(core, engine)
        return self._shares([r.engines.series(r.rows[core], engine)
                             for r in self._rings(runtimes) if core in r.rows])

    def core_series(self, core: int, runtimes: Iterable[RuntimeKey] | None = None) -> np.ndarray:
        """``core``'s utilization: every runtime's share added up (``runtimes`` None: the
        ``all`` tab), or only the given runtimes' (an app tab)."""
        if not self._valid_core(core):
            return np.array([])
        if runtimes is None:
            return self.core_util.series(core)
        return self._shares([r.util.series(r.rows[core])
                             for r in self._rings(runtimes) if core in r.rows])

    def _rings(self, keys: Iterable[RuntimeKey]) -> list[RuntimeRings]:
        return [rings for key in keys if (rings := self.runtimes.get(key)) is not None]

    def _shares(self, series: list[np.ndarray]) -> np.ndarray:
        """Several runtimes' series of one core added up, newest aligned (a runtime that came
        later has fewer samples); NaN where none had a reading."""
        if not series:
            return np.array([])
        rows = np.full((len(series), max(s.size for s in series)), np.nan)
        for row, values in zip(rows, series):
            if values.size:
                row[-values.size:] = values
        with np.errstate(invalid="ignore"):
            total = np.minimum(np.nansum(rows, axis=0), 1.0)
        return np.where(np.isfinite(rows).any(axis=0), total, np.nan)

    def device_series(self, device: int, name: str) -> np.ndarray:
        if self._layout is None or not 0 <= device < self._layout[0]:
            return np.array([])
        return self.devices.series(device, DEVICE_SERIES.index(name))

    def _valid_core(self, core: int) -> bool:
        return self._layout is not None and 0 <= core < self._layout[0] * self._layout[1]

    def runtime_series(self, key: RuntimeKey, engine: int | None = None) -> np.ndarray:
        """One runtime's own history, the mean over its cores at each sample: its utilization
        (``engine`` None) or one engine's. NaN where none of its cores had a reading; empty
        for a runtime with no core."""
        rings = self.runtimes.get(key)
        if rings is None:
            return np.array([])
        rows = rings.util.series() if engine is None else rings.engines.series()[:, engine]
        with np.errstate(invalid="ignore"):
            counts = np.isfinite(rows).sum(axis=0)
            sums = np.nansum(rows, axis=0)
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
