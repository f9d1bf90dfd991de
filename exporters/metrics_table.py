"""The one declarative table of every metric the exporters expose.

Names, types, HELP text and label names come from here and nowhere else: the Prometheus renderer,
the CloudWatch EMF writer and docs/metrics.md (`python -m exporters.docs`) all read it.

The first part is AWS's `neuron-monitor-prometheus.py`, reproduced exactly (names, HELP, labels,
including its quirks). The second part is what neuronscope adds, named by Prometheus conventions:
one `neuron_` prefix, base units, `_ratio` for 0..1, `_total` on counters, no target labels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from monitor import vocab

Kind = Literal["gauge", "counter", "info"]

# AWS's instance labels, in the order its script builds them (exposition sorts them anyway).
INSTANCE_LABELS: tuple[str, ...] = (
    "instance_name", "instance_id", "instance_type", "availability_zone", "region", "subnet_id",
)

# The schema's vocabulary, under the names the extractors and docs use for label values.
ERROR_TYPES = vocab.ERROR_KINDS
STATUS_TYPES = vocab.EXEC_STATUS
PERCENTILES = vocab.PERCENTILES
CORE_MEMORY_KINDS = vocab.CORE_MEMORY
ECC_EVENTS = vocab.ECC_KINDS
ENGINES = vocab.ENGINES
DMA_PURPOSES = vocab.DMA_QUEUES


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family.

    `name` is the name in the 0.0.4 text format (counters end in `_total`, info metrics in
    `_info`); `labels` are the family's own labels, in the order extractors give their values;
    AWS families with `instance_labels` also carry AWS's six instance labels in front of them.
    """

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    group: str
    source: str
    unit: str = ""
    aws: bool = False
    instance_labels: bool = False
    per_runtime: bool = False
    created: bool = False
    # The family is each report's set for its runtime: a series the runtime's latest group does
    # not carry is removed (a model unloaded, a pid replaced), not kept at its last value.
    replaced: bool = False
    # The last labels that many say where the core or device is placed (--enable-k8s-info's
    # pod): a series of an earlier placement is removed once the core has a new one.
    placement_labels: int = 0

    @property
    def family(self) -> str:
        """The family name OpenMetrics uses: without `_total` / `_info`."""
        if self.kind == "counter":
            return self.name[: -len("_total")]
        if self.kind == "info":
            return self.name[: -len("_info")]
        return self.name

    @property
    def all_labels(self) -> tuple[str, ...]:
        return (INSTANCE_LABELS + self.labels) if self.instance_labels else self.labels

    @property
    def adds_up(self) -> bool:
        """Whether two processes' readings of one series add up to the whole (bytes held, a
        share of the host's vCPUs), as for runtimes that share a tag; else the larger stands
        for both (a core's busy fraction, a latency percentile)."""
        return self.unit == "bytes" or self.name == "neuron_runtime_vcpu_usage_ratio"


def _aws(name: str, kind: Kind, help_text: str, labels: tuple[str, ...], group: str, source: str,
         unit: str = "", runtime: bool = True) -> MetricSpec:
    extra = ("runtime_tag",) + labels if runtime else labels
    return MetricSpec(name, kind, help_text, extra, group, source, unit, aws=True,
                      instance_labels=True, per_runtime=runtime, created=kind == "counter")


def _core_memory(kind: str) -> MetricSpec:
    # AWS leaves memory_location as Python None here, so its value is the string "None".
    return _aws(f"neuroncore_memory_usage_{kind}", "gauge", f"NeuronCore memory utilization for {kind}",
                ("memory_location", "neuroncore"), "memory_used",
                f"neuroncore_memory_usage[core].{kind}; memory_location is always \"None\"", "bytes")


AWS_METRICS: tuple[MetricSpec, ...] = (
    _aws("neuroncore_utilization_ratio", "gauge", "NeuronCore utilization ratio", ("neuroncore",),
         "neuroncore_counters", "neuroncores_in_use[core].neuroncore_utilization / 100", "ratio"),
    _aws("execution_errors_total", "counter", "Execution errors total", ("error_type",),
         "execution_stats", "error_summary[error_type], added each period", "executions"),
    _aws("execution_status_total", "counter", "Execution status total", ("status_type",),
         "execution_stats", "execution_summary[status_type], added each period", "executions"),
    _aws("execution_latency_seconds", "gauge", "Execution latency in seconds", ("percentile",),
         "execution_stats", "latency_stats.total_latency[percentile] (kept when null)", "seconds"),
    _aws("neuron_runtime_memory_used_bytes", "gauge", "Runtime memory used bytes", ("memory_location",),
         "memory_used", "neuron_runtime_used_bytes.{host,neuron_device}", "bytes"),
    *(_core_memory(kind) for kind in CORE_MEMORY_KINDS),
    _aws("neuron_runtime_vcpu_usage_ratio", "gauge", "Runtime vCPU utilization ratio", ("usage_type",),
         "neuron_runtime_vcpu_usage", "vcpu_usage.{user,system} / 100", "ratio"),
    _aws("hardware_ecc_events_total", "counter", "Hardware ecc events total",
         ("event_type", "neuron_device_index"), "neuron_hw_counters",
         "neuron_devices[].{mem,sram}_ecc_{corrected,uncorrected}, added each report", "events",
         runtime=False),
    _aws("system_vcpu_count", "gauge", "System vCPU count", (), "vcpu_usage", "len(usage_data)",
         "vCPUs", runtime=False),
    _aws("system_vcpu_usage_ratio", "gauge", "System CPU utilization ratio", ("usage_type",),
         "vcpu_usage", "user = user+nice, system = system+io_wait+irq+soft_irq of average_usage, "
         "capped at 1", "ratio", runtime=False),
    *(_aws(f"system_{area}_{stat}", "gauge", f"System {area} {stat} bytes", (), "memory_info",
           f"{area}_{stat}", "bytes", runtime=False)
      for area in ("memory", "swap") for stat in ("total_bytes", "used_bytes")),
    _aws("instance_info", "info", "EC2 instance information", (), "instance_info",
         "instance_info of the first report", runtime=False),
    _aws("neuron_hardware_info", "info", "Neuron Hardware Information",
         ("neuron_device_count", "neuron_device_memory_size", "neuroncore_per_device_count"),
         "neuron_hardware_info", "neuron_hardware_info of the first report", runtime=False),
)

_CORE = ("runtime_tag", "neuron_device_index", "neuroncore")
_DEVICE = ("neuron_device_index",)
ENGINE_GROUP = "neuroncore_engine_counters"
DEVICE_GROUP = "neuron_device_counters"
EXPORTER_GROUP = "exporter"
DEVICE_MEMORY_GROUP = "device_memory"
RUNTIME_GROUP = "neuron_runtime_data"   # the runtime entry itself (pid, tag), not one of its groups
MODEL_MEMORY_GROUP = "memory_used"
_MODEL = ("runtime_tag", "model_id", "model_name", "neuron_device_index", "neuroncore",
          "memory_location", "category")


def _ext(name: str, kind: Kind, help_text: str, labels: tuple[str, ...], group: str, source: str,
         unit: str, replaced: bool = False) -> MetricSpec:
    return MetricSpec(name, kind, help_text, labels, group, source, unit,
                      per_runtime="runtime_tag" in labels, replaced=replaced)


EXTRA_METRICS: tuple[MetricSpec, ...] = (
    _ext("neuron_core_engine_utilization_ratio", "gauge",
         "Fraction of the period each NeuronCore engine was busy.", _CORE + ("engine",), ENGINE_GROUP,
         "engine_utilization[engine] / 100", "ratio"),
    _ext("neuron_core_model_flops_total", "counter",
         "Floating-point operations the model asked for, as counted by the compiler.", _CORE,
         ENGINE_GROUP, "model_flops, added each period", "FLOP"),
    _ext("neuron_core_hardware_flops_total", "counter",
         "Floating-point operations the engines executed, padding and recompute included.", _CORE,
         ENGINE_GROUP, "hardware_flops, added each period", "FLOP"),
    _ext("neuron_core_model_flops_utilization_ratio", "gauge",
         "Model FLOPs over the period divided by the core's dense BF16 peak (MFU).", _CORE,
         ENGINE_GROUP, "model_flops / (period x peak BF16 FLOP/s of the logical core)", "ratio"),
    _ext("neuron_core_dma_bytes_total", "counter", "Bytes moved by the core's DMA queues.",
         _CORE + ("purpose",), ENGINE_GROUP, "dma_bytes[purpose], added each period", "bytes"),
    _ext("neuron_core_collective_bytes_total", "counter",
         "Bytes the core sent and received in collective operations.", _CORE, ENGINE_GROUP,
         "collective_bytes, added each period", "bytes"),
    _ext("neuron_core_collective_seconds_total", "counter",
         "Time the core spent in collective operations.", _CORE, ENGINE_GROUP,
         "collective_time, added each period", "seconds"),
    _ext("neuron_device_hbm_read_bytes_total", "counter", "Bytes read from the device's HBM.",
         _DEVICE, DEVICE_GROUP, "hbm_read_bytes, added each period", "bytes"),
    _ext("neuron_device_hbm_write_bytes_total", "counter", "Bytes written to the device's HBM.",
         _DEVICE, DEVICE_GROUP, "hbm_write_bytes, added each period", "bytes"),
    _ext("neuron_device_hbm_bandwidth_utilization_ratio", "gauge",
         "HBM bytes moved over the period divided by the device's peak HBM bandwidth.", _DEVICE,
         DEVICE_GROUP, "hbm_bandwidth_utilization / 100", "ratio"),
    _ext("neuron_device_power_watts", "gauge", "Device power draw (modelled when modelled=1).",
         _DEVICE, DEVICE_GROUP, "power_watts", "watts"),
    _ext("neuron_device_energy_joules_total", "counter", "Device energy used; rate() gives watts.",
         _DEVICE, DEVICE_GROUP, "energy_joules, added each period", "joules"),
    _ext("neuron_device_temperature_celsius", "gauge", "Device temperature.", _DEVICE, DEVICE_GROUP,
         "temperature_celsius", "celsius"),
    _ext("neuron_device_throttle_ratio", "gauge",
         "Fraction of the period the device's engines ran throttled.", _DEVICE, DEVICE_GROUP,
         "throttle_ratio", "ratio"),
    _ext("neuron_device_modelled", "gauge",
         "1 when the device counters come from the performance model rather than hardware.",
         _DEVICE, DEVICE_GROUP, "modelled", "boolean"),
    _ext("neuron_device_memory_used_bytes", "gauge",
         "Device memory (HBM) in use on the device, all runtimes together.", _DEVICE,
         DEVICE_MEMORY_GROUP, "sum of neuroncore_memory_usage over the device's cores and "
         "runtimes; kept at its last value while a runtime on it has no memory_used reading",
         "bytes"),
    _ext("neuron_device_memory_total_bytes", "gauge", "Device memory (HBM) capacity of the device.",
         _DEVICE, DEVICE_MEMORY_GROUP, "neuron_hardware_info.neuron_device_memory_size", "bytes"),
    _ext("neuron_runtime_info", "gauge",
         "One per runtime: the process id behind its runtime_tag; always 1.",
         ("runtime_tag", "pid"), RUNTIME_GROUP, "neuron_runtime_data[].pid", "", replaced=True),
    _ext("neuron_runtime_model_memory_used_bytes", "gauge",
         "Device memory a loaded model's subgraphs hold on one NeuronCore, by category.",
         _MODEL, MODEL_MEMORY_GROUP,
         "loaded_models[].subgraphs[].memory_used_bytes.usage_breakdown.neuron_device"
         "[category]; memory_location is always neuron_device; neuroncore is the host-wide "
         "logical index", "bytes", replaced=True),
    _ext("neuron_runtime_host_memory_used_bytes", "gauge",
         "Host memory a runtime uses, by category; they add up to its host total in "
         "neuron_runtime_memory_used_bytes.", ("runtime_tag", "category"), MODEL_MEMORY_GROUP,
         "memory_used.neuron_runtime_used_bytes.usage_breakdown.host[category]", "bytes",
         replaced=True),
    _ext("neuron_exporter_scrape_duration_seconds", "gauge",
         "Time the exporter took to turn the latest report into the exposition it serves.", (),
         EXPORTER_GROUP, "ingest + render of the last report", "seconds"),
    _ext("neuron_exporter_last_report_timestamp_seconds", "gauge",
         "Unix time at which the latest valid report was received.", (), EXPORTER_GROUP,
         "Report.received_at", "seconds"),
    _ext("neuron_exporter_reports_total", "counter", "Valid reports received.", (), EXPORTER_GROUP,
         "one per report", "reports"),
    _ext("neuron_exporter_input_errors_total", "counter",
         "Input problems by kind: bad lines skipped, groups or runtimes reporting an error, "
         "fields left out for a bad value.",
         ("kind",), EXPORTER_GROUP, "stream and report checks", "errors"),
    _ext("neuron_exporter_series", "gauge", "Series in the exposition being served.", (),
         EXPORTER_GROUP, "count of the Neuron samples (the exporter's own and _created "
         "excluded)", "series"),
    _ext("neuron_exporter_build_info", "gauge", "Exporter version; always 1.", ("version",),
         EXPORTER_GROUP, "package version", ""),
)

ALL_METRICS: tuple[MetricSpec, ...] = AWS_METRICS + EXTRA_METRICS
BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in ALL_METRICS}

def specs_of_group(group: str) -> tuple[MetricSpec, ...]:
    return tuple(spec for spec in ALL_METRICS if spec.group == group)
