"""The Report: one neuron-monitor document, in base units.

This is the single contract between collection (the simulated runtime, a real neuron-monitor
pipe) and every sink (Prometheus exporter, neuron-top, CloudWatch). ``Report.from_json`` reads
the AWS JSON schema (docs/report.md); ``Report.to_json`` writes it back with the same keys,
nesting and JSON types. Inside, percentages are ratios 0..1, times are seconds, sizes bytes.

Mappings held by these frozen dataclasses are plain dicts for speed; treat them as read-only.

This module holds the document itself and its static parts (instance and hardware info); the
per-period groups live in report_runtime.py, report_memory.py and report_system.py and are
re-exported here, so ``from monitor.report import X`` reaches every Report type.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from monitor import _fields as f
from monitor.errors import ReportError
from monitor.report_memory import LoadedModel, MemoryUsed, Subgraph
from monitor.report_runtime import (
    PERCENTILES, CoreCounters, CoreEngineCounters, EngineCounters, ExecutionStats, Latency,
    NeuronCoreCounters, RuntimeReport, RuntimeVcpu,
)
from monitor.report_system import (
    ECC_KEYS, DeviceCounter, DeviceCounters, DeviceEcc, HwCounters, MemoryInfo, SystemData,
    SystemVcpu,
)

__all__ = [
    "PERCENTILES", "ReportError", "Report", "RuntimeReport", "NeuronCoreCounters", "CoreCounters",
    "ExecutionStats", "Latency", "MemoryUsed", "LoadedModel", "Subgraph", "RuntimeVcpu",
    "EngineCounters", "CoreEngineCounters", "SystemData", "HwCounters", "DeviceEcc", "SystemVcpu",
    "MemoryInfo", "DeviceCounters", "DeviceCounter", "ECC_KEYS", "InstanceInfo", "HardwareInfo",
]


# --------------------------------------------------------------------------- static info
_INSTANCE_KEYS = (("name", "instance_name"), ("id", "instance_id"), ("type", "instance_type"),
                  ("availability_zone", "instance_availability_zone"),
                  ("availability_zone_id", "instance_availability_zone_id"),
                  ("region", "instance_region"), ("ami_id", "ami_id"), ("subnet_id", "subnet_id"))


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    name: str = ""
    id: str = ""
    type: str = ""
    availability_zone: str = ""
    availability_zone_id: str = ""
    region: str = ""
    ami_id: str = ""
    subnet_id: str = ""
    error: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)  # e.g. ultraserver_id on newer tools

    @classmethod
    def parse(cls, d: Any, path: str) -> InstanceInfo:
        d = f.obj({} if d is None else d, path)
        known = {attr: f.text(d.get(key, ""), f"{path}.{key}") for attr, key in _INSTANCE_KEYS}
        extra = {k: f.verbatim(v, f"{path}.{k}") for k, v in d.items()
                 if k != "error" and k not in _INSTANCE_JSON_KEYS}
        return cls(**known, error=f.text(d.get("error", ""), path + ".error"), extra=extra)

    def dump(self) -> dict:
        out = {key: getattr(self, attr) for attr, key in _INSTANCE_KEYS}
        out.update(self.extra)
        out["error"] = self.error
        return out


_INSTANCE_JSON_KEYS = frozenset(key for _, key in _INSTANCE_KEYS)
# Bounds on counts that sinks iterate over (a Trn2 UltraServer host has 16 devices of 8 cores);
# far above any instance, far below what would exhaust memory.
_HARDWARE_LIMITS = {"device_count": 4096, "cores_per_device": 256}
_HARDWARE_INT_KEYS = (("device_count", "neuron_device_count"),
                      ("device_memory_bytes", "neuron_device_memory_size"),
                      ("cores_per_device", "neuroncore_per_device_count"))
_HARDWARE_JSON_KEYS = frozenset({"neuron_device_type", "neuron_device_version", "neuroncore_version",
                                 "logical_neuroncore_config", "error"}
                                | {key for _, key in _HARDWARE_INT_KEYS})


@dataclass(frozen=True, slots=True)
class HardwareInfo:
    device_type: str = ""
    device_version: str = ""
    core_version: str = ""
    device_count: int = 0
    device_memory_bytes: int = 0
    cores_per_device: int = 0
    lnc: int | None = None  # logical_neuroncore_config; absent on trn1/inf2
    error: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, d: Any, path: str) -> HardwareInfo:
        d = f.obj({} if d is None else d, path)
        ints = {attr: f.count(d.get(key, 0), f"{path}.{key}") for attr, key in _HARDWARE_INT_KEYS}
        for attr, key in _HARDWARE_INT_KEYS:
            limit = _HARDWARE_LIMITS.get(attr)
            if limit is not None and ints[attr] > limit:   # sinks lay out one row per device/core
                f.fail(f"{path}.{key}", f"{ints[attr]} is more than any instance has (at most {limit})")
        lnc = d.get("logical_neuroncore_config")
        return cls(f.text(d.get("neuron_device_type", ""), path + ".neuron_device_type"),
                   f.text(d.get("neuron_device_version", ""), path + ".neuron_device_version"),
                   f.text(d.get("neuroncore_version", ""), path + ".neuroncore_version"),
                   lnc=None if lnc is None else f.count(lnc, path + ".logical_neuroncore_config"),
                   error=f.text(d.get("error", ""), path + ".error"),
                   extra={k: f.verbatim(v, f"{path}.{k}") for k, v in d.items()
                          if k not in _HARDWARE_JSON_KEYS}, **ints)

    def dump(self) -> dict:
        out: dict[str, Any] = {"neuron_device_type": self.device_type,
                               "neuron_device_version": self.device_version,
                               "neuroncore_version": self.core_version,
                               "neuron_device_count": self.device_count,
                               "neuron_device_memory_size": self.device_memory_bytes,
                               "neuroncore_per_device_count": self.cores_per_device}
        if self.lnc is not None:
            out["logical_neuroncore_config"] = self.lnc
        out.update(self.extra)
        out["error"] = self.error
        return out


# --------------------------------------------------------------------------- the document
_TOP_KEYS = frozenset({"neuron_runtime_data", "system_data", "instance_info",
                       "neuron_hardware_info", "neuron_k8s_info"})


@dataclass(frozen=True, slots=True)
class Report:
    runtimes: tuple[RuntimeReport, ...]
    system: SystemData
    instance: InstanceInfo
    hardware: HardwareInfo
    k8s: dict | None = None  # neuron_k8s_info, kept verbatim
    received_at: float | None = None  # unix seconds, set by readers; never serialised
    extra: Mapping[str, Any] = field(default_factory=dict)  # unknown top-level keys, verbatim

    @classmethod
    def from_json(cls, data: bytes | str | dict, *, received_at: float | None = None) -> Report:
        """Parse one neuron-monitor document; raise ReportError naming the bad field."""
        if not isinstance(data, dict):
            if not isinstance(data, (bytes, bytearray, memoryview, str)):
                raise ReportError(f"document: expected bytes, str or dict, got {type(data).__name__}")
            try:
                data = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                raise ReportError(f"document: not valid JSON ({exc})") from None
        return cls.from_dict(data, received_at=received_at)

    @classmethod
    def from_dict(cls, d: Any, *, received_at: float | None = None) -> Report:
        d = f.obj(d, "document")
        runtimes = f.array(d.get("neuron_runtime_data", []), "neuron_runtime_data")
        k8s = d.get("neuron_k8s_info")
        if k8s is not None:
            f.verbatim(f.obj(k8s, "neuron_k8s_info"), "neuron_k8s_info")
        return cls(tuple(RuntimeReport.parse(r, f"neuron_runtime_data[{i}]")
                         for i, r in enumerate(runtimes)),
                   SystemData.parse(d.get("system_data"), "system_data"),
                   InstanceInfo.parse(d.get("instance_info"), "instance_info"),
                   HardwareInfo.parse(d.get("neuron_hardware_info"), "neuron_hardware_info"),
                   k8s, received_at,
                   {k: f.verbatim(v, k) for k, v in d.items() if k not in _TOP_KEYS})

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"neuron_runtime_data": [r.dump() for r in self.runtimes],
                               "system_data": self.system.dump(),
                               "instance_info": self.instance.dump(),
                               "neuron_hardware_info": self.hardware.dump()}
        if self.k8s is not None:
            out["neuron_k8s_info"] = self.k8s
        out.update(self.extra)
        return out

    def to_json(self) -> bytes:
        """One line of JSON (no trailing newline), schema-identical to AWS neuron-monitor."""
        try:
            return orjson.dumps(self.to_dict())
        except TypeError as exc:  # only reachable for hand-built Reports holding odd values
            raise ReportError(f"document: cannot serialise ({exc})") from None

    def runtime(self, tag: str) -> RuntimeReport | None:
        """The first runtime whose tag is ``tag``, or None."""
        return next((r for r in self.runtimes if r.tag == tag), None)
