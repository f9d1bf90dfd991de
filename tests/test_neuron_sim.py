"""`neuron-sim start / status / stop / run` as users run them: real detached processes, real
signals, real counter files; bad input exits 2 with one line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from device_model.runtime.shm import list_runtimes, read_instance

SIM = [sys.executable, "-m", "device_model.cli"]
SMALL = ["--app", "mm=matmul:m=1024,k=1024,n=1024@0-3", "--app", "serve=demo-serve:layers=1,hidden=512,seq=128@8-9"]


@pytest.fixture
def root(tmp_path: Path):
    d = tmp_path / "rt"
    d.mkdir(mode=0o700)
    yield d
    subprocess.run(SIM + ["stop", "--root", str(d)], capture_output=True, timeout=30)


def sim(*args, timeout=60):
    return subprocess.run(SIM + list(args), capture_output=True, text=True, timeout=timeout)


def _wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_start_status_stop(root: Path):
    r = sim("start", "--root", str(root), "--seed", "3", "--speed", "20", *SMALL,
            "--inject", "mem_ecc_corrected@1s,device=2", "--inject", "numerical@rate=0.05,app=mm")
    assert r.returncode == 0, r.stderr
    assert "started simulated trn2.48xlarge" in r.stdout
    desc = read_instance(root)
    assert desc.seed == 3 and desc.lnc == 2 and desc.device_count == 16
    assert [a["tag"] for a in desc.apps] == ["mm", "serve"] and all(a["pid"] for a in desc.apps)
    handles = list_runtimes(root)
    assert len(handles) == 2 and all(h.is_alive() for h in handles)
    assert _wait(lambda: all(h.read().sim_time > 3 for h in handles))
    by_tag = {h.read().tag: h.read() for h in handles}
    assert by_tag["mm"].cores == (0, 1, 2, 3) and by_tag["serve"].cores == (8, 9)
    assert by_tag["mm"].errors["numerical"] > 0 and by_tag["serve"].errors["numerical"] == 0
    assert by_tag["serve"].dev_ecc.sum() == 1 and by_tag["serve"].devices == (2,)
    st = sim("status", "--root", str(root), "--json")
    assert st.returncode == 0
    data = json.loads(st.stdout)
    assert data["instance"]["instance_id"] == desc.instance_id
    assert {r["tag"] for r in data["runtimes"]} == {"mm", "serve"}
    text = sim("status", "--root", str(root)).stdout
    assert "mm" in text and "serve" in text and desc.instance_id in text
    again = sim("start", "--root", str(root), *SMALL)
    assert again.returncode == 2 and "already running" in again.stderr
    pids = [h.pid for h in handles]
    stop = sim("stop", "--root", str(root))
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert not any(Path(f"/proc/{p}").exists() and b"device_model.runtime" in Path(f"/proc/{p}/cmdline").read_bytes()
                   for p in pids)
    assert list_runtimes(root) == [] and read_instance(root) is None
    assert sim("status", "--root", str(root)).returncode == 3


def test_instance_id_is_stable_for_a_seed(root: Path):
    ids = []
    for _ in range(2):
        assert sim("start", "--root", str(root), "--seed", "11", "--app", "a=matmul:m=128,k=128,n=128@0").returncode == 0
        ids.append(read_instance(root).instance_id)
        sim("stop", "--root", str(root))
    assert ids[0] == ids[1] and ids[0].startswith("i-") and len(ids[0]) == 19


def test_sigkilled_runtime_is_left_for_the_reader(root: Path):
    assert sim("start", "--root", str(root), "--app", "a=matmul:m=128,k=128,n=128@0",
               "--app", "b=matmul:m=128,k=128,n=128@1").returncode == 0
    a, b = list_runtimes(root)
    os.kill(a.pid, signal.SIGKILL)
    assert _wait(lambda: not a.is_alive())
    a.read()
    assert b.is_alive()
    st = json.loads(sim("status", "--root", str(root), "--json").stdout)
    alive = {r["pid"]: r["alive"] for r in st["runtimes"]}
    assert alive == {a.pid: False, b.pid: True}
    assert sim("stop", "--root", str(root)).returncode == 0
    assert list_runtimes(root) == []


def test_run_in_foreground_stops_cleanly_on_ctrl_c(root: Path):
    proc = subprocess.Popen(SIM + ["run", "--root", str(root), "--app", "a=matmul:m=256,k=256,n=256@0-1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "started simulated" in proc.stdout.readline()
        assert _wait(lambda: len(list_runtimes(root)) == 1)
        child = list_runtimes(root)[0].pid
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopped" in out and "Traceback" not in err
    assert list_runtimes(root) == [] and read_instance(root) is None
    assert not Path(f"/proc/{child}").exists() or b"device_model.runtime" not in Path(f"/proc/{child}/cmdline").read_bytes()


def test_run_with_duration_exits_by_itself(root: Path):
    r = sim("run", "--root", str(root), "--speed", "50", "--duration", "5s",
            "--app", "a=allreduce:bytes=1M@0-7", timeout=60)
    assert r.returncode == 0, r.stderr
    assert list_runtimes(root) == []


def test_default_mix_is_llama_training_and_inference(root: Path):
    r = sim("start", "--root", str(root), "--speed", "5", timeout=120)
    assert r.returncode == 0, r.stderr
    desc = read_instance(root)
    assert desc.instance_type == "trn2.48xlarge"
    assert [a["tag"] for a in desc.apps] == ["llama-train", "llama-serve"]
    assert desc.apps[0]["workload"].startswith("llama") and desc.apps[0]["cores"] == "0-47"
    assert desc.apps[1]["cores"] == "48-63"
    snaps = [h.read() for h in list_runtimes(root)]
    assert {s.models[0].name for s in snaps} == {"llama3-8b"}


@pytest.mark.parametrize("args, needle", [
    (["start", "--instance", "trn9.huge"], "unknown instance 'trn9.huge'; allowed: trn1.2xlarge"),
    (["start", "--instance", "trn1.2xlarge", "--lnc", "2"], "LNC=2 is not supported"),
    (["start", "--app", "a=matmul:m=1,k=1,n=1@0-99"], "allowed: 0-63"),
    (["start", "--app", "a=matmul:m=1,k=1,n=1@0-3", "--app", "b=matmul:m=1,k=1,n=1@3"], "core 3 is given to both"),
    (["start", "--app", "nonsense"], "TAG=WORKLOAD_SPEC@CORES"),
    (["start", "--app", "a=frobnicate@0"], "unknown workload 'frobnicate'"),
    (["start", "--app", "a=matmul:m=1,k=1,n=1@0", "--inject", "gremlins@3s"], "unknown fault 'gremlins'"),
    (["start", "--app", "a=matmul:m=1,k=1,n=1@0", "--inject", "numerical@3s,app=zz"], "names app 'zz'"),
    (["start", "--app", "a=matmul:m=1,k=1,n=1@0", "--inject", "mem_ecc_corrected@3s,device=9"], "no app runs on device 9"),
    (["start", "--speed", "-1"], "must be in (0, 1e6]"),
    (["run", "--duration", "soon"], "bad --duration 'soon'"),
    # the runtimes ended at once and the launcher said "error: exit status 0"
    (["run", "--duration", "0"], "--duration '0' must be more than 0"),
    (["run", "--duration", ""], "bad --duration ''"),
    # numpy's and the instance file's tracebacks
    (["start", "--seed", "-1"], "'-1' must be in 0 .. 2**63-1"),
    (["start", "--seed", str(1 << 64)], "must be in 0 .. 2**63-1"),
])
def test_bad_input_exits_2_with_one_line(root: Path, args, needle):
    r = sim(*args[:1], "--root", str(root), *args[1:])
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert needle in lines[-1] and "Traceback" not in r.stderr
    assert len(lines) == 1 or lines[0].startswith("usage:")       # argparse adds its usage line
    assert list_runtimes(root) == [] and read_instance(root) is None


def test_unsafe_root_is_refused(tmp_path: Path):
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    r = sim("status", "--root", str(loose))
    assert r.returncode == 2 and "0777" in r.stderr


def test_a_planted_log_symlink_is_not_followed(root: Path, tmp_path: Path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (root / "app-0.log").symlink_to(victim)
    r = sim("start", "--root", str(root), "--app", "mm=matmul:m=256,k=256,n=256@0-1")
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "precious\n"
    log = root / "app-0.log"
    assert not log.is_symlink() and (log.stat().st_mode & 0o777) == 0o600


def test_two_starts_at_the_same_moment_one_wins(root: Path):
    cmd = SIM + ["start", "--root", str(root), "--app", "mm=matmul:m=256,k=256,n=256@0-1"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    codes = sorted(rc for _, _, rc in results)
    assert codes == [0, 2], results
    loser = next(err for _, err, rc in results if rc == 2)
    assert "already running" in loser and "Traceback" not in loser
    desc = read_instance(root)
    live = [h.pid for h in list_runtimes(root) if h.is_alive()]
    assert live == [a["pid"] for a in desc.apps]
