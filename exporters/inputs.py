"""Where the exporters' Reports come from: a neuron-monitor JSON-lines stream or the collector.

Both CLIs read `neuron-monitor` output from stdin by default (ours, or AWS's on a real host), so
`neuron-monitor | neuron-monitor-prometheus` works either way; `--collect` runs the collector in
this process instead.
"""
from __future__ import annotations

import importlib
import os
import sys
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


def collector_reports(config: Path | None) -> Iterable[Report]:
    """Reports from the in-process collector (monitor.collector), one per period."""
    try:
        collector = importlib.import_module("monitor.collector")
    except ImportError as exc:
        raise InputError(f"--collect needs the monitor collector, which is not available ({exc})")
    reports = getattr(collector, "iter_reports", None)
    if reports is None:
        raise InputError("--collect: monitor.collector has no iter_reports(config_path)")
    try:
        return reports(config)
    except (OSError, ValueError) as exc:
        raise InputError(f"--collect: {exc}".splitlines()[0]) from None


def default_stdin() -> int:
    return sys.stdin.fileno()
