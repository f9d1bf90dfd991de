"""Report -> samples of the metric table, group by group, with AWS's transforms.

A sample is `(label_values, value)`, the label values in the order of `MetricSpec.labels`;
AWS's six instance labels are the same for every sample, so sinks add them (`Context.instance`).
Counters carry the count *of the period* (what the report holds); sinks decide what to do with
it (Prometheus adds it to the running total, CloudWatch sends it as is).

Groups whose `error` is set and runtimes whose `error` is set produce no samples but a
`Problem`, as do groups neuron-monitor does not define; AWS's exporter prints the same cases.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from exporters import metrics_table as mt
from monitor.errors import one_line
from monitor.hardware import peak_bf16_per_physical_core
from monitor.report import HardwareInfo, InstanceInfo, K8sInfo, K8sPlacement, Report

Sample = tuple[tuple[str, ...], float]
FamilySamples = tuple[mt.MetricSpec, list[Sample]]

PEAK_BF16_PER_PHYSICAL_CORE = peak_bf16_per_physical_core()


# What a sink reports about a report or its input, by kind: the exporter's error counter's
# `kind` label (beside monitor.stream's bad-line kinds) and CloudWatch's notices.
REPORT_PROBLEMS = ("unknown_group", "group_error", "runtime_error", "malformed_field")
INPUT_PROBLEMS = ("eof",)
CLOUDWATCH_PROBLEMS = ("instance_info", "dimension_value", "value_range")
PROBLEM_KINDS = REPORT_PROBLEMS + INPUT_PROBLEMS + CLOUDWATCH_PROBLEMS


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str       # one of PROBLEM_KINDS
    message: str    # one line; text taken from the stream is escaped (no control characters)

    def __post_init__(self) -> None:
        if self.kind not in PROBLEM_KINDS:
            raise ValueError(f"unknown problem kind {self.kind!r}")
        object.__setattr__(self, "message", one_line(self.message))


@dataclass(frozen=True, slots=True)
class GroupSamples:
    group: str
    runtime_tag: str | None
    families: tuple[FamilySamples, ...]


@dataclass(frozen=True, slots=True)
class Context:
    """What labels and derived values need besides the group itself."""
    instance: tuple[str, ...]        # AWS instance label values, fixed by the first report
    cores_per_device: int            # 0 when the stream does not say
    peak_flops_per_core: float | None

    @classmethod
    def of(cls, instance: InstanceInfo, hardware: HardwareInfo) -> Context:
        peak = PEAK_BF16_PER_PHYSICAL_CORE.get((hardware.device_type or "").lower())
        if peak is not None:
            peak *= hardware.lnc or 1
        return cls(instance_label_values(instance), hardware.cores_per_device or 0, peak)

    def with_hardware_of(self, hardware: HardwareInfo) -> Context:
        """This context, its device layout and peak taken from `hardware` if it had none (a
        first report whose `neuron_hardware_info` failed or was missing): the same object when
        there is nothing to add, so callers can tell by identity."""
        if self.cores_per_device > 0 or hardware.error or not hardware.cores_per_device:
            return self
        later = Context.of(InstanceInfo(), hardware)
        return replace(self, cores_per_device=later.cores_per_device,
                       peak_flops_per_core=later.peak_flops_per_core)

    def device_of(self, core: int) -> str:
        return str(core // self.cores_per_device) if self.cores_per_device > 0 else ""


def instance_label_values(info: InstanceInfo) -> tuple[str, ...]:
    return (info.name, info.id, info.type, info.availability_zone, info.region, info.subnet_id)


def _specs(*names: str) -> tuple[mt.MetricSpec, ...]:
    return tuple(mt.BY_NAME[n] for n in names)


# ------------------------------------------------------------------------------- runtime groups
def _neuroncore_counters(group: Any, base: tuple[str, ...], ctx: Context) -> list[FamilySamples]:
    (util,) = _specs("neuroncore_utilization_ratio")
    return [(util, [(base + (str(i),), c.utilization) for i, c in group.cores.items()])]


def _execution_stats(group: Any, base: tuple[str, ...], ctx: Context) -> list[FamilySamples]:
    errors, statuses, latency = _specs("execution_errors_total", "execution_status_total",
                                       "execution_latency_seconds")
    lat = group.total_latency
    return [(errors, [(base + (k,), float(v)) for k, v in group.errors.items()]),
            (statuses, [(base + (k,), float(v)) for k, v in group.statuses.items()]),
            (latency, [] if lat is None else
             [(base + (p,), v) for p in mt.PERCENTILES if (v := getattr(lat, p)) is not None])]


def _memory_used(group: Any, base: tuple[str, ...], ctx: Context) -> list[FamilySamples]:
    used = mt.BY_NAME["neuron_runtime_memory_used_bytes"]
    out: list[FamilySamples] = [(used, [(base + ("host",), float(group.host_bytes)),
                                        (base + ("neuron_device",), float(group.device_bytes))])]
    cores = [(base + ("None", str(i)), kinds) for i, kinds in group.core_breakdown.items()]
    for kind in mt.CORE_MEMORY_KINDS:
        spec = mt.BY_NAME[f"neuroncore_memory_usage_{kind}"]
        out.append((spec, [(key, float(kinds[kind])) for key, kinds in cores if kind in kinds]))
    if group.host_breakdown is not None:   # a stream without it has no series, not zeros
        out.append((mt.BY_NAME["neuron_runtime_host_memory_used_bytes"],
                    [((base[0], category), float(value))
                     for category, value in group.host_breakdown.items()]))
    if group.loaded_models is not None:
        out.append((mt.BY_NAME["neuron_runtime_model_memory_used_bytes"],
                    _model_memory(group.loaded_models, base[0], ctx)))
    return out


def _model_memory(models: Any, tag: str, ctx: Context) -> list[Sample]:
    """Each loaded model's device memory per core and category (two subgraphs of one model on
    one core are added up), so a scrape can rebuild the memory tree down to models. Host-side
    model memory stays out: it is a few buffers per model, already in the runtime's host total
    (neuron_runtime_memory_used_bytes), and would double these series on every host."""
    per_device = ctx.cores_per_device
    bytes_of: dict[tuple[str, ...], float] = {}
    for model in models:
        for sub in model.subgraphs.values():
            core = sub.global_core(per_device) if per_device > 0 else sub.neuroncore_index
            device = str(core // per_device) if per_device > 0 else str(sub.neuron_device_index)
            head = (tag, str(model.model_id), model.name, device, str(core))
            for category, value in sub.device_breakdown.items():
                key = head + ("neuron_device", category)
                bytes_of[key] = bytes_of.get(key, 0.0) + float(value)
    return list(bytes_of.items())


def _runtime_vcpu(group: Any, base: tuple[str, ...], ctx: Context) -> list[FamilySamples]:
    (spec,) = _specs("neuron_runtime_vcpu_usage_ratio")
    return [(spec, [(base + ("user",), group.user), (base + ("system",), group.system)])]


def _engine_counters(group: Any, tag: str, ctx: Context) -> list[FamilySamples]:
    util, model, hardware, mfu, dma, coll, coll_s = (
        mt.BY_NAME[s.name] for s in mt.specs_of_group(mt.ENGINE_GROUP))
    samples: dict[str, list[Sample]] = {s.name: [] for s in mt.specs_of_group(mt.ENGINE_GROUP)}
    peak = ctx.peak_flops_per_core * group.period if ctx.peak_flops_per_core and group.period else 0.0
    for i, c in group.cores.items():
        key = (tag, ctx.device_of(i), str(i))
        samples[util.name].extend((key + (e,), v) for e, v in c.engine_utilization.items())
        samples[model.name].append((key, float(c.model_flops)))
        samples[hardware.name].append((key, float(c.hardware_flops)))
        if peak > 0:
            samples[mfu.name].append((key, c.model_flops / peak))
        samples[dma.name].extend((key + (p,), float(v)) for p, v in c.dma_bytes.items())
        samples[coll.name].append((key, float(c.collective_bytes)))
        samples[coll_s.name].append((key, float(c.collective_time)))
    return [(spec, samples[spec.name]) for spec in (util, model, hardware, mfu, dma, coll, coll_s)]


# ------------------------------------------------------------------------------- system groups
def _hw_counters(group: Any, base: tuple[str, ...], ctx: Context) -> list[FamilySamples]:
    (spec,) = _specs("hardware_ecc_events_total")
    samples = [(base + (event, str(d.index)), float(v))    # a counter the stream lacks: no series
               for d in (group.devices or ()) for event in mt.ECC_EVENTS
               if (v := getattr(d, event)) is not None]
    return [(spec, samples)]


def _system_vcpu(group: Any, base: tuple[str, ...], ctx: Context) -> list[FamilySamples]:
    count, usage = _specs("system_vcpu_count", "system_vcpu_usage_ratio")
    avg = group.average
    # AWS: user = user + nice, system = system + io_wait + irq + soft_irq, capped at 100 %. A
    # sum whose main part the stream lacks (or carried malformed) is no reading: no series.
    usages = [(base + (kind,), min(sum(avg.get(k, 0.0) for k in parts), 1.0))
              for kind, parts in (("user", ("user", "nice")),
                                  ("system", ("system", "io_wait", "irq", "soft_irq")))
              if kind in avg]
    counts = [(base, float(group.vcpu_count))] if group.vcpu_count else []   # 0: unknown
    return [(count, counts), (usage, usages)]


def _memory_info(group: Any, base: tuple[str, ...], ctx: Context) -> list[FamilySamples]:
    values = (group.total_bytes, group.used_bytes, group.swap_total_bytes, group.swap_used_bytes)
    names = ("system_memory_total_bytes", "system_memory_used_bytes", "system_swap_total_bytes",
             "system_swap_used_bytes")
    return [(mt.BY_NAME[n], [] if v is None else [(base, float(v))]) for n, v in zip(names, values)]


def _device_counters(group: Any, base: tuple[str, ...], ctx: Context) -> list[FamilySamples]:
    fields = ("hbm_read_bytes", "hbm_write_bytes", "hbm_bandwidth_utilization", "power_watts",
              "energy_joules", "temperature_celsius", "throttle_ratio", "modelled")
    specs = mt.specs_of_group(mt.DEVICE_GROUP)
    out: list[FamilySamples] = [(spec, []) for spec in specs]
    for d in group.devices:
        key = (str(d.index),)
        for (_, samples), field in zip(out, fields):
            samples.append((key, float(getattr(d, field))))
    return out


Extractor = Callable[[Any, tuple[str, ...], Context], list[FamilySamples]]
RUNTIME_EXTRACTORS: tuple[tuple[str, str, Extractor], ...] = (
    ("neuroncore_counters", "neuroncore_counters", _neuroncore_counters),
    ("execution_stats", "execution_stats", _execution_stats),
    ("memory_used", "memory_used", _memory_used),
    ("neuron_runtime_vcpu_usage", "vcpu", _runtime_vcpu),
)
SYSTEM_EXTRACTORS: tuple[tuple[str, str, Extractor], ...] = (
    ("neuron_hw_counters", "hw_counters", _hw_counters),
    ("vcpu_usage", "vcpu", _system_vcpu),
    ("memory_info", "memory", _memory_info),
    (mt.DEVICE_GROUP, "device_counters", _device_counters),
)


def extract(report: Report, ctx: Context, problems: list[Problem]) -> Iterator[GroupSamples]:
    """Every group of `report` that carries data, in AWS's processing order."""
    for runtime in report.runtimes:
        if runtime.error:
            problems.append(Problem("runtime_error", f"Runtime {runtime.tag} error: {runtime.error}"))
            yield from _runtime_info(runtime)   # a failing runtime is still that process
            continue
        base = (runtime.tag,)
        for group_name, attr, fn in RUNTIME_EXTRACTORS:
            group = getattr(runtime, attr)
            if _usable(group, group_name, runtime.tag, problems):
                yield GroupSamples(group_name, runtime.tag, tuple(fn(group, base, ctx)))
        engines = runtime.engine_counters
        if _usable(engines, mt.ENGINE_GROUP, runtime.tag, problems):
            yield GroupSamples(mt.ENGINE_GROUP, runtime.tag,
                               tuple(_engine_counters(engines, runtime.tag, ctx)))
        for name in runtime.extra_groups:
            problems.append(Problem("unknown_group", f"unknown group {name} for runtime tag "
                                                     f"{runtime.tag} ignored"))
        yield from _runtime_info(runtime)
    system = report.system
    for group_name, attr, fn in SYSTEM_EXTRACTORS:
        group = getattr(system, attr)
        if _usable(group, group_name, None, problems):
            yield GroupSamples(group_name, None, tuple(fn(group, (), ctx)))
    for name in system.extra_groups:
        problems.append(Problem("unknown_group", f"unknown system group {name} ignored"))
    memory = _device_memory(report, ctx)
    if memory is not None:
        yield memory
    # an optional field (or a group lacking what its reader needs) left out for a bad value:
    # the report is served without it, and the loss is counted and named, never silent
    problems += [Problem("malformed_field", message) for message in report.dropped]


def _runtime_info(runtime: Any) -> Iterator[GroupSamples]:
    if runtime.pid > 0:   # 0: the source does not know the process (never a user's pid)
        yield GroupSamples(mt.RUNTIME_GROUP, runtime.tag, (
            (mt.BY_NAME["neuron_runtime_info"], [((runtime.tag, str(runtime.pid)), 1.0)]),))


def _device_memory(report: Report, ctx: Context) -> GroupSamples | None:
    """Per-device HBM in use: every runtime's per-core usage, summed by device. A device that a
    runtime without a reading this report may hold (its memory_used failed or was not due; the
    devices of the cores its other groups name, else every device) gets no sample, so its gauge
    keeps its last value instead of dropping by that runtime's share."""
    hw = report.hardware
    if ctx.cores_per_device <= 0 or hw.error or not hw.device_count:
        return None
    used = dict.fromkeys(range(hw.device_count), 0)
    unknown: set[int] = set()
    for runtime in report.runtimes:
        mem = runtime.memory_used
        if runtime.error or mem is None or mem.error:
            unknown |= _devices_held(runtime, ctx) or set(used)
            continue
        for core, kinds in mem.core_breakdown.items():
            device = core // ctx.cores_per_device
            used[device] = used.get(device, 0) + sum(kinds.values())
    used_spec, total_spec = mt.specs_of_group(mt.DEVICE_MEMORY_GROUP)
    return GroupSamples(mt.DEVICE_MEMORY_GROUP, None, (
        (used_spec, [((str(d),), float(v)) for d, v in used.items() if d not in unknown]),
        (total_spec, [] if hw.device_memory_bytes is None else
         [((str(d),), float(hw.device_memory_bytes)) for d in used])))


def _devices_held(runtime: Any, ctx: Context) -> set[int]:
    """The devices of the cores a runtime's utilization group names (empty when it has none)."""
    counters = runtime.neuroncore_counters
    cores = counters.cores if counters is not None and not counters.error else {}
    return {core // ctx.cores_per_device for core in cores}


def _usable(group: Any, name: str, tag: str | None, problems: list[Problem]) -> bool:
    if group is None:
        return False
    if group.error:
        where = f" for runtime tag {tag}" if tag is not None else ""
        problems.append(Problem("group_error", f"Error getting {name}{where}: {group.error}"))
        return False
    return True


# ------------------------------------------------------------------------------- k8s labels
K8S_LABELS = ("pod_name", "namespace", "container_name")
_K8S_SPECS: dict[str, mt.MetricSpec] = {}


def _k8s_spec(spec: mt.MetricSpec) -> mt.MetricSpec:
    k8s = _K8S_SPECS.get(spec.name)
    if k8s is None:
        k8s = _K8S_SPECS[spec.name] = replace(spec, labels=spec.labels + K8S_LABELS,
                                              placement_labels=len(K8S_LABELS))
    return k8s


def _placement_values(place: K8sPlacement | None) -> tuple[str, str, str]:
    if place is None:
        return ("", "", "")
    return (place.pod or "", place.namespace or "", ",".join(place.containers))


def with_k8s_labels(groups: Iterable[GroupSamples], k8s: K8sInfo | None) -> Iterator[GroupSamples]:
    """``--enable-k8s-info``: every per-core and per-device family also carries the pod,
    namespace and containers that neuron_k8s_info names for that core or device ("" when it
    names none), so utilization can be read per pod without a join."""
    cores = k8s.cores if k8s is not None else {}
    devices = k8s.devices if k8s is not None else {}
    for group in groups:
        families = []
        for spec, samples in group.families:
            if "neuroncore" in spec.labels:
                at, places = spec.labels.index("neuroncore"), cores
            elif "neuron_device_index" in spec.labels:
                at, places = spec.labels.index("neuron_device_index"), devices
            else:
                families.append((spec, samples))
                continue
            families.append((_k8s_spec(spec), [
                (key + _placement_values(places.get(int(key[at])) if key[at].isdigit() else None),
                 value) for key, value in samples]))
        yield GroupSamples(group.group, group.runtime_tag, tuple(families))
