"""Every published row the project ships stays within its bound, and the table as a whole
within the issue's targets: calibration rows median |error| <= 8%, worst <= 20%; held-out rows
median <= 10%, worst <= 25%. The rows and their sources: device_model/workloads/validation.py."""
from __future__ import annotations

import pytest

from device_model.catalog.costs import DEFAULT_COSTS
from device_model.workloads.validation import (CALIBRATED, CALIBRATION, HELD_OUT,
                                               RECORDED_MEDIAN, ROWS, run_all, simulate, summary,
                                               validation_median)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.id}-{r.metric}-{i}" for i, r in enumerate(ROWS)])
def test_row_within_its_bound(row):
    result = simulate(row)
    assert result.simulated > 0
    assert abs(result.error) <= row.bound, (
        f"{row.id} {row.figure}: simulated {result.simulated:.6g} vs published {row.published:.6g}"
        f" ({result.error:+.1%}, bound {row.bound:.0%})")


@pytest.fixture(scope="module")
def results():
    return run_all()


def test_calibration_rows_median_and_worst(results):
    s = summary(results, CALIBRATION)
    assert s["rows"] >= 19
    assert s["median_abs_error"] <= 0.08
    assert s["worst_abs_error"] <= 0.20


def test_held_out_rows_median_and_worst(results):
    s = summary(results, HELD_OUT)
    assert s["rows"] >= 1
    assert s["median_abs_error"] <= 0.10 and s["worst_abs_error"] <= 0.25


def test_every_calibrated_constant_names_a_shipped_row_and_exists():
    ids = {r.id for r in ROWS if r.role == CALIBRATION}
    for name, row, what in CALIBRATED:
        assert row in ids and what
        assert hasattr(DEFAULT_COSTS, name)


def test_rows_are_distinct_and_sourced():
    keys = {(r.spec, r.instance, r.metric, r.placement) for r in ROWS}
    assert len(keys) == len(ROWS)
    assert all(r.source and r.published > 0 and 0 < r.bound <= 0.25 for r in ROWS)


def test_recorded_median_that_estimate_prints_is_current():
    assert validation_median() == pytest.approx(RECORDED_MEDIAN, abs=5e-4)
