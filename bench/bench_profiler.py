"""neuron-profile trace export, against baselines measured in the same run: instruction-level
export of a built-in capture with our numpy Chrome JSON writer against
   orjson streaming one event dict per line (the fastest off-the-shelf path, perf-baselines §5 b),
   and our numpy Perfetto protobuf writer against perfetto's TraceProtoBuilder (BEGIN/END
   TrackEvents with interned names, §5 d1, on a 100k-event slice); sizes of both files;
   `.json.gz` through write_chrome at gzip level 1 (shipped) and 6, against the plain JSON.
PyTorch capture overhead is measured by bench/bench_capture.py.

Prints median [min-max] over runs and the ratios. Usage: python bench/bench_profiler.py [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import orjson  # noqa: E402

from device_model import instance  # noqa: E402
from device_model.workloads import Placement  # noqa: E402
from profiler.capture.builtin import capture_workload  # noqa: E402
from profiler.export import traceio  # noqa: E402
from profiler.export.chrome import chrome_chunks, write_chrome  # noqa: E402
from profiler.export.perfetto import perfetto_chunks  # noqa: E402
from profiler.export.tracks import instruction_layout  # noqa: E402
from benchlib import fmt, timed  # noqa: E402


def write_to(path: str, chunks: list[bytes]) -> None:
    with open(path, "wb") as fh:
        for c in chunks:
            fh.write(c)


def orjson_stream(profile, path: str) -> None:
    """Baseline: one dict per instruction event, orjson.dumps each, streamed line by line."""
    ins = profile.table("instructions")
    lay = instruction_layout(profile)
    names = profile.meta["opcodes"]
    opcode = ins["opcode"][lay.order].tolist()
    op = ins["op"][lay.order].tolist()
    with open(path, "wb") as fh:
        fh.write(b'{"traceEvents":[\n')
        for code, tid, s, d, o in zip(opcode, lay.tid.tolist(), lay.start_ns.tolist(), lay.dur_ns.tolist(), op):
            fh.write(orjson.dumps({"ph": "X", "cat": "neuron_instruction", "name": names[code], "pid": 0,
                                   "tid": tid, "ts": s / 1000, "dur": d / 1000, "args": {"op": o}}))
            fh.write(b",\n")
        fh.write(b'{}]}\n')


def perfetto_builder(profile, path: str, limit: int) -> int:
    """Baseline: perfetto's TraceProtoBuilder, interned names, BEGIN+END per instruction."""
    from perfetto.trace_builder.proto_builder import TraceProtoBuilder
    ins = profile.table("instructions")
    lay = instruction_layout(profile)
    builder = TraceProtoBuilder()
    first = builder.add_packet()
    first.trusted_packet_sequence_id = 1
    first.sequence_flags = 1
    for iid, name in enumerate(profile.meta["opcodes"], 1):
        e = first.interned_data.event_names.add()
        e.iid, e.name = iid, name
    n = min(limit, lay.order.size)
    codes = ins["opcode"][lay.order][:n].tolist()
    for code, tid, s, d in zip(codes, lay.tid[:n].tolist(), lay.start_ns[:n].tolist(), lay.dur_ns[:n].tolist()):
        for ts, kind in ((s, 1), (s + d, 2)):
            p = builder.add_packet()
            p.timestamp = ts
            p.trusted_packet_sequence_id = 1
            p.sequence_flags = 2
            p.track_event.type = kind
            p.track_event.track_uuid = 16 + tid
            if kind == 1:
                p.track_event.name_iid = code + 1
    with open(path, "wb") as fh:
        fh.write(builder.serialize())
    return n


def bench_export(runs: int) -> None:
    prof = capture_workload("mlp:tokens=4096,hidden=4096,layers=4,microbatches=2",
                            instance("trn2.48xlarge"), Placement(dp=4))
    n = prof.rows("instructions")
    print(f"== trace export: {n:,} instructions, {prof.rows('ops')} operators ==")
    with tempfile.TemporaryDirectory() as tmp:
        js, pf, base_js, base_pf = (os.path.join(tmp, f) for f in ("a.json", "a.pftrace", "b.json", "b.pftrace"))
        t_js = timed(lambda: write_to(js, chrome_chunks(prof)[0]), runs)
        t_pf = timed(lambda: write_to(pf, perfetto_chunks(prof)[0]), runs)
        t_base_js = timed(lambda: orjson_stream(prof, base_js), max(3, runs // 2))
        limit = 100_000
        t_base_pf = timed(lambda: perfetto_builder(prof, base_pf, limit), max(3, runs // 2))
        size_js, size_pf = os.path.getsize(js), os.path.getsize(pf)
        doc = orjson.loads(Path(js).read_bytes())          # the output parses
        assert sum(1 for e in doc["traceEvents"] if e.get("cat") == "neuron_instruction") == n
        del doc
        gz = gzip_levels(prof, os.path.join(tmp, "a.json.gz"), runs)
    rate = lambda ts, count: [count / t / 1e6 for t in ts]       # noqa: E731
    print(f"chrome JSON (numpy)         {fmt(rate(t_js, n))} M instr/s   {size_js / 1e6:,.1f} MB")
    print(f"  baseline orjson stream    {fmt(rate(t_base_js, n))} M instr/s")
    print(f"  ratio ours/baseline       {statistics.median(t_base_js) / statistics.median(t_js):.1f}x")
    print(f"perfetto protobuf (numpy)   {fmt(rate(t_pf, n))} M instr/s   {size_pf / 1e6:,.1f} MB "
          f"({size_pf / size_js:.2f}x the JSON)")
    print(f"  baseline TraceProtoBuilder {fmt(rate(t_base_pf, limit))} M instr/s ({limit:,} instr)")
    print(f"  ratio ours/baseline       {statistics.median(rate(t_pf, n)) / statistics.median(rate(t_base_pf, limit)):.1f}x")
    for level, (t_gz, size_gz) in gz.items():
        print(f"chrome .json.gz, level {level}  {fmt(rate(t_gz, n))} M instr/s   {size_gz / 1e6:,.1f} MB   "
              f"time {statistics.median(t_gz) / statistics.median(t_js):.2f}x the plain JSON's")


def gzip_levels(prof, path: str, runs: int) -> dict[int, tuple[list[float], int]]:
    """write_chrome to `.json.gz` (atomic, write-behind thread) at the shipped level and at 6."""
    shipped = traceio.GZIP_LEVEL
    out = {}
    try:
        for level in sorted({shipped, 6}):
            traceio.GZIP_LEVEL = level
            out[level] = (timed(lambda: write_chrome(prof, path), runs), os.path.getsize(path))
    finally:
        traceio.GZIP_LEVEL = shipped
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    bench_export(args.runs)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
