"""The timeline layout shared by the Chrome and Perfetto writers: which thread (track) every
instruction and operator lands on, integer-nanosecond times that never overlap on a thread, and
the counter tracks (HBM bandwidth, DMA throughput, TensorMatrix utilization)."""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ..model.profile import Profile

DEVICE_PID = 0
DMA_TID_BASE = 20
OP_TID_BASE = 100
_OFFSET = np.int64(1) << 50     # per-thread offset for the grouped running maximum


@dataclass(frozen=True, slots=True)
class Thread:
    tid: int
    name: str
    sort: int


@dataclass(frozen=True, slots=True)
class Layout:
    """Instruction rows in (thread, start) order with clipped integer-ns times."""
    order: np.ndarray          # instruction row of each event
    tid: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    threads: tuple[Thread, ...]


def device_pid(profile: Profile) -> int:
    """The NeuronCore's process id: the rank in a rank's view, DEVICE_PID otherwise."""
    return int(profile.meta.get("device_pid", DEVICE_PID))


def host_pid(profile: Profile) -> int:
    return int(profile.meta.get("host_pid", 1))


def to_ns(seconds: np.ndarray) -> np.ndarray:
    return np.rint(np.asarray(seconds, dtype=np.float64) * 1e9).astype(np.int64)


def instruction_tids(profile: Profile) -> tuple[np.ndarray, list[Thread]]:
    """Thread per instruction: one per timeline row (AWS row names), DMA split by queue."""
    rows, names = profile.timeline_rows()
    lanes = len(profile.meta["lane_rows"])

    def tid_of(row):
        return np.where(row < lanes, row + 1, DMA_TID_BASE + row - lanes)
    threads = [Thread(int(tid_of(r)), names[r], int(tid_of(r))) for r in np.unique(rows).tolist()]
    return tid_of(rows), threads


def no_overlap(tid: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> tuple[np.ndarray, ...]:
    """Sort by (thread, start) and push each start past every earlier end on its thread."""
    order = np.lexsort((start_ns, tid))
    t, s, e = tid[order], start_ns[order], end_ns[order]
    shifted = e + t.astype(np.int64) * _OFFSET
    prev = np.maximum.accumulate(shifted) - t.astype(np.int64) * _OFFSET
    prev = np.r_[np.iinfo(np.int64).min, prev[:-1]]
    same = np.r_[False, t[1:] == t[:-1]]
    s = np.where(same, np.maximum(s, prev), s)
    return order, t, s, np.maximum(e - s, 0)


def instruction_layout(profile: Profile) -> Layout:
    ins = profile.table("instructions")
    tid, threads = instruction_tids(profile)
    order, t, s, d = no_overlap(tid, to_ns(ins["start"]), to_ns(ins["end"]))
    return Layout(order, t, s, d, tuple(threads))


def op_rows(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Greedy interval partitioning: the lowest row free at each op's start (ops overlap on
    the device because loads of the next op run under the current one)."""
    row = np.zeros(start.size, dtype=np.int64)
    free: list[tuple[int, int]] = []        # (end, row) heap
    spare: list[int] = []
    n_rows = 0
    for i in np.argsort(start, kind="stable").tolist():
        while free and free[0][0] <= start[i]:
            heapq.heappush(spare, heapq.heappop(free)[1])
        if spare:
            r = heapq.heappop(spare)
        else:
            r, n_rows = n_rows, n_rows + 1
        row[i] = r
        heapq.heappush(free, (int(end[i]), r))
    return row


@dataclass(frozen=True, slots=True)
class Counter:
    name: str
    unit: str
    times_ns: np.ndarray
    values: np.ndarray


def _cumulative(edges: np.ndarray, start: np.ndarray, end: np.ndarray, amount: np.ndarray) -> np.ndarray:
    """Amount delivered by `edges`, each interval's amount spread evenly over it; intervals must
    not overlap (one lane) and are sorted by start."""
    if start.size == 0:
        return np.zeros(edges.size)
    cum = np.r_[0.0, np.cumsum(amount)]
    j = np.searchsorted(start, edges, side="right") - 1
    jj = np.clip(j, 0, start.size - 1)
    span = np.maximum(end[jj] - start[jj], 1e-18)
    part = np.clip((edges - start[jj]) / span, 0.0, 1.0) * amount[jj]
    return np.where(j >= 0, cum[jj] + part, 0.0)


def counters(profile: Profile, bins: int = 400) -> list[Counter]:
    """Per-bin rates over each instruction-level step."""
    ins = profile.table("instructions")
    if ins["start"].size == 0:
        return []
    meta = profile.meta
    lnc = int(meta.get("lnc", 1))
    rows = meta["lane_rows"]
    steps = profile.table("steps")
    edges_parts = []
    for s, e, d in zip(steps["start"], steps["end"], steps["detailed"]):
        if d and e > s:
            edges_parts.append(np.linspace(s, e, max(2, bins // max(1, int(steps["detailed"].sum()))) + 1))
    if not edges_parts:
        return []
    out: dict[str, list] = {"HBM Bandwidth": [], "DMA Throughput": [], "TensorMatrix Utilization": []}
    times = []
    for edges in edges_parts:
        width = np.diff(edges)
        hbm = np.zeros(edges.size)
        dma = np.zeros(edges.size)
        for lane_name in ("DMA", "CC-core"):
            if lane_name not in rows:
                continue
            sel = ins["lane"] == rows.index(lane_name)
            st, en = ins["start"][sel], ins["end"][sel]
            o = np.argsort(st, kind="stable")
            moved = (ins["hbm_r"][sel].astype(np.float64) + ins["hbm_w"][sel])[o] * lnc
            c = _cumulative(edges, st[o], en[o], moved)
            hbm += c
            if lane_name == "DMA":
                dma += c
        pe = ins["lane"] == rows.index("TensorMatrixE")
        st, en = ins["start"][pe], ins["end"][pe]
        o = np.argsort(st, kind="stable")
        busy = _cumulative(edges, st[o], en[o], (en - st)[o])
        out["HBM Bandwidth"].append(np.diff(hbm) / width)
        out["DMA Throughput"].append(np.diff(dma) / width)
        out["TensorMatrix Utilization"].append(np.clip(np.diff(busy) / width, 0, 1))
        times.append(edges[:-1])
    t_ns = to_ns(np.concatenate(times))
    units = {"HBM Bandwidth": "bytes/s", "DMA Throughput": "bytes/s", "TensorMatrix Utilization": "ratio"}
    return [Counter(name, units[name], t_ns, np.concatenate(v)) for name, v in out.items()]
