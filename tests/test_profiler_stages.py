"""Pipeline-parallel captures: one rank per stage, each its own NeuronCore in the profile.

Stage programs (embedding first, head and loss last, send/recv to neighbours), 1F1B bubbles,
per-rank summaries (golden file), Chrome and Perfetto processes per rank, diff across rank counts,
advice per rank, and `--ranks` on the command line."""
from __future__ import annotations

import collections

import numpy as np
import orjson
import pytest

from device_model import instance
from device_model.errors import SpecError
from device_model.workloads import Placement
from profiler.analysis import render
from profiler.analysis.advise import advise
from profiler.capture.builtin import capture_workload
from profiler.export.chrome import write_chrome
from profiler.export.chrome_ranks import write_chrome_ranks
from profiler.cli import main
from profiler.analysis.diff import diff_profiles
from profiler.model.profile import PHASES
from profiler.export.perfetto import write_perfetto
from profiler.capture.pipeline import order_1f1b, schedule_1f1b
from profiler.analysis.rank_summary import summarize_ranks
from profiler.analysis.ranks import HOST_PID_BASE, rank_views
from profiler.analysis.summary import summarize
from test_profiler_views import check_golden

PP, MB = 4, 4
MLP = f"mlp:tokens=512,hidden=512,layers=8,microbatches={MB}"
BERT = f"bert-base:seq=128,mbs=1,gbs={MB}"


@pytest.fixture(scope="module")
def inst():
    return instance("trn2.48xlarge")


@pytest.fixture(scope="module")
def mlp(inst):
    return capture_workload(MLP, inst, Placement(cores=8, pp=PP, dp=2), num_exec=2, nth_exec=2)


@pytest.fixture(scope="module")
def bert(inst):
    return capture_workload(BERT, inst, Placement(cores=PP, tp=1, pp=PP), num_exec=2, nth_exec=2)


def op_names(view) -> set[str]:
    return set(view.text(view.table("ops")["name_s"]))


def step_ops(view, step: int) -> dict[str, np.ndarray]:
    ops = view.table("ops")
    sel = ops["step"] == step
    order = np.argsort(ops["start"][sel], kind="stable")
    return {c: col[sel][order] for c, col in ops.items()}


# --- stage programs ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mlp", "bert"])
def test_one_rank_per_stage_with_its_own_program(name, request):
    prof = request.getfixturevalue(name)
    views = rank_views(prof)
    assert [v.meta["pipeline_stage"] for v in views] == list(range(PP))
    assert len({v.meta["rank"] for v in views}) == PP
    names = [op_names(v) for v in views]
    embed = [any(n.startswith("embed") for n in ns) for ns in names]
    head = [any(n.startswith(("head", "loss")) for n in ns) for ns in names]
    loss = [any("loss" in n or "cross_entropy" in n for n in ns) for ns in names]
    assert embed == [True, False, False, False]
    assert head == [False, False, False, True] and loss[-1] and not any(loss[:-1])
    sends = [({"pp.send_activations", "pp.send_gradients"} & ns) for ns in names]
    assert sends[0] == {"pp.send_activations"} and sends[-1] == {"pp.send_gradients"}
    assert all(s == {"pp.send_activations", "pp.send_gradients"} for s in sends[1:-1])
    assert len({frozenset(ns) for ns in names}) == PP          # four different programs


def test_stage_layers_together_make_the_whole_model(inst, mlp):
    whole = capture_workload(MLP, inst, Placement(cores=2, pp=1, dp=2))
    layers = lambda ns: {n.split(".")[1] for n in ns if n.startswith("layers.")}    # noqa: E731
    per_stage = [layers(op_names(v)) for v in rank_views(mlp)]
    assert set().union(*per_stage) == layers(op_names(whole))
    assert sum(len(s) for s in per_stage) == len(layers(op_names(whole)))        # no layer twice


# --- 1F1B bubbles --------------------------------------------------------------------------------
def forward_spans(view, step: int) -> list[tuple[float, float]]:
    """(start, end) of each forward execution of the step, in order: each starts with the op
    that starts the stage's forward program and ends at its last forward op."""
    ops = step_ops(view, step)
    fwd = (ops["phase"] == PHASES.index("forward")).tolist()
    opener = ops["name_s"][fwd.index(True)]
    spans: list[list[float]] = []
    for is_fwd, name, start, end in zip(fwd, ops["name_s"].tolist(), ops["start"].tolist(),
                                        ops["end"].tolist()):
        if is_fwd and name == opener:
            spans.append([start, end])
        elif is_fwd:
            spans[-1][1] = max(spans[-1][1], end)
    return [(a, b) for a, b in spans]


@pytest.mark.parametrize("name", ["mlp", "bert"])
def test_stage_s_idles_s_forwards_before_its_first_forward(name, request):
    views = rank_views(request.getfixturevalue(name))
    step = 2                                       # warmed up: no weight load in the first forward
    step_start = {float(v.table("steps")["start"][v.table("steps")["step"] == step][0]) for v in views}
    assert len(step_start) == 1                    # every rank starts the step together
    t0 = step_start.pop()
    fwd_time = [forward_spans(v, step)[0][1] - forward_spans(v, step)[0][0] for v in views]
    for s, v in enumerate(views):
        idle = forward_spans(v, step)[0][0] - t0
        assert idle == pytest.approx(sum(fwd_time[:s]), rel=1e-6, abs=1e-9)
        assert (idle > 0) == (s > 0)


@pytest.mark.parametrize("name", ["mlp", "bert"])
def test_forwards_before_the_first_backward_follow_1f1b(name, request):
    for s, v in enumerate(rank_views(request.getfixturevalue(name))):
        ops = step_ops(v, 2)
        first_back = int(np.argmax(ops["phase"] == PHASES.index("backward")))
        runs = forward_spans(v, 2)
        before = sum(1 for start, _ in runs if start < ops["start"][first_back])
        assert before == min(PP - s, MB)
        assert len(runs) == MB


def test_the_last_stage_has_no_bubble_between_forward_and_backward(mlp):
    last = rank_views(mlp)[-1]
    ops = step_ops(last, 2)
    back = int(np.argmax(ops["phase"] == PHASES.index("backward")))
    assert ops["start"][back] - ops["end"][back - 1] < 1e-7


def test_schedule_matches_the_closed_form_for_equal_stages():
    f, b, pp, m = 1.0, 2.0, 4, 6
    slots = schedule_1f1b([f] * pp, [b] * pp, m)
    for s, row in enumerate(slots):
        assert row[0].start == s * f
        assert [k for k, _ in order_1f1b(s, pp, m)] == [x.kind for x in row]
    assert max(x.end for x in slots[0]) == (m + pp - 1) * (f + b)
    with pytest.raises(SpecError):
        schedule_1f1b([], [], 1)


# --- summaries -----------------------------------------------------------------------------------
def test_summary_text_is_one_block_per_rank_golden(mlp):
    text = render.summary_text(mlp)
    check_golden("mlp_pp4_summary.txt", text)
    blocks = [b for b in text.split("\n\n") if b.startswith("rank ")]
    assert [b.splitlines()[1] for b in blocks] == [f"pipeline_stage {s}" for s in range(PP)]


def test_summary_json_lists_every_rank_with_its_own_figures(mlp):
    doc = orjson.loads(render.summary_json(mlp))
    assert [s["pipeline_stage"] for s in doc["summary"]] == list(range(PP))
    for rec, view in zip(doc["summary"], rank_views(mlp)):
        own = summarize(view)
        assert rec["rank"] == view.meta["rank"]
        assert rec["model_flops"] == pytest.approx(own["model_flops"])
        assert rec["total_active_time_percent"] == pytest.approx(own["total_active_time_percent"])
    assert {o["rank"] for o in doc["top_operators"]} == {v.meta["rank"] for v in rank_views(mlp)}
    full = orjson.loads(render.profile_json(mlp))
    assert len(full["summary"]) == PP and {r["rank"] for r in full["instruction"]} == {
        v.meta["rank"] for v in rank_views(mlp)}


def test_the_middle_stages_idle_most_and_every_rank_spans_the_whole_step(mlp):
    recs = [summarize(v) for v in rank_views(mlp)]
    assert len({r["total_time"] for r in recs}) == 1
    busy = [r["total_active_time_percent"] for r in recs]
    assert all(0 < b < 100 for b in busy)


def test_aggregate_adds_ranks_up(mlp):
    recs = [summarize(v) for v in rank_views(mlp)]
    agg = summarize_ranks(mlp)
    assert agg["ranks"] == PP and agg["step_count"] == recs[0]["step_count"]
    assert agg["total_time"] == pytest.approx(sum(r["total_time"] for r in recs))
    assert agg["model_flops"] == pytest.approx(sum(r["model_flops"] for r in recs))
    lo, hi = min(r["mfu_estimated_percent"] for r in recs), max(r["mfu_estimated_percent"] for r in recs)
    assert lo <= agg["mfu_estimated_percent"] <= hi


# --- traces --------------------------------------------------------------------------------------
def test_chrome_trace_has_one_neuroncore_and_one_host_process_per_rank(mlp, tmp_path):
    path = tmp_path / "pp.json"
    count = write_chrome_ranks(mlp, str(path))
    doc = orjson.loads(path.read_bytes())
    events = doc["traceEvents"]
    assert len(events) == count
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    ranks = [v.meta["rank"] for v in rank_views(mlp)]
    kernels = {e["pid"] for e in events if e.get("cat") == "kernel"}
    assert kernels == set(ranks)
    for s, r in enumerate(ranks):
        assert names[r].startswith(f"NeuronCore {r} (rank {r}, pipeline stage {s} of {PP}")
    assert sum(n.startswith("Host") for n in names.values()) == PP
    # flows: as many starts as finishes per id, and no id shared between ranks
    flows = collections.defaultdict(list)
    for e in events:
        if e["ph"] in "sf":
            flows[(e["cat"], e["id"])].append((e["ph"], e["pid"] % HOST_PID_BASE))
    assert {cat for cat, _ in flows} == {"ac2g", "op2inst"}
    for ends in flows.values():
        phases = [ph for ph, _ in ends]
        assert phases.count("s") == phases.count("f") and len({rank for _, rank in ends}) == 1
    # X events never overlap on a thread of a process
    by_thread = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "X" and e.get("cat") == "kernel":
            by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("which", ["stages", "1,3"])
def test_chrome_events_of_each_rank_carry_its_pids_and_its_own_ids(inst, mlp, which, tmp_path):
    placement = Placement(cores=8, pp=PP, dp=2)
    prof = mlp if which == "stages" else \
        capture_workload(MLP, inst, placement, num_exec=2, nth_exec=2, ranks=which)
    views = rank_views(prof)
    path = tmp_path / "pp.json"
    write_chrome_ranks(prof, str(path))
    doc = orjson.loads(path.read_bytes())
    events = doc["traceEvents"]
    pids = {v.meta["rank"]: (v.meta["rank"], HOST_PID_BASE + v.meta["rank"]) for v in views}
    # by index, as Kineto lists them (TensorBoard looks a device up by its id's position)
    devices = doc["deviceProperties"]
    assert [d["id"] for d in devices] == list(range(max(pids) + 1))
    assert all(devices[rank]["name"].endswith("NeuronCore") for rank in pids)
    assert {e["pid"] for e in events} == {p for pair in pids.values() for p in pair}
    kinds = collections.Counter((e["pid"], e["ph"], e.get("cat")) for e in events)
    correlations = {}
    for v in views:
        dev, host = pids[v.meta["rank"]]
        assert kinds[(dev, "X", "neuron_instruction")] == v.rows("instructions")
        assert kinds[(dev, "X", "kernel")] == v.rows("ops")
        host_spans = sum(n for (pid, ph, _), n in kinds.items() if pid == host and ph == "X")
        # built-in runs launch with nrt_execute itself; each collective adds its `nccl:` operator
        assert host_spans == v.rows("host") + v.rows("collectives")
        assert kinds[(dev, "C", None)] > 0
        launched = {e["args"]["correlation"] for e in events
                    if e["pid"] == host and "correlation" in e.get("args", {})}
        used = {e["args"]["correlation"] for e in events
                if e["pid"] == dev and e.get("cat") == "kernel"} - {0}
        assert used and used <= launched             # kernels point at calls of their own rank
        correlations[dev] = launched
    assert sum(map(len, correlations.values())) == len(set().union(*correlations.values()))
    # each collective's operator and kernel share an External id no other rank's collective has
    nccl = [e["args"]["External id"] for e in events if e["name"].startswith("nccl:")]
    linked = collections.Counter(e["args"]["External id"] for e in events
                                 if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_"))
    assert len(nccl) == sum(v.rows("collectives") for v in views) == len(set(nccl)) > 0
    assert all(linked[x] == 1 for x in nccl) and set(linked) == set(nccl)
    # flows: an id belongs to one category and one rank; op2inst ids are used once, ac2g ids are
    # their launch's correlation id (one flow per launch, to the first kernel it launched)
    ends = collections.defaultdict(list)
    for e in events:
        if e["ph"] in "sf":
            ends[e["id"]].append((e["ph"], e["cat"], e["pid"]))
    for fid, flow in ends.items():
        starts = {(cat, pid) for ph, cat, pid in flow if ph == "s"}
        finishes = {(cat, pid) for ph, cat, pid in flow if ph == "f"}
        assert len(starts) == len(finishes) == 1
        assert 2 * sum(ph == "s" for ph, _, _ in flow) == len(flow)
        (cat, src), (cat_f, dst) = starts.pop(), finishes.pop()
        assert cat == cat_f and dst in pids
        if cat == "ac2g":
            assert src == pids[dst][1] and fid in correlations[dst]
        else:
            assert src == dst and len(flow) == 2
    assert {cat for flow in ends.values() for _, cat, _ in flow} == {"ac2g", "op2inst"}


def test_chrome_trace_of_a_single_rank_capture_is_the_single_core_trace(inst, tmp_path):
    prof = capture_workload("matmul:m=256,k=256,n=256", inst)
    write_chrome_ranks(prof, str(tmp_path / "ranks.json"))
    write_chrome(prof, str(tmp_path / "one.json"))
    assert (tmp_path / "ranks.json").read_bytes() == (tmp_path / "one.json").read_bytes()


def test_perfetto_trace_has_one_process_pair_per_rank(mlp, tmp_path):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    path = tmp_path / "pp.pftrace"
    write_perfetto(mlp, str(path))
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    processes = {p.track_descriptor.process.pid: p.track_descriptor.process.process_name
                 for p in trace.packet if p.track_descriptor.HasField("process")}
    ranks = [v.meta["rank"] for v in rank_views(mlp)]
    assert sum(n.startswith("NeuronCore") for n in processes.values()) == PP
    assert sum(n.startswith("Host") for n in processes.values()) == PP
    assert all(processes[r].startswith(f"NeuronCore {r} (rank {r}") for r in ranks)
    declared = {p.track_descriptor.uuid for p in trace.packet if p.HasField("track_descriptor")}
    used = {p.track_event.track_uuid for p in trace.packet if p.HasField("track_event")}
    assert used <= declared
    thread_pid = {p.track_descriptor.uuid: p.track_descriptor.thread.pid for p in trace.packet
                  if p.track_descriptor.HasField("thread")}
    begins = collections.Counter(thread_pid[p.track_event.track_uuid] for p in trace.packet
                                 if p.HasField("track_event") and p.track_event.type == 1
                                 and p.track_event.track_uuid in thread_pid)
    assert set(ranks) <= set(begins)                 # every NeuronCore has slices
    flows = collections.Counter(f for p in trace.packet if p.HasField("track_event")
                                for f in p.track_event.flow_ids)
    assert flows and set(flows.values()) == {2}      # each flow: one start, one end, no sharing


# --- diff and advise -----------------------------------------------------------------------------
def test_diff_across_rank_counts(inst, mlp):
    one = capture_workload(MLP, inst, Placement(cores=2, pp=1, dp=2), num_exec=2, nth_exec=2)
    d = diff_profiles(one, mlp)
    assert "4 ranks added up" in d.b_label and "ranks" not in d.a_label
    flops = next(r for r in d.metrics if r.name == "model_flops")
    assert flops.ratio("value") == pytest.approx(1.0, rel=1e-6)     # the same model, split in four
    names = {r.name for r in d.operators}
    assert {"embed", "head", "layers.7.up", "pp.send_activations"} <= names
    first = capture_workload(MLP, inst, Placement(cores=8, pp=PP, dp=2), num_exec=2, nth_exec=2,
                             ranks="first")
    assert diff_profiles(first, mlp).engines[0].ratio("time") == pytest.approx(PP, rel=1e-6)


def test_advise_names_the_rank_of_each_finding(mlp):
    found = advise(mlp)
    bubbles = next(f for f in found if f.rule == "pipeline-bubbles")
    assert bubbles.evidence[0].startswith("on rank ")
    assert len({f.rule for f in found}) == len(found)


# --- choosing ranks ------------------------------------------------------------------------------
@pytest.mark.parametrize("which, stages", [("first", [0]), ("last", [PP - 1]), ("1,3", [1, 3]),
                                           ("stages", list(range(PP)))])
def test_ranks_option_chooses_stages(inst, which, stages):
    prof = capture_workload(MLP, inst, Placement(cores=8, pp=PP, dp=2), ranks=which)
    assert [r["stage"] for r in prof.meta["ranks"]] == stages
    multi = len(stages) > 1
    assert ("rank" in orjson.loads(render.summary_json(prof))["summary"][0]) == multi


def test_a_single_rank_capture_keeps_the_single_core_shape(inst):
    prof = capture_workload("matmul:m=256,k=256,n=256", inst)
    assert len(prof.meta["ranks"]) == 1 and "rank" not in summarize(prof)
    assert rank_views(prof) == [prof]


@pytest.mark.parametrize("argv, needle", [
    (["--ranks", "5"], "within 0..3"),
    (["--ranks", "1,1"], "distinct"),
    (["--ranks", "middle"], "stage numbers like 0,3"),
])
def test_bad_ranks_are_one_line_errors(argv, needle, tmp_path, capsys):
    rc = main(["capture", "-w", MLP, "--cores", "8", "--pp", "4", "-s", str(tmp_path / "x.nsprof"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1



@pytest.mark.parametrize("spec, argv", [
    # a step of 2.7e11 micro-batches was scheduled one by one until memory ran out
    ("llama2-7b:seq=1024,gbs=1099511627776", ["--tp", "8"]),
    ("mlp:layers=4,microbatches=1000000000", ["--pp", "2"]),
])
def test_a_capture_of_too_many_micro_batches_is_refused_before_it_is_scheduled(spec, argv,
                                                                               tmp_path, capsys):
    out = tmp_path / "x.nsprof"
    rc = main(["capture", "-w", spec, "-i", "trn1.32xlarge", *argv, "-s", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "micro-batches a step" in err
    assert "2,097,152" in err and not out.exists()


def test_the_recorded_operator_limit_counts_executions_and_ranks(inst):
    from profiler.capture.builtin_plans import MAX_RECORDED_OPERATORS, check_recorded
    from device_model.workloads import REGISTRY
    from device_model.workloads.spec import bind, split_spec
    name, raw = split_spec(MLP)
    cap = REGISTRY[name].capture
    stages = cap.build(inst, bind(name, raw, cap.params), Placement(cores=8, pp=PP, dp=2)).stages
    ops = sum(len(st.forward.ops) + len(st.backward.ops) for st in stages)
    check_recorded(stages, MB, list(range(PP)), 2)          # the fixture's capture: well under
    many = MAX_RECORDED_OPERATORS // ops + 1                 # micro-batches just past the limit
    check_recorded(stages, many, [0], 1)                     # one rank of them fits
    with pytest.raises(SpecError, match="micro-batches a step"):
        check_recorded(stages, many, list(range(PP)), 1)

def test_ranks_of_a_script_are_rank_numbers_not_stages(capsys):
    # a script's ranks are its processes: `stages` is a built-in run's word (checked before it runs)
    assert main(["capture", "--ranks", "stages", "--", "python", "-c", "pass"]) == 2
    assert "--ranks: expected all, first, last or rank numbers" in capsys.readouterr().err


def test_cli_capture_and_views_of_a_pipeline(tmp_path, capsys):
    path = tmp_path / "pp.nsprof"
    assert main(["capture", "-w", BERT, "--cores", "4", "--tp", "1", "--pp", "4", "-s", str(path),
                 "--progress", "off"]) == 0
    assert "4 ranks" in capsys.readouterr().err
    for fmt, out in (("chrome", "pp.json"), ("perfetto", "pp.pftrace")):
        assert main(["view", "-s", str(path), "--output-format", fmt, "--output-file",
                     str(tmp_path / out)]) == 0
    pids = {e["pid"] for e in orjson.loads((tmp_path / "pp.json").read_bytes())["traceEvents"]
            if e.get("cat") == "kernel"}
    assert len(pids) == PP
    assert main(["view", "-s", str(path)]) == 0
    assert capsys.readouterr().out.count("pipeline_stage ") == PP



# --- repeated micro-batches ----------------------------------------------------------------------
def test_repeated_micro_batches_count_in_the_summary_as_often_as_they_ran(inst, mlp):
    """A step's micro-batches are one program run MB times: the file keeps their instructions
    once and their operators every time, and the summary counts every run (it counted one of
    MB before: MFU a quarter of the truth here)."""
    from profiler.analysis.summary import scope_mask, summarize
    single = capture_workload(MLP, inst, Placement(cores=2, pp=1, dp=2), num_exec=2, nth_exec=2)
    for view in [single, *rank_views(mlp)]:
        ops, ins = view.table("ops"), view.table("instructions")
        _, scope = scope_mask(view)
        held = np.zeros(ops["start"].size, dtype=bool)
        held[np.unique(ins["op"])] = True
        assert (scope & ~held & (ops["instructions"] > 0)).any()     # repeats without instructions
        s, lnc = summarize(view), view.meta["lnc"]
        assert s["model_flops"] == pytest.approx(float(ops["flops"][scope].sum()) * lnc, rel=1e-6)
        assert s["hbm_read_bytes"] == pytest.approx(float(ops["hbm_r"][scope].sum()) * lnc, rel=1e-6)
        for engine in ("tensor", "vector", "scalar"):
            assert s[f"{engine}_engine_instruction_time"] == pytest.approx(
                float(ops[f"busy_{engine}"][scope].sum()), rel=1e-6)
            assert s[f"{engine}_engine_active_time"] <= s[f"{engine}_engine_instruction_time"] + 1e-12
    # one rank doing the whole model is not a device idle for MB-1 micro-batches of its step
    assert "device-idle" not in {f.rule for f in advise(single)}
    s = summarize(single)
    assert s["total_active_time_percent"] > 90


def test_every_ranks_steps_follow_one_another_without_a_gap(inst):
    """A stage that finished early ended its ProfilerStep at its own last operator: the time up
    to the next step was in no step, and TensorBoard's step time was short of the job's."""
    prof = capture_workload(MLP, inst, Placement(cores=8, pp=PP, dp=2), num_exec=3, nth_exec=1)
    for view in rank_views(prof):
        host = view.table("host")
        names = view.text(host["name_s"])
        marks = sorted((s, e) for n, s, e in zip(names, host["start"], host["end"])
                       if n.startswith("ProfilerStep#"))
        assert len(marks) == 3, view.meta.get("rank_label")
        assert all(a[1] == b[0] for a, b in zip(marks, marks[1:])), view.meta.get("rank_label")
        steps = view.table("steps")
        assert np.array_equal(steps["host_end"][:-1], steps["host_start"][1:])


def test_semaphores_and_throttles_grow_with_each_micro_batch(inst):
    """Every micro-batch runs the same program, so each adds the same semaphore updates and
    throttled time: the summary counted the first micro-batch's only (throttling read 4x
    smaller at 4 micro-batches)."""
    from profiler.analysis.summary import summarize
    events, limited = [], []
    for n in (2, 3, 4):
        s = summarize(capture_workload(f"mlp:tokens=512,hidden=512,layers=2,microbatches={n}",
                                       inst, Placement(cores=1)))
        events.append(s["event_count"])
        limited.append((1 - s["average_utilization_limit_percent"] / 100) * s["total_time"])
        assert s["trace_count"] > s["event_count"]
    assert events[2] - events[1] == events[1] - events[0] > 0
    assert limited[2] - limited[1] == pytest.approx(limited[1] - limited[0], rel=1e-6)
    assert limited[1] - limited[0] > 0
