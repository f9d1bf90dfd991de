"""What the chip mapping makes of the aten kernels of convolutional, recurrent and loss code,
captured from real PyTorch calls through both recorders: batch/group/instance/layer norms and their
gradients, oneDNN's LSTM layers, pooling and upsampling and their gradients, point losses, sort,
the NLL gradients, GradScaler's unscale, and ops that do no device work. Figures are hand counts:
FP32 tensors of E elements read or written are 4·E bytes."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from profiler.capture.recording import BACKWARD, FORWARD  # noqa: E402
from profiler.capture.to_profile import recording_to_profile  # noqa: E402
from test_native_recorder import record  # noqa: E402,F401  (test_capture_reductions takes it here)

KINDS = ["native", "python"]
F32 = 4


def simulated(fn, kind: str) -> list[tuple]:
    """(name, phase, FLOPs, HBM read, HBM write) of each chip operator `fn`'s calls (or a
    recording's) map to."""
    from device_model import instance
    recording = fn if hasattr(fn, "sigs") else record(fn, kind)
    prof = recording_to_profile(recording, instance("trn2.48xlarge", lnc=1), detail_steps=0,
                                auto_cast="none")
    ops = prof.table("ops")
    cols = (ops[c].tolist() for c in ("phase", "flops", "hbm_r", "hbm_w"))
    return list(zip(prof.text(ops["name_s"]), *cols))


def alone(call) -> float:
    """Device seconds of one call's chip operators run on their own."""
    from device_model import instance
    from device_model.program import Program
    from profiler.capture.aten_map import add_call
    prog = Program()
    add_call(prog, call, "none", None)
    return instance("trn2.48xlarge", lnc=1).run(prog).timeline.wall


def of(rows, *names: str, phase: int | None = None) -> dict[str, tuple[float, float, float]]:
    """(FLOPs, HBM read, HBM write) per chip operator name of the aten ops `names` (the op's own
    row and its `.part` rows), in `phase` if given."""
    out: dict[str, list[float]] = {}
    for name, ph, flops, r, w in rows:
        if name.split(".")[0] in names and (phase is None or ph == phase):
            acc = out.setdefault(name, [0.0, 0.0, 0.0])
            for i, v in enumerate((flops, r, w)):
                acc[i] += v
    return {k: tuple(v) for k, v in out.items()}


def partials(rows: int, cols: int) -> int:
    """Partial sums a reduction of `rows` rows writes: fewer rows than the 128 partitions are
    split into partial rows (by the largest divisor of `cols` that fits)."""
    if rows >= 128:
        return rows
    return rows * max(d for d in range(1, min(cols, 128 // rows) + 1) if cols % d == 0)


# --- batch, group, instance and layer norm -------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_batch_norm_is_per_channel_statistics_and_one_pass_whatever_the_layout(kind):
    """[N, C, 1, W] and [N, C, W, 1] hold the same elements: the same statistics per channel over
    N x H x W and the same normalizing pass, so the same bytes and device time (a layer norm over
    the last dim made the second 60x slower). Its gradient is mapped too (the native recorder
    dropped it)."""
    e, c = 8 * 16 * 64, 16
    figures, times = [], []
    for shape in ((8, c, 1, 64), (8, c, 64, 1)):
        x = torch.randn(shape, requires_grad=True)
        rec = record(lambda: F.batch_norm(x, None, None, training=True).sum().backward(), kind)
        rows = simulated(rec, kind)
        figures.append(of(rows, "aten::native_batch_norm", "aten::native_batch_norm_backward"))
        times.append([alone(call) for call in rec.sigs if "batch_norm" in call.name])
    assert figures[0] == figures[1] and times[0] == times[1]
    stats = partials(c, e // c)
    assert figures[0] == {
        "aten::native_batch_norm.stats": (0, F32 * e, F32 * stats),        # mean, var per channel
        "aten::native_batch_norm": (0, F32 * e, F32 * e),                   # normalize
        "aten::native_batch_norm_backward.stats": (0, 2 * F32 * e, F32 * partials(c, 2 * e // c)),
        "aten::native_batch_norm_backward": (0, 2 * F32 * e, F32 * e)}      # dx from x and dy


@pytest.mark.parametrize("kind", KINDS)
def test_batch_norm_in_eval_normalizes_without_statistics(kind):
    bn = torch.nn.BatchNorm2d(16).eval()
    x = torch.randn(4, 16, 8, 8)
    with torch.no_grad():
        rows = simulated(lambda: bn(x), kind)
    e = x.numel()
    assert of(rows, "aten::native_batch_norm") == {"aten::native_batch_norm": (0, F32 * e, F32 * e)}


@pytest.mark.parametrize("kind", KINDS)
def test_instance_norm_is_a_batch_norm_per_sample_and_channel(kind):
    x = torch.randn(4, 16, 8, 8)
    with torch.no_grad():
        rows = simulated(lambda: F.instance_norm(x), kind)
    e = x.numel()
    assert of(rows, "aten::native_batch_norm") == {
        "aten::native_batch_norm.stats": (0, F32 * e, F32 * partials(64, 64)),   # 4 x 16 sets
        "aten::native_batch_norm": (0, F32 * e, F32 * e)}


@pytest.mark.parametrize("kind", KINDS)
def test_group_norm_is_per_group_statistics_and_its_gradient_is_mapped(kind):
    gn = torch.nn.GroupNorm(4, 16)
    x = torch.randn(2, 16, 8, 8, requires_grad=True)
    rows = simulated(lambda: gn(x).sum().backward(), kind)
    e = x.numel()
    # the native recorder keeps the composite group_norm, the Python one what it calls
    name = "aten::group_norm" if kind == "native" else "aten::native_group_norm"
    assert of(rows, name, phase=FORWARD) == {
        f"{name}.stats": (0, F32 * e, F32 * partials(2 * 4, e // 8)),     # per sample and group
        name: (0, F32 * e, F32 * e)}
    assert of(rows, "aten::native_group_norm_backward") == {
        "aten::native_group_norm_backward.stats": (0, 2 * F32 * e, F32 * partials(32, 2 * 64)),
        "aten::native_group_norm_backward": (0, 2 * F32 * e, F32 * e)}


@pytest.mark.parametrize("kind", KINDS)
def test_layer_norm_backward_costs_a_backward(kind):
    """Row sums of dy and dy x-hat, dx from x and dy, and the weight and bias gradients summed
    down the columns: x and dy read three times, dx written (it was costed as a forward)."""
    ln = torch.nn.LayerNorm(64)
    x = torch.randn(8, 32, 64, requires_grad=True)
    rows = simulated(lambda: ln(x).sum().backward(), kind)
    e, tokens = x.numel(), 8 * 32
    assert of(rows, "aten::native_layer_norm_backward") == {
        "aten::native_layer_norm_backward.stats": (0, 2 * F32 * e, F32 * tokens),
        "aten::native_layer_norm_backward": (0, 2 * F32 * e, F32 * e),
        "aten::native_layer_norm_backward.dweight": (0, 2 * F32 * e,
                                                     F32 * partials(64, 2 * tokens))}


@pytest.mark.parametrize("kind", KINDS)
def test_layer_norm_normalizes_over_its_whole_normalized_shape(kind):
    from device_model.program import Program
    from profiler.capture.aten_map import add_call
    x = torch.randn(4, 8, 16)
    with torch.no_grad():
        rec = record(lambda: F.layer_norm(x, (8, 16)), kind)
    calls = [c for c in rec.sigs if "layer_norm" in c.name]
    prog = Program()
    add_call(prog, calls[0], "none", None)
    assert [(op.kind, op.get("rows"), op.get("hidden")) for op in prog.ops] == [
        ("layernorm", 4, 128)]


# --- recurrent layers -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_lstm_layers_are_their_gate_matmuls_and_the_backward_twice_them(kind):
    """nn.LSTM on CPU runs oneDNN's mkldnn_rnn_layer: per time step input x weight_ih (4H x I)
    and hidden x weight_hh (4H x H); it was 0 FLOPs (its callees kept instead, or unmapped)."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(32, 64, batch_first=True)
    x = torch.randn(8, 20, 32, requires_grad=True)
    rows = simulated(lambda: lstm(x)[0].sum().backward(), kind)
    forward = 2 * 8 * 20 * (32 + 64) * 4 * 64
    assert sum(r[2] for r in rows if r[1] == FORWARD) == forward
    assert sum(r[2] for r in rows if r[1] == BACKWARD) == 2 * forward
    if torch.backends.mkldnn.is_available():
        names = {r[0] for r in rows}
        assert {"aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer.recurrent",
                "aten::mkldnn_rnn_layer.gates", "aten::mkldnn_rnn_layer.cell",
                "aten::mkldnn_rnn_layer_backward", "aten::mkldnn_rnn_layer_backward.recurrent",
                "aten::mkldnn_rnn_layer_backward.dweight"} <= names
        gates = of(rows, "aten::mkldnn_rnn_layer")["aten::mkldnn_rnn_layer.gates"]
        assert gates == (0, F32 * 160 * 5 * 64, F32 * 160 * 5 * 64)     # 4 gates and tanh(c)


def _lstm_layers(T: int, B: int, kind: str):
    """The captured mkldnn_rnn_layer calls (forward, backward) of an LSTM(32, 64) on [T, B, 32]."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(32, 64)
    x = torch.randn(T, B, 32, requires_grad=True)
    rec = record(lambda: lstm(x)[0].sum().backward(), kind)
    return [c for c in rec.sigs if c.name.startswith("mkldnn_rnn_layer")]


@pytest.mark.parametrize("kind", KINDS)
def test_lstm_recurrence_is_a_chain_of_dependent_steps(kind):
    """The input projection is one matmul over the sequence; each time step's recurrent matmul
    [B, H] @ [H, 4H] waits for the previous step's cell update (the backward the same in
    reverse). At a fixed T·B the FLOPs are the same, but 64 steps of 8 rows take far longer than
    8 steps of 64 rows."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN: nn.LSTM does not run mkldnn_rnn_layer")
    from device_model.program import Program
    from profiler.capture.aten_map import add_call
    I, H, G = 32, 64, 4
    walls = {}
    for T, B in ((8, 64), (64, 8)):
        calls = _lstm_layers(T, B, kind)
        assert [c.name for c in calls] == ["mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"]
        fwd, bwd = (_ops(add_call, Program, c) for c in calls)
        def flops(ops) -> int:
            return sum(2 * o.get("m") * o.get("k") * o.get("n") * o.get("batch")
                       for o in ops if o.kind == "matmul")
        assert flops(fwd) == 2 * T * B * (I + H) * G * H
        assert flops(bwd) == 2 * flops(fwd)
        steps = [i for i, o in enumerate(fwd) if o.name.endswith(".recurrent")]
        assert len(steps) == T
        assert all((fwd[i].get("m"), fwd[i].get("k"), fwd[i].get("n")) == (B, H, G * H)
                   for i in steps)
        assert fwd[0].name == "aten::mkldnn_rnn_layer" and fwd[0].get("m") == T * B
        for prev, i in zip(steps, steps[1:]):             # each step waits for the one before
            assert fwd[i].deps == (0, i - 1) and fwd[i - 1].name.endswith(".cell") and i - 1 > prev
        assert sum(o.name.endswith(".recurrent") for o in bwd) == T
        walls[T] = sum(alone(c) for c in calls)
    assert walls[64] > 4 * walls[8]


def test_a_long_sequence_is_grouped_into_256_steps_with_the_same_flops():
    from device_model.program import Program
    from profiler.capture.aten_layers import RNN_MAX_STEPS, _rnn_layer
    T, B, I, H = 1000, 3, 16, 32
    s = ((T, B, I), (4 * H, I), (4 * H, H), (4 * H,), (4 * H,), (B, H), (B, H))
    prog = Program()
    _rnn_layer(prog, s, "fp32", "fp32", "lstm", backward=False)
    steps = [o for o in prog.ops if o.name == "lstm.recurrent"]
    assert len(steps) == RNN_MAX_STEPS == 256
    assert sum(o.get("m") for o in steps) == T * B
    assert sum(2 * o.get("m") * o.get("k") * o.get("n") for o in prog.ops
               if o.kind == "matmul") == 2 * T * B * (I + H) * 4 * H


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("act, grad", [("silu", "silu"), ("mish", "mish"), ("gelu", "gelu"),
                                       ("relu", "threshold"), ("tanh", "tanh"),
                                       ("sigmoid", "sigmoid")])
def test_activation_gradients_read_dy_and_x_and_write_dx(kind, act, grad):
    """dx = f'(x or y) · dy: both tensors read (ReLU's gradient is aten::threshold_backward)."""
    h = torch.randn(32, 64, requires_grad=True)
    fn = getattr(torch, act) if act in ("tanh", "sigmoid") else getattr(F, act)
    rows = simulated(lambda: fn(h).sum().backward(), kind)
    e = h.numel()
    assert of(rows, f"aten::{grad}_backward", phase=BACKWARD) == {
        f"aten::{grad}_backward": (0, 2 * F32 * e, F32 * e)}


@pytest.mark.parametrize("kind", KINDS)
def test_gru_still_maps_through_its_linear_layers(kind):
    torch.manual_seed(0)
    gru = torch.nn.GRU(32, 64, batch_first=True)
    x = torch.randn(8, 20, 32)
    rows = simulated(lambda: gru(x)[0].sum().backward(), kind)
    assert sum(r[2] for r in rows if r[1] == FORWARD) == 2 * 8 * 20 * (32 + 64) * 3 * 64
    assert sum(r[2] for r in rows if r[1] == BACKWARD) > 0


# --- pooling, upsampling, losses, sort ------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pool", ["max", "avg"])
def test_pooling_and_its_gradient_keep_their_names(kind, pool):
    """The pooling reads each window once and writes the result; its gradient writes the
    input-sized gradient (it showed as a zero_ of it)."""
    x = torch.randn(4, 16, 32, 32, requires_grad=True)
    fn = F.max_pool2d if pool == "max" else F.avg_pool2d
    rows = simulated(lambda: fn(x, 2).sum().backward(), kind)
    e = x.numel()
    name = "aten::max_pool2d_with_indices" if pool == "max" else "aten::avg_pool2d"
    assert of(rows, name) == {name: (0, F32 * e, F32 * e // 4)}
    assert of(rows, f"{name}_backward") == {f"{name}_backward": (0, F32 * e, F32 * e)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_interpolate_and_its_gradient_keep_their_names(kind, mode):
    """F.interpolate by a scale factor calls upsample's `.vec` overload (no output size), which
    the native recorder looks through to the kernel it calls; it showed as clone/copy_/zero_."""
    x = torch.randn(4, 16, 16, 16, requires_grad=True)
    rows = simulated(lambda: F.interpolate(x, scale_factor=2, mode=mode).sum().backward(), kind)
    e = x.numel()
    name = f"aten::upsample_{mode}2d"
    assert of(rows, name) == {name: (0, F32 * 4 * e, F32 * 4 * e)}                # one pass
    assert of(rows, f"{name}_backward") == {f"{name}_backward": (0, F32 * 4 * e, F32 * e)}


@pytest.mark.parametrize("kind", KINDS)
def test_mse_loss_and_its_gradient(kind):
    x, y = torch.randn(4, 16, 32, requires_grad=True), torch.randn(4, 16, 32)
    rows = simulated(lambda: F.mse_loss(x, y).backward(), kind)
    e = x.numel()
    assert of(rows, "aten::mse_loss") == {"aten::mse_loss": (0, 2 * F32 * e, F32 * e),
                                          "aten::mse_loss.sum": (0, F32 * e, F32 * 128)}
    assert of(rows, "aten::mse_loss_backward") == {
        "aten::mse_loss_backward": (0, 2 * F32 * e, F32 * e)}


@pytest.mark.parametrize("kind", KINDS)
def test_sort_is_log2_n_compare_passes_along_its_dim(kind):
    x = torch.randn(4, 16, 64)
    rows = simulated(lambda: torch.sort(x, dim=1), kind)
    passes = 4 * x.numel()                                                      # log2(16)
    assert of(rows, "aten::sort") == {"aten::sort": (0, 2 * F32 * passes, F32 * passes)}


@pytest.mark.parametrize("kind", KINDS)
def test_nll_gradients_write_the_whole_logits_gradient(kind):
    logits = torch.randn(64, 1000, requires_grad=True)
    seg = torch.randn(2, 8, 16, 16, requires_grad=True)

    def work():
        F.cross_entropy(logits, torch.randint(0, 1000, (64,))).backward()
        F.cross_entropy(seg, torch.randint(0, 8, (2, 16, 16))).backward()
    rows = simulated(work, kind)
    assert of(rows, "aten::nll_loss_backward") == {
        "aten::nll_loss_backward": (0, 0, F32 * 64 * 1000)}
    assert of(rows, "aten::nll_loss2d_backward") == {
        "aten::nll_loss2d_backward": (0, 0, F32 * seg.numel())}


# --- sizes and ops of no device work --------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_amp_unscale_reads_and_writes_every_gradient(kind):
    grads = [torch.randn(256, 256), torch.randn(256)]
    found, inv = torch.zeros(1), torch.full((1,), 0.5)
    unscale = torch._amp_foreach_non_finite_check_and_unscale_
    rows = simulated(lambda: unscale(grads, found, inv), kind)
    e = sum(g.numel() for g in grads)
    name = "aten::_amp_foreach_non_finite_check_and_unscale_"
    assert of(rows, name) == {name: (0, F32 * e, F32 * e)}


@pytest.mark.parametrize("kind", KINDS)
def test_cos_is_a_scalar_engine_function_and_host_asserts_cost_nothing(kind):
    from device_model.program import Program
    from profiler.capture.aten_map import add_call
    x = torch.randn(1024)

    def work():
        torch.cos(x)
        torch._assert_async(torch.tensor(True))
        torch.multinomial(torch.rand(4, 10), 1)
    rec = record(work, kind)
    mapped = {c.label: [(op.kind, op.get("func")) for op in _ops(add_call, Program, c)]
              for c in rec.sigs}
    assert mapped["aten::cos"] == [("activation", "sin")]
    assert mapped.get("aten::_assert_async", []) == []


def _ops(add_call, Program, call):
    prog = Program()
    add_call(prog, call, "none", None)
    return prog.ops


@pytest.mark.parametrize("kind", KINDS)
def test_norms_under_cpu_autocast_are_kept(kind):
    """layer_norm has autocast kernels for CUDA and others but not CPU: under CPU autocast its
    autocast key falls through and it runs as it is. The native recorder looked through it (and
    through native_layer_norm) and kept nothing: a bf16 GPT had no layer-norm forward."""
    ln = torch.nn.LayerNorm(64)
    x = torch.randn(8, 16, 64)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        rows = simulated(lambda: ln(x), kind)
    e = x.numel()
    assert [(n, r, w) for n, _, _, r, w in rows if "layer_norm" in n] == [
        ("aten::layer_norm" if kind == "native" else "aten::native_layer_norm", F32 * e, F32 * e)]
