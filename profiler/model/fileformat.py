"""The profile file: one self-describing, versioned file of columnar tables. No pickle.

Layout (all integers little-endian):

    b"NSPROFv1"                    8-byte magic
    u32 header length H
    H bytes of JSON header         {"schema_version", "meta", "strings", "tables": {name: {"rows",
                                    "columns": [{"name", "dtype", "codec", "offset", "nbytes",
                                    "raw_nbytes", "crc32"}]}}}
    column blobs                   raw little-endian numpy data, each zlib- or not compressed
    b"NSPROFEND" + u64 file size   trailer: a truncated file is caught before any blob is read

Any reader can decode it with a JSON parser and `numpy.frombuffer`; offsets are from the start of
the blob area. The file is written to a temporary file in the target's folder, then renamed.
"""
from __future__ import annotations

import os
import stat
import struct
import zlib
from pathlib import Path

import numpy as np
import orjson

from device_model.fileio import PRIVATE, write_atomic

from .profile import OPTIONAL_ZERO, SCHEMA, Profile, ProfileError
from .validate import check_profile

MAGIC = b"NSPROFv1"
TRAILER = b"NSPROFEND"
SCHEMA_VERSION = 1
ALLOWED_DTYPES = ("<u1", "<u2", "<u4", "<i4", "<i8", "<f4", "<f8", "|u1")
_COMPRESS_MIN = 4096          # small columns are stored raw: zlib's header would not pay off
MAX_HEADER = 256 << 20
MAX_RATIO = 1100              # deflate cannot expand more than ~1032:1: anything above is corrupt


def _encode_column(arr: np.ndarray, compress: bool) -> tuple[bytes, dict]:
    arr = np.ascontiguousarray(arr)
    dtype = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
    raw = arr.astype(dtype, copy=False).tobytes()
    blob, codec = raw, "raw"
    if compress and len(raw) >= _COMPRESS_MIN:
        packed = zlib.compress(raw, 1)
        if len(packed) < 0.9 * len(raw):
            blob, codec = packed, "zlib"
    return blob, {"dtype": dtype.str, "codec": codec, "nbytes": len(blob),
                  "raw_nbytes": len(raw), "crc32": zlib.crc32(raw)}


def encode(profile: Profile, compress: bool = True) -> bytes:
    """The whole file as bytes."""
    blobs: list[bytes] = []
    offset = 0
    tables: dict[str, dict] = {}
    for tname, table in profile.tables.items():
        cols = []
        rows = None
        for cname, arr in table.items():
            if rows is None:
                rows = int(arr.shape[0])
            elif int(arr.shape[0]) != rows:
                raise ProfileError(f"table {tname}: column {cname} has {arr.shape[0]} rows, not {rows}")
            blob, desc = _encode_column(arr, compress)
            cols.append({"name": cname, **desc, "offset": offset})
            blobs.append(blob)
            offset += len(blob)
        tables[tname] = {"rows": rows or 0, "columns": cols}
    header = orjson.dumps({"schema_version": SCHEMA_VERSION, "meta": profile.meta,
                           "strings": list(profile.strings), "tables": tables},
                          option=orjson.OPT_SERIALIZE_NUMPY)
    body = b"".join([MAGIC, struct.pack("<I", len(header)), header, *blobs])
    total = len(body) + len(TRAILER) + 8
    return body + TRAILER + struct.pack("<Q", total)


def save(profile: Profile, path: str | os.PathLike, compress: bool = True) -> Path:
    """Write atomically: temporary file in the same folder, fsync, rename."""
    return write_atomic(path, encode(profile, compress), mode=PRIVATE, fsync=True)


def load(path: str | os.PathLike) -> Profile:
    """A profile file. Only a regular file is read (a FIFO would hang, /dev/zero fill memory),
    in one read of the size it has; memory running out is a one-line error too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such profile") from None
    except IsADirectoryError:
        raise ProfileError(f"{path}: is a directory, not a profile") from None
    except OSError as e:
        raise ProfileError(f"{path}: cannot read profile ({e.strerror})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ProfileError(f"{path}: is a directory, not a profile")
        if not stat.S_ISREG(info.st_mode):
            raise ProfileError(f"{path}: not a regular file, not a profile")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(info.st_size + 1)
    except MemoryError:
        raise ProfileError(f"{path}: too large to read into memory") from None
    except OSError as e:
        raise ProfileError(f"{path}: cannot read profile ({e.strerror})") from None
    finally:
        os.close(fd)
    return decode(data, str(path))


def _header(data: bytes, where: str) -> tuple[dict, int]:
    if data[: len(MAGIC)] == MAGIC and len(data) < len(MAGIC) + 4:
        raise ProfileError(f"{where}: truncated profile ({len(data)} bytes: no header)")
    if len(data) < len(MAGIC) + 4 or data[: len(MAGIC)] != MAGIC:
        if data[:6] == b"NSPROF":
            raise ProfileError(f"{where}: profile format {data[6:8]!r} is not supported (this tool reads v1)")
        raise ProfileError(f"{where}: not a neuron-profile file (bad magic)")
    tail = len(TRAILER) + 8
    if len(data) < len(MAGIC) + 4 + tail or data[-tail:-8] != TRAILER:
        raise ProfileError(f"{where}: truncated profile (no end marker)")
    (total,) = struct.unpack("<Q", data[-8:])
    if total != len(data):
        raise ProfileError(f"{where}: truncated or padded profile ({len(data)} bytes, expected {total})")
    (hlen,) = struct.unpack("<I", data[len(MAGIC): len(MAGIC) + 4])
    start = len(MAGIC) + 4
    if hlen > MAX_HEADER or start + hlen > len(data) - tail:
        raise ProfileError(f"{where}: corrupt profile header length")
    try:
        header = orjson.loads(data[start: start + hlen])
    except orjson.JSONDecodeError:
        raise ProfileError(f"{where}: corrupt profile header (not JSON)") from None
    if not isinstance(header, dict):
        raise ProfileError(f"{where}: corrupt profile header")
    version = header.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ProfileError(f"{where}: profile schema version {version!r} is not supported "
                           f"(supported: {SCHEMA_VERSION})")
    return header, start + hlen


def _inflate(blob: bytes, declared: int, name: str, where: str) -> bytes:
    """Decompress at most `declared` bytes: a column that would inflate past its declared size
    (a decompression bomb) is refused without ever holding more than that in memory."""
    if declared <= 0 or declared > MAX_RATIO * len(blob) + 1024:
        raise ProfileError(f"{where}: column {name!r} declares more data than its compressed "
                           f"{len(blob)} bytes can hold (corrupt)")
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(blob, declared)      # stops once `declared` bytes are out
    except zlib.error:
        raise ProfileError(f"{where}: column {name!r} is corrupt (bad compressed data)") from None
    if not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
        raise ProfileError(f"{where}: column {name!r} is corrupt (decompresses to more or other "
                           f"than its declared {declared} bytes)")
    return out


def _column(data: bytes, base: int, limit: int, rows: int, desc: dict, where: str) -> np.ndarray:
    try:
        name, dtype, codec = desc["name"], desc["dtype"], desc["codec"]
        off, nbytes, raw_n, crc = (int(desc[k]) for k in ("offset", "nbytes", "raw_nbytes", "crc32"))
    except (KeyError, TypeError, ValueError, OverflowError):
        raise ProfileError(f"{where}: corrupt column description") from None
    if not isinstance(dtype, str) or dtype not in ALLOWED_DTYPES or codec not in ("raw", "zlib"):
        raise ProfileError(f"{where}: column {name!r} has unsupported dtype/codec {dtype}/{codec}")
    if off < 0 or nbytes < 0 or base + off + nbytes > limit:
        raise ProfileError(f"{where}: column {name!r} lies outside the file (truncated or corrupt)")
    if raw_n != rows * np.dtype(dtype).itemsize:
        raise ProfileError(f"{where}: column {name!r} declares {raw_n} bytes for {rows} rows of {dtype}")
    blob = data[base + off: base + off + nbytes]
    if codec == "zlib":
        blob = _inflate(blob, raw_n, name, where)
    if len(blob) != raw_n or zlib.crc32(blob) != crc:
        raise ProfileError(f"{where}: column {name!r} is corrupt (checksum mismatch)")
    arr = np.frombuffer(blob, dtype=np.dtype(dtype))
    if arr.shape[0] != rows:
        raise ProfileError(f"{where}: column {name!r} has {arr.shape[0]} rows, header says {rows}")
    return arr


def decode(data: bytes, where: str = "profile") -> Profile:
    header, base = _header(data, where)
    limit = len(data) - len(TRAILER) - 8
    tables: dict[str, dict[str, np.ndarray]] = {}
    try:
        items = header["tables"].items()
        meta, strings = header["meta"], header["strings"]
    except (KeyError, AttributeError, TypeError):
        raise ProfileError(f"{where}: corrupt profile header (missing tables/meta/strings)") from None
    if not isinstance(meta, dict) or not isinstance(strings, list) or not all(
            isinstance(s, str) for s in strings):
        raise ProfileError(f"{where}: corrupt profile header (meta/strings)")
    for tname, tdesc in items:
        try:
            rows, cols = int(tdesc["rows"]), list(tdesc["columns"])
        except (KeyError, TypeError, ValueError):
            raise ProfileError(f"{where}: corrupt description of table {tname!r}") from None
        if not isinstance(tname, str) or rows < 0:
            raise ProfileError(f"{where}: corrupt description of table {tname!r}")
        table: dict[str, np.ndarray] = {}
        for c in cols:
            if not isinstance(c, dict) or not isinstance(c.get("name"), str) or c["name"] in table:
                raise ProfileError(f"{where}: table {tname!r} has a corrupt column description")
            table[c["name"]] = _column(data, base, limit, rows, c, where)
        tables[tname] = table
    for tname, cols in OPTIONAL_ZERO.items():
        table = tables.get(tname)
        if table:
            rows = int(next(iter(table.values())).shape[0])
            for c in cols:
                table.setdefault(c, np.zeros(rows, dtype=np.dtype(SCHEMA[tname][c])))
    profile = Profile(meta, tuple(strings), tables)
    check_profile(profile, where)
    return profile
