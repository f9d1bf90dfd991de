"""The native aten recorder against the Python one and against torch itself: which calls it keeps,
the shapes and dtypes it decodes, phases and modules, threads, errors inside operators, and how it
is built, cached and replaced by the Python recorder when it cannot be built."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from profiler.capture.native import build as native_build  # noqa: E402
from profiler.capture.native_recorder import NativeRecorder  # noqa: E402
from profiler.capture.python_recorder import Recorder  # noqa: E402
from profiler.capture.recorders import start_recorder  # noqa: E402
from profiler.capture.recording import BACKWARD, FORWARD  # noqa: E402
from profiler.capture.to_profile import recording_to_profile, resolve_phases  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def record(fn, kind: str = "native"):
    rec = NativeRecorder().start() if kind == "native" else Recorder().start()
    try:
        fn()
    finally:
        recording = rec.stop()
    return recording


def labels(recording) -> list[str]:
    t = recording.table()
    return [recording.labels[s] for s in t["sig"].tolist()]


def test_known_operators_are_kept_whole_and_views_and_no_ops_dropped():
    x, w = torch.randn(4, 8), torch.randn(16, 8)

    def work():
        F.linear(x, w)                 # composite: kept as linear, not t + mm
        x.view(32)                     # metadata only
        x.contiguous()                 # already contiguous: does nothing
        x.to(torch.float32)            # same dtype: does nothing
        torch.cat([x, x])
    assert labels(record(work)) == ["aten::linear", "aten::cat"]


def test_decoded_shapes_dtypes_and_lists():
    x = torch.randn(2, 3, 8, 8)
    conv_w = torch.randn(4, 3, 3, 3)

    def work():
        torch.nn.functional.conv2d(x, conv_w, stride=2, padding=1)
        torch.cat([torch.ones(2, 3), torch.ones(5, 3)])
        torch.add(torch.ones(3, dtype=torch.bfloat16), 1)
    rec = record(work)
    calls = {c.name: c for c in rec.sigs}
    conv = calls["conv2d"]
    assert conv.shapes[:2] == ((2, 3, 8, 8), (4, 3, 3, 3)) and conv.dtype == "torch.float32"
    assert calls["cat"].shapes == ((21,),) and calls["cat"].out_numel == 21
    assert calls["add"].dtype == "torch.bfloat16" and calls["add"].out_numel == 3


def test_output_sizes_worked_out_from_arguments_match_the_real_results():
    x, idx = torch.randn(6, 5), torch.tensor([0, 2, 2, 5])

    def work():
        torch.cat([x, x, x[:2]])
        torch.stack([x, x])
        x.repeat(2, 3)
        F.pad(x, (1, 2, 3, 0))
        torch.index_select(x, 0, idx)
        torch.index_select(x, 1, idx[:2])
        torch.gather(x, 1, torch.zeros(6, 2, dtype=torch.long))
        torch.zeros(3, 7)
        torch.full((2, 2, 2), 1.5)
        torch.add(torch.ones(4, 1), torch.ones(1, 3))          # broadcast both ways
        torch.ops.aten.embedding_dense_backward(torch.ones(4, 8), idx, 10, -1, False)
        F.gelu(x)
    def sizes(boxed: bool) -> list[tuple[str, int]]:
        rec = NativeRecorder(boxed_outputs=boxed).start()
        try:
            work()
        finally:
            recording = rec.stop()
        cols = recording.table()
        return [(recording.labels[s], recording.sigs[s].out_numel) for s in cols["sig"].tolist()]
    measured, inferred = sizes(True), sizes(False)
    assert len(measured) >= 12 and inferred == measured


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
       dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]))
def test_any_shape_and_floating_dtype_decode_as_torch_reports_them(shape, dtype):
    a = torch.zeros(shape, dtype=dtype)
    rec = record(lambda: torch.mul(a, a))
    (call,) = rec.sigs
    assert call.name == "mul" and call.shapes == (tuple(shape), tuple(shape))
    assert call.dtype == str(dtype) and call.out_numel == a.numel()


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def train_steps(model, opt, steps: int = 3):
    x = torch.randn(4, 8)
    for _ in range(steps):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


@pytest.mark.parametrize("kind", ["native", "python"])
def test_phases_modules_and_steps(kind):
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_steps(model, opt, 1)
    rec = record(lambda: train_steps(model, opt, 3), kind)
    cols = rec.table()
    phase, module = resolve_phases(rec, cols)
    names = np.array(rec.modules)[module]
    assert sorted(set(cols["step"].tolist())) == [1, 2, 3]
    bwd = phase == BACKWARD
    assert bwd.any() and (phase == FORWARD).any()
    assert {"Tiny.up", "Tiny.down"} <= set(names[bwd].tolist())     # backward finds its module
    assert (cols["t1"] >= cols["t0"]).all() and (np.diff(cols["t0"]) >= 0).all()
    assert cols["t0"].min() >= rec.t0


@pytest.mark.parametrize("kind", ["native", "python"])
def test_a_step_window_keeps_only_its_steps(kind):
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = start_recorder(kind, steps=(2, 3))
    assert rec.kind == kind
    if kind == "native":
        assert not rec.active                          # off until step 2 begins
    train_steps(model, opt, 5)
    if kind == "native":
        assert not rec.active                          # off again after step 3
    recording = rec.stop()
    cols = recording.table()
    assert sorted(set(cols["step"].tolist())) == [2, 3]
    assert {span[5] for span in recording.spans} == {2, 3}
    phase, module = resolve_phases(recording, cols)
    assert (phase == BACKWARD).any() and (cols["module"] > 0).any()


def test_both_recorders_give_the_same_forward_and_backward_flops():
    from device_model import instance
    inst = instance("trn2.48xlarge")
    flops = {}
    for kind in ("native", "python"):
        torch.manual_seed(0)
        model = Tiny()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        prof = recording_to_profile(record(lambda: train_steps(model, opt, 2), kind), inst, detail_steps=1)
        ops = prof.table("ops")
        flops[kind] = [float(ops["flops"][ops["phase"] == p].sum()) for p in (0, 1)]
    assert flops["native"] == flops["python"] and min(flops["native"]) > 0


def test_mapping_reports_progress_per_step():
    from device_model import instance
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ticks = []
    prof = recording_to_profile(record(lambda: train_steps(model, opt, 3)), instance("trn1.2xlarge"),
                                progress=lambda done, total: ticks.append((done, total)))
    assert ticks == [(0, 3), (1, 3), (2, 3), (3, 3)] and prof.rows("steps") == 3


def test_calls_from_another_thread_are_kept_while_collecting():
    a = torch.ones(16)
    rec = NativeRecorder().start()
    done = threading.Event()

    def worker():
        for _ in range(2000):
            torch.add(a, a)
        done.set()
    t = threading.Thread(target=worker)
    t.start()
    while not done.is_set():
        rec.flush()                     # collection races the worker's appends
    t.join()
    recording = rec.stop()
    cols = recording.table()
    adds = [i for i, s in enumerate(cols["sig"].tolist()) if recording.labels[s] == "aten::add"]
    assert len(adds) == 2000 and set(cols["tid"][adds].tolist()) == {1}


def test_an_operator_that_raises_leaves_recording_intact():
    x3 = torch.randn(2, 4, 8)
    w = torch.randn(8, 8)
    bad = torch.randn(8, 5)

    def work():
        F.linear(x3, w)                 # many callees: recording is switched off inside it
        with pytest.raises(RuntimeError):
            F.linear(x3, bad)
        torch.add(w, w)
    # the failed call is recorded too (it ran until it raised), and recording goes on after it
    assert labels(record(work)) == ["aten::linear", "aten::linear", "aten::add"]
    again = record(lambda: torch.mul(w, w))
    assert labels(again) == ["aten::mul"]


def test_library_is_cached_per_user_with_private_modes(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURONSCOPE_CACHE_DIR", str(tmp_path))
    path = native_build.build(torch)
    assert path.exists() and path.is_relative_to(tmp_path)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((path.parent / ".lock").stat().st_mode) == 0o600
    assert native_build.build(torch) == path                    # second call: no rebuild
    assert not list(path.parent.glob("*.tmp"))


def test_without_a_compiler_auto_falls_back_and_native_is_a_clear_error(tmp_path):
    env = {**os.environ, "NEURONSCOPE_CACHE_DIR": str(tmp_path), "CXX": "no-such-compiler",
           "PYTHONPATH": str(ROOT)}
    code = ("import sys; from profiler.capture.recorders import start_recorder\n"
            "r = start_recorder(sys.argv[1]); print(r.kind); r.stop()")
    auto = subprocess.run([sys.executable, "-c", code, "auto"], capture_output=True, text=True, env=env)
    assert auto.returncode == 0 and auto.stdout.strip() == "python"
    assert "no C++ compiler" in auto.stderr and auto.stderr.strip().count("\n") == 0
    script = tmp_path / "s.py"
    script.write_text("import torch\ntorch.ones(2) + 1\n")
    native = subprocess.run([sys.executable, "-m", "profiler.cli", "capture", "-s", str(tmp_path / "o"),
                             "--recorder", "native", "--", sys.executable, str(script)],
                            capture_output=True, text=True, env=env, cwd=ROOT)
    assert native.returncode == 2 and "Traceback" not in native.stderr
    assert "no C++ compiler" in native.stderr


def test_a_failing_build_is_reported_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURONSCOPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")                          # a compiler that always fails
    with pytest.raises(native_build.NativeUnavailable, match="building the native recorder failed"):
        native_build.build(torch)
    assert not list((tmp_path / "neuronscope" / "native").glob("*.so*"))


def test_recorder_choice_is_validated():
    with pytest.raises(ValueError, match="unknown recorder"):
        start_recorder("fast")


def test_every_data_moving_c10d_operator_maps_to_a_collective():
    from device_model import instance
    from device_model.program import Program
    from device_model.workloads.micro import place_ranks
    from profiler.capture.aten_map import AtenCall, add_call
    group = place_ranks(instance("trn2.48xlarge"), 2)
    names = sorted(n.split("::")[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("c10d::"))
    control = {"barrier", "monitored_barrier_", "check_for_nan"}       # move no tensor data
    assert {"allreduce_", "broadcast_"} <= set(names)
    unmapped = [n for n in names if n not in control
                and add_call(Program(), AtenCall(n, "c10d", ((1024,),), "torch.float32", 0), "matmult", group) != 1]
    assert unmapped == []


@pytest.mark.parametrize("kind", ["native", "python"])
def test_an_in_place_detach_costs_nothing_and_keeps_its_name(kind):
    """`zero_grad(set_to_none=False)` detaches every gradient in place: torch's `detach_` range
    (no namespace) and `aten::detach_` change metadata only, so nothing reaches the chip."""
    from device_model.program import Program
    from profiler.capture.aten_map import add_call
    g = torch.randn(64, 64)

    def work():
        g.detach_()
        g.mul_(2)
    rec = record(work, kind)
    assert not any(label.endswith("::") for label in rec.labels)
    mapped = {call.label: add_call(Program(), call, "none", None) for call in rec.sigs}
    assert mapped["aten::mul_"] == 1
    assert all(n == 0 for label, n in mapped.items() if "detach" in label), mapped
