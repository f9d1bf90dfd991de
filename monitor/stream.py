"""Read Reports from a neuron-monitor JSON-lines stream (a pipe, a file, a socket).

neuron-monitor writes one JSON document per line; consumers such as neuron-monitor-prometheus.py
read line by line. A malformed line must not end the stream: it is counted by kind, the first
line of each kind is reported on stderr, and reading goes on. End of input ends the iteration.

Kinds of bad line:
  not_utf8    bytes that are not UTF-8
  truncated   JSON cut short (the writer died or the pipe was split mid-document)
  not_json    anything else that does not parse as JSON
  not_object  valid JSON that is not an object (``[]``, ``42``, ``"x"``)
  wrong_type  an object that does not match the neuron-monitor schema (ReportError)
  too_long    longer than ``max_line_bytes`` (not parsed at all)
Blank lines are ignored without being counted: they carry no document.
"""
from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import IO

import orjson

from monitor.errors import ReportError, not_utf8, one_line
from monitor.report import Report

__all__ = ["ReportStream", "classify_line", "DEFAULT_MAX_LINE_BYTES", "LINE_KINDS"]

LINE_KINDS = ("not_json", "truncated", "wrong_type", "not_object", "not_utf8", "too_long")

# A 128-device report with engine counters is about 1 MiB; 64 MiB leaves room and bounds memory.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
MAX_REJECTIONS_KEPT = 3


def classify_line(line: bytes | str, received_at: float | None = None
                  ) -> tuple[Report | None, str, str]:
    """Parse one line: (report, "", "") or (None, kind, detail). Never raises."""
    if isinstance(line, str):
        try:
            line = line.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates from a lenient decoder
            return None, "not_utf8", "line holds characters that are not valid Unicode"
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        kind = _decode_error_kind(line, exc)
        detail = not_utf8(line) if kind == "not_utf8" else None
        return None, kind, detail or str(exc).split("\n", 1)[0]
    if type(data) is not dict:
        return None, "not_object", f"expected a JSON object, got {type(data).__name__}"
    try:
        return Report.from_dict(data, received_at=received_at), "", ""
    except ReportError as exc:
        return None, "wrong_type", str(exc)


def _decode_error_kind(line: bytes, exc: orjson.JSONDecodeError) -> str:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return "not_utf8"
    stripped = line.rstrip()
    # orjson reports the failing position; failing at the very end of an opened document
    # means it was cut short rather than garbled.
    if stripped[:1] in (b"{", b"[") and exc.pos >= len(stripped.decode("utf-8")):
        return "truncated"
    return "not_json"


def _start_of(line: bytes | str, size: int = 60) -> str:
    text = line if isinstance(line, str) else line[: size * 4].decode("utf-8", "replace")
    text = text.strip()
    return repr(text[:size] + ("…" if len(text) > size else ""))


class ReportStream:
    """Iterate Reports from JSON lines; ``errors`` counts skipped lines by kind."""

    def __init__(self, lines: Iterable[bytes | str], clock: Callable[[], float] = time.time,
                 stderr: IO[str] | None = None, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 source: str = "neuron-monitor stream"):
        self._lines = lines
        self._clock = clock
        self._stderr = stderr
        self._max = max_line_bytes
        self._source = source
        self.errors: Counter[str] = Counter()
        self.reports = 0  # good lines turned into Reports
        self.line_number = 0
        self.rejections: list[str] = []  # the first few reasons, escaped, for a screen to show

    @classmethod
    def from_file(cls, binary: IO[bytes], **kwargs) -> ReportStream:
        """Read a binary file object (``sys.stdin.buffer``, a pipe) line by line as it arrives."""
        return cls(iter(binary.readline, b""), **kwargs)

    def __iter__(self) -> Iterator[Report]:
        for line in self._lines:
            self.line_number += 1
            report = self._parse(line)
            if report is not None:
                self.reports += 1
                yield report

    def _parse(self, line: bytes | str) -> Report | None:
        if len(line) > self._max:
            # a reader cuts such a line short: its length here is not the line's own
            self._skip("too_long", f"longer than the {self._max:,}-byte limit")
            return None
        if not line.strip():
            return None
        report, kind, detail = classify_line(line, self._clock())
        if report is None:
            if kind == "not_json":  # e.g. an upstream tool's own error message: show it first
                detail = f"{_start_of(line)} is not JSON ({detail})"
            self._skip(kind, detail)
        return report

    def _skip(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        if len(self.rejections) < MAX_REJECTIONS_KEPT:
            self.rejections.append(f"line {self.line_number} ({kind}): {one_line(detail)}")
        if self.errors[kind] == 1:
            stream = self._stderr if self._stderr is not None else sys.stderr
            # `detail` may quote the input: escaped, so no control sequence reaches a terminal.
            print(f"{self._source}: skipped line {self.line_number} ({kind}): {one_line(detail)}; "
                  f"further {kind} lines are counted silently", file=stream, flush=True)

    @property
    def skipped(self) -> int:
        return sum(self.errors.values())
