"""`neuron-monitor`: one neuron-monitor JSON document per line on stdout, per period.

Same flags as AWS's tool (``-c/--config-file``, ``--verbose``) plus ``--root`` (the runtime
directory of a simulated instance), ``--record FILE`` (also append the stream to FILE for replay)
and ``--count N`` (stop after N reports). Reports are flushed one by one, so a consumer reading
line by line (neuron-monitor-prometheus, neuron-top) sees each as soon as it is written.

Exit status: 0 after --count reports, SIGINT/SIGTERM or a closed stdout; 1 when --record cannot
be written (a full disk); 2 for usage and configuration errors. Never a traceback.
"""
from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, BinaryIO

from device_model import __version__
from device_model.runtime.shm import RuntimeDirError, runtime_dir
from monitor.collector import Collector
from monitor.config import MonitorConfig
from monitor.errors import ConfigError
from monitor.loop import collect_every
from monitor.report import Report
from monitor.stdout import open_append, silence_stdout, stderr_or_null, write_all
from device_model.cliargs import positive_int as _positive

__all__ = ["main", "build_parser", "run_loop"]

PROG = "neuron-monitor"


class _Stop(Exception):
    """Raised by the signal handler to leave the loop while it waits for the next tick."""


class _Signals:
    """SIGINT/SIGTERM end the loop: at once while it sleeps, otherwise after the current
    report is written whole (a consumer never receives half a line)."""

    def __init__(self) -> None:
        self.stop = False
        self.sleeping = False

    def handle(self, signum: int, frame: object) -> None:
        self.stop = True
        if self.sleeping:
            raise _Stop()

    def sleep(self, seconds: float) -> None:
        self.sleeping = True
        try:
            if not self.stop:
                time.sleep(seconds)
        finally:
            self.sleeping = False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Print one neuron-monitor JSON report per line, per period, for "
        "the Neuron runtimes of the simulated instance and this host.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    p.add_argument("-c", "--config-file", metavar="CONFIG",
                   help="JSON config: period, neuron_runtimes[] (tag_filter, metrics), "
                   "system_metrics (default: every group every 5 s)")
    p.add_argument("--verbose", type=int, default=0, choices=range(5), metavar="N",
                   help="log detail on stderr, 0 (default) to 4")
    p.add_argument("--root", metavar="DIR", type=Path,
                   help="runtime directory of the simulated instance (default: per-user directory)")
    p.add_argument("--record", metavar="FILE", type=Path,
                   help="also append every report to FILE (JSON lines, for replay)")
    p.add_argument("--count", metavar="N", type=_positive,
                   help="stop after N reports (default: run until interrupted)")
    return p


def main(argv: list[str] | None = None) -> int:
    stderr_or_null()          # before anything could print a diagnostic
    try:
        return _main(argv)
    except KeyboardInterrupt:   # Ctrl-C before the loop's handler: opening a FIFO config or record
        return 128 + signal.SIGINT


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if sys.stdout is None:      # started with stdout closed (`>&-`)
        return _fail("stdout is closed: nowhere to write the reports", 2)
    try:
        config = (MonitorConfig.from_file(args.config_file) if args.config_file is not None
                  else MonitorConfig.default())
        if args.root is not None and not os.path.lexists(args.root):  # looking must not create it
            return _fail(f"no simulated instance at {args.root}", 1)
        if args.root is not None:
            runtime_dir(args.root)  # validate now: an unsafe directory is a usage error
    except (ConfigError, RuntimeDirError) as exc:
        return _fail(f"{exc}", 2)
    try:
        record = _open_record(args.record) if args.record else None
    except OSError as exc:
        return _fail(f"cannot open --record file {str(args.record)!r}: {exc.strerror}", 2)
    log = _logger(args.verbose)
    signals = _Signals()
    previous = [signal.signal(s, signals.handle) for s in (signal.SIGINT, signal.SIGTERM)]
    try:
        collector = Collector(config, root=args.root)
        log(1, f"collecting every {collector.config.base_period:g} s from "
               f"{runtime_dir(args.root)}")
        return run_loop(collector, sys.stdout.buffer, record, args.count, log,
                        sleep=signals.sleep, stopped=lambda: signals.stop)
    except _Stop:
        return 0
    except RuntimeDirError as exc:
        return _fail(str(exc), 1)
    finally:
        for sig, handler in zip((signal.SIGINT, signal.SIGTERM), previous):
            signal.signal(sig, handler)
        if record is not None:
            _close_quietly(record)


def run_loop(collector: Collector, out: BinaryIO, record: BinaryIO | None, count: int | None,
             log: Callable[[int, str], None], sleep: Callable[[float], None] = time.sleep,
             clock: Callable[[], float] = time.monotonic,
             stopped: Callable[[], bool] = lambda: False) -> int:
    """Collect on every tick of the config's base period and write each report as one line."""
    timed = _Timed(collector, clock)
    reports = collect_every(timed, collector.config.base_period, clock, sleep, stopped=stopped)
    written = 0
    pids: set[int] = set()
    removed, corrupt = collector.removed, collector.corrupt
    unmatched = UnmatchedFilters(collector.config)
    while count is None or written < count:
        report = next(reports, None)
        if report is None:
            return 0
        if collector.quiet:
            continue        # nothing was due (a tick woke up late): no empty report
        line = report.to_json() + b"\n"
        log(2, f"report {written + 1}: {len(report.runtimes)} runtimes, {len(line)} bytes, "
               f"{(clock() - timed.started) * 1e3:.2f} ms")
        now_pids = {r.pid for r in report.runtimes}
        for pid in sorted(now_pids - pids):
            log(1, f"runtime {pid} reported")
        if collector.removed > removed:
            log(1, f"removed {collector.removed - removed} counter file(s) of dead runtimes")
        if collector.corrupt > corrupt:
            log(1, f"{collector.corrupt - corrupt} runtime(s) with unreadable counters")
        for pattern in unmatched.check(collector.tags.values()):
            print(f"{PROG}: warning: tag_filter {pattern!r} matches none of the running runtimes "
                  f"({', '.join(sorted(set(collector.tags.values())))})", file=sys.stderr, flush=True)
        pids |= now_pids
        removed, corrupt = collector.removed, collector.corrupt
        status = _write(out, line, record)
        if status is not None:
            return status
        written += 1
    return 0


class UnmatchedFilters:
    """The config's tag filters that match none of the runtimes found when runtimes are first
    seen: a filter that selects nothing is almost always a mistake, said once per filter."""

    def __init__(self, config: MonitorConfig) -> None:
        self._pending = [s for s in config.runtimes if s.tag_filter is not None]

    def check(self, tags) -> list[str]:
        tags = list(tags)
        if not tags or not self._pending:
            return []
        found = [s.tag_filter.pattern for s in self._pending if not any(s.matches(t) for t in tags)]
        self._pending = []
        return found


class _Timed:
    """The collector, noting when each collection started (for the verbose timing line)."""

    def __init__(self, collector: Collector, clock: Callable[[], float]) -> None:
        self._collector = collector
        self._clock = clock
        self.started = 0.0

    def collect(self) -> Report:
        self.started = self._clock()
        return self._collector.collect()


def _write(out: BinaryIO, line: bytes, record: BinaryIO | None) -> int | None:
    """Write one report; a status to exit with when the stream cannot go on, else None."""
    try:
        write_all(out, line)
        out.flush()
    except BrokenPipeError:
        silence_stdout()
        print(f"{PROG}: stdout was closed by the reader; stopping", file=sys.stderr)
        return 0
    except OSError as exc:
        silence_stdout()
        return _fail(f"cannot write to stdout: {exc.strerror or exc}; stopping", 1)
    if record is not None:
        try:
            write_all(record, line)
            record.flush()
        except OSError as exc:
            reason = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) \
                else (exc.strerror or str(exc))
            name = getattr(record, "path", record.name)  # the path given, not a descriptor number
            return _fail(f"cannot write --record file {str(name)!r}: {reason}; stopping", 1)
    return None


def _open_record(path: Path) -> BinaryIO:
    # Appending keeps earlier recordings; a recording is replayable line by line at any point.
    fh = open_append(path, buffering=0)
    fh.path = os.fspath(path)  # type: ignore[attr-defined]  (errors name it, not "fd 3")
    return fh


def _close_quietly(fh: IO[bytes]) -> None:
    try:
        fh.close()
    except OSError:
        pass


def _logger(level: int) -> Callable[[int, str], None]:
    def log(at: int, message: str) -> None:
        if at <= level:
            print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    return log


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
