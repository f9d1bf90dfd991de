"""Writing outputs atomically (temporary file in the target folder, then rename), gzip on .gz.

Chunks are written by a background thread while the caller's iterator encodes the next ones:
file writes and zlib release the GIL, so encoding and compressing overlap on two cores, and a
bounded queue keeps only a few chunks in memory.
"""
from __future__ import annotations

import gzip
import os
import queue
import threading
from pathlib import Path
from typing import BinaryIO, Iterable

from device_model.fileio import replacing

# Level 1: on Kineto-shaped traces it compresses ~30:1 at ~650 MB/s; level 6 is ~15% smaller
# and 2.4x slower (BENCHMARKS.md, trace export).
GZIP_LEVEL = 1
QUEUED_CHUNKS = 8
_DONE = object()


def write_atomic(path: str | os.PathLike, data: bytes | Iterable[bytes]) -> Path:
    """Write a trace (bytes or chunks) to `path`, gzip'ed when it ends in .gz; 0644 less the umask."""
    target = Path(path)
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    with replacing(target, mode=0o644, apply_umask=True) as raw:
        if target.name.endswith(".gz"):
            # no file name in the gzip header (it would be the temporary's): same bytes every run
            with gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL,
                               mtime=0) as fh:
                _write_behind(fh, chunks)
        else:
            _write_behind(raw, chunks)
    return target


def _write_behind(fh: BinaryIO, chunks: Iterable[bytes]) -> None:
    """Write `chunks` to `fh` from a second thread while the iterator produces the next ones."""
    pending: queue.Queue = queue.Queue(QUEUED_CHUNKS)
    failed: list[BaseException] = []

    def drain() -> None:
        while (chunk := pending.get()) is not _DONE:
            if not failed:
                try:
                    fh.write(chunk)
                except BaseException as exc:        # re-raised in the caller's thread
                    failed.append(exc)

    writer = threading.Thread(target=drain, name="trace-writer", daemon=True)
    writer.start()
    try:
        for chunk in chunks:
            if failed:
                break
            pending.put(chunk)
    finally:
        pending.put(_DONE)
        writer.join()
    if failed:
        raise failed[0]

