"""Where the exporters' Reports come from: a neuron-monitor JSON-lines stream or the collector.

Both CLIs read `neuron-monitor` output from stdin by default (ours, or AWS's on a real host), so
`neuron-monitor | neuron-monitor-prometheus` works either way; `--collect` runs the collector in
this process instead.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

from monitor.report import Report
from monitor.stream import DEFAULT_MAX_LINE_BYTES, ReportStream


class InputError(Exception):
    """The input cannot be opened (a usage or configuration problem: exit status 2)."""


def fd_lines(fd: int, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
             chunk: int = 1 << 16) -> Iterator[bytes]:
    """Lines read with os.read: no buffered-reader lock is held by a thread blocked on input
    (which would abort interpreter shutdown); a line over the limit is cut at the limit and the
    rest of it dropped, so memory stays bounded (the stream counts it as too_long)."""
    buf = bytearray()
    skipping = False
    while True:
        data = os.read(fd, chunk)
        if not data:
            if buf and not skipping:
                yield bytes(buf)
            return
        start = 0
        while (nl := data.find(b"\n", start)) >= 0:
            if not skipping:
                buf += data[start:nl + 1]
                yield bytes(buf)
            buf.clear()
            skipping = False
            start = nl + 1
        if not skipping:
            buf += data[start:]
            if len(buf) > max_line_bytes:
                yield bytes(buf)
                buf.clear()
                skipping = True


def watched_lines(lines: Iterable[bytes], after_each: Callable[[], None]) -> Iterator[bytes]:
    """`lines`, running `after_each` once the previous line has been handled.

    ReportStream swallows bad lines, so this is where the exporter learns a bad line was
    counted (its error counter moved) without waiting for the next good report.
    """
    for line in lines:
        yield line
        after_each()


def stdin_stream(fd: int, source: str, stderr: IO[str] | None,
                 after_each: Callable[[], None]) -> ReportStream:
    return ReportStream(watched_lines(fd_lines(fd), after_each), stderr=stderr, source=source)


def collector_reports(config_path: Path | None, clock: Callable[[], float] = time.time,
                      sleep: Callable[[float], None] = time.sleep,
                      monotonic: Callable[[], float] = time.monotonic) -> Iterator[Report]:
    """Reports from the in-process collector, one per base period of the configuration.

    Configuration and runtime-directory problems raise InputError here, before serving starts.
    """
    from monitor.collector import Collector  # imported on demand: stdin users do not need it
    from monitor.config import MonitorConfig

    try:
        config = MonitorConfig.from_file(config_path) if config_path else MonitorConfig.default()
        collector = Collector(config)
    except (OSError, ValueError) as exc:
        raise InputError(f"--collect: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    return _collect_forever(collector, config.base_period, clock, sleep, monotonic)


def _collect_forever(collector, tick: float, clock, sleep, monotonic) -> Iterator[Report]:
    next_at = monotonic() + tick  # like neuron-monitor: the first report covers one period
    try:
        while True:
            delay = next_at - monotonic()
            if delay > 0:
                sleep(delay)
            yield dataclasses.replace(collector.collect(), received_at=clock())
            # Skip ticks missed while suspended or overloaded instead of bursting to catch up.
            next_at += tick * max(1, int((monotonic() - next_at) // tick) + 1)
    finally:
        collector.close()


def default_stdin() -> int:
    return sys.stdin.fileno()
