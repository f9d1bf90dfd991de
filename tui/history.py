"""Bounded history of the values the graphs draw, filled from successive Reports.

Ring buffers of numpy arrays: pushing one trn2.48xlarge report writes a few hundred floats;
reading a series for one core or device is one concatenate. NaN marks "no reading".
"""
from __future__ import annotations

import numpy as np

from monitor.report import Report
from monitor.vocab import ENGINES
from tui.view import core_layout

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


class History:
    """Per-core engine/utilization history and per-device HBM/power history."""

    def __init__(self, length: int = 300) -> None:
        self.length = length
        self._layout: tuple[int, int] | None = None
        self.core_util = self.engines = self.devices = Ring((0,), 1)

    def _reset(self, layout: tuple[int, int]) -> None:
        cores = layout[0] * layout[1]
        self._layout = layout
        self.core_util = Ring((cores,), self.length)
        self.engines = Ring((cores, len(ENGINES)), self.length)
        self.devices = Ring((layout[0], len(DEVICE_SERIES)), self.length)

    def push(self, report: Report) -> None:
        layout = core_layout(report)
        if layout != self._layout:
            self._reset(layout)
        devices, per_device = layout
        cores = devices * per_device
        util = np.zeros(cores)
        engines = np.full((cores, len(ENGINES)), np.nan)
        hbm = np.zeros((devices, 2))
        for runtime in report.runtimes:
            if runtime.neuroncore_counters:
                for core, values in runtime.neuroncore_counters.cores.items():
                    if core < cores:
                        util[core] += values.utilization
            group = runtime.engine_counters
            if group is None:
                continue
            period = group.period or 1.0
            for core, counters in group.cores.items():
                if core < cores:
                    engines[core] = [counters.engine_utilization.get(e, np.nan) for e in ENGINES]
                    hbm[core // per_device] += (counters.hbm_read_bytes / period,
                                                counters.hbm_write_bytes / period)
        self.core_util.push(np.minimum(util, 1.0))
        self.engines.push(engines)
        self.devices.push(self._device_values(report, devices, hbm))

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

    def engine_series(self, core: int, engine: int) -> np.ndarray:
        return self.engines.series(core, engine) if self._valid_core(core) else np.array([])

    def core_series(self, core: int) -> np.ndarray:
        return self.core_util.series(core) if self._valid_core(core) else np.array([])

    def device_series(self, device: int, name: str) -> np.ndarray:
        if self._layout is None or not 0 <= device < self._layout[0]:
            return np.array([])
        return self.devices.series(device, DEVICE_SERIES.index(name))

    def _valid_core(self, core: int) -> bool:
        return self._layout is not None and 0 <= core < self._layout[0] * self._layout[1]

    def group_series(self, cores: tuple[int, ...] | list[int], engine: int | None = None
                     ) -> np.ndarray:
        """Mean over ``cores`` at each sample: a runtime's utilization history (``engine`` None)
        or one engine's. NaN where none of the cores had a reading."""
        valid = [c for c in cores if self._valid_core(c)]
        if not valid:
            return np.array([])
        ordered = self.core_util.series() if engine is None else self.engines.series()
        # One reorder of the whole ring, then a fancy index: not one concatenate per core.
        rows = ordered[valid] if engine is None else ordered[valid, engine]
        with np.errstate(invalid="ignore"):
            counts = np.isfinite(rows).sum(axis=0)
            sums = np.nansum(rows, axis=0)
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
