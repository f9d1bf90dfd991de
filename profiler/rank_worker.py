"""One torchrun worker under `neuron-profile capture -- torchrun ...`, and the part file it leaves.

torchrun starts every worker as `python -m profiler.rank_worker SCRIPT ARGS` (its own `-m`);
the capture's settings come in $NEURONSCOPE_RANK_CAPTURE. A worker records itself like the
single-process child (profiler/script.py) and, whatever way the script ends (return, exit, an
exception, SIGINT, or the SIGTERM torchrun sends the other workers when one fails), writes its
recording, unmapped, as one part file: an .npz of the call columns plus a JSON header, no
pickles, written under a temporary name and renamed. Mapping onto the chip is left to the
capture, so a worker that torchrun stops (and kills 30 s later) only has one file to write.
"""
from __future__ import annotations

import io
import os
import signal
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

ENV = "NEURONSCOPE_RANK_CAPTURE"
PART_VERSION = 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True, slots=True)
class RankPart:
    """A worker's recording and who it was."""
    rank: int
    local_rank: int
    world_size: int
    pid: int
    exit_code: int
    main_thread: int          # ident of the thread that ran the script (spans name it)
    recording: object         # torch_capture.Recording


def part_path(folder: str | os.PathLike, rank: int) -> Path:
    return Path(folder) / f"rank-{rank:05d}.npz"


def save_part(folder: str | os.PathLike, part: RankPart) -> Path:
    rec = part.recording
    cols = rec.table()
    header = {"version": PART_VERSION, "rank": part.rank, "local_rank": part.local_rank,
              "world_size": part.world_size, "pid": part.pid, "exit_code": part.exit_code,
              "main_thread": part.main_thread, "t0": rec.t0, "recorder": rec.recorder,
              "modules": rec.modules, "boundaries": rec.boundaries, "spans": rec.spans,
              "sigs": [[c.name, c.namespace, c.shapes, c.dtype, c.out_numel, c.extra] for c in rec.sigs]}
    buf = io.BytesIO()
    np.savez(buf, header=np.frombuffer(orjson.dumps(header), dtype=np.uint8), **cols)
    path = part_path(folder, part.rank)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)          # a reader sees a whole part or none
    return path


def load_part(path: str | os.PathLike) -> RankPart:
    """A part written by save_part; ValueError (or OSError) when it is not one."""
    name = Path(path).name
    try:
        return _read_part(path)
    except ValueError as e:         # numpy's and ours (orjson's decode error is one too)
        raise ValueError(f"{name}: not a readable part ({e})") from None
    except (zipfile.BadZipFile, EOFError, KeyError, TypeError) as e:
        raise ValueError(f"{name}: not a readable part ({type(e).__name__}: {e})") from None


def _read_part(path: str | os.PathLike) -> RankPart:
    from .aten_map import AtenCall
    from .torch_capture import COLUMNS, Recording
    with np.load(path, allow_pickle=False) as z:
        header = orjson.loads(z["header"].tobytes())
        cols = {c: z[c].astype(t, copy=False) for c, t in COLUMNS.items()}
    if header.get("version") != PART_VERSION:
        raise ValueError(f"part version {header.get('version')!r}, expected {PART_VERSION}")
    rec = Recording(t0=int(header["t0"]), recorder=header["recorder"], modules=list(header["modules"]),
                    boundaries=[int(b) for b in header["boundaries"]],
                    spans=[(n, c, ident, int(a), int(b), int(s)) for n, c, ident, a, b, s in header["spans"]])
    for name, namespace, shapes, dtype, numel, extra in header["sigs"]:
        rec.intern(AtenCall(name, namespace, tuple(tuple(s) for s in shapes), dtype, int(numel), tuple(extra)))
    if len(rec.sigs) != len(header["sigs"]):
        raise ValueError("repeated operator signatures")
    rec.chunks = [cols]
    n = len(cols["sig"])
    if any(len(v) != n for v in cols.values()) or (n and int(cols["sig"].max()) >= len(rec.sigs)):
        raise ValueError("inconsistent call columns")
    return RankPart(int(header["rank"]), int(header["local_rank"]), int(header["world_size"]),
                    int(header["pid"]), int(header["exit_code"]), int(header["main_thread"]), rec)


# --- the worker ------------------------------------------------------------------------------

_stopped_by: list[int] = []


def _stop_once(signum, frame) -> None:
    """The first SIGINT or SIGTERM stops the script; later ones are ignored while the part is
    written."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    _stopped_by.append(signum)
    raise KeyboardInterrupt


def _identity() -> tuple[int, int, int]:
    """(rank, local rank, world size), as torchrun set them for this worker."""
    env = os.environ
    return int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1))


def worker_main(argv: list[str]) -> int:
    import threading
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop_once)
    try:
        config = orjson.loads(os.environ[ENV])
    except (KeyError, orjson.JSONDecodeError):
        print(f"neuron-profile: error: ${ENV} is not set; this worker runs under "
              "`neuron-profile capture -- torchrun ...`", file=sys.stderr)
        return 2
    from .script import record_run
    ran = record_run(config, argv, STOP_SIGNALS)     # the part gets written whatever
    if ran is None:
        return 2
    code, recording = ran
    if _stopped_by:
        code = 128 + _stopped_by[0]
    rank, local_rank, world = _identity()
    save_part(config["parts"], RankPart(rank, local_rank, world, os.getpid(), code, threading.get_ident(),
                                        recording))
    return code


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
