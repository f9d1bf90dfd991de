"""Groups held at their latest reading: a stream whose groups have different periods carries only
the due groups in each report (AWS's neuron-monitor user guide); neuron-top must not blink to N/A
in between, nor hold a reading past a couple of its periods, nor lend one runtime's to another."""
from __future__ import annotations

import copy
import os
import pathlib
import subprocess
import sys

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.held import RUNTIME_GROUP_ATTRS, SYSTEM_GROUP_ATTRS, GroupHold
from monitor.report import Report
from monitor.sources import ListSource
from tests.test_tui_support import FIXED_NOW, run_async, settle
from tui.app import NeuronTopApp
from tui.view import core_grid, runtimes_for

ROOT = pathlib.Path(__file__).resolve().parent.parent
AWS = orjson.loads((ROOT / "tests" / "fixtures" / "neuron_monitor_aws_example.json").read_bytes())
RUNTIME_KEYS = ("neuroncore_counters", "execution_stats", "memory_used",
                "neuron_runtime_vcpu_usage")
SYSTEM_KEYS = ("neuron_hw_counters", "vcpu_usage", "memory_info")


def doc(runtime_groups=RUNTIME_KEYS, system_groups=SYSTEM_KEYS, period=1.0, util=40.0,
        pid=None, error="") -> dict:
    """The AWS example with only the given groups, each with ``period``."""
    d = copy.deepcopy(AWS)
    d.pop("neuron_k8s_info", None)
    runtime = d["neuron_runtime_data"][0]
    if pid is not None:
        runtime["pid"] = pid
    runtime["error"] = error
    report = _keep(runtime["report"], runtime_groups, period)
    for core in report.get("neuroncore_counters", {}).get("neuroncores_in_use", {}).values():
        core["neuroncore_utilization"] = util
    _keep(d["system_data"], system_groups, period)
    return d


def _keep(groups: dict, keys, period: float) -> dict:
    """Only the ``keys`` groups, each with ``period``."""
    for key in list(groups):
        if key in keys:
            groups[key]["period"] = period
        else:
            del groups[key]
    return groups


def held(*docs: dict, hold: GroupHold | None = None) -> list[Report]:
    hold = hold or GroupHold()
    return [hold.apply(Report.from_dict(d)) for d in docs]


def test_a_group_not_due_shows_the_same_runtimes_last_reading():
    first, second = held(doc(util=40.0), doc(runtime_groups=("execution_stats",),
                                             system_groups=("vcpu_usage",)))
    runtime = second.runtimes[0]
    assert runtime.neuroncore_counters == first.runtimes[0].neuroncore_counters
    assert runtime.memory_used == first.runtimes[0].memory_used
    assert second.system.memory == first.system.memory
    assert second.system.hw_counters == first.system.hw_counters


def test_a_fresh_reading_replaces_the_held_one():
    _, _, third = held(doc(util=40.0), doc(runtime_groups=()), doc(util=75.0))
    cores = third.runtimes[0].neuroncore_counters.cores
    assert {c.utilization for c in cores.values()} == {0.75}


def test_a_reading_is_held_for_two_of_its_periods_then_is_absent_again():
    # memory_used every 5 s; the reports every 1 s carry only the core counters
    hold = GroupHold()
    first = hold.apply(Report.from_dict(doc(period=5.0)))
    assert first.runtimes[0].memory_used is not None
    ticks = [hold.apply(Report.from_dict(doc(runtime_groups=("neuroncore_counters",),
                                             system_groups=(), period=1.0)))
             for _ in range(12)]
    kept = [t.runtimes[0].memory_used is not None for t in ticks]
    assert kept == [True] * 10 + [False] * 2    # 10 s = 2 x its 5 s period
    assert all(t.runtimes[0].neuroncore_counters is not None for t in ticks)


def test_a_group_that_arrives_failed_replaces_the_held_reading():
    d = doc(runtime_groups=("neuroncore_counters",))
    d["neuron_runtime_data"][0]["report"]["neuroncore_counters"] = {
        "period": 1.0, "error": "counters unavailable"}
    _, failed, after = held(doc(), d, doc(runtime_groups=("execution_stats",)))
    assert failed.runtimes[0].neuroncore_counters.error == "counters unavailable"
    assert after.runtimes[0].neuroncore_counters.error == "counters unavailable"


def test_a_runtime_never_borrows_another_runtimes_readings():
    _, other = held(doc(pid=100), doc(pid=200, runtime_groups=("execution_stats",)))
    assert other.runtimes[0].neuroncore_counters is None
    assert other.runtimes[0].memory_used is None


def test_a_runtime_that_left_the_stream_comes_back_without_its_old_readings():
    gone = doc()
    gone["neuron_runtime_data"] = []
    _, _, back = held(doc(), gone, doc(runtime_groups=("execution_stats",)))
    assert back.runtimes[0].neuroncore_counters is None


def test_a_failed_runtime_shows_its_failure_not_its_old_readings():
    _, failed = held(doc(), doc(runtime_groups=(), error="runtime not responding"))
    assert failed.runtimes[0].error and failed.runtimes[0].neuroncore_counters is None


def test_a_group_never_seen_stays_absent():
    (only,) = held(doc(runtime_groups=("neuroncore_counters",), system_groups=()))
    assert only.runtimes[0].memory_used is None and only.system.memory is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sets(st.sampled_from(RUNTIME_KEYS)),
                          st.sets(st.sampled_from(SYSTEM_KEYS)),
                          st.sampled_from([1.0, 2.0, 5.0])), min_size=1, max_size=12))
def test_held_groups_are_only_ever_readings_the_stream_gave(steps):
    """Whatever the mix of groups: a report that carries everything is returned as it is, and
    every group shown is one the stream carried (never made up), at most 2 periods old."""
    hold = GroupHold()
    seen: dict[str, list] = {}
    for runtime_groups, system_groups, period in steps:
        report = Report.from_dict(doc(runtime_groups, system_groups, period))
        out = hold.apply(report)
        if set(runtime_groups) == set(RUNTIME_KEYS) and set(system_groups) == set(SYSTEM_KEYS):
            assert out is report
        for attr in RUNTIME_GROUP_ATTRS:
            group = getattr(report.runtimes[0], attr)
            if group is not None:
                seen.setdefault(attr, []).append(group)
            shown = getattr(out.runtimes[0], attr)
            assert shown is None or any(shown is g for g in seen.get(attr, ()))
        for attr in SYSTEM_GROUP_ATTRS:
            group = getattr(report.system, attr)
            if group is not None:
                seen.setdefault("system." + attr, []).append(group)
            shown = getattr(out.system, attr)
            assert shown is None or any(shown is g for g in seen.get("system." + attr, ()))


@run_async
async def test_neuron_top_keeps_showing_the_cores_between_their_reports():
    """Core counters every 5 s, host vCPU every second: the grid keeps the cores' last
    utilization in the four reports in between, as AWS's exporter keeps their series."""
    reports = [Report.from_dict(doc(period=5.0, util=40.0))]
    reports += [Report.from_dict(doc(runtime_groups=(), system_groups=("vcpu_usage",)))
                for _ in range(4)]
    app = NeuronTopApp(ListSource(reports, label="mixed periods", hold_open=True),
                       clock=lambda: FIXED_NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, len(reports))
        grid = core_grid(app.report, runtimes_for(app.report, app.tab))
        assert grid.in_use.any() and set(grid.utilization[grid.in_use]) == {0.40}
        assert app.report.runtimes[0].memory_used is not None


def test_dash_1_of_a_mixed_period_file_shows_every_groups_latest_reading(tmp_path):
    path = tmp_path / "mixed.jsonl"
    lines = [doc(period=5.0, util=40.0)] + [doc(runtime_groups=("execution_stats",),
                                                system_groups=("vcpu_usage",))] * 3
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in lines))
    env = {**os.environ, "COLUMNS": "80", "LINES": "24"}
    out = subprocess.run([sys.executable, "-m", "tui.cli", "-1", "--input", str(path)],
                         capture_output=True, cwd=ROOT, timeout=60, env=env)
    text = out.stdout.decode()
    assert out.returncode == 0, out.stderr
    assert "[ 40.00%]" in text
    assert "stream lacks" not in text
