"""The runtime group ``memory_used`` of a Report: host and device bytes, per-core breakdowns and
the loaded models with their subgraphs.

Separate from report_runtime.py because the loaded-model tree (Report -> runtime -> model ->
subgraph) is its own nested structure, read by itself by the memory view of neuron-top and built
once per model set by the collector. Part of the Report contract of report.py (base units inside,
mappings are plain dicts for speed: treat them as read-only).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from monitor import _fields as f

__all__ = ["Subgraph", "LoadedModel", "MemoryUsed"]


@dataclass(frozen=True, slots=True)
class Subgraph:
    neuroncore_index: int
    neuron_device_index: int
    host_bytes: int | None      # None: the stream does not say (a fleet's series carry none)
    device_bytes: int
    host_breakdown: Mapping[str, int]
    device_breakdown: Mapping[str, int]

    def global_core(self, per_device: int) -> int:
        """The logical core index across the host: streams name a subgraph's core either
        globally or within its device (AWS's example: core 0 of device 12); accept both."""
        per_device = max(per_device, 1)
        core = self.neuroncore_index
        # an index below one device's count is within the device (on device 0 both readings agree)
        return core if core >= per_device else self.neuron_device_index * per_device + core

    @classmethod
    def parse(cls, d: Any, path: str) -> Subgraph:
        d = f.obj(d, path)
        mem_path = path + ".memory_used_bytes"
        mem = f.obj(d.get("memory_used_bytes"), mem_path)
        usage = f.obj(mem.get("usage_breakdown"), mem_path + ".usage_breakdown")
        return cls(f.count(d.get("neuroncore_index"), path + ".neuroncore_index"),
                   f.count(d.get("neuron_device_index"), path + ".neuron_device_index"),
                   f.optional(f.count, mem.get("host"), mem_path + ".host"),
                   f.count(mem.get("neuron_device"), mem_path + ".neuron_device"),
                   f.count_map(usage.get("host"), mem_path + ".usage_breakdown.host"),
                   f.count_map(usage.get("neuron_device"), mem_path + ".usage_breakdown.neuron_device"))

    def dump(self) -> dict:
        host = {} if self.host_bytes is None else {"host": self.host_bytes}
        return {"neuroncore_index": self.neuroncore_index,
                "neuron_device_index": self.neuron_device_index,
                "memory_used_bytes": {**host, "neuron_device": self.device_bytes,
                                      "usage_breakdown": {"host": dict(self.host_breakdown),
                                                          "neuron_device": dict(self.device_breakdown)}}}


@dataclass(frozen=True, slots=True)
class LoadedModel:
    name: str
    uuid: str
    model_id: int
    is_running: bool
    subgraphs: Mapping[str, Subgraph]

    @classmethod
    def parse(cls, d: Any, path: str) -> LoadedModel:
        d = f.obj(d, path)
        sub_path = path + ".subgraphs"
        subgraphs = {f.text(k, sub_path): Subgraph.parse(v, f"{sub_path}.{k}")
                     for k, v in (f.optional(f.obj, d.get("subgraphs"), sub_path) or {}).items()}
        return cls(f.text(d.get("name"), path + ".name"), f.text(d.get("uuid"), path + ".uuid"),
                   f.count(d.get("model_id"), path + ".model_id"),
                   f.boolean(d.get("is_running"), path + ".is_running"), subgraphs)

    def dump(self) -> dict:
        return {"name": self.name, "uuid": self.uuid, "model_id": self.model_id,
                "is_running": self.is_running,
                "subgraphs": {k: v.dump() for k, v in self.subgraphs.items()}}


@dataclass(frozen=True, slots=True)
class MemoryUsed:
    """AWS's exporter reads the host and device totals and the per-core breakdown; the host
    breakdown (None when absent) and the loaded models (a bad one is dropped) are optional.
    A group that failed (``error`` set) without a body has no totals: they are None, not 0."""
    period: float | None
    error: str
    host_bytes: int | None
    device_bytes: int | None
    host_breakdown: Mapping[str, int] | None
    core_breakdown: Mapping[int, Mapping[str, int]]
    loaded_models: tuple[LoadedModel, ...] | None = ()  # None: the stream has no loaded_models

    @classmethod
    def parse(cls, d: Any, path: str) -> MemoryUsed:
        period, error, d = f.group_head(d, path)
        used_path = path + ".neuron_runtime_used_bytes"
        if error and d.get("neuron_runtime_used_bytes") is None:
            return cls(period, error, None, None, None, {}, None)
        used = f.obj(d.get("neuron_runtime_used_bytes"), used_path)
        usage_path = used_path + ".usage_breakdown"
        usage = f.obj(used.get("usage_breakdown"), usage_path)
        cores = f.indexed(usage, "neuroncore_memory_usage", usage_path, "", f.count_map)
        models_path = path + ".loaded_models"
        models = f.optional(f.array, d.get("loaded_models"), models_path)
        parsed = None if models is None else tuple(
            m for m in (f.optional(LoadedModel.parse, m, f"{models_path}[{i}]")
                        for i, m in enumerate(models)) if m is not None)
        return cls(period, error, f.count(used.get("host"), used_path + ".host"),
                   f.count(used.get("neuron_device"), used_path + ".neuron_device"),
                   f.optional(f.count_map, usage.get("host"), usage_path + ".host"), cores, parsed)

    def dump(self) -> dict:
        if self.host_bytes is None or self.device_bytes is None:   # failed, nothing read
            return f.group_out(self.period, self.error)
        breakdown: dict = {} if self.host_breakdown is None else {"host": dict(self.host_breakdown)}
        breakdown["neuroncore_memory_usage"] = {str(k): dict(v) for k, v in self.core_breakdown.items()}
        used = {"host": self.host_bytes, "neuron_device": self.device_bytes,
                "usage_breakdown": breakdown}
        models = {} if self.loaded_models is None else {
            "loaded_models": [m.dump() for m in self.loaded_models]}
        return f.group_out(self.period, self.error, neuron_runtime_used_bytes=used, **models)
