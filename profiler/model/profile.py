"""The in-memory profile: metadata, an interned string table and columnar tables.

Times are seconds from the start of the capture; bytes and FLOPs are plain counts. Every table is
a dict of equal-length numpy columns. Text columns hold indices into `Profile.strings`.

Tables and columns (the schema the file describes and `validate` checks):
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from device_model.engine.isa import E_SYNC, ENGINES

PHASES = ("forward", "backward", "optimizer", "other")

# engines whose busy time each operator row keeps: all but SyncE (it only waits on semaphores)
BUSY_ENGINES = tuple(e for i, e in enumerate(ENGINES) if i != E_SYNC)

# table -> column -> numpy dtype string. String-valued columns end in "_s" (index into strings).
SCHEMA: dict[str, dict[str, str]] = {
    # one row per instruction, only for the steps captured at instruction level
    "instructions": {"lane": "|u1", "opcode": "|u1", "queue": "|u1", "op": "<i4", "start": "<f8",
                     "end": "<f8", "flops": "<f4", "hw_flops": "<f4", "transpose_flops": "<f4",
                     "adj_flops": "<f4", "adj_hw_flops": "<f4", "hbm_r": "<f4", "hbm_w": "<f4",
                     "sbuf_r": "<f4", "sbuf_w": "<f4", "psum_r": "<f4", "psum_w": "<f4"},
    # one row per operator execution, every step
    "ops": {"name_s": "<i4", "kind_s": "<i4", "module_s": "<i4", "shape_s": "<i4", "dtype_s": "<i4",
            "phase": "|u1", "step": "<i4", "start": "<f8", "end": "<f8", "self_time": "<f8",
            "flops": "<f8", "hw_flops": "<f8", "adj_flops": "<f8", "hbm_r": "<f8", "hbm_w": "<f8",
            "instructions": "<i8", **{f"busy_{e}": "<f8" for e in BUSY_ENGINES}, "host": "<i8",
            # a matmul's rows M as fed to TensorE (its `m`, times its batch when the weights are
            # shared); 0 for other ops and in files written before the column existed
            "mm_m": "<i8"},
    # one row per step (execution); detailed = instruction level kept
    "steps": {"step": "<i4", "start": "<f8", "end": "<f8", "host_start": "<f8", "host_end": "<f8",
              "detailed": "|u1"},
    # measured host (CPU) events: operator calls, module spans, launches, data loading
    "host": {"name_s": "<i4", "cat_s": "<i4", "tid": "<i8", "start": "<f8", "end": "<f8",
             "op": "<i8", "step": "<i4"},
    "collectives": {"op": "<i8", "kind_s": "<i4", "algorithm_s": "<i4", "bytes": "<f8",
                    "ranks": "<i4", "start": "<f8", "end": "<f8", "algbw": "<f8", "busbw": "<f8"},
    "semaphores": {"time": "<f8", "sem": "<i4", "value": "<i8"},
    "throttles": {"start": "<f8", "duration": "<f8", "ratio": "<f8"},
}

# columns added after schema version 1 shipped: a file without them reads as all zeros
OPTIONAL_ZERO = {"ops": ("mm_m",)}

# row references between tables: (table, column, the table whose row it names); -1 names none
ROW_REFS = (("instructions", "op", "ops"), ("collectives", "op", "ops"), ("host", "op", "ops"),
            ("ops", "host", "host"))


class ProfileError(ValueError):
    """A profile that cannot be read or used; the message is one line fit for stderr."""


def empty_table(name: str, rows: int = 0) -> dict[str, np.ndarray]:
    return {c: np.zeros(rows, dtype=np.dtype(d)) for c, d in SCHEMA[name].items()}


@dataclass(frozen=True, slots=True)
class Profile:
    meta: dict
    strings: tuple[str, ...]
    tables: dict[str, dict[str, np.ndarray]]

    def table(self, name: str) -> dict[str, np.ndarray]:
        return self.tables.get(name) or empty_table(name)

    def rows(self, name: str) -> int:
        t = self.table(name)
        return int(next(iter(t.values())).shape[0]) if t else 0

    def text(self, indices: np.ndarray) -> list[str]:
        s = self.strings
        return [s[i] for i in np.asarray(indices).tolist()]

    def timeline_rows(self) -> tuple[np.ndarray, list[str]]:
        """Each instruction's row in AWS's profiler timeline (neuron-tools.md §4.4), as an index
        into the returned names (the lanes' rows, then the DMA queues'): its engine lane's row
        (`TensorMatrixE`, `VectorE`, ...), and for a DMA transfer its queue's (`qSyncIO0`, ...;
        the first queue's for one of no known queue). The traces and the JSON view share it."""
        meta = self.meta
        lanes, queues = list(meta["lane_rows"]), list(meta["queue_rows"])
        ins = self.table("instructions")
        rows = ins["lane"].astype(np.int64)
        if "DMA" in lanes and queues:
            dma = rows == lanes.index("DMA")
            queue = ins["queue"][dma].astype(np.int64)
            rows[dma] = len(lanes) + np.where(queue < len(queues), queue, 0)
        return rows, lanes + queues


    def require_tables(self, where: str = "profile") -> None:
        """Every table and column of the schema is present (ProfileError naming the first missing)."""
        for name, cols in SCHEMA.items():
            table = self.tables.get(name)
            if table is None:
                raise ProfileError(f"{where}: profile has no {name!r} table")
            missing = [c for c in cols if c not in table]
            if missing:
                raise ProfileError(f"{where}: table {name!r} lacks column {missing[0]!r}")

    def validate(self, where: str = "profile") -> None:
        """Cheap structural checks so that later code never indexes out of range."""
        self.require_tables(where)
        n_str, n_ops = len(self.strings), self.rows("ops")
        for name, cols in SCHEMA.items():
            for c in cols:
                if c.endswith("_s") and self.rows(name):
                    col = self.tables[name][c]
                    if col.min() < 0 or col.max() >= n_str:
                        raise ProfileError(f"{where}: {name}.{c} points outside the string table")
        ins = self.tables["instructions"]["op"]
        if ins.size and (ins.min() < 0 or ins.max() >= n_ops):
            raise ProfileError(f"{where}: an instruction points to a missing operator")
        # a rank's view keeps only its own rows: a call or operator of another rank is missing
        for table, col, target, what in (("ops", "host", "host", "an operator points to a missing host call"),
                                         ("host", "op", "ops", "a host call points to a missing operator")):
            ref = self.tables[table][col]
            if ref.size and (ref.min() < -1 or ref.max() >= self.rows(target)):
                raise ProfileError(f"{where}: {what}")
        for key in ("lane_rows", "opcodes", "queue_rows", "instance"):
            if key not in self.meta:
                raise ProfileError(f"{where}: profile metadata lacks {key!r}")
        lanes = self.tables["instructions"]["lane"]
        if lanes.size and int(lanes.max()) >= len(self.meta["lane_rows"]):
            raise ProfileError(f"{where}: an instruction names an unknown engine lane")


class StringTable:
    """Interns strings while a profile is built."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.strings: list[str] = []
        self("")

    def __call__(self, text: str) -> int:
        i = self.index.get(text)
        if i is None:
            i = self.index[text] = len(self.strings)
            self.strings.append(text)
        return i
