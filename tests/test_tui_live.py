"""neuron-top on the instance `neuron-sim start` left running: its first report covers a real
period, as neuron-monitor's first does (collected at once it covered ~2 ms: every core 0 %)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

from collector_sim import start_instance, stop_instance
from monitor.live import CollectorSource
from monitor.report import Report

ROOT = pathlib.Path(__file__).resolve().parent.parent
MATMUL = "matmul:m=1024,k=1024,n=1024"


@pytest.fixture(scope="module")
def xdg(tmp_path_factory):
    """A running instance in this user's default runtime directory (under XDG_RUNTIME_DIR), with
    one busy runtime on cores 0-3."""
    runtime_dir = tmp_path_factory.mktemp("xdg")
    root = runtime_dir / "neuronscope"
    root.mkdir(mode=0o700)
    start_instance(root, f"train={MATMUL}@0-3")
    yield runtime_dir
    stop_instance(root)


def top(runtime_dir: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True,
                          cwd=ROOT, timeout=60, env=env)


def test_json_of_the_local_instance_covers_one_period_not_the_baseline_instant(xdg):
    out = top(xdg, "--json")
    assert out.returncode == 0, out.stderr
    report = Report.from_json(out.stdout)
    (runtime,) = report.runtimes
    counters = runtime.neuroncore_counters
    assert counters.period == pytest.approx(1.0, abs=0.25)   # was 0.0
    assert sorted(counters.cores) == [0, 1, 2, 3]
    assert all(core.utilization > 0 for core in counters.cores.values())
    assert sum(runtime.execution_stats.statuses.values()) > 0
    assert report.system.vcpu.period == pytest.approx(1.0, abs=0.25)   # was ~0.002


def test_dash_1_of_the_local_instance_shows_the_cores_busy(xdg):
    out = top(xdg, "-1")
    assert out.returncode == 0, out.stderr
    nd0 = next(line for line in out.stdout.decode().splitlines() if line.startswith("ND0"))
    assert "[  0.00%]" not in nd0, nd0


def test_the_first_collected_report_comes_one_period_after_start_and_covers_it(xdg):
    """What the live screen draws first: a period's figures, not a 0 % frame."""
    source = CollectorSource(xdg / "neuronscope", period_s=0.5)
    reports = source.reports()
    started = time.monotonic()
    try:
        first = next(reports)
        waited = time.monotonic() - started
    finally:
        reports.close()
        source.close()
    counters = first.runtimes[0].neuroncore_counters
    assert waited >= 0.45
    assert counters.period == pytest.approx(0.5, abs=0.2)
    assert all(core.utilization > 0 for core in counters.cores.values())


def test_a_one_shot_of_the_demo_waits_for_its_jobs_to_load_their_models(tmp_path):
    """`neuron-top --demo --json` reported the training job's 48 cores at 0 %: its first second
    was the model load. It now waits for the load and reports the second after it."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "tui.cli", "--demo", "--json"], capture_output=True,
                         cwd=ROOT, timeout=90, env=env)
    assert out.returncode == 0, out.stderr
    report = Report.from_json(out.stdout)
    assert {r.tag for r in report.runtimes} == {"llama-train", "llama-serve"}
    # the server may sit between requests for that second; the trainer runs its first steps
    train = next(r for r in report.runtimes if r.tag == "llama-train")
    cores = train.neuroncore_counters.cores
    assert len(cores) == 48 and all(core.utilization > 0 for core in cores.values())
    assert sum(train.execution_stats.statuses.values()) > 0
    assert list(tmp_path.iterdir()) == []      # the demo's directory went with it


def test_root_names_an_instance_started_in_its_own_directory(xdg, tmp_path):
    """`neuron-sim start --root DIR` runs where neuron-top looked only by default; --root finds
    it, and a directory with no instance is said, not replaced by the demo."""
    out = top(tmp_path, "--root", str(xdg / "neuronscope"), "--json")   # another default dir
    assert out.returncode == 0, out.stderr
    (runtime,) = Report.from_json(out.stdout).runtimes
    assert runtime.tag == "train"
    empty = tmp_path / "nothing"
    out = top(tmp_path, "--root", str(empty), "-1")
    assert out.returncode == 2 and b"no simulated instance runs in" in out.stderr
    assert not empty.exists()                    # looking did not make it
