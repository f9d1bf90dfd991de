"""Maps recorded aten operators onto the chip model's Program builders.

mm/addmm/bmm/linear/convolution -> TensorE matmuls; elementwise -> ScalarE activations or VectorE
binaries; softmax, layer norm and attention as composites; reductions -> VectorE; copies -> DMA;
torch.distributed collectives -> collectives. Views and other metadata-only ops cost nothing.
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
_has_compatible_shallow_copy_type""".split())
UNARY = {"relu": "relu", "relu_": "relu", "gelu": "gelu", "silu": "silu", "silu_": "silu", "tanh": "tanh",
         "sigmoid": "sigmoid", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt",
         "reciprocal": "reciprocal", "erf": "erf", "sin": "sin", "softplus": "softplus", "mish": "mish",
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
          "_foreach_lerp_": "add", "_foreach_sub_": "sub", "_foreach_add": "add", "_foreach_mul": "mul"}
REDUCE = frozenset("sum mean amax amin max min var std var_mean norm argmax argmin nll_loss_forward "
                   "nll_loss_backward nll_loss2d_forward any all logsumexp".split())
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
WHOLE_OPS = frozenset("""mm addmm bmm baddbmm linear matmul _scaled_mm addmm_ convolution
convolution_backward _convolution conv2d _softmax softmax _log_softmax log_softmax _softmax_backward_data
_log_softmax_backward_data native_layer_norm layer_norm native_layer_norm_backward rms_norm _fused_rms_norm
native_batch_norm _native_batch_norm_legit native_group_norm group_norm embedding
scaled_dot_product_attention""".split())
DTYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16",
          "torch.float8_e4m3fn": "fp8", "torch.float8_e5m2": "fp8", "torch.float64": "fp32"}


@dataclass(frozen=True, slots=True)
class AtenCall:
    """What the recorder keeps of one aten call (shapes of tensor arguments, in order)."""
    name: str                      # overload packet name, e.g. "mm"
    namespace: str                 # "aten", "c10d", ...
    shapes: tuple[tuple[int, ...], ...]
    dtype: str                     # torch dtype string of the first floating tensor argument
    out_numel: int
    extra: tuple = ()              # convolution stride/padding, list lengths of foreach ops

    @property
    def label(self) -> str:
        """`aten::mm`; a range torch names without a namespace (`detach_`) as it is named."""
        return f"{self.namespace}::{self.name}" if self.namespace else self.name


def chip_dtype(torch_dtype: str, auto_cast: str, matmul: bool) -> str:
    base = DTYPES.get(torch_dtype, "bf16")
    if base == "fp32" and (auto_cast == "all" or (auto_cast == "matmult" and matmul)):
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
    s = call.shapes
    if call.namespace == "c10d" or name in COLLECTIVES:
        kind = COLLECTIVES.get(name)
        if kind and group is not None and group.ranks > 1:
            nbytes = max(1, _elements(call) * (4 if dtype == "fp32" else 2))
            prog.collective(kind, nbytes, group, dtype=dtype, name=label)
    elif name in ("mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "_scaled_mm", "addmm_"):
        _matmul(prog, name, s, mm_dtype, label, stored=dtype)
    elif name in ("convolution", "convolution_backward", "_convolution", "conv2d"):
        _conv(prog, s, call.extra, mm_dtype, label, backward=name == "convolution_backward")
    elif name in ("_softmax", "softmax", "_log_softmax", "log_softmax", "_softmax_backward_data",
                  "_log_softmax_backward_data"):
        shape = s[0] if s else (1,)
        prog.softmax(max(1, _prod(shape[:-1])), max(1, shape[-1] if shape else 1), dtype,
                     backward=name.endswith("_backward_data"), name=label)
    elif name in ("native_layer_norm", "layer_norm", "native_layer_norm_backward", "rms_norm",
                  "_fused_rms_norm", "native_batch_norm", "_native_batch_norm_legit",
                  "native_group_norm", "group_norm"):
        shape = s[0] if s else (1,)
        hidden = shape[-1] if shape else 1
        prog.layernorm(max(1, _prod(shape) // max(1, hidden)), max(1, hidden), dtype,
                       rms="rms" in name, name=label)
    elif "scaled_dot_product" in name or "flash_attention" in name:
        _attention(prog, s, mm_dtype, dtype, label, backward="backward" in name)
    elif name == "embedding":
        tokens = _prod(s[1]) if len(s) > 1 else 1
        hidden = s[0][-1] if s and s[0] else 1
        prog.embedding(max(1, tokens), max(1, hidden), dtype, name=label)
    elif name in VIEWS:
        pass
    elif name in UNARY:
        prog.activation(UNARY[name], _elements(call), dtype, name=label)
    elif name in BINARY:
        prog.binary(BINARY[name], _elements(call), dtype, name=label)
    elif name in REDUCE:
        shape = s[0] if s else (1,)
        cols = shape[-1] if shape else 1
        prog.reduce(max(1, _prod(shape) // max(1, cols)), max(1, cols), dtype, name=label)
    elif name in COPIES:
        nbytes = _elements(call) * (4 if dtype == "fp32" else 2)
        prog.dma(max(1, nbytes), direction="copy", name=label)
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
    elif name in ("bmm", "baddbmm") and len(a) == 3 and len(b) == 3:
        prog.matmul(a[1], a[2], b[2], dtype, batch=a[0], weights=False, name=label, **kw)
    elif len(a) >= 2 and len(b) >= 2:
        prog.matmul(max(1, _prod(a[:-1])), a[-1], b[-1], dtype, batch=max(1, _prod(b[:-2])),
                    weights=len(b) == 2, name=label, **kw)


def _conv(prog: Program, s, extra, dtype: str, label: str, backward: bool) -> None:
    shapes = s[1:] if backward else s                # backward: (grad_out, input, weight)
    if len(shapes) < 2 or len(shapes[0]) != 4 or len(shapes[1]) != 4:
        return
    (n, c, h, w), (o, _, kh, kw) = shapes[0], shapes[1]
    stride, pad = (extra + (1, 0))[:2] if extra else (1, 0)
    for _ in range(2 if backward else 1):            # input grad and weight grad
        prog.conv2d(n, c, h, w, o, kh, kw, stride=stride, pad=pad, dtype=dtype, name=label)


def _attention(prog: Program, s, mm_dtype: str, dtype: str, label: str, backward: bool) -> None:
    if not s or len(s[0]) < 2:
        return
    q = s[0]
    k_len = s[1][-2] if len(s) > 1 and len(s[1]) >= 2 else q[-2]
    batch, seq, d = _prod(q[:-2]), q[-2], q[-1]
    kw = {"left_dtype": dtype, "right_dtype": dtype, "out_dtype": dtype}
    for _ in range(2 if backward else 1):
        prog.matmul(seq, d, k_len, mm_dtype, batch=batch, weights=False, name=f"{label}.qk", **kw)
        prog.softmax(batch * seq, k_len, dtype, name=f"{label}.softmax")
        prog.matmul(seq, k_len, d, mm_dtype, batch=batch, weights=False, name=f"{label}.pv", **kw)


def conv_extra(name: str, args) -> tuple:
    """Stride and padding of a convolution call, from its positional arguments."""
    stride = args[3] if name == "convolution" else args[4]
    padding = args[4] if name == "convolution" else args[5]
    return (int(stride[0]) if stride else 1, int(padding[0]) if padding else 0)
