"""Real host metrics for the system groups (vcpu_usage, memory_info) and per-runtime vCPU.

Only host-wide counters (/proc/stat, /proc/meminfo via psutil) and the runtimes' own pids are
read: iterating every process costs 28 µs each (perf-baselines.md §3), two orders of magnitude
more than the host-wide part, and neuron-monitor only reports the Neuron runtimes anyway.

Semantics, matching neuron-monitor (docs/report.md):
- ``vcpu_usage`` shares are over the interval since the previous call (the first call: since the
  sampler was created). ``context_switch_count`` is the number of switches in that interval.
- ``memory_used_bytes`` is total - available (what ``free`` calls used), not psutil's ``used``
  which also excludes reclaimable caches and so under-reports pressure.
- ``neuron_runtime_vcpu_usage`` is the process's CPU time as a share of the whole host's
  capacity (all vCPUs), so 100 % means every vCPU busy with that process.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import psutil

from monitor.report import MemoryInfo, RuntimeVcpu, SystemData, SystemVcpu

__all__ = ["HostSampler", "CPU_FIELDS"]

# JSON key -> psutil cpu_times field (Linux names; absent fields on other OSes read as 0).
CPU_FIELDS = {"user": "user", "nice": "nice", "system": "system", "idle": "idle",
              "io_wait": "iowait", "irq": "irq", "soft_irq": "softirq"}
# guest time is already counted inside user/nice by the kernel, so it is left out of the total.
_EXCLUDED_FROM_TOTAL = frozenset({"guest", "guest_nice"})


class HostSampler:
    """Samples host-wide CPU and memory, and runtime processes' CPU, as Report groups."""

    def __init__(self, psutil_module: ModuleType | Any = psutil,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time, procfs: str | None = None):
        """``procfs``: a /proc to read host counters from directly (one read of stat and of
        meminfo, a third of psutil's cost); by default /proc on Linux with the real psutil,
        otherwise everything goes through ``psutil_module``."""
        self._ps = psutil_module
        if procfs is None and psutil_module is psutil and os.path.isfile("/proc/stat"):
            procfs = "/proc"
        self._procfs = procfs
        self._clock = clock
        self._wall = wall_clock
        self._gone = (psutil_module.NoSuchProcess, psutil_module.AccessDenied,
                      psutil_module.ZombieProcess, ProcessLookupError, PermissionError)
        self._cpu_count = max(1, psutil_module.cpu_count() or 1)
        start = clock()
        try:
            self._cpu_prev = self._read_cpu()
        except (OSError, RuntimeError, ValueError):  # reported by the first vcpu_usage() call
            self._cpu_prev = ([], 0)
        self._cpu_at = start
        self._mem_at = start
        # pid -> (Process, user s, system s, when sampled)
        self._procs: dict[int, tuple[Any, float, float, float]] = {}

    # ------------------------------------------------------------------ system groups
    def vcpu_usage(self) -> SystemVcpu:
        now = self._clock()
        period, self._cpu_at = now - self._cpu_at, now
        try:
            current = self._read_cpu()
        except (OSError, RuntimeError, ValueError) as exc:
            return SystemVcpu(period, f"cannot read CPU times: {exc}", {}, {}, 0)
        (prev_cpus, prev_switches), (cpus, switches) = self._cpu_prev, current
        self._cpu_prev = current
        per_cpu = {i: _shares(_delta(p, c)) for i, (p, c) in enumerate(zip(prev_cpus, cpus))}
        totals = [_delta(p, c) for p, c in zip(prev_cpus, cpus)]
        average = _shares({k: sum(t[k] for t in totals) for k in totals[0]} if totals else {})
        return SystemVcpu(period, "", average, per_cpu, max(0, switches - prev_switches))

    def memory_info(self) -> MemoryInfo:
        now = self._clock()
        period, self._mem_at = now - self._mem_at, now
        try:
            total, available, swap_total, swap_free = self._read_memory()
        except (OSError, RuntimeError, ValueError) as exc:
            return MemoryInfo(period, f"cannot read memory info: {exc}", 0, 0, 0, 0)
        return MemoryInfo(period, "", total, max(0, total - available), swap_total,
                          max(0, swap_total - swap_free))

    def sample(self, groups: Iterable[str]) -> SystemData:
        """The host-backed system groups among ``groups`` (device groups come from elsewhere)."""
        wanted = set(groups)
        return SystemData(vcpu=self.vcpu_usage() if "vcpu_usage" in wanted else None,
                          memory=self.memory_info() if "memory_info" in wanted else None)

    # ------------------------------------------------------------------ runtime group
    def process_vcpu(self, pid: int) -> RuntimeVcpu:
        """User/system CPU of ``pid`` as shares of the host since the previous call for it
        (first call: since the process started). Never raises: a vanished or forbidden pid
        gives a group with ``error`` set."""
        now = self._clock()
        try:
            proc, prev_user, prev_system, prev_at = self._process(pid, now)
            times = proc.cpu_times()
        except self._gone as exc:
            self._procs.pop(pid, None)
            denied = isinstance(exc, (PermissionError, self._ps.AccessDenied))
            problem = "no permission to read process" if denied else "process not found:"
            return RuntimeVcpu(0.0, f"{problem} {pid}", None, None)   # no reading, not idle
        self._procs[pid] = (proc, times.user, times.system, now)
        period = now - prev_at
        capacity = period * self._cpu_count
        if capacity <= 0:
            return RuntimeVcpu(period, "", 0.0, 0.0)
        return RuntimeVcpu(period, "", _clamp((times.user - prev_user) / capacity),
                           _clamp((times.system - prev_system) / capacity))

    def forget(self, keep: Iterable[int] = ()) -> None:
        """Drop cached state for every pid not in ``keep`` (call when runtimes exit)."""
        keep = set(keep)
        for pid in [p for p in self._procs if p not in keep]:
            del self._procs[pid]

    def _process(self, pid: int, now: float) -> tuple[Any, float, float, float]:
        cached = self._procs.get(pid)
        if cached is not None and cached[0].is_running():  # is_running also catches pid reuse
            return cached
        proc = self._ps.Process(pid)
        # Baseline for the first sample: zero CPU at process start.
        started = now - max(0.0, self._wall() - proc.create_time())
        return proc, 0.0, 0.0, started

    def _read_memory(self) -> tuple[int, int, int, int]:
        if self._procfs is not None:
            with open(f"{self._procfs}/meminfo", "rb") as fh:
                fields = {}
                for line in fh:
                    name, _, rest = line.partition(b":")
                    if name in _MEMINFO_KEYS:
                        fields[name] = int(rest.split()[0]) * 1024  # kB
            if len(fields) == len(_MEMINFO_KEYS):
                return tuple(fields[k] for k in _MEMINFO_KEYS)
            # MemAvailable is missing before Linux 3.14: let psutil estimate it.
        vm, swap = self._ps.virtual_memory(), self._ps.swap_memory()
        return int(vm.total), int(vm.available), int(swap.total), int(swap.free)

    def _read_cpu(self) -> tuple[list[dict[str, float]], int]:
        if self._procfs is not None:
            return _parse_proc_stat(f"{self._procfs}/stat")
        times = self._ps.cpu_times(percpu=True)
        cpus = [{k: v for k, v in t._asdict().items() if k not in _EXCLUDED_FROM_TOTAL}
                for t in times]
        return cpus, int(self._ps.cpu_stats().ctx_switches)


_MEMINFO_KEYS = (b"MemTotal", b"MemAvailable", b"SwapTotal", b"SwapFree")
# /proc/stat cpuN columns, in order (kernel >= 2.6.33 has all ten; older ones fewer).
_STAT_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _parse_proc_stat(path: str) -> tuple[list[dict[str, float]], int]:
    """Per-CPU times (clock ticks; only their ratios matter) and the context switch total."""
    cpus: list[dict[str, float]] = []
    switches = 0
    with open(path, "rb") as fh:
        for line in fh:
            if line.startswith(b"cpu") and line[3:4].isdigit():
                values = line.split()[1:1 + len(_STAT_COLUMNS)]
                cpus.append(dict(zip(_STAT_COLUMNS, map(float, values))))
            elif line.startswith(b"ctxt "):
                switches = int(line.split()[1])
    if not cpus:
        raise ValueError(f"{path}: no per-CPU lines")
    return cpus, switches


def _delta(prev: dict[str, float], cur: dict[str, float]) -> dict[str, float]:
    # Per-CPU counters can step back slightly (hotplug, VM migration): treat that as no time.
    return {k: max(0.0, cur[k] - prev.get(k, 0.0)) for k in cur}


def _shares(delta: dict[str, float]) -> dict[str, float]:
    total = sum(delta.values())
    if total <= 0:  # no tick elapsed since the previous sample: report an idle CPU
        return {key: (1.0 if key == "idle" else 0.0) for key in CPU_FIELDS}
    return {key: delta.get(field, 0.0) / total for key, field in CPU_FIELDS.items()}


def _clamp(ratio: float) -> float:
    return min(1.0, max(0.0, ratio))

