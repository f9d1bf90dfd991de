"""Writing outputs atomically (temporary file in the target folder, then rename), gzip on .gz;
`-` is stdout; a folder of files (`replacing_folder`) is filled beside its place, then renamed.

Chunks are written by a background thread while the caller's iterator encodes the next ones:
file writes and zlib release the GIL, so encoding and compressing overlap on two cores, and a
bounded queue keeps only a few chunks in memory.
"""
from __future__ import annotations

import errno
import gzip
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

from device_model.fileio import current_umask, followed, replacing

from ..errors import ProfilerUsageError

STDOUT = "-"            # an output path meaning stdout, as most tools read it

# Level 1: on Kineto-shaped traces it compresses ~30:1 at ~650 MB/s; level 6 is ~15% smaller
# and 2.4x slower (BENCHMARKS.md, trace export).
GZIP_LEVEL = 1
QUEUED_CHUNKS = 8
_DONE = object()


def write_atomic(path: str | os.PathLike, data: bytes | Iterable[bytes]) -> Path:
    """Write a trace (bytes or chunks) to `path`, gzip'ed when it ends in .gz; 0644 less the umask.
    `-` writes to stdout."""
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    if str(path) == STDOUT:
        write_stdout(chunks)
        return Path(STDOUT)
    target = Path(path)
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


def write_stdout(chunks: Iterable[bytes]) -> None:
    """Write to stdout. A reader that closed the pipe is BrokenPipeError, as it comes; any other
    failure (a closed descriptor, a full disk) is an OSError naming stdout, not an empty name."""
    stream = getattr(sys.stdout, "buffer", None)
    try:
        if stream is None:              # started with its stdout closed
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        for chunk in chunks:
            stream.write(chunk)
        stream.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OSError(e.errno, e.strerror, "stdout") from None


@contextmanager
def replacing_folder(path: str | os.PathLike, owned: Callable[[str], bool],
                     what: str = "files") -> Iterator[Path]:
    """A new temporary folder beside `path` for the block to fill; when the block ends without
    an error it takes `path`'s place, so a reader sees the old folder whole, the new one whole,
    or none, never a mix. `path` must be missing or a folder holding only names `owned` accepts
    (an earlier export of the same kind, replaced whole, stale files and all); anything else is a
    ProfilerUsageError before anything is written. On any error (Ctrl-C included) the temporary
    folder is removed and `path` is untouched."""
    target = followed(path)
    _check_replaceable(target, owned, what)
    parent = target.parent if str(target.parent) else Path(".")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent))
    except OSError as e:        # name the folder the user gave, not our temporary's name
        raise OSError(e.errno, e.strerror, str(parent)) from None
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~current_umask())        # as mkdir would have made it
        with _signals_held():
            _check_replaceable(target, owned, what)     # nothing of the user's appeared meanwhile
            _swap_in(tmp, target)
    except BaseException:
        with _signals_held():    # a second Ctrl-C must not leave half a temporary folder
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def _check_replaceable(target: Path, owned: Callable[[str], bool], what: str) -> None:
    if not os.path.lexists(target):
        return
    if not target.is_dir():
        raise ProfilerUsageError(f"cannot write the {what} to {str(target)!r}: it exists and is "
                                 "not a folder")
    try:
        names = sorted(os.listdir(target))
    except OSError as e:
        raise ProfilerUsageError(f"cannot write the {what} to {str(target)!r}: "
                                 f"{(e.strerror or str(e)).lower()}") from None
    foreign = [n for n in names if not owned(n)]
    if foreign:
        raise ProfilerUsageError(f"cannot replace folder {str(target)!r}: it holds {foreign[0]!r}, "
                                 f"not only {what} (choose another --output-file)")


def _swap_in(tmp: Path, target: Path) -> None:
    """`tmp` renamed onto `target`; an existing `target` is first moved aside (a hidden name
    beside it) and removed once the new folder is in place, or put back if that failed."""
    if not os.path.lexists(target):
        os.rename(tmp, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=tmp.parent))
    os.rename(target, old)           # onto the empty folder just made: atomic, never a clash
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def _signals_held() -> Iterator[None]:
    """Stop signals wait while the block moves or removes folders, so an interruption never
    leaves a half-made state behind; the first one is then raised again for its own handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum))
                for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
    if caught:
        signal.raise_signal(caught[0])
