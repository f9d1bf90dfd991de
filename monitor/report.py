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
from dataclasses import dataclass, field, replace
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
    "K8sInfo", "K8sPlacement",
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
    absent: frozenset[str] = frozenset()    # JSON keys the stream did not carry: not written

    @classmethod
    def parse(cls, d: Any, path: str) -> InstanceInfo:
        d = f.obj({} if d is None else d, path)
        # Label values only: a field that is absent or not a string is "" (AWS's empty label).
        known = {attr: f.optional(f.text, d.get(key), f"{path}.{key}") or ""
                 for attr, key in _INSTANCE_KEYS}
        extra = {k: f.verbatim(v, f"{path}.{k}") for k, v in d.items()
                 if k != "error" and k not in _INSTANCE_JSON_KEYS}
        absent = frozenset(key for key in (*_INSTANCE_JSON_KEYS, "error") if key not in d)
        return cls(**known, error=f.error_text(d.get("error"), path + ".error"), extra=extra,
                   absent=absent)

    def dump(self) -> dict:
        out = {key: getattr(self, attr) for attr, key in _INSTANCE_KEYS if key not in self.absent}
        out.update(self.extra)
        if self.error or "error" not in self.absent:
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
    """``neuron_hardware_info``; every field is optional (inf1 streams have no device type, older
    ones no LNC). A count a stream lacks is read as None, never 0; built by the collector, the
    defaults (0) describe a host without Neuron devices, as AWS's tool reports it."""
    device_type: str | None = ""      # None: not in the stream (inf1)
    device_version: str | None = ""
    core_version: str | None = ""
    device_count: int | None = 0
    device_memory_bytes: int | None = 0
    cores_per_device: int | None = 0
    lnc: int | None = None  # logical_neuroncore_config; absent on trn1/inf2
    error: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, d: Any, path: str) -> HardwareInfo:
        d = f.obj({} if d is None else d, path)
        ints = {attr: f.optional(_bounded_count(_HARDWARE_LIMITS.get(attr)), d.get(key),
                                 f"{path}.{key}") for attr, key in _HARDWARE_INT_KEYS}
        texts = [f.optional(f.text, d.get(key), f"{path}.{key}")
                 for key in ("neuron_device_type", "neuron_device_version", "neuroncore_version")]
        return cls(*texts,
                   lnc=f.optional(f.count, d.get("logical_neuroncore_config"),
                                  path + ".logical_neuroncore_config"),
                   error=f.error_text(d.get("error"), path + ".error"),
                   extra={k: f.verbatim(v, f"{path}.{k}") for k, v in d.items()
                          if k not in _HARDWARE_JSON_KEYS}, **ints)

    def dump(self) -> dict:
        out: dict[str, Any] = f.without_none({"neuron_device_type": self.device_type,
                                              "neuron_device_version": self.device_version,
                                              "neuroncore_version": self.core_version})
        out.update(f.without_none({"neuron_device_count": self.device_count,
                                   "neuron_device_memory_size": self.device_memory_bytes,
                                   "neuroncore_per_device_count": self.cores_per_device,
                                   "logical_neuroncore_config": self.lnc}))
        out.update(self.extra)
        out["error"] = self.error
        return out


def _bounded_count(limit: int | None):
    def parse(value: Any, path: str) -> int:
        n = f.count(value, path)
        if limit is not None and n > limit:   # sinks lay out one row per device/core
            f.fail(path, f"{n} is more than any instance has (at most {limit})")
        return n
    return parse


@dataclass(frozen=True, slots=True)
class K8sPlacement:
    """Who a core or device belongs to in Kubernetes (``neuron_k8s_info``); None: not given."""
    pod: str | None = None
    namespace: str | None = None
    containers: tuple[str, ...] = ()

    @classmethod
    def parse(cls, d: Any, path: str) -> K8sPlacement:
        d = f.obj(d, path)
        names = d.get("container_name")
        if type(names) is str:
            names = [names]
        names = f.optional(f.array, names, path + ".container_name") or []
        return cls(f.optional(f.text, d.get("pod_name"), path + ".pod_name"),
                   f.optional(f.text, d.get("namespace"), path + ".namespace"),
                   tuple(n for n in names if type(n) is str))


@dataclass(frozen=True, slots=True)
class K8sInfo:
    """``neuron_k8s_info``: pod, namespace and containers per NeuronCore and per device. The
    document's own text is kept (``raw``) so that writing it back changes nothing."""
    period: float | None
    error: str
    cores: Mapping[int, K8sPlacement]
    devices: Mapping[int, K8sPlacement]
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, d: Any, path: str) -> K8sInfo:
        period, error, d = f.group_head(d, path)
        return cls(period, error, _placements(d, "neuroncores_k8s_info", path),
                   _placements(d, "neurondevices_k8s_info", path), f.verbatim(d, path))

    def dump(self) -> dict:
        return dict(self.raw)

    def pods_of(self, cores) -> tuple[K8sPlacement, ...]:
        """The distinct placements of ``cores``, in core order."""
        seen = dict.fromkeys(self.cores[c] for c in sorted(cores) if c in self.cores)
        return tuple(seen)


def _placements(d: dict, key: str, path: str) -> dict[int, K8sPlacement]:
    sub = f"{path}.{key}"
    value = f.optional(f.obj, d.get(key), sub) or {}
    out = {}
    for k, v in value.items():
        place = f.optional(K8sPlacement.parse, v, f"{sub}.{k}")
        if place is not None and k.isascii() and k.isdigit() and len(k) <= 9:
            out[int(k)] = place
    return out


# --------------------------------------------------------------------------- the document
_TOP_KEYS = frozenset({"neuron_runtime_data", "system_data", "instance_info",
                       "neuron_hardware_info", "neuron_k8s_info"})
# Each may be absent (an inf1 capture, a stream of one group), but not all: an object with none
# of them is another program's JSON, not a report with every group missing.
_DOCUMENT_KEYS = _TOP_KEYS - {"neuron_k8s_info"}


@dataclass(frozen=True, slots=True)
class Report:
    runtimes: tuple[RuntimeReport, ...]
    system: SystemData
    instance: InstanceInfo
    hardware: HardwareInfo
    k8s: K8sInfo | None = None  # neuron_k8s_info (only when the monitor's k8s_info is on)
    received_at: float | None = None  # unix seconds, set by readers; never serialised
    extra: Mapping[str, Any] = field(default_factory=dict)  # unknown top-level keys, verbatim
    dropped: tuple[str, ...] = ()  # optional fields left out for a bad value; never serialised

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
        """Only what AWS's exporter needs to read a group is required (docs/report.md); an
        optional field that is absent is None, one with a bad value is dropped and listed in
        ``dropped``; a required one that is missing or wrong rejects the document."""
        d = f.obj(d, "document")
        if not d.keys() & _DOCUMENT_KEYS:
            raise ReportError("document: not a neuron-monitor report (none of instance_info, "
                              "neuron_hardware_info, neuron_runtime_data, system_data)")
        with f.collecting_drops() as dropped:
            runtimes = d.get("neuron_runtime_data")
            runtimes = [] if runtimes is None else f.array(runtimes, "neuron_runtime_data")
            k8s = f.optional(K8sInfo.parse, d.get("neuron_k8s_info"), "neuron_k8s_info")
            report = cls(tuple(RuntimeReport.parse(r, f"neuron_runtime_data[{i}]")
                               for i, r in enumerate(runtimes)),
                         SystemData.parse(d.get("system_data"), "system_data"),
                         InstanceInfo.parse(d.get("instance_info"), "instance_info"),
                         HardwareInfo.parse(d.get("neuron_hardware_info"), "neuron_hardware_info"),
                         k8s, received_at,
                         {k: f.verbatim(v, k) for k, v in d.items() if k not in _TOP_KEYS})
        if dropped:
            report = replace(report, dropped=tuple(dropped))
        return report

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"neuron_runtime_data": [r.dump() for r in self.runtimes],
                               "system_data": self.system.dump(),
                               "instance_info": self.instance.dump(),
                               "neuron_hardware_info": self.hardware.dump()}
        if self.k8s is not None:
            out["neuron_k8s_info"] = self.k8s.dump()
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
