"""Two audit findings: `advise`'s rows rule reads each forward matmul's M (the rows fed to
TensorE), not the first number of its shape (a [4, C, 16, 16] convolution has 1024 rows); and a
capture of a torch.compile'd script says that Inductor's fused kernels are missing, on stderr and
in the profile's summary (the in-process `profiler.profile` API too)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from profiler.analysis.advise import advise  # noqa: E402
from profiler.analysis.render import summary_text  # noqa: E402
from profiler.model import fileformat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "profiler.cli"]
WARNING = "torch.compile ran 1 graph: Inductor's fused kernels are not recorded"

CONV = """
    import torch, torch.nn as nn
    conv = nn.Conv2d(32, 64, 3, padding=1)          # N=4, 16x16: 1024 im2col rows
    opt = torch.optim.SGD(conv.parameters(), lr=0.01)
    for _ in range(2):
        conv(torch.randn(4, 32, 16, 16)).pow(2).mean().backward(); opt.step(); opt.zero_grad()
"""
LINEAR = """
    import torch, torch.nn as nn
    lin = nn.Linear(256, 256)                        # fed 4 rows
    opt = torch.optim.SGD(lin.parameters(), lr=0.01)
    for _ in range(2):
        lin(torch.randn(4, 256)).pow(2).mean().backward(); opt.step(); opt.zero_grad()
"""
COMPILED = """
    import torch, torch.nn as nn
    m = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64))
    cm = torch.compile(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for _ in range(2):
        cm(torch.randn(128, 64)).pow(2).mean().backward(); opt.step(); opt.zero_grad()
"""


def _capture(tmp_path: Path, body: str, *extra: str):
    script, out = tmp_path / "s.py", tmp_path / "s.nsprof"
    script.write_text(textwrap.dedent(body))
    res = subprocess.run([*CLI, "capture", "-s", str(out), *extra, "--", sys.executable, str(script)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr
    return res, fileformat.load(out)


def _rows_finding(profile):
    return next((f for f in advise(profile) if f.rule == "batch-multiple-of-8"), None)


def test_convolution_of_batch_4_with_large_image_is_not_flagged(tmp_path):
    _, p = _capture(tmp_path, CONV)
    ops = p.table("ops")
    names = [p.strings[i] for i in ops["name_s"]]
    conv_rows = {int(m) for n, m in zip(names, ops["mm_m"]) if n == "aten::convolution"}
    assert conv_rows == {1024}
    assert _rows_finding(p) is None


def test_linear_fed_4_rows_is_flagged(tmp_path):
    _, p = _capture(tmp_path, LINEAR)
    f = _rows_finding(p)
    assert f is not None and f.impact > 0
    assert "fed [4] rows" in f.evidence[0]


@pytest.mark.parametrize("recorder", ["native", "python"])
def test_compiled_script_warns_and_profile_keeps_the_note(tmp_path, recorder):
    res, p = _capture(tmp_path, COMPILED, "--recorder", recorder)
    last = res.stderr.strip().splitlines()
    assert any(WARNING in line for line in last[-2:]), res.stderr
    assert p.meta["compiled_graphs"] == 1
    assert f"note {WARNING}" in summary_text(p)


def test_plain_script_has_no_compile_note(tmp_path):
    res, p = _capture(tmp_path, LINEAR)
    assert "torch.compile" not in res.stderr
    assert "notes" not in p.meta and "note " not in summary_text(p)


def test_the_profile_api_notes_a_compiled_model_once():
    """`profiler.profile` in the script's own process: the window's profile carries the note and
    the first window warns, as a capture does on stderr."""
    import warnings

    import torch._dynamo
    from torch._dynamo.utils import counters

    import profiler
    torch._dynamo.reset()
    counters.clear()
    cm = torch.compile(torch.nn.Linear(64, 64))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profiler.profile(instance="trn1.2xlarge", schedule=profiler.schedule(wait=0, warmup=0, active=1),
                              recorder="python") as prof:
            for _ in range(2):
                with torch.no_grad():
                    cm(torch.randn(16, 64))
                prof.step()
    said = [str(w.message) for w in caught if "torch.compile ran" in str(w.message)]
    assert len(said) == 1 and said[0].startswith(WARNING)
    # two windows of a step each, and the window open at exit (empty), as torch delivers them
    assert prof.windows == 3 and prof.profile.meta["compiled_graphs"] == 1
    assert f"note {WARNING}" in summary_text(prof.profile)


@pytest.mark.slow
def test_a_cold_compile_cache_records_what_a_warm_one_does(tmp_path):
    """With a cold Inductor cache, compiling runs real tensor ops (AOTAutograd's zeros and
    clones, kernel benchmarks): the compiler's work, recorded as the first step's until the
    compilations were left out. Cold and warm give the same operators."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent(COMPILED))

    def operators(name: str) -> list[tuple[str, int]]:
        out = tmp_path / name
        res = subprocess.run([*CLI, "capture", "-s", str(out), "--", sys.executable, str(script)],
                             capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        assert res.returncode == 0, res.stderr
        p = fileformat.load(out)
        ops = p.table("ops")
        return [(p.strings[i], s) for i, s in zip(ops["name_s"], ops["step"].tolist())]
    cold, warm = operators("cold.nsprof"), operators("warm.nsprof")
    assert cold == warm
    assert ("aten::addmm", 1) in cold          # the first step's own work is kept
