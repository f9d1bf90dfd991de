"""Builds and loads the native aten recorder (profiler/capture/native/recorder.cpp) for the installed torch.

The library is compiled once per torch build and source version with the system C++ compiler
against torch's own headers (a few seconds), cached per user, and loaded with ctypes. Nothing is
loaded from a place others could write: the cache directory must be this user's and 0700, the
library this user's and writable by no one else, and its SHA-256 must match the digest written
(0600, beside it) when it was built; the library is hashed and loaded through one open
descriptor, so what was checked is what is loaded. Anything that prevents it (no compiler, no
headers, a failed build, an unsafe cache) is a NativeUnavailable with one line saying why; the
capture then falls back to the Python recorder (or, asked for the native one, stops).
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from device_model.fileio import PRIVATE, UnsafeDirError, private_dir, private_file_problem, replacing, write_atomic

SOURCE = Path(__file__).with_name("recorder.cpp")
BUILD_TIMEOUT_S = 300
_loaded: ctypes.CDLL | None = None


class NativeUnavailable(RuntimeError):
    """The native recorder cannot be built or loaded here."""


def cache_root() -> Path:
    base = os.environ.get("NEURONSCOPE_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") \
        or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "neuronscope"


def _flags(torch_dir: Path, abi: int) -> list[str]:
    return ["-O2", "-DNDEBUG", "-std=c++20", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}"]


def library_path(torch) -> tuple[Path, list[str]]:
    """Where the library for this torch and this source lives, and the compile command."""
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cxx = os.environ.get("CXX", "g++")
    flags = _flags(torch_dir, abi)
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), torch.__version__.encode(), str(torch_dir).encode(),
                 " ".join([cxx, *flags]).encode()):
        digest.update(part)
    out = cache_root() / "native" / f"recorder-{digest.hexdigest()[:16]}.so"
    lib_dir = torch_dir / "lib"
    command = [cxx, *flags, str(SOURCE), "-o", "{out}", f"-L{lib_dir}", "-lc10", "-ltorch_cpu",
               f"-Wl,-rpath,{lib_dir}"]
    return out, command


def _cache_dir(out: Path) -> Path:
    try:
        return private_dir(out.parent, "native recorder cache")
    except UnsafeDirError as e:
        raise NativeUnavailable(f"refusing the {e}") from None


def digest_path(library: Path) -> Path:
    return library.with_suffix(".sha256")


def _built(out: Path) -> bool:
    """A library with its digest is there (checked when loaded); one without is rebuilt."""
    return out.exists() and digest_path(out).exists()


def build(torch, note=None) -> Path:
    """The compiled library, building it first if needed (serialised by a file lock); `note`
    (a one-line message function) is told before a build starts."""
    out, command = library_path(torch)
    _cache_dir(out)
    if _built(out):
        return out
    if shutil.which(command[0]) is None:
        raise NativeUnavailable(f"no C++ compiler ({command[0]}) to build the native recorder")
    if not (Path(torch.__file__).parent / "include" / "ATen" / "record_function.h").exists():
        raise NativeUnavailable("this torch has no C++ headers to build the native recorder against")
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(out.parent / ".lock", flags, 0o600), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _built(out):                           # another process built it meanwhile
            return out
        if note is not None:
            note(f"building the native recorder for torch {torch.__version__} (once)…")
        try:
            with replacing(out, mode=PRIVATE, prefix="tmp", suffix=".so.tmp") as tmp_file:
                tmp = tmp_file.name          # the compiler writes the library there
                result = subprocess.run([tmp if c == "{out}" else c for c in command], capture_output=True,
                                        text=True, timeout=BUILD_TIMEOUT_S)
                if result.returncode != 0:
                    first = next((ln for ln in result.stderr.splitlines() if "error" in ln), result.stderr[:200])
                    raise NativeUnavailable(f"building the native recorder failed: {first.strip()}")
                with open(tmp, "rb") as built:
                    digest = hashlib.sha256(built.read()).hexdigest()
            # the digest last: a library without one is not taken for built
            write_atomic(digest_path(out), digest.encode() + b"\n", mode=PRIVATE, prefix=".tmp-")
        except subprocess.TimeoutExpired:
            raise NativeUnavailable(f"building the native recorder took over {BUILD_TIMEOUT_S} s") from None
    return out


def _open_verified(path: Path) -> int:
    """A descriptor of the library at `path` once it is this user's, writable by no one else, and
    its bytes match the recorded digest; NativeUnavailable (one line) otherwise."""
    def refuse(why: str):
        raise NativeUnavailable(f"refusing the native recorder library {str(path)!r}: {why}")

    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as e:
        refuse(e.strerror or str(e))
    try:
        problem = private_file_problem(os.fstat(fd))
        if problem:
            refuse(problem)
        try:
            dfd = os.open(digest_path(path), flags)
        except OSError as e:
            refuse(f"its digest file cannot be read ({e.strerror})")
        with os.fdopen(dfd, "rb") as fh:
            problem = private_file_problem(os.fstat(fh.fileno()))
            if problem:
                refuse(f"its digest file {problem}")
            recorded = fh.read(200).decode("ascii", "replace").strip()
        digest = hashlib.sha256()
        with os.fdopen(os.dup(fd), "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != recorded:
            refuse("its SHA-256 does not match the digest recorded when it was built (delete it to rebuild)")
        return fd
    except BaseException:
        os.close(fd)
        raise


def load(note=None) -> ctypes.CDLL:
    """The loaded library with its C signatures declared (built on first use; `note` as for
    `build`)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    try:
        import torch
    except ImportError as e:                      # pragma: no cover - torch is the capture's premise
        raise NativeUnavailable(f"torch is not importable: {e}") from None
    path = build(torch, note)
    fd = _open_verified(path)
    try:                          # load what was checked: the open file, not the name again
        lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
    except OSError as e:
        raise NativeUnavailable(f"loading the native recorder failed: {e}") from None
    finally:
        os.close(fd)
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.ns_start.argtypes, lib.ns_start.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_int
    lib.ns_collect.argtypes, lib.ns_collect.restype = [ctypes.c_int], i64
    lib.ns_context.restype = ctypes.POINTER(i64)
    for name, restype in (("ns_records", ptr), ("ns_sigs", ptr), ("ns_sig_size", i64),
                          ("ns_names", ctypes.c_char_p), ("ns_record_size", i64)):
        getattr(lib, name).restype = restype
    lib.ns_release.restype = None
    _loaded = lib
    return lib


def main() -> int:
    """`python -m profiler.capture.native.build`: build ahead of the first capture (setup does this)."""
    try:
        import torch
        print(f"native recorder: {build(torch, note=print)}")
    except (ImportError, NativeUnavailable) as e:
        print(f"native recorder not built ({e}); captures will use the Python recorder")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
