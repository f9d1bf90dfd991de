"""Maps recorded aten operators onto the chip model's Program builders.

mm/addmm/bmm/linear/convolution -> TensorE matmuls; elementwise -> ScalarE activations or VectorE
binaries; softmax, layer norm and attention as composites; batch/group norm as per-channel (per-group)
statistics and a normalizing pass; RNN layers as their gate matmuls and gate elementwise work;
pooling, upsampling, losses, sorting and topk as reductions or elementwise passes over their tensors
(the NLL forward as a gather of one element per target); reductions over any set of dims ->
VectorE; copies -> DMA (a VectorE conversion when the dtype changes); fused optimizers
-> one pass over their tensors; torch.distributed collectives -> collectives. Views, other
metadata-only ops and host-side checks cost nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:      # a script's process imports this module without the chip model
    from device_model.program import CollectiveGroup, Program

VIEWS = frozenset("""view _unsafe_view reshape t transpose permute expand expand_as slice select unsqueeze
squeeze detach detach_ alias as_strided split split_with_sizes unbind chunk narrow view_as lift_fresh
_reshape_alias unfold diagonal flatten empty empty_like empty_strided new_empty new_empty_strided
_local_scalar_dense item is_same_size size stride numel dim sym_size sym_stride set_ result_type
_has_compatible_shallow_copy_type""".split()) | frozenset(
    # host-side checks: torch.multinomial's `_assert_async` of its probabilities does no device work
    "_assert_async _assert_scalar _functional_assert_async _assert_tensor_metadata".split())
UNARY = {"relu": "relu", "relu_": "relu", "gelu": "gelu", "silu": "silu", "silu_": "silu", "tanh": "tanh",
         "sigmoid": "sigmoid", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt",
         "reciprocal": "reciprocal", "erf": "erf", "sin": "sin", "sin_": "sin", "cos": "sin",
         "cos_": "sin", "softplus": "softplus", "mish": "mish",
         "gelu_backward": "gelu_dx", "silu_backward": "silu_dx", "threshold_backward": "relu",
         "tanh_backward": "tanh", "sigmoid_backward": "sigmoid", "neg": "copy", "abs": "copy",
         "pow": "square", "square": "square", "clamp": "copy", "clamp_": "copy", "fill_": "copy",
         "zero_": "copy", "zeros_like": "copy", "ones_like": "copy", "full_like": "copy", "zeros": "copy",
         "ones": "copy", "full": "copy", "bernoulli_": "copy", "native_dropout": "copy", "lerp_": "copy",
         "native_dropout_backward": "copy", "masked_fill": "copy", "masked_fill_": "copy", "sign": "copy"}
BINARY = {"add": "add", "add_": "add", "sub": "sub", "sub_": "sub", "rsub": "sub", "mul": "mul",
          "mul_": "mul", "div": "div", "div_": "div", "maximum": "max", "minimum": "min", "where": "max",
          "addcmul_": "mul", "addcdiv_": "div", "eq": "sub", "ne": "sub", "gt": "sub", "lt": "sub",
          "ge": "sub", "le": "sub", "_foreach_add_": "add", "_foreach_mul_": "mul", "_foreach_div_": "div",
          "_foreach_addcmul_": "mul", "_foreach_addcdiv_": "div", "_foreach_sqrt": "mul",
          "_foreach_lerp_": "add", "_foreach_sub_": "sub", "_foreach_add": "add", "_foreach_mul": "mul",
          # GradScaler.unscale_: every gradient read, checked and scaled in place (by a scalar)
          "_amp_foreach_non_finite_check_and_unscale_": "mul"}
REDUCE = frozenset("sum mean amax amin max min var std var_mean std_mean norm argmax argmin any "
                   "all logsumexp linalg_vector_norm nansum _foreach_norm".split())
# Where a reduction's `dim` sits among its arguments in schema order (elsewhere: second), and its
# `keepdim` (elsewhere: third). Only the reductions of INT_DIM take a single int `dim`; the others
# take an int list, and an int in its place is another argument (var's `unbiased`, a dtype).
REDUCE_DIM_AT = {"norm": 2, "linalg_vector_norm": 2}
KEEPDIM_AT = {"norm": 3, "linalg_vector_norm": 3, "var": 3, "std": 3, "var_mean": 3, "std_mean": 3}
INT_DIM = frozenset("max min argmax argmin any all".split())
COPIES = frozenset("copy_ clone _to_copy contiguous cat stack index_select gather scatter scatter_add "
                   "index index_put_ _index_put_impl_ embedding_dense_backward repeat tril triu "
                   "constant_pad_nd arange _copy_from".split())
COLLECTIVES = {"allreduce_": "all_reduce", "all_reduce": "all_reduce", "allgather_": "all_gather",
               "_allgather_base_": "all_gather", "all_gather_into_tensor": "all_gather",
               "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
               "reduce_scatter_tensor": "reduce_scatter", "alltoall_": "all_to_all",
               "alltoall_base_": "all_to_all", "all_to_all_single": "all_to_all", "send": "send_recv",
               "recv_": "send_recv", "recv_any_source_": "send_recv", "broadcast_": "all_gather",
               # the c10d ops of torch 2.x's process groups not named above; a rooted reduce moves
               # what a reduce-scatter does, gather/scatter what an all-gather does
               "allreduce_coalesced_": "all_reduce", "allgather_coalesced_": "all_gather",
               "allgather_into_tensor_coalesced_": "all_gather",
               "reduce_scatter_tensor_coalesced_": "reduce_scatter", "reduce_": "reduce_scatter",
               "gather_": "all_gather", "scatter_": "all_gather"}
# Operators add_call maps whole through its own branch (matmuls, convolutions, softmax, norms,
# attention, embedding): a recorder that sees nested calls keeps these and not what they call.
# conv1d/conv2d/conv3d/conv_transpose*d are left to their callee `convolution`, which carries
# every argument the mapping needs (padding, dilation, groups, transposed) in one layout.
WHOLE_OPS = frozenset("""mm addmm bmm baddbmm linear matmul _scaled_mm addmm_ convolution
convolution_backward _convolution _softmax softmax _log_softmax log_softmax _softmax_backward_data
_log_softmax_backward_data native_layer_norm layer_norm native_layer_norm_backward rms_norm _fused_rms_norm
native_batch_norm _native_batch_norm_legit native_group_norm group_norm embedding
scaled_dot_product_attention""".split())
# Kernels add_call maps through a branch of their own, kept whole by a recorder that sees nested
# calls when the overload called is a kernel; a CompositeImplicitAutograd overload of the same name
# (upsample's `.vec`, which has only scale factors) is looked through to the overload it calls.
BATCH_NORMS = frozenset("""native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training
_batch_norm_with_update _batch_norm_no_update""".split())
GROUP_NORMS = frozenset(("native_group_norm", "group_norm"))
LAYER_NORMS = frozenset(("native_layer_norm", "layer_norm", "rms_norm", "_fused_rms_norm"))
NORM_BACKWARDS = frozenset(("native_batch_norm_backward", "batch_norm_backward",
                            "native_group_norm_backward", "native_layer_norm_backward"))
RNN_LAYERS = frozenset(("mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"))
POOLS = frozenset("""max_pool1d_with_indices max_pool2d_with_indices max_pool3d_with_indices avg_pool2d
avg_pool3d""".split())
# adaptive pooling: its output size instead of a kernel (AdaptiveAvgPool2d(1) runs as a `mean`)
ADAPTIVE_POOLS = frozenset("""_adaptive_avg_pool2d _adaptive_avg_pool3d adaptive_max_pool2d
adaptive_max_pool3d""".split())
POOL_BACKWARDS = frozenset("""max_pool2d_with_indices_backward max_pool3d_with_indices_backward
avg_pool2d_backward avg_pool3d_backward _adaptive_avg_pool2d_backward _adaptive_avg_pool3d_backward
adaptive_max_pool2d_backward adaptive_max_pool3d_backward""".split())
UPSAMPLES = frozenset("""upsample_nearest1d upsample_nearest2d upsample_nearest3d _upsample_nearest_exact1d
_upsample_nearest_exact2d _upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d
upsample_trilinear3d upsample_bicubic2d _upsample_bilinear2d_aa _upsample_bicubic2d_aa""".split())
UPSAMPLE_BACKWARDS = frozenset(f"{n}_backward" for n in UPSAMPLES)
POINT_LOSSES = frozenset(("mse_loss", "smooth_l1_loss", "huber_loss"))
POINT_LOSS_BACKWARDS = frozenset(f"{n}_backward" for n in POINT_LOSSES)
NLL_FORWARDS = frozenset(("nll_loss_forward", "nll_loss2d_forward"))
NLL_BACKWARDS = frozenset(("nll_loss_backward", "nll_loss2d_backward"))
KERNELS = (BATCH_NORMS | NORM_BACKWARDS | RNN_LAYERS | POOLS | ADAPTIVE_POOLS | POOL_BACKWARDS
           | UPSAMPLES | UPSAMPLE_BACKWARDS | POINT_LOSSES | POINT_LOSS_BACKWARDS | NLL_FORWARDS
           | NLL_BACKWARDS | frozenset(("sort", "topk")))
CONVOLUTIONS = frozenset(("convolution", "_convolution", "convolution_backward"))
# One kernel updating every parameter of the lists it is given: param, grad, then state lists
FUSED_OPTIMIZERS = frozenset(("_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adagrad_"))
COMPARISONS = frozenset(("eq", "ne", "gt", "lt", "ge", "le"))   # their result is a bool mask
# Where an attention operator's causal flag sits among its arguments (custom_mask_type for the
# memory-efficient kernels: non-zero is causal), in its default overload; tests check it against
# torch's schemas. Recorders name no overload: another one (FP8's `.quantized`) reads as non-causal.
ATTENTION_CAUSAL = {"scaled_dot_product_attention": 5, "_scaled_dot_product_attention_math": 5,
                    "_scaled_dot_product_flash_attention": 4,
                    "_scaled_dot_product_flash_attention_backward": 11,
                    "_scaled_dot_product_flash_attention_for_cpu": 4,
                    "_scaled_dot_product_flash_attention_for_cpu_backward": 7,
                    "_scaled_dot_product_efficient_attention": 6,
                    "_scaled_dot_product_efficient_attention_backward": 11,
                    "_scaled_dot_product_cudnn_attention": 6,
                    "_scaled_dot_product_cudnn_attention_backward": 14,
                    "_scaled_dot_product_fused_attention_overrideable": 5,
                    "_scaled_dot_product_fused_attention_overrideable_backward": 13,
                    "_flash_attention_forward": 8, "_flash_attention_backward": 11,
                    "_efficient_attention_forward": 9, "_efficient_attention_backward": 14}
# torch dtype -> the chip dtype it runs as. The chip has no FP64, and the model no integer types:
# an integer runs at the width of the float type of its size, int64 as int32 (neuronx-cc's
# default, --native-int64=disabled, downcasts it), a bool as a byte.
DTYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16",
          "torch.float8_e4m3fn": "fp8", "torch.float8_e5m2": "fp8", "torch.float8_e4m3fnuz": "fp8",
          "torch.float8_e5m2fnuz": "fp8", "torch.float64": "fp32",
          "torch.int64": "fp32", "torch.int32": "fp32", "torch.uint32": "fp32",
          "torch.int16": "fp16", "torch.uint16": "fp16",
          "torch.int8": "int8", "torch.uint8": "int8", "torch.bool": "int8"}
WIDTH = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}     # bytes per element
PARTITIONS = 128                     # SBUF partitions: rows a VectorE instruction works on at once
MAX8 = 8                             # VectorE's max8: the 8 largest of each partition's row at once
WINDOW_INPUTS = 32                   # windows up to this size reduce as streams, larger ones as rows


@dataclass(frozen=True, slots=True)
class AtenCall:
    """What the recorder keeps of one aten call (shapes of tensor arguments, in order)."""
    name: str                      # overload packet name, e.g. "mm"
    namespace: str                 # "aten", "c10d", ...
    shapes: tuple[tuple[int, ...], ...]
    dtype: str                     # torch dtype of the first floating tensor argument (or tensor)
    out_numel: int
    extra: tuple = ()              # convolution geometry, attention causality, else first int list
    out_dtype: str = ""            # the result's torch dtype when not `dtype` ("": the same)

    @property
    def label(self) -> str:
        """`aten::mm`; a range torch names without a namespace (`detach_`) as it is named."""
        return f"{self.namespace}::{self.name}" if self.namespace else self.name


def chip_dtype(torch_dtype: str, auto_cast: str, matmul: bool) -> str:
    """What a tensor of `torch_dtype` runs as; auto-cast turns FP32 floats (never integers)
    into BF16."""
    base = DTYPES.get(torch_dtype, "bf16")
    floating = torch_dtype.startswith("torch.float")
    if base == "fp32" and floating and (auto_cast == "all" or (auto_cast == "matmult" and matmul)):
        return "bf16"
    return base


def _prod(shape) -> int:
    return int(math.prod(shape)) if shape else 1


def _elements(call: AtenCall) -> int:
    if call.out_numel > 0:
        return call.out_numel
    return max((_prod(s) for s in call.shapes), default=1)


def add_call(prog: Program, call: AtenCall, auto_cast: str, group: CollectiveGroup | None) -> int:
    """Append the chip ops of one call; returns how many were added."""
    before = len(prog.ops)
    name = call.name
    label = call.label
    mm_dtype = chip_dtype(call.dtype, auto_cast, True)
    dtype = chip_dtype(call.dtype, auto_cast, False)
    out_dtype = chip_dtype(call.out_dtype or call.dtype, auto_cast, False)
    s = call.shapes
    if call.namespace == "c10d" or name in COLLECTIVES:
        kind = COLLECTIVES.get(name)
        if kind and group is not None and group.ranks > 1:
            nbytes = max(1, _elements(call) * WIDTH[dtype])
            prog.collective(kind, nbytes, group, dtype=dtype, name=label)
    elif name in ("mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "_scaled_mm", "addmm_"):
        _matmul(prog, name, s, mm_dtype, label, stored=dtype)
    elif name in CONVOLUTIONS:
        _conv(prog, s, call.extra, mm_dtype, label, backward=name == "convolution_backward")
    elif name in ("_softmax", "softmax", "_log_softmax", "log_softmax", "_softmax_backward_data",
                  "_log_softmax_backward_data"):
        shape = s[0] if s else (1,)
        prog.softmax(max(1, _prod(shape[:-1])), max(1, shape[-1] if shape else 1), dtype,
                     backward=name.endswith("_backward_data"), name=label)
    elif name in LAYER_NORMS:
        shape = s[0] if s else (1,)
        hidden = _norm_hidden(shape, call.extra[0] if call.extra else ())
        prog.layernorm(max(1, _prod(shape) // hidden), hidden, dtype, rms="rms" in name, name=label)
    elif name in BATCH_NORMS or name in GROUP_NORMS:
        _norm(prog, name, s, call.extra, dtype, label)
    elif name in NORM_BACKWARDS:
        _norm_backward(prog, name, s, call.extra, dtype, label)
    elif name in RNN_LAYERS:
        _rnn_layer(prog, s, mm_dtype, dtype, label, backward=name.endswith("_backward"))
    elif (name in POOLS or name in ADAPTIVE_POOLS or name in POOL_BACKWARDS or name in UPSAMPLES
          or name in UPSAMPLE_BACKWARDS):
        _resample(prog, name, s, call.extra, dtype, label)
    elif name in POINT_LOSSES or name in POINT_LOSS_BACKWARDS:
        _point_loss(prog, s, call.extra, dtype, label, backward=name.endswith("_backward"))
    elif name in NLL_FORWARDS:
        _nll_forward(prog, s, call.extra, dtype, label)
    elif name in NLL_BACKWARDS:
        # the gradient of the whole input ([N, C] or [N, C, H, W]): zeros, and -weight/total at
        # each target, written in full
        elements = _prod(s[1]) if len(s) > 1 else _elements(call)
        prog.dma(max(1, elements * WIDTH[dtype]), direction="store", name=label)
    elif name == "sort":
        _sort(prog, s[0] if s else (1,), call.extra, dtype, label)
    elif name == "topk":
        _topk(prog, s[0] if s else (1,), call.extra, dtype, label)
    elif "scaled_dot_product" in name or "flash_attention" in name or "efficient_attention" in name:
        _attention(prog, s, call.extra, mm_dtype, dtype, label, backward="backward" in name)
    elif name == "embedding":
        tokens = _prod(s[1]) if len(s) > 1 else 1
        hidden = s[0][-1] if s and s[0] else 1
        prog.embedding(max(1, tokens), max(1, hidden), dtype, name=label)
    elif name in FUSED_OPTIMIZERS:
        _fused_optimizer(prog, s, dtype, label)
    elif name in VIEWS:
        pass
    elif name in UNARY:
        prog.activation(UNARY[name], _elements(call), dtype, name=label)
    elif name in BINARY:
        _binary(prog, BINARY[name], call, dtype, out_dtype, label)
    elif name in ("max", "min") and len(s) > 1:      # max.other: elementwise, as `maximum`
        _binary(prog, "max" if name == "max" else "min", call, dtype, out_dtype, label)
    elif name in REDUCE:
        _reduction(prog, s[0] if s else (1,), call.extra, dtype, label)
    elif name in COPIES:
        _copy(prog, _elements(call), dtype, out_dtype, label)
    elif call.out_numel > 0:
        prog.activation("copy", call.out_numel, dtype, name=label)      # unknown: one VectorE pass
    return len(prog.ops) - before


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
    output_mask asks for: input and weight, each as costly as the forward, and the bias's as a
    reduction of grad_output."""
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
    for _ in range(mask[0] + mask[1] if backward else 1):
        prog.conv(rows, patch, cols, dtype, groups=groups, scatter=transposed, name=label)
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
    is twice that. Its arguments start with grad_output, then query, key, value."""
    q_at = 1 if backward else 0
    if len(s) < q_at + 1 or len(s[q_at]) < 2:
        return
    q = s[q_at]
    k = s[q_at + 1] if len(s) > q_at + 1 and len(s[q_at + 1]) >= 2 else q
    batch, seq, d, k_len = _prod(q[:-2]), q[-2], q[-1], k[-2]
    causal = bool(extra and extra[0])
    kw = {"left_dtype": dtype, "right_dtype": dtype, "out_dtype": dtype}
    for _ in range(2 if backward else 1):
        prog.matmul(seq, d, k_len, mm_dtype, batch=batch, weights=False, name=f"{label}.qk", **kw)
        prog.softmax(batch * seq, k_len, dtype, causal=causal, name=f"{label}.softmax")
        prog.matmul(seq, k_len, d, mm_dtype, batch=batch, weights=False, name=f"{label}.pv", **kw)


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
            label: str) -> None:
    """An operand smaller than the result (a scalar, a broadcast bias) is read once, not per
    element: with one full-size operand the op reads one tensor."""
    elements = _elements(call)
    full = sum(_prod(shape) == elements for shape in call.shapes[:2])
    prog.binary(func, elements, dtype, operands=1 if full == 1 else 2, out_dtype=out_dtype,
                name=label)


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


def _rnn_layer(prog: Program, s, mm_dtype: str, dtype: str, label: str, backward: bool) -> None:
    """One layer (one direction) of an RNN over a whole sequence (oneDNN's mkldnn_rnn_layer:
    input [T, B, I] or packed [tokens, I], weight_ih [G*H, I], weight_hh [G*H, H]; G = 4 gates
    for an LSTM). Every time step multiplies its input by weight_ih and the previous hidden
    state by weight_hh: over the sequence, [tokens, I + H] @ [I + H, G*H] (the steps'
    dependency is not modelled). The gates' sigmoids and tanhs (and tanh of the cell) are one
    ScalarE pass (`.gates`), the cell and hidden updates (f*c + i*g, o*tanh(c)) VectorE products
    (`.cell`). The backward makes the input and hidden-state gradients, [tokens, G*H] @
    [G*H, I + H], and the weight gradients, [I + H, tokens] @ [tokens, G*H] (`.dweight`):
    twice the forward's matmuls, and the gates' derivatives as products."""
    if len(s) < 3 or len(s[1]) != 2 or len(s[2]) != 2:
        return
    gates, inputs = s[1]
    hidden = s[2][1]
    tokens = _prod(s[0]) // max(1, inputs)
    if min(gates, inputs, hidden, tokens) <= 0:
        return
    kw = {"left_dtype": dtype, "right_dtype": dtype, "out_dtype": dtype}
    if backward:
        prog.matmul(tokens, gates, inputs + hidden, mm_dtype, name=label, **kw)
        prog.matmul(inputs + hidden, tokens, gates, mm_dtype, name=f"{label}.dweight", **kw)
        prog.binary("mul", tokens * (gates + hidden), dtype, name=f"{label}.gates")
    else:
        prog.matmul(tokens, inputs + hidden, gates, mm_dtype, name=label, **kw)
        prog.activation("sigmoid", tokens * (gates + hidden), dtype, name=f"{label}.gates")
    prog.binary("mul", 3 * tokens * hidden, dtype, name=f"{label}.cell")


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


def _copy(prog: Program, elements: int, src: str, dst: str, label: str) -> None:
    """A copy moves bytes by DMA; one that changes the width (`x.to(torch.bfloat16)`) converts on
    VectorE, reading at the source's width and writing at the result's."""
    if WIDTH[src] != WIDTH[dst]:
        prog.cast(max(1, elements), src, dst, name=label)
    else:
        prog.dma(max(1, elements * WIDTH[dst]), direction="copy", name=label)


def _ints(v) -> tuple[int, ...]:
    return tuple(int(x) for x in v) if isinstance(v, (list, tuple)) else ()


def conv_extra(name: str, args) -> tuple:
    """(stride, padding, dilation, transposed, output_padding, groups, output_mask) of a
    convolution call from its positional arguments: convolution(input, weight, bias, stride,
    padding, dilation, transposed, output_padding, groups), convolution_backward(grad_output,
    input, weight, bias_sizes, the same ..., output_mask)."""
    at = 4 if name == "convolution_backward" else 3
    a = list(args) + [None] * 8
    groups = a[at + 5] if isinstance(a[at + 5], int) else 1
    return (_ints(a[at]), _ints(a[at + 1]), _ints(a[at + 2]), int(bool(a[at + 3])),
            _ints(a[at + 4]), int(groups), _ints(a[at + 6]) if at == 4 else ())


def call_extra(name: str, args) -> tuple | None:
    """What the mapping needs of a call beyond shapes and dtypes, from its arguments in
    schema order (both recorders); None: the recorder's default (its first int list)."""
    if name in CONVOLUTIONS and len(args) > 5:
        return conv_extra(name, args)
    at = ATTENTION_CAUSAL.get(name)
    if at is not None:
        flag = args[at] if len(args) > at else 0          # the Python recorder drops defaults
        return (int(bool(flag)) if isinstance(flag, (bool, int)) else 0,)
    if name in REDUCE:
        return reduce_extra(name, list(args))
    if name in KERNELS or name in LAYER_NORMS or name in GROUP_NORMS:
        return _kernel_extra(name, list(args))
    return None


def _ndim(a) -> int | None:
    """Rank of a tensor argument as either recorder gives it (a tensor, or the native recorder's
    ("T", dtype, shape)); None for anything else."""
    if isinstance(a, tuple):
        return len(a[2]) if len(a) == 3 and a[0] == "T" and isinstance(a[2], tuple) else None
    shape = getattr(a, "shape", None)
    return len(shape) if shape is not None else None


def reduce_extra(name: str, a: list) -> tuple | None:
    """(dims, keepdim) of a reduction from its arguments in schema order (the Python recorder
    puts keyword-only arguments and defaults in place for these): every reduced dim, sorted and
    made non-negative; dim=None, an empty list or no dim at all is every dim. None (the
    recorder's default) when the first argument is not one tensor (_foreach_norm's list: each
    tensor whole)."""
    ndim = _ndim(a[0]) if a else None
    if ndim is None:
        return None
    dim = _arg(a, REDUCE_DIM_AT.get(name, 1))
    if isinstance(dim, (list, tuple)) and dim and all(isinstance(d, int) for d in dim):
        dims = dim
    elif isinstance(dim, int) and not isinstance(dim, bool) and name in INT_DIM:
        dims = (dim,)
    else:
        dims = range(ndim)
    dims = sorted({int(d) % ndim for d in dims}) if ndim else ()
    return (tuple(dims), _flag(_arg(a, KEEPDIM_AT.get(name, 2)), 0))


def reduce_result(name: str, shape, a: list) -> int | None:
    """Elements a reduction returns (two tensors for var_mean, std_mean and max/min along a
    dim), from its arguments; None when reduce_extra cannot tell."""
    extra = reduce_extra(name, a)
    if extra is None or not isinstance(shape, tuple):
        return None
    kept = _prod(shape) // max(1, _prod([shape[d] for d in extra[0]]))
    along = name in ("max", "min") and isinstance(_arg(a, 1), int)       # max.dim: values, indices
    pair = along or name in ("var_mean", "std_mean")
    return kept * (2 if pair else 1)


def _arg(args: list, at: int, default=None):
    return args[at] if len(args) > at and args[at] is not None else default


def _flag(v, default: int = 1) -> int:
    return int(bool(v)) if isinstance(v, (bool, int)) else default


def _kernel_extra(name: str, a: list) -> tuple | None:
    """The arguments add_call's own branches read, in each operator's schema order (both
    recorders: the native one decodes bools as ints and int lists as tuples; the Python one
    drops trailing defaults). None: the recorder's default."""
    if name in LAYER_NORMS:                           # (input, normalized_shape, ...)
        return (_ints(_arg(a, 1, ())),)
    if name == "native_layer_norm_backward":          # (dy, x, normalized_shape, ..., output_mask)
        return (_ints(_arg(a, 2, ())), _ints(_arg(a, 7, (1, 1, 1))))
    if name in ("native_batch_norm_backward", "batch_norm_backward"):   # train 7, output_mask 9
        return (_flag(_arg(a, 7)), _ints(_arg(a, 9, (1, 1, 1))))
    if name == "native_group_norm_backward":          # group 8, output_mask 9
        return (int(_arg(a, 8, 1)), _ints(_arg(a, 9, (1, 1, 1))))
    if name in GROUP_NORMS:                           # group_norm's num_groups 1, native's group 6
        return (int(_arg(a, 1 if name == "group_norm" else 6, 1)),)
    if name in BATCH_NORMS:
        if name in ("_native_batch_norm_legit_no_training", "_batch_norm_no_update"):
            return (0,)
        if name == "_batch_norm_with_update":
            return (1,)
        # `training`: the first flag after the tensors (5; 3 in _native_batch_norm_legit.no_stats)
        return (next((_flag(v) for v in a[1:] if isinstance(v, (bool, int))), 1),)
    if name in POOLS:         # (self, kernel, stride, padding, dilation (max only), ceil_mode)
        ceil_at = 5 if name.startswith("max") else 4
        dilation = _ints(_arg(a, 4, ())) if name.startswith("max") else ()
        return (_ints(_arg(a, 1, ())), _ints(_arg(a, 2, ())), _ints(_arg(a, 3, ())), dilation,
                _flag(_arg(a, ceil_at), 0))
    if name in ADAPTIVE_POOLS:                        # (self, output_size)
        return (_ints(_arg(a, 1, ())),)
    if name in NLL_FORWARDS:                          # (self, target, weight, reduction, ...)
        return (int(_arg(a, 3, 1)),)
    if name == "topk":                                # (self, k, dim=-1, largest, sorted)
        ndim, k, dim = _ndim(a[0]) if a else None, _arg(a, 1, 1), _arg(a, 2, -1)
        if ndim is None or not isinstance(k, int) or not isinstance(dim, int):
            return None
        return (int(k), dim % ndim if ndim else 0)
    if name in UPSAMPLES:                             # (self, output_size, ...)
        return (_ints(_arg(a, 1, ())),)
    if name in UPSAMPLE_BACKWARDS:                    # (grad_output, output_size, input_size, ...)
        return (_ints(_arg(a, 2, ())),)
    if name in POINT_LOSSES:                          # (self, target, reduction=mean)
        return (int(_arg(a, 2, 1)),)
    if name == "sort":        # sort(self, dim=-1, descending), sort.stable(self, stable, dim, ...)
        dim = _arg(a, 2 if len(a) >= 4 else 1, -1)
        return (int(dim) if isinstance(dim, int) else -1,)
    return None
