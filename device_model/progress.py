"""Progress of a long estimate, for a caller that shows it.

A decode over many token-generation buckets simulates one program per bucket: up to 1,024 of
them, tens of seconds. The loops that take that long call `step`; a caller that wants to show
progress installs a reporter for the span of its call with `reporting`, and no caller pays for
what it does not install (the library, tests and `--json` runs see nothing). `TerminalLine` is
the CLI's reporter: one line on a terminal's stderr, drawn only once a run has taken a while,
rewritten in place and erased at the end, so a quick run and a redirected stderr print nothing.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, TextIO

Reporter = Callable[[str, int, int], None]      # (what, done, total)

_reporter: ContextVar[Reporter | None] = ContextVar("neuronscope_progress", default=None)


def step(what: str, done: int, total: int) -> None:
    """`done` of `total` units of `what` are finished (the installed reporter's business)."""
    reporter = _reporter.get()
    if reporter is not None:
        reporter(what, done, total)


@contextmanager
def reporting(reporter: Reporter) -> Iterator[None]:
    """`reporter` receives the steps of the calls made inside the block."""
    token = _reporter.set(reporter)
    try:
        yield
    finally:
        _reporter.reset(token)


class TerminalLine:
    """`neuron-sim: simulating token-generation buckets 312/1,024` on a terminal, after `delay`
    seconds and at most every `interval` seconds, erased by `close`. Silent where `stream` is
    no terminal (a log file would keep every rewrite)."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic,
                 delay: float = 1.0, interval: float = 0.1) -> None:
        self._stream, self._clock = stream, clock
        self._delay, self._interval = delay, interval
        self._start = clock()
        self._drawn_at: float | None = None
        try:
            self._live = bool(stream is not None and stream.isatty())
        except (OSError, ValueError):     # a closed stream
            self._live = False

    def __call__(self, what: str, done: int, total: int) -> None:
        if not self._live:
            return
        now = self._clock()
        if now - self._start < self._delay:
            return
        if self._drawn_at is not None and now - self._drawn_at < self._interval and done < total:
            return
        self._drawn_at = now
        self._write(f"\rneuron-sim: simulating {what} {done:,}/{total:,}\033[K")

    def close(self) -> None:
        """Erase the line, where one was drawn: the output that follows starts on a clean one."""
        if self._drawn_at is not None:
            self._drawn_at = None
            self._write("\r\033[K")

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):     # the terminal went away: the estimate goes on
            self._live = False
