"""Summary (golden file, consistency with the chip model), Chrome JSON (shape, no overlaps, HTA),
Perfetto protobuf (parsed back with the perfetto package's own classes)."""
from __future__ import annotations

import collections
import gzip
import os
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings, strategies as st

from device_model import Program, instance
from device_model.workloads import Placement
from profiler.analysis import render
from profiler.capture.builtin import capture_workload
from profiler.export.chrome import chrome_chunks, write_chrome
from profiler.export.jsonenc import Int, Micros, Text, encode_records
from profiler.export.perfetto import write_perfetto
from profiler.analysis.summary import summarize, top_operators

GOLDEN = Path(__file__).parent / "fixtures" / "profiler"
REGEN = os.environ.get("NEURONSCOPE_REGEN_GOLDEN") == "1"


@pytest.fixture(scope="module")
def mlp():
    return capture_workload("mlp:tokens=512,hidden=512,layers=2,microbatches=2", instance("trn2.48xlarge"),
                            Placement(pp=2, dp=4), num_exec=3, nth_exec=2, ranks="first")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if REGEN or not path.exists():
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; NEURONSCOPE_REGEN_GOLDEN=1 rewrites it"


def test_summary_text_golden(mlp):
    text = render.summary_text(mlp)
    check_golden("mlp_summary.txt", text)
    keys = [line.split(" ")[0] for line in text.split("\n\n")[0].splitlines()]
    for name in ("total_time", "mfu_estimated_percent", "hfu_estimated_percent", "mbu_estimated_percent",
                 "hbm_read_bytes", "hbm_write_bytes", "tensor_engine_active_time_percent",
                 "vector_engine_active_time_percent", "scalar_engine_active_time_percent",
                 "gpsimd_engine_active_time_percent", "dma_active_time_percent", "cc_op_count",
                 "cc_op_active_time_percent", "neuroncore_cycle_count", "mm_arithmetic_intensity"):
        assert name in keys


def test_summary_matches_the_chip_models_metrics():
    inst = instance("trn2.48xlarge")
    prog = Program()
    prog.matmul(2048, 4096, 4096, "bf16")
    run = inst.run(prog)
    m = run.metrics()
    s = summarize(capture_workload("matmul:m=2048,k=4096,n=4096", inst, num_exec=2, nth_exec=2))
    assert s["total_time"] == pytest.approx(m["time_s"], rel=1e-9)
    assert s["mfu_estimated_percent"] == pytest.approx(100 * m["mfu"], rel=1e-5)
    assert s["mbu_estimated_percent"] == pytest.approx(100 * m["mbu"], rel=1e-5)
    assert s["hbm_read_bytes"] == pytest.approx(m["hbm_read_bytes"], rel=1e-5)
    assert s["tensor_engine_active_time_percent"] == pytest.approx(100 * m["engine_active"]["tensor"], rel=1e-6)
    assert s["dma_active_time_percent"] == pytest.approx(100 * m["engine_active"]["dma"], rel=1e-6)


def test_warmup_execution_is_slower_and_skipped_by_nth_exec():
    inst = instance("trn2.48xlarge")
    p = capture_workload("matmul:m=2048,k=4096,n=4096", inst, num_exec=3, nth_exec=2)
    steps = p.table("steps")
    spans = steps["end"] - steps["start"]
    assert spans[0] > spans[1] == pytest.approx(spans[2])
    names = p.text(p.table("ops")["name_s"][p.table("instructions")["op"]])
    assert "warmup.load_weights" not in set(names)


def test_top_operators_table(mlp):
    stats = top_operators(mlp, None)
    assert stats == sorted(stats, key=lambda s: (-s.self_time, s.name))
    assert sum(s.self_share for s in stats) == pytest.approx(1.0)
    by_name = {s.name: s for s in stats}
    assert by_name["layers.0.up"].bound == "TensorE"
    assert by_name["layers.0.grad_all_reduce"].bound == "CC-core"
    assert by_name["layers.0.up"].flops == pytest.approx(2 * 512 * 512 * 2048 * 2)   # two micro-batches


def test_summary_json_is_valid(mlp):
    doc = orjson.loads(render.summary_json(mlp))
    assert doc["summary"][0]["instance"] == "trn2.48xlarge"
    assert doc["top_operators"][0]["self_time"] > 0


def _events(path: Path) -> dict:
    data = path.read_bytes()
    return orjson.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


@pytest.fixture(scope="module")
def chrome(mlp, tmp_path_factory):
    path = tmp_path_factory.mktemp("chrome") / "mlp.json"
    n = write_chrome(mlp, str(path))
    return path, n


def test_chrome_trace_is_kineto_shaped(chrome, mlp):
    path, n = chrome
    doc = _events(path)
    assert doc["schemaVersion"] == 1 and doc["displayTimeUnit"] == "ns"
    assert doc["deviceProperties"][0]["instance"] == "trn2.48xlarge"
    ev = doc["traceEvents"]
    assert len(ev) == n
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in ev
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"TensorE", "TensorMatrixE", "VectorE", "ScalarE", "qSyncIO0"} <= set(names.values())
    steps = [e["name"] for e in ev if e["name"].startswith("ProfilerStep#")]
    assert steps == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    instructions = [e for e in ev if e.get("cat") == "neuron_instruction"]
    assert len(instructions) == mlp.rows("instructions")
    assert all("stream" not in e["args"] and "correlation" not in e["args"] for e in instructions)
    kernels = [e for e in ev if e.get("cat") == "kernel"]      # HTA's kernels: the operators
    assert len(kernels) == mlp.rows("ops")
    assert all(e["args"]["stream"] == e["tid"] >= 100 and e["args"]["correlation"] > 0 for e in kernels)
    assert all(e["ts"] == int(e["ts"]) and e["dur"] == int(e["dur"]) for e in kernels)
    counters = {e["name"] for e in ev if e["ph"] == "C"}
    assert counters == {"HBM Bandwidth", "DMA Throughput", "TensorMatrix Utilization"}
    flows = collections.Counter((e["ph"], e["cat"]) for e in ev if e["ph"] in "sf")
    assert flows[("s", "op2inst")] == flows[("f", "op2inst")] > 0
    assert flows[("s", "ac2g")] == flows[("f", "ac2g")] > 0
    assert all(e.get("bp") == "e" for e in ev if e["ph"] == "f")


def test_chrome_correlation_ids_join_host_launches_and_device_events(chrome):
    ev = _events(chrome[0])["traceEvents"]
    host = {e["args"]["correlation"] for e in ev if e["ph"] == "X" and e["pid"] != 0
            and "correlation" in e["args"]}
    assert all(e["cat"] == "runtime" for e in ev if e["ph"] == "X" and e["pid"] != 0
               and "correlation" in e["args"])
    kernels = {e["args"]["correlation"] for e in ev if e.get("cat") == "kernel"} - {0}
    ac2g = {e["id"] for e in ev if e["ph"] in "sf" and e["cat"] == "ac2g"}
    assert kernels and kernels <= host            # HTA joins kernels to their launch on this id
    assert ac2g and ac2g <= host


def test_chrome_x_events_never_overlap_on_a_thread(chrome):
    ev = _events(chrome[0])["traceEvents"]
    by_thread = collections.defaultdict(list)
    for e in ev:
        if e["ph"] == "X" and e["pid"] == 0:
            by_thread[e["tid"]].append((round(e["ts"] * 1000), round(e["dur"] * 1000)))
    assert len(by_thread) > 5
    for tid, spans in by_thread.items():
        spans.sort()
        starts = np.array([s for s, _ in spans])
        ends = starts + np.array([d for _, d in spans])
        assert np.all(starts[1:] >= ends[:-1]), tid


def test_chrome_gz_output(mlp, tmp_path):
    path = tmp_path / "t.json.gz"
    write_chrome(mlp, str(path))
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert _events(path)["traceEvents"]


@pytest.mark.filterwarnings("ignore")
def test_hta_temporal_and_kernel_breakdowns(mlp, tmp_path):
    hta = pytest.importorskip("hta.trace_analysis")
    assert "HTA_DISABLE_NS_ROUNDING" not in os.environ      # HTA's defaults
    write_chrome(mlp, str(tmp_path / "rank0.json"))
    analysis = hta.TraceAnalysis(trace_dir=str(tmp_path))
    temporal = analysis.get_temporal_breakdown(visualize=False)
    assert temporal["compute_time(us)"][0] > 0
    assert temporal["idle_time_pctg"][0] + temporal["compute_time_pctg"][0] + \
        temporal["non_compute_time_pctg"][0] == pytest.approx(100, abs=0.5)
    by_type, top = analysis.get_gpu_kernel_breakdown(visualize=False)
    kinds = set(by_type["kernel_type"])
    assert {"COMPUTATION", "COMMUNICATION", "MEMORY"} <= {k for t in kinds for k in t.split(" overlapping ")}
    assert set(top["name"]) - {"others"} <= {n for n in set(mlp.text(mlp.table("ops")["name_s"]))} | \
        {f"{p} {n}" for n in set(mlp.text(mlp.table("ops")["name_s"])) for p in
         ("Memcpy", "ncclKernel_ALL_REDUCE", "ncclKernel_SEND_RECV")}


def test_perfetto_protobuf_parses_back(mlp, tmp_path, chrome):
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    path = tmp_path / "mlp.pftrace"
    n = write_perfetto(mlp, str(path))
    trace = pb.Trace.FromString(path.read_bytes())
    tracks, names, types = {}, {}, collections.Counter()
    per_track = collections.Counter()
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            tracks[d.uuid] = d.thread.thread_name or d.process.process_name or d.name
        for e in p.interned_data.event_names:
            names[e.iid] = e.name
        if p.HasField("track_event"):
            types[p.track_event.type] += 1
            if p.track_event.type == 1:
                per_track[tracks.get(p.track_event.track_uuid)] += 1
    assert {"TensorE", "TensorMatrixE", "VectorE", "ScalarE", "qSyncIO0", "HBM Bandwidth",
            "DMA Throughput", "TensorMatrix Utilization"} <= set(tracks.values())
    assert types[1] == types[2]                   # every slice begins and ends
    instructions = sum(v for k, v in per_track.items() if k and not k.startswith(("Operators", "thread")))
    assert instructions == mlp.rows("instructions")
    assert "MATMUL" in names.values()
    assert n > mlp.rows("instructions")
    assert path.stat().st_size <= 0.5 * chrome[0].stat().st_size


def _slices_as_trace_processor_reads_them(data: bytes) -> list[tuple[int, int, int, int, str]]:
    """(track uuid, start, duration, depth, name) of every slice, rebuilt as trace processor
    does: track events sorted by timestamp, file order among equal ones; a BEGIN opens a slice
    on its track's stack, an END closes the innermost open one."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    trace = pb.Trace.FromString(data)
    names, events = {}, []
    for i, p in enumerate(trace.packet):
        for e in p.interned_data.event_names:
            names[e.iid] = e.name
        if p.HasField("track_event") and p.track_event.type in (1, 2):
            events.append((p.timestamp, i, p.track_event))
    stacks, out = collections.defaultdict(list), []
    for ts, _, e in sorted(events, key=lambda x: x[:2]):
        stack = stacks[e.track_uuid]
        if e.type == 1:
            stack.append((ts, names.get(e.name_iid, ""), list(e.flow_ids)))
        else:
            start, name, _ = stack.pop()
            out.append((e.track_uuid, start, ts - start, len(stack), name))
    assert not any(stacks.values())                 # every slice closed
    return out


def test_perfetto_slices_read_back_flat_with_their_own_durations(tmp_path):
    """Instructions and operator spans that touch end to start stay siblings in trace processor's
    reading: depth 0 on every device track, each slice its own duration."""
    prof = capture_workload("mlp:tokens=1024,hidden=1024,layers=2", instance("trn2.48xlarge"),
                            Placement())
    path = tmp_path / "t.pftrace"
    write_perfetto(prof, str(path))
    slices = _slices_as_trace_processor_reads_them(path.read_bytes())
    ins = prof.table("instructions")
    device = [s for s in slices if s[0] < 16384]               # below the host tracks' uuids
    assert max(depth for *_, depth, _ in device) == 0
    got = sorted(dur for _, _, dur, _, name in device if name in prof.meta["opcodes"])
    want = np.rint(ins["end"] * 1e9).astype(np.int64) - np.rint(ins["start"] * 1e9).astype(np.int64)
    assert len(got) == ins["start"].size and got == sorted(want.tolist())
    # every flow joins two slices: an operator span and its first instruction
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    ends = collections.Counter(f for p in pb.Trace.FromString(path.read_bytes()).packet
                               for f in p.track_event.flow_ids)
    assert ends and set(ends.values()) == {2}
    assert len(ends) >= len(np.unique(ins["op"]))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 3)),
                min_size=1, max_size=30))
def test_slice_stream_keeps_nesting_and_siblings_whatever_the_batches(spec):
    """Any well-nested slices (children inside parents, siblings touching, zero-length ones),
    added in any batches, read back with their own start, duration and depth."""
    from profiler.export.perfetto import SliceStream
    # a well-nested set per track: each slice is [t, t+d) inside its parent's remaining span
    want = []
    for track, gap, children in spec:
        t0 = max([s + d for tr, s, d, dep in want if tr == track and dep == 0], default=0) + gap
        span = 4 * (children + 1)
        want.append((track, t0, span, 0))
        t = t0
        for _ in range(children):
            want.append((track, t, 2, 1))
            want.append((track, t + 2, 0, 1))              # zero-length, where the next starts
            t += 4
    stream = SliceStream()
    for batch in (want[0::2], want[1::2]):                  # batches interleave parents, children
        if batch:
            a = np.array(batch, dtype=np.int64)
            stream.add(a[:, 1], a[:, 2], a[:, 0] + 1, np.ones(len(a), np.int64))
    got = _slices_as_trace_processor_reads_them(stream.tobytes())
    assert sorted((tr - 1, s, d, dep) for tr, s, d, dep, _ in got) == sorted(want)


def test_chrome_chunks_event_count(mlp):
    chunks, count = chrome_chunks(mlp)
    assert count == len(orjson.loads(b"".join(chunks))["traceEvents"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**12), st.integers(0, 10**15), st.integers(0, 3)),
                min_size=1, max_size=40))
def test_fixed_width_records_are_valid_json_with_exact_values(rows):
    table = ("a", "bb\"q", "ccc\\", "é")
    ints = np.array([r[0] for r in rows], dtype=np.int64)
    ns = np.array([r[1] for r in rows], dtype=np.int64)
    idx = np.array([r[2] for r in rows])
    data = encode_records([b'{"i":', Int(ints), b',"t":', Micros(ns), b',"s":', Text(idx, table), b'},'],
                          len(rows))
    back = orjson.loads(b"[" + data[:-1] + b"]")
    assert [b["i"] for b in back] == ints.tolist()
    assert [round(b["t"] * 1000) for b in back] == ns.tolist()
    assert [b["s"] for b in back] == [table[i] for i in idx]


@given(st.text(min_size=1, max_size=120), st.text(min_size=1, max_size=8), st.integers(12, 60))
@settings(max_examples=200, deadline=None)
def test_long_operator_names_are_cut_in_the_middle_and_stay_apart(stem, end, width):
    """Two names that differ only at the end (`...q_proj.dx`, `...k_proj.dx`) read differently in
    the top-operators table, cut or not, and every name fits its column. Control characters
    are written as escapes (`\\x1b`) before the cut."""
    a, b = stem + "a" + end, stem + "b" + end
    fa, fb = render.fit_name(a, width), render.fit_name(b, width)
    assert len(fa) <= width and len(fb) <= width
    assert fa.isprintable() and fb.isprintable()
    if len(render.printable(a)) <= width:
        assert fa == render.printable(a)
    if len(render.printable(end)) + 1 <= (width - 3) // 3:
        assert fa != fb


def test_summary_counts_mean_what_neuron_explorer_says(mlp):
    """trace_count is every trace event (instructions, DMA transfers, semaphore updates) and
    event_count the notifications among them; total_exec_time the device span, never over
    total_time; byte, FLOP and instruction counts whole numbers (int64 in AWS's schema)."""
    from profiler.analysis.summary import SUMMARY_ENGINES, summarize
    s = summarize(mlp)
    instructions = sum(s[f"{e}_engine_instruction_count"] for e in SUMMARY_ENGINES) + s["dma_transfer_count"]
    # every engine's instructions and DMA transfers, and the collective cores' besides
    collective = s["trace_count"] - s["event_count"] - instructions
    assert s["event_count"] > 0 and 0 < collective <= 2 * s["cc_op_count"]
    assert 0 < s["total_exec_time"] <= s["total_time"]
    for key in ("model_flops", "hardware_flops", "hbm_read_bytes", "dma_transfer_total_bytes",
                "weight_queue_bytes", "matmul_instruction_count"):
        assert type(s[key]) is int, key
    assert "weight_size_bytes" not in s      # not the weight queue's bytes again


def test_summary_names_the_neuroncore_and_device_as_aws_does():
    """AWS's summary-text starts `nc_idx N`, `nd_idx M`: here each captured rank's core and its
    device (four logical cores per trn2 device at LNC=2)."""
    from profiler.analysis.ranks import rank_views
    from profiler.analysis.summary import summarize
    prof = capture_workload("mlp:layers=8", instance("trn2.48xlarge"), Placement(tp=4, pp=4, dp=1),
                            num_exec=1, ranks="stages")
    got = [(summarize(v)["nc_idx"], summarize(v)["nd_idx"]) for v in rank_views(prof)]
    assert got == [(0, 0), (4, 1), (8, 2), (12, 3)]


def test_perfetto_slices_carry_their_args(mlp, tmp_path):
    """Clicking a slice shows what it did: an instruction its operator (`hlo_name`, as AWS's
    device trace names it), FLOPs and HBM bytes; an operator span its kind, phase, step and
    module. Before, slices carried no args at all."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    path = tmp_path / "mlp.pftrace"
    write_perfetto(mlp, str(path))
    arg_names, strings, begins = {}, {}, []
    for p in pb.Trace.FromString(path.read_bytes()).packet:
        for e in p.interned_data.debug_annotation_names:
            arg_names[e.iid] = e.name
        for e in p.interned_data.debug_annotation_string_values:
            strings[e.iid] = e.str.decode()
        if p.HasField("track_event") and p.track_event.type == 1:
            begins.append(p.track_event)

    def args(event):
        return {arg_names[a.name_iid]: strings[a.string_value_iid]
                if a.HasField("string_value_iid") else a.int_value
                for a in event.debug_annotations}

    ins, ops = mlp.table("instructions"), mlp.table("ops")
    read = [args(e) for e in begins]
    on_ins = [a for a in read if "hlo_name" in a]
    on_ops = [a for a in read if "phase" in a]
    assert len(on_ins) == ins["start"].size and len(on_ops) == ops["start"].size
    op_names = [mlp.strings[i] for i in ops["name_s"].tolist()]
    assert {a["hlo_name"] for a in on_ins} <= set(op_names)
    # a zero count is left out (a transfer's FLOPs, a compute instruction's HBM bytes)
    flops = [a.get("flops", 0) for a in on_ins]
    hbm = [a.get("hbm_bytes", 0) for a in on_ins]
    assert sum(flops) == pytest.approx(float(ins["flops"].sum()), rel=1e-3)
    assert sum(hbm) == pytest.approx(float((ins["hbm_r"] + ins["hbm_w"]).sum()), rel=1e-3)
    assert 0 not in {a[k] for a in on_ins for k in ("flops", "hbm_bytes") if k in a}
    assert sum(1 for a in on_ins if "flops" in a) == int((ins["flops"] > 0).sum()) > 0
    assert sorted(a["step"] for a in on_ops) == sorted(ops["step"].tolist())
    assert {a["phase"] for a in on_ops} <= {"forward", "backward", "optimizer", "other"}
    assert {a["kind"] for a in on_ops} == {mlp.strings[i] for i in ops["kind_s"].tolist()}


def test_perfetto_args_encode_negative_and_wide_values():
    """A negative int arg takes protobuf's ten-byte int64 form; wide values widen the record."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from profiler.export.perfetto import Arg, _records
    values = np.array([-1, 0, 5, 1 << 40], np.int64)
    rec = _records(np.arange(4, dtype=np.int64), np.ones(4, np.int64), np.full(4, 20),
                   np.ones(4, np.int64), args=(Arg("step", values), Arg("flops", values[::-1])))
    trace = pb.Trace.FromString(rec.tobytes())
    got = [[a.int_value for a in p.track_event.debug_annotations] for p in trace.packet]
    assert got == [[v, w] for v, w in zip(values.tolist(), values[::-1].tolist())]
