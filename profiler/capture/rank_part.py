"""The part file a torchrun worker leaves: its recording, unmapped, as an .npz of the call
columns plus a JSON header (no pickles), written under a temporary name and renamed, so a reader
sees a whole part or none."""
from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from device_model.fileio import write_atomic

PART_VERSION = 2              # 2: signatures carry the result's dtype


@dataclass(frozen=True, slots=True)
class RankPart:
    """A worker's recording and who it was."""
    rank: int
    local_rank: int
    world_size: int
    pid: int
    exit_code: int
    main_thread: int          # ident of the thread that ran the script (spans name it)
    recording: object         # recording.Recording


def part_path(folder: str | os.PathLike, rank: int) -> Path:
    return Path(folder) / f"rank-{rank:05d}.npz"


def save_part(folder: str | os.PathLike, part: RankPart) -> Path:
    rec = part.recording
    cols = rec.table()
    header = {"version": PART_VERSION, "rank": part.rank, "local_rank": part.local_rank,
              "world_size": part.world_size, "pid": part.pid, "exit_code": part.exit_code,
              "main_thread": part.main_thread, "t0": rec.t0, "recorder": rec.recorder,
              "compiled_graphs": int(getattr(rec, "compiled_graphs", 0)),
              "unreadable_calls": int(getattr(rec, "unreadable_calls", 0)),
              "modules": rec.modules, "boundaries": rec.boundaries, "spans": rec.spans,
              "sigs": [[c.name, c.namespace, c.shapes, c.dtype, c.out_numel, c.extra, c.out_dtype]
                       for c in rec.sigs]}
    buf = io.BytesIO()
    data = json.dumps(header, separators=(",", ":")).encode()      # the script's interpreter may lack orjson
    np.savez(buf, header=np.frombuffer(data, dtype=np.uint8), **cols)
    # a reader sees a whole part or none; the mode a plain write would give it
    return write_atomic(part_path(folder, part.rank), buf.getvalue(), mode=0o666, apply_umask=True)


def load_part(path: str | os.PathLike) -> RankPart:
    """A part written by save_part; ValueError (or OSError) when it is not one."""
    name = Path(path).name
    try:
        return _read_part(path)
    except ValueError as e:         # numpy's and ours (json's decode error is one too)
        raise ValueError(f"{name}: not a readable part ({e})") from None
    except (zipfile.BadZipFile, EOFError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{name}: not a readable part ({type(e).__name__}: {e})") from None


def _tuples(value):
    """JSON's lists back into the tuples they were (a convolution's extra nests them)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _read_part(path: str | os.PathLike) -> RankPart:
    from .aten_map import AtenCall
    from .recording import COLUMNS, Recording
    with np.load(path, allow_pickle=False) as z:
        header = json.loads(z["header"].tobytes())
        cols = {c: z[c].astype(t, copy=False) for c, t in COLUMNS.items()}
    if header.get("version") != PART_VERSION:
        raise ValueError(f"part version {header.get('version')!r}, expected {PART_VERSION}")
    rec = Recording(t0=int(header["t0"]), recorder=header["recorder"], modules=list(header["modules"]),
                    boundaries=[int(b) for b in header["boundaries"]],
                    spans=[(n, c, ident, int(a), int(b), int(s)) for n, c, ident, a, b, s in header["spans"]],
                    compiled_graphs=int(header.get("compiled_graphs", 0)),
                    unreadable_calls=int(header.get("unreadable_calls", 0)))
    for name, namespace, shapes, dtype, numel, extra, out_dtype in header["sigs"]:
        rec.intern(AtenCall(name, namespace, tuple(tuple(s) for s in shapes), dtype, int(numel),
                            _tuples(extra), out_dtype))
    if len(rec.sigs) != len(header["sigs"]):
        raise ValueError("repeated operator signatures")
    rec.chunks = [cols]
    n = len(cols["sig"])
    if any(len(v) != n for v in cols.values()) or (n and int(cols["sig"].max()) >= len(rec.sigs)):
        raise ValueError("inconsistent call columns")
    return RankPart(int(header["rank"]), int(header["local_rank"]), int(header["world_size"]),
                    int(header["pid"]), int(header["exit_code"]), int(header["main_thread"]), rec)
