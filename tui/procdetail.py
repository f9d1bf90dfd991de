"""One runtime process in detail (the Enter screen of the process table), as plain data."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from monitor.report import Report, RuntimeReport
from monitor.vocab import ENGINE_LABELS, ENGINES
from tui.history import History, runtime_key
from tui.procs import ProcessRow, process_row
from tui.view import DEVICE_CATEGORIES, HOST_CATEGORIES, failed_groups, host_vcpu_count, usable



@dataclass(frozen=True, slots=True)
class ProcessDetail:
    """The memory totals are the row's (the runtime's reported totals, as in the table); the
    categories are their parts. ``device_memory`` and ``host_memory`` are empty when the
    runtime's memory_used group is absent or failed."""
    row: ProcessRow
    cores: tuple[tuple[int, float, float], ...]  # (core, utilization ratio, FLOP/s)
    history: tuple[tuple[str, np.ndarray], ...]  # (label, mean over its cores, oldest first)
    # (category label, bytes summed over its cores); None: no core's breakdown has the category
    device_memory: tuple[tuple[str, int | None], ...]
    host_memory: tuple[tuple[str, int | None], ...]  # every value None: no host breakdown
    models: tuple[tuple[str, int, int], ...] | None  # (name, model id, device bytes); None: unknown
    statuses: tuple[tuple[str, int], ...]  # execution outcomes in the period
    errors: tuple[tuple[str, int], ...]  # execution errors by kind in the period
    latency: tuple[tuple[str, float], ...]  # (percentile, seconds)
    period: float
    failed: Mapping[str, str] = field(default_factory=dict)  # group name -> its error


def find_runtime(report: Report, pid: int | None, tag: str | None = None) -> RuntimeReport | None:
    """The runtime with that pid (and tag, when given: runtimes whose pid is unknown are told
    apart by their tag)."""
    return next((r for r in report.runtimes
                 if r.known_pid == pid and (tag is None or r.tag == tag)), None)


def process_detail(report: Report, pid: int | None, history: History,
                   tag: str | None = None) -> ProcessDetail | None:
    runtime = find_runtime(report, pid, tag)
    if runtime is None:
        return None
    row = process_row(runtime, host_vcpus=host_vcpu_count(report))
    counters = runtime.neuroncore_counters
    cores = tuple((core, counters.cores[core].utilization, counters.cores[core].flops)
                  for core in row.cores) if counters else ()
    key = runtime_key(runtime)   # its own share: another runtime on its cores is not in it
    graphs = [("NeuronCore", history.runtime_series(key))]
    if runtime.engine_counters is not None:
        graphs += [(ENGINE_LABELS[name], history.runtime_series(key, index))
                   for index, name in enumerate(ENGINES)]
    used = usable(runtime.memory_used)
    device: dict[str, int] = {}
    models = None   # the stream says nothing of loaded models
    device_memory: tuple[tuple[str, int | None], ...] = ()
    host_memory: tuple[tuple[str, int | None], ...] = ()
    if used is not None:
        for breakdown in used.core_breakdown.values():
            for key, value in breakdown.items():
                device[key] = device.get(key, 0) + value
        if used.loaded_models is not None:
            models = tuple((model.name, model.model_id,
                            sum(s.device_bytes or 0 for s in model.subgraphs.values()))
                           for model in used.loaded_models)
        host = used.host_breakdown or {}   # absent: every category N/A, as in the summary
        device_memory = tuple((label, device.get(key)) for key, label in DEVICE_CATEGORIES)
        host_memory = tuple((label, host.get(key)) for key, label in HOST_CATEGORIES)
    stats = usable(runtime.execution_stats)
    latency = stats.total_latency if stats else None
    return ProcessDetail(
        row, cores, tuple(graphs), device_memory, host_memory, models,
        tuple(sorted(stats.statuses.items())) if stats else (),
        tuple(sorted(stats.errors.items())) if stats else (),
        tuple((name, value) for name in ("p0", "p50", "p99", "p100")
              if (value := getattr(latency, name)) is not None) if latency else (),
        (stats.period or 0.0) if stats else 0.0, failed_groups(runtime))
