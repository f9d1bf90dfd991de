"""Per-device sums for the collector: each runtime's cumulative device counters, and their
totals over the runtimes sharing a device within one period.

Separate from collector.py because it is the numpy side of the two device groups
(``neuron_hw_counters`` and the ``neuron_device_counters`` extension): arrays per device, summed
with ``np.add.at``, then turned into Report objects once per period. The collector keeps the
baselines and decides when a group is due.

The counters grow in simulated seconds, which run ``--speed`` times faster than the wall clock,
so a device group's ``period`` is the simulated time its counts cover: the median of how far the
runtimes' simulated clocks advanced since the group's last collection (the wall period when none
did). One runtime catching up after a stall (SIGSTOP, a slow tick) advances further than the
others in that period; the longest advance, taken as the period, made every other device's
counts read low (a busy device at a third of its bandwidth). Each device's bandwidth
utilization is over the time its own runtimes' counts cover, and their energy is their mean
power over that time times the period (idle energy: the idle power times the period), so
energy / period is each device's mean power and bandwidth at most 1 at any speed. Bytes are as
counted: they add up over the reports.
"""
from __future__ import annotations

from dataclasses import dataclass, field
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
    covered: np.ndarray   # simulated seconds each device's counts cover: its runtimes' advance
    advances: list[float] = field(default_factory=list)   # each runtime's, in the period

    @classmethod
    def zeros(cls, devices: int) -> DeviceTotals:
        z = np.zeros(devices)
        return cls(z.copy(), z.copy(), z.copy(), np.full(devices, -np.inf),
                   z.copy(), z.copy(), z.copy(), np.zeros((devices, 4)), z.copy())

    def period(self, wall: float) -> float:
        """Seconds the period's counts cover: the runtimes' median simulated advance, or
        ``wall`` (the collector's own period) when no runtime's simulated clock advanced."""
        moved = [a for a in self.advances if a > 0]
        return float(np.median(moved)) if moved else wall

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
        advance = max(0.0, cur.sim_time - prev.sim_time)
        self.advances.append(advance)
        np.maximum.at(self.covered, idx, advance)
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
        # the runtimes' energy at its mean power over their own coverage, for the period
        scale = np.divide(period, self.covered, out=np.ones_like(self.covered),
                          where=self.covered > 0)
        energy = self.energy * scale + idle * period
        still = dev.ambient_c + dev.thermal_resistance_c_per_w * dev.idle_watts
        # Each runtime's thermal model sees the rest of its device idle: the hottest is closest.
        temperature = np.where(self.share > 0, self.temperature, still)
        # over each device's own coverage (a device no runtime advanced on: the period's)
        span = np.where(self.covered > 0, self.covered, period)
        moved = self.hbm_read + self.hbm_write
        bandwidth = np.zeros_like(moved)
        np.divide(moved, dev.hbm_bw * span, out=bandwidth, where=span > 0)
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
