"""Where the exporters' Reports come from: a neuron-monitor JSON-lines stream or the collector.

Both CLIs read `neuron-monitor` output from stdin by default (ours, or AWS's on a real host), so
`neuron-monitor | neuron-monitor-prometheus` works either way; `--collect` runs the collector in
this process instead.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

from monitor.report import Report
from monitor.stream import ReportStream


class InputError(Exception):
    """The input cannot be opened (a usage or configuration problem: exit status 2)."""


def watched_lines(binary: IO[bytes], after_each: Callable[[], None]) -> Iterator[bytes]:
    """Lines of `binary`; `after_each` runs once the previous line has been handled.

    ReportStream swallows bad lines, so this is where the exporter learns a bad line was
    counted (its error counter moved) without waiting for the next good report.
    """
    for line in iter(binary.readline, b""):
        yield line
        after_each()


def stdin_stream(binary: IO[bytes], source: str, stderr: IO[str] | None,
                 after_each: Callable[[], None]) -> ReportStream:
    return ReportStream(watched_lines(binary, after_each), stderr=stderr, source=source)


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


def default_stdin() -> IO[bytes]:
    return sys.stdin.buffer
