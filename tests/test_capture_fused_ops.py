"""Calls the recorders got wrong: nested tensors (whose sizes raise), operators with both a
CompositeImplicitAutograd kernel and a CPU one (silu_backward, mish_backward), and fused kernels
whose small callees were kept in their place (EmbeddingBag and its gradient, scatter_reduce,
scatter_add, index_add, cumsum, flip). Figures are hand counts: FP32 tensors of E elements read
or written are 4·E bytes, an int64 index read as int32 (4 bytes)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from profiler.capture.recording import BACKWARD  # noqa: E402
from test_capture_kernels import of, simulated  # noqa: E402
from test_native_recorder import labels, record  # noqa: E402

KINDS = ["native", "python"]
F32 = 4
ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "profiler.cli"]


def _nested_work():
    """Calls on nested tensors, whose sizes() raises: a Linear and a softmax over two sequences
    of different lengths (the TransformerEncoder fast path made them too, before the capture
    turned that path off)."""
    lin = torch.nn.Linear(32, 32)
    nested = torch.nested.nested_tensor([torch.randn(6, 32), torch.randn(8, 32)])

    def work():
        with torch.no_grad():
            torch.softmax(lin(nested), -1)
    return work


# --- nested tensors -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_nested_tensor_calls_leave_the_recording_going(kind):
    """The native callback raised out of on_enter (after switching recording off and before
    pushing its frame): every later call was lost. The Python recorder raised into the script."""
    nested_work = _nested_work()
    lin = torch.nn.Linear(32, 32)
    x = torch.randn(2, 8, 32)

    def work():
        nested_work()
        for _ in range(3):
            lin(x).sum().backward()
    got = labels(record(work, kind))
    # the native recorder keeps the nested Linear as aten::linear too
    expected = 3 + (kind == "native")
    assert got.count("aten::linear" if kind == "native" else "aten::addmm") == expected
    assert got.count("aten::mm") >= 3                  # each backward's weight gradient


SCRIPT = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 32)
    nested = torch.nested.nested_tensor([torch.randn(6, 32), torch.randn(8, 32)])
    with torch.no_grad():
        torch.softmax(lin(nested), -1)
    x = torch.randn(2, 8, 32)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    for _ in range(3):
        lin(x).pow(2).mean().backward(); opt.step(); opt.zero_grad()
    print("done")
""")


@pytest.mark.parametrize("kind", KINDS)
def test_a_script_with_nested_tensors_is_captured_whole(kind, tmp_path):
    from profiler.model import fileformat
    script, out = tmp_path / "nested.py", tmp_path / "n.nsprof"
    script.write_text(SCRIPT)
    res = subprocess.run([*CLI, "capture", "-s", str(out), "--recorder", kind, "--", sys.executable,
                          str(script)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "done" in res.stdout
    assert "Exception in RecordFunction callback" not in res.stderr
    assert "Traceback" not in res.stderr
    prof = fileformat.load(out)
    ops = prof.table("ops")
    phases = prof.meta["phases"]
    backward = phases.index("backward")
    steps = sorted(set(ops["step"][ops["phase"] == backward].tolist()))
    assert len(steps) == 3                              # every training step's backward is there


# --- composite operators that run a CPU kernel ----------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_silu_and_mish_gradients_are_kept(kind):
    """silu_backward and mish_backward have a CompositeImplicitAutograd kernel and a CPU one; on
    CPU the CPU one runs and calls nothing, so looking through them kept nothing. Each reads dy
    and x and writes dx."""
    h = torch.randn(32, 64, requires_grad=True)
    rows = simulated(lambda: (F.silu(h).sum() + F.mish(h).sum()).backward(), kind)
    e = h.numel()
    assert of(rows, "aten::silu_backward", "aten::mish_backward", phase=BACKWARD) == {
        "aten::silu_backward": (0, 2 * F32 * e, F32 * e),
        "aten::mish_backward": (0, 2 * F32 * e, F32 * e)}


def test_a_composite_operator_with_a_cpu_kernel_is_not_looked_through():
    from profiler.capture.native_recorder import _composite
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    assert not _composite(has_kernel, "aten::silu_backward")
    assert not _composite(has_kernel, "aten::mish_backward")
    assert _composite(has_kernel, "aten::contiguous")       # only forwards
    assert not _composite(has_kernel, "aten::no_such_operator")


# --- embedding bags, scatters, scans --------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["sum", "max"])
def test_embedding_bag_gathers_its_rows_reduces_each_bag_and_scatters_its_gradient(kind, mode):
    """N = 64 indices in B = 8 bags of a [V = 100, D = 16] table: the N rows gathered (read and
    written as nn.Embedding's), each bag's 8 rows reduced to one (N x D read, B x D written);
    the gradient zeroes the table's (V x D written) and moves one dy row per index (one per
    bag for max) into the touched rows. Kept whole: nothing the kernels call."""
    v, d, n, b = 100, 16, 64, 8
    bag = torch.nn.EmbeddingBag(v, d, mode=mode)
    ids, offs = torch.randint(0, v, (n,)), torch.arange(0, n, n // b)
    rows = simulated(lambda: bag(ids, offs).sum().backward(), kind)
    moved = n if mode == "sum" else b
    assert of(rows, "aten::_embedding_bag") == {
        "aten::_embedding_bag": (0, F32 * n * d, F32 * n * d),
        "aten::_embedding_bag.bags": (0, F32 * n * d, F32 * b * d)}
    assert of(rows, "aten::_embedding_bag_backward") == {
        "aten::_embedding_bag_backward.zero": (0, 0, F32 * v * d),
        "aten::_embedding_bag_backward": (0, F32 * moved * d, F32 * moved * d)}
    backward = {name for name, phase, *_ in rows if phase == BACKWARD}
    assert backward <= {"aten::_embedding_bag_backward", "aten::_embedding_bag_backward.zero",
                        "aten::ones_like", "aten::expand", "aten::copy_"}   # (the grad's accumulation)


@pytest.mark.parametrize("kind", KINDS)
def test_embedding_bag_gathers_what_nn_embedding_gathers(kind):
    """Bags of 128 rows (past a streamed window) reduce as rows (mean); include_last_offset's extra
    offset is no bag. The gather costs what nn.Embedding's of the same rows does."""
    v, d, n, b = 1000, 32, 512, 4
    w = torch.randn(v, d)
    ids = torch.randint(0, v, (n,))
    offs = torch.tensor([0, 128, 256, 384, 512])

    def work():
        with torch.no_grad():
            F.embedding_bag(ids, w, offs, mode="mean", include_last_offset=True)
            F.embedding(ids, w)
    rows = simulated(work, kind)
    name = "aten::_embedding_bag_forward_only"          # no gradient wanted: the forward-only kernel
    assert of(rows, name) == {name: of(rows, "aten::embedding")["aten::embedding"],
                              f"{name}.bags": (0, F32 * n * d, F32 * b * d)}


@pytest.mark.parametrize("kind", KINDS)
def test_scatters_read_source_and_index_and_update_the_touched_elements(kind):
    """[8, 16] destinations: a scatter touches one element per index entry (128), an index_add
    one per source element (8 rows of 16) from 8 indices; each reads the source and the
    destination element and writes it back, reads its index (4 bytes each), and the
    out-of-place ones copy `self` (128 elements) first."""
    src = torch.randn(8, 16)
    index = torch.arange(8)[:, None].expand(8, 16)
    rows_index = torch.arange(8)

    def work():
        torch.zeros(8, 16).scatter_reduce(0, index, src, reduce="amax", include_self=False)
        torch.zeros(8, 16).scatter_add(0, index, src)
        torch.zeros(8, 16).index_add(0, rows_index, src)
        torch.zeros(8, 16).scatter_add_(0, index, src)
        torch.zeros(8, 16).index_add_(0, rows_index, src)
    rows = simulated(work, kind)
    e = 128
    for name, idx in (("scatter_reduce", e), ("scatter_add", e), ("index_add", 8)):
        assert of(rows, f"aten::{name}") == {
            f"aten::{name}.copy": (0, F32 * e, F32 * e),
            f"aten::{name}.index": (0, F32 * idx, 0),
            f"aten::{name}": (0, 2 * F32 * e, F32 * e)}, name
    for name, idx in (("scatter_add_", e), ("index_add_", 8)):
        assert of(rows, f"aten::{name}") == {
            f"aten::{name}.index": (0, F32 * idx, 0),
            f"aten::{name}": (0, 2 * F32 * e, F32 * e)}, name


@pytest.mark.parametrize("kind", KINDS)
def test_cumsum_is_one_scan_pass_and_flip_a_copy(kind):
    x = torch.randn(64, 128)

    def work():
        torch.cumsum(x, 1)
        torch.flip(x, (0,))
    rows = simulated(work, kind)
    e = x.numel()
    assert of(rows, "aten::cumsum", "aten::flip") == {
        "aten::cumsum": (0, F32 * e, F32 * e), "aten::flip": (0, F32 * e, F32 * e)}
    assert {name for name, *_ in rows} == {"aten::cumsum", "aten::flip"}


def test_kernels_are_kept_whole_by_the_native_recorder():
    """Their callees (the bag backward's zero_ and index_add_, cumsum's copy) are not kept."""
    bag = torch.nn.EmbeddingBag(50, 8)
    ids, offs = torch.randint(0, 50, (32,)), torch.arange(0, 32, 4)
    rec = record(lambda: bag(ids, offs).sum().backward())
    got = labels(rec)
    assert got.count("aten::_embedding_bag_backward") == 1
    assert "aten::index_add_" not in got and "aten::zero_" not in got
