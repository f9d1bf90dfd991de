"""The shared-memory backend of the collector (the simulated instance's runtime directory), and
what it reads turned into the collector's own inputs and into the static parts of a Report.

``ShmBackend`` implements backend.RuntimeBackend over device_model/runtime/shm.py: it keeps the
counter files mapped between collections and re-reads the instance file only when it changes.

The instance description becomes its catalog spec, ``instance_info`` and ``neuron_hardware_info``;
a runtime's counter snapshot becomes a collector_groups.Sample, its ``memory_used`` group and its
loaded models. Separate from collector.py so that the collector holds only the scheduling and the
state between collections, and these conversions can be read (and changed with the shm layout)
in one place.
"""
from __future__ import annotations


from pathlib import Path
from typing import Any

import numpy as np

from device_model.errors import SpecError
from device_model.runtime import shm
from device_model.runtime.rundir import runtime_process_alive
from device_model.catalog.specs import InstanceSpec, get_instance
from monitor import collector_groups as g
from monitor.report import HardwareInfo, InstanceInfo, LoadedModel, MemoryUsed, Subgraph

__all__ = ["NO_DEVICE_HARDWARE", "ShmBackend", "read_instance", "spec_of", "tag_of_damaged", "started_at",
           "sample_of", "loaded_models_of", "memory_used", "instance_info", "hardware_info"]

NO_DEVICE_HARDWARE = HardwareInfo()  # neuron-monitor's hardware info without a Neuron driver


def read_instance(root: Path | None) -> Any:
    try:
        return shm.read_instance(root)
    except shm.CorruptCounters:  # a damaged instance file reads as no instance (no driver)
        return None


class ShmBackend:
    """Runtimes publishing counter files under ``root`` (default: the per-user runtime directory)."""

    unreadable: tuple[type[Exception], ...] = (shm.CorruptCounters,)

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self.removed = 0
        # path -> (open handle, (inode, size) when opened)
        self._handles: dict[Path, tuple[Any, tuple[int, int]]] = {}
        self._instance_cache: tuple[tuple[int, int, int], Any] | None = None

    def instance(self) -> Any:
        """The instance description, re-read only when its file changed (it is JSON: parsing it
        every period would cost more than checking it)."""
        path = shm.runtime_dir(self.root) / shm.INSTANCE_FILE
        try:
            st = path.stat()
        except FileNotFoundError:
            self._instance_cache = None
            return None
        identity = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._instance_cache is None or self._instance_cache[0] != identity:
            self._instance_cache = (identity, read_instance(self.root))
        return self._instance_cache[1]

    def runtimes(self) -> list[Any]:
        """Handles of live runtimes, kept open between collections; dead ones are removed. A
        runtime of the instance that still runs but whose counter file was deleted is listed too
        (its read() says so), rather than vanishing from the reports."""
        listed = shm.list_runtimes(self.root)
        listed += missing_runtimes(self.instance(), {h.pid for h in listed},
                                   shm.runtime_dir(self.root))
        paths = {h.path for h in listed}
        for path in [p for p in self._handles if p not in paths]:
            self._handles.pop(path)[0].close()
        live = []
        for fresh in listed:
            if isinstance(fresh, MissingCounters):
                live.append(fresh)
                continue
            try:
                st = fresh.path.stat()
            except OSError:  # removed since the listing
                continue
            identity = (st.st_ino, st.st_size)
            cached = self._handles.get(fresh.path)
            # A new file under a reused pid, or one truncated or resized under our mapping
            # (reading a mapping past the end of its file would kill the monitor with SIGBUS):
            # reopen, which validates the file again.
            if cached is None or cached[1] != identity:
                if cached is not None:
                    cached[0].close()
                cached = self._handles[fresh.path] = (fresh, identity)
            handle = cached[0]
            if handle.is_alive():
                live.append(handle)
            else:
                self._handles.pop(fresh.path)
                handle.remove()
                self.removed += 1
        return live

    def close(self) -> None:
        for handle, _ in self._handles.values():
            handle.close()
        self._handles.clear()


class MissingCounters:
    """A runtime of the instance whose process runs but whose counter file is gone. ``path`` is
    the process's /proc entry: it exists exactly as long as the runtime does."""

    def __init__(self, pid: int, tag: str, root: Path | None = None) -> None:
        self.pid, self.tag, self.root = pid, tag, root
        self.path = Path(f"/proc/{pid}")

    def read(self) -> Any:
        raise shm.CorruptCounters(f"runtime-{self.pid}.ctr was deleted while the runtime runs")

    def header(self) -> dict[str, Any]:
        return {"tag": self.tag}

    def is_alive(self) -> bool:
        return runtime_process_alive(self.pid, self.root)

    def close(self) -> None:
        pass

    def remove(self) -> None:
        pass


def missing_runtimes(instance: Any, listed: set[int], root: Path | None = None
                     ) -> list[MissingCounters]:
    """The instance's runtimes that run without a counter file."""
    if instance is None:
        return []
    return [MissingCounters(a["pid"], a["tag"], root) for a in instance.apps
            if a.get("pid") and a["pid"] not in listed and runtime_process_alive(a["pid"], root)]


def spec_of(instance: Any) -> InstanceSpec | None:
    if instance is None:
        return None
    try:
        return get_instance(instance.catalog_name)
    except SpecError:
        return None


def tag_of_damaged(handle: Any, instance: Any = None) -> str:
    """The tag of a runtime whose counter file is damaged: its header's; else the instance
    description's app of that pid (a file cut short is refused before its header is read);
    its pid when neither says."""
    try:
        tag = handle.header().get("tag")
    except (shm.CorruptCounters, OSError):
        apps = getattr(instance, "apps", None) or ()
        tag = next((a.get("tag") for a in apps if isinstance(a, dict)
                    and a.get("pid") == handle.pid), None)
    return tag if isinstance(tag, str) and tag else str(handle.pid)


def started_at(snapshot: Any) -> float:
    return min(snapshot.started_at, snapshot.wall_time)


def sample_of(s: Any, physical_keys: tuple[tuple[str, ...], ...]) -> g.Sample:
    lnc = max(1, s.lnc)
    return g.Sample(
        s.wall_time, s.sim_time, s.cores, physical_keys, s.core_busy_s,
        s.phys_busy_s, s.engine_active_s.sum(axis=1) / lnc, s.flops[:, 0], s.flops[:, 1],
        s.hbm_read_bytes, s.hbm_write_bytes, s.dma_bytes, s.collective_bytes, s.collective_s,
        np.fromiter((s.exec_status.get(k, 0) for k in g.STATUS_KEYS), np.int64, len(g.STATUS_KEYS)),
        np.fromiter((s.errors.get(k, 0) for k in g.ERROR_KEYS), np.int64, len(g.ERROR_KEYS)),
        s.latency_count, s.latency_total, s.latency_device, s.latency_executions,
        s.latency_hist_total, s.latency_hist_device, _BIN_VALUES)


_BIN_VALUES = shm.latency_bin_values()


def loaded_models_of(models: Any, running: bool) -> tuple[LoadedModel, ...]:
    return tuple(LoadedModel(m.name, m.uuid, m.model_id, running, {
        sg.name: Subgraph(sg.core, sg.device, sum(sg.host_memory.values()),
                          sum(sg.device_memory.values()), dict(sg.host_memory),
                          dict(sg.device_memory)) for sg in m.subgraphs}) for m in models)


def memory_used(s: Any, period: float, models: tuple[LoadedModel, ...]) -> MemoryUsed:
    per_core = s.device_memory.astype(np.int64).tolist()
    keys = shm.DEVICE_MEMORY
    cores = {core: dict(zip(keys, per_core[i])) for i, core in enumerate(s.cores)}
    return MemoryUsed(period, "", sum(s.host_memory.values()), int(s.device_memory.sum()),
                      dict(s.host_memory), cores, models)


def instance_info(instance: Any) -> InstanceInfo:
    if instance is None:
        # as AWS's, whose IMDS lookup failed: empty fields and why (empty alone reads as known)
        return InstanceInfo(error="instance metadata not available: no simulated instance "
                                  "is running")
    return InstanceInfo(instance.instance_name, instance.instance_id, instance.instance_type,
                        instance.availability_zone, instance.availability_zone_id,
                        instance.region, instance.ami_id, instance.subnet_id)


def hardware_info(instance: Any, spec: InstanceSpec | None) -> HardwareInfo:
    if instance is None:
        return NO_DEVICE_HARDWARE
    # logical_neuroncore_config exists only where LNC can be chosen (Trn2 and later).
    has_lnc = spec is None or spec.device.lnc_selectable
    return HardwareInfo(instance.device_type, instance.device_version, instance.core_version,
                        instance.device_count, instance.device_memory_bytes,
                        instance.cores_per_device, instance.lnc if has_lnc else None)
