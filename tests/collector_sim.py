"""Test support: a simulated instance and runtime counter files written with the runtime's own
CounterWriter (real files, real mmap, real flock), driven step by step by a test."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from device_model.runtime import shm
from device_model.runtime.counters import Counters
from device_model.catalog.specs import get_instance
from device_model.catalog.topology import neighbours

START = 1_790_000_000.0  # a fixed unix time, so reports are reproducible


def write_instance(root: Path, catalog: str = "trn2.48xlarge", lnc: int = 2,
                   started_at: float = START) -> shm.SimInstance:
    spec = get_instance(catalog)
    dev = spec.device
    inst = shm.SimInstance(
        instance_name="sim-test", instance_id="i-0a1b2c3d4e5f60718", instance_type=catalog,
        catalog_name=catalog, availability_zone="us-west-2b", availability_zone_id="usw2-az2",
        region="us-west-2", ami_id="ami-0011223344556677b", subnet_id="subnet-112233ee",
        device_type=dev.device_type, device_version=dev.device_version,
        core_version=dev.core_version(lnc), device_count=spec.devices,
        device_memory_bytes=dev.hbm_bytes, cores_per_device=dev.logical_cores(lnc), lnc=lnc,
        seed=0, speed=1.0, started_at=started_at,
        connected_devices=tuple(neighbours(spec, d) for d in range(spec.devices)), apps=(),
        launcher_pid=os.getpid())
    shm.write_instance(root, inst)
    return inst


class FakeRuntime:
    """One runtime's counter file, published by this process (it holds the file's lock)."""

    def __init__(self, root: Path, pid: int, tag: str, cores: list[int], cores_per_device: int,
                 lnc: int = 2, ring: int = 64, started_at: float = START,
                 models: list[dict] | None = None):
        core_devices = [c // cores_per_device for c in cores]
        self.devices = sorted(set(core_devices))
        header = {"tag": tag, "workload": "test", "instance_type": "trn2.48xlarge",
                  "started_at": started_at, "cores": cores, "lnc": lnc,
                  "core_devices": core_devices, "devices": self.devices, "ring": ring,
                  "models": models or []}
        self.writer = shm.CounterWriter(root, header, pid=pid)
        self.ring = ring
        self.r = self.writer.record
        self.counters = Counters(self.r, lnc, [self.devices.index(d) for d in core_devices])
        self.r["wall_time"] = started_at
        self.writer.publish()

    @property
    def path(self) -> Path:
        return self.writer.path

    def step(self, dt: float, busy: float = 0.5, flops: float = 1e12, executions: int = 0,
             latency: float = 0.01, power: float = 300.0, hbm: float = 1e9, ecc: int = 0,
             speed: float = 1.0) -> None:
        """Advance ``dt`` wall seconds, ``speed * dt`` simulated seconds, with each core ``busy``
        of the time (rates are per simulated second, as the runtime's counters are)."""
        r = self.r
        r["wall_time"] += dt
        dt *= speed
        r["sim_time"] += dt
        r["core_busy_s"] += busy * dt
        lnc = r["phys_busy_s"].shape[1]
        # Physical cores of one logical core differ a little, as on hardware.
        r["phys_busy_s"] += busy * dt * np.linspace(0.8, 1.2, lnc)[None, :]
        r["engine_active_s"] += busy * dt * np.array([1.0, 0.5, 0.25, 0.1, 0.75])
        r["flops"][:, 0] += flops * dt * 0.9
        r["flops"][:, 1] += flops * dt
        r["hbm_read_bytes"] += hbm * dt
        r["hbm_write_bytes"] += hbm * dt / 2
        r["dma_bytes"] += hbm * dt / 4
        r["collective_bytes"] += hbm * dt / 8
        r["collective_s"] += dt / 10
        r["exec_status"][0] += executions
        # the runtime's own accumulator: ring and histograms as a runtime fills them
        total = latency * (1 + np.arange(executions) / max(1, executions))
        self.counters.add_latencies(total, np.full(executions, latency * 0.9))
        r["dev_energy_j"] += power * dt
        r["dev_power_w"] = power
        r["dev_temperature_c"] = 30 + 0.1 * power
        r["dev_hbm_read_bytes"] += hbm * dt * len(r["core_busy_s"]) / len(self.devices)
        r["dev_hbm_write_bytes"] += hbm * dt / 2 * len(r["core_busy_s"]) / len(self.devices)
        r["dev_ecc"][:, 0] += ecc
        self.writer.publish()

    def die(self) -> None:
        """Release the lock without removing the file: what a SIGKILLed runtime leaves."""
        self.writer.close(remove=False)

    def close(self) -> None:
        self.writer.close(remove=True)


class Clock:
    def __init__(self, t: float = START):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


# --------------------------------------------------------------------------- real processes
BIN = Path(__file__).resolve().parent.parent / ".venv" / "bin"


def console_script(name: str) -> list[str]:
    path = BIN / name
    return [str(path)] if path.exists() else [sys.executable, "-m", _MODULES[name]]


_MODULES = {"neuron-monitor": "monitor.cli", "neuron-ls": "monitor.ls_cli",
            "neuron-sim": "device_model.cli"}


def start_instance(root: Path, *apps: str, instance: str = "trn2.48xlarge",
                   speed: float = 1.0) -> shm.SimInstance:
    """`neuron-sim start --root ROOT --speed X --app TAG=SPEC@CORES ...`: real detached runtime
    processes."""
    args = [a for app in apps for a in ("--app", app)]
    out = subprocess.run([*console_script("neuron-sim"), "start", "--root", str(root),
                          "--instance", instance, "--speed", repr(speed), *args],
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    started = shm.read_instance(root)
    assert started is not None
    wait_for(lambda: len(shm.list_runtimes(root)) == len(apps), timeout=60)
    return started


def stop_instance(root: Path) -> None:
    subprocess.run([*console_script("neuron-sim"), "stop", "--root", str(root)],
                   capture_output=True, timeout=60)


def counter_file(root: Path, pid: int) -> Path:
    return root / f"runtime-{pid}.ctr"


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
