"""Lines from a file descriptor: the one reader under every neuron-monitor stream consumer.

Reads with ``os.read``, so no buffered-reader lock is held by a thread blocked on input (which
would abort interpreter shutdown). A line over ``max_line_bytes`` is cut at the limit and the rest
of it dropped, so memory stays bounded; ReportStream then counts it as too_long. With ``stop``,
the reader polls (pipes, FIFOs) and returns promptly once the event is set, so a consumer can
quit without waiting on a silent writer.
"""
from __future__ import annotations

import os
import selectors
import threading
from collections.abc import Callable, Iterable, Iterator

from monitor.stream import DEFAULT_MAX_LINE_BYTES

__all__ = ["fd_lines", "without_newlines", "source_lines", "watched_lines"]


def fd_lines(fd: int, stop: threading.Event | None = None, *,
             max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES, chunk: int = 1 << 16,
             poll_seconds: float = 0.2) -> Iterator[bytes]:
    """Each line read from ``fd`` with its newline (the last one without, if it has none), until
    end of input or ``stop`` is set. ``max_line_bytes=None`` keeps lines whole."""
    buf = bytearray()
    skipping = False
    for data in _chunks(fd, stop, chunk, poll_seconds):
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
            if max_line_bytes is not None and len(buf) > max_line_bytes:
                yield bytes(buf)
                buf.clear()
                skipping = True
    if buf and not skipping and not (stop is not None and stop.is_set()):
        yield bytes(buf)


def _chunks(fd: int, stop: threading.Event | None, chunk: int,
            poll_seconds: float) -> Iterator[bytes]:
    if stop is None:
        while data := os.read(fd, chunk):
            yield data
        return
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, selectors.EVENT_READ)
            ready: Callable[[], object] = lambda: selector.select(poll_seconds)  # noqa: E731
        except (PermissionError, ValueError):  # regular files cannot be polled; they never block
            ready = lambda: True  # noqa: E731
        while not stop.is_set():
            if not ready():
                continue
            data = os.read(fd, chunk)
            if not data:
                return
            yield data


def without_newlines(lines: Iterable[bytes]) -> Iterator[bytes]:
    for line in lines:
        yield line[:-1] if line.endswith(b"\n") else line


def source_lines(fd: int, stop: threading.Event,
                 max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES) -> Iterator[bytes]:
    """What neuron-top's sources read: lines without their newline, until ``stop``. A line over
    ``max_line_bytes`` (the exporter's limit) is cut there and the rest dropped, so a writer
    that never sends a newline cannot grow memory without bound."""
    return without_newlines(fd_lines(fd, stop, max_line_bytes=max_line_bytes, chunk=1 << 20))


def watched_lines(lines: Iterable[bytes], after_each: Callable[[], None]) -> Iterator[bytes]:
    """`lines`, running `after_each` once the previous line has been handled.

    ReportStream swallows bad lines, so this is where a consumer learns a bad line was counted
    (its error counter moved) without waiting for the next good report.
    """
    for line in lines:
        yield line
        after_each()
