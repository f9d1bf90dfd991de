"""`neuron-profile` never destroys a profile it did not write, and says what it did: `--ranks`
applies only to the profile the capture wrote, `view` refuses to write a trace over the profile
it reads, a built-in run's placement is checked as `neuron-sim estimate` checks it (and every
flag taken changes the capture), and the closing lines count steps and name what is missing."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from device_model.cli import main as sim_main
from profiler.cli import main
from profiler.model import fileformat

ROOT = Path(__file__).resolve().parent.parent
MLP = "mlp:tokens=64,hidden=64,layers=2"


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler.cli", *argv], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    """A profile of two ranks (pipeline stages), three steps each."""
    path = tmp_path_factory.mktemp("safety") / "two.nsprof"
    assert main(["capture", "-w", MLP, "--pp", "2", "--num-exec", "3", "--progress", "off",
                 "-s", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("safety") / "one.nsprof"
    assert main(["capture", "-w", "matmul:m=128,k=128,n=128", "--progress", "off",
                 "-s", str(path)]) == 0
    return path


# --- --ranks of a script capture ----------------------------------------------------------------

def test_a_script_capture_that_wrote_nothing_leaves_the_old_profile_as_it_was(two_ranks,
                                                                               tmp_path):
    """The script never started (a syntax error): the two-rank profile already at -s was cut
    down to its rank 0 after `no profile written`."""
    old = tmp_path / "old.nsprof"
    old.write_bytes(two_ranks.read_bytes())
    script = tmp_path / "syn.py"
    script.write_text("def f(:\n")
    res = run("capture", "-s", str(old), "--ranks", "0", "--progress", "off", "--",
              sys.executable, str(script))
    assert res.returncode != 0
    assert "no profile written" in res.stderr and "wrote" not in res.stderr
    assert old.read_bytes() == two_ranks.read_bytes()


# --- view: the trace is never written over the profile ------------------------------------------

@pytest.mark.parametrize("ranks, name, argv", [
    ("one_rank", "solo.json", ["--output-format", "chrome"]),     # <stem>.json is the profile
    ("one_rank", "solo.pftrace", ["--output-format", "perfetto"]),
    ("two_ranks", "p.pftrace", ["--output-format", "perfetto"]),
    ("one_rank", "p.nsprof", ["--output-format", "json", "--output-file", "SELF"]),
    ("one_rank", "p.nsprof", ["--output-format", "chrome", "--output-file", "SELF"]),
    ("two_ranks", "p.nsprof", ["--output-format", "chrome", "--output-file", "SELF"]),
    ("two_ranks", "p.nsprof", ["--output-format", "perfetto", "--output-file", "LINK"]),
])
def test_view_refuses_to_write_its_output_over_the_profile_it_reads(request, tmp_path, ranks,
                                                                    name, argv):
    original = request.getfixturevalue(ranks).read_bytes()
    profile = tmp_path / name
    profile.write_bytes(original)
    link = tmp_path / "link.pftrace"
    link.symlink_to(profile)
    argv = [{"SELF": str(profile), "LINK": str(link)}.get(a, a) for a in argv]
    res = run("view", "-s", str(profile), *argv)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "is the profile being read" in res.stderr
    assert "Traceback" not in res.stderr
    assert profile.read_bytes() == original


def test_view_by_a_link_refuses_the_trace_that_would_replace_its_target(one_rank, tmp_path):
    profile = tmp_path / "p.json"
    profile.write_bytes(one_rank.read_bytes())
    (tmp_path / "q.json").symlink_to(profile)
    res = run("view", "-s", str(tmp_path / "q.json"), "--output-format", "chrome")
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert profile.read_bytes() == one_rank.read_bytes()


# --- built-in runs: the estimate's placement checks, and flags that change the capture ----------

def _error(fn, argv: list[str], capsys) -> tuple[int, str]:
    rc = fn(argv)
    return rc, capsys.readouterr().err.split("error: ", 1)[-1]


@pytest.mark.parametrize("spec, flags", [
    ("matmul:m=128,k=128,n=128", ["--tp", "2"]),
    ("matmul:m=128,k=128,n=128", ["--nodes", "2"]),
    ("matmul:m=128,k=128,n=128", ["--cores", "1000"]),
    ("allreduce:bytes=1M", ["--cores", "2"]),
    ("allreduce:bytes=1M,ranks=4", ["--nodes", "3"]),
])
def test_capture_refuses_a_microbenchmarks_placement_as_the_estimate_does(spec, flags, tmp_path,
                                                                          capsys):
    out = tmp_path / "x.nsprof"
    rc, said = _error(main, ["capture", "-w", spec, *flags, "-s", str(out)], capsys)
    sim_rc, sim_said = _error(sim_main, ["estimate", "-w", spec, *flags], capsys)
    assert rc == 2 and sim_rc == 2
    assert said == sim_said and said.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("flags, needle", [
    (["--dp", "1000"], "--cores 1000 exceeds the 64 logical cores"),
    (["--cores", "3", "--dp", "4"], "--dp 4 does not divide the 3 ranks"),
    (["--cores", "1000"], "--cores 1000 exceeds the 64 logical cores"),
    (["--dp", "3", "--nodes", "2"], "does not split evenly over --nodes 2"),
])
def test_capture_refuses_an_mlp_placement_the_estimate_refuses(flags, needle, tmp_path, capsys):
    """The captured MLP step takes options of its own (tokens=): the estimate's mlp with the
    same flags is refused too."""
    out = tmp_path / "x.nsprof"
    rc, said = _error(main, ["capture", "-w", "mlp:tokens=256,hidden=1024,layers=1", *flags,
                             "-s", str(out)], capsys)
    sim_rc, _ = _error(sim_main, ["estimate", "-w", "mlp", *flags], capsys)
    assert rc == 2 and sim_rc == 2
    assert needle in said and said.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("spec, flags, needle", [
    ("mlp:tokens=256,hidden=256,layers=1", ["--tp", "1000"], "exceeds the 64 logical cores"),
    ("mlp:tokens=256,hidden=1024,layers=2", ["--tp", "4", "--nodes", "3"], "split evenly"),
    # the capture records one core: several would change nothing in it
    ("matmul:m=128,k=128,n=128", ["--cores", "2"], "records one logical core"),
])
def test_capture_refuses_a_placement_it_cannot_hold_in_one_line(spec, flags, needle, tmp_path,
                                                                capsys):
    out = tmp_path / "x.nsprof"
    rc, said = _error(main, ["capture", "-w", spec, *flags, "-s", str(out)], capsys)
    assert rc == 2 and needle in said and said.count("\n") == 1
    assert not out.exists()


def _capture(tmp_path: Path, spec: str, *flags: str):
    out = tmp_path / f"{len(list(tmp_path.iterdir()))}.nsprof"
    assert main(["capture", "-w", spec, *flags, "--progress", "off", "-s", str(out)]) == 0
    return fileformat.load(out)


def _outcome(profile) -> tuple[int, int, int]:
    """The job's ranks, its operators and its step's end (ns): what a placement changes."""
    from profiler.export.chrome import world_size
    return world_size(profile), profile.rows("ops"), round(profile.table("steps")["end"][-1] * 1e9)


@pytest.mark.parametrize("spec, flags, without", [
    ("mlp:tokens=256,hidden=1024,layers=1", ["--cores", "2"], []),
    ("mlp:tokens=256,hidden=1024,layers=1", ["--nodes", "2"], []),
    ("mlp:tokens=256,hidden=1024,layers=1", ["--dp", "8", "--nodes", "8"], ["--dp", "8"]),
    ("mlp:tokens=256,hidden=1024,layers=2", ["--pp", "2", "--nodes", "2"], ["--pp", "2"]),
    ("allreduce:bytes=1M,ranks=4", ["--nodes", "2"], []),
])
def test_every_placement_flag_a_capture_takes_changes_it(spec, flags, without, tmp_path):
    """`--cores 2` and `--nodes 8` gave the very capture of the flags without them."""
    taken = _outcome(_capture(tmp_path, spec, *flags))
    assert taken != _outcome(_capture(tmp_path, spec, *without))


def test_the_trace_of_a_capture_names_the_jobs_world(tmp_path):
    """`--cores 2` is a job of two data-parallel ranks: the trace's world says so."""
    from profiler.export.chrome import world_size
    profile = _capture(tmp_path, "mlp:tokens=256,hidden=1024,layers=1", "--cores", "2")
    assert profile.meta["placement"] == {"tp": 1, "pp": 1, "dp": 2}
    assert world_size(profile) == 2


# --- what the closing lines say -----------------------------------------------------------------

def test_a_capture_of_several_ranks_counts_steps_per_rank(tmp_path, capsys):
    out = tmp_path / "x.nsprof"
    assert main(["capture", "-w", MLP, "--pp", "2", "--num-exec", "3", "--progress", "off",
                 "-s", str(out)]) == 0
    assert f"wrote {out} (2 ranks, 3 steps, " in capsys.readouterr().err


def test_the_top_operators_heading_of_a_step_window_names_the_steps_profiled():
    """`capture --steps 3-4` holds steps 3 and 4: not 'steps 3-4 of 2'."""
    from device_model import instance
    from profiler.analysis.render import summary_text
    from profiler.capture.builtin import capture_workload
    profile = capture_workload("matmul:m=128,k=128,n=128", instance("trn2.48xlarge"), num_exec=2)
    later = {name: ({**t, "step": t["step"] + 2} if "step" in t else t)
             for name, t in profile.tables.items()}
    text = summary_text(replace(profile, tables=later))
    assert "summarised steps 3-4 of profiled steps 3-4)" in text
    assert "summarised steps 1-2 of 2)" in summary_text(profile)


def test_a_missing_interpreter_is_named_as_the_program_not_the_script(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("")
    rc, said = _error(main, ["capture", "-s", str(tmp_path / "x.nsprof"), "--",
                             "nosuchpython", str(script)], capsys)
    assert rc == 2 and said.startswith("nosuchpython: no such program on the PATH")
    assert "script not found" not in said
    rc, said = _error(main, ["capture", "-s", str(tmp_path / "x.nsprof"), "--",
                             str(tmp_path / "nope.py")], capsys)
    assert rc == 2 and said == f"script not found: {tmp_path / 'nope.py'}\n"
    assert not os.path.exists(tmp_path / "x.nsprof")
