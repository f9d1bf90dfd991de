"""The per-user runtime directory of simulated instances and how files in it are read and
written: created 0700 and checked for its owner, files written 0600 through a temp file and a
rename, read only if regular (no symlink, FIFO or device planted where a file is expected)."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ..errors import SpecError
from ..fileio import PRIVATE, UnsafeDirError, private_dir, write_atomic


class CorruptCounters(ValueError):
    """A counter file that is truncated, corrupted or not a counter file at all."""


class RuntimeDirError(SpecError):
    """The runtime directory is unsafe (another owner, loose permissions) or unusable."""


def runtime_dir(root: Path | str | None = None) -> Path:
    """The per-user runtime directory, created 0700; `root` replaces the default location."""
    if root is None:
        xdg = os.environ.get("XDG_RUNTIME_DIR")
        path = Path(xdg) / "neuronscope" if xdg else Path(tempfile.gettempdir()) / f"neuronscope-{os.getuid()}"
    else:
        path = Path(root)
    try:
        return private_dir(path, "runtime directory")
    except UnsafeDirError as e:
        raise RuntimeDirError(str(e)) from None


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to a 0600 temp file beside `path`, then rename it into place."""
    write_atomic(path, data, mode=PRIVATE, prefix=".tmp-", suffix=path.suffix)


def open_regular(path: Path) -> int:
    """A read-only descriptor on `path` if it is a regular file (not a symlink, FIFO, socket or
    device): opened non-blocking, so a FIFO planted where a file is expected cannot hang us."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CorruptCounters(f"{path.name}: not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, limit: int) -> bytes:
    """The whole of a small regular file, read into memory (at most `limit` bytes)."""
    fd = open_regular(path)
    try:
        data = os.pread(fd, limit + 1, 0)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise CorruptCounters(f"{path.name}: larger than {limit} bytes")
    return data


def runtime_process_alive(pid: int, root: Path | None = None) -> bool:
    """Whether `pid` is a running simulated runtime (its command line names the module) of the
    instance under `root` (its `--root`): a pid reused by another instance's runtime, or a
    copy of a live root, is not this instance's."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        if not any(b"device_model.runtime" in a for a in args):
            return False
    except (OSError, ValueError):
        return False
    given = root_argument(args)
    if root is None or given is None:
        return True
    if not os.path.isabs(given):
        try:     # another user's process: its cwd may not be ours to read
            given = os.path.join(os.readlink(f"/proc/{int(pid)}/cwd"), given)
        except OSError:
            return True      # cannot tell: as before, the module's name decides
    return os.path.realpath(given) == os.path.realpath(root)


def root_argument(args: list[bytes]) -> str | None:
    """The value of a command line's `--root DIR` or `--root=DIR`."""
    for i, arg in enumerate(args):
        if arg == b"--root" and i + 1 < len(args):
            return os.fsdecode(args[i + 1])
        if arg.startswith(b"--root="):
            return os.fsdecode(arg[len(b"--root="):])
    return None
