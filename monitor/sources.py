"""Where a sink's Reports come from: a neuron-monitor JSON stream, a recorded replay, a list.

A Source is iterated in a background worker thread; a UI never calls it. ``close()`` may be
called from any thread and makes ``reports()`` return promptly (reads poll a stop event), so
quitting never waits on a silent pipe. Sources that collect in this process (the local simulated
instance, the demo) are in live.py.

The exporters read stdin through ``stdin_stream``: `neuron-monitor | neuron-monitor-prometheus`
works with ours or with AWS's tool on a real host.
"""
from __future__ import annotations

import io
import os
import pathlib
import stat
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator
from typing import IO

from monitor.errors import InputError
from monitor.lines import fd_lines, source_lines, watched_lines
from monitor.report import Report
from monitor.stream import DEFAULT_MAX_LINE_BYTES, ReportStream

__all__ = ["Source", "StreamSource", "ReplaySource", "ListSource", "report_interval",
           "stdin_stream", "default_stdin"]


class Source(ABC):
    """An iterable of Reports with a label for the status bar and malformed-line counts."""

    label: str = "source"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._stream: ReportStream | None = None
        self.diagnostics = io.StringIO()  # the stream's one-line notices, kept out of the screen

    @abstractmethod
    def reports(self) -> Iterator[Report]:
        """Yield Reports until the input ends or ``close()`` is called."""

    @property
    def malformed(self) -> Counter[str]:
        return Counter(self._stream.errors) if self._stream is not None else Counter()

    @property
    def rejections(self) -> list[str]:
        """The first few rejected lines' reasons (escaped, one line each), for a screen."""
        return list(self._stream.rejections) if self._stream is not None else []

    # Whether the end of this source means its producer died (a neuron-monitor pipe, the
    # collector) rather than a file read to its end: sinks then exit non-zero.
    live: bool = True

    def close(self) -> None:
        self._stop.set()

    @property
    def closed(self) -> bool:
        return self._stop.is_set()


class StreamSource(Source):
    """A live neuron-monitor JSON stream: stdin, a pipe, a FIFO or a file, read once to its end."""

    def __init__(self, fd: int, label: str, clock: Callable[[], float] = time.time,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        super().__init__()
        self._fd = fd
        self.label = label
        self._clock = clock
        self._max = max_line_bytes
        try:
            self.live = not stat.S_ISREG(os.fstat(fd).st_mode)
        except OSError:
            self.live = True

    def reports(self) -> Iterator[Report]:
        self._stream = ReportStream(source_lines(self._fd, self._stop, self._max),
                                    clock=self._clock, stderr=self.diagnostics, source=self.label,
                                    max_line_bytes=self._max)
        yield from self._stream


def report_interval(report: Report) -> float:
    """Wall seconds between this report and the one before, to pace a replay and judge
    staleness: the shortest period among its groups (the group whose period made the monitor
    write; the others may be on longer periods of their own), else neuron-monitor's 5 s default.
    A sped-up simulation (``neuron-sim --speed X``, X > 1) gives its counter groups the longer
    simulated time they cover, so the shortest is still a wall-clock group's where it has one
    (docs/neuron-monitor.md)."""
    system = report.system
    groups = [g for r in report.runtimes
              for g in (r.vcpu, r.neuroncore_counters, r.execution_stats, r.memory_used)]
    groups += [system.vcpu, system.memory, system.hw_counters]
    return min((g.period for g in groups if g is not None and g.period), default=5.0)


class ReplaySource(Source):
    """A recorded stream played back at ``speed`` x the pace its periods say; optionally looped."""

    def __init__(self, path: pathlib.Path, speed: float = 1.0, loop: bool = False,
                 label: str | None = None, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self._path = path
        self._speed = speed
        self._loop = loop
        self._clock = clock
        self.label = label or f"replay {path.name} x{speed:g}"

    live = False

    def reports(self) -> Iterator[Report]:
        first = True
        while not self._stop.is_set():
            with open(self._path, "rb") as handle:
                self._stream = ReportStream(source_lines(handle.fileno(), self._stop),
                                            clock=self._clock, stderr=self.diagnostics,
                                            source=self.label)
                for report in self._stream:
                    if not first and self._stop.wait(report_interval(report) / self._speed):
                        return
                    first = False
                    yield report
            # A pass without one valid report would only spin: looping stops there.
            if not self._loop or self._stream.reports == 0:
                return


class ListSource(Source):
    """Reports already in memory (tests, benchmarks); optionally stalls after the last one."""

    live = False

    def __init__(self, reports: list[Report], label: str = "reports", hold_open: bool = False) -> None:
        super().__init__()
        self._reports = reports
        self.label = label
        self._hold_open = hold_open

    def reports(self) -> Iterator[Report]:
        for report in self._reports:
            if self._stop.is_set():
                return
            yield report
        while self._hold_open and not self._stop.wait(0.1):
            pass


def stdin_stream(fd: int, source: str, stderr: IO[str] | None,
                 after_each: Callable[[], None]) -> ReportStream:
    """The exporters' input: a blocking read of ``fd`` to its end, ``after_each`` after each line."""
    return ReportStream(watched_lines(fd_lines(fd), after_each), stderr=stderr, source=source)


def default_stdin() -> int:
    """The descriptor of stdin; InputError when the process was started with it closed."""
    if sys.stdin is None:
        raise InputError("stdin is closed: pipe neuron-monitor's output into this command "
                         "(or use --collect)")
    return sys.stdin.fileno()
