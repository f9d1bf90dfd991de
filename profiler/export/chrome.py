"""Kineto-shaped Chrome trace JSON (`.json` or `.json.gz`), encoded with numpy.

- one process per NeuronCore (pid = core index), one thread per engine lane or DMA queue, named
  like AWS's timeline rows; instructions are `kernel` X events whose `args.stream` is the thread
  and `args.correlation` the host call that launched their operator (HTA joins on it);
- operator spans (`gpu_user_annotation`) on "Operators" rows of the same process;
- the host process: `ProfilerStep#N` annotations, operator calls, launches, data loading;
- flows: `ac2g` from each host call to its operator's first instruction and `op2inst` from each
  operator span to its first instruction (`bp: "e"` on the finish, as Kineto writes them);
  an `ac2g` flow's id is its host call's correlation id;
- counter tracks: HBM Bandwidth, DMA Throughput, TensorMatrix Utilization.

Collective instructions are named `ncclKernel_<OPCODE>` and DMA instructions `Memcpy <OPCODE>` so
HTA's kernel-type rules count them as communication and memory; other names are AWS's opcodes.

Several profiles (the ranks of a capture) can share one trace: each is written with its own
`TraceIds` (process ids and names, id ranges) and the streams of `chrome_events` are joined.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Iterator

import numpy as np
import orjson

from .jsonenc import Int, IntOf, Micros, Text, encode_records, iter_records
from ..model.profile import PHASES, Profile
from .tracks import (OP_TID_BASE, Layout, counters, device_pid, host_pid, instruction_layout,
                     op_rows, to_ns)
from .traceio import write_atomic

# Correlation ids start high like Kineto's (HTA downcasts small id columns to int8 and then
# cannot store row indices in them).
CORRELATION_BASE = 1 << 20
EVENTS_END = b"\n]}\n"
COLLECTIVE_OPCODES = {"ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL", "SEND_RECV"}


@dataclass(frozen=True, slots=True)
class TraceIds:
    """One profile's place in a trace: the process ids and names its events carry, the first of
    its correlation ids (host call row i: `first_correlation + i`, also the id of the call's
    `ac2g` flow) and the first of its `op2inst` flow ids (op row j: `first_op_flow + j`)."""
    device_pid: int
    host_pid: int
    device_name: str
    host_name: str
    first_correlation: int
    first_op_flow: int


def trace_ids(profiles: list[Profile]) -> list[TraceIds]:
    """The ids of profiles written into one trace: process ids from their metadata (a rank's
    view names its rank), correlation ids numbered on from one profile to the next from
    CORRELATION_BASE, and op2inst ids after all of them (from 2 * CORRELATION_BASE unless the
    host calls need more), so no id is shared between profiles or between the two flow kinds."""
    calls = [p.rows("host") for p in profiles]
    ops = [p.rows("ops") for p in profiles]
    first_corr = CORRELATION_BASE + np.cumsum([0] + calls[:-1])
    first_flow = CORRELATION_BASE + max(CORRELATION_BASE, sum(calls)) + np.cumsum([0] + ops[:-1])
    out = []
    for p, corr, flow in zip(profiles, first_corr.tolist(), first_flow.tolist()):
        meta = p.meta
        pid = device_pid(p)
        where = f"{meta['rank_label']}, " if "rank_label" in meta else ""
        name = f"NeuronCore {pid} ({where}{meta['instance']}, {meta['device']}, LNC={meta['lnc']})"
        out.append(TraceIds(pid, host_pid(p), name, meta.get("host_name", "Host"), corr, flow))
    return out


def kernel_name(opcode: str) -> str:
    """AWS's opcode, with the prefixes HTA's kernel-type rules look for on collectives
    (`^nccl.*Kernel` -> communication) and DMA transfers (`^Memcpy` -> memory)."""
    if opcode in COLLECTIVE_OPCODES:
        return f"ncclKernel_{opcode}"
    if opcode.startswith("DMA_"):
        return f"Memcpy {opcode}"
    return opcode


def _instruction_events(profile: Profile, lay: Layout, corr: np.ndarray,
                        pid: int) -> Iterator[bytes]:
    """Chunks of instruction events, encoded as they are consumed (memory stays bounded)."""
    ins = profile.table("instructions")
    names = tuple(kernel_name(o) for o in profile.meta["opcodes"])
    op = ins["op"][lay.order]
    tid = Int(lay.tid)          # written twice (tid and stream), converted once
    return iter_records([
        b'{"ph":"X","cat":"kernel","name":', Text(ins["opcode"][lay.order], names),
        b',"pid":%d,"tid":' % pid, tid, b',"ts":', Micros(lay.start_ns),
        b',"dur":', Micros(lay.dur_ns), b',"args":{"correlation":', IntOf(op, corr),
        b',"stream":', tid, b',"op":', Int(op), b'}},\n'],
        lay.order.size)


def _op_events(profile: Profile, pid: int) -> tuple[bytes, np.ndarray, np.ndarray]:
    ops = profile.table("ops")
    start, end = to_ns(ops["start"]), to_ns(ops["end"])
    end = np.maximum(end, start)
    rows = op_rows(start, end)
    data = encode_records([
        b'{"ph":"X","cat":"gpu_user_annotation","name":', Text(ops["name_s"], profile.strings),
        b',"pid":%d,"tid":' % pid, Int(OP_TID_BASE + rows), b',"ts":', Micros(start),
        b',"dur":', Micros(end - start), b',"args":{"step":', Int(np.maximum(ops["step"], 0)),
        b',"phase":', Text(ops["phase"], PHASES), b',"module":', Text(ops["module_s"], profile.strings),
        b',"External id":', Int(ops["host"] + 1), b'}},\n'], start.size)
    return data, rows, start


def _first_instruction(profile: Profile, lay: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each op that has instructions: (op row, tid, start ns) of its first instruction."""
    op = profile.table("instructions")["op"][lay.order].astype(np.int64)
    if op.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    o = np.lexsort((lay.start_ns, op))
    first = np.flatnonzero(np.r_[True, op[o][1:] != op[o][:-1]])
    pick = o[first]
    return op[pick], lay.tid[pick], lay.start_ns[pick]


def _flows(cat: bytes, ids: np.ndarray, src_pid: int, src_tid: np.ndarray, src_ts: np.ndarray,
           dst_pid: int, dst_tid: np.ndarray, dst_ts: np.ndarray) -> bytes:
    n = ids.size
    start = encode_records([b'{"ph":"s","id":', Int(ids), b',"pid":', Int(np.full(n, src_pid)),
                            b',"tid":', Int(src_tid), b',"ts":', Micros(src_ts),
                            b',"cat":"%s","name":"%s"},\n' % (cat, cat)], n)
    finish = encode_records([b'{"ph":"f","id":', Int(ids), b',"pid":%d,"tid":' % dst_pid,
                             Int(dst_tid), b',"ts":', Micros(dst_ts),
                             b',"cat":"%s","name":"%s","bp":"e"},\n' % (cat, cat)], n)
    return start + finish


def _host_events(profile: Profile, launched: set[int], ids: TraceIds) -> list[bytes]:
    host = profile.table("host")
    out = []
    start, end = to_ns(host["start"]), to_ns(host["end"])
    for i, (n, c, tid, s, e, st) in enumerate(zip(host["name_s"].tolist(), host["cat_s"].tolist(),
                                                  host["tid"].tolist(), start.tolist(), end.tolist(),
                                                  host["step"].tolist())):
        args = {"correlation": ids.first_correlation + i} if i in launched else {}
        if st >= 0:
            args["step"] = st
        out.append(orjson.dumps({"ph": "X", "cat": profile.strings[c], "name": profile.strings[n],
                                 "pid": ids.host_pid, "tid": tid, "ts": s / 1000,
                                 "dur": max(e - s, 0) / 1000, "args": args}))
    return out


def _counter_events(profile: Profile, pid: int) -> list[bytes]:
    out = []
    for c in counters(profile):
        for t, v in zip((c.times_ns / 1000).tolist(), c.values.tolist()):
            out.append(orjson.dumps({"ph": "C", "name": c.name, "pid": pid, "ts": t,
                                     "args": {c.unit: v}}))
    return out


def _metadata_events(profile: Profile, lay: Layout, n_op_rows: int, ids: TraceIds) -> list[bytes]:
    dev, host = ids.device_pid, ids.host_pid
    ev = [
        {"ph": "M", "name": "process_name", "pid": dev, "args": {"name": ids.device_name}},
        {"ph": "M", "name": "process_labels", "pid": dev,
         "args": {"labels": profile.meta.get("source", "")}},
        {"ph": "M", "name": "process_sort_index", "pid": dev, "args": {"sort_index": 1}},
        {"ph": "M", "name": "process_name", "pid": host, "args": {"name": ids.host_name}},
        {"ph": "M", "name": "process_sort_index", "pid": host, "args": {"sort_index": 0}},
    ]
    for th in lay.threads:
        ev.append({"ph": "M", "name": "thread_name", "pid": dev, "tid": th.tid,
                   "args": {"name": th.name}})
        ev.append({"ph": "M", "name": "thread_sort_index", "pid": dev, "tid": th.tid,
                   "args": {"sort_index": th.sort}})
    for r in range(n_op_rows):
        ev.append({"ph": "M", "name": "thread_name", "pid": dev, "tid": OP_TID_BASE + r,
                   "args": {"name": f"Operators (row {r})"}})
        ev.append({"ph": "M", "name": "thread_sort_index", "pid": dev, "tid": OP_TID_BASE + r,
                   "args": {"sort_index": r}})
    for tid in sorted(set(profile.table("host")["tid"].tolist())):
        ev.append({"ph": "M", "name": "thread_name", "pid": host, "tid": tid,
                   "args": {"name": f"thread {tid}"}})
    return [orjson.dumps(e) for e in ev]


def chrome_header(profiles: list[Profile], ids: list[TraceIds]) -> bytes:
    """The trace's keys up to and including the opening of `traceEvents` (the first profile's
    metadata; one device entry per profile)."""
    meta = profiles[0].meta
    devices = [{"id": i.device_pid, "name": f"{p.meta['device']} NeuronCore",
                "instance": p.meta["instance"], "lnc": p.meta["lnc"],
                "tensorPeakFlopsBf16": p.meta["tensor_peak_flops_bf16"],
                "hbmBandwidthPerStack": p.meta["hbm_bw_per_stack"]} for p, i in zip(profiles, ids)]
    return orjson.dumps({
        "schemaVersion": 1,
        "deviceProperties": devices,
        "distributedInfo": {"backend": "neuron-sim", "rank": 0, "world_size": 1},
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": int(meta.get("created_unix_s", 0) * 1e9),
        "traceName": meta.get("workload") or meta.get("command", "profile"),
    })[:-1] + b',"traceEvents":[\n'


def chrome_events(profile: Profile, ids: TraceIds) -> tuple[Iterator[bytes], int]:
    """The profile's events as byte chunks (instruction events encoded lazily), each followed
    by a comma and a newline except the last, and their count."""
    ops = profile.table("ops")
    lay = instruction_layout(profile)
    dev = ids.device_pid
    corr = np.where(ops["host"] >= 0, ops["host"].astype(np.int64) + ids.first_correlation, 0)
    op_data, rows, op_start = _op_events(profile, dev)
    launched = set(ops["host"][ops["host"] >= 0].tolist())
    f_op, f_tid, f_ts = _first_instruction(profile, lay)
    hosted = ops["host"][f_op] >= 0
    host = profile.table("host")
    h_row = ops["host"][f_op][hosted]
    flows = _flows(b"ac2g", h_row + ids.first_correlation, ids.host_pid, host["tid"][h_row],
                   to_ns(host["start"][h_row]), dev, f_tid[hosted], f_ts[hosted])
    flows += _flows(b"op2inst", f_op + ids.first_op_flow, dev, OP_TID_BASE + rows[f_op],
                    op_start[f_op], dev, f_tid, f_ts)
    small = _host_events(profile, launched, ids) + _counter_events(profile, dev) + \
        _metadata_events(profile, lay, int(rows.max()) + 1 if rows.size else 0, ids)
    count = lay.order.size + ops["start"].size + 2 * (h_row.size + f_op.size) + len(small)
    ins_data = _instruction_events(profile, lay, corr, dev)
    return chain(ins_data, [op_data, flows, b",\n".join(small)]), count


def chrome_chunks(profile: Profile) -> tuple[Iterator[bytes], int]:
    """The trace of one profile as byte chunks, and its event count."""
    ids = trace_ids([profile])
    events, count = chrome_events(profile, ids[0])
    return chain([chrome_header([profile], ids)], events, [EVENTS_END]), count


def write_chrome(profile: Profile, path: str) -> int:
    chunks, count = chrome_chunks(profile)
    write_atomic(path, chunks)
    return count
