"""Where a captured script's steps begin and end, and what the summary's step figures cover:
small real PyTorch scripts run under `neuron-profile capture -- python ...`.

- a GradScaler's `update()` after the optimizer step is that iteration's tail, not a step of its
  own after the last iteration (nor the head of the next one);
- an iteration whose GradScaler skipped the optimizer's step (inf/NaN gradients) is a step of
  its own, not merged into the next iteration;
- other work after the last optimizer step with no forward pass is the last step's tail, while
  an evaluation (a forward pass) stays a step;
- an evaluation between training steps (the trained model in eval mode, then back in training
  mode) is a step of its own, while another model run in eval mode inside a step (a frozen
  teacher) is part of it;
- `step_count`, `step_time_mean` cover the summarised (instruction-level) steps, as `total_time`,
  FLOPs and the operator table do."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from profiler.analysis.render import summary_text  # noqa: E402
from profiler.analysis.summary import step_ranges, summarize  # noqa: E402
from profiler.model import fileformat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "profiler.cli"]

SCALER = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
ACC, MB, D = 2, 8, 64
m = nn.Sequential(nn.Linear(D, 128), nn.ReLU(), nn.Linear(128, D))
params = list(m.parameters())
opts = [torch.optim.Adam(params, lr=1e-3)] if OPTIMIZERS == 1 else \\
    [torch.optim.Adam(params[:2], lr=1e-3), torch.optim.SGD(params[2:], lr=1e-3)]
scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE, backoff_factor=2.0 ** -10)
for it in range(ITERS):
    for micro in range(ACC):
        x = torch.randn(MB, D); y = torch.randn(MB, D)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(m(x), y) / ACC
        scaler.scale(loss).backward()
    for opt in opts:
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    for opt in opts:
        scaler.step(opt)
    scaler.update()
    for opt in opts:
        opt.zero_grad(set_to_none=True)
    print("iter", it, "scale", scaler.get_scale())
"""


def capture(tmp_path: Path, source: str, *extra: str, recorder: str = "native"):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "t.nsprof"
    res = subprocess.run([*CLI, "capture", "-s", str(out), "--recorder", recorder, *extra, "--",
                          sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    return res, fileformat.load(out)


def per_step(prof, name: str) -> dict[int, int]:
    """How many ops of `name` each step has."""
    ops = prof.table("ops")
    counts = {int(s): 0 for s in prof.table("steps")["step"]}
    for s, n in zip(ops["step"].tolist(), prof.text(ops["name_s"])):
        counts[s] += n == name
    return counts


def host_names(prof) -> list[tuple[int, str]]:
    host = prof.table("host")
    return list(zip(host["step"].tolist(), prof.text(host["name_s"])))


def linear_forwards(prof) -> dict[int, int]:
    """Forward matmuls per step (a linear layer's, whichever aten op the recorder kept)."""
    ops = prof.table("ops")
    fwd = ops["phase"] == 0
    counts = {int(s): 0 for s in prof.table("steps")["step"]}
    for s, n in zip(ops["step"][fwd].tolist(), prof.text(ops["name_s"][fwd])):
        counts[s] += n in ("aten::linear", "aten::addmm")
    return counts


# each recorder once, each with one and with two optimizers across the two tests (a capture
# costs seconds; the four combinations of each test added half a minute to the suite)
@pytest.mark.parametrize("recorder, optimizers", [("native", 2), ("python", 1)])
def test_a_grad_scalers_update_is_the_tail_of_its_iteration(tmp_path, recorder, optimizers):
    source = SCALER.replace("OPTIMIZERS", str(optimizers)).replace("INIT_SCALE", "2.0 ** 8") \
        .replace("ITERS", "3")
    res, prof = capture(tmp_path, source, recorder=recorder)
    assert res.stdout.count("iter ") == 3
    steps = prof.table("steps")
    assert steps["step"].tolist() == [1, 2, 3]          # was 4: the last update a step of its own
    assert per_step(prof, "aten::_amp_update_scale_") == {1: 1, 2: 1, 3: 1}
    # each update lies inside its step's host interval (after that step's optimizer step)
    ops, host = prof.table("ops"), prof.table("host")
    upd = [int(i) for i, n in zip(ops["host"], prof.text(ops["name_s"])) if n == "aten::_amp_update_scale_"]
    for k, h in enumerate(upd):
        assert steps["host_start"][k] <= host["start"][h] and host["end"][h] <= steps["host_end"][k]
    summary = summarize(prof)
    assert summary["step_count"] == 3 and summary["profile_step_count"] == 3
    dev = steps["end"] - steps["start"]
    assert summary["step_time_mean"] == pytest.approx(float(dev.mean()))
    assert dev.min() > 0.8 * dev.max()                  # no 2 µs step pulling the mean down


@pytest.mark.parametrize("recorder, optimizers", [("native", 1), ("python", 2)])
def test_iterations_whose_scaler_skipped_the_optimizer_are_steps_of_their_own(tmp_path, recorder, optimizers):
    # fp16 with a huge initial scale: the first iterations overflow, the scaler backs off and
    # skips their optimizer steps, then the rest step
    source = SCALER.replace("OPTIMIZERS", str(optimizers)).replace("INIT_SCALE", "2.0 ** 40") \
        .replace("ITERS", "5")
    res, prof = capture(tmp_path, source, recorder=recorder)
    scales = [float(line.split()[3]) for line in res.stdout.splitlines() if line.startswith("iter ")]
    skipped = sum(1 for a, b in zip([2.0 ** 40] + scales, scales) if b < a)
    assert skipped >= 1 and len(scales) == 5
    assert prof.table("steps")["step"].tolist() == [1, 2, 3, 4, 5]     # was 5 - skipped
    assert set(linear_forwards(prof).values()) == {4}           # 2 micro-batches × 2 layers each
    assert per_step(prof, "aten::_amp_update_scale_") == dict.fromkeys(range(1, 6), 1)
    names = host_names(prof)
    skips = sorted(s for s, n in names if n.startswith("GradScaler.step#") and "skipped" in n)
    stepped = sorted({s for s, n in names if n.startswith("Optimizer.step#")})
    assert skips == [s for s in range(1, skipped + 1) for _ in range(optimizers)]
    assert stepped == list(range(skipped + 1, 6))
    # the skipped iterations ran no optimizer work, the others did
    ops = prof.table("ops")
    opt_steps = set(ops["step"][ops["phase"] == 2].tolist())
    assert opt_steps == set(range(skipped + 1, 6))


def test_work_after_the_last_optimizer_step_without_a_forward_is_its_tail(tmp_path):
    source = """
    import torch, torch.nn as nn
    torch.manual_seed(0)
    m = nn.Linear(32, 32)
    ema = [p.detach().clone() for p in m.parameters()]
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for it in range(3):
        loss = m(torch.randn(4, 32)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():                                 # after the loop: an average of the weights
        torch._foreach_lerp_(ema, [p.detach() for p in m.parameters()], 0.1)
    print("loss", loss.item())
    """
    _, prof = capture(tmp_path, source)
    assert prof.table("steps")["step"].tolist() == [1, 2, 3]        # was 4: the lerp alone
    lerp = [s for s, n in zip(prof.table("ops")["step"].tolist(), prof.text(prof.table("ops")["name_s"]))
            if "lerp" in n]
    assert lerp and set(lerp) == {3}


EVAL_BETWEEN_STEPS = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
teacher = nn.Sequential(nn.Linear(64, 64)).eval()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model.train()
for it in range(4):
    x = torch.randn(8, 64)
    with torch.no_grad():
        target = teacher(x)                              # a frozen teacher: part of the step
    loss = F.mse_loss(model(x), target)
    opt.zero_grad(); loss.backward(); opt.step()
    if it == 1:
        model.eval()
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(8, 64))
        model.train()
print("done")
"""


@pytest.mark.parametrize("recorder", ["native", "python"])
def test_an_evaluation_between_training_steps_is_a_step_of_its_own(tmp_path, recorder):
    _, prof = capture(tmp_path, EVAL_BETWEEN_STEPS, recorder=recorder)
    assert prof.table("steps")["step"].tolist() == [1, 2, 3, 4, 5]    # was 4: eval in step 3
    # two Linear layers per forward: the training steps' one forward, the evaluation's three
    forwards = linear_forwards(prof)
    teacher = 1                                           # the teacher's Linear, in each step
    assert forwards == {1: 2 + teacher, 2: 2 + teacher, 3: 6, 4: 2 + teacher, 5: 2 + teacher}
    ops = prof.table("ops")
    phases = {s: set(ops["phase"][ops["step"] == s].tolist()) for s in range(1, 6)}
    # the evaluation: forward work (and its inputs' creation, phase other), no backward or update
    assert 0 in phases[3] and not {1, 2} & phases[3]
    assert all({0, 1, 2} <= phases[s] for s in (1, 2, 4, 5))
    assert summarize(prof)["forward_only_step_count"] == 1


def test_summary_step_figures_cover_the_summarised_steps(tmp_path):
    source = """
    import torch, torch.nn as nn, torch.nn.functional as F
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                      nn.Linear(8 * 8 * 8, 10))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m.train()
    for it in range(4):
        x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
        loss = F.cross_entropy(m(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    m.eval()
    with torch.no_grad():                                 # an evaluation: a step of its own
        acc = (m(torch.randn(8, 3, 8, 8)).argmax(1) == y).float().mean()
    print("acc", acc.item())
    """
    _, prof = capture(tmp_path, source, "--detail-steps", "3")
    steps = prof.table("steps")
    assert steps["step"].tolist() == [1, 2, 3, 4, 5]
    assert steps["detailed"].tolist() == [0, 0, 1, 1, 1]
    s = summarize(prof)
    dev = steps["end"] - steps["start"]
    detailed = steps["detailed"].astype(bool)
    # every figure over the same steps: the detailed ones (was: step_count 5 and a mean over all 5)
    assert s["step_count"] == 3 and s["trace_count"] > s["event_count"] >= 0
    assert s["total_time"] == pytest.approx(float(dev[detailed].sum()))
    assert s["step_time_mean"] == pytest.approx(s["total_time"] / 3)
    assert s["step_time_mean"] == pytest.approx(float(dev[detailed].mean()))
    assert s["summarized_steps"] == "3-5" and s["profile_step_count"] == 5
    assert s["forward_only_step_count"] == 1            # the evaluation, named so the mean is read right
    ops = prof.table("ops")
    lnc = int(prof.meta.get("lnc", 1))                  # summaries scale to the logical core
    assert s["model_flops"] == pytest.approx(lnc * float(ops["flops"][np.isin(ops["step"], [3, 4, 5])].sum()))
    text = summary_text(prof)
    for line in ("step_count 3", "summarized_steps 3-5", "forward_only_step_count 1", "profile_step_count 5"):
        assert line + "\n" in text


def test_step_ranges():
    assert step_ranges([]) == "-"
    assert step_ranges([4]) == "4"
    assert step_ranges([5, 2, 3, 4]) == "2-5"
    assert step_ranges([1, 3, 5, 6, 7, 8]) == "1,3,5-8"
