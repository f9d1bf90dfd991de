"""Capture of torchrun jobs: the shipped DDP example (gloo, 2 workers) run for real under
`neuron-profile capture -- torchrun ...`, one profile of both ranks with their phases and
all-reduces, per-rank summaries and traces; a failing worker, Ctrl-C, a rank that leaves nothing,
the workers' part files, and bad torchrun command lines."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.run")

from device_model import instance  # noqa: E402
from device_model.errors import SpecError  # noqa: E402
from profiler.model import fileformat  # noqa: E402
from profiler.model.profile import PHASES  # noqa: E402
from profiler.analysis.ranks import rank_views  # noqa: E402
from profiler.capture.rank_part import RankPart, load_part, part_path, save_part  # noqa: E402
from profiler.capture.torchrun_launch import is_torchrun, parse_torchrun, rank_placement  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_ddp.py"
CLI = [sys.executable, "-m", "profiler.cli"]
# --standalone: a free rendezvous port, so captures running side by side do not collide
# torchrun of this environment (the one its shebang names runs the workers)
TORCHRUN = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "2"]


def capture_cmd(out: Path, *script_args: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [*CLI, "capture", "-s", str(out), *extra, "--", *TORCHRUN, str(EXAMPLE), *script_args]


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "ddp.nsprof"
    res = run(capture_cmd(out, "--steps", "3", extra=("--instance", "trn1.32xlarge")))
    return res, out


def test_every_worker_trains_and_its_loss_falls(ddp):
    res, _ = ddp
    assert res.returncode == 0, res.stderr
    for rank in (0, 1):
        losses = [float(line.split()[-1]) for line in res.stdout.splitlines()
                  if line.startswith(f"rank {rank} step ")]
        assert len(losses) == 3 and losses[-1] < losses[0], res.stdout
    assert "2 ranks" in res.stderr.splitlines()[-1]


def test_one_profile_of_both_ranks_with_phases_and_allreduces(ddp):
    _, out = ddp
    prof = fileformat.load(out)
    assert prof.meta["world_size"] == 2 and prof.meta["source"] == "pytorch"
    entries = prof.meta["ranks"]
    assert [e["rank"] for e in entries] == [0, 1]
    inst = instance("trn1.32xlarge")
    assert [(e["core"], e["node"]) for e in entries] == [tuple(rank_placement(inst, r).values()) for r in (0, 1)]
    assert len({e["pid"] for e in entries}) == 2            # one worker process each
    views = rank_views(prof)
    assert [v.meta["rank"] for v in views] == [0, 1]
    for view in views:
        assert view.table("steps")["step"].tolist() == [1, 2, 3]
        ops = view.table("ops")
        assert {PHASES[p] for p in ops["phase"].tolist()} >= {"forward", "backward", "optimizer"}
        names = np.array(view.text(ops["name_s"]))
        allreduce = names == "c10d::allreduce_"
        assert allreduce.any()
        assert {PHASES[p] for p in ops["phase"][allreduce].tolist()} == {"backward"}   # DDP's bucket
        coll = view.table("collectives")
        kinds = np.array(view.text(coll["kind_s"]))
        assert (kinds == "all_reduce").sum() == allreduce.sum()
        assert set(coll["ranks"].tolist()) == {2}
        assert set(view.text(view.table("host")["cat_s"])) >= {"cpu_op", "user_annotation"}


def test_ranks_share_one_host_clock(ddp):
    _, out = ddp
    views = rank_views(fileformat.load(out))
    firsts = [float(v.table("host")["start"].min()) for v in views]
    assert min(firsts) == 0.0 and max(firsts) > 0.0          # the later worker starts later
    # every step ends with an all-reduce both ranks wait for: their steps overlap in time
    steps = [v.table("steps") for v in views]
    last0, last1 = ((float(s["host_start"][-1]), float(s["host_end"][-1])) for s in steps)
    assert last0[0] < last1[1] and last1[0] < last0[1]


def test_collectives_end_together_on_every_rank(ddp):
    """Each worker's steps were simulated on its own clock; a collective cannot end before its
    last rank joins: the k-th all-reduce of a step ends at one time on both ranks, the rank
    that arrived first spans the wait, and no operator starts before its host launched it."""
    _, out = ddp
    prof = fileformat.load(out)
    views = rank_views(prof)
    ends, starts = [], []
    for view in views:
        coll, ops = view.table("collectives"), view.table("ops")
        step = ops["step"][coll["op"]]
        order = np.lexsort((coll["start"], step))
        ends.append(coll["end"][order])
        starts.append(coll["start"][order])
        host = view.table("host")
        launched = ops["host"] >= 0
        assert np.all(ops["start"][launched] >= host["end"][ops["host"][launched]] - 1e-12)
        ins = view.table("instructions")
        assert np.all(ins["start"] >= ops["start"][ins["op"]] - 1e-12)
        assert np.all(ins["end"] <= ops["end"][ins["op"]] + 1e-12)
    assert np.allclose(ends[0], ends[1], rtol=0, atol=1e-9)
    waits = np.abs(starts[0] - starts[1])
    assert waits.max() > 0 and prof.meta["collective_wait_s"] == pytest.approx(waits.sum())
    # steps end together too: each step's last all-reduce ends it on both ranks
    step_ends = [v.table("steps")["end"] for v in views]
    assert np.allclose(step_ends[0], step_ends[1], rtol=0, atol=1e-6)


def test_summaries_per_rank(ddp):
    _, out = ddp
    res = run([*CLI, "view", "-s", str(out), "--output-format", "summary-json"])
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)["summary"]
    assert [s["rank"] for s in summary] == [0, 1]
    assert all(s["cc_op_time"] > 0 for s in summary)
    text = run([*CLI, "view", "-s", str(out)]).stdout
    assert text.count("\nrank ") + text.startswith("rank ") == 2


def test_chrome_export_has_a_neuroncore_process_per_rank(ddp, tmp_path):
    _, out = ddp
    trace = tmp_path / "t.json"
    res = run([*CLI, "view", "-s", str(out), "--output-format", "chrome", "--output-file", str(trace)])
    assert res.returncode == 0, res.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    cores = sorted(pid for pid, name in names.items() if name.startswith("NeuronCore"))
    assert cores == [0, 1]
    assert sum(name.startswith("Host") for name in names.values()) == 2


def test_failing_worker_gives_its_exit_code_and_a_profile(tmp_path):
    out = tmp_path / "f.nsprof"
    res = run(capture_cmd(out, "--steps", "3", "--fail-at", "3", "--fail-rank", "1", extra=("--recorder", "python")))
    assert res.returncode == 1                      # the script's exception, as torchrun reports it
    assert "rank 1 failing at step 3" in res.stderr
    prof = fileformat.load(out)
    assert prof.meta["recorder"] == "python"
    entries = {e["rank"]: e for e in prof.meta["ranks"]}
    assert sorted(entries) == [0, 1] and entries[1]["exit_code"] == 1
    views = {v.meta["rank"]: v for v in rank_views(prof)}
    assert set(views[1].table("steps")["step"].tolist()) == {1, 2}
    assert {1, 2} <= set(views[0].table("steps")["step"].tolist())


def test_ctrl_c_stops_the_workers_and_leaves_a_profile(tmp_path):
    out = tmp_path / "c.nsprof"
    # a job that cannot end on its own before the signal, however slowly this test gets to send it
    proc = subprocess.Popen(capture_cmd(out, "--steps", "100000000"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    seen = set()
    for line in proc.stdout:                        # wait until both workers are training
        if line.startswith(("rank 0 step 3 ", "rank 1 step 3 ")):
            seen.add(line.split()[1])
            if len(seen) == 2:
                break
    os.killpg(proc.pid, signal.SIGINT)             # like Ctrl-C at a terminal
    _, err = proc.communicate(timeout=120)
    assert seen == {"0", "1"}
    assert proc.returncode == 130, err              # 128 + SIGINT, whatever torchrun's own code
    assert "wrote" in err.splitlines()[-1]
    prof = fileformat.load(out)
    assert [e["exit_code"] for e in prof.meta["ranks"]] == [130, 130]
    assert all(v.rows("steps") >= 3 for v in rank_views(prof))


def _recording(steps: int = 2):
    """A real recording of a few SGD steps, made in this process."""
    from profiler.capture.recorders import start_recorder
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = start_recorder("python")
    try:
        for _ in range(steps):
            loss = model(torch.randn(4, 8)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        recording = rec.stop()
    return recording


def test_part_file_round_trip(tmp_path):
    import threading
    rec = _recording()
    part = RankPart(3, 1, 4, os.getpid(), 0, threading.get_ident(), rec)
    back = load_part(save_part(tmp_path, part))
    assert (back.rank, back.local_rank, back.world_size, back.exit_code) == (3, 1, 4, 0)
    got, want = back.recording.table(), rec.table()
    assert set(got) == set(want) and all(np.array_equal(got[c], want[c]) for c in want)
    assert back.recording.sigs == rec.sigs and back.recording.labels == rec.labels
    assert back.recording.modules == rec.modules and back.recording.boundaries == rec.boundaries
    assert back.recording.spans == [tuple(s) for s in rec.spans]
    assert [p.name for p in tmp_path.iterdir()] == [part_path(tmp_path, 3).name]   # no temporary left
    data = part_path(tmp_path, 3).read_bytes()
    part_path(tmp_path, 3).write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="rank-00003.npz"):
        load_part(part_path(tmp_path, 3))


def test_part_file_keeps_nested_call_details(tmp_path):
    """A convolution's geometry (tuples in a tuple) and a cast's result dtype come back as
    recorded, so the mapping of a worker's part matches an in-process recording's."""
    import threading
    from profiler.capture.recorders import start_recorder
    rec = start_recorder("python")
    try:
        with torch.no_grad():
            torch.nn.functional.conv2d(torch.randn(1, 2, 8, 8), torch.randn(4, 2, 3, 3), padding=1)
            torch.randn(8).to(torch.bfloat16)
    finally:
        recording = rec.stop()
    part = RankPart(0, 0, 1, os.getpid(), 0, threading.get_ident(), recording)
    back = load_part(save_part(tmp_path, part))
    assert back.recording.sigs == recording.sigs
    assert {c.name: c for c in back.recording.sigs}["_to_copy"].out_dtype == "torch.bfloat16"


def test_rank_that_wrote_nothing_is_left_out_with_a_note(tmp_path, capsys):
    import argparse
    import threading
    from profiler.capture.child_process import CaptureFolder
    from profiler.capture.torchrun_launch import _write_profile
    work = CaptureFolder(tmp_path)
    save_part(work.parts, RankPart(0, 0, 2, os.getpid(), 0, threading.get_ident(), _recording()))
    (work.parts / "rank-00001.npz").write_bytes(b"not a part")
    cmd = parse_torchrun([*TORCHRUN, str(EXAMPLE)])
    out = tmp_path / "one.nsprof"
    args = argparse.Namespace(auto_cast="matmult", detail_steps=4, session_file=str(out))
    code = _write_profile(cmd, work, instance("trn2.48xlarge"), args, "torchrun ...", 7, None)
    assert code == 7
    err = capsys.readouterr().err.splitlines()
    assert any("rank-00001.npz" in line and "left out" in line for line in err)
    assert "neuron-profile: rank 1 wrote no recording; left out of the profile" in err
    prof = fileformat.load(out)
    assert [e["rank"] for e in prof.meta["ranks"]] == [0] and prof.meta["world_size"] == 2
    coll = prof.table("collectives")
    assert prof.rows("steps") == 2 and coll["ranks"].size == 0      # no collectives in that script


def test_command_forms():
    assert is_torchrun(["torchrun", "t.py"]) and is_torchrun(["/opt/bin/torchrun", "t.py"])
    assert is_torchrun(["python3", "-m", "torch.distributed.run", "t.py"])
    assert not is_torchrun(["python", "t.py"]) and not is_torchrun(["python", "-m", "torch.distributed.launch"])
    cmd = parse_torchrun(["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "-m",
                          "pkg.train", "--lr", "1", "--", "x"])
    assert (cmd.kind, cmd.target, cmd.args, cmd.options) == ("module", "pkg.train", ("--lr", "1", "--", "x"),
                                                             ("--nproc_per_node=2",))
    assert cmd.local_world == 2 and cmd.single_node
    cmd = parse_torchrun(["torchrun", "--nnodes", "2", "--nproc-per-node", "3", str(EXAMPLE), "--steps", "2"])
    assert (cmd.kind, cmd.args, cmd.local_world, cmd.single_node) == ("path", ("--steps", "2"), 3, False)


@pytest.mark.parametrize("argv, message", [
    (["--nproc-per-node", "abc", "EX"], "nproc_per_node value: abc"),
    (["--nproc-per-node", "0", "EX"], "at least 1"),
    (["--nproc-per-node", "2"], "required: training_script"),
    (["--no-python", "EX"], "--no-python"),
    (["--run-path", "EX"], "--run-path"),
    (["--bogus", "EX"], "unrecognized arguments: --bogus"),
    (["--help"], "nothing to capture"),
    (["--nproc-per-node", "2", "nope.py"], "script not found: nope.py"),
])
def test_bad_torchrun_command_lines(argv, message):
    argv = [str(EXAMPLE) if a == "EX" else a for a in argv]
    with pytest.raises(SpecError, match=message.replace("-", r"\-")):
        parse_torchrun(["torchrun", *argv])


@pytest.mark.parametrize("extra, command", [
    ((), ["torchrun", "--nproc-per-node", "abc", "EX"]),
    (("--dp", "2"), ["torchrun", "EX"]),
    ((), ["python", "-m", "torch.distributed.run", "--help"]),
])
def test_bad_command_line_is_one_line_and_exit_2(tmp_path, extra, command):
    command = [str(EXAMPLE) if a == "EX" else a for a in command]
    res = run([*CLI, "capture", "-s", str(tmp_path / "x.nsprof"), *extra, "--", *command])
    assert res.returncode == 2
    assert res.stdout == "" and res.stderr.count("\n") == 1 and res.stderr.startswith("neuron-profile: error:")
    assert not (tmp_path / "x.nsprof").exists()


API_DDP = """
import os, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import profiler
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(64, 64))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with profiler.profile(instance="trn1.32xlarge", schedule=profiler.schedule(wait=1, warmup=0, active=2),
                      on_trace_ready=profiler.save_to(os.environ["OUT"] + "/w{n}_r{rank}.nsprof")) as prof:
    for _ in range(3):
        model(torch.randn(8, 64)).sum().backward(); opt.step(); opt.zero_grad(); prof.step()
dist.destroy_process_group()
"""


def test_the_python_api_under_torchrun_costs_the_collectives_of_each_rank(tmp_path):
    """`profiler.profile` in DDP workers: every c10d call had been dropped (no process group
    given to the simulation), and both ranks said rank 0 and wrote one file."""
    script = tmp_path / "api_ddp.py"
    script.write_text(API_DDP)
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    res = subprocess.run([*TORCHRUN, str(script)], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    for rank in (0, 1):
        profile = fileformat.load(tmp_path / f"w1_r{rank}.nsprof")
        assert profile.meta["rank"] == rank and profile.meta["world_size"] == 2
        assert profile.rows("collectives") > 0
