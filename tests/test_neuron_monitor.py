"""neuron-monitor end to end: real runtime processes, real shared memory, real pipes and signals."""
from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import stat
import subprocess
import termios
import time

import orjson
import psutil
import pytest

from collector_sim import (
    FakeRuntime, console_script, counter_file, start_instance, stop, stop_instance, wait_for,
)
from device_model.runtime import shm
from monitor.collector import Collector
from monitor.config import RUNTIME_GROUPS, SYSTEM_GROUPS, MonitorConfig
from monitor.report import Report
from monitor.stream import ReportStream

# Every group twice a second (ms periods are a neuronscope extension).
FAST = {"period": "500ms",
        "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": t} for t in RUNTIME_GROUPS]}],
        "system_metrics": [{"type": t} for t in SYSTEM_GROUPS]}


MATMUL = "matmul:m=1024,k=1024,n=1024"


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """`neuron-sim start`: a trn2.48xlarge with a training runtime on cores 0-7 and a serving one
    on 8-11 (real processes publishing real counter files)."""
    root = tmp_path_factory.mktemp("sim") / "rt"
    root.mkdir(mode=0o700)
    start_instance(root, f"train={MATMUL}@0-7", "serve=demo-serve:layers=1,hidden=512,seq=128@8-11")
    procs = {h.read().tag: h.pid for h in shm.list_runtimes(root)}
    yield root, procs
    stop_instance(root)


def config(tmp_path, data=FAST) -> str:
    path = tmp_path / "monitor.json"
    path.write_bytes(data if isinstance(data, bytes) else orjson.dumps(data))
    return str(path)


def monitor(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([*console_script("neuron-monitor"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


def read_line(proc: subprocess.Popen, timeout: float = 20.0) -> bytes:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no report in time"
    return proc.stdout.readline()


def test_stream_of_reports_from_real_runtimes(sim, tmp_path):
    root, procs = sim
    out = subprocess.run([*console_script("neuron-monitor"), "-c", config(tmp_path), "--root",
                          str(root), "--count", "3"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and out.stderr == b""
    reports = [Report.from_json(line) for line in lines]
    last = reports[-1]
    by_tag = {r.tag: r for r in last.runtimes}
    assert set(by_tag) == {"train", "serve"}
    assert by_tag["train"].pid == procs["train"]
    assert sorted(by_tag["train"].neuroncore_counters.cores) == list(range(8))
    assert sorted(by_tag["serve"].neuroncore_counters.cores) == [8, 9, 10, 11]
    cores = by_tag["train"].neuroncore_counters.cores.values()
    assert all(0.0 < c.utilization <= 1.0 and c.flops > 0 for c in cores)
    assert all(set(c.physical) == {f"nc_v3.{p}" for p in (2 * i, 2 * i + 1)}
               for i, c in by_tag["train"].neuroncore_counters.cores.items())
    assert by_tag["train"].neuroncore_counters.period == pytest.approx(0.5, abs=0.2)
    stats = by_tag["serve"].execution_stats
    assert stats.statuses["completed"] > 0 and stats.total_latency.p100 >= stats.total_latency.p0
    vcpu = by_tag["train"].vcpu  # psutil on the runtime's own pid
    assert vcpu.error == "" and 0.0 <= vcpu.user <= 1.0 and vcpu.period > 0
    assert last.system.vcpu.per_cpu and last.system.memory.total_bytes > 0
    devices = last.system.device_counters.devices
    assert len(devices) == 16 and devices[0].power_watts > devices[15].power_watts
    assert last.instance.id == shm.read_instance(root).instance_id and last.hardware.lnc == 2
    assert last.instance.type == "trn2.48xlarge" and last.hardware.device_count == 16


def test_the_first_report_covers_the_time_since_start_for_the_runtimes_vcpu_too(sim, tmp_path):
    """Runtimes already running when the monitor starts: their first vCPU figure, like their
    counters, covers the time since the monitor started, not the runtime's whole life."""
    root, procs = sim
    oldest = min(psutil.Process(pid).create_time() for pid in procs.values())
    wait_for(lambda: time.time() - oldest > 3.0)
    collector = Collector(MonitorConfig.from_file(config(tmp_path)), root=root)
    try:
        started = time.monotonic()
        time.sleep(0.5)
        report = collector.collect()
        since = time.monotonic() - started
    finally:
        collector.close()
    periods = [r.vcpu.period for r in report.runtimes]
    assert len(periods) == len(procs)
    assert all(0.4 < p <= since + 0.1 for p in periods), periods


def test_runtime_sigkilled_mid_run_disappears_from_the_next_report(tmp_path):
    root = tmp_path / "rt"
    root.mkdir(mode=0o700)
    start_instance(root, f"keep={MATMUL}@0-3", f"victim={MATMUL}@4-7")
    try:
        victim = next(h.pid for h in shm.list_runtimes(root) if h.read().tag == "victim")
        proc = monitor("-c", config(tmp_path), "--root", str(root))
        try:
            first = orjson.loads(read_line(proc))
            assert victim in [r["pid"] for r in first["neuron_runtime_data"]]
            os.kill(victim, signal.SIGKILL)
            wait_for(lambda: not psutil.pid_exists(victim) or
                     psutil.Process(victim).status() == psutil.STATUS_ZOMBIE)
            assert counter_file(root, victim).exists()  # SIGKILL leaves the file behind
            pids = [r["pid"] for r in orjson.loads(read_line(proc))["neuron_runtime_data"]]
            if victim in pids:  # killed during that collection: gone from the one after
                pids = [r["pid"] for r in orjson.loads(read_line(proc))["neuron_runtime_data"]]
            assert victim not in pids and len(pids) == 1
            assert not counter_file(root, victim).exists()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0
            assert b"Traceback" not in proc.stderr.read()
        finally:
            stop(proc)
    finally:
        stop_instance(root)


def test_corrupted_counter_file_is_reported_with_an_error(sim, tmp_path):
    root, _ = sim
    bad = FakeRuntime(root, 999_999, "broken", [60, 61], cores_per_device=4)  # this process
    try:
        with open(bad.path, "r+b") as fh:
            fh.seek(-64, os.SEEK_END)
            fh.write(b"\xff" * 64)
        out = subprocess.run([*console_script("neuron-monitor"), "-c", config(tmp_path), "--root",
                              str(root), "--count", "1"], capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        entries = orjson.loads(out.stdout)["neuron_runtime_data"]
        by_tag = {r["neuron_runtime_tag"]: r for r in entries}
        assert by_tag["broken"]["error"] and by_tag["broken"]["report"] == {}
        assert by_tag["train"]["error"] == "" and by_tag["train"]["report"]["neuroncore_counters"]
    finally:
        bad.close()


@pytest.mark.parametrize("content, field", [
    (b'{"period": 5}', "period"),
    (b'{"period": "5 parsecs"}', "period"),
    (b'{"neuron_runtimes": [{"tag_filter": "(", "metrics": []}]}', "neuron_runtimes[0].tag_filter"),
    (b'{"neuron_runtimes": [{"metrics": [{"type": "inference_stats"}]}]}',
     "neuron_runtimes[0].metrics[0].type"),
    (b'{"system_metrics": [{"type": "vcpu_usage", "period": "0s"}]}', "system_metrics[0].period"),
    (b'{"sytem_metrics": []}', "sytem_metrics"),
    (b'{"period": "1s",', "not valid JSON"),
    (b'[]', "config"),
])
def test_malformed_config_exits_2_naming_the_field(tmp_path, content, field):
    out = subprocess.run([*console_script("neuron-monitor"), "-c", config(tmp_path, content),
                          "--root", str(tmp_path / "rt")], capture_output=True, timeout=30)
    assert out.returncode == 2 and out.stdout == b""
    err = out.stderr.decode()
    assert err.count("\n") == 1 and field in err and "Traceback" not in err


@pytest.mark.parametrize("content", [b'{"period": "1s"}', b'{"period": "1s", "system_metrics": []}',
                                     b'{"period": "1s", "neuron_runtimes": [{"metrics": []}]}'])
def test_a_config_that_selects_nothing_reports_the_instance_on_its_period(sim, tmp_path, content):
    """It ran for ever and wrote nothing; the exporter's in-process collector already reported
    the instance. Now both do, on the config's period."""
    root, _ = sim
    started = time.monotonic()
    out = subprocess.run([*console_script("neuron-monitor"), "-c", config(tmp_path, content),
                          "--root", str(root), "--count", "2"],
                         capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    reports = [orjson.loads(line) for line in out.stdout.splitlines()]
    assert len(reports) == 2 and time.monotonic() - started < 15
    for report in reports:
        assert report["neuron_runtime_data"] == [] and "instance_info" in report
        assert "neuron_hardware_info" in report


def test_missing_config_file_and_bad_flags_are_usage_errors(tmp_path):
    out = subprocess.run([*console_script("neuron-monitor"), "-c", str(tmp_path / "nope.json")],
                         capture_output=True, timeout=30)
    assert out.returncode == 2 and b"nope.json" in out.stderr and b"Traceback" not in out.stderr
    # an empty name is a file that cannot be read, not "no config" (it ran the default one)
    out = subprocess.run([*console_script("neuron-monitor"), "-c", "", "--count", "1"],
                         capture_output=True, timeout=30)
    assert out.returncode == 2 and b"cannot read config" in out.stderr and out.stdout == b""
    out = subprocess.run([*console_script("neuron-monitor"), "--count", "0"],
                         capture_output=True, timeout=30)
    assert out.returncode == 2
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    out = subprocess.run([*console_script("neuron-monitor"), "--root", str(loose)],
                         capture_output=True, timeout=30)
    assert out.returncode == 2 and b"0700" in out.stderr


def test_closed_stdout_gives_a_message_and_a_clean_exit(sim, tmp_path):
    root, _ = sim
    proc = monitor("-c", config(tmp_path), "--root", str(root))
    try:
        orjson.loads(read_line(proc))
        proc.stdout.close()  # the consumer goes away
        assert proc.wait(20) == 0
        err = proc.stderr.read().decode()
        assert "stdout was closed" in err and "Traceback" not in err
    finally:
        stop(proc)


def test_full_disk_on_record_gives_a_message_and_a_clean_exit(sim, tmp_path):
    root, _ = sim
    out = subprocess.run([*console_script("neuron-monitor"), "-c", config(tmp_path), "--root",
                          str(root), "--record", "/dev/full"], capture_output=True, timeout=30)
    assert out.returncode == 1
    err = out.stderr.decode()
    assert err.count("\n") == 1 and "disk is full" in err and "Traceback" not in err
    Report.from_json(out.stdout.splitlines()[0])  # the report itself still reached stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_end_the_stream_cleanly(sim, tmp_path, sig):
    root, _ = sim
    proc = monitor("-c", config(tmp_path), "--root", str(root))
    try:
        read_line(proc)
        proc.send_signal(sig)
        rest, err = proc.communicate(timeout=20)
        assert proc.returncode == 0 and b"Traceback" not in err
        for line in rest.splitlines():  # nothing half-written
            orjson.loads(line)
    finally:
        stop(proc)


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_signal_while_a_report_is_half_written_finishes_the_report(sim, tmp_path, unbuffered):
    """A reader slower than the stream: the pipe fills in the middle of a report and the write
    blocks; SIGTERM arrives then. The report is finished, whole, before the exit, also with an
    unbuffered stdout (PYTHONUNBUFFERED, as container images set it), where one write(2) takes
    only what the pipe holds. The pipe is shrunk to one page, so any report outgrows it."""
    root, _ = sim
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    capacity = fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ)
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    proc = subprocess.Popen([*console_script("neuron-monitor"), "-c", config(tmp_path), "--root",
                             str(root)], stdout=write_end, stderr=subprocess.PIPE, env=env)
    os.close(write_end)
    try:
        def queued() -> int:
            return int.from_bytes(fcntl.ioctl(read_end, termios.FIONREAD, b"\0" * 4), "little")
        wait_for(lambda: queued() >= capacity)       # the writer is blocked mid-report
        proc.send_signal(signal.SIGTERM)
        data = b""
        while chunk := os.read(read_end, 1 << 16):
            data += chunk
        assert proc.wait(20) == 0 and b"Traceback" not in proc.stderr.read()
        assert len(data) > capacity and data.endswith(b"\n")
        for line in data.splitlines():
            Report.from_json(line)
    finally:
        os.close(read_end)
        stop(proc)


def test_record_appends_a_replayable_private_file(sim, tmp_path):
    root, _ = sim
    record = tmp_path / "stream.jsonl"
    for _ in range(2):
        out = subprocess.run([*console_script("neuron-monitor"), "-c", config(tmp_path), "--root",
                              str(root), "--record", str(record), "--count", "2"],
                             capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    stream = ReportStream(record.read_bytes().splitlines())
    reports = list(stream)
    assert len(reports) == 4 and not stream.errors
    assert record.read_bytes().endswith(out.stdout)


def test_no_instance_prints_the_no_device_document(tmp_path):
    root = tmp_path / "rt"
    root.mkdir(mode=0o700)  # a runtime directory, but no instance in it (a missing one: exit 1)
    out = subprocess.run([*console_script("neuron-monitor"), "-c", config(tmp_path), "--root",
                          str(root), "--count", "1"], capture_output=True, timeout=30)
    assert out.returncode == 0 and out.stderr == b""
    doc = json.loads(out.stdout)
    assert doc["neuron_runtime_data"] == []
    assert doc["system_data"]["neuron_hw_counters"]["neuron_devices"] is None
    assert doc["neuron_hardware_info"]["neuron_device_count"] == 0
    assert stat.S_IMODE(root.stat().st_mode) == 0o700


def test_help_and_version():
    out = subprocess.run([*console_script("neuron-monitor"), "--help"], capture_output=True,
                         timeout=30)
    assert out.returncode == 0 and b"--config-file" in out.stdout and b"--record" in out.stdout
    out = subprocess.run([*console_script("neuron-monitor"), "--version"], capture_output=True,
                         timeout=30)
    assert out.returncode == 0 and out.stdout.startswith(b"neuron-monitor ")


def test_verbose_logs_go_to_stderr_only(sim, tmp_path):
    root, procs = sim
    out = subprocess.run([*console_script("neuron-monitor"), "-c", config(tmp_path), "--root",
                          str(root), "--count", "1", "--verbose", "2"], capture_output=True,
                         timeout=60)
    assert out.returncode == 0
    Report.from_json(out.stdout)
    err = out.stderr.decode()
    assert f"runtime {procs['train']} reported" in err and "report 1:" in err
