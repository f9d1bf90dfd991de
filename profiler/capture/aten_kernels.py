"""The chip mappings of the compute kernels: matmuls, convolutions, attention, elementwise
binaries, copies, reductions over any dims, sort and topk, scatters (scatter_add,
scatter_reduce, index_add, index_reduce), cumsum, and fused optimizers.

Each appends the ops of one call to a Program from its shapes, dtypes and `AtenCall.extra`.
Separate from `aten_map`, which picks the mapping by operator name, and from `aten_layers`, the
mappings of whole layers (norms, RNNs, pooling, losses), several of which build on the
reductions here.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .aten_names import WIDTH, AtenCall, _elements, _prod

if TYPE_CHECKING:      # a script's process imports this module without the chip model
    from device_model.program import Program

PARTITIONS = 128                     # SBUF partitions: rows a VectorE instruction works on at once
MAX8 = 8                             # VectorE's max8: the 8 largest of each partition's row at once


def _matmul(prog: Program, name: str, s, dtype: str, label: str, stored: str) -> None:
    """`stored`: what the tensors are in memory (FP32 under a matmul-only auto-cast, which the
    matmul reads and writes at that width)."""
    kw = {"left_dtype": stored, "right_dtype": stored, "out_dtype": stored}
    if name in ("addmm", "addmm_", "baddbmm"):
        s = s[1:]
    if len(s) < 2 or not s[0] or not s[1]:
        return
    a, b = s[0], s[1]
    if name == "linear":                          # input [..., k], weight [n, k]
        prog.matmul(max(1, _prod(a[:-1])), a[-1], b[0], dtype, name=label, **kw)
        return
    a = a if len(a) > 1 else (1, *a)              # torch.matmul's vectors: a row, a column
    b = b if len(b) > 1 else (*b, 1)
    if len(b) == 2:                               # [..., m, k] @ [k, n]: the batch folds into m
        prog.matmul(max(1, _prod(a[:-1])), a[-1], b[-1], dtype, name=label, **kw)
    else:                                         # batch dims broadcast against each other
        batch = _prod(_broadcast(a[:-2], b[:-2]))
        prog.matmul(a[-2], a[-1], b[-1], dtype, batch=max(1, batch), weights=False, name=label,
                    **kw)


def _broadcast(a, b) -> tuple[int, ...]:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    return tuple(max(x, y) for x, y in zip(a, b))


def _conv(prog: Program, s, extra, dtype: str, label: str, backward: bool) -> None:
    """Any rank, groups and dilation. A convolution does 2 x positions x Cout x Cin/groups x
    kernel taps FLOPs over its output positions; a transposed one is the gradient of a normal
    one, so its FLOPs follow its input positions. convolution_backward makes the gradients its
    output_mask asks for: input and weight, each as costly as the forward (the weight's named
    `.dweight`, so that the call counts once), and the bias's as a reduction of grad_output."""
    x, w = (s[1:3] if backward else s[:2]) if len(s) >= 2 + backward else ((), ())
    if len(x) < 3 or len(w) != len(x) or (backward and len(s[0]) != len(x)):
        return
    stride, pad, dilation, transposed, _, groups, mask = _conv_params(extra, len(x) - 2)
    taps = _prod(w[2:])
    if transposed:                                # weight [Cin, Cout/groups, kernel...]
        rows, patch, cols = x[0] * _prod(x[2:]), w[0] // groups, w[1] * taps
    else:                                         # weight [Cout, Cin/groups, kernel...]
        out = s[0][2:] if backward else [(i + 2 * p - d * (k - 1) - 1) // st + 1 for i, k, st, p, d
                                         in zip(x[2:], w[2:], stride, pad, dilation)]
        rows, patch, cols = x[0] * _prod(out), w[1] * taps, w[0] // groups
    if min(rows, patch, cols) <= 0:
        return
    if backward:
        names = [name for name, asked in ((label, mask[0]), (f"{label}.dweight", mask[1]))
                 if asked]
    else:
        names = [label]
    for name in names:
        prog.conv(rows, patch, cols, dtype, groups=groups, scatter=transposed, name=name)
    if backward and mask[2]:
        g = s[0]                                  # [N, Cout, positions...]: a sum per channel
        prog.reduce(g[1], max(1, _prod(g) // g[1]), dtype, name=f"{label}.bias")


def _conv_params(extra, dims: int) -> tuple:
    """(stride, padding, dilation, transposed, output_padding, groups, output_mask) from
    conv_extra, each list as long as the spatial dims (torch writes `[2]` for `[2, 2]`)."""
    stride, pad, dilation, transposed, out_pad, groups, mask = (tuple(extra) + (None,) * 7)[:7]

    def spread(v, default):
        v = tuple(v or ()) or (default,)
        return v * dims if len(v) == 1 else v
    return (spread(stride, 1), spread(pad, 0), spread(dilation, 1), bool(transposed),
            spread(out_pad, 0), max(1, groups or 1), tuple(mask or (1, 1, 0)))


def _attention(prog: Program, s, extra, mm_dtype: str, dtype: str, label: str,
               backward: bool) -> None:
    """Unfused, as neuronx-cc compiles the decomposed graph: Q K^T, softmax, P V, each matmul
    over every score (a causal mask is a pass of the softmax's, not skipped tiles); the backward
    is twice that (dQ, dK over the query's head dim; dV, dP over the value's). Its arguments
    start with grad_output, then query, key, value."""
    q_at = 1 if backward else 0
    if len(s) < q_at + 1 or len(s[q_at]) < 2:
        return
    q = s[q_at]
    k = s[q_at + 1] if len(s) > q_at + 1 and len(s[q_at + 1]) >= 2 else q
    v = s[q_at + 2] if len(s) > q_at + 2 and len(s[q_at + 2]) >= 2 else k
    batch, seq, d, k_len, d_v = _prod(q[:-2]), q[-2], q[-1], k[-2], v[-1]
    causal = bool(extra and extra[0])
    kw = {"left_dtype": dtype, "right_dtype": dtype, "out_dtype": dtype}
    for _ in range(2 if backward else 1):
        prog.matmul(seq, d, k_len, mm_dtype, batch=batch, weights=False, name=f"{label}.qk", **kw)
        prog.softmax(batch * seq, k_len, dtype, causal=causal, name=f"{label}.softmax")
        prog.matmul(seq, k_len, d_v, mm_dtype, batch=batch, weights=False, name=f"{label}.pv",
                    **kw)


def _fused_optimizer(prog: Program, s, dtype: str, label: str) -> None:
    """One pass over every parameter element: the parameter, gradient and state lists (those
    the parameters' size, first in the arguments) are read, and all but the gradient written
    back. One ScalarE pass stands for the kernel's few elementwise instructions, which its HBM
    traffic outweighs."""
    lists = next((i for i, shape in enumerate(s) if shape != s[0]), len(s))
    if lists < 2:
        return
    elements = _prod(s[0])
    prog.activation("copy", elements, dtype, inputs=lists, name=label)     # writes the parameter
    if lists > 2:
        prog.dma(elements * WIDTH[dtype] * (lists - 2), direction="store", name=f"{label}.state")


def _binary(prog: Program, func: str, call: AtenCall, dtype: str, out_dtype: str,
            label: str, third: bool = False) -> None:
    """An operand smaller than the result (a scalar, a broadcast bias) is read once, not per
    element: with one full-size operand the op reads one tensor. `third`: an op of three
    tensor arguments (`addcdiv_`), whose third, where it is full-size, is read as well."""
    elements = _elements(call)
    full = sum(_prod(shape) == elements for shape in call.shapes[:2])
    prog.binary(func, elements, dtype, operands=1 if full == 1 else 2, out_dtype=out_dtype,
                name=label)
    if third and len(call.shapes) > 2 and _prod(call.shapes[2]) == elements:
        prog.dma(elements * WIDTH[dtype], direction="load", name=f"{label}.operand")


def _reduce(prog: Program, shape, dtype: str, label: str) -> None:
    """Rows on partitions, each reduced along the free axis. Fewer rows than partitions (a whole
    tensor's sum) are split into partial rows, as a kernel lays them out; one row would be
    done by one partition, and at LNC=2 by both physical cores. The partial sums are written
    (their final cross-partition add is not costed)."""
    cols = max(1, shape[-1] if shape else 1)
    rows = max(1, _prod(shape) // cols)
    split = 1
    if rows < PARTITIONS:
        split = max(d for d in range(1, min(cols, PARTITIONS // rows) + 1) if cols % d == 0)
    prog.reduce(rows * split, cols // split, dtype, name=label)


def _reduction(prog: Program, shape, extra, dtype: str, label: str) -> None:
    """A reduction over any set of dims (reduce_extra's, sorted; the last dim when the recording
    has none): every input element read once and one result per kept row written, the reduced
    length the product of the reduced dims and the rows the product of the others. Reduced dims
    that are not the innermost (x.mean(dim=1) of [B, N, D], a mean over (0, 2, 3)) cost the same
    as the same reduction laid out last: the tile loads read them with strided access patterns,
    or the kept rows are accumulated tile by tile, in the same one pass over the input (no
    transpose is costed, as for a batch norm's statistics)."""
    shape = tuple(shape) or (1,)
    dims = extra[0] if extra and isinstance(extra[0], tuple) else (len(shape) - 1,)
    reduced = max(1, _prod([shape[d] for d in dims if 0 <= d < len(shape)]))
    _reduce(prog, (max(1, _prod(shape) // reduced), reduced), dtype, label)


def _sort(prog: Program, shape, extra, dtype: str, label: str) -> None:
    """Values and indices along `dim` (default the last): a merge network of ceil(log2 n)
    VectorE compare passes over every element, each reading and writing them."""
    dim = extra[0] if extra and isinstance(extra[0], int) else -1
    n = shape[dim % len(shape)] if shape else 1
    passes = max(1, math.ceil(math.log2(n))) if n > 1 else 1
    prog.binary("max", max(1, _prod(shape)) * passes, dtype, name=label)


def _topk(prog: Program, shape, extra, dtype: str, label: str) -> None:
    """The k largest (or smallest) along `dim` and their indices: ceil(k/8) rounds of VectorE's
    max8 over each row (NKI's top-k: max8, then match_replace to knock out what it found), each
    costed as a reduction pass over every element, and the k values and indices written
    (`.result`, indices at 4 bytes). When that takes more rounds than a sort's ceil(log2 n)
    compare passes (k large against the row), it costs as `sort` along `dim` does."""
    k, dim = (tuple(extra) + (1, -1))[:2] if extra else (1, -1)
    shape = tuple(shape) or (1,)
    dim = dim % len(shape)
    n, k = max(1, shape[dim]), max(1, k)
    rows = max(1, _prod(shape) // n)
    rounds = -(-k // MAX8)
    if rounds > (math.ceil(math.log2(n)) if n > 1 else 1):
        _sort(prog, shape, (dim,), dtype, label)
        return
    _reduce(prog, (rows * rounds, n), dtype, label)
    prog.dma(rows * k * (WIDTH[dtype] + WIDTH["fp32"]), direction="store", name=f"{label}.result")


def _copy(prog: Program, elements: int, src: str, dst: str, label: str) -> None:
    """A copy moves bytes by DMA; one that changes the width (`x.to(torch.bfloat16)`) converts on
    VectorE, reading at the source's width and writing at the result's."""
    if WIDTH[src] != WIDTH[dst]:
        prog.cast(max(1, elements), src, dst, name=label)
    else:
        prog.dma(max(1, elements * WIDTH[dst]), direction="copy", name=label)


def _scatter(prog: Program, name: str, s, dtype: str, label: str) -> None:
    """scatter_add / scatter_reduce / index_add / index_reduce, from (self, index, src): each
    source element combined into the destination element its index picks, on VectorE: the
    source and the index read (`.index`, at 4 bytes: int64 runs as int32) and a read-modify-write
    of each touched destination element (one per index entry of a scatter, one per source element
    of an index_add, whose 1-D index picks whole slices; repeated indices counted each time). The
    out-of-place forms copy `self` to the result first (`.copy`, by DMA)."""
    if len(s) < 2:
        return
    dest, index = s[0], s[1]
    src = s[2] if len(s) > 2 else index
    touched = _prod(src) if name.startswith("index_") else _prod(index)
    if not name.endswith("_"):
        prog.dma(max(1, _prod(dest) * WIDTH[dtype]), direction="copy", name=f"{label}.copy")
    prog.dma(max(1, _prod(index) * WIDTH["fp32"]), direction="load", name=f"{label}.index")
    # reads the source element and the destination element, writes the destination element
    prog.binary("add", max(1, touched), dtype, operands=2, name=label)


def _scan(prog: Program, shape, dtype: str, label: str) -> None:
    """cumsum along any dim: one VectorE pass (a running-sum scan along each row's free axis,
    as tensor_tensor_scan does, not a log-depth network of passes), every element read once and
    written once."""
    prog.binary("add", max(1, _prod(shape)), dtype, operands=1, name=label)
