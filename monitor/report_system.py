"""The system groups of a Report: ``system_data`` (ECC counters, host vCPU and memory, and the
per-device HBM, power and thermal extension).

Separate from the runtime groups (report_runtime.py): these describe the host and its devices,
not one runtime, and are filled from /proc and the device sums rather than from a runtime's
counters. Base units inside; mappings are plain dicts for speed: treat them as read-only.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor import _fields as f
from monitor.vocab import ECC_KINDS as ECC_KEYS
from monitor.vocab import SYSTEM_GROUPS

__all__ = ["ECC_KEYS", "SystemData", "HwCounters", "DeviceEcc", "SystemVcpu", "MemoryInfo",
           "DeviceCounters", "DeviceCounter"]


@dataclass(frozen=True, slots=True)
class DeviceEcc:
    """One device's ECC events in the period; a counter the stream lacks is None (older tools
    have no sram_ecc_corrected), not 0."""
    index: int
    mem_ecc_corrected: int | None = 0
    mem_ecc_uncorrected: int | None = 0
    sram_ecc_corrected: int | None = 0
    sram_ecc_uncorrected: int | None = 0

    @classmethod
    def parse(cls, d: Any, path: str) -> DeviceEcc:
        d = f.obj(d, path)
        return cls(f.count(d.get("neuron_device_index"), path + ".neuron_device_index"),
                   *(f.optional(f.count, d.get(k), f"{path}.{k}") for k in ECC_KEYS))

    def dump(self) -> dict:
        out = {"neuron_device_index": self.index}
        out.update((k, v) for k in ECC_KEYS if (v := getattr(self, k)) is not None)
        return out


@dataclass(frozen=True, slots=True)
class HwCounters:
    period: float | None
    error: str
    devices: tuple[DeviceEcc, ...] | None  # None: the JSON said null (no Neuron driver/device)

    @classmethod
    def parse(cls, d: Any, path: str) -> HwCounters:
        period, error, d = f.group_head(d, path)
        devices = f.optional_array(d, "neuron_devices", path, DeviceEcc.parse)
        return cls(period, error, devices)

    def dump(self) -> dict:
        devices = None if self.devices is None else [e.dump() for e in self.devices]
        return f.group_out(self.period, self.error, neuron_devices=devices)


@dataclass(frozen=True, slots=True)
class SystemVcpu:
    """``cpu_count`` is a neuronscope extension key (``vcpu_count``) for sources that know how many
    vCPUs the host has without carrying each one's usage (a Report rebuilt from Prometheus, whose
    ``system_vcpu_count`` is the count of AWS's ``usage_data``); None when the stream lacks it."""
    period: float | None
    error: str
    average: Mapping[str, float]
    per_cpu: Mapping[int, Mapping[str, float]]
    context_switches: int | None  # within the period (a delta, like the other counts); None: absent
    cpu_count: int | None = None

    @property
    def vcpu_count(self) -> int:
        """The host's vCPUs: one per ``usage_data`` entry, else the stated count; 0: unknown."""
        return len(self.per_cpu) if self.per_cpu else (self.cpu_count or 0)

    @classmethod
    def parse(cls, d: Any, path: str) -> SystemVcpu:
        period, error, d = f.group_head(d, path)
        switches = f.optional(f.count, d.get("context_switch_count"), path + ".context_switch_count")
        average = f.pct_map(d.get("average_usage", {} if error else None), path + ".average_usage")
        per_cpu = f.indexed(d, "usage_data", path, error, f.pct_map)
        cpu_count = f.optional(f.count, d.get("vcpu_count"), path + ".vcpu_count")
        return cls(period, error, average, per_cpu, switches, cpu_count)

    def dump(self) -> dict:
        if self.error and not (self.average or self.per_cpu or self.context_switches):
            return f.group_out(self.period, self.error)
        extra = {} if self.context_switches is None else {
            "context_switch_count": self.context_switches}
        if self.cpu_count is not None:
            extra["vcpu_count"] = self.cpu_count
        return f.group_out(self.period, self.error, **extra,
                           average_usage={k: f.pct_out(v) for k, v in self.average.items()},
                           usage_data={str(i): {k: f.pct_out(v) for k, v in cpu.items()}
                                       for i, cpu in self.per_cpu.items()})


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    """Host memory and swap in bytes; each is None when the stream lacks it (each is one
    gauge of its own in AWS's exporter, so one missing value costs only its series)."""
    period: float | None
    error: str
    total_bytes: int | None
    used_bytes: int | None
    swap_total_bytes: int | None
    swap_used_bytes: int | None

    @classmethod
    def parse(cls, d: Any, path: str) -> MemoryInfo:
        period, error, d = f.group_head(d, path)
        values = [f.optional(f.count, d.get(k), f"{path}.{k}") for k in _MEMORY_KEYS]
        return cls(period, error, *values)

    def dump(self) -> dict:
        values = (self.total_bytes, self.used_bytes, self.swap_total_bytes, self.swap_used_bytes)
        return f.group_out(self.period, self.error, **f.without_none(dict(zip(_MEMORY_KEYS, values))))


_MEMORY_KEYS = ("memory_total_bytes", "memory_used_bytes", "swap_total_bytes", "swap_used_bytes")


@dataclass(frozen=True, slots=True)
class DeviceCounter:
    """neuronscope extension: one device's HBM traffic, power and thermal state in the period."""
    index: int
    hbm_read_bytes: int
    hbm_write_bytes: int
    hbm_bandwidth_utilization: float  # ratio
    power_watts: float
    energy_joules: float
    temperature_celsius: float
    throttle_ratio: float  # ratio 0..1 in JSON too (the name says so)
    modelled: bool = True

    @classmethod
    def parse(cls, d: Any, path: str) -> DeviceCounter:
        d = f.obj(d, path)
        return cls(f.count(d.get("neuron_device_index"), path + ".neuron_device_index"),
                   f.count(d.get("hbm_read_bytes"), path + ".hbm_read_bytes"),
                   f.count(d.get("hbm_write_bytes"), path + ".hbm_write_bytes"),
                   f.pct(d.get("hbm_bandwidth_utilization"), path + ".hbm_bandwidth_utilization"),
                   f.nonneg(d.get("power_watts"), path + ".power_watts"),
                   f.nonneg(d.get("energy_joules"), path + ".energy_joules"),
                   f.num(d.get("temperature_celsius"), path + ".temperature_celsius"),
                   f.nonneg(d.get("throttle_ratio"), path + ".throttle_ratio"),
                   f.boolean(d.get("modelled", True), path + ".modelled"))

    def dump(self) -> dict:
        return {"neuron_device_index": self.index, "hbm_read_bytes": self.hbm_read_bytes,
                "hbm_write_bytes": self.hbm_write_bytes,
                "hbm_bandwidth_utilization": f.pct_out(self.hbm_bandwidth_utilization),
                "power_watts": float(self.power_watts), "energy_joules": float(self.energy_joules),
                "temperature_celsius": float(self.temperature_celsius),
                "throttle_ratio": float(self.throttle_ratio), "modelled": self.modelled}


@dataclass(frozen=True, slots=True)
class DeviceCounters:
    """neuronscope extension group ``neuron_device_counters``."""
    period: float | None
    error: str
    devices: tuple[DeviceCounter, ...]

    @classmethod
    def parse(cls, d: Any, path: str) -> DeviceCounters:
        period, error, d = f.group_head(d, path)
        # neuronscope's own group: a device with a bad value is left out, not every device
        devices = f.optional_array(d, "neuron_devices", path, DeviceCounter.parse, lenient=True)
        return cls(period, error, devices or ())

    def dump(self) -> dict:
        return f.group_out(self.period, self.error, neuron_devices=[c.dump() for c in self.devices])


# JSON key -> (SystemData attribute, parser), in the vocabulary's order of SYSTEM_GROUPS
SYSTEM_GROUP_PARSERS = dict(zip(SYSTEM_GROUPS, (
    ("hw_counters", HwCounters.parse),
    ("vcpu", SystemVcpu.parse),
    ("memory", MemoryInfo.parse),
    ("device_counters", DeviceCounters.parse)), strict=True))


@dataclass(frozen=True, slots=True)
class SystemData:
    hw_counters: HwCounters | None = None
    vcpu: SystemVcpu | None = None
    memory: MemoryInfo | None = None
    device_counters: DeviceCounters | None = None
    extra_groups: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, d: Any, path: str) -> SystemData:
        d = f.obj({} if d is None else d, path)
        groups, extra = f.known_groups(d, SYSTEM_GROUP_PARSERS, path)
        return cls(extra_groups=extra, **groups)

    def group(self, key: str) -> Any:
        """The group of that JSON key (one of vocab.SYSTEM_GROUPS), or None if absent."""
        return getattr(self, SYSTEM_GROUP_PARSERS[key][0])

    def groups(self) -> tuple[tuple[str, Any], ...]:
        """(JSON key, group or None) of every known group, in the vocabulary's order."""
        return tuple((key, getattr(self, attr)) for key, (attr, _) in SYSTEM_GROUP_PARSERS.items())

    def dump(self) -> dict:
        out: dict[str, Any] = {key: g.dump() for key, g in self.groups() if g is not None}
        out.update(self.extra_groups)
        return out
