"""The collector behind neuron-monitor: one Report per period from the simulated runtimes.

Each ``collect()`` reads every runtime's counter file once (one consistent snapshot each), turns
the cumulative counters into the period's values against the previous collection of the same
group (collector_groups.py), adds the real host groups from HostSampler and the device groups
summed over the runtimes (collector_devices.py), and always fills instance_info and
neuron_hardware_info (collector_shm.py, which also turns snapshots into samples). This module
holds the scheduling and the state kept between collections.

Runtimes are read through a backend (backend.RuntimeBackend: the instance description, the live
runtimes, one snapshot per runtime); the default is the simulated instance's shared memory.

Groups follow the config's periods: a group appears in a report when its period has elapsed since
it was last collected (a runtime first seen is due at once). Its baseline is then the previous
collection; for a runtime already running when the collector starts, the collector's start (its
counters and its vCPU alike); for one first seen later, zero at the runtime's start (like
HostSampler's first runtime vCPU sample), so its first report already covers real work.

Faults never stop collection: a runtime whose pid is gone is dropped and its file removed; a
corrupted counter file (or one with values out of range) gives that runtime an entry with
``error`` set and nothing else; so does a runtime whose counters stopped moving (SIGSTOP, hung:
``STALE_AFTER_S``) and one that runs while its counter file was deleted; a file that vanishes
between listing and reading is skipped.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from monitor import collector_groups as g
from monitor.backend import RuntimeBackend
from monitor.collector_devices import Devices, DeviceTotals, devices_of
from monitor.collector_shm import (
    NO_DEVICE_HARDWARE, ShmBackend, hardware_info, instance_info, loaded_models_of, memory_used,
    sample_of, spec_of, started_at, tag_of_damaged,
)
from monitor.config import MonitorConfig, due_groups
from monitor.config import next_due as seconds_to_due
from monitor.host import HostSampler
from monitor.report import (
    DeviceCounters, DeviceEcc, HwCounters, LoadedModel, Report, RuntimeReport, SystemData,
)

__all__ = ["Collector", "NO_DEVICE_HARDWARE"]

# A runtime publishes its counters every 0.1 s; counters that have not moved for this long
# belong to a stopped (SIGSTOP) or hung runtime, which is reported with an error, not as idle.
STALE_AFTER_S = 2.0
_COUNTER_GROUPS = ("neuroncore_counters", "execution_stats", "neuroncore_engine_counters")
_DEVICE_GROUPS = ("neuron_hw_counters", "neuron_device_counters")


@dataclass(slots=True)
class _Tracked:
    """What the collector remembers about one runtime between collections."""
    pid: int
    tag: str
    baselines: dict[str, Any] = field(default_factory=dict)  # group -> Sample / device sample
    collected: dict[str, float] = field(default_factory=dict)  # group -> clock() of last
    # Static parts, built once: the v3d keys per core, the loaded models as Report objects.
    keys: tuple[Any, tuple[tuple[str, ...], ...]] | None = None
    models: tuple[Any, tuple[LoadedModel, ...]] | None = None
    wall_time: float = -1.0  # the counters' own time stamp when last read

    def physical_keys(self, s: Any, core_version: str) -> tuple[tuple[str, ...], ...]:
        key = (s.cores, s.lnc, core_version)
        if self.keys is None or self.keys[0] != key:
            self.keys = (key, g.physical_keys(s.cores, s.lnc, core_version))
        return self.keys[1]

    def loaded_models(self, s: Any) -> tuple[LoadedModel, ...]:
        running = s.phase == "executing"
        key = (running, tuple((m.uuid, m.model_id, len(m.subgraphs)) for m in s.models))
        if self.models is None or self.models[0] != key:
            self.models = (key, loaded_models_of(s.models, running))
        return self.models[1]


class Collector:
    """Build neuron-monitor Reports from the runtimes of ``backend`` (default: the simulated
    instance's shared memory under ``root``, by default the per-user runtime directory) according
    to ``config``. ``clock`` returns unix seconds."""

    def __init__(self, config: MonitorConfig | None = None, root: Path | None = None,
                 clock: Callable[[], float] = time.time, host: HostSampler | None = None,
                 backend: RuntimeBackend | None = None):
        self.config = config if config is not None else MonitorConfig.default()
        self.root = root
        self._backend: RuntimeBackend = backend if backend is not None else ShmBackend(root)
        self._clock = clock
        self._host = host if host is not None else HostSampler()
        self._created = clock()
        self._tracked: dict[int, _Tracked] = {}
        self._system_collected: dict[str, float] = {}
        # runtime entry -> when a report last said that no runtime runs (see `quiet`)
        self._idle_collected: dict[str, float] = {}
        self.quiet = False  # the last collect() had nothing due: no report is owed
        # device group -> pid -> that runtime's device counters when the group was last collected
        self._device_state: dict[str, dict[int, Devices]] = {}
        self.corrupt = 0  # runtime entries reported with an error so far
        self.stale = 0  # runtime entries reported as stopped or hung so far
        self.stale_after = STALE_AFTER_S
        self.tags: dict[int, str] = {}  # pid -> tag of every runtime read in the last collection
        self._physical_per_device = 1
        self._prime()

    @property
    def removed(self) -> int:
        """Counter files of dead runtimes removed so far."""
        return self._backend.removed

    def _prime(self) -> None:
        """Baselines for the runtimes already running, so that the first report covers the
        time since the collector started, like every later one covers its period."""
        instance = self._backend.instance()
        spec = spec_of(instance)
        if spec is None:
            return
        self._physical_per_device = spec.device.physical_cores
        for handle in self._backend.runtimes():
            try:
                snapshot = handle.read()
            except self._backend.unreadable:
                continue
            tag = snapshot.tag or str(handle.pid)
            tracked = self._tracked[handle.pid] = _Tracked(handle.pid, tag)
            tracked.wall_time = snapshot.wall_time
            sample = sample_of(snapshot, tracked.physical_keys(snapshot, instance.core_version))
            tracked.baselines.update(dict.fromkeys(_COUNTER_GROUPS, sample))
            devices = devices_of(snapshot, self._physical_per_device)
            for group in _DEVICE_GROUPS:
                self._device_state.setdefault(group, {})[handle.pid] = devices
            if "neuron_runtime_vcpu_usage" in self.config.runtime_groups_for(tag):
                self._host.process_vcpu(handle.pid)     # its vCPU baseline: now, not its start

    # ------------------------------------------------------------------ scheduling
    def _due(self, periods: dict[str, float], collected: dict[str, float], now: float) -> list[str]:
        """Groups whose period has elapsed, with a quarter of the tick's slack for a late
        wake-up."""
        return due_groups(periods, collected, now, slack=0.25 * self.config.base_period)

    def next_due(self, now: float | None = None) -> float:
        """Seconds until some known group falls due (0 when one is due now)."""
        now = self._clock() if now is None else now
        waits = [seconds_to_due(self.config.system_groups, self._system_collected, now)]
        for tracked in self._tracked.values():
            waits.append(seconds_to_due(self.config.runtime_groups_for(tracked.tag),
                                        tracked.collected, now))
        return min(waits)

    # ------------------------------------------------------------------ collection
    def collect(self) -> Report:
        """One report with every group that is due now (on the first call: every group)."""
        now = self._clock()
        instance = self._backend.instance()
        spec = spec_of(instance)
        core_version = instance.core_version if instance is not None else ""
        if spec is not None:
            self._physical_per_device = spec.device.physical_cores
        runtimes: list[RuntimeReport] = []
        device_samples: dict[int, Devices] = {}
        seen: set[int] = set()
        self.tags = {}
        # Without an instance there is no device: the real tool then reports no runtimes at all.
        for handle in self._backend.runtimes() if instance is not None else ():
            seen.add(handle.pid)
            entry = self._collect_runtime(handle, now, core_version, device_samples)
            if entry is not None:
                runtimes.append(entry)
        for pid in [p for p in self._tracked if p not in seen]:
            self._forget(pid)
        system = self._system(now, instance, spec, device_samples)
        report = Report(tuple(runtimes), system, instance_info(instance),
                        hardware_info(instance, spec))
        # nothing due at all: every runtime listed with nothing to say, no system group, and
        # (with no runtime) no runtime entry's period ending: no report is owed
        self.quiet = (all(r.empty for r in runtimes) and not system.dump()
                      and (bool(runtimes) or not self._idle_due(now)))
        return report

    def _idle_due(self, now: float) -> bool:
        """With no runtime to report, a runtime entry's groups still fall due: AWS's monitor
        then writes `"neuron_runtime_data": []` on their period, which is how a reader learns
        that the last runtime exited (and a config without system groups keeps reporting). A
        config that selects no group at all reports the instance on its `period` (it wrote
        nothing, for ever)."""
        periods = {str(i): min(sel.groups.values())
                   for i, sel in enumerate(self.config.runtimes) if sel.groups}
        if not periods and not self.config.system_groups:
            periods = {"period": self.config.period}
        due = self._due(periods, self._idle_collected, now)
        for key in due:
            self._idle_collected[key] = now
        return bool(due)

    def loading(self) -> bool:
        """Whether a runtime is still loading its model (the runtime's "starting" phase)."""
        for handle in self._backend.runtimes():
            try:
                if getattr(handle.read(), "phase", None) == "starting":
                    return True
            except self._backend.unreadable:
                continue
        return False

    def rebaseline(self) -> None:
        """Start the next report's period now, as at construction."""
        self._tracked.clear()
        self._prime()

    def close(self) -> None:
        self._backend.close()

    def _collect_runtime(self, handle: Any, now: float, core_version: str,
                         device_samples: dict[int, Devices]) -> RuntimeReport | None:
        pid = handle.pid
        tracked = self._tracked.get(pid)
        try:
            snapshot = handle.read()
        except self._backend.unreadable as exc:
            if not handle.path.exists():  # exited and cleaned up since the listing
                return None
            tag = (tracked.tag if tracked is not None
                   else tag_of_damaged(handle, self._backend.instance()))
            handle.close()  # reopen next time: the file may be rewritten
            if not self.config.runtime_groups_for(tag):
                return None
            self.corrupt += 1
            return RuntimeReport(pid, tag, error=f"cannot read runtime counters: {exc}")
        tag = snapshot.tag or str(pid)
        self.tags[pid] = tag
        if tracked is None or tracked.tag != tag:  # a new runtime (or a pid reused under a new tag)
            tracked = self._tracked[pid] = _Tracked(pid, tag)
        device_samples[pid] = devices_of(snapshot, self._physical_per_device)
        configured = self.config.runtime_groups_for(tag)
        due = set(self._due(configured, tracked.collected, now))
        if not due:
            # still listed while alive: a report that left it out would read as its exit, and a
            # reader (AWS's exporter, ours) would drop its series and restart its counters
            return RuntimeReport(pid, tag) if configured else None
        unchanged = snapshot.wall_time == tracked.wall_time
        stale = unchanged and now - snapshot.wall_time > self.stale_after
        tracked.wall_time = snapshot.wall_time
        if stale:  # keep the baselines: once it resumes, its next report covers the pause
            for group in due:
                tracked.collected[group] = now
            self.stale += 1
            return RuntimeReport(pid, tag, error=f"runtime counters not updated for "
                                 f"{now - snapshot.wall_time:.1f} s (the runtime is stopped or hung)")
        if unchanged:
            # Nothing new since the last read (stopped, or not yet stale): its counter groups
            # wait, still due, for counters that moved. Sent now they would cover 0 s and read
            # 0 % busy, a stopped runtime passing for an idle one.
            due.difference_update(_COUNTER_GROUPS)
            if not due:
                return RuntimeReport(pid, tag)
        groups = self._runtime_groups(tracked, snapshot, due, now, core_version)
        for group in due:
            tracked.collected[group] = now
        return RuntimeReport(pid, tag, **groups)

    def _runtime_groups(self, tracked: _Tracked, snapshot: Any, due: set[str], now: float,
                        core_version: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if due.intersection(_COUNTER_GROUPS):
            sample = sample_of(snapshot, tracked.physical_keys(snapshot, core_version))
            for group in _COUNTER_GROUPS:
                if group not in due:
                    continue
                prev = tracked.baselines.get(group)
                if prev is None:  # first sight: the counters started at zero with the runtime
                    prev = g.zero_like(sample, started_at(snapshot))
                tracked.baselines[group] = sample
                if group == "neuroncore_counters":
                    out["neuroncore_counters"] = g.neuroncore_counters(prev, sample, core_version)
                elif group == "execution_stats":
                    out["execution_stats"] = g.execution_stats(prev, sample)
                else:
                    out["engine_counters"] = g.engine_counters(prev, sample)
        if "memory_used" in due:
            period = now - tracked.collected.get("memory_used", self._created)
            out["memory_used"] = memory_used(snapshot, max(0.0, period),
                                              tracked.loaded_models(snapshot))
        if "neuron_runtime_vcpu_usage" in due:
            out["vcpu"] = self._host.process_vcpu(tracked.pid)
        return out

    def _forget(self, pid: int) -> None:
        self._tracked.pop(pid, None)
        for baselines in self._device_state.values():
            baselines.pop(pid, None)
        self._host.forget(self._tracked)

    # ------------------------------------------------------------------ system groups
    def _system(self, now: float, instance: Any, spec: Any,
                device_samples: dict[int, Devices]) -> SystemData:
        due = set(self._due(self.config.system_groups, self._system_collected, now))
        host = self._host.sample(due)
        hw = dev = None
        if due & set(_DEVICE_GROUPS):
            periods = {k: now - self._system_collected.get(k, self._created)
                       for k in _DEVICE_GROUPS}
            hw, dev = self._device_groups(instance, spec, device_samples, due, periods)
        for group in due:
            self._system_collected[group] = now
        return SystemData(hw_counters=hw, vcpu=host.vcpu, memory=host.memory,
                          device_counters=dev)

    def _device_groups(self, instance: Any, spec: Any, samples: dict[int, Devices],
                       due: set[str], periods: dict[str, float]
                       ) -> tuple[HwCounters | None, DeviceCounters | None]:
        if instance is None or spec is None:
            hw = HwCounters(periods["neuron_hw_counters"], "", None)
            return (hw if "neuron_hw_counters" in due else None), None
        hw = dev = None
        # Their counts cover simulated time: each group's period is that time (totals.period).
        if "neuron_hw_counters" in due:
            totals = self._device_totals("neuron_hw_counters", spec, samples)
            ecc = totals.ecc.astype(np.int64).tolist()
            hw = HwCounters(totals.period(periods["neuron_hw_counters"]), "",
                            tuple(DeviceEcc(i, *ecc[i]) for i in range(spec.devices)))
        if "neuron_device_counters" in due:
            totals = self._device_totals("neuron_device_counters", spec, samples)
            period = totals.period(periods["neuron_device_counters"])
            dev = totals.device_counters(spec, period)
        return hw, dev

    def _device_totals(self, group: str, spec: Any, samples: dict[int, Devices]) -> DeviceTotals:
        """Per-device sums over the runtimes of what grew since this group's last collection."""
        baselines = self._device_state.setdefault(group, {})
        totals = DeviceTotals.zeros(spec.devices)
        for pid, cur in samples.items():
            totals.add(baselines.get(pid), cur)
            baselines[pid] = cur
        for pid in [p for p in baselines if p not in samples]:
            del baselines[pid]
        return totals

