"""Pure view functions of neuron-top: formatting, braille, grid, tree, processes, faults, history."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from monitor.report import Report
from tests.test_tui_support import AWS_EXAMPLE, demo_reports
from tui.braille import bar, braille_rows
from tui.faults import report_faults
from tui.fmt import core_ranges, human_bytes, human_rate, percent, tflops
from tui.history import History
from tui.memtree import all_branch_keys, build_tree, visible_rows
from tui.procs import SORT_KEYS, process_rows
from tui.view import app_tabs, core_grid, core_layout, memory_summary, runtimes_for, vcpu_usage


def aws() -> Report:
    return Report.from_json(AWS_EXAMPLE.read_bytes())


def test_human_units_match_neuron_top():
    assert human_bytes(17.5 * 2**30) == "17.5GB"
    assert human_bytes(256 * 1024) == "256.0KB"
    assert human_bytes(512) == "512B"
    assert human_bytes(None) == "N/A"
    assert percent(0.5681) == "56.81%"
    assert tflops(1.234567891011e12) == "1.23TF"
    assert human_rate(1.5e12) == "1.50TB/s"


@given(st.lists(st.integers(0, 200), max_size=40))
def test_core_ranges_round_trip(cores):
    text = core_ranges(cores)
    expanded = set()
    if cores:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            expanded |= set(range(int(lo), int(hi or lo) + 1))
    assert expanded == set(cores)


@given(st.lists(st.floats(0, 1), max_size=300), st.integers(1, 80), st.integers(1, 4))
def test_braille_rows_shape_and_alphabet(values, width, height):
    rows = braille_rows(np.array(values), width, height)
    assert len(rows) == height
    assert all(len(r) == width for r in rows)
    assert all(0x2800 <= ord(c) <= 0x28FF for r in rows for c in r)


def test_braille_full_and_empty_columns():
    assert braille_rows(np.ones(4), 2, 1) == ["⣿⣿"]
    assert braille_rows(np.zeros(4), 2, 1) == ["⠀⠀"]
    assert braille_rows(np.array([]), 3, 2) == ["⠀⠀⠀", "⠀⠀⠀"]


@given(st.floats(-1, 2), st.integers(1, 60))
def test_bar_has_exact_width_and_grows(ratio, width):
    text = bar(ratio, width)
    assert len(text) == width
    assert bar(1.0, width) == "█" * width


def test_grid_of_the_aws_example():
    report = aws()
    assert core_layout(report) == (16, 4)
    grid = core_grid(report, report.runtimes)
    assert grid.core_version == "v3d"
    assert grid.utilization.shape == (64,)
    assert abs(grid.utilization[0] - 0.4201) < 1e-9
    assert grid.in_use.sum() == 1
    assert abs(grid.average - 0.4201 / 64) < 1e-9


def test_tabs_filter_runtimes():
    report = demo_reports(1)[0]
    tabs = app_tabs(report)
    assert tabs[0] == "all" and len(tabs) == 5
    only = runtimes_for(report, "bert-large-infer")
    grid = core_grid(report, only)
    assert set(np.flatnonzero(grid.in_use)) == set(range(32, 48))


def test_vcpu_folds_like_the_aws_exporter():
    usage = vcpu_usage(aws(), aws().runtimes)
    assert abs(usage.system_user - 0.3277) < 1e-9
    assert abs(usage.system_system - 0.2287) < 1e-9
    assert abs(usage.runtime_user - 0.4201) < 1e-9


def test_memory_summary_sums_categories():
    summary = memory_summary(aws().runtimes)
    assert summary.host_total == 6997643264
    assert summary.device["constants"] == 193986816
    assert summary.host["dma_buffers"] == 1048576


def test_a_memory_group_that_stopped_arriving_is_not_said_never_to_have_come():
    """A stream whose memory_used came every 5 s and then stopped: "no memory_used group in
    this stream" said it never had one."""
    from dataclasses import replace
    report = aws()
    without = [replace(r, memory_used=None) for r in report.runtimes]
    assert memory_summary(without).missing == "no memory_used group in the recent reports"
    assert memory_summary([]).missing == "no runtime is running"


def test_tree_expands_and_collapses():
    report = aws()
    roots = build_tree(report.runtimes, 4)
    assert [r.label for r in roots] == ["ND 0", "ND 12"]
    collapsed = visible_rows(roots, set())
    assert [r.node.label for r in collapsed] == ["ND 0", "ND 12"]
    everything = visible_rows(roots, all_branch_keys(roots))
    labels = [r.node.label for r in everything]
    assert "neff" in labels and "Model Code" in labels
    model = next(r for r in everything if r.node.label == "neff")
    assert model.node.model_id == 10005 and model.depth == 2


@given(st.sampled_from(SORT_KEYS), st.booleans())
def test_process_rows_sorted(key, reverse):
    rows = process_rows(demo_reports(1)[0], key, reverse)
    values = [getattr(r, key) for r in rows if getattr(r, key) is not None]
    assert values == sorted(values, reverse=reverse)


def test_process_filter():
    report = demo_reports(1)[0]
    assert [r.tag for r in process_rows(report, query="BERT")] == ["bert-large-infer"]
    assert process_rows(report, query="nothing-matches") == []


def test_faults_from_demo_stream():
    reports = demo_reports(20)
    assert report_faults(reports[0]) == ()
    texts = [f.text for f in report_faults(reports[13])]
    assert any("60313: 3 execution errors (numerical)" in t for t in texts)
    assert any("ND14: 1 corrected ECC" in f.text for f in report_faults(reports[17]))
    gone = report_faults(reports[0], [(4242, "old-job")])
    assert gone[-1].text == "old-job (pid 4242) stopped reporting"
    # two runtimes whose pid the source does not know (AWS's metrics over Prometheus) are two
    unknown = [f.text for f in report_faults(reports[0], [(None, "serve"), (None, "train")])]
    assert unknown == ["serve (pid unknown) stopped reporting", "train (pid unknown) stopped reporting"]


def test_history_keeps_order_and_bounds():
    history = History(length=4)
    reports = demo_reports(6)
    for report in reports:
        history.push(report)
    series = history.core_series(0)
    assert series.shape == (4,)
    expected = [r.runtimes[0].neuroncore_counters.cores[0].utilization for r in reports[-4:]]
    assert np.allclose(series, expected)
    assert history.engine_series(0, 0).shape == (4,)
    assert np.isfinite(history.device_series(0, "power")).all()
    assert history.core_series(999).size == 0


def test_corrected_ecc_is_said_beside_uncorrected_on_one_device():
    from dataclasses import replace
    report = aws()
    hw = report.system.hw_counters
    device = replace(hw.devices[0], mem_ecc_uncorrected=3, sram_ecc_corrected=2)
    report = replace(report, system=replace(report.system,
                                            hw_counters=replace(hw, devices=(device,))))
    (fault,) = [f for f in report_faults(report) if "ECC" in f.text]
    assert fault.severity == "error"
    assert fault.text == f"ND{device.index}: 3 uncorrected ECC (and 2 corrected)"
