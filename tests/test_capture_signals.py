"""What a script capture does when it is stopped or its destination fails, with real processes
and signals: SIGTERM/SIGHUP/SIGINT sent to `neuron-profile capture` alone (as `timeout`,
Kubernetes and batch schedulers do) reach the script, the profile of what ran is written, the
exit code is 128 + the signal, and the script's process is gone; a `kill -9` of the capture
does not leave the script running; a missing or unwritable output folder is found before the
script starts; a write that fails at the end keeps the profile in a private folder."""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from profiler.model import fileformat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "profiler.cli"]
SCRIPT = '''
import os, shutil, sys, torch
print("PID", os.getpid(), flush=True)
steps, remove = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "")
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, steps + 1):
    model(torch.randn(8, 16)).square().mean().backward()
    opt.step()
    opt.zero_grad()
    print("step", step, flush=True)
if remove:
    shutil.rmtree(remove)             # the output folder goes away while the script runs
sys.exit(5)
'''


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "loop.py"
    path.write_text(SCRIPT)
    return path


def _gone(pid: int, within: float = 60.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:                       # a zombie of an orphan reaped late still answers kill(0)
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


def _start(tmp_path: Path, *script_args: str, out: Path | None = None) -> tuple[subprocess.Popen, int]:
    """The capture running the loop, once the script has done 3 steps: (process, script's pid)."""
    out = out or tmp_path / "p.nsprof"
    proc = subprocess.Popen([*CLI, "capture", "-s", str(out), "--recorder", "python", "--", sys.executable,
                             str(_script(tmp_path)), *script_args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
                            # a killed capture cannot remove its folder: the test's, not /tmp
                            env=dict(os.environ, TMPDIR=str(tmp_path)))
    child = None
    for line in proc.stdout:
        if line.startswith("PID "):
            child = int(line.split()[1])
        if line.startswith("step 3"):
            break
    assert child is not None
    return proc, child


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_to_the_capture_alone_writes_the_profile_and_exits_128_plus_it(tmp_path, sig):
    proc, child = _start(tmp_path, "100000000")
    proc.send_signal(sig)                     # to the capture only, not its process group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert _gone(child, 5)
    assert f"script stopped by {signal.Signals(sig).name}" in err
    assert "wrote" in err.splitlines()[-1] and f"script exit code {128 + sig}" in err
    assert fileformat.load(tmp_path / "p.nsprof").rows("steps") >= 3


def test_the_script_does_not_outlive_a_killed_capture(tmp_path):
    proc, child = _start(tmp_path, "100000000")
    proc.kill()                               # SIGKILL: nothing can be passed on by the capture
    proc.communicate(timeout=60)
    assert _gone(child, 60)                   # the kernel's parent-death signal stopped it


def test_a_missing_output_folder_is_found_before_the_script_runs(tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "s.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    for out, why in ((tmp_path / "nope" / "p.nsprof", "does not exist"), (Path("/sys/p.nsprof"), "permission denied"),
                     (tmp_path, "it is a folder")):
        res = subprocess.run([*CLI, "capture", "-s", str(out), "--", sys.executable, str(script)],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert res.returncode == 2
        assert res.stderr.count("\n") == 1 and res.stderr.startswith("neuron-profile: error: cannot write")
        assert why in res.stderr and str(out) in res.stderr
        assert not marker.exists()


def test_a_write_that_fails_at_the_end_keeps_the_profile_and_the_exit_code(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    res = subprocess.run([*CLI, "capture", "-s", str(folder / "p.nsprof"), "--recorder", "python", "--",
                          sys.executable, str(_script(tmp_path)), "2", str(folder)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env=dict(os.environ, TMPDIR=str(tmp_path)))   # the keeping place: the test's
    assert res.returncode == 5                # the script's own exit code is kept
    line = next(ln for ln in res.stderr.splitlines() if "cannot write the profile" in ln)
    assert str(folder / "p.nsprof") in line and "the profile is kept at " in line
    kept = Path(line.split("the profile is kept at ")[1])
    assert fileformat.load(kept).rows("steps") == 2
    mode = stat.S_IMODE(kept.parent.stat().st_mode)
    assert kept.parent.stat().st_uid == os.getuid() and mode == 0o700
    assert "script exit code 5" in res.stderr


@pytest.mark.slow
def test_sigterm_to_a_torchrun_capture_stops_the_workers_and_writes_every_rank(tmp_path):
    example = ROOT / "examples" / "train_ddp.py"
    torchrun = str(Path(sys.executable).parent / "torchrun")
    proc = subprocess.Popen([*CLI, "capture", "-s", str(tmp_path / "t.nsprof"), "--recorder", "python", "--",
                             torchrun, "--standalone", "--nproc-per-node", "2", str(example), "--steps", "2000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True)
    seen = set()
    for line in proc.stdout:
        if line.startswith(("rank 0 step 3 ", "rank 1 step 3 ")):
            seen.add(line.split()[1])
            if len(seen) == 2:
                break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    prof = fileformat.load(tmp_path / "t.nsprof")
    assert [e["rank"] for e in prof.meta["ranks"]] == [0, 1]
    assert json.dumps(prof.meta["ranks"]) and all(e["exit_code"] != 0 for e in prof.meta["ranks"])


OS_EXIT = '''
import os, sys, torch
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 16)),
                                   batch_size=16, num_workers=2)   # forked workers: os._exit too
for (x,) in data:
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
print("bye", flush=True)
if sys.argv[2:] == ["thread"]:     # a watchdog thread ends the process
    import threading, time
    threading.Thread(target=os._exit, args=(int(sys.argv[1]),)).start()
    time.sleep(30)
    print("still running", flush=True)
os._exit(int(sys.argv[1]))
'''


@pytest.mark.parametrize("code, how", [(0, "main"), (2, "thread")])
def test_a_script_that_ends_with_os_exit_keeps_its_profile_and_exit_code(tmp_path, code, how):
    """os._exit runs no finally block: the recording was lost, and capture said "wrote no
    recording" with exit 2 for a script that ended with 0 (and nothing at all for one that
    ended with 2)."""
    script, out = tmp_path / "oexit.py", tmp_path / "o.nsprof"
    script.write_text(OS_EXIT)
    res = subprocess.run([*CLI, "capture", "-s", str(out), "--", sys.executable, str(script),
                          str(code), how], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == code, res.stderr
    assert "bye" in res.stdout and f"script exit code {code}" in res.stderr
    assert "still running" not in res.stdout and "Traceback" not in res.stderr
    prof = fileformat.load(out)
    assert sorted(set(prof.table("ops")["step"].tolist())) == [1, 2, 3, 4]
    # the script ran on one thread: its operator calls and data-loading spans share it, whichever
    # thread called os._exit
    assert len(set(prof.table("host")["tid"].tolist())) == 1
