"""A long estimate shows its progress on a terminal, and nowhere else."""
from __future__ import annotations

import io
import os
import pty
import subprocess
import sys

from device_model import instance, progress
from device_model.progress import TerminalLine
from device_model.workloads import Placement, estimate

DECODE = "llama3.1-8b:mode=decode,in=128,out=1000,tkg_bucket=128"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_decode_reports_each_token_generation_bucket_it_simulates():
    seen: list[tuple[str, int, int]] = []
    with progress.reporting(lambda *step: seen.append(step)):
        r = estimate(DECODE, instance("trn2.48xlarge"), Placement(tp=8))
    n = len(r["decode_buckets"])
    assert n == 8 and seen == [("token-generation buckets", i, n) for i in range(1, n + 1)]
    # outside the block nobody hears: a library caller pays for no reporter
    progress.step("token-generation buckets", 1, 1)
    assert len(seen) == n


def test_the_terminal_line_waits_throttles_and_erases_itself():
    clock, out = Clock(), Terminal()
    line = TerminalLine(out, clock, delay=1.0, interval=0.1)
    line("buckets", 1, 1024)                       # a quick run draws nothing
    assert out.getvalue() == ""
    line.close()
    assert out.getvalue() == ""
    clock.now += 1.5
    line("buckets", 300, 1024)
    assert out.getvalue() == "\rneuron-sim: simulating buckets 300/1,024\033[K"
    clock.now += 0.05
    line("buckets", 301, 1024)                     # within the interval: not redrawn
    line("buckets", 1024, 1024)                    # but the last one is
    assert out.getvalue().endswith("\rneuron-sim: simulating buckets 1,024/1,024\033[K")
    assert out.getvalue().count("\r") == 2
    line.close()
    assert out.getvalue().endswith("\r\033[K")


def test_the_terminal_line_is_silent_off_a_terminal_and_survives_a_lost_one():
    clock = Clock()
    plain = io.StringIO()
    line = TerminalLine(plain, clock, delay=0.0)
    line("buckets", 1, 2)
    line.close()
    assert plain.getvalue() == ""
    assert TerminalLine(None, clock)._live is False        # stderr closed at start: None

    class Gone(Terminal):
        def write(self, text: str) -> int:
            raise OSError(5, "Input/output error")

    lost = TerminalLine(Gone(), clock, delay=0.0)
    lost("buckets", 1, 2)                                   # no error: the run goes on
    lost("buckets", 2, 2)
    lost.close()
    closed = open(os.devnull, "w")
    closed.close()                                          # isatty() raises ValueError
    assert TerminalLine(closed, clock)._live is False


def test_the_cli_on_a_terminal_shows_progress_and_leaves_a_clean_report(tmp_path):
    """In a real pseudo-terminal: a run of several seconds (94 buckets) draws its progress on
    stderr and erases it; the report on stdout carries none of it."""
    spec = "llama3.1-8b:mode=decode,in=128,out=12000,tkg_bucket=128"
    argv = [sys.executable, "-m", "device_model.cli", "estimate", "-w", spec, "-i",
            "trn2.48xlarge", "--tp", "8"]
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=terminal, text=True,
                              timeout=120)
        os.close(terminal)
        terminal = -1
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:                         # the terminal's other end is closed
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if terminal != -1:
            os.close(terminal)
        os.close(controller)
    assert proc.returncode == 0 and proc.stdout.startswith(spec + "\n")
    assert "time/output token" in proc.stdout and not set("\r\033") & set(proc.stdout)
    text = shown.decode()
    assert "neuron-sim: simulating token-generation buckets 94/94" in text
    assert text.endswith("\r\033[K")
