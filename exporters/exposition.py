"""One rendered exposition: the bytes every scrape of one report generation is served.

The plain bodies are made once per report; each gzip body is made once, by whichever thread asks
first (the ingest thread asks right after publishing, so scrapers normally find it ready).
"""
from __future__ import annotations

import threading
import zlib

from exporters.textformat import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE

# Level 1: the exposition repeats its labels so much that level 6 saves little and costs 3x.
GZIP_LEVEL = 1


def gzip_bytes(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    """A gzip member (RFC 1952) without a timestamp, so equal bodies compress equally."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


class Exposition:
    __slots__ = ("generation", "_bodies", "_gzipped", "_lock")

    def __init__(self, generation: int, text: bytes, openmetrics: bytes):
        self.generation = generation
        self._bodies = {False: text, True: openmetrics}
        self._gzipped: dict[bool, bytes] = {}
        self._lock = threading.Lock()

    def body(self, openmetrics: bool, gzip: bool) -> tuple[bytes, str]:
        """(body, content type) for one scrape."""
        content_type = OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
        if not gzip:
            return self._bodies[openmetrics], content_type
        cached = self._gzipped.get(openmetrics)
        if cached is None:
            with self._lock:
                cached = self._gzipped.get(openmetrics)
                if cached is None:
                    cached = self._gzipped[openmetrics] = gzip_bytes(self._bodies[openmetrics])
        return cached, content_type

    def restricted(self, names: frozenset[str], openmetrics: bool, gzip: bool) -> tuple[bytes, str]:
        """(body, content type) with only the samples named (`?name[]=...`, as
        prometheus_client's server filters), each with its family's HELP and TYPE lines."""
        body = restrict(self._bodies[openmetrics], names, openmetrics)
        content_type = OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
        return (gzip_bytes(body) if gzip else body), content_type

    def prepare_gzip(self) -> None:
        for openmetrics in (False, True):
            self.body(openmetrics, True)

    @property
    def text(self) -> bytes:
        return self._bodies[False]

    @property
    def openmetrics(self) -> bytes:
        return self._bodies[True]


def restrict(body: bytes, names: frozenset[str], openmetrics: bool) -> bytes:
    """The exposition's samples whose metric name is in `names`, each family that keeps any
    with its comment lines (HELP, TYPE, UNIT: written before its samples in both formats)."""
    out: list[bytes] = []
    pending: list[bytes] = []     # the current family's comments, until one of its samples is kept
    for line in body.splitlines(keepends=True):
        if line.startswith(b"# EOF"):
            break
        if line.startswith(b"#"):
            if line.startswith(b"# HELP ") or (line.startswith(b"# TYPE ") and any(
                    c.startswith(b"# TYPE ") for c in pending)):
                pending = []          # another family begins
            pending.append(line)
            continue
        if line.split(b"{", 1)[0].split(b" ", 1)[0].decode() in names:
            out.extend(pending)
            pending = []
            out.append(line)
    if openmetrics:
        out.append(b"# EOF\n")
    return b"".join(out)
