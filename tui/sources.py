"""Where Reports come from: a neuron-monitor stream, a recorded replay, the demo instance.

A Source is iterated in a background worker thread; the UI never calls it. ``close()`` may be
called from any thread and makes ``reports()`` return promptly (reads poll a stop event), so
quitting never waits on a silent pipe.
"""
from __future__ import annotations

import io
import os
import pathlib
import selectors
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator

from monitor.report import Report
from monitor.stream import ReportStream

DEMO_STREAM = pathlib.Path(__file__).with_name("demo_stream.jsonl")
_CHUNK = 1 << 20


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

    def close(self) -> None:
        self._stop.set()

    @property
    def closed(self) -> bool:
        return self._stop.is_set()


def fd_lines(fd: int, stop: threading.Event, poll_seconds: float = 0.2) -> Iterator[bytes]:
    """Lines from a file descriptor as they arrive (pipe, FIFO, file), checking ``stop`` between polls."""
    pending = b""
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, selectors.EVENT_READ)
            wait = lambda: selector.select(poll_seconds)  # noqa: E731
        except (PermissionError, ValueError):  # regular files cannot be polled; they never block
            wait = lambda: True  # noqa: E731
        while not stop.is_set():
            if not wait():
                continue
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            yield from lines
    if pending and not stop.is_set():
        yield pending


class StreamSource(Source):
    """A live neuron-monitor JSON stream: stdin, a pipe, a FIFO or a file, read once to its end."""

    def __init__(self, fd: int, label: str, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self._fd = fd
        self.label = label
        self._clock = clock

    def reports(self) -> Iterator[Report]:
        self._stream = ReportStream(fd_lines(self._fd, self._stop), clock=self._clock,
                                    stderr=self.diagnostics, source=self.label)
        yield from self._stream


def report_interval(report: Report) -> float:
    """Seconds this report covers: the first group period found, else neuron-monitor's 5 s default."""
    for runtime in report.runtimes:
        for group in (runtime.neuroncore_counters, runtime.execution_stats, runtime.vcpu):
            if group is not None and group.period > 0:
                return group.period
    system = report.system
    for group in (system.vcpu, system.memory, system.hw_counters):
        if group is not None and group.period > 0:
            return group.period
    return 5.0


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

    def reports(self) -> Iterator[Report]:
        first = True
        while not self._stop.is_set():
            with open(self._path, "rb") as handle:
                self._stream = ReportStream(fd_lines(handle.fileno(), self._stop),
                                            clock=self._clock, stderr=self.diagnostics,
                                            source=self.label)
                for report in self._stream:
                    if not first and self._stop.wait(report_interval(report) / self._speed):
                        return
                    first = False
                    yield report
            if not self._loop:
                return


def demo_source(clock: Callable[[], float] = time.time) -> Source:
    """The default simulated instance: the recorded trn2.48xlarge stream bundled with neuron-top."""
    return ReplaySource(DEMO_STREAM, loop=True, clock=clock,
                        label="demo: recorded trn2.48xlarge stream")


class ListSource(Source):
    """Reports already in memory (tests, benchmarks); optionally stalls after the last one."""

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


def live_config(period_s: float = 1.0):
    """Every runtime and system group at one period: what neuron-top shows."""
    from monitor.config import RUNTIME_GROUPS, SYSTEM_GROUPS, MonitorConfig
    return MonitorConfig.from_dict({
        "period": f"{int(period_s * 1000)}ms",
        "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": g} for g in RUNTIME_GROUPS]}],
        "system_metrics": [{"type": g} for g in SYSTEM_GROUPS],
    })


class CollectorSource(Source):
    """Reports collected in-process from the simulated instance's runtimes under ``root``."""

    def __init__(self, root: pathlib.Path | None = None, *, period_s: float = 1.0,
                 label: str = "local simulated instance",
                 on_close: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.root = root
        self.period_s = period_s
        self.label = label
        self._on_close = on_close

    def reports(self) -> Iterator[Report]:
        from monitor.collector import Collector
        collector = Collector(live_config(self.period_s), root=self.root)
        try:
            while not self._stop.is_set():
                yield collector.collect()
                self._stop.wait(self.period_s)
        finally:
            collector.close()

    def close(self) -> None:
        super().close()
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close()


def local_instance_source() -> Source | None:
    """The simulated instance `neuron-sim start` left running for this user, if any."""
    from device_model.runtime.shm import read_instance
    try:
        desc = read_instance(None)
    except (OSError, ValueError):
        return None
    if desc is None:
        return None
    return CollectorSource(None, label=f"local simulated {desc.instance_type}")


def simulated_demo_source(instance_name: str = "trn2.48xlarge", seed: int = 0) -> Source:
    """Start the default simulated instance (a Llama training job and an inference service) in a
    private runtime directory, show it, and stop it when the source closes."""
    import shutil
    import tempfile

    from device_model import instance
    from device_model.runtime.launcher import cleanup, launch, plan, terminate

    root = pathlib.Path(tempfile.mkdtemp(prefix="neuron-top-demo-"))
    os.chmod(root, 0o700)
    try:
        desc, procs = launch(plan(instance(instance_name), [], []), root, seed, 1.0)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise

    def stop() -> None:
        terminate(procs)
        cleanup(root)
        shutil.rmtree(root, ignore_errors=True)

    return CollectorSource(root, label=f"demo: simulated {desc.instance_type}", on_close=stop)
