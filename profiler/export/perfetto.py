"""Native Perfetto protobuf (`.pftrace`) with interned names, encoded with numpy.

Track descriptors and the interned name table are built with the perfetto package's own proto
classes. The bulk (instruction slices, operator spans, host events, counters) is written as
fixed-layout `TracePacket`s: every varint of a batch is padded to the batch's widest value
(protobuf readers accept redundant continuation bytes), so numpy fills an (events x bytes) matrix.
A `Trace` is a sequence of `packet` fields, so batches are simply concatenated.

Tracks: one process per NeuronCore with a thread per engine lane / DMA queue (AWS row names),
"Operators (stream k)" threads (named as in the Chrome trace), counter tracks, and the host
process with its threads. Flows go from each host call to the first operator span it launched
and from each operator span to its first instruction, as flow ids on the slices themselves.
Slices are written in the order trace processor must read them (`SliceStream`), so one that
starts where another ends on the same track is its sibling, not its child. Slices carry args
(debug annotations with interned names and string values): an instruction its operator
(`hlo_name`, as AWS's device trace names it), FLOPs and HBM bytes; an operator span its kind,
phase, step and module.
A profile of several captured ranks gives one NeuronCore process and one host process per rank;
each rank's track uuids and flow ids live in their own range.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.profile import PHASES, Profile
from ..analysis.ranks import rank_views
from ..analysis.render import int64_counts
from .tracks import (DEVICE_PID, OP_TID_BASE, counters, host_pid, instruction_layout, op_rows, to_ns)
from .traceio import write_atomic

SEQ_ID = 1
SLICE_BEGIN, SLICE_END, COUNTER = 1, 2, 4             # TrackEvent.Type
SEQ_CLEARED, SEQ_NEEDS_STATE = 1, 2
_PROCESS_UUID, _HOST_UUID = 1, 2
_TRACK_BASE = 16                 # device thread tracks: base + tid
_OP_TRACK_BASE = 4096            # operator rows: base + row
_COUNTER_BASE = 8192
_HOST_TRACK_BASE = 16384         # host threads: base + index
_RANK_UUIDS = 1 << 20            # rank k's track uuids: k * _RANK_UUIDS + the above
_RANK_FLOWS = 1 << 42            # rank k's flow ids: k * _RANK_FLOWS + op row (+ 2^40)
# SliceStream tiers: each flow's source opens before its target at one instant
_HOST_TIER, _OP_TIER, _INSTRUCTION_TIER = 0, 1, 2


def _pb():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    return perfetto_trace_pb2


def _varint_width(top: int) -> int:
    return max(1, (max(int(top), 1).bit_length() + 6) // 7)


def _put_varint(buf: np.ndarray, pos: int, values: np.ndarray, width: int) -> None:
    v = values.astype(np.uint64)
    for i in range(width):
        byte = (v >> np.uint64(7 * i)) & np.uint64(0x7F)
        if i < width - 1:
            byte |= np.uint64(0x80)
        buf[:, pos + i] = byte.astype(np.uint8)


def _key(field: int, wire: int) -> bytes:
    return _minimal_varint((field << 3) | wire)


def _minimal_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


# Interned debug annotation names (InternedData.debug_annotation_names), by iid.
ARG_NAMES = ("hlo_name", "flops", "hbm_bytes", "kind", "phase", "step", "module")
_ARG_IID = {name: iid for iid, name in enumerate(ARG_NAMES, start=1)}
_INT_VALUE, _STRING_VALUE_IID = 4, 17                   # DebugAnnotation fields


@dataclass(frozen=True, slots=True)
class Arg:
    """One debug annotation of every event of a batch: `values` are integers, written as
    `int_value` (a negative one as protobuf writes an int64: ten bytes), or iids of interned
    strings (`string=True`)."""
    name: str
    values: np.ndarray
    string: bool = False

    @property
    def width(self) -> int:
        if not self.values.size:
            return 1
        return 10 if self.values.min() < 0 else _varint_width(self.values.max())

    def take(self, rows: np.ndarray) -> "Arg":
        """The same arg for the events `rows` selects."""
        return Arg(self.name, self.values[rows], self.string)

    def encoded_len(self, width: int) -> int:
        return 1 + 1 + len(_key(_STRING_VALUE_IID if self.string else _INT_VALUE, 0)) + width


def _records(ts: np.ndarray, kind: np.ndarray, track: np.ndarray, name_iid: np.ndarray | None = None,
             flows: tuple[np.ndarray, ...] = (), double: np.ndarray | None = None,
             args: tuple[Arg, ...] = ()) -> np.ndarray:
    """Fixed-layout TracePackets holding one TrackEvent each, one row of bytes per event (all
    optional parts present for every row of the batch, or for none; `flows`: 0, 1 or 2 flow ids
    per event)."""
    n = ts.size
    if n == 0:
        return np.zeros((0, 0), dtype=np.uint8)
    w_ts, w_track = _varint_width(ts.max()), _varint_width(track.max())
    w_name = _varint_width(name_iid.max()) if name_iid is not None else 0
    w_args = [a.width for a in args]
    arg_lens = [a.encoded_len(w) for a, w in zip(args, w_args)]
    ev_len = 2 + 1 + w_track + (1 + w_name if name_iid is not None else 0) \
        + 10 * len(flows) + (10 if double is not None else 0) + sum(2 + k for k in arg_lens)
    pkt_len = 1 + w_ts + 2 + 2 + 1 + _varint_width(ev_len) + ev_len
    rec = 1 + _varint_width(pkt_len) + pkt_len
    buf = np.zeros((n, rec), dtype=np.uint8)
    pos = 0

    def const(b: bytes) -> None:
        nonlocal pos
        buf[:, pos: pos + len(b)] = np.frombuffer(b, dtype=np.uint8)
        pos += len(b)

    def var(values: np.ndarray, width: int) -> None:
        nonlocal pos
        _put_varint(buf, pos, values, width)
        pos += width

    def fixed64(values: np.ndarray, dtype: str) -> None:
        nonlocal pos
        buf[:, pos: pos + 8] = values.astype(dtype).view(np.uint8).reshape(n, 8)
        pos += 8

    const(_key(1, 2) + _minimal_varint(pkt_len))
    const(_key(8, 0)); var(ts, w_ts)                                      # timestamp
    const(_key(10, 0) + bytes([SEQ_ID]) + _key(13, 0) + bytes([SEQ_NEEDS_STATE]))
    const(_key(11, 2) + _minimal_varint(ev_len))                          # track_event
    const(_key(9, 0)); var(kind, 1)                                       # type
    const(_key(11, 0)); var(track, w_track)                               # track_uuid
    if name_iid is not None:
        const(_key(10, 0)); var(name_iid, w_name)                         # name_iid
    for flow in flows:
        const(_key(47, 1)); fixed64(flow, "<u8")                          # flow_ids
    if double is not None:
        const(_key(44, 1)); fixed64(double, "<f8")                        # double_counter_value
    for a, w, length in zip(args, w_args, arg_lens):                      # debug_annotations
        const(_key(4, 2) + bytes([length]) + _key(1, 0) + bytes([_ARG_IID[a.name]])
              + _key(_STRING_VALUE_IID if a.string else _INT_VALUE, 0))
        var(a.values, w)
    assert pos == rec
    return buf


def track_events(ts: np.ndarray, kind: np.ndarray, track: np.ndarray,
                 double: np.ndarray | None = None) -> bytes:
    """Events of tracks with no slices (counters), in the order given."""
    return _records(ts, kind, track, double=double).tobytes()


@dataclass(slots=True)
class SliceStream:
    """Slices of any tracks, written as BEGIN/END packets in the order trace processor must see
    them. It sorts track events by timestamp, keeping file order among equal ones, and an END
    closes the innermost open slice of its track; so at one instant the ENDs of slices that
    began earlier come first (the latest begun first), then the BEGINs (the lowest `tier`
    first, then the longest, so a parent opens before the child that starts with it), then the
    ENDs of zero-length slices. Written in batches' order, a slice that starts where the
    previous one ends would open before that one closed and be nested in it.

    A flow runs from the first slice trace processor reads with its id to the next, so its
    source's batch gets a lower tier than its target's: at one instant (an operator and its only
    instruction, equally long) the source still opens first. A track's slices share a tier."""
    parts: list = field(default_factory=list)      # (records, sort keys, least significant first)

    def add(self, start: np.ndarray, dur: np.ndarray, track: np.ndarray, name_iid: np.ndarray,
            flows: tuple[np.ndarray, ...] = (), args: tuple[Arg, ...] = (), tier: int = 0) -> int:
        """Slices; the BEGIN carries the name, the flow ids and the args, the END only the
        track. `tier`: where these BEGINs go among others at the same instant (class doc)."""
        n = start.size
        if n == 0:
            return 0
        order = np.arange(n, dtype=np.int64) + sum(len(r) for r, _ in self.parts)
        end = start + dur
        self.parts.append((_records(start, np.full(n, SLICE_BEGIN), track, name_iid, flows,
                                    args=args),
                           (order, -dur, np.full(n, tier, np.int64), np.ones(n, np.int64),
                            start)))
        self.parts.append((_records(end, np.full(n, SLICE_END), track),
                           (-order, -start, np.zeros(n, np.int64), np.where(dur > 0, 0, 2),
                            end)))
        return n

    def tobytes(self) -> bytes:
        parts = [(r, k) for r, k in self.parts if len(r)]
        if not parts:
            return b""
        keys = [np.concatenate([k[i] for _, k in parts]) for i in range(len(parts[0][1]))]
        order = np.lexsort(keys)
        widths = np.concatenate([np.full(len(r), r.shape[1], np.int64) for r, _ in parts])
        offset = np.empty_like(widths)
        offset[order] = np.cumsum(widths[order]) - widths[order]      # where each record goes
        out = np.empty(int(widths.sum()), dtype=np.uint8)
        first = 0
        for records, _ in parts:
            # a view of `out` whose row i is the bytes from i on: one row assignment puts each
            # record at its offset (records never overlap, so neither do the rows written)
            w = records.shape[1]
            rows = np.lib.stride_tricks.as_strided(out, (out.size - w + 1, w), (1, 1))
            rows[offset[first: first + len(records)]] = records
            first += len(records)
        return out.tobytes()


def _descriptors(profile: Profile, threads, n_op_rows: int, counter_names, host_tids, u: int) -> bytes:
    pb = _pb()
    meta = profile.meta
    trace = pb.Trace()

    def track(uuid: int, **kw):
        p = trace.packet.add()
        p.track_descriptor.uuid = u + uuid
        for k, v in kw.items():
            if k == "process":
                p.track_descriptor.process.pid, p.track_descriptor.process.process_name = v
            elif k == "thread":
                pid, tid, name = v
                p.track_descriptor.thread.pid, p.track_descriptor.thread.tid = pid, tid
                p.track_descriptor.thread.thread_name = name
            elif k == "counter":
                p.track_descriptor.counter.unit_name = v
            else:
                setattr(p.track_descriptor, k, v)

    pid = int(meta.get("device_pid", DEVICE_PID))
    where = f"{meta['rank_label']}, " if "rank_label" in meta else ""
    track(_PROCESS_UUID, process=(pid, f"NeuronCore {pid} ({where}{meta['instance']}, "
                                       f"{meta['device']}, LNC={meta['lnc']})"))
    for th in threads:
        track(_TRACK_BASE + th.tid, thread=(pid, th.tid, th.name))
    for r in range(n_op_rows):
        track(_OP_TRACK_BASE + r, thread=(pid, OP_TID_BASE + r, f"Operators (stream {OP_TID_BASE + r})"))
    for i, (name, unit) in enumerate(counter_names):
        track(_COUNTER_BASE + i, name=name, parent_uuid=u + _PROCESS_UUID, counter=unit)
    hp = host_pid(profile)
    track(_HOST_UUID, process=(hp, meta.get("host_name", "Host")))
    for i, tid in enumerate(host_tids):
        track(_HOST_TRACK_BASE + i, thread=(hp, int(tid), f"thread {tid}"))
    return trace.SerializeToString()


def _interned(names: list[str], values: list[str]) -> bytes:
    """Event names, debug annotation names and debug annotation string values, each by iid
    from 1 (`values` as the string args' iids count them)."""
    pb = _pb()
    trace = pb.Trace()
    p = trace.packet.add()
    p.trusted_packet_sequence_id = SEQ_ID
    p.sequence_flags = SEQ_CLEARED
    p.timestamp = 0
    for iid, name in enumerate(names, start=1):
        e = p.interned_data.event_names.add()
        e.iid, e.name = iid, name
    for iid, name in enumerate(ARG_NAMES, start=1):
        e = p.interned_data.debug_annotation_names.add()
        e.iid, e.name = iid, name
    for iid, value in enumerate(values, start=1):
        e = p.interned_data.debug_annotation_string_values.add()
        e.iid, e.str = iid, value.encode()
    return trace.SerializeToString()


def _by_flows(*flows: tuple[np.ndarray, np.ndarray]):
    """Split rows by which flows they carry: for each (has, ids) pair, rows where `has` holds
    carry `ids`. Yields (row selection, the flow id arrays of those rows)."""
    n = flows[0][0].size
    combo = np.zeros(n, np.int64)
    for bit, (has, _) in enumerate(flows):
        combo |= has.astype(np.int64) << bit
    for c in np.unique(combo).tolist():
        sel = combo == c
        yield sel, tuple(ids[sel] for bit, (_, ids) in enumerate(flows) if c >> bit & 1)


def perfetto_chunks(profile: Profile, index: int = 0) -> tuple[list[bytes], int]:
    """One rank's packets; `index` (its place among the ranks of the trace) picks its uuid and
    flow id ranges, and the interned names (shared by all ranks) come with index 0."""
    meta = profile.meta
    u = index * _RANK_UUIDS
    ops, host, ins = profile.table("ops"), profile.table("host"), profile.table("instructions")
    n_str = len(profile.strings)
    names = list(profile.strings) + list(meta["opcodes"])
    # string args' iids: the profile's strings, the phases, then "" for an instruction of no op
    values = list(profile.strings) + list(meta.get("phases", PHASES)) + [""]
    opcode_iid0 = n_str + 1
    lay = instruction_layout(profile)
    stream = SliceStream()
    count = 0
    # flows: an operator span to its first instruction, a host call to the span it launched
    o_start, o_end = to_ns(ops["start"]), to_ns(ops["end"])
    o_end = np.maximum(o_end, o_start)
    n_ops = o_start.size
    op_of_ins = ins["op"][lay.order].astype(np.int64)
    flow_id = np.arange(n_ops, dtype=np.uint64) + np.uint64(1 + index * _RANK_FLOWS)
    first_ins = np.zeros(op_of_ins.size, bool)
    if op_of_ins.size:
        o = np.lexsort((lay.start_ns, op_of_ins))
        first_ins[o[np.flatnonzero(np.r_[True, op_of_ins[o][1:] != op_of_ins[o][:-1]])]] = True
    has_ins = np.zeros(n_ops, bool)
    has_ins[op_of_ins] = True
    first_op = np.full(host["start"].size, -1, dtype=np.int64)
    hosted = np.flatnonzero(ops["host"] >= 0)[::-1]
    first_op[ops["host"][hosted]] = hosted          # reversed: the first op of each call wins
    launch = first_op >= 0
    launched = np.zeros(n_ops, bool)
    launched[first_op[launch]] = True
    launch_flow = flow_id + np.uint64(1 << 40)
    # instructions
    ins_flow = flow_id[np.where(first_ins, op_of_ins, 0)] if n_ops else np.zeros(0, np.uint64)
    ins_args = _instruction_args(ins, ops, lay.order, none_iid=len(values))
    for sel, flows, args in _with_args(_by_flows((first_ins, ins_flow)), ins_args):
        count += stream.add(lay.start_ns[sel], lay.dur_ns[sel], u + _TRACK_BASE + lay.tid[sel],
                            opcode_iid0 + ins["opcode"][lay.order][sel].astype(np.int64), flows,
                            args, tier=_INSTRUCTION_TIER)
    # operator spans
    rows = op_rows(o_start, o_end)
    op_args = (Arg("kind", ops["kind_s"].astype(np.int64) + 1, True),
               Arg("phase", ops["phase"].astype(np.int64) + n_str + 1, True),
               Arg("step", ops["step"].astype(np.int64)),
               Arg("module", ops["module_s"].astype(np.int64) + 1, True))
    for sel, flows in _by_flows((launched, launch_flow), (has_ins, flow_id)):
        count += stream.add(o_start[sel], (o_end - o_start)[sel], u + _OP_TRACK_BASE + rows[sel],
                            ops["name_s"][sel].astype(np.int64) + 1, flows,
                            tuple(a.take(sel) for a in op_args), tier=_OP_TIER)
    # host events
    host_tids = sorted(set(host["tid"].tolist()))
    tid_index = {t: i for i, t in enumerate(host_tids)}
    h_start, h_end = to_ns(host["start"]), to_ns(host["end"])
    h_track = np.array([u + _HOST_TRACK_BASE + tid_index[t] for t in host["tid"].tolist()], dtype=np.int64)
    h_flow = launch_flow[np.where(launch, first_op, 0)] if n_ops else np.zeros(h_start.size, np.uint64)
    for sel, flows in _by_flows((launch, h_flow)):
        count += stream.add(h_start[sel], np.maximum(h_end - h_start, 0)[sel], h_track[sel],
                            host["name_s"][sel].astype(np.int64) + 1, flows, tier=_HOST_TIER)
    chunks = ([_interned(names, values)] if index == 0 else []) + [stream.tobytes()]
    cnts = counters(profile)
    for i, c in enumerate(cnts):
        chunks.append(track_events(c.times_ns, np.full(c.times_ns.size, COUNTER),
                                   np.full(c.times_ns.size, u + _COUNTER_BASE + i), double=c.values))
        count += c.times_ns.size
    chunks.insert(0, _descriptors(profile, lay.threads, int(rows.max()) + 1 if rows.size else 0,
                                  [(c.name, c.unit) for c in cnts], host_tids, u))
    return chunks, count


def _with_args(batches, args: tuple[Arg, ...]):
    """Each (selection, flows) batch split by which of its int args are non-zero, with the args
    it carries: a zero count (a DMA transfer's FLOPs, a compute instruction's HBM bytes) is left
    out, as a trace viewer shows a missing arg. String args always go."""
    for sel, flows in batches:
        rows = np.flatnonzero(sel)
        bits = {}                                  # an optional arg's position: its bit
        combo = np.zeros(rows.size, np.int64)
        for i, a in enumerate(args):
            if not a.string:
                bits[i] = len(bits)
                combo |= (a.values[rows] != 0).astype(np.int64) << bits[i]
        for c in np.unique(combo).tolist():
            mine = combo == c
            part = np.zeros_like(sel)
            part[rows[mine]] = True
            kept = tuple(a.take(part) for i, a in enumerate(args)
                         if i not in bits or c >> bits[i] & 1)
            yield part, tuple(f[mine] for f in flows), kept


def _instruction_args(ins: dict, ops: dict, order: np.ndarray, none_iid: int) -> tuple[Arg, ...]:
    """An instruction's operator (AWS's `hlo_name` arg; `none_iid` for one of no operator),
    FLOPs and HBM bytes, in `order`."""
    op = ins["op"][order].astype(np.int64)
    hlo = np.full(op.size, none_iid, np.int64)
    has_op = op >= 0
    hlo[has_op] = ops["name_s"].astype(np.int64)[op[has_op]] + 1
    flops = _counts(ins["flops"][order])
    hbm = _counts((ins["hbm_r"] + ins["hbm_w"])[order])
    return Arg("hlo_name", hlo, True), Arg("flops", flops), Arg("hbm_bytes", hbm)


def _counts(values: np.ndarray) -> np.ndarray:
    """FLOP or byte counts as the int64 a trace arg holds: a damaged profile's count past
    int64 (or NaN, or below zero) is clamped, not wrapped to a negative number."""
    return np.maximum(int64_counts(values), 0)


def write_perfetto(profile: Profile, path: str) -> int:
    chunks, count = [], 0
    for index, view in enumerate(rank_views(profile)):
        part, n = perfetto_chunks(view, index)
        chunks += part
        count += n
    write_atomic(path, chunks)
    return count
