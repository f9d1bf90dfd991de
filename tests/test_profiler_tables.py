"""The profiler's tables and messages as users read them: forward and backward apart with units in
the top-operators table, `key_averages().table()` shaped like torch.profiler's, `advise` on a
profile with no steps, and singular/plural in messages."""
from __future__ import annotations

import re

import numpy as np
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
    assert lines[0].startswith("-") and lines[2] == lines[0] and lines[-3] == lines[0]
    assert lines[1].split()[:4] == ["Name", "Phase", "Self", "CPU"] and "# of Calls" in lines[1]
    assert lines[-2].startswith("Self CPU time total: ")
    assert lines[-1].startswith("Self device time total: ")
    body = lines[3:-3]
    assert len(body) == 5
    calls = [int(line.split()[13]) for line in body]   # Name Phase, two "<n> <unit>" CPU times, %,
    assert calls == sorted(calls, reverse=True)        # then three "<n> <unit>" device times
    assert ka.table(sort_by="self_cuda_time_total") == ka.table()   # torch's name for the same
    with pytest.raises(ValueError, match="sort_by must be one of"):
        ka.table(sort_by="cpu_time_totl")
    assert str(ka) == ka.table()


# what scripts written for torch.profiler read from key_averages() rows
TORCH_ROW_NAMES = ("key", "count", "self_cpu_time_total", "cpu_time_total", "cpu_time",
                   "self_device_time_total", "device_time_total", "device_time",
                   "self_cuda_time_total", "cuda_time_total", "flops", "input_shapes")


def test_key_averages_answer_torch_profilers_names(prof):
    from torch.autograd.profiler_util import FunctionEventAvg
    theirs = FunctionEventAvg()      # torch's own names (its cuda_* ones are older names)
    assert all(hasattr(theirs, n) for n in TORCH_ROW_NAMES if not n.startswith("self_cuda")
               and not n.startswith("cuda"))
    rows = prof.key_averages()
    for e in rows:
        assert e.key == e.name and isinstance(e.count, int)
        assert e.self_device_time_total == pytest.approx(e.self_time * 1e6)    # microseconds
        assert e.device_time == pytest.approx(e.device_time_total / e.count)
        assert e.self_cuda_time_total == e.self_device_time_total
        assert 0 <= e.self_cpu_time_total <= e.cpu_time_total
    # every operator was launched by a measured host call: CPU time is the host's, not zero
    assert all(e.cpu_time_total > 0 for e in rows)
    # torch's CPU sort keys and its table options run as in torch's tutorials
    text = rows.table(sort_by="self_cpu_time_total", row_limit=3, header="TRAIN")
    assert text.splitlines()[0] == "TRAIN"
    cpu = [e.self_cpu_time_total for e in sorted(rows, key=lambda e: -e.self_cpu_time_total)[:3]]
    assert [line.split()[0] for line in text.splitlines()[4:7]] == \
        [e.key for e in sorted(rows, key=lambda e: -e.self_cpu_time_total)[:3]] and cpu[0] > 0
    total = rows.total_average()
    assert total.key == "Total" and total.count == sum(e.count for e in rows)
    assert total.cpu_time_total == pytest.approx(sum(e.cpu_time_total for e in rows))


def test_key_averages_group_by_input_shape(prof):
    plain = prof.key_averages()
    by_shape = prof.key_averages(group_by_input_shape=True)
    assert len(by_shape) >= len(plain)
    assert sum(e.count for e in by_shape) == sum(e.count for e in plain)
    # the optimizer's add_ runs on the 64x64 weights and on the 64-long bias: two rows by shape
    adds = {str(e.input_shapes) for e in by_shape
            if (e.key, e.phase) == ("aten::add_", "optimizer")}
    assert {"[[64, 64], [64, 64]]", "[[64], [64]]"} <= adds
    assert "Input Shapes" in by_shape.table().splitlines()[1]
    assert "Input Shapes" not in plain.table()
    # torch's other groupings are taken: no stacks are recorded, names carry no overload
    assert [e.key for e in prof.key_averages(group_by_stack_n=5, group_by_overload_name=True)] == \
        [e.key for e in plain]
    assert len(prof.key_averages(limit=2)) == 2


def test_self_cpu_leaves_out_nested_calls():
    from profiler.analysis.key_averages import _nested_time
    # thread 1: a call [0, 10] holding [2, 5] (holding [3, 4]) and [6, 8]; thread 2: [1, 9]
    host = {"start": np.array([0.0, 2, 3, 6, 1]), "end": np.array([10.0, 5, 4, 8, 9]),
            "tid": np.array([1, 1, 1, 1, 2])}
    nested = _nested_time(host, np.arange(5))
    assert nested.tolist() == [5.0, 1.0, 0.0, 0.0, 0.0]
    # a row that is not an operator call is neither parent nor child
    assert _nested_time(host, np.array([0, 2, 3])).tolist() == [3.0, 0.0, 0.0, 0.0, 0.0]


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


@pytest.mark.parametrize("recorder", ["native", "python"])
def test_record_function_labels_are_rows_and_trace_spans(tmp_path, recorder):
    """The profiler recipe's first example: the script's `record_function` label is a row of
    key_averages (its calls and host time, and the device time of what it launched) and a
    user_annotation span in the Chrome trace, as torch.profiler shows it."""
    import json
    import profiler
    from torch.profiler import record_function
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU())
    with profiler.profile(instance="trn2.48xlarge", recorder=recorder) as prof:
        with record_function("model_inference"):
            model(torch.randn(4, 32))
        outside = model(torch.randn(4, 32))              # launched outside the label
        assert outside is not None
    rows = {e.key: e for e in prof.key_averages()}
    label = rows["model_inference"]
    assert label.count == 1 and label.self_device_time_total == 0
    ops = [e for e in prof.key_averages() if e.phase == "forward"]
    assert 0 < label.device_time_total < sum(e.device_time_total for e in ops)   # half of them
    assert label.cpu_time_total >= label.self_cpu_time_total >= 0
    assert label.cpu_time_total > 0 and "ProfilerStep*" in rows
    text = prof.key_averages().table(sort_by="cpu_time_total")
    assert "model_inference" in text
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    labels = [e for e in events if e.get("name") == "model_inference"]
    assert len(labels) == 1 and labels[0]["cat"] == "user_annotation"
    # torch's own labels for an optimizer step are recorded once, by the optimizer's hook
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profiler.profile(instance="trn2.48xlarge", recorder=recorder) as prof:
        model(torch.randn(4, 32)).sum().backward()
        opt.step()
    steps = [e for e in prof.key_averages() if e.key.startswith("Optimizer.step#")]
    assert [e.count for e in steps] == [1]


def test_a_call_lowered_to_several_operators_counts_its_host_time_once():
    """A convolution is lowered to `aten::convolution` and its `.im2col`; one host call: its
    CPU time is counted once (it had been counted on both rows, doubling Self CPU total)."""
    import profiler
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU())
    with profiler.profile(instance="trn2.48xlarge", recorder="python") as prof:
        model(torch.randn(2, 3, 8, 8))
    rows = prof.key_averages()
    ops = [e for e in rows if e.phase]
    host = prof.profile.table("host")
    calls = np.unique(prof.profile.table("ops")["host"])            # calls that launched ops
    measured = float(sum(host["end"][calls] - host["start"][calls])) * 1e6
    assert sum(e.count for e in ops) > len(calls)        # the convolution became two operators
    assert sum(e.cpu_time_total for e in ops) == pytest.approx(measured)
    by_key = {e.key: e for e in ops}
    assert by_key["aten::convolution"].cpu_time_total > 0     # on the call's own name
    assert by_key["aten::convolution.im2col"].cpu_time_total == 0


def test_torch_memory_sort_keys_and_export_stacks(prof, tmp_path):
    ka = prof.key_averages()
    for key in ("self_cpu_memory_usage", "cpu_memory_usage", "self_cuda_memory_usage"):
        assert "Name" in ka.table(sort_by=key, row_limit=3)
        assert getattr(ka[0], key) == 0                  # memory is not recorded
    target = tmp_path / "stacks.txt"
    target.write_text("old")
    prof.export_stacks(str(target), "self_cpu_time_total")
    assert target.read_text() == ""                      # no stacks are recorded


def test_events_are_the_measured_host_calls(prof):
    events = prof.events()
    assert events and [e.start_us for e in events] == sorted(e.start_us for e in events)
    assert {e.category for e in events} == {"cpu_op", "user_annotation"}
    calls = [e for e in events if e.category == "cpu_op"]
    # the operators' device time is the launching calls' (each operator launched by one call)
    ops = prof.profile.table("ops")
    assert sum(e.device_time_total for e in calls) == pytest.approx(
        float(np.sum((ops["end"] - ops["start"])[ops["host"] >= 0])) * 1e6)
    assert all(e.cpu_time_total >= 0 and e.count == 1 and e.key == e.name for e in events)
    assert {"aten::mul", "ProfilerStep#0"} <= {e.trace_name for e in events}   # torch's first
    assert "ProfilerStep*" in {e.name for e in events}                         # as torch's


def test_acc_events_accumulates_every_windows_events_and_averages():
    """torch's acc_events: each cycle's events are kept, so key_averages() and events() after
    three windows hold all three (it was only warned about: the last window alone)."""
    import profiler
    from collections import Counter
    from torch.profiler import schedule
    lin = torch.nn.Linear(32, 32)

    def run(acc: bool):
        seen = []

        def ready(p):
            seen.append((len(p.events()), Counter({(r.key, r.phase): r.count
                                                   for r in p.key_averages()})))
        prof = profiler.profile(instance="trn2.48xlarge", recorder="python", acc_events=acc,
                                schedule=schedule(wait=0, warmup=1, active=1, repeat=3),
                                on_trace_ready=ready)
        with prof:
            for _ in range(6):
                lin(torch.randn(8, 32)).sum().backward()
                prof.step()
        return prof, seen

    acc, acc_seen = run(True)
    last, last_seen = run(False)
    assert acc.windows == last.windows == 3 and all(n > 0 for n, _ in last_seen)
    # the same loop both times: each window adds what the other run's window holds alone
    for k in range(3):
        assert acc_seen[k][0] == sum(n for n, _ in last_seen[:k + 1])
        assert acc_seen[k][1] == sum((c for _, c in last_seen[:k + 1]), Counter())
    assert len(last.events()) == last_seen[-1][0]          # without it: the last window
    rows = acc.key_averages()
    assert sum(r.self_share for r in rows) == pytest.approx(1.0)
    assert [r.self_time for r in rows] == sorted((r.self_time for r in rows), reverse=True)
    assert len(acc.key_averages(limit=2)) == 2
