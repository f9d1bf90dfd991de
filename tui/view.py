"""Pure view data derived from one Report: what every section shows, before any styling.

Nothing here touches Textual, so each function is testable on its own and the widgets stay
thin. Values stay in base units; widgets format them at the edge (``tui.fmt``).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from monitor.errors import one_line
from monitor.report import Report, RuntimeReport
from tui.fmt import percent

G = TypeVar("G")
ALL_TAB = "all"
HOST_CATEGORIES = (("tensors", "Tensors"), ("constants", "Constants"), ("dma_buffers", "DMA Buffers"),
                   ("application_memory", "App. Memory"))
DEVICE_CATEGORIES = (("tensors", "Tensors"), ("constants", "Constants"), ("model_code", "Model Code"),
                     ("runtime_memory", "Runtime Memory"),
                     ("model_shared_scratchpad", "Model Scratchpad"))


def usable(group: G | None) -> G | None:
    """A metric group to read figures from: None when the stream lacks it or when it carries an
    ``error``. A failed group has no reading (AWS's exporter skips it); whatever zeros or
    leftovers it holds would read as an idle runtime, so it shows N/A like an absent one."""
    return group if group is not None and not group.error else None


def failed_groups(runtime: RuntimeReport) -> dict[str, str]:
    """The runtime's groups that carry an ``error``, by JSON name, with the error text."""
    return {name: group.error for name, group in runtime.groups()
            if group is not None and group.error}


def app_tabs(report: Report) -> tuple[str, ...]:
    """``all`` then one tab per runtime tag, in report order (AWS's "Neuron Apps" bar)."""
    tags = dict.fromkeys(r.tag for r in report.runtimes)
    return (ALL_TAB, *tags)


def runtimes_for(report: Report, tab: str) -> tuple[RuntimeReport, ...]:
    if tab == ALL_TAB:
        return report.runtimes
    return tuple(r for r in report.runtimes if r.tag == tab)


def tab_cores(report: Report, tab: str) -> tuple[int, ...]:
    """The cores a tab covers, sorted: every core for ``all``, else the app's reported cores."""
    if tab == ALL_TAB:
        devices, per_device = core_layout(report)
        return tuple(range(devices * per_device))
    cores: set[int] = set()
    for runtime in runtimes_for(report, tab):
        if runtime.neuroncore_counters:
            cores.update(runtime.neuroncore_counters.cores)
        if runtime.engine_counters:
            cores.update(runtime.engine_counters.cores)
    return tuple(sorted(cores))


def instance_stopped(report: Report) -> bool:
    """A report of no instance at all: no runtime, no device, no instance id (what a collector
    reads once the instance it watched has stopped)."""
    return (not report.runtimes and not report.hardware.device_count
            and not report.instance.id)


def core_layout(report: Report) -> tuple[int, int]:
    """(devices, logical cores per device); inferred from the cores seen when hardware info is empty."""
    hw = report.hardware
    if hw.device_count and hw.cores_per_device:
        return hw.device_count, hw.cores_per_device
    highest = max((c for r in report.runtimes if r.neuroncore_counters
                   for c in r.neuroncore_counters.cores), default=-1)
    if hw.device_count == 0 and highest < 0:
        return 0, hw.cores_per_device or 1    # the stream says: no Neuron device (no driver)
    per_device = hw.cores_per_device or 2
    return max(1, -(-(highest + 1) // per_device)), per_device


NO_DEVICE = "  no Neuron device in this report (no driver, or none on this host)"


def instance_title(report: Report | None) -> tuple[str, str]:
    """(instance id, instance type) as the title shows them, on one line each; an instance_info
    that failed, or a stream without one, reads "unknown instance"."""
    if report is None:
        return "…", ""
    inst = report.instance
    return one_line(inst.id) or "unknown instance", one_line(inst.type or "")


def counters_failed(runtime: RuntimeReport) -> bool:
    """The runtime's neuroncore_counters group carries an error and no cores, or the whole
    runtime entry failed without it: which cores it holds, and how busy they are, is unknown."""
    counters = runtime.neuroncore_counters
    if counters is None:
        return bool(runtime.error)
    return bool(counters.error) and not counters.cores


@dataclass(frozen=True, slots=True)
class CoreGrid:
    """Per logical core values for the selected runtimes, laid out device-major."""
    core_version: str
    devices: int
    cores_per_device: int
    utilization: np.ndarray  # ratio per core; NaN where unknown (a runtime's group failed)
    flops: np.ndarray  # FLOP/s per core; NaN for a core in use whose stream has no flops (inf1)
    in_use: np.ndarray  # bool per core: some selected runtime reported it
    own_cores_only: bool = False  # an app tab: the average is over that app's cores, not the host's
    layout_known: bool = True     # False: the stream gave no hardware info, the grid is a guess

    @property
    def reported_cores_only(self) -> bool:
        """The average counts the cores runtimes report: an app tab's, or any tab's where the
        layout is guessed (its other cells may not exist: 1 core at 42% is not 21% of two)."""
        return self.own_cores_only or not self.layout_known

    @property
    def average(self) -> float | None:
        """None where a core's figure is unknown (a runtime's neuroncore_counters failed), or
        there is no core to average."""
        values = self.utilization[self.in_use] if self.reported_cores_only else self.utilization
        if np.isnan(values).any() or not values.size:
            return None
        return float(values.mean())

    @property
    def cores_counted(self) -> int:
        return int(self.in_use.sum()) if self.reported_cores_only else int(self.utilization.size)

    @property
    def flops_top(self) -> float:
        """The TFLOPs bars' full scale: the busiest core shown (streams carry no peak figure)."""
        known = self.flops[~np.isnan(self.flops)]
        return float(known.max()) if known.size else 0.0

    @property
    def total_flops(self) -> float | None:
        known = self.flops[self.in_use & ~np.isnan(self.flops)]
        if self.in_use.any() and not known.size:
            return None  # cores report, none with flops: the stream has none
        return float(known.sum())


def average_label(grid: CoreGrid) -> str:
    """The grid heading's average, saying which cores it is over when not all of the host's."""
    n = grid.cores_counted
    cores = f"{n} core{'s' if n != 1 else ''}"
    if grid.own_cores_only:
        return f"Avg over its {cores}: {percent(grid.average)}"
    if not grid.layout_known:
        return f"Avg over the {cores} reported: {percent(grid.average)}"
    return f"Avg: {percent(grid.average)}"


def core_grid(report: Report, runtimes: Iterable[RuntimeReport], own_cores_only: bool = False
              ) -> CoreGrid:
    """``own_cores_only``: averages count only the selected runtimes' cores (an app tab)."""
    devices, per_device = core_layout(report)
    count = devices * per_device
    util, flops, in_use = np.zeros(count), np.zeros(count), np.zeros(count, dtype=bool)
    known = np.zeros(count, dtype=bool)
    failed = False
    for runtime in runtimes:
        failed |= counters_failed(runtime)
        counters = runtime.neuroncore_counters
        if counters is None:
            continue
        for core, values in counters.cores.items():
            if 0 <= core < count:
                # Two runtimes rarely share a core; if they do, the grid adds their shares up
                # (the all tab's design); an app tab passes only its own runtimes.
                util[core] += values.utilization
                if values.flops is not None:
                    flops[core] += values.flops
                    known[core] = True
                in_use[core] = True
    np.clip(util, 0.0, 1.0, out=util)
    flops[in_use & ~known] = np.nan  # reported cores whose stream has no flops: N/A, not 0
    if failed:
        # A runtime whose counters failed names none of its cores: any core no one else
        # reports may be its, busy or not. N/A, not the 0 % of an idle core.
        util[~in_use] = np.nan
        flops[~in_use] = np.nan
    hw = report.hardware
    return CoreGrid(hw.core_version or "", devices, per_device, util, flops, in_use,
                    own_cores_only,
                    layout_known=bool(hw.device_count and hw.cores_per_device) or devices == 0)


@dataclass(frozen=True, slots=True)
class VcpuUsage:
    system_user: float | None
    system_system: float | None
    runtime_user: float | None  # share of the whole host (0..1), summed over the runtimes
    runtime_system: float | None
    host_vcpus: int = 0  # the host's vCPU count, to name what the share is of; 0: not in the stream


def host_vcpu_count(report: Report) -> int:
    system = report.system.vcpu
    return system.vcpu_count if system is not None else 0


def vcpu_usage(report: Report, runtimes: Iterable[RuntimeReport]) -> VcpuUsage:
    """System usage folded like AWS's exporter: user+nice, system+io_wait+irq+soft_irq.

    A runtime's figure is already a share of the whole host (neuron-monitor divides its CPU time
    by the host's vCPUs, docs/report.md), so the runtimes' shares are summed as they are.
    """
    system = report.system.vcpu
    s_user = s_sys = None
    if system is not None and system.average:
        avg = system.average
        s_user = min(1.0, avg.get("user", 0.0) + avg.get("nice", 0.0))
        s_sys = min(1.0, sum(avg.get(k, 0.0) for k in ("system", "io_wait", "irq", "soft_irq")))
    with_vcpu = [group for r in runtimes if (group := usable(r.vcpu)) is not None]
    r_user = min(1.0, sum(v.user for v in with_vcpu)) if with_vcpu else None
    r_sys = min(1.0, sum(v.system for v in with_vcpu)) if with_vcpu else None
    return VcpuUsage(s_user, s_sys, r_user, r_sys, host_vcpu_count(report))


@dataclass(frozen=True, slots=True)
class MemorySummary:
    host_total: int | None  # None: every selected runtime's memory_used group failed
    host: dict[str, int]
    device_total: int | None
    device: dict[str, int]
    reported: bool  # False when no selected runtime has a memory_used group
    runtimes: int = 0   # the selected runtimes

    @property
    def missing(self) -> str:
        """Why there is no summary: no runtime runs, or the recent reports carry no memory_used
        group (the stream never had one, or it stopped arriving: "in this stream" had said
        never, of one that came every 5 s until it stopped)."""
        return ("no runtime is running" if not self.runtimes
                else "no memory_used group in the recent reports")


def memory_summary(runtimes: Iterable[RuntimeReport]) -> MemorySummary:
    # Only categories some runtime reports are keys: an absent one reads N/A, not 0.
    host: dict[str, int] = {}
    device: dict[str, int] = {}
    host_total = device_total = None
    reported = False
    count = 0
    for runtime in runtimes:
        count += 1
        reported = reported or runtime.memory_used is not None
        used = usable(runtime.memory_used)
        if used is None:
            continue
        host_total = (host_total or 0) + used.host_bytes
        device_total = (device_total or 0) + used.device_bytes
        for key, value in (used.host_breakdown or {}).items():
            host[key] = host.get(key, 0) + value
        for breakdown in used.core_breakdown.values():
            for key, value in breakdown.items():
                device[key] = device.get(key, 0) + value
    return MemorySummary(host_total, host, device_total, device, reported, count)


@dataclass(frozen=True, slots=True)
class CoreShare:
    """One core as the selected runtimes report it (the engines view's heading and bars)."""
    owners: tuple[RuntimeReport, ...]  # the selected runtimes that report the core
    utilization: float | None  # their shares added up (clipped at 1); None: none reports it
    flops: float | None  # None: no owner's stream has flops
    engines: dict[str, float] | None  # engine -> ratio, added up; None: no engine counters


def core_share(runtimes: Iterable[RuntimeReport], core: int) -> CoreShare:
    """``core`` as ``runtimes`` report it: an app tab passes its own runtimes, so another app's
    share of a core they both report stays out; the ``all`` tab passes every runtime, and the
    shares add up as in the grid."""
    owners, util, flops, engines = [], None, None, None
    for runtime in runtimes:
        counters = runtime.neuroncore_counters
        if counters and core in counters.cores:
            owners.append(runtime)
            values = counters.cores[core]
            util = min(1.0, (util or 0.0) + values.utilization)
            if values.flops is not None:
                flops = (flops or 0.0) + values.flops
        group = runtime.engine_counters
        if group and core in group.cores:
            engines = engines or {}
            for name, ratio in group.cores[core].engine_utilization.items():
                engines[name] = min(1.0, engines.get(name, 0.0) + ratio)
    return CoreShare(tuple(owners), util, flops, engines)
