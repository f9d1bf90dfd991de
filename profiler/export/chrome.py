"""Kineto-shaped Chrome trace JSON (`.json` or `.json.gz`), encoded with numpy.

- one process per NeuronCore (pid = core index); the operators are its `kernel` X events (what
  HTA and TensorBoard count as device work) on "Operators (stream k)" threads, `args.stream` = the
  thread, `args.correlation` = the launch that issued them (HTA and TensorBoard join on it);
- instructions on one thread per engine lane or DMA queue, named like AWS's timeline rows, as
  `neuron_instruction` X events: a category HTA and TensorBoard do not count as kernels (no
  `stream`, no `correlation`), so sub-microsecond instructions never reach their breakdowns;
- the host process: `ProfilerStep#N` annotations, operator calls, data loading, and a `runtime`
  event per launch (`nrt_execute` of a built-in run; `nrt_launch` at the end of a script's
  operator call) carrying the correlation and `External id` of what it launched, as Kineto's
  `cudaLaunchKernel` does (a built-in run's `nrt_execute` begins a microsecond after its
  `ProfilerStep#N`, which it would otherwise fill with its kernels: RUNTIME_DELAY_NS);
- flows: `ac2g` from each launch to its first operator kernel and `op2inst` from each operator
  kernel to its first instruction (`bp: "e"` on the finish, as Kineto writes them); an `ac2g`
  flow's id is its launch's correlation id;
- counter tracks: HBM Bandwidth, DMA Throughput, TensorMatrix Utilization.

Operator kernels and launches are on whole microseconds (floored): HTA rounds every timestamp
to microseconds by default (ceiling starts, flooring ends), which would give sub-microsecond
kernels negative durations; on the microsecond grid its rounding changes nothing, and flooring
keeps every flow pointing forward. A built-in run's `ProfilerStep#N` are on the grid too (each
starts with its launch); a script's keep their times, so that they and the labels, calls and
module spans of its threads nest (Perfetto drops an X event that overlaps another without
nesting in it). Collective operators are named
`ncclKernel_<KIND> <name>` and operators that only move memory `Memcpy <name>`, so HTA's
kernel-type rules count them as communication and memory; the others are computation.

Each collective also has its host-side operator as Kineto writes NCCL's: a `cpu_op` named as
PyTorch's NCCL process group names it (`nccl:all_reduce`, `nccl:broadcast`, `nccl:send`, ...; a
built-in run's after its kind) on the thread of the call that launched it, of no host time of
its own (the collective runs inside that launch), at the collective's start (TensorBoard gives
a collective the step its operator's time falls in, and a step's start is also its launch's),
with `Input Dims`/`Input type` giving its payload; the collective's kernel carries its
`External id` (`first_op_flow + its op row`, unique in the trace). TensorBoard's profiler plugin
counts a kernel as communication only through such an operator, and only for broadcast, reduce,
all-reduce, all-gather and reduce-scatter.

Several profiles (the ranks of a capture) can share one trace: each is written with its own
`TraceIds` (process ids and names, id ranges) and the streams of `chrome_events` are joined.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Iterator

import json

import numpy as np
import orjson

from .jsonenc import Int, Micros, Text, encode_records, iter_records
from ..analysis.timeline import COMMUNICATION, MEMORY, collective_kinds, op_types
from ..model.profile import PHASES, Profile
from .tracks import (OP_TID_BASE, Layout, counters, device_pid, host_pid, instruction_layout,
                     op_rows, to_ns)
from .traceio import write_atomic

# Correlation ids start high like Kineto's (HTA downcasts small id columns to int8 and then
# cannot store row indices in them).
CORRELATION_BASE = 1 << 20
INSTRUCTION_CAT = "neuron_instruction"     # not a category HTA or TensorBoard counts as kernels
RUNTIME_CATS = frozenset({"runtime", "cuda_runtime"})
LAUNCH_NAME = "nrt_launch"
# TensorBoard's overview shares a step out by role (kernels, memory, communication, runtime,
# data loading, CPU ops, other); once the roles before one leave nothing of the step, its range
# code starts over from the whole step, counting the step twice and "Other" as all of it. A
# built-in run's nrt_execute opens its step and its kernels close it, so on the trace the call
# begins this much after its step (where the kernels it launches begin later still).
RUNTIME_DELAY_NS = 1000
MAX_INDEXED_DEVICES = 1 << 16     # deviceProperties by index up to this rank (see _indexed)
EVENTS_END = b"\n]}\n"
COLLECTIVE_OPCODES = {"ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL", "SEND_RECV"}
# c10 dtype names as Kineto's `Input type` spells them (TensorBoard sizes collectives by them);
# any other dtype is given as bytes ("unsigned char")
KINETO_DTYPES = {"fp32": ("float", 4), "float32": ("float", 4),
                 "bf16": ("c10::BFloat16", 2), "bfloat16": ("c10::BFloat16", 2),
                 "fp16": ("c10::Half", 2), "float16": ("c10::Half", 2)}


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


def _instruction_events(profile: Profile, lay: Layout, pid: int) -> Iterator[bytes]:
    """Chunks of instruction events, encoded as they are consumed (memory stays bounded)."""
    ins = profile.table("instructions")
    names = tuple(kernel_name(o) for o in profile.meta["opcodes"])
    op = ins["op"][lay.order]
    return iter_records([
        b'{"ph":"X","cat":"%s","name":' % INSTRUCTION_CAT.encode(), Text(ins["opcode"][lay.order], names),
        b',"pid":%d,"tid":' % pid, Int(lay.tid), b',"ts":', Micros(lay.start_ns),
        b',"dur":', Micros(lay.dur_ns), b',"args":{"op":', Int(op), b'}},\n'],
        lay.order.size)


def floor_us(ns: np.ndarray) -> np.ndarray:
    """Integer ns floored to whole microseconds (monotone: spans that did not overlap still do not)."""
    return np.floor_divide(ns, 1000) * 1000


def op_kernel_names(profile: Profile) -> tuple[np.ndarray, tuple[str, ...]]:
    """Per op an index into a name table whose names give HTA's kernel types
    (`analysis.timeline.op_types`): `ncclKernel_<KIND> name` for a collective, `Memcpy name` for
    an op that only moves memory, the op's name for computation."""
    ops = profile.table("ops")
    strings = profile.strings
    types = op_types(profile).tolist()
    coll = collective_kinds(profile)
    names: dict[str, int] = {}
    index = np.zeros(len(types), dtype=np.int64)
    for i, (n, t) in enumerate(zip(ops["name_s"].tolist(), types)):
        text = strings[n]
        if t == COMMUNICATION:
            text = f"ncclKernel_{shown_kind(coll.get(i, 'collective'), text).upper()} {text}"
        elif t == MEMORY:
            text = f"Memcpy {text}"
        index[i] = names.setdefault(text, len(names))
    return index, tuple(names)


def _op_events(profile: Profile, pid: int, corr: np.ndarray,
               ext: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The operators as kernels on non-overlapping streams; returns the events, each op's row
    (stream OP_TID_BASE + row) and its floored start in ns."""
    ops = profile.table("ops")
    start, end = to_ns(ops["start"]), to_ns(ops["end"])
    end = np.maximum(end, start)
    rows = op_rows(start, end)
    start, end = floor_us(start), floor_us(end)
    name_index, names = op_kernel_names(profile)
    stream = Int(OP_TID_BASE + rows)        # written twice (tid and stream), converted once
    data = encode_records([
        b'{"ph":"X","cat":"kernel","name":', Text(name_index, names),
        b',"pid":%d,"tid":' % pid, stream, b',"ts":', Micros(start),
        b',"dur":', Micros(end - start), b',"args":{"stream":', stream, b',"correlation":', Int(corr),
        b',"External id":', Int(ext), b',"device":%d,"step":' % pid, Int(np.maximum(ops["step"], 0)),
        b',"phase":', Text(ops["phase"], PHASES), b',"module":', Text(ops["module_s"], profile.strings),
        b'}},\n'], start.size)
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


def launch_times(profile: Profile) -> np.ndarray:
    """Per host row, the floored ns of the launch it makes (if it launches): a runtime event's
    start (a built-in run's: RUNTIME_DELAY_NS later, where its first kernel is later still), the
    end of any other call (the call launches its work as it returns)."""
    host = profile.table("host")
    cats = np.array([profile.strings[c] in RUNTIME_CATS for c in host["cat_s"].tolist()], dtype=bool)
    launch = floor_us(np.where(cats, to_ns(host["start"]), to_ns(host["end"])))
    if profile.meta.get("source") != "pytorch" and cats.any():
        ops = profile.table("ops")
        hosted = ops["host"] >= 0
        first = np.full(launch.size, np.iinfo(np.int64).max)
        np.minimum.at(first, ops["host"][hosted].astype(np.int64),
                      floor_us(to_ns(ops["start"][hosted])))
        launch = launch + np.where(cats & (first - launch >= 2 * RUNTIME_DELAY_NS),
                                   RUNTIME_DELAY_NS, 0)
    return launch, cats


def _host_events(profile: Profile, launched: set[int], ids: TraceIds) -> list[bytes]:
    host = profile.table("host")
    out = []
    start, end = to_ns(host["start"]), to_ns(host["end"])
    launch, is_runtime = launch_times(profile)
    strings = profile.strings
    # a script's steps keep their times, to nest with its labels; a built-in run's (no labels)
    # are on the grid, as each starts with its launch, which is (see the module's docstring)
    grid_steps = profile.meta.get("source") != "pytorch"
    for i, (n, c, tid, s, e, st) in enumerate(zip(host["name_s"].tolist(), host["cat_s"].tolist(),
                                                  host["tid"].tolist(), start.tolist(), end.tolist(),
                                                  host["step"].tolist())):
        name, cat = strings[n], strings[c]
        step = {"step": st} if st >= 0 else {}
        corr = ids.first_correlation + i
        if cat in RUNTIME_CATS or (grid_steps and name.startswith("ProfilerStep#")):
            s, e = s // 1000 * 1000, max(e, s) // 1000 * 1000   # on HTA's microsecond grid
            if is_runtime[i]:
                s = min(int(launch[i]), e)      # a built-in run's, after its step (see above)
        args = dict(step)
        if i in launched:
            if is_runtime[i]:
                args.update({"correlation": corr, "External id": 0})
            else:
                args["External id"] = corr   # the launch itself, as Kineto's cudaLaunchKernel under its operator
                t = int(launch[i])
                out.append(orjson.dumps({"ph": "X", "cat": "runtime", "name": LAUNCH_NAME,
                                         "pid": ids.host_pid, "tid": tid, "ts": t / 1000, "dur": 0,
                                         "args": {"correlation": corr, "External id": corr, **step}}))
        out.append(orjson.dumps({"ph": "X", "cat": cat, "name": name, "pid": ids.host_pid,
                                 "tid": tid, "ts": s / 1000, "dur": max(e - s, 0) / 1000,
                                 "args": args}))
    return out


# the `nccl:` operator PyTorch's NCCL process group records for each c10d call (its profiling
# title); a collective of a built-in run, or of another call, is named after its kind
C10D_NCCL_NAMES = {
    "allreduce_": "nccl:all_reduce", "all_reduce": "nccl:all_reduce",
    "allreduce_coalesced_": "nccl:all_reduce_coalesced", "broadcast_": "nccl:broadcast",
    "reduce_": "nccl:reduce", "allgather_": "nccl:all_gather",
    "_allgather_base_": "nccl:_all_gather_base", "all_gather_into_tensor": "nccl:_all_gather_base",
    "allgather_into_tensor_coalesced_": "nccl:all_gather_into_tensor_coalesced",
    "reduce_scatter_": "nccl:reduce_scatter", "_reduce_scatter_base_": "nccl:_reduce_scatter_base",
    "reduce_scatter_tensor": "nccl:_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced_": "nccl:reduce_scatter_tensor_coalesced",
    "alltoall_": "nccl:all_to_all", "alltoall_base_": "nccl:all_to_all",
    "all_to_all_single": "nccl:all_to_all",
    "send": "nccl:send", "recv_": "nccl:recv", "recv_any_source_": "nccl:recv",
    "gather_": "nccl:gather", "scatter_": "nccl:scatter"}


# rooted c10d calls costed as the collective that moves the same bytes (a broadcast as an
# all-gather) but named as what they are, as Kineto names them
_SHOWN_KIND = {"broadcast_": "broadcast", "reduce_": "reduce", "gather_": "gather",
               "scatter_": "scatter"}


def shown_kind(kind: str, op_name: str) -> str:
    """The kind a trace names a collective by: its c10d call's own where it is costed as
    another kind, else `kind`."""
    return _SHOWN_KIND.get(op_name.rpartition("::")[2], kind) if "::" in op_name else kind


def nccl_op_name(kind: str, op_name: str) -> str:
    """The name Kineto gives NCCL's host-side operator of a collective of `kind` (the
    operator `op_name`: a c10d call's own, else the kind's)."""
    call = op_name.rpartition("::")[2] if "::" in op_name else ""
    if call in C10D_NCCL_NAMES:
        return C10D_NCCL_NAMES[call]
    if kind == "send_recv":
        return "nccl:recv" if "recv" in op_name else "nccl:send"
    return f"nccl:{kind}"


def _collective_events(profile: Profile, ids: TraceIds, ext: np.ndarray,
                       op_start: np.ndarray) -> list[bytes]:
    """Per collective its `nccl:<kind>` host operator (zero host time, at the collective's
    floored start `op_start[op]`, on the launching call's thread), whose External id `ext[op]`
    its kernel carries too."""
    coll = profile.table("collectives")
    if coll["op"].size == 0:
        return []
    ops, host = profile.table("ops"), profile.table("host")
    strings = profile.strings
    n_ops = ops["start"].size
    first_tid = int(host["tid"][0]) if host["tid"].size else 0
    out = []
    for op, kind_s, nbytes, ranks in zip(coll["op"].tolist(), coll["kind_s"].tolist(),
                                         coll["bytes"].tolist(), coll["ranks"].tolist()):
        if not 0 <= op < n_ops or not 0 <= kind_s < len(strings):
            continue
        if not (0 <= nbytes < 2 ** 63 and 0 <= ranks < 2 ** 31):   # a damaged row (NaN fails too)
            continue
        kind, name, h = strings[kind_s], strings[ops["name_s"][op]], int(ops["host"][op])
        dtype = strings[ops["dtype_s"][op]] if 0 <= ops["dtype_s"][op] < len(strings) else ""
        c10, size = KINETO_DTYPES.get(dtype, ("unsigned char", 1))
        ts, tid = int(op_start[op]), (int(host["tid"][h]) if h >= 0 else first_tid)
        step = int(ops["step"][op])
        out.append(orjson.dumps({
            "ph": "X", "cat": "cpu_op", "name": nccl_op_name(kind, name), "pid": ids.host_pid,
            "tid": tid, "ts": ts / 1000, "dur": 0,
            "args": {"External id": int(ext[op]), "Collective name": shown_kind(kind, name),
                     "Group size": int(ranks),
                     "In msg nelems": int(nbytes // size), "dtype": c10,
                     "Input Dims": [[int(nbytes // size)]], "Input type": [c10],
                     **({"step": step} if step >= 0 else {})}}))
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
                   "args": {"name": f"Operators (stream {OP_TID_BASE + r})"}})
        ev.append({"ph": "M", "name": "thread_sort_index", "pid": dev, "tid": OP_TID_BASE + r,
                   "args": {"sort_index": r}})
    for tid in sorted(set(profile.table("host")["tid"].tolist())):
        ev.append({"ph": "M", "name": "thread_name", "pid": host, "tid": tid,
                   "args": {"name": f"thread {tid}"}})
    return [orjson.dumps(e) for e in ev]


def distributed_info(profile: Profile, world_size: int) -> bytes:
    """`"distributedInfo": {...}` spelled as Kineto writes it (Python's json spacing): HTA finds a
    file's rank with the regex `"rank":\\s+(\\d+)`, which needs the space."""
    entries = profile.meta.get("ranks") or [{}]
    rank = profile.meta.get("rank", entries[0].get("rank", 0) if len(entries) == 1 else 0)
    info = {"backend": "neuron-sim", "rank": int(rank),
            "world_size": int(world_size)}
    return b'"distributedInfo": ' + json.dumps(info).encode()


def world_size(profile: Profile) -> int:
    """The job's ranks: its placement (built-in runs), else the ranks captured."""
    placement = profile.meta.get("placement")
    size = 1
    if isinstance(placement, dict):
        for k in ("tp", "pp", "dp"):
            v = placement.get(k, 1)
            size *= v if isinstance(v, int) and v > 0 else 1
    return max(size, len(profile.meta.get("ranks") or ()), int(profile.meta.get("world_size", 1) or 1))


def _indexed(devices: dict[int, dict]) -> list[dict]:
    """The devices as a list where each sits at the index of its id. A rank's own file names its
    NeuronCore only: the ids below it are the job's other cores, of the same kind."""
    if max(devices) >= MAX_INDEXED_DEVICES:     # a profile's own number: not a list that long
        return list(devices.values())
    like = devices[min(devices)]
    return [devices.get(i, {**like, "id": i}) for i in range(max(devices) + 1)]


def chrome_header(profiles: list[Profile], ids: list[TraceIds], world: int | None = None) -> bytes:
    """The trace's keys up to and including the opening of `traceEvents` (the first profile's
    metadata; a device entry per profile, at the index of its id, as Kineto lists every device:
    TensorBoard finds a device's properties by that index)."""
    meta = profiles[0].meta
    devices = {i.device_pid: {"id": i.device_pid, "name": f"{p.meta['device']} NeuronCore",
                              "instance": p.meta["instance"], "lnc": p.meta["lnc"],
                              "tensorPeakFlopsBf16": p.meta["tensor_peak_flops_bf16"],
                              "hbmBandwidthPerStack": p.meta["hbm_bw_per_stack"]}
               for p, i in zip(profiles, ids)}
    head = orjson.dumps({"schemaVersion": 1, "deviceProperties": _indexed(devices)})[:-1]
    tail = orjson.dumps({
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": int(meta.get("created_unix_s", 0) * 1e9),
        "traceName": meta.get("workload") or meta.get("command", "profile"),
    })[1:-1]
    # keys a script gave (`prof.add_metadata`), at the top level as Kineto puts them; ours win
    user = {str(k): v for k, v in meta.get("trace_metadata", {}).items() if k not in _OWN_KEYS}
    extra = b"," + orjson.dumps(user)[1:-1] if user else b""
    info = distributed_info(profiles[0], world or world_size(profiles[0]))
    return head + b"," + info + b"," + tail + extra + b',"traceEvents":[\n'


_OWN_KEYS = {"schemaVersion", "deviceProperties", "distributedInfo", "displayTimeUnit",
             "baseTimeNanoseconds", "traceName", "traceEvents"}


def _launch_flows(profile: Profile, ids: TraceIds, rows: np.ndarray,
                  op_start: np.ndarray) -> tuple[bytes, int]:
    """One `ac2g` flow per launch: from the runtime event to the first kernel it launched."""
    ops = profile.table("ops")
    hosted = np.flatnonzero(ops["host"] >= 0)
    if hosted.size == 0:
        return b"", 0
    h = ops["host"][hosted].astype(np.int64)
    o = np.lexsort((op_start[hosted], h))
    first = o[np.r_[True, h[o][1:] != h[o][:-1]]]
    h_row, op_row = h[first], hosted[first]
    launch, _ = launch_times(profile)
    host = profile.table("host")
    return _flows(b"ac2g", h_row + ids.first_correlation, ids.host_pid, host["tid"][h_row],
                  launch[h_row], ids.device_pid, OP_TID_BASE + rows[op_row], op_start[op_row]), h_row.size


def chrome_events(profile: Profile, ids: TraceIds) -> tuple[Iterator[bytes], int]:
    """The profile's events as byte chunks (instruction events encoded lazily), each followed
    by a comma and a newline except the last, and their count."""
    ops = profile.table("ops")
    lay = instruction_layout(profile)
    dev = ids.device_pid
    corr = np.where(ops["host"] >= 0, ops["host"].astype(np.int64) + ids.first_correlation, 0)
    # External id: the launching operator's (0 for a runtime call of its own, as Kineto has it)
    _, is_runtime = launch_times(profile)
    ext = np.where((ops["host"] >= 0) & ~is_runtime[np.maximum(ops["host"], 0)] if is_runtime.size
                   else np.zeros(corr.size, dtype=bool), corr, 0)
    # a collective's kernel: the External id of its own `nccl:<kind>` operator
    coll = profile.table("collectives")["op"]
    coll = coll[(coll >= 0) & (coll < ext.size)].astype(np.int64)
    ext[coll] = ids.first_op_flow + coll
    op_data, rows, op_start = _op_events(profile, dev, corr, ext)
    launched = set(ops["host"][ops["host"] >= 0].tolist())
    f_op, f_tid, f_ts = _first_instruction(profile, lay)
    flows, n_launches = _launch_flows(profile, ids, rows, op_start) if launched else (b"", 0)
    flows += _flows(b"op2inst", f_op + ids.first_op_flow, dev, OP_TID_BASE + rows[f_op],
                    op_start[f_op], dev, f_tid, f_ts)
    small = _host_events(profile, launched, ids) + \
        _collective_events(profile, ids, ext, op_start) + _counter_events(profile, dev) + \
        _metadata_events(profile, lay, int(rows.max()) + 1 if rows.size else 0, ids)
    count = lay.order.size + ops["start"].size + 2 * (n_launches + f_op.size) + len(small)
    ins_data = _instruction_events(profile, lay, dev)
    return chain(ins_data, [op_data, flows, b",\n".join(small)]), count


def chrome_chunks(profile: Profile, world: int | None = None) -> tuple[Iterator[bytes], int]:
    """The trace of one profile as byte chunks, and its event count; `world`: the job's world
    size for `distributedInfo` (default: from the profile)."""
    ids = trace_ids([profile])
    events, count = chrome_events(profile, ids[0])
    return chain([chrome_header([profile], ids, world)], events, [EVENTS_END]), count


def write_chrome(profile: Profile, path: str, world: int | None = None) -> int:
    chunks, count = chrome_chunks(profile, world)
    write_atomic(path, chunks)
    return count
