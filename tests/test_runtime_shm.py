"""Counter files: round trip, torn-update safety under a real concurrent writer, corruption,
dead-runtime detection after SIGKILL, and the runtime directory's permissions."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from device_model.runtime import shm
from device_model.runtime.shm import CorruptCounters, CounterWriter, RuntimeDirError, list_runtimes

HEADER = {"tag": "t", "workload": "matmul:m=1,k=1,n=1", "instance_type": "trn2.48xlarge",
          "started_at": 1.0, "cores": [4, 5], "lnc": 2, "core_devices": [1, 1], "devices": [1],
          "ring": 8, "models": []}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    d = tmp_path / "rt"
    d.mkdir(mode=0o700)
    return d


def test_runtime_dir_is_private(tmp_path: Path):
    d = shm.runtime_dir(tmp_path / "new")
    assert (d.stat().st_mode & 0o777) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    with pytest.raises(RuntimeDirError, match="0755"):
        shm.runtime_dir(loose)


def test_default_runtime_dir_uses_xdg(tmp_path: Path, monkeypatch):
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert shm.runtime_dir() == xdg / "neuronscope"


def test_round_trip_and_permissions(root: Path):
    w = CounterWriter(root, HEADER, pid=4242)
    w.record["core_busy_s"] = [1.5, 2.5]
    w.record["engine_active_s"][1, 0, 0] = 0.75
    w.record["exec_status"][0] = 7
    w.record["latency_total"][:3] = [0.1, 0.2, 0.3]
    w.record["latency_count"] = 3
    w.record["dev_ecc"][0, 1] = 2
    w.publish()
    assert (w.path.stat().st_mode & 0o777) == 0o600
    [h] = list_runtimes(root)
    assert h.pid == 4242 and h.is_alive()
    s = h.read()
    assert s.tag == "t" and s.cores == (4, 5) and s.lnc == 2 and s.devices == (1,)
    assert s.core_busy_s.tolist() == [1.5, 2.5]
    assert s.engine_active_s.shape == (2, 2, 5) and s.engine_active_s[1, 0, 0] == 0.75
    assert s.exec_status["completed"] == 7
    assert s.latency_total.tolist() == [0.1, 0.2, 0.3]
    assert s.latencies_since(1)[0].tolist() == [0.2, 0.3]
    assert s.dev_ecc[0, 1] == 2
    assert s.physical_cores.tolist() == [[8, 9], [10, 11]]
    with pytest.raises(ValueError):
        s.core_busy_s[0] = 9          # snapshots are read-only
    w.close()
    assert not w.path.exists()


def test_latency_ring_keeps_order_after_wrap(root: Path):
    from device_model.runtime.counters import Counters
    w = CounterWriter(root, HEADER, pid=1)
    c = Counters(w.record, 2, np.array([0, 0]))
    c.add_latencies(np.arange(5.0), np.arange(5.0))
    c.add_latencies(np.arange(5.0, 11.0), np.arange(5.0, 11.0))
    w.publish()
    s = list_runtimes(root)[0].read()
    assert s.latency_count == 11
    assert s.latency_total.tolist() == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert s.latencies_since(9)[0].tolist() == [9.0, 10.0]
    w.close()


def test_truncated_and_corrupted_files(root: Path):
    w = CounterWriter(root, HEADER, pid=77)
    w.publish()
    data = w.path.read_bytes()
    w.close(remove=False)
    bad = root / "runtime-78.ctr"
    bad.write_bytes(data[: len(data) - 100])
    with pytest.raises(CorruptCounters, match="truncated"):
        shm.RuntimeHandle(bad, 78).read()
    flipped = bytearray(data)
    flipped[-20] ^= 0xFF       # inside the current slot's record
    bad.write_bytes(bytes(flipped))
    with pytest.raises(CorruptCounters, match="checksum"):
        shm.RuntimeHandle(bad, 78).read()
    bad.write_bytes(b"garbage" * 20)
    with pytest.raises(CorruptCounters, match="magic"):
        shm.RuntimeHandle(bad, 78).read()
    bad.write_bytes(b"")
    with pytest.raises(CorruptCounters):
        shm.RuntimeHandle(bad, 78).read()


WRITER = r"""
import sys, numpy as np
from device_model.runtime.shm import CounterWriter
h = {"tag": "w", "workload": "x", "instance_type": "trn2.48xlarge", "started_at": 0.0,
     "cores": list(range(64)), "lnc": 2, "core_devices": [c // 4 for c in range(64)],
     "devices": list(range(16)), "ring": 1024, "models": []}
w = CounterWriter(sys.argv[1], h)
print("ready", flush=True)
i = 0
while True:
    i += 1
    for name in ("core_busy_s", "phys_busy_s", "engine_active_s", "flops", "dev_energy_j", "latency_total"):
        w.record[name] = i          # every field of one update carries the same value
    w.publish()
"""


def test_concurrent_reader_never_sees_a_torn_update(root: Path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        [h] = list_runtimes(root)
        seen = set()
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            s = h.read()
            values = {float(s.core_busy_s[0])}
            for arr in (s.core_busy_s, s.phys_busy_s, s.engine_active_s, s.flops, s.dev_energy_j):
                values |= set(np.unique(arr).tolist())
            assert len(values) == 1, values
            seen |= values
        assert len(seen) > 10          # the writer really was writing while we read
        assert h.is_alive()
    finally:
        proc.kill()
        proc.wait()


def test_sigkilled_writer_is_recognised_dead_and_cleaned(root: Path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    [h] = list_runtimes(root)
    assert h.is_alive()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not h.is_alive()
    h.read()                        # the last complete update is still readable
    h.remove()
    assert list_runtimes(root) == []


def test_instance_round_trip(root: Path):
    from device_model import instance
    from device_model.runtime.launcher import describe_instance
    from device_model.runtime.apps import default_apps
    inst = instance("trn2.48xlarge")
    desc = describe_instance(inst, 7, 1.0, default_apps(inst), 0, 123.0)
    shm.write_instance(root, desc)
    back = shm.read_instance(root)
    assert back == desc
    assert back.device_count == 16 and back.cores_per_device == 4 and back.core_version == "v3d"
    assert back.connected_devices[0] == (12, 3, 4, 1)
    assert describe_instance(inst, 7, 1.0, [], 0, 0.0).instance_id == desc.instance_id
    assert describe_instance(inst, 8, 1.0, [], 0, 0.0).instance_id != desc.instance_id
    # another instance type, or another host, started with the same seed: another id
    trn1 = describe_instance(instance("trn1.32xlarge"), 7, 1.0, [], 0, 0.0)
    assert trn1.instance_id != desc.instance_id
    with mock.patch("socket.gethostname", return_value="another-host"):
        assert describe_instance(inst, 7, 1.0, [], 0, 0.0).instance_id != desc.instance_id
    # on one host: another LNC, or another --root (a fleet simulated on one machine)
    lnc1 = describe_instance(instance("trn2.48xlarge", lnc=1), 7, 1.0, [], 0, 0.0)
    elsewhere = describe_instance(inst, 7, 1.0, [], 0, 0.0, place="/srv/sim/host-2")
    ids = {desc.instance_id, lnc1.instance_id, elsewhere.instance_id,
           describe_instance(inst, 7, 1.0, [], 0, 0.0, place="/srv/sim/host-3").instance_id}
    assert len(ids) == 4
    assert ((root / "instance.json").stat().st_mode & 0o777) == 0o600
    (root / "instance.json").write_bytes(b"{not json")
    with pytest.raises(CorruptCounters):
        shm.read_instance(root)
    shm.remove_instance(root)
    assert shm.read_instance(root) is None


def test_stop_removes_a_hung_instances_files_once_its_killed_runtimes_are_gone(tmp_path):
    """SIGSTOPped runtimes are killed by `stop`; their files, the instance and its logs went
    only if the kill had finished, so status went on showing the instance up, runtimes dead."""
    from collector_sim import start_instance, stop_instance
    root = tmp_path / "neuronscope"
    root.mkdir(mode=0o700)
    start_instance(root, "a=matmul:m=512,k=512,n=512@0", "b=matmul:m=512,k=512,n=512@1",
                   instance="trn1.2xlarge")
    pids = [h.pid for h in list_runtimes(root)]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    stop_instance(root)
    assert shm.read_instance(root) is None and list_runtimes(root) == []
    assert not list(root.glob("app-*.log")) and not list(root.glob("*.ctr"))


def test_status_names_a_runtime_that_ended_and_its_logs_last_word(tmp_path):
    """A runtime that crashed removed its counter file on the way out: status listed the
    instance as if the app had never been, and the reason sat unread in its log."""
    from collector_sim import start_instance, stop_instance
    from device_model.runtime.commands import format_status, status_data
    root = tmp_path / "neuronscope"
    root.mkdir(mode=0o700)
    desc = start_instance(root, "a=matmul:m=512,k=512,n=512@0", "b=matmul:m=512,k=512,n=512@1",
                          instance="trn1.2xlarge")
    try:
        gone = next(a for a in shm.read_instance(root).apps if a["tag"] == "a")["pid"]
        os.kill(gone, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _running(gone) and time.monotonic() < deadline:
            time.sleep(0.05)
        # a stop says how it stopped: not the "ended" of a runtime killed without a word
        entry = next(r for r in status_data(root)["runtimes"] if r["pid"] == gone)
        assert entry["error"] == "stopped by SIGTERM"
        killed = next(a for a in shm.read_instance(root).apps if a["tag"] == "b")["pid"]
        os.kill(killed, signal.SIGKILL)
        while _running(killed) and time.monotonic() < deadline:
            time.sleep(0.05)
        # its counter file still there (no collector has dropped it): ended all the same, not
        # a "dead" row showing its last utilization and power as if they were now's (its lock
        # on the file goes with the process, a moment after /proc calls it a zombie)
        deadline = time.monotonic() + 10
        while True:
            entry = next(r for r in status_data(root)["runtimes"] if r["pid"] == killed)
            if not entry["alive"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert entry["exited"] and not entry["alive"]
        assert entry["error"].startswith("ended without a word: killed")
        row = next(line for line in format_status(status_data(root)).splitlines()
                   if f" {killed} " in line)
        assert "exited        ended without a word: killed" in row and "W " not in row
        (root / f"runtime-{killed}.ctr").unlink()       # as a collector drops a dead one's file
        entry = next(r for r in status_data(root)["runtimes"] if r["pid"] == killed)
        assert entry["error"].startswith("ended without a word: killed")
        with open(root / "app-0.log", "a") as log:     # what a crash leaves there
            log.write("ZeroDivisionError: float division by zero\n")
        entry = next(r for r in status_data(root)["runtimes"] if r["pid"] == gone)
        assert entry["exited"] and not entry["alive"]
        assert entry["error"] == "ZeroDivisionError: float division by zero"
        assert "exited        ZeroDivisionError" in format_status(status_data(root))
        assert desc.instance_type == "trn1.2xlarge"
    finally:
        stop_instance(root)


def _running(pid: int) -> bool:
    """Whether `pid` still runs (a zombie has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:][:1] not in (b"Z", b"X")
