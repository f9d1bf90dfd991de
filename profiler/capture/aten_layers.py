"""The chip mappings of whole layers run as one kernel: batch, group and layer norms and their
backwards, RNN layers, pooling and upsampling and their gradients, point losses, the NLL
forward, and embedding bags and their gradient.

Each appends the ops of one call to a Program, as statistics, reductions and elementwise passes
over its tensors (an RNN layer as its gate matmuls). Separate from `aten_kernels`, the single
compute kernels whose reductions these build on, and from `aten_map`, which picks the mapping by
operator name.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .aten_kernels import _broadcast, _reduce
from .aten_names import (ADAPTIVE_POOLS, GROUP_NORMS, POOL_BACKWARDS, POOLS, UPSAMPLE_BACKWARDS,
                         UPSAMPLES, WIDTH, _prod)

if TYPE_CHECKING:      # a script's process imports this module without the chip model
    from device_model.program import Program

WINDOW_INPUTS = 32                   # windows up to this size reduce as streams, larger ones as rows


def _norm_hidden(shape, normalized) -> int:
    """Elements a layer norm normalizes over: its normalized_shape, else the last dim."""
    if not isinstance(normalized, tuple):             # a recording's default extra: no shape
        normalized = ()
    hidden = _prod(normalized) if normalized else (shape[-1] if shape else 1)
    return max(1, min(hidden, _prod(shape)))


def _norm(prog: Program, name: str, s, extra, dtype: str, label: str) -> None:
    """Batch norm ([N, C, *spatial]: a mean and variance per channel over N x spatial) and group
    norm (per sample and group of channels): one reduction over every element for the statistics
    (`.stats`; none for a batch norm of running statistics, in eval), then one pass normalizing
    every element with the per-channel scale and shift. Whatever the layout, the same work."""
    x = s[0] if s and s[0] else (1,)
    elements = _prod(x)
    if name in GROUP_NORMS:
        groups = max(1, extra[0] if extra and isinstance(extra[0], int) else 1)
        sets = (x[0] if len(x) > 1 else 1) * groups
        _reduce(prog, (sets, max(1, elements // sets)), dtype, f"{label}.stats")
    elif not extra or extra[0]:                      # training: statistics of this batch
        channels = x[1] if len(x) > 1 else 1
        _reduce(prog, (channels, max(1, elements // channels)), dtype, f"{label}.stats")
    prog.activation("copy", max(1, elements), dtype, name=label)


def _norm_backward(prog: Program, name: str, s, extra, dtype: str, label: str) -> None:
    """A norm's gradient, from (grad_output, input, ...): the two sums it needs per statistics
    set, of dy and of dy x-hat (for a batch norm the bias and weight gradients themselves), as
    one reduction reading dy and x (`.stats`), then dx from x, dy and those sums in one pass
    reading both and writing dx. A layer norm sums along its rows, so its weight and bias
    gradients are a second reduction, down the columns (`.dweight`). A batch norm in eval
    (running statistics) needs no sums for dx: dx = dy * weight * invstd, one scaled pass."""
    x = s[1] if len(s) > 1 and s[1] else (s[0] if s and s[0] else (1,))
    elements = _prod(x)
    if name in ("native_batch_norm_backward", "batch_norm_backward"):
        train, mask = (extra + (1, (1, 1, 1)))[:2] if extra else (1, (1, 1, 1))
        sets = x[1] if len(x) > 1 else 1
        if train or any(mask[1:]):
            _reduce(prog, (sets, max(1, 2 * elements // sets)), dtype, f"{label}.stats")
        if mask[0]:
            prog.binary("mul", max(1, elements), dtype, operands=2 if train else 1, name=label)
        return
    if name == "native_group_norm_backward":
        mask = extra[1] if len(extra) > 1 else (1, 1, 1)
        sets = (x[0] * x[1]) if len(x) > 1 else 1          # sums per sample and channel
    else:                                                # native_layer_norm_backward
        normalized, mask = (extra + ((), (1, 1, 1)))[:2] if extra else ((), (1, 1, 1))
        hidden = _norm_hidden(x, normalized)
        sets = max(1, elements // hidden)
    _reduce(prog, (sets, max(1, 2 * elements // sets)), dtype, f"{label}.stats")
    if mask[0]:
        prog.binary("mul", max(1, elements), dtype, name=label)
    if name == "native_layer_norm_backward" and any(mask[1:]):
        _reduce(prog, (hidden, max(1, 2 * sets)), dtype, f"{label}.dweight")


RNN_MAX_STEPS = 256     # at most this many recurrent steps per layer; longer sequences are grouped


def _rnn_steps(s, tokens: int) -> list[int]:
    """Rows (batch entries) of each modelled recurrent step: the sequence's T steps of B rows
    (input [T, B, I]; a packed [tokens, I] one: B from h0 [B, H], T = tokens / B rounded up).
    Above RNN_MAX_STEPS steps, the steps are grouped into RNN_MAX_STEPS chunks of (nearly)
    equal rows, each costed as one step with proportionally larger work (an approximation: the
    dependency inside a chunk is lost, so a long sequence's latency is underestimated). The rows
    sum to `tokens`, so the FLOPs are the sequence's whatever the grouping."""
    if len(s[0]) == 3:
        steps = max(1, s[0][0])
    else:
        batch = s[5][0] if len(s) > 5 and s[5] else tokens
        steps = max(1, -(-tokens // max(1, batch)))
    n = min(steps, RNN_MAX_STEPS, tokens)
    return [tokens // n + (i < tokens % n) for i in range(n)]


def _rnn_layer(prog: Program, s, mm_dtype: str, dtype: str, label: str, backward: bool) -> None:
    """One layer (one direction) of an RNN over a whole sequence (oneDNN's mkldnn_rnn_layer:
    input [T, B, I] or packed [tokens, I], weight_ih [G*H, I], weight_hh [G*H, H]; G = 4 gates
    for an LSTM). The input projection has no dependency between steps: one matmul over the
    sequence, [tokens, I] @ [I, G*H]. Then T dependent steps (each needs the previous step's
    hidden state), each the recurrent matmul [B, H] @ [H, G*H] (`.recurrent`), the gates'
    sigmoids and tanhs (and tanh of the cell) as one ScalarE pass (`.gates`) and the cell and
    hidden updates (f*c + i*g, o*tanh(c)) as VectorE products (`.cell`); each step's matmul
    depends on the projection and on the previous step's `.cell`. Over 256 steps, they are
    grouped (see _rnn_steps). FLOPs: 2*tokens*(I + H)*G*H, as one matmul over [I + H] would
    have. weight_hh is read by every step's matmul (Program cannot keep an operand in SBUF
    across ops; it is marked as weights, so its load is prefetched off the recurrence's critical
    path, but its HBM bytes are counted once per step). The backward runs the steps in reverse:
    each the gates' derivatives (`.gates`, `.cell`, products) and the hidden-state gradient
    [B, G*H] @ [G*H, H] (`.recurrent`), then, over the whole sequence, the input gradient
    [tokens, G*H] @ [G*H, I] and the weight gradients [I + H, tokens] @ [tokens, G*H]
    (`.dweight`): twice the forward's matmul FLOPs."""
    if len(s) < 3 or len(s[1]) != 2 or len(s[2]) != 2:
        return
    gates, inputs = s[1]
    hidden = s[2][1]
    tokens = _prod(s[0]) // max(1, inputs)
    if min(gates, inputs, hidden, tokens) <= 0:
        return
    kw = {"left_dtype": dtype, "right_dtype": dtype, "out_dtype": dtype}
    steps = _rnn_steps(s, tokens)
    if backward:
        for rows in steps:                           # last step first; each needs the one after
            prog.binary("mul", rows * (gates + hidden), dtype, name=f"{label}.gates")
            prog.binary("mul", 3 * rows * hidden, dtype, name=f"{label}.cell")
            last = prog.matmul(rows, gates, hidden, mm_dtype, name=f"{label}.recurrent", **kw)
        prog.matmul(tokens, gates, inputs, mm_dtype, name=label, deps=(last,), **kw)
        prog.matmul(inputs + hidden, tokens, gates, mm_dtype, name=f"{label}.dweight",
                    deps=(last,), **kw)
        return
    proj = prog.matmul(tokens, inputs, gates, mm_dtype, name=label, **kw)
    prev = proj
    for rows in steps:
        prog.matmul(rows, hidden, gates, mm_dtype, name=f"{label}.recurrent",
                    deps=tuple(sorted({proj, prev})), **kw)
        prog.activation("sigmoid", rows * (gates + hidden), dtype, name=f"{label}.gates")
        prev = prog.binary("mul", 3 * rows * hidden, dtype, name=f"{label}.cell")


def _pool_output(x, extra, dims: int) -> int:
    """Elements of a pooling's result: (L + 2p - d(k-1) - 1) / s + 1 per spatial dim, rounded
    down, or up with ceil_mode (a last window must start inside the input or its left padding)."""
    kernel, stride, pad, dilation, ceil = (tuple(extra) + ((), (), (), (), 0))[:5]

    def spread(v, default):
        v = tuple(v or ()) or default
        return v * dims if len(v) == 1 else v
    kernel = spread(kernel, (1,))
    stride, pad, dilation = spread(stride, kernel), spread(pad, (0,)), spread(dilation, (1,))
    out = list(x[:-dims])
    for size, k, st, p, d in zip(x[-dims:], kernel, stride, pad, dilation):
        span = size + 2 * p - d * (k - 1) - 1
        n = (-(-span // st) if ceil else span // st) + 1
        if ceil and (n - 1) * st >= size + p:
            n -= 1
        out.append(max(1, n))
    return _prod(out)


def _resample(prog: Program, name: str, s, extra, dtype: str, label: str) -> None:
    """Pooling and upsampling, and their gradients: an op that shrinks its tensor (a pooling,
    an upsampling's gradient) reduces each window of the larger side, reading it once and
    writing the smaller (one pass over the results, each from the `ratio` elements of its window
    read as that many streams; a window of more than WINDOW_INPUTS, a global pooling, as a row
    reduction per result); one that grows it (a pooling's gradient, an upsampling) makes one
    pass over the larger side, a nearest-neighbour upsampling a replicating copy (DMA)."""
    x = s[0] if s and s[0] else (1,)
    dims = next((int(c) for c in name if c.isdigit()), 2)
    if name in POOLS:                                # (self, kernel, stride, padding, ...)
        small, big = _pool_output(x, extra, min(dims, len(x))), _prod(x)
    elif name in ADAPTIVE_POOLS:                     # (self, output_size)
        size = tuple(extra[0]) if extra and isinstance(extra[0], tuple) else ()
        small, big = _prod(x[:len(x) - len(size)]) * _prod(size), _prod(x)
    elif name in POOL_BACKWARDS:                     # (grad_output, self, ...)
        small, big = _prod(x), _prod(s[1]) if len(s) > 1 else _prod(x)
    elif name in UPSAMPLES:                          # (self, output_size, ...)
        size = tuple(extra[0]) if extra and isinstance(extra[0], tuple) else ()
        small, big = _prod(x), _prod(x[:len(x) - len(size)]) * _prod(size) if size else _prod(x)
    else:                                            # (grad_output, output_size, input_size, ...)
        size = tuple(extra[0]) if extra and isinstance(extra[0], tuple) else ()
        small, big = (_prod(size) if size else _prod(x)), _prod(x)
    small, big = max(1, small), max(1, big)
    if name in POOLS or name in ADAPTIVE_POOLS or name in UPSAMPLE_BACKWARDS:
        ratio = max(1, -(-big // small))
        if ratio <= WINDOW_INPUTS:       # each result from its window's `ratio` elements, streamed
            prog.activation("copy", small, dtype, inputs=ratio, name=label)
        else:                            # a global pooling: a row reduction per result
            prog.reduce(small, ratio, dtype, func="max" if "max" in name else "add", name=label)
    elif "nearest" in name:
        prog.dma(big * WIDTH[dtype], direction="copy", name=label)
    else:
        prog.activation("copy", big, dtype, name=label)


def _point_loss(prog: Program, s, extra, dtype: str, label: str, backward: bool) -> None:
    """mse/smooth-L1/huber: the difference of input and target over every element (one pass
    reading both), then, reduced (mean or sum, `reduction` 1 or 2), a sum of its squares (or
    penalties: `.sum`); unreduced, their squares (`.square`). The gradient, from (grad_output,
    input, target), is one pass over input and target scaled by grad_output."""
    a = s[1] if backward and len(s) > 1 else (s[0] if s else (1,))
    b = s[2] if backward and len(s) > 2 else (s[1] if len(s) > 1 else a)
    elements = max(1, _prod(_broadcast(a, b)))
    operands = 2 if _prod(a) == elements and _prod(b) == elements else 1
    prog.binary("sub", elements, dtype, operands=operands, name=label)
    if backward:
        return
    if not extra or extra[0]:
        _reduce(prog, (elements,), dtype, f"{label}.sum")
    else:
        prog.activation("square", elements, dtype, name=f"{label}.square")


def _nll_forward(prog: Program, s, extra, dtype: str, label: str) -> None:
    """nll_loss from (input [N, C] or [N, C, *spatial], target [N, *spatial], weight?): one element
    gathered per target, its class's log-probability (and, weighted, the class weight too), by
    indirect DMA as `embedding` gathers rows; reduced (mean or sum, `reduction` 1 or 2), their
    sum (`.sum`; weighted, with total_weight's sum of the weights). The rest of the input is not
    read."""
    gathered = max(1, _prod(s[1]) if len(s) > 1 else 1) * (2 if len(s) > 2 else 1)
    prog.embedding(gathered, 1, dtype, name=label)
    if not extra or extra[0]:
        _reduce(prog, (gathered,), dtype, f"{label}.sum")


def _embedding_bag(prog: Program, s, extra, dtype: str, label: str) -> None:
    """nn.EmbeddingBag from (weight [V, D], indices [N], offsets [B], per_sample_weights?): the
    bags' N rows gathered by indirect DMA, as `embedding` gathers a token's row (N x D read, and
    written as `embedding` writes them), then each bag reduced to one row (`.bags`: sum, mean, or
    max with mode 2), the N x D gathered elements read and B x D written, as a pooling window's
    (a streamed pass of N/B inputs per result, or a row reduction past WINDOW_INPUTS). With
    include_last_offset the offsets hold B + 1 entries. Indices and offsets are not counted, as
    for `embedding`."""
    weight = s[0] if s and s[0] else (1,)
    hidden = max(1, weight[-1])
    rows = max(1, _prod(s[1]) if len(s) > 1 else 1)
    mode, last = (tuple(extra) + (0, 0))[:2] if extra else (0, 0)
    bags = max(1, (_prod(s[2]) if len(s) > 2 and s[2] else 1) - (1 if last else 0))
    prog.embedding(rows, hidden, dtype, name=label)
    per_bag = max(1, -(-rows // bags))
    if per_bag <= WINDOW_INPUTS:
        prog.activation("copy", bags * hidden, dtype, inputs=per_bag, name=f"{label}.bags")
    else:
        prog.reduce(bags * hidden, per_bag, dtype, func="max" if mode == 2 else "add",
                    name=f"{label}.bags")


def _embedding_bag_backward(prog: Program, s, extra, dtype: str, label: str) -> None:
    """The table's gradient from (grad [B, D], indices [N], ...): zeroed (`.zero`, V x D written),
    then each index's bag gradient row scatter-added into its table row: N rows of dy read by
    indirect DMA and the touched rows written, as `embedding` moves rows (a max bag: one row per
    bag, B, each column to its argmax's row)."""
    grad = s[0] if s and s[0] else (1,)
    hidden = max(1, grad[-1])
    num_weights, mode = (tuple(extra) + (0, 0))[:2] if extra else (0, 0)
    if num_weights > 0:
        prog.dma(num_weights * hidden * WIDTH[dtype], direction="store", name=f"{label}.zero")
    rows = _prod(grad[:-1]) if mode == 2 else (_prod(s[1]) if len(s) > 1 else 1)
    prog.embedding(max(1, rows), hidden, dtype, name=label)
