"""Reductions over any set of dims, adaptive pooling, topk and the NLL forward, captured from real
PyTorch calls through both recorders and mapped onto the chip model. Figures are hand counts:
FP32 tensors of E elements read or written are 4·E bytes."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from test_capture_kernels import F32, KINDS, alone, of, partials, record, simulated  # noqa: E402
from test_native_recorder import output_sizes  # noqa: E402


def calls_named(rec, name: str) -> list:
    return [c for c in rec.sigs if c.name == name]


# --- reductions -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_a_global_average_pool_reduces_its_spatial_dims_not_the_last_one(kind):
    """ResNet's tail, AdaptiveAvgPool2d(1) of [32, 512, 7, 7], runs as a mean over (-1, -2): 16384
    rows of 49 elements, as fast as the same mean laid out as [16384, 49] (it was 114688 rows of
    the last 7 elements, 16384 x 7 partial results written)."""
    x = torch.randn(32, 512, 7, 7)
    with torch.no_grad():
        rec = record(lambda: torch.nn.AdaptiveAvgPool2d(1)(x), kind)
        flat = record(lambda: x.reshape(32 * 512, 49).mean(-1), kind)
    (mean,) = calls_named(rec, "mean")
    assert mean.extra == ((2, 3), 1)                                   # dims -1, -2, keepdim
    e = x.numel()
    assert of(simulated(rec, kind), "aten::mean") == {
        "aten::mean": (0, F32 * e, pytest.approx(F32 * 32 * 512))}
    assert alone(mean) == alone(calls_named(flat, "mean")[0])


@pytest.mark.parametrize("kind", KINDS)
def test_a_reduction_over_a_middle_dim_costs_what_the_same_reduction_laid_out_last_does(kind):
    """x.mean(dim=1) of [B, N, D]: B x D rows of N elements, whatever the layout (it was B x N
    rows of D, writing N times the result)."""
    x = torch.randn(8, 256, 64)
    with torch.no_grad():
        rec = record(lambda: x.mean(dim=1), kind)
        last = record(lambda: x.transpose(1, 2).contiguous().mean(dim=-1), kind)
    e = x.numel()
    assert of(simulated(rec, kind), "aten::mean") == {"aten::mean": (0, F32 * e, F32 * 8 * 64)}
    assert alone(calls_named(rec, "mean")[0]) == alone(calls_named(last, "mean")[0])


REDUCTIONS = {
    "sum": lambda x: x.sum(dim=1), "mean": lambda x: x.mean(1), "amax": lambda x: x.amax(1),
    "amin": lambda x: x.amin(dim=1, keepdim=True), "max": lambda x: x.max(dim=1),
    "argmax": lambda x: x.argmax(1), "var": lambda x: x.var(1), "std": lambda x: x.std(1),
    "var_mean": lambda x: torch.var_mean(x, 1), "logsumexp": lambda x: x.logsumexp(1),
    "linalg_vector_norm": lambda x: x.norm(dim=1), "nansum": lambda x: x.nansum(1)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_every_reduction_reads_its_input_once_and_writes_one_result_per_kept_row(kind, name):
    """[8, 64, 32] reduced over dim 1: 256 rows of 64 elements, every element read once and the
    256 results written."""
    x = torch.randn(8, 64, 32)
    with torch.no_grad():
        rows = simulated(lambda: REDUCTIONS[name](x), kind)
    label = f"aten::{name}"
    assert of(rows, label) == {label: (0, F32 * x.numel(), F32 * 8 * 32)}


@pytest.mark.parametrize("kind", KINDS)
def test_the_dims_list_reaches_the_mapper_whole(kind):
    """Every entry of the dims list, negative dims, keepdim (also as a keyword) and dim=None (or
    no dim) as every dim; both recorders give the mapper the same (dims, keepdim)."""
    x = torch.randn(2, 3, 4, 5)
    b = x > 0
    with torch.no_grad():
        rec = record(lambda: (x.sum((0, -1), keepdim=True), x.var(dim=(1, 2), correction=0,
                                                                  keepdim=True),
                              x.std(), x.amax(), x.mean(), b.any(), b.all(2),
                              torch.linalg.vector_norm(x, dim=(-3, 3)), x.argmin()), kind)
    extra = {c.name: c.extra for c in rec.sigs if c.name not in ("gt",)}
    every = ((0, 1, 2, 3), 0)
    assert extra == {"sum": ((0, 3), 1), "var": ((1, 2), 1), "std": every, "amax": every,
                     "mean": every, "any": every, "all": ((2,), 0),
                     "linalg_vector_norm": ((1, 3), 0), "argmin": every}


@pytest.mark.parametrize("kind", KINDS)
def test_a_whole_tensor_reduction_is_split_over_the_partitions(kind):
    """dim=None: every element read once, one row split into 128 partial rows (as before)."""
    x = torch.randn(64, 128)
    with torch.no_grad():
        rows = simulated(lambda: x.var(), kind)
    e = x.numel()
    assert of(rows, "aten::var") == {"aten::var": (0, F32 * e, F32 * partials(1, e))}


@pytest.mark.parametrize("kind", KINDS)
def test_max_of_two_tensors_is_elementwise(kind):
    a, b = torch.randn(64, 32), torch.randn(64, 32)
    rows = simulated(lambda: torch.max(a, b), kind)
    e = a.numel()
    # the native recorder keeps `max` (max.other), the Python one the `maximum` it calls
    assert [(n, r, w) for n, _, _, r, w in rows] == [
        ("aten::max" if kind == "native" else "aten::maximum", 2 * F32 * e, F32 * e)]


def test_reduction_output_sizes_worked_out_from_arguments_match_the_real_results():
    x = torch.randn(4, 6, 5, 3)

    def work():
        x.sum((1, 2)); x.mean(-1, keepdim=True); x.amax(); x.max(); x.max(1); x.var()
        torch.var_mean(x, (0, 3)); x.argmax(2); x.logsumexp(0); torch.linalg.vector_norm(x)
        torch.topk(x, 2, dim=1)
        F.adaptive_avg_pool2d(x, (2, 2)); F.adaptive_max_pool2d(x, (3, 1))
        F.nll_loss(x[:, :, 0, 0], torch.tensor([0, 1, 2, 5]))
        F.nll_loss(x[:, :, 0, 0], torch.tensor([0, 1, 2, 5]), reduction="none")

    measured, inferred = output_sizes(work, boxed=True), output_sizes(work, boxed=False)
    assert len(measured) >= 15 and inferred == measured


# --- adaptive pooling, topk, the NLL forward ------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_adaptive_average_pooling_reduces_each_window_and_its_gradient_is_one_pass(kind):
    """[8, 16, 12, 12] to 3 x 3: each result from its 4 x 4 window, the input read once (it was
    one VectorE pass over the output, and over the input for the native recorder)."""
    x = torch.randn(8, 16, 12, 12, requires_grad=True)
    rows = simulated(lambda: F.adaptive_avg_pool2d(x, 3).sum().backward(), kind)
    e, out = x.numel(), 8 * 16 * 9
    assert of(rows, "aten::_adaptive_avg_pool2d") == {
        "aten::_adaptive_avg_pool2d": (0, F32 * e, F32 * out)}
    assert of(rows, "aten::_adaptive_avg_pool2d_backward") == {
        "aten::_adaptive_avg_pool2d_backward": (0, F32 * e, F32 * e)}


@pytest.mark.parametrize("kind", KINDS)
def test_topk_is_max8_rounds_along_its_dim_or_a_sort_when_k_is_large(kind):
    """k = 5 of 1000 classes: one round of VectorE's max8 over each row and the 5 values and
    indices written; k = 300 of 256 rows of 512 needs 38 rounds, more than the 9 compare passes
    of a sort, so it costs as `sort` does."""
    x, y = torch.randn(64, 1000), torch.randn(512, 256)
    with torch.no_grad():
        rows = simulated(lambda: (torch.topk(x, 5), torch.topk(y, 300, dim=0)), kind)
    got = of(rows, "aten::topk")
    passes = 9 * y.numel()                                               # log2(512)
    assert got == {"aten::topk": (0, F32 * x.numel() + 2 * F32 * passes,
                                  F32 * partials(64, 1000) + F32 * passes),
                   "aten::topk.result": (0, 0, 64 * 5 * (F32 + F32))}


@pytest.mark.parametrize("kind", KINDS)
def test_nll_loss_gathers_one_element_per_target(kind):
    """nll_loss reads the log-probability of each row's (each pixel's) target, not the whole
    input, and sums them; weighted, also each target's class weight."""
    logp, tgt = torch.randn(64, 1000), torch.randint(0, 1000, (64,))
    seg, seg_tgt = torch.randn(2, 8, 16, 16), torch.randint(0, 8, (2, 16, 16))
    weight = torch.rand(1000)

    def work():
        F.nll_loss(logp, tgt)
        F.nll_loss(seg, seg_tgt)
    with torch.no_grad():
        rows = simulated(work, kind)
        weighted = simulated(lambda: F.nll_loss(logp, tgt, weight=weight), kind)
        unreduced = simulated(lambda: F.nll_loss(logp, tgt, reduction="none"), kind)
    n, pixels = 64, 2 * 16 * 16
    assert of(rows, "aten::nll_loss_forward") == {
        "aten::nll_loss_forward": (0, F32 * n, F32 * n),
        "aten::nll_loss_forward.sum": (0, F32 * n, F32 * partials(1, n))}
    assert of(rows, "aten::nll_loss2d_forward") == {
        "aten::nll_loss2d_forward": (0, F32 * pixels, F32 * pixels),
        "aten::nll_loss2d_forward.sum": (0, F32 * pixels, F32 * partials(1, pixels))}
    assert of(weighted, "aten::nll_loss_forward") == {
        "aten::nll_loss_forward": (0, 2 * F32 * n, 2 * F32 * n),
        "aten::nll_loss_forward.sum": (0, 2 * F32 * n, F32 * partials(1, 2 * n))}
    assert of(unreduced, "aten::nll_loss_forward") == {
        "aten::nll_loss_forward": (0, F32 * n, F32 * n)}
