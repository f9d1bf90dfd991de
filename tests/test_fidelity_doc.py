"""docs/fidelity.md and the README state the validation table as it is: the held-out table is
what `neuron-sim validate --markdown` prints, and the medians and worst errors they quote are
the current ones. A model change that moves a row regenerates them; it cannot leave them stale."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from device_model.workloads import validation
from device_model.workloads.validation_text import (KINDS_HEADER, MARKDOWN_HEADER, TRUST_HEADER,
                                                    format_markdown, format_markdown_kinds,
                                                    format_markdown_trust)

ROOT = Path(__file__).resolve().parents[1]
FIDELITY = (ROOT / "docs" / "fidelity.md").read_text()
README = (ROOT / "README.md").read_text()


@pytest.fixture(scope="module")
def rep():
    return validation.report(validation.cached_results())


def _table_after(text: str, heading: str) -> str:
    section = text[text.index(heading):]
    start = section.index(MARKDOWN_HEADER)
    end = section.find("\n\n", start)
    return section[start:end if end >= 0 else None].strip()


def _pct(ratio: float) -> str:
    return f"{ratio * 100:.1f}%"


def test_the_held_out_table_is_what_validate_prints(rep):
    """Regenerate with `neuron-sim validate --markdown` (its held-out table)."""
    assert _table_after(FIDELITY, "## Held-out rows") == format_markdown(rep, validation.HELD_OUT)


def test_the_held_out_kinds_table_is_what_validate_prints(rep):
    """Regenerate with `neuron-sim validate --markdown` (its "by kind" table)."""
    start = FIDELITY.index(KINDS_HEADER)
    end = FIDELITY.find("\n\n", start)
    assert FIDELITY[start:end] == format_markdown_kinds(rep)


def test_the_trust_table_is_what_validate_prints(rep):
    """Regenerate with `neuron-sim validate --markdown` (its "every row by kind" table): the
    error `estimate` prints beside each figure."""
    start = FIDELITY.index(TRUST_HEADER)
    end = FIDELITY.find("\n\n", start)
    assert FIDELITY[start:end] == format_markdown_trust(rep)


def test_the_quoted_medians_and_worst_errors_are_current(rep):
    cal, held = rep["calibration"], rep["held_out"]
    assert (f"All held-out rows: median **{_pct(held['median_abs_error'])}**, worst "
            f"**{_pct(held['worst_abs_error'])}**") in FIDELITY
    assert (f"Calibration rows: median |error| **{_pct(cal['median_abs_error'])}**, worst "
            f"**{_pct(cal['worst_abs_error'])}**") in FIDELITY
    quoted = " ".join(README.split())
    assert (f"calibration: median {_pct(cal['median_abs_error'])}, worst "
            f"{_pct(cal['worst_abs_error'])} over {cal['rows']} figures") in quoted
    assert (f"held out: median {_pct(held['median_abs_error'])}, worst "
            f"{_pct(held['worst_abs_error'])} over {held['rows']}") in quoted
    counted = re.search(r"Held-out \((\d+) rows, below\):\s+median ([\d.]+%), worst ([\d.]+%)",
                        FIDELITY)
    assert counted and int(counted.group(1)) == held["rows"]
    assert counted.group(2, 3) == (_pct(held["median_abs_error"]), _pct(held["worst_abs_error"]))
    counted = re.search(r"\*Held-out\* rows \((\d+):", FIDELITY)
    assert counted and int(counted.group(1)) == held["rows"]
