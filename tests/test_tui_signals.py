"""SIGTERM ends neuron-top as q does at every stage (the demo starting, -1 waiting, a replay at
a huge --speed), and a fast source is read no faster than the screen takes it."""
from __future__ import annotations

import fcntl
import os
import pathlib
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

from monitor.report import Report
from monitor.sources import ReplaySource, Source
from tests.test_demo_owner import _drain
from tests.test_tui_support import AWS_EXAMPLE, FIXED_NOW, run_async, settle
from tui.app import REPLAY_MIN_GAP, NeuronTopApp

ROOT = pathlib.Path(__file__).resolve().parent.parent


def in_terminal(*args: str, env: dict | None = None) -> tuple[subprocess.Popen, int]:
    """neuron-top on an 80x24 pseudo-terminal; returns the process and the pty's master end."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", **(env or {})}
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    proc = subprocess.Popen([sys.executable, "-m", "tui.cli", *args], stdin=slave, stdout=slave,
                            stderr=slave, env=env, cwd=ROOT, start_new_session=True)
    os.close(slave)
    threading.Thread(target=_drain, args=(master,), daemon=True).start()
    return proc, master


def ended(proc: subprocess.Popen, master: int, timeout: float) -> int | None:
    """The exit status within ``timeout`` seconds, else None (the process is then killed)."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def runtime_processes_under(root: str) -> list[int]:
    """Processes whose command line names ``root`` (the demo's runtimes)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and root.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.mark.slow
def test_sigterm_while_the_demo_starts_removes_its_directory(tmp_path):
    """The signal lands while the runtimes start (before the screen, which took ~1.2 s): the
    runtimes are stopped, the private directory removed, exit status 143."""
    proc, master = in_terminal("--demo", env={"TMPDIR": str(tmp_path)})
    roots: list[pathlib.Path] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not roots and proc.poll() is None:
        roots = list(tmp_path.glob("neuron-top-demo-*"))
        time.sleep(0.005)
    assert roots, "neuron-top --demo created no runtime directory"
    proc.send_signal(signal.SIGTERM)
    status = ended(proc, master, 30)
    assert status == 128 + signal.SIGTERM
    assert not list(tmp_path.glob("neuron-top-demo-*")), "the demo directory was left behind"
    assert runtime_processes_under(str(roots[0])) == []


def test_sigterm_while_dash_1_waits_for_a_first_report_exits_143():
    read_fd, write_fd = os.pipe()   # a live stream that has not sent a line yet
    proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "-1", "-"], stdin=read_fd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    os.close(read_fd)
    try:
        time.sleep(1.0)   # past the imports, blocked on the pipe
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        os.close(write_fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM
    assert b"Traceback" not in err


def _opening_a_fifo(pid: int, deadline: float) -> bool:
    """The process sits in open() of a FIFO no one writes to (Linux's wait for its partner)."""
    while time.monotonic() < deadline:
        try:
            if pathlib.Path(f"/proc/{pid}/wchan").read_text() == "wait_for_partner":
                return True
        except OSError:
            return False
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("command", [
    [sys.executable, "-m", "tui.cli", "-1", "--input"],
    [sys.executable, "-m", "monitor.cli", "--count", "1", "-c"],
    [sys.executable, "-m", "monitor.cli", "--count", "1", "--record"],
], ids=["neuron-top", "neuron-monitor-config", "neuron-monitor-record"])
def test_ctrl_c_while_a_fifo_opens_exits_130_without_a_traceback(tmp_path, command):
    """Opening a named pipe waits for its writer (or reader): Ctrl-C there printed a
    KeyboardInterrupt traceback and died of the signal."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}
    proc = subprocess.Popen([*command, str(fifo)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=ROOT, env=env)
    try:
        if not _opening_a_fifo(proc.pid, time.monotonic() + 60):
            pytest.skip("cannot see the process wait in open() (/proc/PID/wchan)")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert b"Traceback" not in err


@pytest.mark.slow
def test_replay_at_a_huge_speed_stays_small_idles_and_ends_on_sigterm(tmp_path):
    """--speed=1e12 --loop (the audit's case, with 1e6 or inf: 100% CPU, 2.6 GB in 10 min,
    SIGTERM ignored)."""
    path = tmp_path / "good.jsonl"
    path.write_bytes(AWS_EXAMPLE.read_bytes().strip() + b"\n")
    proc, master = in_terminal("--replay", str(path), "--speed=1e12", "--loop")
    time.sleep(1.5)   # started, replaying
    rss, cpu, started = rss_kib(proc.pid), cpu_seconds(proc.pid), time.monotonic()
    time.sleep(1.5)
    grown = rss_kib(proc.pid) - rss
    busy = (cpu_seconds(proc.pid) - cpu) / (time.monotonic() - started)
    proc.send_signal(signal.SIGTERM)
    status = ended(proc, master, 10)
    assert status == 128 + signal.SIGTERM, "SIGTERM did not end a replay at --speed=1e12"
    assert grown < 2 * 1024, f"grew by {grown} KiB in 1.5 s"
    assert busy < 0.6, f"{busy:.0%} of a CPU"


class FastSource(Source):
    """The same report ``count`` times as fast as it is asked for, counting how many were read,
    then silent until closed (bounded, so that an app that floods itself fails, not hangs)."""

    live = False

    def __init__(self, report: Report, count: int = 3000) -> None:
        super().__init__()
        self.label, self.report, self.count, self.read = "fast", report, count, 0

    def reports(self):
        while not self.closed and self.read < self.count:
            self.read += 1
            yield self.report
        self._stop.wait()


@run_async
async def test_a_source_is_read_no_further_ahead_than_one_report():
    source = FastSource(Report.from_json(AWS_EXAMPLE.read_bytes()))
    app = NeuronTopApp(source, clock=lambda: FIXED_NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        ahead = []
        for _ in range(10):   # each while the source still has reports to give
            await pilot.pause(0.02)
            ahead.append(source.read - app.reports_seen)
        # one report on its way to the app, one read by the worker and waiting for it (the
        # worker posted them all at once: thousands queued, the event loop starved)
        assert max(ahead) <= 2 and source.read < source.count
        await pilot.press("q")
    assert source.closed


@run_async
async def test_a_replay_at_any_speed_shows_at_most_one_report_per_min_gap(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(AWS_EXAMPLE.read_bytes().strip() + b"\n")
    app = NeuronTopApp(ReplaySource(path, speed=1e9, loop=True), clock=lambda: FIXED_NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        seen, started = app.reports_seen, time.monotonic()
        await pilot.pause(0.5)
        shown = app.reports_seen - seen
    assert 1 <= shown <= (time.monotonic() - started) / REPLAY_MIN_GAP + 2


@run_async
async def test_a_signal_before_the_app_took_them_over_ends_it_on_mount():
    source = FastSource(Report.from_json(AWS_EXAMPLE.read_bytes()))
    app = NeuronTopApp(source, clock=lambda: FIXED_NOW, early_signal=lambda: signal.SIGTERM)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.1)
    assert app.return_code == 128 + signal.SIGTERM
    assert source.closed and source.read == 0
