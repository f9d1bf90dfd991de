"""A script's steps as a capture draws them: its `record_function` labels nest with the
`ProfilerStep#N` spans (readers drop slices of one thread that overlap without nesting), each
label belongs to the step it began in, and a step the script never finished is not summarised."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

pytest.importorskip("torch")
from profiler.analysis.summary import summarize  # noqa: E402
from profiler.export.chrome import write_chrome  # noqa: E402
from profiler.model import fileformat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from torch.profiler import record_function
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fail_at = int(sys.argv[1])
    with record_function("whole_loop"):
        for step in range(1, 5):
            with record_function("iteration"):
                loss = model(torch.randn(4, 16)).sum()
                if step == fail_at:
                    raise RuntimeError("stopped in the middle of a step")
                loss.backward()
                opt.step()
                opt.zero_grad()
    with record_function("after_loop"):
        torch.randn(4, 16) * 2
""")


def _capture(tmp_path: Path, fail_at: int):
    script, out = tmp_path / "labels.py", tmp_path / "labels.nsprof"
    script.write_text(SCRIPT)
    res = subprocess.run([sys.executable, "-m", "profiler.cli", "capture", "-s", str(out), "--",
                          sys.executable, str(script), str(fail_at)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    return res, fileformat.load(out)


def _host_slices(profile, tmp_path: Path) -> list[dict]:
    """The recording thread's X events of the Chrome trace, times in whole nanoseconds (as
    Perfetto reads them)."""
    write_chrome(profile, str(tmp_path / "t.json"))
    events = orjson.loads((tmp_path / "t.json").read_bytes())["traceEvents"]
    host = [e for e in events if e["ph"] == "X" and e["cat"] in (
        "user_annotation", "cpu_op", "python_function")]
    main = min(e["tid"] for e in host)
    return [{**e, "t0": round(e["ts"] * 1000), "t1": round((e["ts"] + e["dur"]) * 1000)}
            for e in host if e["tid"] == main]


def test_labels_nest_with_steps_and_belong_to_the_step_they_began_in(tmp_path):
    res, profile = _capture(tmp_path, fail_at=0)
    assert res.returncode == 0, res.stderr
    slices = _host_slices(profile, tmp_path)
    for a in slices:                           # any two slices of the thread nest or are apart
        for b in slices:
            assert not (a["t0"] < b["t0"] < a["t1"] < b["t1"]), (a["name"], b["name"])
    steps = [e for e in slices if e["name"].startswith("ProfilerStep#")]
    loop = next(e for e in slices if e["name"] == "whole_loop")
    assert len(steps) == 4 and all(loop["t0"] <= s["t0"] and s["t1"] <= loop["t1"] for s in steps)
    # the label around each iteration (its step ends inside opt.step()) is that step's, and
    # every one is kept, the last one too
    iterations = [e for e in slices if e["name"] == "iteration"]
    assert [e["args"]["step"] for e in iterations] == [1, 2, 3, 4]
    assert all(any(s["t0"] <= it["t0"] and it["t1"] <= s["t1"] and s["args"]["step"] == n
                   for s in steps) for it, n in zip(iterations, [1, 2, 3, 4]))


def test_a_step_the_script_never_finished_is_kept_but_not_summarised(tmp_path):
    res, profile = _capture(tmp_path, fail_at=3)
    assert res.returncode == 1 and "stopped in the middle of a step" in res.stderr
    steps = profile.table("steps")
    assert steps["step"].tolist() == [1, 2, 3]           # the unfinished step is in the timeline
    assert steps["detailed"].tolist() == [1, 1, 0]
    summary = summarize(profile)
    assert summary["summarized_steps"] == "1-2"
    assert any("stopped during a step" in n for n in profile.meta["notes"])


def test_a_last_step_without_spans_of_its_own_is_kept():
    """The last step ran no module and no label (functional ops after prof.step()): its end
    came from its own spans, and there were none (a TypeError ended the profile)."""
    import torch
    import profiler
    with profiler.profile(instance="trn2.48xlarge") as prof:
        torch.nn.Linear(4, 4)(torch.randn(2, 4)).sum().backward()
        prof.step()
        (torch.randn(3, 3) @ torch.randn(3, 3)).sum()
    steps = prof.profile.table("steps")
    assert steps["step"].tolist() == [0, 1]
    assert (steps["host_end"] >= steps["host_start"]).all()
