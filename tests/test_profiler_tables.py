"""The profiler's tables and messages as users read them: forward and backward apart with units in
the top-operators table, `key_averages().table()` shaped like torch.profiler's, `advise` on a
profile with no steps, and singular/plural in messages."""
from __future__ import annotations

import re

import pytest

from device_model import instance
from profiler.analysis.advise import advise, findings_json, findings_text
from profiler.analysis.key_averages import KeyAverages
from profiler.analysis.render import ops_table, summary_text
from profiler.console import count as count_of
from profiler.analysis.summary import top_operators
from profiler.cli import main
from profiler.model.builder import ProfileBuilder
from profiler.model.fileformat import save

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def prof():
    """A real training loop whose `x * w` runs aten::mul in the forward and again (its gradient)
    in the backward."""
    import profiler
    w = torch.nn.Parameter(torch.randn(64, 64))
    lin = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD([w, *lin.parameters()], lr=0.01)
    with profiler.profile(instance="trn2.48xlarge", recorder="python") as p:
        for _ in range(3):
            x = torch.randn(64, 64)
            loss = lin(x * w).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            p.step()
    return p


def test_top_operators_tell_forward_and_backward_apart(prof):
    stats = top_operators(prof.profile, None)
    by = {(s.name, s.phase): s for s in stats}
    assert ("aten::mul", "forward") in by and ("aten::mul", "backward") in by
    assert len(by) == len(stats)                       # one row per operator and phase
    ops = prof.profile.table("ops")
    assert sum(s.count for s in stats) == int((ops["step"] >= 0).sum())
    table = ops_table(stats)
    head = table.splitlines()[0].split()
    assert head[:3] == ["operator", "phase", "bound"] and "FLOPs" in head
    rows = [line for line in table.splitlines()[2:] if line.startswith("aten::mul ")]
    assert {r.split()[1] for r in rows} == {"forward", "backward"}
    for line in table.splitlines()[2:]:                # every figure carries its unit
        assert re.search(r"\d (ns|us|ms|s) ", line) and re.search(r" [KMGT]?FLOP ", line) \
            and re.search(r" [KMGT]?B$", line), line


def test_key_averages_table_is_shaped_like_torch_profilers(prof):
    ka = prof.key_averages()
    assert isinstance(ka, KeyAverages) and ka[0].self_time >= ka[-1].self_time
    text = ka.table(sort_by="count", row_limit=5)
    lines = text.splitlines()
    assert lines[0].startswith("-") and lines[2] == lines[0] and lines[-2] == lines[0]
    assert lines[1].split()[:2] == ["Name", "Phase"] and "# of Calls" in lines[1]
    assert lines[-1].startswith("Self device time total: ")
    body = lines[3:-2]
    assert len(body) == 5
    calls = [int(line.split()[9]) for line in body]     # Name Phase % then three "<n> <unit>" times
    assert calls == sorted(calls, reverse=True)
    assert ka.table(sort_by="self_cuda_time_total") == ka.table()   # torch's name for the same
    with pytest.raises(ValueError, match="sort_by must be one of"):
        ka.table(sort_by="cpu_memory_usage")
    assert str(ka) == ka.table()


def _empty_profile():
    return ProfileBuilder(instance("trn2.48xlarge"), "pytorch", command="python idle.py").build()


def test_advise_on_a_profile_with_no_steps_says_so(tmp_path, capsys):
    empty = _empty_profile()
    assert advise(empty) == []
    assert "no steps in this profile" in findings_text([], 0)
    path = tmp_path / "empty.nsprof"
    save(empty, path)
    assert main(["advise", "-s", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no steps in this profile") and "idle" not in out
    assert main(["advise", "-s", str(path), "--json"]) == 0
    assert '"steps": 0' in capsys.readouterr().out
    assert b'"note"' in findings_json([], 0)
    assert main(["view", "-s", str(path)]) == 0        # and the summary of nothing still prints
    assert "step_count 0" in capsys.readouterr().out
    assert "step_count 0" in summary_text(empty)


def test_messages_say_one_step_not_one_steps(tmp_path, capsys):
    assert count_of(1, "step") == "1 step" and count_of(0, "step") == "0 steps"
    assert count_of(2, "matmul") == "2 matmuls"
    path = tmp_path / "one.nsprof"
    assert main(["capture", "-w", "matmul:m=128,k=128,n=128", "-s", str(path), "--progress", "off"]) == 0
    err = capsys.readouterr().err
    assert "(1 step, 2 operators, " in err
    assert main(["view", "-s", str(path), "--output-format", "chrome",
                 "--output-file", str(tmp_path / "one.json")]) == 0
    assert re.search(r"\(\d+ events\)", capsys.readouterr().err)
