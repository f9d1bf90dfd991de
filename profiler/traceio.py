"""Writing outputs atomically (temporary file in the target folder, then rename), gzip on .gz."""
from __future__ import annotations

import gzip
import os
import tempfile
from pathlib import Path
from typing import Iterable


def write_atomic(path: str | os.PathLike, data: bytes | Iterable[bytes]) -> Path:
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    try:
        with os.fdopen(fd, "wb") as raw:
            if target.name.endswith(".gz"):
                # level 1: the single-core compressor is the bottleneck of big traces
                with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as fh:
                    for chunk in chunks:
                        fh.write(chunk)
            else:
                for chunk in chunks:
                    raw.write(chunk)
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
