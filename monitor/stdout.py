"""Writing the command-line tools' data to stdout: every byte of a report, and a quiet exit once
stdout has failed (a reader that went away, a full disk)."""
from __future__ import annotations

import errno
from typing import BinaryIO

from device_model.fileio import open_append, silence_stdout, stderr_or_null

__all__ = ["write_all", "silence_stdout", "open_append", "stderr_or_null"]


def write_all(out: BinaryIO, data: bytes) -> None:
    """Write every byte of ``data``. An unbuffered stream (``python -u``, PYTHONUNBUFFERED, as
    container images set it; a --record file) writes what one write(2) took: a pipe's 64 KiB
    when SIGTERM interrupts a blocked write, or a disk's last free blocks. Its rest is written
    here instead of lost, so a consumer never receives half a report."""
    view = memoryview(data)
    while view:
        written = out.write(view)
        if written is None:         # a non-blocking stream that took nothing
            raise BlockingIOError(errno.EAGAIN, "stdout would block")
        view = view[written:]


