"""Stopping `neuron-profile` and where its output goes, with real processes, signals, FIFOs,
pipes and folders: a stop signal during a built-in capture's write lets the write finish; one
during a later rank's capture stops every rank at the same execution; SIGTERM during an export
cleans up like Ctrl-C; a per-rank trace folder appears whole or not at all and replaces only an
earlier export; stdout errors name stdout and `--output-file -` is stdout."""
from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from device_model import instance
from device_model.workloads import Placement
from profiler.capture.builtin import capture_workload
from profiler.model import fileformat
from profiler.model.validate import check_profile

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "profiler.cli"]


def _start(*argv: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([*CLI, *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def _wait_for(predicate, within: float = 60.0, every: float = 0.002) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> Path:
    """A 4-rank profile whose Chrome export takes about a second (time to stop it midway)."""
    path = tmp_path_factory.mktemp("stops") / "big.nsprof"
    profile = capture_workload("mlp:tokens=2048,hidden=2048,layers=4", instance("trn2.48xlarge"),
                               Placement(pp=4), num_exec=20)
    fileformat.save(profile, path)
    return path


# --- built-in capture --------------------------------------------------------------------------

def test_sigterm_while_the_profile_is_written_lets_the_write_finish(tmp_path):
    """The profile goes to a FIFO, so the test holds the write open: the capture is certainly
    writing when SIGTERM comes. It used to die there (default action), the profile cut short."""
    fifo = tmp_path / "p.nsprof"
    os.mkfifo(fifo)
    proc = _start("capture", "--workload", "mlp:tokens=512,hidden=512,layers=2", "--num-exec", "3",
                  "-s", str(fifo))
    with open(fifo, "rb") as reader:            # opens once the capture opens it to write
        head = reader.read(4096)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)                         # handled while the write waits for the reader
        data = head + reader.read()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "SIGTERM: writing the profile first" in err and "wrote" in err.splitlines()[-1]
    assert len(data) > 65536                    # more than a pipe holds: stopped mid-write
    assert fileformat.decode(data).rows("steps") == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.nsprof"]     # no temporary


def test_a_second_signal_while_writing_aborts_the_write_leaving_nothing(tmp_path):
    fifo = tmp_path / "p.nsprof"
    os.mkfifo(fifo)
    proc = _start("capture", "--workload", "mlp:tokens=512,hidden=512,layers=2", "--num-exec", "3",
                  "-s", str(fifo))
    with open(fifo, "rb") as reader:
        reader.read(4096)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        reader.read()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.splitlines()[-2:] == ["neuron-profile: SIGTERM: writing the profile first (again to "
                                     "abort)", "neuron-profile: interrupted by SIGTERM"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.nsprof"]


@pytest.mark.parametrize("asked", [1, 3, 4, None])
def test_a_stop_leaves_every_rank_the_executions_of_the_round_placed(asked):
    """`stop()` is asked once every rank has placed an execution (rounds 1 to 4 of 5) and says
    stop the `asked`-th time: every rank keeps that many executions, and no more are placed."""
    asks: list[int] = []
    ticks: list[tuple[int, int]] = []

    def stop() -> bool:
        asks.append(ticks[-1][0])           # rank-executions placed when asked
        return len(asks) == asked
    profile = capture_workload("mlp:tokens=256,hidden=256,layers=4", instance("trn2.48xlarge"),
                               Placement(pp=4), num_exec=5, progress=lambda *t: ticks.append(t),
                               stop=stop)
    kept = asked or 5
    assert asks == [4 * r for r in range(1, min(kept, 4) + 1)]   # after every round but the last
    check_profile(fileformat.decode(fileformat.encode(profile)))
    assert profile.meta["num_exec"] == kept
    assert profile.meta.get("num_exec_requested") == (5 if asked else None)
    steps = profile.table("steps")["step"]
    for entry in profile.meta["ranks"]:
        a, b = entry["rows"]["steps"]
        assert steps[a:b].tolist() == list(range(1, kept + 1))
    assert ticks[-1] == (4 * kept, 4 * kept)           # the bar ends full at what was kept


def test_ctrl_c_stops_every_rank_after_the_round_being_placed(tmp_path):
    """On a terminal (the progress bar counts rank-executions), Ctrl-C once more than 10 of 40
    are placed (the first rank's tenth and last used to be placed by then, and a stop then did
    nothing): every rank keeps the executions of the round being placed, fewer than asked."""
    out = tmp_path / "x.nsprof"
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CLI, "capture", "--workload", "llama3-8b", "--tp", "8", "--pp", "4",
                             "--num-exec", "10", "--profile-nth-exec", "10", "--progress", "on",
                             "-s", str(out)], stdin=slave, stdout=slave, stderr=slave, cwd=ROOT,
                            env=dict(os.environ, TERM="xterm", COLUMNS="120"))
    os.close(slave)
    try:
        screen, sent_at = _stop_after(proc, master, 10)
        assert proc.wait(timeout=120) == 130, screen[-2000:]
    finally:
        os.close(master)
    assert sent_at is not None and "SIGINT: stopping after this round" in screen
    profile = fileformat.load(out)
    kept = profile.meta["num_exec"]
    assert sent_at // 4 <= kept < 10 and profile.meta["num_exec_requested"] == 10
    spans = [e["rows"]["steps"] for e in profile.meta["ranks"]]
    assert len(spans) == 4 and {b - a for a, b in spans} == {kept}


def _stop_after(proc: subprocess.Popen, master: int, executions: int) -> tuple[str, int | None]:
    """Read the terminal until the bar counts more than `executions` (the first rank is done),
    then send SIGINT; what the terminal showed, and the count it was sent at."""
    screen, sent = b"", None
    while True:
        ready, _, _ = select.select([master], [], [], 0.05)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 4096)
        except OSError:             # the terminal closed with the process
            break
        screen += chunk
        done = [int(d) for d in re.findall(rb"(\d+)/\d+", screen[-400:])]
        if sent is None and done and max(done) > executions:
            proc.send_signal(signal.SIGINT)
            sent = max(done)
    return screen.decode(errors="replace"), sent


# --- exports -----------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_during_a_trace_export_removes_it(four_ranks, tmp_path, sig):
    out = tmp_path / "t.json"
    proc = _start("view", "-s", str(four_ranks), "--output-format", "chrome", "--output-file",
                  str(out))
    assert _wait_for(lambda: any(p.name.startswith(".t.json.") for p in tmp_path.iterdir()))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert err == f"neuron-profile: interrupted by {signal.Signals(sig).name}\n"
    assert list(tmp_path.iterdir()) == []            # no trace, no temporary


def _temporary_folder(tmp_path: Path, name: str) -> Path | None:
    return next((p for p in tmp_path.iterdir() if p.name.startswith(f".{name}.")), None)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_rank_folder_export_leaves_no_folder(four_ranks, tmp_path, sig):
    """Stopped once the first rank's file is written: no folder (HTA would read a job with
    ranks missing), no temporary folder."""
    proc = _start("view", "-s", str(four_ranks), "--output-format", "chrome", "--output-file",
                  str(tmp_path / "t_trace"))

    def first_rank_written() -> bool:
        tmp = _temporary_folder(tmp_path, "t_trace")
        return tmp is not None and (tmp / "rank_0.pt.trace.json").exists()
    assert _wait_for(first_rank_written)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert list(tmp_path.iterdir()) == []


def test_a_rank_folder_export_replaces_an_earlier_one_whole(tmp_path):
    folder = tmp_path / "p_trace"
    folder.mkdir()
    (folder / "rank_99.json").write_text("{}")           # from a larger job exported before
    (folder / "rank_0.json.gz").write_text("")
    profile = tmp_path / "p.nsprof"
    fileformat.save(capture_workload("mlp:tokens=128,hidden=128,layers=2,microbatches=1",
                                     instance("trn2.48xlarge"), Placement(pp=2)), profile)
    res = subprocess.run([*CLI, "view", "-s", str(profile), "--output-format", "chrome"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["rank_0.pt.trace.json", "rank_1.pt.trace.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.nsprof", "p_trace"]
    assert orjson.loads((folder / "rank_1.pt.trace.json").read_bytes())["distributedInfo"]["rank"] == 1
    assert oct(folder.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("kind", ["foreign file", "non-ASCII digits", "file", "symlink to a file"])
def test_a_rank_folder_export_never_replaces_what_is_not_an_earlier_export(tmp_path, kind):
    profile = tmp_path / "p.nsprof"
    fileformat.save(capture_workload("mlp:tokens=128,hidden=128,layers=2,microbatches=1",
                                     instance("trn2.48xlarge"), Placement(pp=2)), profile)
    out = tmp_path / "out"
    if kind == "foreign file":
        out.mkdir()
        (out / "rank_0.json").write_text("{}")
        (out / "notes.txt").write_text("mine")
    elif kind == "non-ASCII digits":      # \d matched them: the replaced folder took this file
        out.mkdir()
        (out / "rank_\u0661.json").write_text("mine")
    elif kind == "file":
        out.write_text("mine")
    else:
        (tmp_path / "target").write_text("mine")
        out.symlink_to(tmp_path / "target")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    res = subprocess.run([*CLI, "view", "-s", str(profile), "--output-format", "chrome",
                          "--output-file", str(out)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("neuron-profile: error: cannot ")
    expected = {"foreign file": "'notes.txt'", "non-ASCII digits": "'rank_\u0661.json'"}
    assert expected.get(kind, "not a folder") in res.stderr
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def _matmul():
    return capture_workload("matmul:m=128,k=128,n=128", instance("trn2.48xlarge"))


# --- stdout ------------------------------------------------------------------------------------

def test_stdout_that_cannot_be_written_is_named(tmp_path):
    """A descriptor opened for reading as stdout (EBADF, as a full disk is ENOSPC): one line
    naming stdout, exit 2; a closed stdout likewise, not a traceback."""
    profile = tmp_path / "p.nsprof"
    fileformat.save(_matmul(), profile)
    with open(profile, "rb") as read_only:
        res = subprocess.run([*CLI, "view", "-s", str(profile)], stdout=read_only,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 2
    assert res.stderr == "neuron-profile: error: stdout: Bad file descriptor\n"
    res = subprocess.run(["bash", "-c", '"$@" >&-', "-", *CLI, "advise", "-s", str(profile)],
                         stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 2
    assert res.stderr == "neuron-profile: error: stdout: Bad file descriptor\n"


def test_a_reader_closing_the_pipe_stops_the_view_quietly(tmp_path):
    """`| head`: the reader goes away; no error, no traceback, exit 0."""
    profile = tmp_path / "p.nsprof"
    fileformat.save(_matmul(), profile)
    reader, writer = os.pipe()
    os.close(reader)
    try:
        res = subprocess.run([*CLI, "view", "-s", str(profile), "--output-format", "json"],
                             stdout=writer, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=60)
    finally:
        os.close(writer)
    assert res.returncode == 0 and res.stderr == ""


@pytest.mark.parametrize("fmt", ["summary-text", "json", "chrome", "perfetto"])
def test_output_file_dash_is_stdout(tmp_path, fmt):
    profile = tmp_path / "p.nsprof"
    fileformat.save(capture_workload("mlp:tokens=128,hidden=128,layers=2,microbatches=1",
                                     instance("trn2.48xlarge"), Placement(pp=2)), profile)
    res = subprocess.run([*CLI, "view", "-s", str(profile), "--output-format", fmt, "--output-file",
                          "-"], capture_output=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.nsprof"]       # no file named -
    if fmt == "chrome":       # several ranks on stdout: one trace of every rank, not a folder
        doc = orjson.loads(res.stdout)
        assert {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "kernel"} == {0, 1}
        assert res.stderr.decode().startswith("neuron-profile: wrote stdout (")
    elif fmt == "json":
        assert orjson.loads(res.stdout)["summary"]
    elif fmt == "summary-text":
        assert res.stdout.startswith(b"rank 0\n")
    else:
        assert len(res.stdout) > 1000


def test_a_stop_that_broke_a_lock_is_still_that_stop(monkeypatch, capsys):
    """SIGTERM raised inside threading's own lock code (the trace writer thread's start) came
    out as "RuntimeError: release unlocked lock", a traceback and exit 1, once in a full run;
    with the stop as its context it is the stop: one line, exit 128 + 15."""
    from profiler import cli

    def broken(args):
        try:
            raise cli.Stopped(signal.SIGTERM)
        except cli.Stopped:
            raise RuntimeError("release unlocked lock")
    monkeypatch.setattr(cli, "cmd_view", broken)
    assert cli.main(["view", "-s", "x.nsprof"]) == 128 + signal.SIGTERM
    assert capsys.readouterr().err == "neuron-profile: interrupted by SIGTERM\n"

    def unrelated(args):
        raise RuntimeError("a real bug")
    monkeypatch.setattr(cli, "cmd_view", unrelated)
    with pytest.raises(RuntimeError, match="a real bug"):
        cli.main(["view", "-s", "x.nsprof"])
