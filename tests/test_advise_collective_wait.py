"""`advise` on a torchrun capture whose ranks reach their collectives at different times: the rank
that arrives first spans its wait inside the collective (the collectives table holds it, the
transfer's instructions do not), and that wait is a collective finding naming the straggler,
not device idle time. A single simulated rank has no such wait and no such finding."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from device_model import instance
from device_model.workloads import Placement
from profiler.analysis.advise import advise, findings_text
from profiler.analysis.ranks import rank_views
from profiler.capture.builtin import capture_workload
from profiler.model import fileformat

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "profiler.cli"]
TORCHRUN = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "2"]

# rank 1 sleeps after each backward (where the workers meet at gloo's all-reduce) and before its
# optimizer step: its step's device work is launched late, so on the device rank 0 reaches each
# step's all-reduce first and waits for it
STRAGGLER = textwrap.dedent("""
    import time
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.GELU(),
                                                  nn.Linear(64, 32)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x = torch.randn(16, 32)
    for _ in range(3):
        loss = F.mse_loss(model(x), x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if rank == 1:
            time.sleep(0.03)
        opt.step()
    dist.destroy_process_group()
""")


@pytest.fixture(scope="module")
def straggler(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("torch.distributed.run")
    work = tmp_path_factory.mktemp("straggler")
    script, out = work / "straggler.py", work / "straggler.nsprof"
    script.write_text(STRAGGLER)
    res = subprocess.run([*CLI, "capture", "-s", str(out), "--", *TORCHRUN, str(script)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    return fileformat.load(out)


def _waits_per_step(profile) -> list[float]:
    """Each rank's wait per step, from the ranks' collectives alone: the k-th collective of a
    step transfers once its last rank has arrived, so a rank waits from its own start to the
    latest one."""
    starts, steps = [], []
    for view in rank_views(profile):
        coll, ops = view.table("collectives"), view.table("ops")
        order = np.lexsort((coll["start"], ops["step"][coll["op"]]))
        starts.append(coll["start"][order])
        steps.append(int(view.table("steps")["detailed"].sum()))
    starts = np.array(starts)
    return [float(w) / n for w, n in zip((starts.max(axis=0) - starts).sum(axis=1), steps)]


def test_the_rank_that_waits_gets_a_collective_finding(straggler):
    waits = _waits_per_step(straggler)
    assert waits[0] > 0 and waits[1] == pytest.approx(0, abs=1e-9)     # rank 1 is late
    found = {f.rule: f for f in advise(straggler)}
    wait = found["collective-wait"]
    assert wait.evidence[0] == "on rank 0"
    assert wait.seconds == pytest.approx(waits[0], rel=1e-6)
    assert any(e.startswith("rank 1 waits least") for e in wait.evidence)
    assert "straggler" in wait.fix


def test_the_wait_is_not_device_idle(straggler):
    waiting = rank_views(straggler)[0]
    rules = [f.rule for f in advise(waiting)]
    assert rules[0] == "collective-wait"
    assert "device-idle" not in rules and "pipeline-bubbles" not in rules


def test_the_text_names_the_wait(straggler):
    text = findings_text(advise(straggler), 3)
    assert text.startswith("1. Waiting for other ranks at collectives [collective-wait]")


def test_a_single_simulated_rank_has_no_wait():
    """A built-in data-parallel capture simulates one rank: its collectives are transfers only,
    so even a profile claiming waits has none to report and its findings stay as they were."""
    prof = capture_workload("mlp:tokens=512,hidden=1024,layers=2", instance("trn2.48xlarge"),
                            Placement(cores=2, dp=2), num_exec=2, nth_exec=2)
    assert prof.table("collectives")["op"].size > 0
    found = advise(prof)
    assert "collective-wait" not in {f.rule for f in found}
    assert advise(replace(prof, meta={**prof.meta, "collective_wait_s": 1.0})) == found
