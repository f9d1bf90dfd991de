"""Simulated instances: the instance description and the runtime processes behind
`neuron-sim start / run / stop / status`."""
from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..core import Instance
from ..errors import SpecError
from .faults import ECC_FAULTS, FaultSpec, exec_timeout, format_fault, parse_fault
from ..catalog.topology import neighbours
from .apps import AppSpec, check_disjoint, default_apps, format_cores, parse_app
from .layout import PUBLISH_INTERVAL_S
from .rundir import runtime_process_alive
from .shm import (CorruptCounters, RuntimeHandle, SimInstance, list_runtimes, read_instance, remove_instance,
                  runtime_dir, write_instance)

REGIONS = (("us-east-2", "use2"), ("us-west-2", "usw2"), ("us-east-1", "use1"))   # trn2 regions
DEFAULT_FAULTS = ("numerical@rate=0.0005,app=llama-train", "mem_ecc_corrected@rate=1/h",
                  "sram_ecc_corrected@rate=2/h", "timeout@rate=0.00002,app=llama-serve")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0
RUN_MARK = "\x00run\x00"            # in the command line of a foreground `neuron-sim run`


class SimError(SpecError):
    """A simulated instance that cannot be started, or is in the way."""


def describe_instance(inst: Instance, seed: int, speed: float, apps: list[AppSpec],
                      launcher_pid: int, started_at: float, place: str = "") -> SimInstance:
    """instance_info with ids that are stable for a seed, an instance type and LNC, a host and
    a `place` (the `--root` it runs in, "" for the default), hardware info and topology. All are
    drawn in: with the default seed, every simulated host of a fleet (a trn1 beside a trn2, two
    instances of one host in two --root directories) had one instance id, and their series
    merged."""
    host = zlib.crc32(socket.gethostname().encode())
    # LNC and place only where they are not the defaults: the default instance keeps its id
    defaults = not place and inst.lnc == inst.spec.device.default_lnc
    where = [] if defaults else [inst.lnc, zlib.crc32(place.encode())]
    rng = np.random.default_rng([seed, 0x1D, zlib.crc32(inst.spec.name.encode()), host, *where])
    region, prefix = REGIONS[int(rng.integers(len(REGIONS)))]
    zone = int(rng.integers(3))
    spec, dev = inst.spec, inst.device
    return SimInstance(
        instance_name=f"neuronscope-sim-{seed}", instance_id="i-" + rng.bytes(9).hex()[:17],
        instance_type=spec.name, catalog_name=spec.name, availability_zone=f"{region}{'abc'[zone]}",
        availability_zone_id=f"{prefix}-az{zone + 1}", region=region, ami_id="ami-" + rng.bytes(9).hex()[:17],
        subnet_id="subnet-" + rng.bytes(4).hex(), device_type=dev.device_type,
        device_version=dev.device_version, core_version=dev.core_version(inst.lnc), device_count=spec.devices,
        device_memory_bytes=dev.hbm_bytes, cores_per_device=dev.logical_cores(inst.lnc), lnc=inst.lnc,
        seed=seed, speed=speed, started_at=started_at,
        connected_devices=tuple(neighbours(spec, i) for i in range(spec.devices)),
        apps=tuple({"tag": a.tag, "workload": a.workload, "cores": format_cores(a.cores), "pid": None}
                   for a in apps),
        launcher_pid=launcher_pid)


@dataclass(frozen=True, slots=True)
class Plan:
    inst: Instance
    apps: list[AppSpec]
    faults: dict[str, list[FaultSpec]]          # per app tag


def plan(inst: Instance, app_texts: list[str], inject: list[str]) -> Plan:
    apps = [parse_app(t, inst.logical_cores) for t in app_texts]
    defaults: list[str] = []
    if not apps:
        apps = default_apps(inst)
        tags = {"train": apps[0].tag, "serve": apps[-1].tag}
        defaults = [text.format(**tags) for text in DEFAULT_FAULTS]
    check_disjoint(apps)
    exec_timeout(os.environ)      # the runtimes inherit it: refused here, not as their crash
    specs = [parse_fault(t) for t in defaults + list(inject)]
    return Plan(inst, apps, route_faults(inst, apps, specs, defaults))


def route_faults(inst: Instance, apps: list[AppSpec], specs: list[FaultSpec],
                 defaults: list[str] = ()) -> dict[str, list[FaultSpec]]:
    """Which runtime meets which fault: by app=, by device=, else execution faults reach every app
    and untargeted ECC faults the first app (rates are shared out by devices held)."""
    per_device = inst.device.logical_cores(inst.lnc)
    held = {a.tag: {c // per_device for c in a.cores} for a in apps}
    total = sum(len(d) for d in held.values())
    out: dict[str, list[FaultSpec]] = {a.tag: [] for a in apps}
    for s in specs:
        if s.app is not None:
            if s.app not in out:
                if s.text in defaults:   # a default fault for an app this instance lacks
                    continue
                raise SpecError(f"fault {s.text!r} names app {s.app!r}; allowed: {', '.join(out)}")
            if s.device is not None and s.device not in held[s.app]:   # it would never fire
                raise SpecError(f"fault {s.text!r}: app {s.app!r} runs on no core of device "
                                f"{s.device}; its devices: "
                                f"{', '.join(map(str, sorted(held[s.app])))}")
            out[s.app].append(s)
        elif s.device is not None:
            if s.device >= inst.spec.devices:
                raise SpecError(f"fault {s.text!r}: device {s.device} out of range; allowed: 0-{inst.spec.devices - 1}")
            owners = [t for t, devs in held.items() if s.device in devs]
            if not owners:
                raise SpecError(f"fault {s.text!r}: no app runs on device {s.device}; "
                                f"allowed: {', '.join(map(str, sorted(set().union(*held.values()))))}")
            out[owners[0]].append(s)
        elif s.kind in ECC_FAULTS and not (s.rate is not None and s.per_exec):
            if s.rate is None:
                out[apps[0].tag].append(s)
            else:
                for tag, devs in held.items():
                    out[tag].append(replace(s, rate=s.rate * len(devs) / total))
        else:
            for tag in out:
                out[tag].append(s)
    return out


def _log_path(root: Path, index: int) -> Path:
    return root / f"app-{index}.log"


def launch(p: Plan, root: Path, seed: int, speed: float, *,
           interval: float = PUBLISH_INTERVAL_S, duration: str | None = None,
           foreground: bool = False, place: str = "") -> tuple[SimInstance, list[subprocess.Popen]]:
    """Write the instance description and start one detached runtime process per app.

    The whole of it (is one running? write ours, start the runtimes) holds the instance lock, so
    that of two starts at the same moment exactly one wins and the other finds it running."""
    with instance_lock(root):
        return _launch(p, root, seed, speed, interval=interval, duration=duration,
                       foreground=foreground, place=place)


LOCK_FILE = "instance.lock"


@contextlib.contextmanager
def instance_lock(root: Path):
    """An exclusive flock on ROOT/instance.lock (created 0600, never followed if a symlink)."""
    fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SimError(f"{root / LOCK_FILE} is not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _launch(p: Plan, root: Path, seed: int, speed: float, *, interval: float,
            duration: str | None, foreground: bool,
            place: str = "") -> tuple[SimInstance, list[subprocess.Popen]]:
    try:
        existing = read_instance(root)
    except CorruptCounters:  # a damaged description: in the way only while its runtimes run
        existing = None
        if any(h.is_alive() for h in list_runtimes(root)):
            raise SimError(f"a simulated instance is already running in {root} (its description is "
                           f"damaged); run `neuron-sim stop` first") from None
        cleanup(root)
    if existing is not None:
        if any(h.is_alive() for h in list_runtimes(root)) or _pid_alive(existing.launcher_pid, RUN_MARK):
            raise SimError(f"a simulated {existing.instance_type} is already running in {root}; "
                           f"run `neuron-sim stop` first")
        cleanup(root)
    desc = describe_instance(p.inst, seed, speed, p.apps, os.getpid() if foreground else 0,
                             time.time(), place)
    write_instance(root, desc)
    procs: list[subprocess.Popen] = []
    try:
        for i, app in enumerate(p.apps):
            procs.append(_spawn(p, app, i, root, seed, speed, interval, duration,
                                os.getpid() if foreground else None))
        _wait_started(procs, root)
    except BaseException:
        terminate(procs)
        cleanup(root)
        raise
    apps = tuple({**a, "pid": pr.pid} for a, pr in zip(desc.apps, procs))
    desc = replace(desc, apps=apps)
    write_instance(root, desc)
    return desc, procs


def _spawn(p: Plan, app: AppSpec, index: int, root: Path, seed: int, speed: float, interval: float,
           duration: str | None, parent: int | None) -> subprocess.Popen:
    env = dict(os.environ, NEURON_PROCESS_TAG=app.tag, NEURON_RT_VISIBLE_CORES=format_cores(app.cores))
    # -P: `-m` would put the caller's working directory first on sys.path, and a numpy.py or
    # orjson.py left there (a shared /tmp, a downloads folder) would run as the user
    cmd = [sys.executable, "-P", "-m", "device_model.runtime", "--instance", p.inst.spec.name,
           "--lnc", str(p.inst.lnc), "--workload", app.workload, "--seed", str(seed), "--speed", repr(speed),
           "--app-index", str(index), "--root", str(root), "--interval", repr(interval)]
    for f in p.faults[app.tag]:
        cmd += ["--inject", format_fault(f)]
    if duration:
        cmd += ["--duration", duration]
    if parent is not None:   # a foreground owner: the runtimes end with it, however it ends
        cmd += ["--parent", str(parent)]
    fd = _create_log(_log_path(root, index))
    try:
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                                start_new_session=True, close_fds=True)
    finally:
        os.close(fd)


def _create_log(path: Path) -> int:
    """A new, private log file: whatever is at `path` (an old log, or a symlink planted there to
    make us truncate another file) is unlinked, not followed; O_EXCL|O_NOFOLLOW refuse a link that
    reappears in between."""
    path.unlink(missing_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def exit_reason(root: Path, index: int) -> str:
    """Why app `index`'s runtime ended, as its log's last line says (how it stopped, a
    traceback's last line, the runtime's own one-line error); "" when the log says nothing:
    it was killed before it could write a word."""
    text = _read_log(_log_path(root, index)).strip().splitlines()
    return text[-1].removeprefix("neuron-sim runtime: error: ").removeprefix(
        "neuron-sim runtime: ") if text else ""


def _read_log(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.pread(fd, 1 << 16, max(0, os.fstat(fd).st_size - (1 << 16))).decode(errors="replace")
    finally:
        os.close(fd)


def _wait_started(procs: list[subprocess.Popen], root: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = {pr.pid: i for i, pr in enumerate(procs)}
    while waiting:
        for h in list_runtimes(root):
            waiting.pop(h.pid, None)
        for pid, i in list(waiting.items()):
            rc = procs[i].poll()
            if rc is not None:
                raise SimError(exit_reason(root, i) or f"exit status {rc}")
        if time.monotonic() > deadline:
            raise SimError(f"runtime processes did not start within {START_TIMEOUT_S:.0f} s")
        if waiting:
            time.sleep(0.05)


def terminate(procs: list[subprocess.Popen], timeout: float = STOP_TIMEOUT_S) -> None:
    for pr in procs:
        if pr.poll() is None:
            pr.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for pr in procs:
        try:
            pr.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pr.kill()
            pr.wait()


def _pid_alive(pid: int | None, needle: str) -> bool:
    """Whether `pid` runs and its command line mentions `needle` (guards against pid reuse)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            return needle.encode() in f.read() + b"\x00"
    except OSError:
        return False


def stop(root: Path) -> tuple[SimInstance | None, int]:
    """SIGTERM every live runtime (and a foreground launcher), wait, then clean up."""
    try:
        desc = read_instance(root)
    except CorruptCounters:  # still stop the runtimes it would have named
        desc = None
    pids = {h.pid for h in list_runtimes(root) if h.is_alive()}
    if desc is not None:
        pids |= {a["pid"] for a in desc.apps
                 if a.get("pid") and runtime_process_alive(a["pid"], root)}
        if desc.launcher_pid != os.getpid() and _pid_alive(desc.launcher_pid, RUN_MARK):
            _signal(desc.launcher_pid, signal.SIGTERM)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    pids = _wait_gone(pids, STOP_TIMEOUT_S)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    _wait_gone(pids, STOP_TIMEOUT_S)    # a killed runtime still holds its files until it is gone
    if pids:
        _wait_released(root, STOP_TIMEOUT_S)
    cleanup(root)
    return desc, len(pids)


def _wait_released(root: Path, timeout: float) -> None:
    """Wait up to `timeout` for no runtime under `root` to hold its counter file's lock. A
    killed runtime's lock can outlive the process for a moment: its mapped counter file is
    closed after it is a zombie, by a kernel worker that a busy machine runs late."""
    deadline = time.monotonic() + timeout
    while any(h.is_alive() for h in list_runtimes(root)) and time.monotonic() < deadline:
        time.sleep(0.05)


def _wait_gone(pids: set[int], timeout: float) -> set[int]:
    """The pids still running runtimes after waiting up to `timeout` for them to end."""
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        pids = {p for p in pids if not _exited(p)}
        if pids:
            time.sleep(0.05)
    return pids


def _exited(pid: int) -> bool:
    """Gone, or a zombie: exited with its files (and their locks) closed. Its command line
    empties earlier, while it still holds them."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(b")") + 2:][:1] in (b"Z", b"X")


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def cleanup(root: Path) -> None:
    """Remove the files of dead runtimes, their logs and the instance description."""
    for h in list_runtimes(root):
        h.remove()
    if not any(h.is_alive() for h in list_runtimes(root)):
        remove_instance(root)
        for log in runtime_dir(root).glob("app-*.log"):
            log.unlink(missing_ok=True)


def live_runtimes(root: Path) -> list[RuntimeHandle]:
    return [h for h in list_runtimes(root) if h.is_alive()]
