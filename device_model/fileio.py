"""Atomic file replacement: write beside the target under a temporary name, then rename, so a
reader sees the old file or the whole new one and an interrupted write leaves no partial file.

Every writer of the project goes through `replacing` (or `write_atomic` for bytes in hand); the
differences between them are parameters: the final permission bits, whether the process umask
applies to them, whether the data is fsync'ed before the rename, the temporary name's shape, and
whether the descriptor stays open afterwards (a memory-mapped counter file).
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

PRIVATE = 0o600


@contextmanager
def replacing(path: str | os.PathLike, *, mode: int = PRIVATE, apply_umask: bool = False,
              fsync: bool = False, prefix: str | None = None, suffix: str = ".tmp",
              keep_open: bool = False) -> Iterator[BinaryIO]:
    """A binary file on a temporary beside `path`; when the block ends without an error it is
    flushed (and fsync'ed), given `mode` (less the umask's bits with `apply_umask`), and renamed
    onto `path`. On any error the temporary is removed and `path` is untouched.

    `prefix` defaults to `.NAME.`; `file.name` is the temporary's path; `keep_open` leaves the
    descriptor (`file.fileno()`) open after the rename, the caller's to close.

    A symlink is followed: the file it points to is replaced, the link stays. A path that is not
    a regular file (a FIFO a reader waits on, /dev/null, a terminal) cannot be replaced without
    destroying it, so it is written in place: a stream has no partial file to avoid."""
    target = followed(path)
    if _is_stream(target):
        with open(target, "wb") as stream:
            yield stream            # type: ignore[misc]
        return
    folder = target.parent if str(target.parent) else Path(".")
    # The temporary's name is ours before the file exists: a stop signal (its handler raises)
    # at any point after it is made reaches the clean-up below, which knows what to remove.
    # (mkstemp names it only once made: a stop in between left it behind, whatever the thread.)
    name = f"{f'.{target.name}.' if prefix is None else prefix}{secrets.token_hex(8)}{suffix}"
    tmp = os.fspath(folder / name)
    fd: int | None = None
    fh: BinaryIO | None = None
    try:
        fd = os.open(tmp, _NEW_FILE, PRIVATE)
        fh = os.fdopen(fd, "wb", closefd=not keep_open)
        fh.raw.name = tmp       # `file.name`: the temporary's path (a compiler writes there)
        yield fh
        fh.flush()
        if fsync:
            os.fsync(fd)
        os.chmod(tmp, mode & ~current_umask() if apply_umask else mode)
        os.replace(tmp, target)
    except BaseException as e:
        if fd is not None or not isinstance(e, FileExistsError):   # never another's file
            _discard(tmp, fh, fd, keep_open)
        if isinstance(e, OSError) and e.filename == tmp:
            # the folder (the temporary could not be made) or the target: what the user knows
            raise OSError(e.errno, e.strerror, str(folder if fd is None else target)) from None
        raise
    fh.close()


# a new file only (never through a link, never one that exists), not inherited by children;
# readable too, as mkstemp's are: a counter file is mapped read-write through its descriptor
_NEW_FILE = (os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
             | getattr(os, "O_NOFOLLOW", 0))


def _discard(tmp: str, fh: BinaryIO | None, fd: int | None, keep_open: bool) -> None:
    """The temporary removed first (a close that fails must not leave it), then its descriptor
    closed."""
    try:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    finally:
        try:
            if fh is not None:
                fh.close()
            elif fd is not None and not keep_open:
                os.close(fd)
        finally:
            if keep_open and fd is not None:
                os.close(fd)


def followed(path: str | os.PathLike) -> Path:
    """`path`, or the path a symlink there points to: what a writer replaces, keeping the link.
    As the kernel's protected_symlinks: a link in a sticky world-writable directory (/tmp) is
    followed only if this user or the directory's owner made it; another user's link there is
    a trap that would replace a file of ours (PermissionError)."""
    if not os.path.islink(path):
        return Path(path)
    link = os.lstat(path)
    folder = os.stat(os.path.dirname(os.path.abspath(path)))
    shared = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
    if shared and link.st_uid not in (os.getuid(), folder.st_uid):
        raise PermissionError(errno.EACCES, f"not following a symlink of uid {link.st_uid} in a "
                              "shared directory", str(path))
    return Path(os.path.realpath(path))


def stderr_or_null() -> None:
    """Started with stderr closed (`2>&-`), Python's sys.stderr is None, and print(file=None)
    writes to stdout: a diagnostic would land in the data stream a tool writes there. Point it
    (and descriptor 2, which the next file opened would take) at /dev/null instead."""
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")


def silence_stdout() -> None:
    """Point stdout at /dev/null after it failed: Python flushes stdout at exit, and after EPIPE
    or ENOSPC that would print a second error (a traceback)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):     # stdout closed or gone
        pass


def open_append(path: str | os.PathLike, buffering: int = -1) -> BinaryIO:
    """`path` opened for appending, created 0600: through a symlink as `>>` goes, but not another
    user's link in a shared sticky directory (`followed`), whatever the kernel's
    protected_symlinks setting."""
    fd = os.open(followed(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, PRIVATE)
    return os.fdopen(fd, "ab", buffering=buffering)


def _is_stream(path: Path) -> bool:
    """An existing path that is neither a regular file nor a directory."""
    try:
        st = path.stat()
    except OSError:
        return False
    return not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode))


def write_atomic(path: str | os.PathLike, data: bytes | Iterable[bytes], *, mode: int = PRIVATE,
                 apply_umask: bool = False, fsync: bool = False, prefix: str | None = None,
                 suffix: str = ".tmp") -> Path:
    """Write `data` (bytes, or an iterable of chunks) to `path` atomically; see `replacing`."""
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    with replacing(path, mode=mode, apply_umask=apply_umask, fsync=fsync, prefix=prefix,
                   suffix=suffix) as fh:
        for chunk in chunks:
            fh.write(chunk)
    return Path(path)


def current_umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


class UnsafeDirError(ValueError):
    """A directory that must be private (this user's, mode 0700) is not, or cannot be made so."""


def private_dir(path: str | os.PathLike, what: str = "directory", *, create: bool = True) -> Path:
    """`path`, created 0700 if absent (with `create`), after checking that it is a real directory
    (not a symlink) owned by this user with no group or other permissions; UnsafeDirError (one
    line naming `what` and the path) otherwise. Code and data are only loaded from such places."""
    path = Path(path)
    try:
        if create:
            # missing parents 0700 too (mkdir(parents=True) makes them 0777 less the umask)
            for folder in [*reversed(path.parents), path]:
                if not folder.exists():
                    folder.mkdir(mode=0o700, exist_ok=True)
        st = path.lstat()
    except (FileExistsError, NotADirectoryError):     # a file where the directory should be
        raise UnsafeDirError(f"{what} {str(path)!r} is not a directory") from None
    except OSError as e:
        raise UnsafeDirError(f"{what} {str(path)!r} is unusable: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirError(f"{what} {str(path)!r} is not a directory")
    if st.st_uid != os.getuid():
        raise UnsafeDirError(f"{what} {str(path)!r} is owned by uid {st.st_uid}, not {os.getuid()}")
    if st.st_mode & 0o077:
        raise UnsafeDirError(f"{what} {str(path)!r} has mode {stat.S_IMODE(st.st_mode):04o}; "
                             f"allowed: 0700 (chmod 700 it)")
    return path


def private_file_problem(st: os.stat_result) -> str | None:
    """Why a file with this status is not one this user alone could have written, or None."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not {os.getuid()}"
    if st.st_mode & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None
