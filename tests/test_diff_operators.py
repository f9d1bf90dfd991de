"""`neuron-profile diff` per operator: rows match on (name, phase) whatever phases each profile
holds, the JSON carries the phase as a field of its own beside the plain name, and counts per
step that are not whole show their fraction."""
from __future__ import annotations

import orjson
import pytest

from profiler.analysis.diff import count_text, diff_json, diff_profiles, diff_text

torch = pytest.importorskip("torch")


def _train(extra_forward_mm: bool, exp_in_first_step_only: bool = False):
    """Two steps of a linear layer (its weight gradient is a backward `aten::mm`); with
    `extra_forward_mm` the forward also multiplies its input by a constant matrix, so `aten::mm`
    runs in two phases; with `exp_in_first_step_only` an `aten::exp` runs in the first step only."""
    import profiler
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 32)
    const = torch.randn(32, 32)
    opt = torch.optim.SGD(lin.parameters(), lr=0.01)
    with profiler.profile(instance="trn2.48xlarge", recorder="python") as prof:
        for i in range(2):
            inputs = torch.randn(16, 32)
            x = lin(inputs)
            if extra_forward_mm:            # no gradient flows through it: a forward mm only
                x = x + inputs @ const
            if exp_in_first_step_only and i == 0:
                x = x.exp()
            loss = x.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    return prof.profile


@pytest.fixture(scope="module")
def one_phase_and_two():
    return _train(False), _train(True, exp_in_first_step_only=True)


def test_an_operator_in_one_phase_in_a_and_two_in_b_matches_phase_for_phase(one_phase_and_two):
    a, b = one_phase_and_two
    d = diff_profiles(a, b)
    mm = [r for r in d.operators if r.name == "aten::mm"]
    assert sorted(r.phase for r in mm) == ["backward", "forward"]
    backward = next(r for r in mm if r.phase == "backward")
    assert backward.a["count"] == backward.b["count"] > 0       # the same weight gradient both sides
    assert backward.ratio("time") == pytest.approx(1.0, rel=0.05)
    forward = next(r for r in mm if r.phase == "forward")
    assert not forward.a and forward.ratio_text("time") == "new"
    assert len({(r.name, r.phase) for r in d.operators}) == len(d.operators)   # one row each
    assert not any("(" in r.name for r in d.operators)          # the name is never decorated


def test_diff_json_carries_the_phase_and_a_stable_name(one_phase_and_two):
    a, b = one_phase_and_two
    rows = orjson.loads(diff_json(diff_profiles(a, b)))["operators"]
    mm = {r["phase"]: r for r in rows if r["name"] == "aten::mm"}
    assert set(mm) == {"forward", "backward"}
    assert mm["backward"]["ratio"] == pytest.approx(1.0, rel=0.05)
    assert all(set(r) >= {"name", "phase", "a", "b", "ratio"} for r in rows)


def test_diff_text_has_a_phase_column(one_phase_and_two):
    a, b = one_phase_and_two
    text = diff_text(diff_profiles(a, b), limit=100)
    head = next(line for line in text.splitlines() if line.startswith("operator "))
    assert head.split()[:2] == ["operator", "phase"]
    mm = [line.split() for line in text.splitlines() if line.startswith("aten::mm ")]
    assert sorted(row[1] for row in mm) == ["backward", "forward"]


def test_a_count_that_is_not_whole_per_step_shows_its_fraction(one_phase_and_two):
    a, b = one_phase_and_two
    d = diff_profiles(a, b)
    exp = next(r for r in d.operators if r.name == "aten::exp")
    assert exp.b["count"] == 0.5                              # once in two steps
    line = next(line for line in diff_text(d, limit=100).splitlines() if line.startswith("aten::exp "))
    a_n, b_n = line.split()[7:9]        # name, phase, two times of two words, B/A, A n, B n
    assert (a_n, b_n) == ("0", "0.5")


@pytest.mark.parametrize("count, text", [(0, "0"), (54, "54"), (0.5, "0.5"), (13.5, "13.5"),
                                         (1 / 3, "0.33"), (2.25, "2.25"), (1e6, "1000000"),
                                         # no bare trailing dot: once in 300 steps, 599 in 300
                                         (1 / 300, "0.003"), (599 / 300, "2")])
def test_count_text(count, text):
    assert count_text(count) == text
