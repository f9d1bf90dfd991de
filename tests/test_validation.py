"""Every published row the project ships stays within its bound, and the table as a whole
within the issue's targets: calibration rows median |error| <= 8%, worst <= 20%; held-out rows
(published figures of the same kinds, never used to set a constant) median <= 10%, worst <= 25%
where the model reaches them, and otherwise the honest bound it meets today (the gap is stated in
docs/fidelity.md). The rows and their sources: device_model/workloads/validation.py."""
from __future__ import annotations

from dataclasses import replace

import pytest

from device_model.catalog.costs import DEFAULT_COSTS
from device_model.workloads.validation import (CALIBRATED, CALIBRATION, HELD_OUT,
                                               HELD_OUT_ROWS, HELD_OUT_TARGET, KNOWN_GAPS,
                                               RECORDED_MEDIANS, ROWS, cached_results, simulate,
                                               summary, validation_medians)

# The held-out set today: the target (median <= 10%, worst <= 25%) is not met; these are
# the bounds the model does meet, so that a regression fails and a fix has to tighten them.
HELD_OUT_MEDIAN_NOW = 0.105
HELD_OUT_WORST_NOW = 0.70


@pytest.mark.parametrize("i", range(len(ROWS)),
                         ids=[f"{r.id}-{r.metric}-{i}" for i, r in enumerate(ROWS)])
def test_row_within_its_bound(i):
    # each row's own figure, from the table simulated once (a run's TTFT and TPOT rows share
    # one estimate); test_a_row_simulated_alone_is_its_figure_in_the_table checks they agree
    row, result = ROWS[i], cached_results()[i]
    assert result.row is row and result.simulated > 0
    assert abs(result.error) <= row.bound, (
        f"{row.id} {row.figure}: simulated {result.simulated:.6g} vs published {row.published:.6g}"
        f" ({result.error:+.1%}, bound {row.bound:.0%})")


def test_a_row_simulated_alone_is_its_figure_in_the_table(monkeypatch):
    """The table simulates a run once for its rows (TTFT and time per output token): each row's
    figure is the one its own estimate gives, and the run's estimate ran once."""
    import device_model.workloads.validation as validation
    rows = tuple(r for r in ROWS if r.id in ("I1", "C1"))
    alone = [simulate(r).simulated for r in rows]
    calls = []
    real = validation.estimate
    monkeypatch.setattr(validation, "estimate", lambda *a, **k: calls.append(a) or real(*a, **k))
    table = validation.run_all(rows=rows)
    assert [r.simulated for r in table] == alone and [r.row for r in table] == list(rows)
    assert len(calls) == len({(r.spec, r.placement) for r in rows}) < len(rows)


@pytest.fixture(scope="module")
def results():
    return cached_results()


def test_calibration_rows_median_and_worst(results):
    s = summary(results, CALIBRATION)
    assert s["rows"] >= 19
    assert s["median_abs_error"] <= 0.08
    assert s["worst_abs_error"] <= 0.20
    assert s["meets_target"]


def test_held_out_rows_median_and_worst(results):
    s = summary(results, HELD_OUT)
    assert s["rows"] >= 40
    assert s["median_abs_error"] <= HELD_OUT_MEDIAN_NOW
    assert s["worst_abs_error"] <= HELD_OUT_WORST_NOW
    # the summary says honestly whether the target is met
    assert s["meets_target"] == (s["median_abs_error"] <= 0.10 and s["worst_abs_error"] <= 0.25)


def test_known_gaps_are_real_gaps(results):
    """A held-out row is allowed past 25% only while it really misses by that much: once a
    mechanism brings it within the target, its entry in KNOWN_GAPS must go."""
    by_key = {(r.row.id, r.row.spec, r.row.metric): r for r in results}
    for key, bound in KNOWN_GAPS.items():
        assert key in by_key, f"KNOWN_GAPS names no shipped row: {key}"
        r = by_key[key]
        assert r.row.role == HELD_OUT and bound > HELD_OUT_TARGET
        assert abs(r.error) > HELD_OUT_TARGET, f"{key} is now within 25%: drop its gap"


def test_every_calibrated_constant_names_a_shipped_row_and_exists():
    ids = {r.id for r in ROWS if r.role == CALIBRATION}
    for name, row, what in CALIBRATED:
        assert row in ids and what
        assert hasattr(DEFAULT_COSTS, name)


def test_rows_are_distinct_and_sourced():
    # one workload may carry two published models' figures (bert-base-cased and -uncased: the
    # same layers), so a row is its figure on its workload
    keys = {(r.figure, r.spec, r.instance, r.metric, r.placement) for r in ROWS}
    assert len(keys) == len(ROWS)
    assert all(r.source and r.published > 0 for r in ROWS)
    assert all(0 < r.bound <= 0.25 for r in ROWS if r.role == CALIBRATION)
    assert all(r.role == HELD_OUT for r in HELD_OUT_ROWS)
    assert all(r.bound == HELD_OUT_TARGET or (r.id, r.spec, r.metric) in KNOWN_GAPS
               for r in HELD_OUT_ROWS)


def test_held_out_rows_name_their_published_file_and_sdk():
    for r in HELD_OUT_ROWS:
        assert "SDK" in r.source or "tutorials/" in r.source, r.source


def test_recorded_medians_that_estimate_prints_are_current():
    now = validation_medians()
    for role in (CALIBRATION, HELD_OUT):
        assert now[role] == pytest.approx(RECORDED_MEDIANS[role], abs=5e-4)
        # as estimate prints it
        assert f"{now[role] * 100:.0f}%" == f"{RECORDED_MEDIANS[role] * 100:.0f}%", role


def test_recorded_errors_by_kind_that_estimate_prints_are_current():
    from device_model.workloads.trust import RECORDED_KINDS, error_percent, kinds
    now = kinds(cached_results())
    assert set(now) == set(RECORDED_KINDS)
    for key, kind in now.items():
        recorded = RECORDED_KINDS[key]
        assert kind.rows == recorded.rows, key
        assert kind.median == pytest.approx(recorded.median, abs=5e-4), key
        assert kind.worst == pytest.approx(recorded.worst, abs=5e-4), key
        # printed alike by estimate (error_percent) and validate (one decimal): a worst of
        # 4.354% recorded as 0.0435 read 4.3% in one and 4.4% in the other
        for live, kept in ((kind.median, recorded.median), (kind.worst, recorded.worst)):
            assert error_percent(live) == error_percent(kept), key
            assert f"{live * 100:5.1f}" == f"{kept * 100:5.1f}", key
    # every row has a kind, and the kinds split the rows
    assert sum(k.rows for k in now.values()) == len(ROWS)


def test_time_to_first_token_rows_split_by_their_prompts_length():
    """Every TTFT row falls in the kind of its prompt's length, and both Trainium1 kinds hold
    rows on either side of the split (none falls near it: the split moves no row)."""
    from device_model.workloads.spec import split_spec
    from device_model.workloads.trust import PROMPT_SPLIT, figure, ttft_figure
    prompts = {}
    for row in ROWS:
        if row.metric == "ttft_s":
            tokens = int(split_spec(row.spec)[1]["in"])
            assert figure(row.metric, row.spec) == ttft_figure(tokens)
            prompts.setdefault(tokens <= PROMPT_SPLIT, []).append(tokens)
    assert max(prompts[True]) * 2 <= PROMPT_SPLIT <= min(prompts[False]) // 2


def test_the_pair_floor_is_the_least_worst_error_over_the_pair():
    """A model with the given ratio between two rows, scaled anywhere, cannot do better on
    both than the floor, and reaches it where the two errors balance."""
    from device_model.workloads.validation import Result, pair_floor
    one, four = ROWS[0], ROWS[1]
    a = Result(replace(one, published=100.0), 10.0)
    b = Result(replace(four, published=195.0), 40.0)       # model ratio 4, published 1.95
    floor = pair_floor(a, b)
    q = (40.0 / 10.0) / (195.0 / 100.0)
    worst = min(max(abs(s * 10.0 / 100.0 - 1), abs(s * 40.0 / 195.0 - 1))
                for s in (i / 1000 for i in range(1, 40000)))
    assert floor == pytest.approx((q - 1) / (q + 1))
    assert worst == pytest.approx(floor, abs=1e-3)


def test_the_contradicting_pairs_are_found_by_their_floor_past_the_target(results):
    """The 8192-token Llama-2-13B and CodeLlama-13B pairs (batch 1 against batch 4, the same
    release and samples) keep the held-out worst past 25% for any model that charges a batch
    its work; `validate` finds them by that rule (they were listed by hand) and says so in its
    text and JSON, with the model's own worst error on each pair beside the floor."""
    from device_model.workloads.validation import conflicts, report
    from device_model.workloads.validation_text import format_report
    found = conflicts(results)
    assert sorted(tuple(c["rows"]) for c in found) == [("HI3", "HD3"), ("HI6", "HD6")]
    assert all(c["worst"] >= c["floor"] > HELD_OUT_TARGET for c in found)
    # the rule, not a list: below the target, the next pairs come in (Llama-2-70B at 1024)
    assert {tuple(c["rows"]) for c in conflicts(results, target=0.2)} >= {("HI4", "HD4")}
    rep = report(results)
    assert rep["conflicts"] == found
    text = format_report(rep)
    assert "HI3 / HD3: at least " in text and "HI6 / HD6: at least " in text


def test_a_decoders_single_pass_is_not_judged_by_the_encoder_rows():
    """`mode=infer` of a decoder is one forward pass, a kind no published table holds: the
    estimate says so instead of quoting the encoder rows' errors."""
    from device_model.workloads.trust import DECODER_PASS, FIGURES, figures_of
    decoder = {"model": {"name": "llama3-70b"}, "mode": "infer", "latency_s": 0.5}
    encoder = {"model": {"name": "bert-large"}, "mode": "infer", "latency_s": 0.005}
    assert figures_of(decoder) == [DECODER_PASS]
    assert figures_of(encoder) == [FIGURES["latency_s"]]


def test_a_contradicting_pair_shows_the_ratios_its_floor_comes_from(results):
    from device_model.workloads.validation import conflicts
    for c in conflicts(results):
        q = c["simulated_ratio"] / c["published_ratio"]
        assert c["floor"] == pytest.approx(abs(q - 1) / (q + 1))
        assert 1.9 < c["published_ratio"] < 2.0 and 3.5 < c["simulated_ratio"] <= 4.0
