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
    conv = calls["convolution"]           # conv2d is left to its callee, which has every argument
    assert conv.shapes[:2] == ((2, 3, 8, 8), (4, 3, 3, 3)) and conv.dtype == "torch.float32"
    assert conv.extra == ((2, 2), (1, 1), (1, 1), 0, (0, 0), 1, ())
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
        x[idx]                                                 # index: what the indices pick
        x[:, idx[:2]]
        x[idx[:2], idx[1:3]]
        x[idx.view(2, 2)]
        torch.arange(7)
        torch.arange(2, 11, 3)
        torch.arange(0.0, 1.0, 0.3)
        torch.arange(5, dtype=torch.float32)
    measured, inferred = output_sizes(work, boxed=True), output_sizes(work, boxed=False)
    assert len(measured) >= 20 and inferred == measured


def output_sizes(work, boxed: bool) -> list[tuple[str, int]]:
    """(operator, output elements) of each call `work` makes, the native recorder reading the
    outputs (`boxed`) or working them out from the arguments."""
    rec = NativeRecorder(boxed_outputs=boxed).start()
    try:
        work()
    finally:
        recording = rec.stop()
    return [(recording.labels[s], recording.sigs[s].out_numel)
            for s in recording.table()["sig"].tolist()]


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
    # the failed call is not kept (no kernel ran: it would be costed from its impossible
    # shapes), as the Python recorder never sees it return, and recording goes on after it
    assert labels(record(work)) == ["aten::linear", "aten::add"]
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


# --- what the chip mapping makes of real calls, through both recorders --------------------------

def simulated(fn, kind: str, lnc: int = 1, auto_cast: str = "matmult") -> list[tuple]:
    """(name, phase, FLOPs, HBM read, HBM write) of each chip operator `fn`'s calls map to, on a
    trn2 core of `lnc` physical cores (the ops table holds one physical core's share)."""
    from device_model import instance
    prof = recording_to_profile(record(fn, kind), instance("trn2.48xlarge", lnc=lnc),
                                detail_steps=0, auto_cast=auto_cast)
    ops = prof.table("ops")
    figures = (ops[c].tolist() for c in ("flops", "hbm_r", "hbm_w"))
    return list(zip(prof.text(ops["name_s"]), ops["phase"].tolist(), *figures))


def flops_of(rows, prefix: str) -> list[float]:
    return [f for name, _, f, _, _ in rows if name.startswith(prefix) and f > 0]


@pytest.mark.parametrize("kind", ["native", "python"])
def test_a_batched_matmul_counts_its_batch_once(kind):
    a3, b3, w = torch.randn(4, 32, 64), torch.randn(4, 64, 16), torch.randn(64, 16)
    a4, b4 = torch.randn(2, 4, 32, 64), torch.randn(2, 4, 64, 16)

    def work():
        with torch.no_grad():
            torch.matmul(a3, b3)                   # bmm of 4
            a4 @ b4                                # 8 matrices
            a3 @ w                                 # one weight: the batch folds into the rows
            a4[:, :1] @ b3                         # [2, 1] against [4]: broadcast to 8
    rows = simulated(work, kind)
    per_matrix = 2 * 32 * 64 * 16
    assert flops_of(rows, "aten::") == [4 * per_matrix, 8 * per_matrix, 4 * per_matrix,
                                        8 * per_matrix]


@pytest.mark.parametrize("kind", ["native", "python"])
def test_convolution_flops_follow_padding_groups_dilation_rank_and_transposition(kind):
    x, w3, wd = torch.randn(2, 8, 16, 16), torch.randn(16, 8, 3, 3), torch.randn(8, 1, 3, 3)

    def work():
        with torch.no_grad():
            F.conv2d(x, w3)                                    # 14x14 out
            F.conv2d(x, w3, padding=1)                         # 16x16
            F.conv2d(x, w3, padding="same")
            F.conv2d(x, w3, stride=2, padding=1)               # 8x8
            F.conv2d(x, wd, padding=1, groups=8)               # depthwise
            F.conv2d(x, w3, padding=2, dilation=2)             # 16x16, a 5x5 reach
            F.conv1d(torch.randn(2, 8, 64), torch.randn(16, 8, 3))                 # 62 out
            F.conv3d(torch.randn(1, 2, 4, 8, 8), torch.randn(4, 2, 3, 3, 3), padding=1)
            F.conv_transpose2d(torch.randn(2, 8, 8, 8), torch.randn(8, 16, 2, 2), stride=2)
    # batch x output positions x Cout x Cin/groups x kernel taps (transposed: input positions)
    macs = [2 * 196 * 16 * 72, 2 * 256 * 16 * 72, 2 * 256 * 16 * 72, 2 * 64 * 16 * 72,
            2 * 256 * 8 * 9, 2 * 256 * 16 * 72, 2 * 62 * 16 * 24, 256 * 4 * 54, 2 * 64 * 8 * 16 * 4]
    assert flops_of(simulated(work, kind), "aten::convolution") == [2 * m for m in macs]


@pytest.mark.parametrize("kind", ["native", "python"])
def test_convolution_backward_makes_only_the_gradients_asked_for(kind):
    conv = torch.nn.Conv2d(8, 16, 3, padding=1, bias=False)
    x = torch.randn(2, 8, 16, 16)
    forward = 2 * 2 * 256 * 16 * 72

    def work():
        conv(x).sum().backward()                              # a first layer: no input gradient
        conv(x.requires_grad_()).sum().backward()
    rows = [r for r in simulated(work, kind) if r[1] == BACKWARD]
    backward = flops_of(rows, "aten::convolution_backward")
    assert backward == [forward, forward, forward]
    # one chip operator per call under the call's name, so the call counts once: the weight's
    # gradient has a name of its own (it had the call's, which counted the call twice)
    names = [name for name, _, f, *_ in rows
             if name.startswith("aten::convolution_backward") and f > 0]
    assert sorted(names) == (["aten::convolution_backward"]
                             + 2 * ["aten::convolution_backward.dweight"])


@pytest.mark.parametrize("kind", ["native", "python"])
def test_fused_optimizers_read_and_write_every_tensor_of_theirs(kind):
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256, bias=False)
    adam = torch.optim.Adam(model.parameters(), fused=True)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    elements = 256 * 256 * 4                                  # FP32 bytes of the parameter

    def work():
        for opt in (adam, sgd):
            model(torch.randn(8, 256)).sum().backward()
            opt.step()
    rows = simulated(work, kind)
    moved = [(sum(r[3] for r in rows if r[0].startswith(name)),
              sum(r[4] for r in rows if r[0].startswith(name)))
             for name in ("aten::_fused_adam_", "aten::_fused_sgd_")]
    # Adam: param, grad, exp_avg, exp_avg_sq read, all but grad written; SGD: param, grad and
    # momentum buffer
    assert moved == [(4 * elements, 3 * elements), (3 * elements, 2 * elements)]


@pytest.mark.parametrize("kind", ["native", "python"])
def test_cross_attention_backward_uses_the_key_length(kind):
    q = torch.randn(1, 2, 128, 64, requires_grad=True)
    kv = torch.randn(1, 2, 16, 64, requires_grad=True)
    rows = simulated(lambda: F.scaled_dot_product_attention(q, kv, kv).sum().backward(), kind)
    per_matmul = 2 * 2 * 128 * 16 * 64
    assert sum(f for _, ph, f, _, _ in rows if ph == FORWARD) == 2 * per_matmul
    assert sum(f for _, ph, f, _, _ in rows if ph == BACKWARD) == 4 * per_matmul


@pytest.mark.parametrize("kind", ["native", "python"])
def test_attention_with_a_wider_value_head_counts_p_v_over_it(kind):
    """P V is [L, S] @ [S, Dv]: it was counted over the query's head dim D."""
    q = torch.randn(2, 4, 128, 32, requires_grad=True)
    k = torch.randn(2, 4, 256, 32, requires_grad=True)
    v = torch.randn(2, 4, 256, 128, requires_grad=True)
    rows = simulated(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward(), kind)
    qk, pv = 2 * 8 * 128 * 256 * 32, 2 * 8 * 128 * 256 * 128
    assert sum(f for _, ph, f, _, _ in rows if ph == FORWARD) == qk + pv
    assert sum(f for _, ph, f, _, _ in rows if ph == BACKWARD) == 2 * (qk + pv)


@pytest.mark.parametrize("kind", ["native", "python"])
def test_causal_attention_masks_its_scores(kind):
    """Unfused, as neuronx-cc compiles the decomposed graph: the matmuls stay whole and the
    softmax applies the mask (a GpSimd pass); is_causal=False has no mask."""
    from device_model.program import Program
    from profiler.capture.aten_map import add_call
    q = torch.randn(1, 2, 128, 64)

    def work():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, q, q)
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
    prog = Program()
    for call in (c for c in record(work, kind).sigs if "attention" in c.name):
        add_call(prog, call, "matmult", None)
    assert [op.get("causal") for op in prog.ops if op.kind == "softmax"] == [False, True]


def test_attention_causal_positions_match_torch_schemas():
    from profiler.capture.aten_map import ATTENTION_CAUSAL
    checked = 0
    for name, at in ATTENTION_CAUSAL.items():
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
        for schema in (s for s in schemas if not s.overload_name):
            arg = schema.arguments[at].name
            assert arg in ("is_causal", "custom_mask_type"), (name, schema)
            checked += 1
    assert checked >= 8


@pytest.mark.parametrize("kind", ["native", "python"])
def test_autocast_is_recorded_at_the_dtype_the_kernel_runs_at(kind):
    x, w = torch.randn(8, 16), torch.randn(4, 16)

    def work():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            F.linear(x, w)
    calls = [c for c in record(work, kind).sigs if c.dtype]
    casts = [c for c in calls if c.name == "_to_copy"]
    matmuls = [c for c in calls if c.name in ("linear", "mm", "addmm")]
    assert len(casts) == 2 and {c.out_dtype for c in casts} == {"torch.bfloat16"}
    assert [c.dtype for c in matmuls] == ["torch.bfloat16"]


@pytest.mark.parametrize("kind", ["native", "python"])
def test_elementwise_reads_what_it_uses_and_writes_at_the_results_width(kind):
    n = 1 << 16
    x, y = torch.randn(n), torch.randn(n)
    xb = torch.randn(n, dtype=torch.bfloat16)
    xi = torch.arange(n)

    def work():
        with torch.no_grad():
            x + y
            x + 1.0                   # a scalar operand is not a second tensor to read
            x * 2
            x > 0                     # the mask is one byte an element
            x.to(torch.bfloat16)      # a conversion reads one width and writes the other
            xb.float()
            xi + 1                    # int64 runs as int32, and no auto-cast makes it BF16
    rows = [(r, w) for _, _, _, r, w in simulated(work, kind, auto_cast="all")
            if r or w][-7:]
    assert rows == [(4 * n, 2 * n), (2 * n, 2 * n), (2 * n, 2 * n), (2 * n, n), (2 * n, 2 * n),
                    (2 * n, 2 * n), (4 * n, 4 * n)]


@pytest.mark.parametrize("kind", ["native", "python"])
def test_a_whole_tensor_reduction_is_read_once_at_lnc_2(kind):
    x = torch.randn(1 << 16)

    def work():
        with torch.no_grad():
            x.sum()
            x.view(4, -1).amax(-1)
    reads = [r for name, _, _, r, _ in simulated(work, kind, lnc=2)
             if name in ("aten::sum", "aten::amax")]
    assert [2 * r for r in reads] == [4 * x.numel()] * 2       # each physical core reads its half


def _two_optimizers_loop(iterations: int) -> None:
    torch.manual_seed(0)
    model = Tiny()
    o1 = torch.optim.SGD(model.up.parameters(), lr=0.1)
    o2 = torch.optim.SGD(model.down.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    for _ in range(iterations):
        for _ in range(2):                                    # gradient accumulation
            model(x).square().mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        o1.step()
        o2.step()
        o1.zero_grad()
        o2.zero_grad()


@pytest.mark.parametrize("kind", ["native", "python"])
def test_the_optimizers_of_one_iteration_end_one_step(kind):
    rec = record(lambda: _two_optimizers_loop(3), kind)
    assert rec.steps() == {1, 2, 3} and len(rec.boundaries) == 3
    steps_of = {}
    for name, _, _, _, _, step in rec.spans:
        if name.startswith("Optimizer.step"):
            steps_of.setdefault(step, []).append(name)
    assert {s: len(v) for s, v in steps_of.items()} == {1: 2, 2: 2, 3: 2}
    cols = rec.table()
    opt_steps = cols["step"][cols["phase"] == 2]
    assert sorted(set(opt_steps.tolist())) == [1, 2, 3]


@pytest.mark.parametrize("kind", ["native", "python"])
def test_a_step_window_keeps_both_optimizers_of_its_step(kind):
    rec = start_recorder(kind, steps=(2, 2))
    _two_optimizers_loop(4)
    recording = rec.stop()
    cols = recording.table()
    assert recording.steps() == {2}
    assert sum(1 for s in recording.spans if s[0].startswith("Optimizer.step")) == 2
    assert (cols["phase"] == 2).any()


@pytest.mark.parametrize("kind", ["native", "python"])
def test_calls_outside_the_forward_pass_are_other(kind):
    """Parameter init and input creation before the first forward, and gradient clipping
    between the backward and the optimizer, are no forward work."""
    from profiler.capture.recording import OTHER

    def work():
        torch.manual_seed(0)
        model = Tiny()                                        # its init: uniform_
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(4, 8)
        model(x).square().mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    rec = record(work, kind)
    cols = rec.table()
    phase, _ = resolve_phases(rec, cols)
    names = [rec.labels[s] for s in cols["sig"].tolist()]
    other = {n for n, p in zip(names, phase.tolist()) if p == OTHER}
    forward = {n for n, p in zip(names, phase.tolist()) if p == FORWARD}
    assert "aten::uniform_" in other and ({"aten::randn", "aten::normal_"} & other)
    assert "aten::_foreach_norm" in other or "aten::linalg_vector_norm" in other
    assert {"aten::linear", "aten::addmm"} & forward
    assert not {"aten::uniform_", "aten::_foreach_norm"} & forward


@pytest.mark.parametrize("kind", ["native", "python"])
def test_torch_compile_compiles_under_the_recorder(kind):
    """The hooks step aside while Dynamo traces, so the script runs compiled as it would
    uncaptured; the recorders see the compiled code's library calls (an extern matmul), and the
    native one none of the fake-tensor calls the compilation makes."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    model = torch.compile(torch.nn.Linear(64, 64))
    x = torch.randn(16, 64)

    def work():
        with torch.no_grad():
            model(x)
            model(x)
    rows = simulated(work, kind)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    assert flops_of(rows, "aten::") == [2 * 16 * 64 * 64] * 2


def test_on_a_torch_without_compile_support_the_python_recorder_says_compile_runs_eager(monkeypatch):
    """Before torch 2.9 Dynamo skips every frame under a dispatch mode: one line says so when
    the script first compiles, and torch.compile is itself again after the recording."""
    from torch.utils._python_dispatch import TorchDispatchMode
    original = torch.compile
    monkeypatch.delattr(TorchDispatchMode, "ignore_compile_internals")
    notes = []
    rec = Recorder(note=notes.append).start()
    try:
        torch.compile(torch.nn.Linear(2, 2))
        torch.compile(torch.nn.Linear(2, 2))
    finally:
        rec.stop()
    assert len(notes) == 1 and "runs eager" in notes[0] and torch.compile is original


@pytest.mark.parametrize("kind", ["native", "python"])
def test_a_compiled_optimizer_step_still_ends_its_step(kind):
    import torch._dynamo
    torch._dynamo.reset()
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    step = torch.compile(opt.step)

    def work():
        for _ in range(3):
            model(torch.randn(4, 16)).sum().backward()
            step()
            opt.zero_grad()
    assert record(work, kind).steps() == {1, 2, 3}


@pytest.mark.parametrize("kind", ["native", "python"])
def test_three_tensor_elementwise_ops_read_every_tensor(kind):
    """AdamW without foreach: `lerp_(grad, w)` reads two tensors and `addcdiv_` three; they
    were counted as one and two."""
    p, m, g, d = (torch.randn(256, 256) for _ in range(4))
    size = 256 * 256 * 4

    def work():
        with torch.no_grad():
            m.lerp_(g, 0.1)
            p.addcdiv_(m, d, value=-0.01)
    rows = simulated(work, kind)
    read = {name: sum(r for n, _, _, r, _ in rows if n.startswith(name))
            for name in ("aten::lerp_", "aten::addcdiv_")}
    assert read == {"aten::lerp_": 2 * size, "aten::addcdiv_": 3 * size}
