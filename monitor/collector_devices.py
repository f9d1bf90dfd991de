"""Per-device sums for the collector: each runtime's cumulative device counters, and their
totals over the runtimes sharing a device within one period.

Separate from collector.py because it is the numpy side of the two device groups
(``neuron_hw_counters`` and the ``neuron_device_counters`` extension): arrays per device, summed
with ``np.add.at``, then turned into Report objects once per period. The collector keeps the
baselines and decides when a group is due.

The counters grow in simulated seconds, which run ``--speed`` times faster than the wall clock,
so a device group's ``period`` is the simulated time its counts cover: the longest any runtime's
simulated clock advanced since the group's last collection (the wall period when none did).
Bandwidth utilization and idle energy use that period, so energy / period is the mean power and
bytes / period is at most the peak bandwidth at any speed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.collector_groups import int64_counts
from monitor.report import DeviceCounter, DeviceCounters

__all__ = ["Devices", "DeviceTotals", "devices_of"]


@dataclass(frozen=True, slots=True, eq=False)
class Devices:
    """One runtime's cumulative per-device counters (arrays follow ``index``)."""
    index: np.ndarray        # device indices
    sim_time: float          # simulated seconds since the runtime started (the counters' clock)
    share: np.ndarray        # the runtime's share of each device's physical cores (0..1]
    energy: np.ndarray       # joules since start
    power: np.ndarray        # watts now
    temperature: np.ndarray  # °C now
    throttle: np.ndarray     # ratio now
    hbm_read: np.ndarray     # bytes since start
    hbm_write: np.ndarray
    ecc: np.ndarray          # (d, 4) events since start

    @classmethod
    def zeros(cls, like: Devices) -> Devices:
        z = np.zeros_like
        return cls(like.index, 0.0, like.share, z(like.energy), like.power, like.temperature,
                   like.throttle, z(like.hbm_read), z(like.hbm_write), z(like.ecc))


@dataclass(slots=True)
class DeviceTotals:
    """Per-device values summed over the runtimes sharing each device."""
    share: np.ndarray     # share of each device's physical cores held by runtimes
    energy: np.ndarray    # joules in the period, summed over the runtimes' shares
    power: np.ndarray     # watts now, summed over the runtimes' shares
    temperature: np.ndarray  # °C now, hottest report
    throttle: np.ndarray  # ratio now, largest report
    hbm_read: np.ndarray
    hbm_write: np.ndarray
    ecc: np.ndarray       # (devices, 4) events in the period
    simulated: float = 0.0  # simulated seconds covered: the most any runtime's clock advanced

    @classmethod
    def zeros(cls, devices: int) -> DeviceTotals:
        z = np.zeros(devices)
        return cls(z.copy(), z.copy(), z.copy(), np.full(devices, -np.inf),
                   z.copy(), z.copy(), z.copy(), np.zeros((devices, 4)))

    def period(self, wall: float) -> float:
        """Seconds the period's counts cover: simulated seconds, or ``wall`` (the collector's
        own period) when no runtime's simulated clock advanced."""
        return self.simulated if self.simulated > 0 else wall

    def add(self, prev: Devices | None, cur: Devices) -> None:
        idx = cur.index
        ok = idx < self.share.size  # a runtime claiming a device the instance lacks adds nothing
        idx = idx[ok]
        np.add.at(self.share, idx, cur.share[ok])
        np.add.at(self.power, idx, cur.power[ok])
        np.maximum.at(self.temperature, idx, cur.temperature[ok])
        np.maximum.at(self.throttle, idx, cur.throttle[ok])
        if prev is None or not np.array_equal(prev.index, cur.index):
            prev = Devices.zeros(cur)  # a runtime started since: its counters began at zero
        self.simulated = max(self.simulated, cur.sim_time - prev.sim_time)
        for total, before, now in ((self.energy, prev.energy, cur.energy),
                                   (self.hbm_read, prev.hbm_read, cur.hbm_read),
                                   (self.hbm_write, prev.hbm_write, cur.hbm_write)):
            np.add.at(total, idx, np.clip(now[ok] - before[ok], 0.0, None))
        np.add.at(self.ecc, idx, np.clip(cur.ecc[ok].astype(np.float64) - prev.ecc[ok], 0, None))

    def device_counters(self, spec: Any, period: float) -> DeviceCounters:
        """The ``neuron_device_counters`` group over ``period`` (seconds: ``self.period()``)."""
        dev = spec.device
        # A runtime models the power of its own cores (their idle share plus their activity);
        # the cores no runtime holds idle.
        idle = dev.idle_watts * np.clip(1.0 - self.share, 0.0, 1.0)
        power = self.power + idle
        energy = self.energy + idle * period
        still = dev.ambient_c + dev.thermal_resistance_c_per_w * dev.idle_watts
        # Each runtime's thermal model sees the rest of its device idle: the hottest is closest.
        temperature = np.where(self.share > 0, self.temperature, still)
        bandwidth = np.clip((self.hbm_read + self.hbm_write) / (dev.hbm_bw * period), 0.0, None) \
            if period > 0 else np.zeros_like(self.hbm_read)
        rows = zip(int64_counts(self.hbm_read), int64_counts(self.hbm_write), bandwidth.tolist(),
                   power.tolist(), energy.tolist(), temperature.tolist(), self.throttle.tolist())
        return DeviceCounters(period, "", tuple(DeviceCounter(i, *row)
                                                for i, row in enumerate(rows)))


def devices_of(s: Any, physical_per_device: int) -> Devices:
    devices = np.asarray(s.devices, dtype=np.int64)
    held = np.asarray(s.core_devices, dtype=np.int64)
    # logical cores on each listed device x physical cores per logical core
    share = (held[None, :] == devices[:, None]).sum(axis=1) * s.lnc / max(1, physical_per_device)
    return Devices(devices, float(s.sim_time), share, s.dev_energy_j, s.dev_power_w,
                   s.dev_temperature_c, s.dev_throttle, s.dev_hbm_read_bytes,
                   s.dev_hbm_write_bytes, s.dev_ecc)
