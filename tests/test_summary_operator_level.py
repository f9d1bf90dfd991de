"""Summaries of steps kept at operator level only (a built-in capture stopped before its
instruction-level execution): engine figures from the operators' busy seconds, what only
instructions tell marked unavailable, and neither advice nor diff built on an unavailable figure.
Also: counts written as integers in the JSON views, and the summary saying which steps it covers."""
from __future__ import annotations

import orjson
import pytest

from device_model import instance
from profiler.analysis.advise import advise
from profiler.analysis.diff import diff_profiles, diff_text
from profiler.analysis.render import profile_json, summary_json, summary_text
from profiler.analysis.summary import INSTRUCTION_ONLY_KEYS, summarize
from profiler.capture.builtin import capture_workload
from profiler.cli import main

SPEC = "mlp:tokens=512,hidden=1024,layers=2"


@pytest.fixture(scope="module")
def operator_level():
    """Stopped (as by Ctrl-C) after the first of two executions, the second being the one to
    keep at instruction level: the profile holds one step and no instruction."""
    prof = capture_workload(SPEC, instance("trn1.2xlarge"), num_exec=2, nth_exec=2, stop=lambda: True)
    assert prof.rows("steps") == 1 and prof.rows("instructions") == 0
    return prof


@pytest.fixture(scope="module")
def instruction_level():
    """The same first (cold) execution, kept at instruction level."""
    return capture_workload(SPEC, instance("trn1.2xlarge"), num_exec=1, nth_exec=1)


def test_engine_figures_come_from_the_operators(operator_level, instruction_level):
    ops, ins = summarize(operator_level), summarize(instruction_level)
    assert ops["figures_from"] == "operators" and ins["figures_from"] == "instructions"
    for e in ("tensor", "vector", "scalar", "gpsimd"):
        # an engine's instruction time is its operators' busy seconds added up, exactly
        assert ops[f"{e}_engine_instruction_time"] == pytest.approx(ins[f"{e}_engine_instruction_time"], rel=1e-6)
        assert ops[f"{e}_engine_active_time"] == pytest.approx(ins[f"{e}_engine_active_time"], rel=0.05)
    assert ops["tensor_engine_active_time_percent"] > 10
    for key in ("dma_active_time", "total_active_time", "dma_transfer_total_bytes"):
        assert ops[key] == pytest.approx(ins[key], rel=0.05), key
    assert ops["total_active_time_percent"] < 100


def test_what_only_instructions_tell_is_unavailable_not_zero(operator_level):
    s = summarize(operator_level)
    assert all(s[k] is None for k in INSTRUCTION_ONLY_KEYS)
    # no HFU equal to MFU nor adjusted hardware FLOPs equal to model FLOPs made up from nothing
    assert s["hfu_estimated_percent"] is None and s["adjusted_hardware_flops"] is None
    assert s["model_flops"] > 0 and s["hardware_flops"] >= s["model_flops"]
    text = summary_text(operator_level)
    assert "hfu_estimated_percent unavailable\n" in text and "None" not in text
    assert "figures_from operators\n" in text
    record = orjson.loads(summary_json(operator_level))["summary"][0]
    assert record["hfu_estimated_percent"] is None and record["tensor_engine_active_time"] > 0


def test_advice_is_built_on_available_figures_only(operator_level):
    s = summarize(operator_level)
    found = {f.rule: f for f in advise(operator_level)}
    assert "dma-small-transfers" not in found              # transfer sizes are unknown
    te = found["tensor-underused"]                          # on the operators' TensorE time
    assert f"TensorE active {s['tensor_engine_active_time_percent'] / 100:.0%}" in te.evidence[0]
    assert "TensorE active 0%" not in te.evidence[0]


def test_diff_of_operator_level_and_instruction_level_profiles(operator_level, instruction_level, tmp_path,
                                                               capsys):
    d = diff_profiles(operator_level, instruction_level)
    tensor = next(r for r in d.engines if r.name == "TensorE")
    assert tensor.ratio("time") == pytest.approx(1.0, rel=0.05)
    assert "TensorE" in diff_text(d)
    a, b = tmp_path / "ops.nsprof", tmp_path / "ins.nsprof"
    from profiler.model.fileformat import save
    save(operator_level, a)
    save(instruction_level, b)
    assert main(["diff", str(a), str(b), "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["engines"]


def test_counts_in_the_json_views_are_integers(instruction_level):
    top = orjson.loads(summary_json(instruction_level))["top_operators"]
    assert all(isinstance(r["flops"], int) and isinstance(r["hbm_bytes"], int) for r in top)
    assert any(r["flops"] > 0 for r in top)
    doc = orjson.loads(profile_json(instruction_level))
    for record in doc["instruction"][:2000]:
        for key in ("hbm_read_bytes", "hbm_write_bytes", "flops"):
            assert isinstance(record[key], int), (key, record[key])
    assert any(r["hbm_read_bytes"] > 0 for r in doc["instruction"])


def test_summary_text_names_the_steps_it_covers():
    prof = capture_workload("matmul:m=128,k=128,n=128", instance("trn2.48xlarge"), num_exec=3, nth_exec=2)
    text = summary_text(prof)
    assert "summarized_steps 2\n" in text
    assert "top operators (self time over the summarised steps 2 of 3)" in text


def test_detail_steps_help_says_its_default(capsys):
    with pytest.raises(SystemExit):
        main(["capture", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--detail-steps N scripts: steps kept at instruction level, the last N (default: 4;" in help_text
