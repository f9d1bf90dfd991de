"""The runtime groups of a Report: one ``neuron_runtime_data`` entry and its per-period groups.

``RuntimeReport`` holds what one runtime reported (core utilization and FLOP/s, executions and
latency percentiles, memory, vCPU and the engine-counter extension). Separate from report.py so
that each part of the document lives in a module of its own; ``memory_used`` is in
report_memory.py. Base units inside; mappings are plain dicts for speed: treat them as read-only.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor import _fields as f
from monitor.report_memory import MemoryUsed
from monitor.vocab import PERCENTILES, RENAMED_GROUPS, RUNTIME_GROUPS

__all__ = ["PERCENTILES", "RuntimeReport", "NeuronCoreCounters", "CoreCounters", "ExecutionStats",
           "Latency", "RuntimeVcpu", "EngineCounters", "CoreEngineCounters"]


@dataclass(frozen=True, slots=True)
class CoreCounters:
    """One logical core. Only the utilization is required (AWS's exporter reads nothing else):
    ``flops`` is None on streams without it (inf1, older SDKs), ``physical`` None without v3d."""
    utilization: float
    flops: float | None = None
    physical: Mapping[str, float] | None = None
    physical_key: str = "v3d"

    @classmethod
    def parse(cls, d: Any, path: str) -> CoreCounters:
        d = f.obj(d, path)
        physical, physical_key = None, "v3d"
        for key, value in d.items():
            if key not in ("neuroncore_utilization", "flops") and type(value) is dict:
                physical_key = key
                physical = f.lenient_map(value, f"{path}.{key}", _physical_core)
                break
        return cls(f.pct(d.get("neuroncore_utilization"), path + ".neuroncore_utilization"),
                   f.optional(f.nonneg, d.get("flops"), path + ".flops"), physical, physical_key)

    def dump(self) -> dict:
        out: dict = {"neuroncore_utilization": f.pct_out(self.utilization)}
        if self.flops is not None:
            out["flops"] = f.int_if_whole(self.flops)
        if self.physical is not None:
            out[self.physical_key] = {k: {"neuroncore_utilization": f.pct_out(v)}
                                      for k, v in self.physical.items()}
        return out


def _physical_core(value: Any, path: str) -> float:
    return f.pct(f.obj(value, path).get("neuroncore_utilization"), path + ".neuroncore_utilization")


@dataclass(frozen=True, slots=True)
class NeuronCoreCounters:
    period: float | None
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
    """Latency percentiles over the period, in seconds; a percentile the stream lacks is None."""
    p0: float | None = None
    p1: float | None = None
    p25: float | None = None
    p50: float | None = None
    p75: float | None = None
    p99: float | None = None
    p100: float | None = None

    @classmethod
    def parse(cls, d: Any, path: str) -> Latency | None:
        if d is None:
            return None
        d = f.obj(d, path)
        return cls(*(f.optional(f.nonneg, d.get(p), f"{path}.{p}") for p in PERCENTILES))

    def dump(self) -> dict:
        return f.without_none({p: getattr(self, p) for p in PERCENTILES})


@dataclass(frozen=True, slots=True)
class ExecutionStats:
    period: float | None
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
        latency = f.optional(f.obj, d.get("latency_stats"), path + ".latency_stats")
        if latency is None:  # the whole group is null when nothing ran in the period
            return cls(period, error, errors, statuses)
        lat_path = path + ".latency_stats"
        return cls(period, error, errors, statuses,
                   f.optional(Latency.parse, latency.get("total_latency"), lat_path + ".total_latency"),
                   f.optional(Latency.parse, latency.get("device_latency"), lat_path + ".device_latency"))

    def dump(self) -> dict:
        if self.error and not (self.errors or self.statuses or self.total_latency
                               or self.device_latency):
            return f.group_out(self.period, self.error)
        total = self.total_latency.dump() if self.total_latency else None
        latency: dict[str, Any] = {"total_latency": total}
        if self.device_latency is not None or total is None:
            # older runtimes time the whole execution only: no device_latency to write (a null
            # one would read as "nothing ran"); a null latency_stats is written as both null
            latency["device_latency"] = self.device_latency.dump() if self.device_latency else None
        return f.group_out(self.period, self.error, error_summary=dict(self.errors),
                           execution_summary=dict(self.statuses), latency_stats=latency)


@dataclass(frozen=True, slots=True)
class RuntimeVcpu:
    """``user`` and ``system`` are None when the group failed (``error`` set) without a reading:
    a failed group has no usage, and 0 would read as an idle runtime."""
    period: float | None
    error: str
    user: float | None
    system: float | None

    @classmethod
    def parse(cls, d: Any, path: str) -> RuntimeVcpu:
        period, error, d = f.group_head(d, path)
        if error and d.get("vcpu_usage") is None:
            return cls(period, error, None, None)
        usage = f.obj(d.get("vcpu_usage"), path + ".vcpu_usage")
        return cls(period, error, f.pct(usage.get("user"), path + ".vcpu_usage.user"),
                   f.pct(usage.get("system"), path + ".vcpu_usage.system"))

    def dump(self) -> dict:
        if self.user is None or self.system is None:
            return f.group_out(self.period, self.error)
        return f.group_out(self.period, self.error,
                           vcpu_usage={"user": f.pct_out(self.user),
                                       "system": f.pct_out(self.system)})


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
        return {"engine_utilization": {k: f.pct_out(v) for k, v in self.engine_utilization.items()},
                "model_flops": self.model_flops, "hardware_flops": self.hardware_flops,
                "hbm_read_bytes": self.hbm_read_bytes, "hbm_write_bytes": self.hbm_write_bytes,
                "dma_bytes": dict(self.dma_bytes), "collective_bytes": self.collective_bytes,
                "collective_time": float(self.collective_time)}


@dataclass(frozen=True, slots=True)
class EngineCounters:
    """neuronscope extension group ``neuroncore_engine_counters``."""
    period: float | None
    error: str
    cores: Mapping[int, CoreEngineCounters]

    @classmethod
    def parse(cls, d: Any, path: str) -> EngineCounters:
        period, error, d = f.group_head(d, path)
        # neuronscope's own group: a core with a bad value is left out, not every core
        return cls(period, error, f.indexed(d, "neuroncores_in_use", path, error,
                                            CoreEngineCounters.parse, lenient=True))

    def dump(self) -> dict:
        if self.error and not self.cores:
            return f.group_out(self.period, self.error)
        return f.group_out(self.period, self.error, neuroncores_in_use=f.indexed_out(self.cores))


# JSON key -> (RuntimeReport attribute, parser), in the vocabulary's order of RUNTIME_GROUPS
RUNTIME_GROUP_PARSERS = dict(zip(RUNTIME_GROUPS, (
    ("neuroncore_counters", NeuronCoreCounters.parse),
    ("execution_stats", ExecutionStats.parse),
    ("memory_used", MemoryUsed.parse),
    ("vcpu", RuntimeVcpu.parse),
    ("engine_counters", EngineCounters.parse)), strict=True))
_READ = {**RUNTIME_GROUP_PARSERS,
         **{old: RUNTIME_GROUP_PARSERS[new] for old, new in RENAMED_GROUPS.items()}}


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

    @property
    def empty(self) -> bool:
        """Listed with nothing to say: no group was due (or none had moved), and no error."""
        return not self.error and not self.extra_groups and all(
            group is None for _, group in self.groups())

    @property
    def known_pid(self) -> int | None:
        """The runtime's process id; None where the source does not know it (pid 0, which no
        user process has: a Report rebuilt from AWS's Prometheus metrics, whose runtime_tag is
        the pid only for untagged runtimes)."""
        return self.pid if self.pid > 0 else None

    @classmethod
    def parse(cls, d: Any, path: str) -> RuntimeReport:
        d = f.obj(d, path)
        pid = f.count(d.get("pid"), path + ".pid")
        tag = f.optional(f.text, d.get("neuron_runtime_tag"), path + ".neuron_runtime_tag")
        tag = str(pid) if tag is None else tag  # untagged runtimes go by their pid
        error = f.error_text(d.get("error"), path + ".error")
        address = f.optional(f.text, d.get("address"), path + ".address")
        report_path = path + ".report"
        report = d.get("report")
        if report is None and error:
            report = {}   # a failed runtime's report may be absent, or null (Go's nil map)
        report = f.obj(report, report_path)
        groups, extra = f.known_groups(report, _READ, report_path)
        return cls(pid, tag, error, address=address, extra_groups=extra, **groups)

    def group(self, key: str) -> Any:
        """The group of that JSON key (one of vocab.RUNTIME_GROUPS), or None if absent."""
        return getattr(self, RUNTIME_GROUP_PARSERS[key][0])

    def groups(self) -> tuple[tuple[str, Any], ...]:
        """(JSON key, group or None) of every known group, in the vocabulary's order."""
        return tuple((key, getattr(self, attr)) for key, (attr, _) in RUNTIME_GROUP_PARSERS.items())

    def dump(self) -> dict:
        report: dict[str, Any] = {key: g.dump() for key, g in self.groups() if g is not None}
        report.update(self.extra_groups)
        out: dict[str, Any] = {"pid": self.pid}
        if self.address is not None:
            out["address"] = self.address
        out.update(neuron_runtime_tag=self.tag, error=self.error, report=report)
        return out
