"""Damaged, planted and vanishing files in the runtime directory, and stopped runtimes, as the
read-only tools meet them: each damaged runtime gets an entry with an error, the others go on, and
no tool hangs, faults or prints a traceback."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector_sim import START, Clock, FakeRuntime, console_script, start_instance, stop_instance, \
    wait_for, write_instance
from device_model.runtime import shm
from device_model.runtime.layout import record_dtype
from monitor.collector import Collector
from monitor.config import RUNTIME_GROUPS, SYSTEM_GROUPS, MonitorConfig
from monitor.report import Report

ALL = {"period": "1s", "neuron_runtimes": [{"metrics": [{"type": t} for t in RUNTIME_GROUPS]}],
       "system_metrics": [{"type": t} for t in SYSTEM_GROUPS]}
TOOLS = {"neuron-monitor": ["--count", "1"], "neuron-ls": [], "neuron-sim": ["status"]}
# The default config (every group) with a short period: neuron-monitor's first report comes one
# period after its start, and the default 5 s would be most of what these runs cost.
EVERY_GROUP_QUICKLY = {**ALL, "period": "100ms"}


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "rt"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture(scope="module")
def quick_config(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("config") / "every-group-quickly.json"
    path.write_text(json.dumps(EVERY_GROUP_QUICKLY))
    return path


def run_tool(name: str, root: Path, *extra: str, config: Path | None = None,
             timeout: float = 30) -> subprocess.CompletedProcess:
    chosen = ["--config-file", str(config)] if config is not None and name == "neuron-monitor" else []
    args = [*console_script(name), *TOOLS[name], *chosen, "--root", str(root), *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def no_traceback(out: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode >= 0, f"killed by signal {-out.returncode}"


# ------------------------------------------------------------------ values out of range
FLOAT_FIELDS = [n for n in record_dtype(1, 1, 1, 1).names if record_dtype(1, 1, 1, 1)[n].base.kind == "f"]
UINT_FIELDS = [n for n in record_dtype(1, 1, 1, 1).names if record_dtype(1, 1, 1, 1)[n].base.kind == "u"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FLOAT_FIELDS + UINT_FIELDS),
       value=st.sampled_from([1e300, float("inf"), float("-inf"), float("nan"), -1.0, 2.0 ** 63, 2 ** 64 - 1]))
def test_counter_values_out_of_range_give_that_runtime_an_error(tmp_path_factory, field, value):
    root = tmp_path_factory.mktemp("rt")
    root.chmod(0o700)
    write_instance(root)
    good = FakeRuntime(root, 100, "good", [0], cores_per_device=4)
    bad = FakeRuntime(root, 200, "bad", [4], cores_per_device=4)
    try:
        clock = Clock(START)
        c = Collector(MonitorConfig.from_dict(ALL), root=root, clock=clock)
        if bad.r[field].dtype.kind == "u":
            value = 2 ** 64 - 1 if not np.isfinite(value) or value < 0 or value > 2 ** 64 - 1 else int(value)
        bad.r[field] = value
        bad.writer.publish()
        good.step(1.0)
        clock.advance(1)
        report = c.collect()
        by_pid = {r.pid: r for r in report.runtimes}
        assert by_pid[100].error == ""
        if by_pid[200].error:
            assert "out of range" in by_pid[200].error and by_pid[200].tag == "bad"
        Report.from_json(report.to_json())
    finally:
        good.close()
        bad.close()


def _damage_instance(root: Path, **fields) -> None:
    doc = orjson.loads((root / "instance.json").read_bytes())
    doc.update(fields)
    (root / "instance.json").write_bytes(json.dumps(doc).encode())


DAMAGED_INSTANCES = [
    {"connected_devices": 5}, {"connected_devices": [[1, "x"]]}, {"device_count": 1e300},
    {"lnc": 2 ** 63}, {"apps": [{"tag": 5}]}, {"speed": "fast"}, {"started_at": 1e300},
    {"instance_id": None}, {"cores_per_device": -1}, {"seed": 1.5},
]


@pytest.mark.parametrize("fields", DAMAGED_INSTANCES)
def test_damaged_instance_file_is_refused_naming_the_field(root, fields):
    from device_model.runtime.commands import status_data
    write_instance(root)
    rt = FakeRuntime(root, os.getpid(), "train", [0], cores_per_device=4)
    try:
        _damage_instance(root, **fields)
        with pytest.raises(shm.CorruptCounters, match=next(iter(fields))):
            shm.read_instance(root)
        report = Collector(MonitorConfig.from_dict(ALL), root=root).collect()
        Report.from_json(report.to_json())     # no instance: reported as a host without devices
        data = status_data(root)
        assert next(iter(fields)) in data["instance_error"]
        assert [r["tag"] for r in data["runtimes"]] == ["train"]
    finally:
        rt.close()


def test_damaged_instance_file_does_not_stop_the_tools(root, quick_config):
    write_instance(root)
    rt = FakeRuntime(root, os.getpid(), "train", [0], cores_per_device=4)
    try:
        _damage_instance(root, connected_devices=5)
        outs = {name: run_tool(name, root, config=quick_config) for name in TOOLS}
        for out in outs.values():
            no_traceback(out)
        mon = outs["neuron-monitor"]
        assert mon.returncode == 0 and Report.from_json(mon.stdout.splitlines()[0])
        status = outs["neuron-sim"]
        assert "instance description unreadable" in status.stdout and "train" in status.stdout
    finally:
        rt.close()


def test_damaged_counter_header_values_are_refused(root):
    write_instance(root)
    for i, header in enumerate([{"cores": [2 ** 63]}, {"started_at": 1e300}, {"core_devices": [-1]},
                                {"lnc": True}, {"models": [{"name": "m", "uuid": "u", "model_id": 1e300,
                                                            "subgraphs": []}]}]):
        base = {"tag": "t", "workload": "w", "instance_type": "trn2.48xlarge", "started_at": START,
                "cores": [0], "lnc": 1, "core_devices": [0], "devices": [0], "ring": 4, "models": []}
        w = shm.CounterWriter(root, {**base, **header}, pid=1000 + i)
        try:
            with pytest.raises(shm.CorruptCounters):
                shm.RuntimeHandle(w.path, w.pid).read()
        finally:
            w.close()


def test_a_copy_of_a_live_root_is_not_the_live_instance(root, tmp_path):
    """Read from a copy, the copied counter files (nobody holds them) are cleaned up, and the
    live runtimes of the original were then reported as running without their files: "was
    deleted while the runtime runs", for another instance's processes."""
    import shutil
    start_instance(root, "a=matmul:m=256,k=256,n=256@0-1")
    try:
        copy = tmp_path / "copy"
        shutil.copytree(root, copy)
        copy.chmod(0o700)
        c = Collector(MonitorConfig.from_dict(ALL), root=copy)
        report = c.collect()
        c.close()
        assert not any("deleted" in r.error for r in report.runtimes), report.runtimes
        live = Collector(MonitorConfig.from_dict(ALL), root=root)
        assert [r.tag for r in live.collect().runtimes] == ["a"]     # the original still reads
        live.close()
    finally:
        stop_instance(root)


def test_a_runtimes_root_is_read_from_either_form_of_the_flag():
    from device_model.runtime.rundir import root_argument as _root_argument
    assert _root_argument([b"python", b"-m", b"device_model.runtime", b"--root", b"/r/x"]) == "/r/x"
    assert _root_argument([b"python", b"--root=/r/y", b"--seed", b"0"]) == "/r/y"
    assert _root_argument([b"python", b"--root"]) is None and _root_argument([b"python"]) is None


def test_a_runtime_whose_file_is_cut_short_keeps_its_tag(root):
    """A file cut short is refused before its header is read: the runtime's entry was tagged
    with its pid ("28970" for "llama-train"), and readers keyed on the tag saw a new runtime."""
    from dataclasses import replace
    inst = write_instance(root)
    rt = FakeRuntime(root, 4242, "llama-train", [0], cores_per_device=4)
    try:
        shm.write_instance(root, replace(inst, apps=({"tag": "llama-train", "workload": "w",
                                                       "cores": "0", "pid": 4242},)))
        os.truncate(rt.path, os.path.getsize(rt.path) // 2)
        c = Collector(MonitorConfig.from_dict(ALL), root=root, clock=Clock(START + 1))
        (entry,) = c.collect().runtimes
        assert entry.tag == "llama-train" and "truncated" in entry.error
    finally:
        rt.close()


# ------------------------------------------------------------------ truncation under the reader
READER = """
import sys
from monitor.collector_shm import ShmBackend
from device_model.runtime.shm import CorruptCounters
b = ShmBackend(sys.argv[1])
for i in range(int(sys.argv[2])):
    for h in b.runtimes():
        try:
            h.read()
        except CorruptCounters:
            pass
print("done")
"""


def test_a_file_truncated_while_read_never_faults_the_reader(root):
    """A reader that kept the file mapped died of SIGBUS when the size changed under it."""
    write_instance(root)
    rt = FakeRuntime(root, os.getpid(), "train", list(range(64)), cores_per_device=4, ring=65536)
    try:
        whole = rt.path.read_bytes()
        reader = subprocess.Popen([sys.executable, "-c", READER, str(root), "20000"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        fd = os.open(rt.path, os.O_WRONLY)
        try:
            while reader.poll() is None:
                os.ftruncate(fd, 128)
                os.pwrite(fd, whole, 0)
        finally:
            os.close(fd)
        out, err = reader.communicate(timeout=60)
        assert reader.returncode == 0, f"reader exited {reader.returncode}: {err}"
        assert out.strip() == "done"
    finally:
        rt.close()


# ------------------------------------------------------------------ FIFOs and other non-files
@pytest.mark.parametrize("name", ["runtime-4242.ctr", "instance.json"])
def test_a_fifo_where_a_file_is_expected_hangs_no_tool(root, quick_config, name):
    write_instance(root)
    rt = FakeRuntime(root, os.getpid(), "train", [0], cores_per_device=4)
    try:
        target = root / name
        target.unlink(missing_ok=True)
        os.mkfifo(target, 0o600)
        # a blocking open() would hang here
        outs = {tool: run_tool(tool, root, config=quick_config, timeout=20) for tool in TOOLS}
        for out in outs.values():
            no_traceback(out)
        mon = outs["neuron-monitor"]
        report = Report.from_json(mon.stdout.splitlines()[0])
        if name == "runtime-4242.ctr":
            assert [r.tag for r in report.runtimes] == ["train"]
        assert target.exists()  # not ours to delete
    finally:
        rt.close()


# ------------------------------------------------------------------ stopped and vanished runtimes
def test_stopped_runtime_is_reported_stale_and_a_deleted_file_is_reported(root):
    start_instance(root, "a=matmul:m=256,k=256,n=256@0-1", "b=matmul:m=256,k=256,n=256@2-3")
    try:
        desc = shm.read_instance(root)
        pa, pb = (a["pid"] for a in desc.apps)
        c = Collector(MonitorConfig.from_dict(ALL), root=root)
        c.collect()
        os.kill(pa, signal.SIGSTOP)
        try:
            # a period later the monitor sees a's last counters (written before the stop, maybe
            # after the first collect); stale is those same counters seen again 2 s on
            time.sleep(1.0)
            c.collect()
            # before it is stale: no 0-second period of 0 % (an idle runtime, it read as)
            c.stale_after = 30.0
            time.sleep(1.0)
            early = next(r for r in c.collect().runtimes if r.pid == pa)
            assert early.neuroncore_counters is None and early.execution_stats is None
            assert not early.error
            c.stale_after = 2.0
            (root / f"runtime-{pb}.ctr").unlink()
            time.sleep(2.6)
            by_pid = {r.pid: r for r in c.collect().runtimes}
            assert "stopped or hung" in by_pid[pa].error and by_pid[pa].neuroncore_counters is None
            assert "deleted" in by_pid[pb].error and by_pid[pb].tag == "b"
            status = run_tool("neuron-sim", root, "--json")
            rows = {r["pid"]: r for r in json.loads(status.stdout)["runtimes"]}
            assert rows[pa]["stale"] is True and "deleted" in rows[pb]["error"]
            assert "stale" in run_tool("neuron-sim", root).stdout
        finally:
            os.kill(pa, signal.SIGCONT)
        wait_for(lambda: c.collect().runtimes and not any(
            r.pid == pa and r.error for r in c.collect().runtimes), timeout=10)
        c.close()
    finally:
        stop_instance(root)


# ------------------------------------------------------------------ a --root that does not exist
@pytest.mark.parametrize("tool", list(TOOLS))
def test_a_missing_root_is_not_created_by_a_read_only_tool(tmp_path, tool):
    missing = tmp_path / "nowhere"
    out = run_tool(tool, missing)
    no_traceback(out)
    assert out.returncode != 0
    assert f"no simulated instance at {missing}" in out.stderr
    assert not missing.exists()


def test_stop_on_a_missing_root_has_nothing_to_stop_and_creates_nothing(tmp_path):
    """`neuron-sim stop --root DIR` created DIR (0700) to find no instance in it."""
    missing = tmp_path / "nowhere"
    out = subprocess.run([*console_script("neuron-sim"), "stop", "--root", str(missing)],
                         capture_output=True, text=True, timeout=30)
    no_traceback(out)
    assert out.returncode == 0 and out.stdout == f"no simulated instance in {missing}\n"
    assert not missing.exists()


def test_record_error_names_the_path(root, quick_config):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    out = run_tool("neuron-monitor", root, "--record", "/dev/full", config=quick_config)
    assert out.returncode == 1 and "'/dev/full'" in out.stderr and "'3'" not in out.stderr


def test_a_tag_filter_that_matches_nothing_is_warned_once(root, tmp_path):
    write_instance(root)
    rts = [FakeRuntime(root, os.getpid(), "llama-train", [0], cores_per_device=4)]
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"period": "10ms", "neuron_runtimes": [
        {"tag_filter": "^train", "metrics": [{"type": "neuroncore_counters"}]},
        {"tag_filter": "llama", "metrics": [{"type": "memory_used"}]}]}))
    try:
        out = run_tool("neuron-monitor", root, "--config-file", str(config), "--count", "5")
        assert out.returncode == 0
        warnings = [line for line in out.stderr.splitlines() if "warning" in line]
        assert len(warnings) == 1 and "'^train'" in warnings[0] and "llama-train" in warnings[0]
    finally:
        for rt in rts:
            rt.close()
