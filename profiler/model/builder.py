"""Turns chip-model runs (one per step) plus host events into a `Profile`."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from device_model import __version__ as model_version
from device_model.core import Instance, Run, op_collective_cost
from device_model.engine.isa import COMPUTE_ENGINES, ENGINES, LANE_ENGINE, LANE_ROW, OPCODES, QUEUE_ROWS, QUEUES
from device_model.lowering.matmul import fed_rows
from device_model.program import Program

from .. import __version__
from .profile import BUSY_ENGINES, PHASES, ROW_REFS, SCHEMA, Profile, StringTable, empty_table

# engine index (isa.ENGINES) -> busy column (model.BUSY_ENGINES), -1: not reported (SyncE)
_BUSY_OF_ENGINE = np.array([BUSY_ENGINES.index(e) if e in BUSY_ENGINES else -1 for e in ENGINES])
_ENGINE_OF_LANE = np.array(LANE_ENGINE)


@dataclass(frozen=True, slots=True)
class OpInfo:
    """What the capture knows about an op beyond the chip model: where it came from."""
    module: str = ""
    shape: str = ""
    dtype: str = ""
    host: int = -1          # row in the host table of the call that launched it


def instance_meta(inst: Instance) -> dict:
    dev = inst.device
    return {
        "instance": inst.spec.name, "device": dev.name, "device_type": dev.device_type,
        "neuroncore_version": dev.core_version(inst.lnc), "lnc": inst.lnc,
        "clocks_hz": {**{e: getattr(dev, f"{e}_hz") for e in COMPUTE_ENGINES}, "base": dev.base_hz},
        "tensor_peak_flops_bf16": 2.0 * dev.pe_rows * dev.pe_cols * dev.tensor_hz,
        "hbm_bw_per_stack": dev.hbm_bw_per_stack, "exec_overhead_s": inst.costs.exec_overhead_s,
        "lane_rows": list(LANE_ROW), "lane_engines": [ENGINES[e] for e in LANE_ENGINE],
        "opcodes": list(OPCODES), "queues": list(QUEUES), "queue_rows": list(QUEUE_ROWS),
        "phases": list(PHASES), "is_simulation": True, "model_version": model_version,
    }


class ProfileBuilder:
    def __init__(self, inst: Instance, source: str, *, strings: StringTable | None = None,
                 **meta) -> None:
        """`strings`: a string table shared with other builders (ranks built side by side and
        joined by `join_ranks`)."""
        self.inst = inst
        self.strings = StringTable() if strings is None else strings
        self.meta = {**instance_meta(inst), "source": source, "tool_version": __version__,
                     "created_unix_s": time.time(), **meta}
        self._ins: list[dict[str, np.ndarray]] = []
        self._ops: list[dict[str, np.ndarray]] = []
        self._n_ops = 0
        self._steps: dict[tuple[int, int], list] = {}     # (rank index, step) -> steps row
        self._host = {c: [] for c in SCHEMA["host"]}
        self._coll = {c: [] for c in SCHEMA["collectives"]}
        self._sem: list[dict[str, np.ndarray]] = []
        self._throttles: list[tuple[float, float, float]] = []
        self._sem_count = np.zeros(len(LANE_ROW), dtype=np.int64)
        self._links: list[tuple[int, int, int]] = []
        self._n_ins = 0
        self._n_sem = 0
        self._rank_info: list[dict] = []           # captured ranks, in capture order
        self._rank_start: list[dict[str, int]] = []  # each rank's first row of every table

    # --- ranks -------------------------------------------------------------------------------
    def begin_rank(self, rank: int, **info) -> None:
        """Rows added from now on belong to captured rank `rank` (its own NeuronCore); `info`
        (stage, stages, core, ...) goes with its rows into `meta["ranks"]`. Without a call the
        profile holds one rank and no `ranks` entry, as before."""
        self._rank_info.append({"rank": int(rank), **info})
        self._rank_start.append(self._row_counts())
        self._sem_count[:] = 0          # every NeuronCore counts its own semaphore signals

    def _row_counts(self) -> dict[str, int]:
        return {"instructions": self._n_ins, "ops": self._n_ops, "steps": len(self._steps),
                "host": len(self._host["start"]), "collectives": len(self._coll["op"]),
                "semaphores": self._n_sem, "throttles": len(self._throttles)}

    def _rank_rows(self) -> list[dict]:
        """meta["ranks"]: each rank's info and its [start, stop) rows of every table."""
        ends = self._rank_start[1:] + [self._row_counts()]
        return [{**info, "rows": {t: [start[t], end[t]] for t in start}}
                for info, start, end in zip(self._rank_info, self._rank_start, ends)]

    # --- host events -------------------------------------------------------------------------
    def add_host(self, name: str, cat: str, tid: int, start: float, end: float, op: int = -1,
                 step: int = -1) -> int:
        h = self._host
        for key, value in (("name_s", self.strings(name)), ("cat_s", self.strings(cat)), ("tid", tid),
                           ("start", start), ("end", end), ("op", op), ("step", step)):
            h[key].append(value)
        return len(h["start"]) - 1


    @property
    def n_ops(self) -> int:
        return self._n_ops

    # --- device steps ------------------------------------------------------------------------
    def add_step(self, step: int, program: Program, run: Run, *, detailed: bool,
                 host_start: float, host_end: float, info: list[OpInfo] | None = None,
                 shift: float = 0.0) -> None:
        """One run (or one segment of a step's runs) of `step`; `shift` moves its times, so a
        deterministic run can be simulated once and placed at every step."""
        tl = run.timeline
        base = self._n_ops
        n = len(tl.op_names)
        rows = self._op_rows(step, program, run, info)
        rows["start"] += shift
        rows["end"] += shift
        self._ops.append(rows)
        self._add_collectives(program, run, base, shift)
        if detailed and len(tl):
            ins = {c: tl.columns[c].astype(np.dtype(d), copy=False) for c, d in
                   SCHEMA["instructions"].items()}
            ins["op"] = tl.columns["op"].astype(np.int32) + base
            ins["start"] = ins["start"] + shift
            ins["end"] = ins["end"] + shift
            self._ins.append(ins)
            self._n_ins += len(tl)
            self._add_semaphores(ins)
            self._throttles += [(t.start + shift, t.duration, t.ratio) for t in tl.throttles]
        start = (float(tl.op_start.min()) if n else tl.t0) + shift
        end = max(tl.end + shift, start)
        row = self._steps.get(self._step_key(step))
        if row is None:
            self._steps[self._step_key(step)] = [step, start, end, host_start, host_end, int(detailed)]
        else:
            row[1], row[2] = min(row[1], start), max(row[2], end)
            row[3], row[4] = min(row[3], host_start), max(row[4], host_end)
            row[5] = max(row[5], int(detailed))
        self._n_ops += n

    def set_host_end(self, host_row: int, end: float) -> None:
        self._host["end"][host_row] = end

    def link_ops_to_host(self, first_op: int, stop_op: int, host_row: int) -> None:
        """Ops [first_op, stop_op) were launched by host event `host_row` (correlation)."""
        self._links.append((first_op, stop_op, host_row))

    def set_step_device(self, step: int, start: float, end: float) -> None:
        """The device span of `step` on the current rank, when it is not just its ops' span
        (a pipeline stage idles inside the job's step before its first and after its last op)."""
        row = self._steps[self._step_key(step)]
        row[1], row[2] = start, end

    def set_step_host(self, step: int, start: float, end: float) -> None:
        row = self._steps[self._step_key(step)]
        row[3], row[4] = start, end

    def _step_key(self, step: int) -> tuple[int, int]:
        return len(self._rank_info), step

    def _op_rows(self, step: int, program: Program, run: Run, info: list[OpInfo] | None):
        tl = run.timeline
        per = tl.per_op()
        n = len(tl.op_names)
        rows = empty_table("ops", n)
        s = self.strings
        rows["name_s"][:] = [s(x) for x in tl.op_names]
        rows["kind_s"][:] = [s(x) for x in tl.op_kinds]
        rows["phase"][:] = [PHASES.index(p) if p in PHASES else 3 for p in tl.op_phases]
        rows["step"][:] = step
        rows["start"], rows["end"] = per["start"].astype(np.float64), per["end"].astype(np.float64)
        for q in ("flops", "hw_flops", "adj_flops", "hbm_r", "hbm_w"):
            rows[q] = per[q].astype(np.float64)
        rows["instructions"] = per["instructions"].astype(np.int64)
        busy = self._busy(tl, n)
        for j, e in enumerate(BUSY_ENGINES):
            rows[f"busy_{e}"] = busy[:, j]
        rows["host"][:] = -1
        if len(program.ops) == n:
            rows["mm_m"][:] = [_mm_rows(op) for op in program.ops]
        if info is not None:
            for key, attr in (("module_s", "module"), ("shape_s", "shape"), ("dtype_s", "dtype")):
                rows[key][:] = [s(getattr(i, attr)) for i in info]
            rows["host"][:] = [i.host for i in info]
        else:
            rows["dtype_s"][:] = [s(str(op.get("dtype", "") or "")) for op in program.ops]
            rows["shape_s"][:] = [s(_shape_text(op)) for op in program.ops]
        return rows

    @staticmethod
    def _busy(tl, n: int) -> np.ndarray:
        cols = tl.columns
        if not len(tl):
            return np.zeros((n, len(BUSY_ENGINES)))
        col = _BUSY_OF_ENGINE[_ENGINE_OF_LANE[cols["lane"]]]
        keep = col >= 0
        key = cols["op"][keep].astype(np.int64) * len(BUSY_ENGINES) + col[keep]
        dur = (cols["end"] - cols["start"])[keep]
        flat = np.bincount(key, weights=dur, minlength=n * len(BUSY_ENGINES))
        return flat[: n * len(BUSY_ENGINES)].reshape(n, len(BUSY_ENGINES))

    def _add_collectives(self, program: Program, run: Run, base: int, shift: float) -> None:
        tl = run.timeline
        for i, op in enumerate(program.ops):
            if op.kind != "collective":
                continue
            kind, nbytes, group = op.get("coll"), op.get("bytes"), op.get("group")
            cost = op_collective_cost(op, self.inst.device, self.inst.costs, self.inst.lnc)
            row = {"op": base + i, "kind_s": self.strings(kind), "algorithm_s": self.strings(cost.algorithm),
                   "bytes": nbytes, "ranks": group.ranks, "start": float(tl.op_start[i]) + shift,
                   "end": float(tl.op_end[i]) + shift, "algbw": cost.algbw, "busbw": cost.busbw}
            for k, v in row.items():
                self._coll[k].append(v)

    def _add_semaphores(self, ins: dict[str, np.ndarray]) -> None:
        """Each op signals one semaphore per engine lane when its last instruction there ends
        (the sync an engine gives its consumers); the value counts signals so far."""
        key = ins["op"].astype(np.int64) * len(LANE_ROW) + ins["lane"]
        order = np.argsort(key, kind="stable")
        k_sorted = key[order]
        first = np.flatnonzero(np.r_[True, k_sorted[1:] != k_sorted[:-1]])
        ends = np.maximum.reduceat(ins["end"][order], first)
        lanes = (k_sorted[first] % len(LANE_ROW)).astype(np.int32)
        by_time = np.argsort(ends, kind="stable")
        ends, lanes = ends[by_time], lanes[by_time]
        values = np.zeros(lanes.size, dtype=np.int64)
        for lane in np.unique(lanes):
            sel = lanes == lane
            values[sel] = self._sem_count[lane] + np.arange(1, sel.sum() + 1)
            self._sem_count[lane] += sel.sum()
        self._sem.append({"time": ends, "sem": lanes, "value": values})
        self._n_sem += ends.size

    # --- result -----------------------------------------------------------------------------
    def build(self, **meta) -> Profile:
        tables = {name: _concat(name, parts) for name, parts in self._chunks().items()}
        ranks = self._rank_rows()
        if ranks:
            meta = {"ranks": ranks, **meta}
        profile = Profile({**self.meta, **meta}, tuple(self.strings.strings), tables)
        profile.validate("capture")
        return profile

    def _chunks(self) -> dict[str, list[dict[str, np.ndarray]]]:
        """Every table as a list of column chunks, the operators' self time and launches set:
        `build` concatenates them, `join_ranks` those of several builders (one copy of the
        large instruction table, not two)."""
        ops = _concat("ops", self._ops)
        for a, b in [r["rows"]["ops"] for r in self._rank_rows()] or [(0, ops["start"].size)]:
            # per NeuronCore: ranks run at the same time on different cores
            ops["self_time"][a:b] = exclusive_time(ops["start"][a:b], ops["end"][a:b])
        for first, stop, host_row in self._links:
            ops["host"][first:stop] = host_row
        return {
            "instructions": self._ins,
            "ops": [ops],
            "steps": [_from_rows("steps", [self._steps[k] for k in sorted(self._steps)])],
            "host": [_from_cols("host", self._host)],
            "collectives": [_from_cols("collectives", self._coll)],
            "semaphores": self._sem,
            "throttles": [_from_rows("throttles", self._throttles)],
        }


def join_ranks(builders: list[ProfileBuilder], **meta) -> Profile:
    """The ranks of several builders (one `begin_rank` each, one string table shared) as one
    profile, in order: every table's rows rank after rank, row references moved past the rows
    before them, `meta["ranks"]` giving each rank its rows; `meta` added to the first's."""
    strings = builders[0].strings
    if any(b.strings is not strings or len(b._rank_info) != 1 for b in builders):
        raise ValueError("join_ranks: builders of one rank each, sharing one string table")
    first = {name: 0 for name in SCHEMA}
    joined: dict[str, list[dict[str, np.ndarray]]] = {name: [] for name in SCHEMA}
    entries = []
    for builder in builders:
        chunks = builder._chunks()
        for name, col, target in ROW_REFS:
            chunks[name] = [{**c, col: _moved(c[col], first[target])} for c in chunks[name]]
        rows = {}
        for name in SCHEMA:
            n = sum(int(next(iter(c.values())).shape[0]) for c in chunks[name])
            rows[name] = [first[name], first[name] + n]
            joined[name] += chunks[name]
            first[name] += n
        entries.append({**builder._rank_info[0], "rows": rows})
    tables = {name: _concat(name, parts) for name, parts in joined.items()}
    meta = {**builders[0].meta, "ranks": entries, **meta}
    profile = Profile(meta, tuple(strings.strings), tables)
    profile.validate("capture")
    return profile


def _moved(ref: np.ndarray, by: int) -> np.ndarray:
    """Row references moved `by` rows (-1, none, stays)."""
    if not by:
        return ref
    return np.where(ref >= 0, ref + by, ref).astype(ref.dtype, copy=False)


def exclusive_time(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each op's share of wall time: every instant is split equally among the ops running then,
    so the shares add up to the busy (union) time."""
    if start.size == 0:
        return np.zeros(0)
    edges = np.unique(np.concatenate([start, end]))
    delta = np.zeros(edges.size)
    np.add.at(delta, np.searchsorted(edges, start), 1.0)
    np.add.at(delta, np.searchsorted(edges, end), -1.0)
    active = np.cumsum(delta)[:-1]
    widths = np.diff(edges)
    share = np.where(active > 0, widths / np.maximum(active, 1), 0.0)
    cum = np.concatenate([[0.0], np.cumsum(share)])
    return cum[np.searchsorted(edges, end)] - cum[np.searchsorted(edges, start)]


def _mm_rows(op) -> int:
    """The rows M a matmul feeds TensorE (the lowering's own folding); 0 for any other op."""
    if getattr(op, "kind", None) != "matmul" or op.get("m") is None:
        return 0
    return int(fed_rows(op)[0])


def _shape_text(op) -> str:
    keys = ("m", "k", "n", "batch", "rows", "cols", "hidden", "tokens", "elements", "bytes")
    return ",".join(f"{k}={op.get(k)}" for k in keys if op.get(k) is not None)


def _concat(name: str, parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if not parts:
        return empty_table(name)
    return {c: np.concatenate([p[c] for p in parts]).astype(np.dtype(d), copy=False)
            for c, d in SCHEMA[name].items()}


def _from_rows(name: str, rows: list[tuple]) -> dict[str, np.ndarray]:
    cols = list(SCHEMA[name])
    if not rows:
        return empty_table(name)
    return {c: np.array([r[i] for r in rows], dtype=np.dtype(SCHEMA[name][c])) for i, c in enumerate(cols)}


def _from_cols(name: str, cols: dict[str, list]) -> dict[str, np.ndarray]:
    return {c: np.array(cols[c], dtype=np.dtype(d)) for c, d in SCHEMA[name].items()}
