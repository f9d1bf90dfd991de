"""Our Chrome traces read by the real analysers with their defaults: HolisticTraceAnalysis
(temporal, kernel-type, idle-time and comm/comp-overlap breakdowns) and TensorBoard's profiler
plugin (torch-tb-profiler's parser: steps and their device time), on a single-rank and a 2-rank
built-in capture and on a PyTorch capture; each figure compared with the profile's own."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from device_model import instance
from device_model.workloads import Placement
from profiler.analysis.ranks import parse_rank_selection, rank_views, select_ranks
from profiler.analysis.summary import summarize
from profiler.analysis.summary import union_length
from profiler.analysis.timeline import (COMMUNICATION, COMPUTATION, MEMORY, collective_kinds, device_breakdown,
                                        op_types)
from profiler.capture.builtin import capture_workload
from profiler.export.chrome import nccl_op_name, write_chrome
from profiler.export.chrome_ranks import write_chrome_dir
from profiler.export.tracks import OP_TID_BASE, op_rows, to_ns
from profiler.model import fileformat
from profiler.model.profile import ProfileError

pytestmark = pytest.mark.filterwarnings("ignore")
MLP = "mlp:tokens=512,hidden=512,layers=2,microbatches=2"
US = 1e-6


@pytest.fixture(autouse=True)
def _hta_defaults(monkeypatch):
    monkeypatch.delenv("HTA_DISABLE_NS_ROUNDING", raising=False)


@pytest.fixture(scope="module")
def single():
    return capture_workload(MLP, instance("trn2.48xlarge"), Placement(), num_exec=3, nth_exec=2)


@pytest.fixture(scope="module")
def two_ranks():
    """pp=2, dp=2: both pipeline stages captured, with send/recv and DP all-reduces."""
    return capture_workload(MLP, instance("trn2.48xlarge"), Placement(pp=2, dp=2), num_exec=3)


def _hta(folder: Path) -> "HtaAnswers":
    """HTA's answers on `folder`, from a process of its own (tests/hta_child.py: HTA forks to
    parse several ranks, and a fork of this process, whose other threads may hold a lock, could
    wait for ever)."""
    pytest.importorskip("hta.trace_analysis")
    out = folder / "hta_answers.json"
    res = subprocess.run([sys.executable, str(Path(__file__).parent / "hta_child.py"),
                          str(folder), str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    answers = HtaAnswers(json.loads(out.read_text()))
    out.unlink()          # not a trace: a later read of the folder must not take it for one
    return answers


class HtaAnswers:
    """The breakdowns hta_child.py wrote, under TraceAnalysis's own method names."""

    def __init__(self, data: dict) -> None:
        import pandas as pd
        self._pd, self._data = pd, data
        self.t = type("Traces", (), {"traces": dict.fromkeys(data["ranks"])})()

    def _frame(self, records: list[dict]):
        return self._pd.DataFrame.from_records(records)

    def get_temporal_breakdown(self, visualize: bool = False):
        return self._frame(self._data["temporal"])

    def get_gpu_kernel_breakdown(self, visualize: bool = False):
        return self._frame(self._data["kernel_by_type"]), self._frame(self._data["kernel_top"])

    def get_comm_comp_overlap(self, visualize: bool = False):
        return self._frame(self._data["overlap"])

    def get_idle_time_breakdown(self, ranks: list[int], visualize: bool = False):
        (rank,) = ranks
        return self._frame(self._data["idle"][str(rank)]), None


def _counted_steps(view) -> list[int]:
    """HTA leaves out the kernels launched in the last ProfilerStep."""
    return sorted(set(view.table("steps")["step"].tolist()))[:-1]


def _busy_intervals(view, steps, kind: int | None = None) -> int:
    """Separate intervals of the union of the ops of `steps` (of one kernel type)."""
    ops = view.table("ops")
    sel = np.isin(ops["step"], steps) & (True if kind is None else op_types(view) == kind)
    return _intervals(ops["start"][sel], ops["end"][sel])


def _intervals(start: np.ndarray, end: np.ndarray) -> int:
    """Separate intervals of the union of [start, end)."""
    if start.size == 0:
        return 0
    o = np.argsort(start)
    reach = np.maximum.accumulate(end[o])
    return int(1 + np.sum(start[o][1:] > reach[:-1]))


def _check_hta(analysis, views, tol_us: float = 2.0) -> None:
    temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    by_type, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    for view in views:
        rank = int(view.meta.get("rank", 0))
        ref = device_breakdown(view, _counted_steps(view))
        # each separate busy interval's ends move by under 1 us on HTA's microsecond grid
        tol_us = max(tol_us, _busy_intervals(view, _counted_steps(view)))
        row = temporal.loc[rank]
        assert row["kernel_time(us)"] * US == pytest.approx(ref.span, abs=tol_us * US)
        assert row["idle_time(us)"] * US == pytest.approx(ref.idle, abs=tol_us * US)
        # compute time is the union of the compute kernels alone: its separate intervals (split
        # by collectives and copies) each move by under 1 us too
        tol_compute = max(tol_us, _busy_intervals(view, _counted_steps(view), COMPUTATION))
        assert row["compute_time(us)"] * US == pytest.approx(ref.computation, abs=tol_compute * US)
        assert 0 <= row["idle_time(us)"] <= row["kernel_time(us)"]
        ratio = overlap.loc[rank]["comp_comm_overlap_pctg"]
        if ref.communication == 0:
            assert np.isnan(ratio) or ratio == 0         # no collectives: nothing overlapped
        else:
            # the overlap is where the two kinds' unions meet: its ends are theirs
            tol_overlap = tol_compute + _busy_intervals(view, _counted_steps(view), COMMUNICATION)
            assert ratio / 100 * ref.communication == pytest.approx(ref.comm_overlapped,
                                                                    abs=tol_overlap * US)
    # each kernel type's time (alone or overlapping others), added up over the ranks; each of its
    # separate intervals moves by under 1 us on the microsecond grid
    refs = [device_breakdown(v, _counted_steps(v)) for v in views]
    for name, code, expected in (("COMMUNICATION", COMMUNICATION, sum(r.communication for r in refs)),
                                 ("COMPUTATION", COMPUTATION, sum(r.computation for r in refs)),
                                 ("MEMORY", MEMORY, sum(r.memory for r in refs))):
        got = by_type[by_type["kernel_type"].str.contains(name)]["sum"].sum()
        tol = max(2, sum(_busy_intervals(v, _counted_steps(v), code) for v in views))
        assert got * US == pytest.approx(expected, abs=tol * US), name


def _check_idle_breakdown(analysis, view) -> None:
    """Per stream, HTA's idle time is the gaps between the operators on it (the documented
    layout: operators on the lowest free stream, times floored to whole microseconds)."""
    rank = int(view.meta.get("rank", 0))
    idle, _ = analysis.get_idle_time_breakdown(ranks=[rank], visualize=False)
    assert set(idle["idle_category"]) <= {"host_wait", "kernel_wait", "other"}
    ops = view.table("ops")
    start, end = to_ns(ops["start"]), np.maximum(to_ns(ops["end"]), to_ns(ops["start"]))
    rows = op_rows(start, end)
    counted = np.isin(ops["step"], _counted_steps(view))
    for stream, per_stream in idle.groupby("stream"):
        assert (per_stream["idle_time"] >= 0).all()
        assert per_stream["idle_time_ratio"].sum() == pytest.approx(1.0, abs=0.02)
        sel = counted & (OP_TID_BASE + rows == stream)
        o = np.argsort(start[sel], kind="stable")
        s_us, e_us = start[sel][o] // 1000, end[sel][o] // 1000
        assert per_stream["idle_time"].sum() == pytest.approx(float(np.sum(s_us[1:] - e_us[:-1])), abs=1)


def test_hta_defaults_single_rank_breakdowns_match_the_profile(single, tmp_path):
    write_chrome(single, str(tmp_path / "rank0.json"))
    analysis = _hta(tmp_path)
    _check_hta(analysis, [single])
    _check_idle_breakdown(analysis, single)
    by_type, top = analysis.get_gpu_kernel_breakdown(visualize=False)
    assert not by_type["kernel_type"].str.contains("COMMUNICATION").any()
    assert summarize(single)["cc_op_time"] == 0
    op_names = set(single.text(single.table("ops")["name_s"]))
    shown = set(top["name"]) - {"others"}
    assert shown and {n.removeprefix("Memcpy ") for n in shown} <= op_names
    assert "Memcpy input_batch" in shown                  # a DMA-only operator is memory


def test_hta_defaults_two_ranks_from_one_file_per_rank(two_ranks, tmp_path):
    paths, _ = write_chrome_dir(two_ranks, tmp_path / "trace")
    assert sorted(p.name for p in paths) == ["rank_0.pt.trace.json", "rank_1.pt.trace.json"]
    analysis = _hta(tmp_path / "trace")
    views = rank_views(two_ranks)
    assert sorted(analysis.t.traces) == [0, 1]
    _check_hta(analysis, views)
    for view in views:
        assert device_breakdown(view, _counted_steps(view)).communication > 0
        _check_idle_breakdown(analysis, view)


def test_distributed_info_is_spelled_as_kineto_does(two_ranks, tmp_path):
    paths, _ = write_chrome_dir(two_ranks, tmp_path)
    for path in paths:
        head = path.read_bytes()[:2000].decode()
        info = json.dumps(orjson.loads(path.read_bytes())["distributedInfo"])
        assert f'"distributedInfo": {info}' in head            # Python json's spacing
        assert f'"rank": {path.name.split(".")[0].split("_")[1]},' in head
        assert '"world_size": 4' in head


def _tb(path: Path):
    data = pytest.importorskip("torch_tb_profiler.profiler.data")
    return data.RunProfileData.from_json("worker", "span", json.loads(path.read_bytes()))


def _check_tb(run, view) -> None:
    """TensorBoard's steps are ours, and each step's kernel time is that step's device busy time."""
    from torch_tb_profiler.profiler.event_parser import ProfileRole
    steps = sorted(set(view.table("steps")["step"].tolist()))
    assert run.steps_names == [str(s) for s in steps]
    assert run.has_kernel and run.has_runtime
    for step, costs in zip(steps, run.steps_costs):
        # the overview's roles share the step out: together they are the step, once
        assert sum(costs.costs[:ProfileRole.Total]) == pytest.approx(
            costs.costs[ProfileRole.Total], abs=1), step
        busy = device_breakdown(view, [step]).busy
        device = costs.costs[ProfileRole.Kernel] + costs.costs[ProfileRole.Communication]
        assert device * US == pytest.approx(busy, abs=2 * US), step
        assert costs.costs[ProfileRole.Kernel] <= costs.costs[ProfileRole.Total]


def test_torch_tb_profiler_puts_each_steps_device_time_in_its_step(single, two_ranks, tmp_path):
    write_chrome(single, str(tmp_path / "one.json"))
    run = _tb(tmp_path / "one.json")
    _check_tb(run, single)
    assert all(c.costs[3] == 0 for c in run.steps_costs)     # Communication: no collectives
    paths, _ = write_chrome_dir(two_ranks, tmp_path / "ranks")
    for path, view in zip(sorted(paths), rank_views(two_ranks)):
        _check_tb(_tb(path), view)


def test_torch_tb_profiler_names_every_ranks_device(two_ranks, tmp_path):
    """TensorBoard finds a device's properties at the index of its id: a rank's file listed only
    its own core, so every rank but 0 showed a GPU without a name."""
    from torch_tb_profiler.profiler.run_generator import RunGenerator
    paths, _ = write_chrome_dir(two_ranks, tmp_path / "ranks")
    for path in sorted(paths):
        run = _tb(path)
        assert run.gpu_metrics_parser.gpu_ids
        for gpu in run.gpu_metrics_parser.gpu_ids:
            info = RunGenerator._get_gpu_info(run.device_props, gpu)
            assert info is not None and info["Name"].endswith("NeuronCore"), (path.name, gpu)


def _nccl_names(view) -> dict[int, str]:
    """Op row -> its collective's `nccl:` operator name."""
    names = view.table("ops")["name_s"]
    return {op: nccl_op_name(kind, view.strings[names[op]]) for op, kind in collective_kinds(view).items()}


def _tb_collectives(view) -> tuple[np.ndarray, list[str]]:
    """Op rows of the collectives whose `nccl:` operator torch-tb-profiler counts as
    communication, and the names of those it does not."""
    from torch_tb_profiler.profiler.trace import NcclOpNameSet
    names = _nccl_names(view)
    known = np.array(sorted(op for op, n in names.items() if n in NcclOpNameSet), dtype=np.int64)
    return known, sorted({n for n in names.values() if n not in NcclOpNameSet})


def _spans(view, rows) -> tuple[np.ndarray, np.ndarray]:
    ops = view.table("ops")
    return ops["start"][rows], np.maximum(ops["end"][rows], ops["start"][rows])


def _check_tb_communication(run, view, known: np.ndarray):
    """TensorBoard's communication and overlap per step against the profile's (collectives
    `known` against every other operator), and its communication-ops figures (calls, bytes,
    latency) per `nccl:` operator; the figures of each operator name."""
    from torch_tb_profiler.profiler.data import DistributedRunProfileData
    assert run.has_communication
    ops = view.table("ops")
    steps = [int(s) for s in run.steps_names]
    for step, costs in zip(steps, run.comm_overlap_costs):
        mine = known[ops["step"][known] == step]
        rest = np.setdiff1d(np.flatnonzero(ops["step"] == step), mine)
        s_c, e_c = _spans(view, mine)
        s_r, e_r = _spans(view, rest)
        comm = union_length(s_c, e_c)
        overlap = comm + union_length(s_r, e_r) - union_length(np.r_[s_c, s_r], np.r_[e_c, e_r])
        tol = max(2, _intervals(s_c, e_c))
        assert costs.communication * US == pytest.approx(comm, abs=tol * US), step
        assert costs.overlap * US == pytest.approx(overlap, abs=(tol + _intervals(s_r, e_r)) * US), step
    dist = DistributedRunProfileData(run)
    dist.communication_parse()
    names, coll = _nccl_names(view), view.table("collectives")
    assert set(dist.total_comm_stats) == {names[op] for op in known.tolist()}
    for name, (calls, size, latency, _) in dist.total_comm_stats.items():
        rows = np.array([op for op in known.tolist() if names[op] == name])
        assert calls == rows.size, name
        assert size == int(coll["bytes"][np.isin(coll["op"], rows)].sum()), name
        s, e = _spans(view, rows)
        assert latency * US == pytest.approx(float(np.sum(e - s)), abs=rows.size * US), name
    return {name: tuple(stats[:3]) for name, stats in dist.total_comm_stats.items()}, dist


def test_torch_tb_profiler_counts_the_collectives_it_knows_as_communication(two_ranks, tmp_path):
    """Per rank and step, TensorBoard's communication time (its distributed view's) is the
    profile's time of the collectives it knows (all-reduce here), and its overlap with the other
    kernels the profile's too, each separate interval moving by under 1 us on its microsecond
    grid; its communication-ops table has their calls, bytes and latency; point-to-point
    sends stay kernel time, as in a Kineto trace."""
    data = pytest.importorskip("torch_tb_profiler.profiler.data")
    from torch_tb_profiler.profiler.event_parser import CommLibTypes
    from torch_tb_profiler.profiler.loader import RunLoader
    paths, _ = write_chrome_dir(two_ranks, tmp_path / "ranks")
    views = rank_views(two_ranks)
    dists, expected = [], {}
    from torch_tb_profiler.consts import WORKER_PATTERN
    for path, view in zip(sorted(paths), views):
        worker = WORKER_PATTERN.match(path.name).group(1)    # as its folder loader names it
        run = data.RunProfileData.from_json(worker, "span", json.loads(path.read_bytes()))
        assert run.has_communication and run.comm_lib == {CommLibTypes.Nccl}
        known, other = _tb_collectives(view)
        assert known.size and other == ["nccl:send"]          # DP all-reduces; PP sends
        stats, dist = _check_tb_communication(run, view, known)
        assert list(stats) == ["nccl:all_reduce"]
        dists.append(dist)
        expected[worker] = (*stats["nccl:all_reduce"],
                               {s: c.communication for s, c in zip(run.steps_names, run.comm_overlap_costs)})
    # the distributed view across both ranks: their collectives match up rank to rank; its
    # overview's communication (overlapped or not) and ops table are each rank's own figures,
    # the data transfer time (the shortest rank's) under the latency
    view = RunLoader("run", str(tmp_path / "ranks"), None)._process_distributed_profiles(dists, None)
    assert view is not None
    overview, table = view.steps_to_overlap["data"], view.comm_ops["data"]
    assert set(table) == set(expected) == {"rank_0", "rank_1"}
    for worker, (calls, size, latency, per_step) in expected.items():
        row = table[worker]["rows"]
        assert [r[:3] for r in row] == [["nccl:all_reduce", calls, size]] and row[0][4] == latency
        assert 0 < row[0][6] <= latency
        for step, comm in per_step.items():
            assert overview[step][worker][1] + overview[step][worker][2] == comm


@pytest.fixture(scope="module")
def script_profile():
    """A real PyTorch training loop captured with the Python API (host calls measured)."""
    torch = pytest.importorskip("torch")
    import profiler
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    windows = []
    with profiler.profile(instance="trn2.48xlarge", recorder="python",
                          on_trace_ready=lambda p: windows.append(p.profile)) as prof:
        for _ in range(4):
            x = torch.randn(32, 64)
            loss = (model(x) - x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    return prof.profile


def test_script_capture_device_steps_start_under_their_host_steps(script_profile, tmp_path):
    p = script_profile
    steps = p.table("steps")
    assert steps["step"].size >= 3
    assert np.all(steps["start"] >= steps["host_start"])
    assert np.all(steps["start"] <= steps["host_end"])
    assert np.all(steps["start"][1:] >= steps["end"][:-1])       # one device, steps in order
    ops, host = p.table("ops"), p.table("host")
    launched = ops["host"] >= 0
    assert launched.any()
    assert np.all(ops["start"][launched] >= host["end"][ops["host"][launched]] - 1e-12)
    write_chrome(p, str(tmp_path / "script.json"))
    events = orjson.loads((tmp_path / "script.json").read_bytes())["traceEvents"]
    flows = {}
    for e in events:
        if e["ph"] in "sf" and e["cat"] == "ac2g":
            flows.setdefault(e["id"], {})[e["ph"]] = e["ts"]
    assert flows and all(f["f"] >= f["s"] for f in flows.values())   # forward in time
    run = _tb(tmp_path / "script.json")
    _check_tb(run, p)
    analysis = _hta(tmp_path)
    _check_hta(analysis, [p])


def test_select_ranks_keeps_the_chosen_ranks_rebased(two_ranks):
    views = rank_views(two_ranks)
    kept = select_ranks(two_ranks, [1])
    assert [e["rank"] for e in kept.meta["ranks"]] == [1]
    (view,) = rank_views(kept)
    for name, table in views[1].tables.items():
        for col, values in table.items():
            np.testing.assert_array_equal(view.tables[name][col], values, err_msg=f"{name}.{col}")
    assert select_ranks(two_ranks, "all") is two_ranks
    assert [e["rank"] for e in select_ranks(two_ranks, "last").meta["ranks"]] == [1]
    with pytest.raises(ProfileError, match="rank 5 is not in the capture"):
        select_ranks(two_ranks, [5])
    for bad in ("x", "-1", "1,,2"):
        with pytest.raises(ProfileError, match="--ranks"):
            parse_rank_selection(bad)


ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "profiler.cli"]


@pytest.mark.slow
def test_torchrun_capture_ranks_and_readers(tmp_path):
    """A real 2-worker DDP job: its per-rank traces read by HTA and TensorBoard, then `--ranks 1`
    keeping one rank of it."""
    pytest.importorskip("torch.distributed.run")
    out = tmp_path / "ddp.nsprof"
    # the venv's own torchrun, as a user runs it with the venv active
    job = ["--", str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "2",
           str(ROOT / "examples" / "train_ddp.py"), "--steps", "3"]
    res = subprocess.run([*CLI, "capture", "-s", str(out), "--instance", "trn1.32xlarge", *job],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    both = fileformat.load(out)
    res = subprocess.run([*CLI, "view", "-s", str(out), "--output-format", "chrome"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    folder = tmp_path / "ddp_trace"
    assert sorted(p.name for p in folder.iterdir()) == ["rank_0.pt.trace.json", "rank_1.pt.trace.json"]
    from torch_tb_profiler.consts import WORKER_PATTERN     # how its folder loader finds workers
    assert all(WORKER_PATTERN.match(p.name) for p in folder.iterdir())
    names = {e.get("name", "") for e in orjson.loads((folder / "rank_0.pt.trace.json").read_bytes())
             ["traceEvents"]}
    # DDP's buffer broadcast is named a broadcast (costed as the all-gather of its bytes)
    assert any(n.startswith("ncclKernel_BROADCAST ") for n in names), sorted(names)[:20]
    views = rank_views(both)
    _check_hta(_hta(folder), views)
    for view in views:
        assert device_breakdown(view).communication > 0          # DDP's all-reduces
        run = _tb(folder / f"rank_{view.meta['rank']}.pt.trace.json")
        _check_tb(run, view)
        known, other = _tb_collectives(view)
        assert known.size == len(collective_kinds(view)) and not other
        stats, _ = _check_tb_communication(run, view, known)
        assert {"nccl:all_reduce", "nccl:broadcast"} <= set(stats)     # DDP's gradients, its buffers
    one = tmp_path / "one.nsprof"
    res = subprocess.run([*CLI, "capture", "-s", str(one), "--instance", "trn1.32xlarge", "--ranks", "1",
                          *job], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    assert [e["rank"] for e in fileformat.load(one).meta["ranks"]] == [1]
    res = subprocess.run([*CLI, "capture", "-s", str(one), "--ranks", "x", *job],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--ranks" in res.stderr
