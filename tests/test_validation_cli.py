"""`neuron-sim validate` and the trust line of `neuron-sim estimate`, as a user runs them."""
from __future__ import annotations

import contextlib
import io
import re

import orjson
import pytest

from device_model.cli import main
from device_model.workloads.validation import CALIBRATION, HELD_OUT, ROWS


def test_validate_json_lists_every_row_with_its_error(capsys):
    assert main(["validate", "--json"]) == 0
    rep = orjson.loads(capsys.readouterr().out)
    assert len(rep["rows"]) == len(ROWS)
    for r, row in zip(rep["rows"], ROWS):
        assert r["id"] == row.id and r["published"] == row.published
        assert r["error"] == r["simulated"] / r["published"] - 1
        assert r["source"] and r["hardware"] and r["role"] in (CALIBRATION, HELD_OUT)
    errs = sorted(abs(r["error"]) for r in rep["rows"] if r["role"] == CALIBRATION)
    assert rep["calibration"]["worst_abs_error"] == errs[-1]
    assert {c["row"] for c in rep["constants"]} <= {row.id for row in ROWS}


def test_validate_check_fails_on_the_targets_the_tests_hold_and_each_rows_bound(capsys, tmp_path):
    """`--check` for CI: it exited 1 on the shipped model (the held-out worst target, which
    contradicting published rows put out of reach), so no CI could use it. It fails on what the
    tests assert: the calibration targets, the held-out median and every row's own bound."""
    code = main(["validate", "--json", "--check"])
    out = capsys.readouterr()
    rep = orjson.loads(out.out)
    assert rep["past_bound"] == [] and rep["calibration"]["meets_target"]
    assert not rep["held_out"]["meets_target"]            # the worst: reported, not failed on
    assert code == 0 and out.err == ""
    # all-reduces at BF16 width: I2 and long prompts go past their bounds
    toml = tmp_path / "bf16.toml"
    toml.write_text("[costs]\ncc_allreduce_fp32_fraction = 0.001\n")
    code = main(["validate", "--json", "--check", "--overrides", str(toml)])
    out = capsys.readouterr()
    rep = orjson.loads(out.out)
    assert code == 1 and out.err.count("\n") == 1
    assert out.err.startswith("neuron-sim: validate --check: ")
    assert rep["past_bound"] and all(f"{r['id']} {r['error'] * 100:+.1f}%" in out.err
                                     for r in rep["past_bound"])
    assert ("calibration target not met" in out.err) == (not rep["calibration"]["meets_target"])


def test_validate_under_overrides_says_so_and_names_what_they_change(capsys, tmp_path):
    """Under --overrides nothing said the table was not the shipped model's, and a calibrated
    constant the file set read "set by I2", as if I2 had set the user's value."""
    toml = tmp_path / "mine.toml"
    toml.write_text("[costs]\ncc_allreduce_fp32_fraction = 0.5\n"
                    "[device.trainium1]\nhbm_bw = 1e12\n")
    assert main(["validate", "--overrides", str(toml)]) == 0
    text = capsys.readouterr().out
    head = "".join(text.split("\nid ")[0].split())          # wrapped where it may be
    assert head == "".join((f"under the overrides of {toml}: cc_allreduce_fp32_fraction = 0.5 "
                            "(default 1), [device.trainium1]").split())
    assert "cc_allreduce_fp32_fraction = 0.5 (yours; 1 as I2 set it)" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert main(["validate", "--json", "--overrides", str(toml)]) == 0
    rep = orjson.loads(capsys.readouterr().out)
    assert rep["overrides"] == {"file": str(toml), "devices": ["trainium1"], "instances": [],
                                "costs": {"cc_allreduce_fp32_fraction": {"value": 0.5,
                                                                         "default": 1.0}}}
    [c] = [c for c in rep["constants"] if c["name"] == "cc_allreduce_fp32_fraction"]
    assert (c["value"], c["default"]) == (0.5, 1.0)
    assert main(["validate", "--json"]) == 0
    plain = orjson.loads(capsys.readouterr().out)
    assert "overrides" not in plain and all("default" not in c for c in plain["constants"])


def test_validate_text_has_the_table_the_summary_and_the_constants(capsys):
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") > 2 * len(ROWS)
    assert "calibration rows:" in out and "median |error|" in out and "set by M1" in out
    assert max(len(line) for line in out.splitlines()) <= 80      # an 80-column terminal


def test_validate_text_breaks_a_workload_spec_only_after_its_commas_and_slashes(capsys):
    """textwrap cut long specs anywhere: `lla` / `ma3.1-405b...`, `...,he` / `ad=cls`."""
    assert main(["validate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    text = "\n".join(lines)
    for row in ROWS:
        for token in re.split(r"(?<=[,/])", row.spec):
            assert token in text, (row.id, token)
    assert max(len(line) for line in lines) <= 80


def test_validate_markdown_has_one_table_row_per_published_row(capsys):
    assert main(["validate", "--markdown"]) == 0
    out = capsys.readouterr().out
    tables, kinds = out.split("### Held-out rows by kind")
    kinds, trust = kinds.split("### Every row by kind")
    rows = [line for line in tables.splitlines() if line.startswith("| ") and "---" not in line]
    body = [line for line in rows if not line.startswith("| id |")]
    assert len(body) == len(ROWS)
    by_role = [r.id for role in (CALIBRATION, HELD_OUT) for r in ROWS if r.role == role]
    assert [line.split(" | ")[0].removeprefix("| ") for line in body] == by_role
    assert out.count("### ") == 4 and "Held-out rows (" in out
    assert all(line.count(" | ") == 6 for line in rows)      # seven cells, none split
    # every held-out row falls in exactly one kind
    counts = [int(line.split(" | ")[1]) for line in kinds.splitlines()
              if line.startswith("| ") and "---" not in line and not line.startswith("| kind")]
    assert sum(counts) == sum(1 for r in ROWS if r.role == HELD_OUT)
    # and every row, either role, in exactly one of the kinds `estimate` states
    counts = [int(line.split(" | ")[2]) for line in trust.splitlines()
              if line.startswith("| ") and "---" not in line and not line.startswith("| chip")]
    assert sum(counts) == len(ROWS)


def test_validate_takes_one_output_format(capsys):
    with pytest.raises(SystemExit) as err:
        main(["validate", "--json", "--markdown"])
    assert err.value.code == 2 and "not allowed with" in capsys.readouterr().err


@pytest.fixture(scope="module")
def slow_report(tmp_path_factory) -> dict:
    """`validate --json` under an override file that makes every execution 1 ms longer (the
    whole table simulated again: run once for the tests that read it)."""
    toml = tmp_path_factory.mktemp("overrides") / "o.toml"
    toml.write_text("[costs]\nexec_overhead_s = 1e-3\n")
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    with contextlib.redirect_stdout(out):
        assert main(["validate", "--json", "--overrides", str(toml)]) == 0
    out.flush()
    return orjson.loads(out.buffer.getvalue())


def test_validate_takes_overrides(slow_report):
    c1 = next(r for r in slow_report["rows"] if r["id"] == "C1")
    assert c1["simulated"] > 1e-3


def test_estimate_text_states_the_validation_median(capsys):
    assert main(["estimate", "-w", "matmul:m=1024,k=1024,n=1024", "-i", "trn1.2xlarge"]) == 0
    out = capsys.readouterr().out
    assert "median" in out and "published AWS measurements" in out
    assert "calibrated on" in out and "held-out" in out     # both medians
    assert max(len(line) for line in out.splitlines()) <= 80
    assert main(["estimate", "-w", "matmul:m=1024,k=1024,n=1024", "--json"]) == 0
    assert "median" not in capsys.readouterr().out


def test_estimate_text_states_the_error_of_each_figures_kind(capsys):
    """Each figure with the error of the published rows of its kind (or that none exists): the
    overall median alone would hide that long-prompt TTFT on Trainium1 is far off while decode
    is close."""
    from device_model.workloads.trust import RECORDED_KINDS, error_percent, ttft_figure
    assert main(["estimate", "-w", "llama2-13b:mode=decode,batch=1,in=4096,out=4096",
                 "-i", "trn1.32xlarge", "--tp", "32"]) == 0
    out = capsys.readouterr().out
    assert "published Trainium1 rows of its kind" in out
    for figure in (ttft_figure(4096), "time per output token"):
        kind = RECORDED_KINDS[("trainium1", figure)]
        line = next(line for line in out.splitlines() if line.strip().startswith(figure))
        assert error_percent(kind.median) + " median" in line
        assert error_percent(kind.worst) + " worst" in line
        # the rows, and how many a constant was fitted on (they land close by design)
        assert f"({kind.rows} rows, {kind.calibrated} calibration)" in line
    assert max(len(line) for line in out.splitlines()) <= 80
    # a figure no published row checks says so instead of borrowing another kind's error
    assert main(["estimate", "-w", "llama3-8b:seq=4096,gbs=64", "-i", "trn2.48xlarge",
                 "--tp", "8"]) == 0
    out = capsys.readouterr().out
    assert "training throughput     none published: not checked" in out
    assert main(["estimate", "-w", "allreduce:bytes=1M,ranks=64", "-i", "trn1.32xlarge",
                 "--nodes", "2"]) == 0
    assert "all-reduce time" in capsys.readouterr().out


def test_the_time_to_first_token_is_trusted_by_the_prompts_length(capsys):
    """A short prompt's TTFT states the error of the short published prompts, a long one's the
    error of the long ones: the two differ by an order of magnitude, and one figure for both
    would overstate the error for one user and understate it for the other."""
    from device_model.workloads.trust import PROMPT_SPLIT, RECORDED_KINDS, ttft_figure
    short, long = ttft_figure(PROMPT_SPLIT), ttft_figure(PROMPT_SPLIT + 1)
    assert short != long and ttft_figure(1) == short and ttft_figure(10 ** 6) == long
    printed = {}
    for prompt in (128, 4096):
        assert main(["estimate", "-w", f"llama2-70b:mode=prefill,in={prompt}",
                     "-i", "trn1.32xlarge", "--tp", "32"]) == 0
        out = capsys.readouterr().out
        printed[prompt] = [line.strip() for line in out.splitlines()
                           if line.strip().startswith("TTFT, prompt")]
    assert [line.startswith(short) for line in printed[128]] == [True]
    assert [line.startswith(long) for line in printed[4096]] == [True]
    assert RECORDED_KINDS[("trainium1", short)].median < RECORDED_KINDS[("trainium1", long)].median
    # without `in`, the prompt is the default 128 tokens, and its kind says so
    assert main(["estimate", "-w", "llama2-70b:mode=decode", "-i", "trn1.32xlarge",
                 "--tp", "32"]) == 0
    assert short in capsys.readouterr().out
    # Trainium2 publishes long prompts only: a short one is not checked, and says so
    assert main(["estimate", "-w", "llama3.3-70b:mode=prefill,in=256", "-i", "trn2.48xlarge",
                 "--tp", "64"]) == 0
    assert f"{short:<23} none published: not checked" in capsys.readouterr().out


def test_estimate_under_overrides_says_the_errors_are_the_default_constants(tmp_path, capsys):
    toml = tmp_path / "o.toml"
    toml.write_text("[costs]\ncc_dma_fraction = 0.3\n")
    assert main(["estimate", "-w", "allreduce:bytes=1M,ranks=64", "-i", "trn1.32xlarge",
                 "--nodes", "2", "--overrides", str(toml)]) == 0
    out = capsys.readouterr().out
    assert "with the default constants" in out and f"validate --overrides {toml}" in out
    assert main(["estimate", "-w", "allreduce:bytes=1M,ranks=64", "-i", "trn1.32xlarge",
                 "--nodes", "2"]) == 0
    assert "with the default constants" not in capsys.readouterr().out


def test_validate_gives_the_error_of_each_kind_under_the_constants_it_runs(slow_report, capsys):
    from device_model.workloads.trust import RECORDED_KINDS
    assert main(["validate", "--json"]) == 0
    kinds = {(k["chip"], k["figure"]): k for k in orjson.loads(capsys.readouterr().out)["kinds"]}
    assert set(kinds) == set(RECORDED_KINDS)
    ttft = kinds[("trainium1", "TTFT, prompt over 512")]
    assert ttft["rows"] == RECORDED_KINDS[("trainium1", "TTFT, prompt over 512")].rows
    assert ttft["worst_abs_error"] >= ttft["median_abs_error"] > 0
    # how many of a kind's rows are calibration ones, as `estimate` states it
    assert all(k["calibration_rows"] == RECORDED_KINDS[key].calibrated
               for key, k in kinds.items())
    slow = {(k["chip"], k["figure"]): k for k in slow_report["kinds"]}
    assert slow[("trainium1", "all-reduce time")]["median_abs_error"] > \
        kinds[("trainium1", "all-reduce time")]["median_abs_error"]
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert "by kind" in out
    assert re.search(r"\n  trainium1  TTFT, prompt up to 512 +\d+ \(1 cal\.\) +median", out)


def test_the_mlp_block_borrows_no_published_models_error(capsys):
    """The mlp block is no published model: its step is not an encoder's latency or a model's
    training throughput, so no published row checks it."""
    for mode in ("infer", "train"):
        assert main(["estimate", "-w", f"mlp:mode={mode}", "-i", "trn1.2xlarge"]) == 0
        out = capsys.readouterr().out
        assert "mlp time                none published: not checked" in out
        assert "encoder latency" not in out and "training throughput" not in out


def test_validate_refuses_a_second_overrides_file(capsys, tmp_path):
    """`--overrides a.toml --overrides b.toml` validated under b alone, a's constants dropped
    without a word, where estimate refuses every repeated option."""
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    first.write_text("[costs]\ncc_launch_s = 9e-6\n")
    second.write_text("")
    assert main(["validate", "--overrides", str(first), "--overrides", str(second)]) == 2
    err = capsys.readouterr().err
    assert err == "neuron-sim: error: --overrides given twice; give it once\n"
