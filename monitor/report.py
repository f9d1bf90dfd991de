"""The Report: one neuron-monitor document, in base units.

This is the single contract between collection (the simulated runtime, a real neuron-monitor
pipe) and every sink (Prometheus exporter, neuron-top, CloudWatch). ``Report.from_json`` reads
the AWS JSON schema (docs/report.md); ``Report.to_json`` writes it back with the same keys,
nesting and JSON types. Inside, percentages are ratios 0..1, times are seconds, sizes bytes.

Mappings held by these frozen dataclasses are plain dicts for speed; treat them as read-only.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from monitor import _fields as f
from monitor.errors import ReportError

__all__ = [
    "PERCENTILES", "ReportError", "Report", "RuntimeReport", "NeuronCoreCounters", "CoreCounters",
    "ExecutionStats", "Latency", "MemoryUsed", "LoadedModel", "Subgraph", "RuntimeVcpu",
    "EngineCounters", "CoreEngineCounters", "SystemData", "HwCounters", "DeviceEcc", "SystemVcpu",
    "MemoryInfo", "DeviceCounters", "DeviceCounter", "InstanceInfo", "HardwareInfo",
]

PERCENTILES = ("p0", "p1", "p25", "p50", "p75", "p99", "p100")
ECC_KEYS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")


# --------------------------------------------------------------------------- runtime groups
@dataclass(frozen=True, slots=True)
class CoreCounters:
    utilization: float
    flops: float
    physical: Mapping[str, float] | None = None
    physical_key: str = "v3d"

    @classmethod
    def parse(cls, d: Any, path: str) -> CoreCounters:
        d = f.obj(d, path)
        physical, physical_key = None, "v3d"
        for key, value in d.items():
            if key not in ("neuroncore_utilization", "flops") and type(value) is dict:
                physical_key = key
                physical = {name: f.pct(f.obj(v, f"{path}.{key}.{name}").get(
                    "neuroncore_utilization"), f"{path}.{key}.{name}.neuroncore_utilization")
                    for name, v in value.items()}
                break
        return cls(f.pct(d.get("neuroncore_utilization"), path + ".neuroncore_utilization"),
                   f.num(d.get("flops"), path + ".flops"), physical, physical_key)

    def dump(self) -> dict:
        out: dict = {"neuroncore_utilization": self.utilization * 100.0,
                     "flops": f.int_if_whole(self.flops)}
        if self.physical is not None:
            out[self.physical_key] = {k: {"neuroncore_utilization": v * 100.0}
                                      for k, v in self.physical.items()}
        return out


@dataclass(frozen=True, slots=True)
class NeuronCoreCounters:
    period: float
    error: str
    cores: Mapping[int, CoreCounters]

    @classmethod
    def parse(cls, d: Any, path: str) -> NeuronCoreCounters:
        period, error, d = f.group_head(d, path)
        cores = f.indexed(d, "neuroncores_in_use", path, error, CoreCounters.parse)
        return cls(period, error, cores)

    def dump(self) -> dict:
        if self.error and not self.cores:
            return f.group_out(self.period, self.error)
        return f.group_out(self.period, self.error, neuroncores_in_use=f.indexed_out(self.cores))


@dataclass(frozen=True, slots=True)
class Latency:
    """Latency percentiles over the period, in seconds."""
    p0: float
    p1: float
    p25: float
    p50: float
    p75: float
    p99: float
    p100: float

    @classmethod
    def parse(cls, d: Any, path: str) -> Latency | None:
        if d is None:
            return None
        d = f.obj(d, path)
        return cls(*(f.nonneg(d.get(p), f"{path}.{p}") for p in PERCENTILES))

    def dump(self) -> dict:
        return {p: getattr(self, p) for p in PERCENTILES}


@dataclass(frozen=True, slots=True)
class ExecutionStats:
    period: float
    error: str
    errors: Mapping[str, int]
    statuses: Mapping[str, int]
    total_latency: Latency | None = None
    device_latency: Latency | None = None

    @classmethod
    def parse(cls, d: Any, path: str) -> ExecutionStats:
        period, error, d = f.group_head(d, path)
        errors = f.counts(d, "error_summary", path, error)
        # Before the inference_stats -> execution_stats rename the counts were "inference_summary".
        status_key = "inference_summary" if "inference_summary" in d else "execution_summary"
        statuses = f.counts(d, status_key, path, error)
        latency = d.get("latency_stats")
        if latency is None:  # the whole group is null when nothing ran in the period
            return cls(period, error, errors, statuses)
        latency = f.obj(latency, path + ".latency_stats")
        return cls(period, error, errors, statuses,
                   Latency.parse(latency.get("total_latency"), path + ".latency_stats.total_latency"),
                   Latency.parse(latency.get("device_latency"), path + ".latency_stats.device_latency"))

    def dump(self) -> dict:
        if self.error and not (self.errors or self.statuses or self.total_latency
                               or self.device_latency):
            return f.group_out(self.period, self.error)
        total = self.total_latency.dump() if self.total_latency else None
        device = self.device_latency.dump() if self.device_latency else None
        return f.group_out(self.period, self.error, error_summary=dict(self.errors),
                           execution_summary=dict(self.statuses),
                           latency_stats={"total_latency": total, "device_latency": device})


@dataclass(frozen=True, slots=True)
class Subgraph:
    neuroncore_index: int
    neuron_device_index: int
    host_bytes: int
    device_bytes: int
    host_breakdown: Mapping[str, int]
    device_breakdown: Mapping[str, int]

    @classmethod
    def parse(cls, d: Any, path: str) -> Subgraph:
        d = f.obj(d, path)
        mem_path = path + ".memory_used_bytes"
        mem = f.obj(d.get("memory_used_bytes"), mem_path)
        usage = f.obj(mem.get("usage_breakdown"), mem_path + ".usage_breakdown")
        return cls(f.count(d.get("neuroncore_index"), path + ".neuroncore_index"),
                   f.count(d.get("neuron_device_index"), path + ".neuron_device_index"),
                   f.count(mem.get("host"), mem_path + ".host"),
                   f.count(mem.get("neuron_device"), mem_path + ".neuron_device"),
                   f.count_map(usage.get("host"), mem_path + ".usage_breakdown.host"),
                   f.count_map(usage.get("neuron_device"), mem_path + ".usage_breakdown.neuron_device"))

    def dump(self) -> dict:
        return {"neuroncore_index": self.neuroncore_index,
                "neuron_device_index": self.neuron_device_index,
                "memory_used_bytes": {"host": self.host_bytes, "neuron_device": self.device_bytes,
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
                     for k, v in f.obj(d.get("subgraphs", {}), sub_path).items()}
        return cls(f.text(d.get("name"), path + ".name"), f.text(d.get("uuid"), path + ".uuid"),
                   f.count(d.get("model_id"), path + ".model_id"),
                   f.boolean(d.get("is_running"), path + ".is_running"), subgraphs)

    def dump(self) -> dict:
        return {"name": self.name, "uuid": self.uuid, "model_id": self.model_id,
                "is_running": self.is_running,
                "subgraphs": {k: v.dump() for k, v in self.subgraphs.items()}}


@dataclass(frozen=True, slots=True)
class MemoryUsed:
    period: float
    error: str
    host_bytes: int
    device_bytes: int
    host_breakdown: Mapping[str, int]
    core_breakdown: Mapping[int, Mapping[str, int]]
    loaded_models: tuple[LoadedModel, ...] = ()

    @classmethod
    def parse(cls, d: Any, path: str) -> MemoryUsed:
        period, error, d = f.group_head(d, path)
        used_path = path + ".neuron_runtime_used_bytes"
        if error and d.get("neuron_runtime_used_bytes") is None:
            return cls(period, error, 0, 0, {}, {})
        used = f.obj(d.get("neuron_runtime_used_bytes"), used_path)
        usage_path = used_path + ".usage_breakdown"
        usage = f.obj(used.get("usage_breakdown"), usage_path)
        cores = f.indexed(usage, "neuroncore_memory_usage", usage_path, "", f.count_map)
        models_path = path + ".loaded_models"
        models = f.array(d.get("loaded_models", []), models_path)
        return cls(period, error, f.count(used.get("host"), used_path + ".host"),
                   f.count(used.get("neuron_device"), used_path + ".neuron_device"),
                   f.count_map(usage.get("host"), usage_path + ".host"), cores,
                   tuple(LoadedModel.parse(m, f"{models_path}[{i}]") for i, m in enumerate(models)))

    def dump(self) -> dict:
        if self.error and not (self.host_bytes or self.device_bytes or self.host_breakdown
                               or self.core_breakdown or self.loaded_models):
            return f.group_out(self.period, self.error)
        used = {"host": self.host_bytes, "neuron_device": self.device_bytes,
                "usage_breakdown": {"host": dict(self.host_breakdown),
                                    "neuroncore_memory_usage": {str(k): dict(v) for k, v
                                                                in self.core_breakdown.items()}}}
        return f.group_out(self.period, self.error, neuron_runtime_used_bytes=used,
                           loaded_models=[m.dump() for m in self.loaded_models])


@dataclass(frozen=True, slots=True)
class RuntimeVcpu:
    period: float
    error: str
    user: float
    system: float

    @classmethod
    def parse(cls, d: Any, path: str) -> RuntimeVcpu:
        period, error, d = f.group_head(d, path)
        if error and d.get("vcpu_usage") is None:
            return cls(period, error, 0.0, 0.0)
        usage = f.obj(d.get("vcpu_usage"), path + ".vcpu_usage")
        return cls(period, error, f.pct(usage.get("user"), path + ".vcpu_usage.user"),
                   f.pct(usage.get("system"), path + ".vcpu_usage.system"))

    def dump(self) -> dict:
        if self.error and not (self.user or self.system):
            return f.group_out(self.period, self.error)
        return f.group_out(self.period, self.error,
                           vcpu_usage={"user": self.user * 100.0, "system": self.system * 100.0})


@dataclass(frozen=True, slots=True)
class CoreEngineCounters:
    """neuronscope extension: per-core engine activity, counts are totals within the period."""
    engine_utilization: Mapping[str, float]
    model_flops: int
    hardware_flops: int
    hbm_read_bytes: int
    hbm_write_bytes: int
    dma_bytes: Mapping[str, int]
    collective_bytes: int
    collective_time: float

    @classmethod
    def parse(cls, d: Any, path: str) -> CoreEngineCounters:
        d = f.obj(d, path)
        util_path = path + ".engine_utilization"
        util = {f.text(k, util_path): f.pct(v, f"{util_path}.{k}")
                for k, v in f.obj(d.get("engine_utilization"), util_path).items()}
        return cls(util, f.count(d.get("model_flops"), path + ".model_flops"),
                   f.count(d.get("hardware_flops"), path + ".hardware_flops"),
                   f.count(d.get("hbm_read_bytes"), path + ".hbm_read_bytes"),
                   f.count(d.get("hbm_write_bytes"), path + ".hbm_write_bytes"),
                   f.count_map(d.get("dma_bytes"), path + ".dma_bytes"),
                   f.count(d.get("collective_bytes"), path + ".collective_bytes"),
                   f.nonneg(d.get("collective_time"), path + ".collective_time"))

    def dump(self) -> dict:
        return {"engine_utilization": {k: v * 100.0 for k, v in self.engine_utilization.items()},
                "model_flops": self.model_flops, "hardware_flops": self.hardware_flops,
                "hbm_read_bytes": self.hbm_read_bytes, "hbm_write_bytes": self.hbm_write_bytes,
                "dma_bytes": dict(self.dma_bytes), "collective_bytes": self.collective_bytes,
                "collective_time": float(self.collective_time)}


@dataclass(frozen=True, slots=True)
class EngineCounters:
    """neuronscope extension group ``neuroncore_engine_counters``."""
    period: float
    error: str
    cores: Mapping[int, CoreEngineCounters]

    @classmethod
    def parse(cls, d: Any, path: str) -> EngineCounters:
        period, error, d = f.group_head(d, path)
        return cls(period, error, f.indexed(d, "neuroncores_in_use", path, error,
                                            CoreEngineCounters.parse))

    def dump(self) -> dict:
        if self.error and not self.cores:
            return f.group_out(self.period, self.error)
        return f.group_out(self.period, self.error, neuroncores_in_use=f.indexed_out(self.cores))


_RUNTIME_GROUPS = {  # JSON key -> (RuntimeReport attribute, parser)
    "neuroncore_counters": ("neuroncore_counters", NeuronCoreCounters.parse),
    "execution_stats": ("execution_stats", ExecutionStats.parse),
    "inference_stats": ("execution_stats", ExecutionStats.parse),  # pre-2.5 name, read only
    "memory_used": ("memory_used", MemoryUsed.parse),
    "neuron_runtime_vcpu_usage": ("vcpu", RuntimeVcpu.parse),
    "neuroncore_engine_counters": ("engine_counters", EngineCounters.parse),
}


@dataclass(frozen=True, slots=True)
class RuntimeReport:
    pid: int
    tag: str
    error: str = ""
    neuroncore_counters: NeuronCoreCounters | None = None
    execution_stats: ExecutionStats | None = None
    memory_used: MemoryUsed | None = None
    vcpu: RuntimeVcpu | None = None
    engine_counters: EngineCounters | None = None
    address: str | None = None  # written only when the source document had it
    extra_groups: Mapping[str, Any] = field(default_factory=dict)  # unknown groups, kept verbatim

    @classmethod
    def parse(cls, d: Any, path: str) -> RuntimeReport:
        d = f.obj(d, path)
        pid = f.count(d.get("pid"), path + ".pid")
        tag = d.get("neuron_runtime_tag")
        tag = str(pid) if tag is None else f.text(tag, path + ".neuron_runtime_tag")
        error = f.text(d.get("error", ""), path + ".error")
        address = d.get("address")
        address = None if address is None else f.text(address, path + ".address")
        report_path = path + ".report"
        report = f.obj(d.get("report", {} if error else None), report_path)
        groups: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in report.items():
            known = _RUNTIME_GROUPS.get(key)
            if known is None:
                extra[key] = f.verbatim(value, f"{report_path}.{key}")
            elif value is not None:
                groups[known[0]] = known[1](value, f"{report_path}.{key}")
        return cls(pid, tag, error, address=address, extra_groups=extra, **groups)

    def dump(self) -> dict:
        report: dict[str, Any] = {}
        for key, attr in (("neuroncore_counters", self.neuroncore_counters),
                          ("execution_stats", self.execution_stats),
                          ("memory_used", self.memory_used),
                          ("neuron_runtime_vcpu_usage", self.vcpu),
                          ("neuroncore_engine_counters", self.engine_counters)):
            if attr is not None:
                report[key] = attr.dump()
        report.update(self.extra_groups)
        out: dict[str, Any] = {"pid": self.pid}
        if self.address is not None:
            out["address"] = self.address
        out.update(neuron_runtime_tag=self.tag, error=self.error, report=report)
        return out


# --------------------------------------------------------------------------- system groups
@dataclass(frozen=True, slots=True)
class DeviceEcc:
    index: int
    mem_ecc_corrected: int = 0
    mem_ecc_uncorrected: int = 0
    sram_ecc_corrected: int = 0
    sram_ecc_uncorrected: int = 0

    @classmethod
    def parse(cls, d: Any, path: str) -> DeviceEcc:
        d = f.obj(d, path)
        # Older tools lack sram_ecc_corrected; a missing counter reads as 0.
        return cls(f.count(d.get("neuron_device_index"), path + ".neuron_device_index"),
                   *(f.count(d.get(k, 0), f"{path}.{k}") for k in ECC_KEYS))

    def dump(self) -> dict:
        out = {"neuron_device_index": self.index}
        out.update((k, getattr(self, k)) for k in ECC_KEYS)
        return out


@dataclass(frozen=True, slots=True)
class HwCounters:
    period: float
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
    period: float
    error: str
    average: Mapping[str, float]
    per_cpu: Mapping[int, Mapping[str, float]]
    context_switches: int  # context switches within the period (a delta, like the other counts)

    @classmethod
    def parse(cls, d: Any, path: str) -> SystemVcpu:
        period, error, d = f.group_head(d, path)
        switches = d.get("context_switch_count")
        switches = 0 if switches is None and error else f.count(
            switches, path + ".context_switch_count")
        average = f.pct_map(d.get("average_usage", {} if error else None), path + ".average_usage")
        per_cpu = f.indexed(d, "usage_data", path, error, f.pct_map)
        return cls(period, error, average, per_cpu, switches)

    def dump(self) -> dict:
        if self.error and not (self.average or self.per_cpu or self.context_switches):
            return f.group_out(self.period, self.error)
        return f.group_out(self.period, self.error, context_switch_count=self.context_switches,
                           average_usage={k: v * 100.0 for k, v in self.average.items()},
                           usage_data={str(i): {k: v * 100.0 for k, v in cpu.items()}
                                       for i, cpu in self.per_cpu.items()})


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    period: float
    error: str
    total_bytes: int
    used_bytes: int
    swap_total_bytes: int
    swap_used_bytes: int

    @classmethod
    def parse(cls, d: Any, path: str) -> MemoryInfo:
        period, error, d = f.group_head(d, path)
        values = [0 if (error and d.get(k) is None) else f.count(d.get(k), f"{path}.{k}")
                  for k in ("memory_total_bytes", "memory_used_bytes", "swap_total_bytes",
                            "swap_used_bytes")]
        return cls(period, error, *values)

    def dump(self) -> dict:
        values = (self.total_bytes, self.used_bytes, self.swap_total_bytes, self.swap_used_bytes)
        if self.error and not any(values):
            return f.group_out(self.period, self.error)
        return f.group_out(self.period, self.error, memory_total_bytes=self.total_bytes,
                           memory_used_bytes=self.used_bytes, swap_total_bytes=self.swap_total_bytes,
                           swap_used_bytes=self.swap_used_bytes)


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
                "hbm_bandwidth_utilization": self.hbm_bandwidth_utilization * 100.0,
                "power_watts": float(self.power_watts), "energy_joules": float(self.energy_joules),
                "temperature_celsius": float(self.temperature_celsius),
                "throttle_ratio": float(self.throttle_ratio), "modelled": self.modelled}


@dataclass(frozen=True, slots=True)
class DeviceCounters:
    """neuronscope extension group ``neuron_device_counters``."""
    period: float
    error: str
    devices: tuple[DeviceCounter, ...]

    @classmethod
    def parse(cls, d: Any, path: str) -> DeviceCounters:
        period, error, d = f.group_head(d, path)
        devices = f.optional_array(d, "neuron_devices", path, DeviceCounter.parse)
        return cls(period, error, devices or ())

    def dump(self) -> dict:
        return f.group_out(self.period, self.error, neuron_devices=[c.dump() for c in self.devices])


_SYSTEM_GROUPS = {
    "neuron_hw_counters": ("hw_counters", HwCounters.parse),
    "vcpu_usage": ("vcpu", SystemVcpu.parse),
    "memory_info": ("memory", MemoryInfo.parse),
    "neuron_device_counters": ("device_counters", DeviceCounters.parse),
}


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
        groups: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in d.items():
            known = _SYSTEM_GROUPS.get(key)
            if known is None:
                extra[key] = f.verbatim(value, f"{path}.{key}")
            elif value is not None:
                groups[known[0]] = known[1](value, f"{path}.{key}")
        return cls(extra_groups=extra, **groups)

    def dump(self) -> dict:
        out: dict[str, Any] = {}
        for key, group in (("neuron_hw_counters", self.hw_counters), ("vcpu_usage", self.vcpu),
                           ("memory_info", self.memory),
                           ("neuron_device_counters", self.device_counters)):
            if group is not None:
                out[key] = group.dump()
        out.update(self.extra_groups)
        return out


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
