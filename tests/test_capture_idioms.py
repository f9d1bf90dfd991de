"""Capture of PyTorch idioms an audit found miscounted: calls that raised costed as work (the
native recorder; a non-reentrant checkpoint's recompute stops by raising), complex tensors at
the wrong width with their views costed as copies, and composite operators under
inference_mode that the Python recorder kept whole with no mapping (`cross_entropy_loss`)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from tests.test_native_recorder import simulated  # noqa: E402

KINDS = ["native", "python"]


def hbm(rows, prefix: str) -> float:
    return sum(r + w for name, _, _, r, w in rows if name.startswith(prefix))


@pytest.mark.parametrize("kind", KINDS)
def test_a_call_that_raised_is_not_costed(kind):
    a, b, w = torch.randn(512, 1024), torch.randn(2048, 512), torch.randn(1024, 512)

    def work():
        with torch.no_grad():
            for _ in range(3):
                for bad in (lambda: torch.mm(a, b), lambda: F.linear(a, b)):
                    try:
                        bad()
                    except RuntimeError:
                        pass
            a @ w
    assert sum(f for _, _, f, _, _ in simulated(work, kind)) == 2 * 512 * 1024 * 512


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_reentrant_checkpoint_recomputes_only_what_its_backward_needs(kind):
    """The recompute stops (by raising) once the saved tensors it needs exist: the second
    Linear of a block is not run again, so 12 recomputed matmuls, not 24."""
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))
                                 for _ in range(4))
    x = torch.randn(256, 256, requires_grad=True)

    def work():
        h = x
        for block in blocks:
            h = checkpoint(block, h, use_reentrant=False)
        h.sum().backward()
    mm = 2 * 256 * 256 * 256
    rows = simulated(work, kind)
    total = sum(f for _, _, f, _, _ in rows)
    # forward 8, recompute 4 (the first Linear of each block), backward 8 x 2 (dx and dW; the
    # first block's input needs its dx too)
    assert total == pytest.approx((8 + 4 + 16) * mm, rel=0.02)


@pytest.mark.parametrize("kind", KINDS)
def test_complex_tensors_run_as_their_real_parts_and_their_views_are_free(kind):
    x = torch.randn(1024, 1024, 2)
    f = torch.polar(torch.ones(1024, 1024), torch.randn(1024, 1024))

    def work():
        with torch.no_grad():
            y = torch.view_as_complex(x) * f          # complex64: 8 bytes per element
            torch.view_as_real(y)
    rows = simulated(work, kind)
    assert hbm(rows, "aten::mul") == 3 * 1024 * 1024 * 8
    assert hbm(rows, "aten::view_as") == 0


@pytest.mark.parametrize("kind", KINDS)
def test_cross_entropy_under_inference_mode_is_its_log_softmax_and_nll(kind):
    logits, target = torch.randn(4096, 1000), torch.randint(0, 1000, (4096,))

    def work():
        with torch.inference_mode():
            F.cross_entropy(logits, target)
    rows = simulated(work, kind)
    assert hbm(rows, "aten::") >= 2 * 4096 * 1000 * 4          # the logits read, log-probs written
    assert hbm(rows, "aten::_log_softmax") + hbm(rows, "aten::log_softmax") >= 2 * 4096 * 1000 * 4


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return 2 * x * grad


@pytest.mark.parametrize("kind", KINDS)
def test_a_custom_function_applied_to_the_inputs_is_forward_work(kind):
    """A custom autograd Function applied before any module's forward is a forward pass: the
    native recorder labelled its work `other` (its calls carry no autograd sequence number),
    the Python recorder `forward`."""
    from profiler.capture.recording import FORWARD, OTHER
    from profiler.capture.to_profile import resolve_phases
    from tests.test_native_recorder import record
    layer = torch.nn.Linear(64, 64)

    def work():
        x = torch.randn(32, 64, requires_grad=True)
        layer(_Square.apply(x)).sum().backward()
    recording = record(work, kind)
    cols = recording.table()
    phase, _ = resolve_phases(recording, cols)
    names = [recording.labels[s] for s in cols["sig"].tolist()]
    first_mul = names.index("aten::mul")
    assert phase[first_mul] == FORWARD
    assert phase[names.index("aten::randn" if kind == "python" else "aten::normal_")] == OTHER
    assert "_Square.apply" in [s[0] for s in recording.spans]
    assert torch.autograd.Function.apply.__func__.__name__ == "apply"
    assert not hasattr(torch.autograd.Function.apply.__func__, "__wrapped_original__")


@pytest.mark.parametrize("kind", KINDS)
def test_a_scripted_models_backward_counts_its_weight_gradients_whole(kind):
    """The TorchScript interpreter's ranges pass values from below a call's arguments
    (`aten::matmul [[256], [256, 64], [64, 256]]`): the native recorder read the first two and
    costed a weight gradient as a [256] @ [256, 64] matmul, 1/64 of its FLOPs."""
    torch.manual_seed(0)
    model = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                                 torch.nn.Linear(256, 256)))
    x = torch.randn(64, 256)

    def work():
        for _ in range(3):       # the profiling executor differentiates the graph after a run
            model(x).pow(2).mean().backward()
    mm = 2 * 64 * 256 * 256
    rows = simulated(work, kind)
    # per run: two forward matmuls; backward: the second layer's dx, both layers' dW
    assert sum(f for name, _, f, _, _ in rows if "mm" in name or "matmul" in name
               or "linear" in name) == pytest.approx(3 * 5 * mm, rel=0.01)


@pytest.mark.parametrize("kind", KINDS)
def test_an_encoder_layer_in_eval_takes_the_path_a_neuroncore_runs(kind):
    """In inference nn.TransformerEncoderLayer ran PyTorch's fused CPU kernel, which the Python
    recorder kept as one call of no FLOPs. On an XLA device the layer runs op by op; the capture
    takes that path, and the script's own setting is back afterwards."""
    torch.manual_seed(0)
    batch, seq, dim, ffn = 2, 16, 32, 64
    layer = torch.nn.TransformerEncoderLayer(dim, 4, ffn, batch_first=True).eval()
    x = torch.randn(batch, seq, dim)

    def work():
        with torch.no_grad():
            layer(x)
    rows = simulated(work, kind)
    tokens = batch * seq
    expected = 2 * tokens * dim * (3 * dim + dim + 2 * ffn) + 2 * 2 * batch * seq * seq * dim
    assert sum(f for _, _, f, _, _ in rows) == pytest.approx(expected, rel=0.05)
    assert not any("_transformer_encoder_layer_fwd" in name for name, *_ in rows)
    assert torch.backends.mha.get_fastpath_enabled()


def test_calls_whose_arguments_cannot_be_read_are_counted_not_silently_dropped():
    """The Python recorder keeps such a call by name with no shapes, so its work is missing:
    the profile now says how many, in its meta and as a note (it said nothing)."""
    from device_model import instance
    from profiler.capture.to_profile import recording_to_profile
    from tests.test_native_recorder import record

    class Opaque(torch.Tensor):        # a subclass whose dtype cannot be read
        @property
        def dtype(self):
            raise RuntimeError("no dtype")
    x = torch.randn(8, 8).as_subclass(Opaque)

    def work():
        with torch.no_grad():
            torch.mm(x, x)
            torch.randn(4, 4) @ torch.randn(4, 4)
    recording = record(work, "python")
    assert recording.unreadable_calls == 1
    prof = recording_to_profile(recording, instance("trn2.48xlarge"), detail_steps=0)
    assert prof.meta["unreadable_calls"] == 1
    assert any("1 operator call had arguments the recorder could not read" in n
               for n in prof.meta["notes"])
