"""Builds and loads the native aten recorder (profiler/capture/native/recorder.cpp) for the installed torch.

The library is compiled once per torch build and source version with the system C++ compiler
against torch's own headers (a few seconds), cached per user (directory 0700), and loaded with
ctypes. Anything that prevents it (no compiler, no headers, a failed build) is a NativeUnavailable
with one line saying why; the capture then falls back to the Python recorder.
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from device_model.fileio import PRIVATE, replacing

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


def build(torch) -> Path:
    """The compiled library, building it first if needed (serialised by a file lock)."""
    out, command = library_path(torch)
    if out.exists():
        return out
    if shutil.which(command[0]) is None:
        raise NativeUnavailable(f"no C++ compiler ({command[0]}) to build the native recorder")
    if not (Path(torch.__file__).parent / "include" / "ATen" / "record_function.h").exists():
        raise NativeUnavailable("this torch has no C++ headers to build the native recorder against")
    out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(out.parent, 0o700)
    with os.fdopen(os.open(out.parent / ".lock", os.O_WRONLY | os.O_CREAT, 0o600), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():                          # another process built it meanwhile
            return out
        try:
            with replacing(out, mode=PRIVATE, prefix="tmp", suffix=".so.tmp") as tmp_file:
                tmp = tmp_file.name          # the compiler writes the library there
                result = subprocess.run([tmp if c == "{out}" else c for c in command], capture_output=True,
                                        text=True, timeout=BUILD_TIMEOUT_S)
                if result.returncode != 0:
                    first = next((ln for ln in result.stderr.splitlines() if "error" in ln), result.stderr[:200])
                    raise NativeUnavailable(f"building the native recorder failed: {first.strip()}")
        except subprocess.TimeoutExpired:
            raise NativeUnavailable(f"building the native recorder took over {BUILD_TIMEOUT_S} s") from None
    return out


def load() -> ctypes.CDLL:
    """The loaded library with its C signatures declared (built on first use)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    try:
        import torch
    except ImportError as e:                      # pragma: no cover - torch is the capture's premise
        raise NativeUnavailable(f"torch is not importable: {e}") from None
    path = build(torch)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise NativeUnavailable(f"loading the native recorder failed: {e}") from None
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
        print(f"native recorder: {build(torch)}")
    except (ImportError, NativeUnavailable) as e:
        print(f"native recorder not built ({e}); captures will use the Python recorder")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
