"""The aten operator tables, the record a recorder keeps of one call, and the dtype it runs as.

Which operators are views, elementwise (unary, binary), reductions, copies, collectives, kept
whole by a recorder that sees nested calls (WHOLE_OPS, KERNELS) or mapped through a branch of
their own (norms, pooling, upsampling, losses, convolutions, attention, fused optimizers);
`AtenCall`, what a recorder keeps of a call; the torch dtype -> chip dtype table and its widths.
Separate from the mapping because both sides read them: the recorders, in a script's own process
(which has no chip model), classify calls by these tables, and `aten_map.add_call` dispatches on
them. It imports nothing of neuronscope.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

VIEWS = frozenset("""view _unsafe_view reshape t transpose permute expand expand_as slice select unsqueeze
squeeze detach detach_ alias as_strided split split_with_sizes unbind chunk narrow view_as lift_fresh
_reshape_alias unfold diagonal flatten empty empty_like empty_strided new_empty new_empty_strided
_local_scalar_dense item is_same_size size stride numel dim sym_size sym_stride set_ result_type
_has_compatible_shallow_copy_type view_as_complex view_as_real _conj conj _neg_view real imag
resolve_conj resolve_neg""".split()) | frozenset(
    # host-side checks: torch.multinomial's `_assert_async` of its probabilities does no device work
    "_assert_async _assert_scalar _functional_assert_async _assert_tensor_metadata".split())
UNARY = {"relu": "relu", "relu_": "relu", "gelu": "gelu", "silu": "silu", "silu_": "silu", "tanh": "tanh",
         "sigmoid": "sigmoid", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt",
         "reciprocal": "reciprocal", "erf": "erf", "sin": "sin", "sin_": "sin", "cos": "sin",
         "cos_": "sin", "softplus": "softplus", "mish": "mish",
         "gelu_backward": "gelu_dx", "silu_backward": "silu_dx", "mish_backward": "mish",
         "threshold_backward": "relu",
         "tanh_backward": "tanh", "sigmoid_backward": "sigmoid", "neg": "copy", "abs": "copy",
         "pow": "square", "square": "square", "clamp": "copy", "clamp_": "copy", "fill_": "copy",
         "zero_": "copy", "zeros_like": "copy", "ones_like": "copy", "full_like": "copy", "zeros": "copy",
         "ones": "copy", "full": "copy", "bernoulli_": "copy", "native_dropout": "copy",
         "native_dropout_backward": "copy", "masked_fill": "copy", "masked_fill_": "copy", "sign": "copy"}
# activation gradients that read dy and x (two tensors) and write dx
# activation gradients that read two tensors (dy and the forward's input or output), write dx
GRADIENT_ACTIVATIONS = frozenset(("gelu_backward", "silu_backward", "mish_backward",
                                  "threshold_backward", "tanh_backward", "sigmoid_backward"))
BINARY = {"add": "add", "add_": "add", "sub": "sub", "sub_": "sub", "rsub": "sub", "mul": "mul",
          "mul_": "mul", "div": "div", "div_": "div", "maximum": "max", "minimum": "min", "where": "max",
          "addcmul_": "mul", "addcdiv_": "div", "lerp_": "add", "lerp": "add",
          "eq": "sub", "ne": "sub", "gt": "sub", "lt": "sub",
          "ge": "sub", "le": "sub", "_foreach_add_": "add", "_foreach_mul_": "mul", "_foreach_div_": "div",
          "_foreach_addcmul_": "mul", "_foreach_addcdiv_": "div", "_foreach_sqrt": "mul",
          "_foreach_lerp_": "add", "_foreach_sub_": "sub", "_foreach_add": "add", "_foreach_mul": "mul",
          # GradScaler.unscale_: every gradient read, checked and scaled in place (by a scalar)
          "_amp_foreach_non_finite_check_and_unscale_": "mul"}
# binary ops of a third tensor argument (the weight of `lerp`, the tensors `addcmul`/`addcdiv`
# scale, `where`'s other branch), read element by element where it is the result's size
THREE_OPERANDS = frozenset(("addcmul_", "addcdiv_", "lerp_", "lerp", "where"))
REDUCE = frozenset("sum mean amax amin max min var std var_mean std_mean norm argmax argmin any "
                   "all logsumexp linalg_vector_norm nansum _foreach_norm".split())
# Where a reduction's `dim` sits among its arguments in schema order (elsewhere: second), and its
# `keepdim` (elsewhere: third). Only the reductions of INT_DIM take a single int `dim`; the others
# take an int list, and an int in its place is another argument (var's `unbiased`, a dtype).
REDUCE_DIM_AT = {"norm": 2, "linalg_vector_norm": 2}
KEEPDIM_AT = {"norm": 3, "linalg_vector_norm": 3, "var": 3, "std": 3, "var_mean": 3, "std_mean": 3}
INT_DIM = frozenset("max min argmax argmin any all".split())
COPIES = frozenset("copy_ clone _to_copy contiguous cat stack index_select gather scatter "
                   "index index_put_ _index_put_impl_ embedding_dense_backward repeat tril triu "
                   "constant_pad_nd arange _copy_from flip".split())
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
MATMULS = frozenset("mm addmm bmm baddbmm linear matmul _scaled_mm addmm_".split())
SOFTMAXES = frozenset("""_softmax softmax _log_softmax log_softmax _softmax_backward_data
_log_softmax_backward_data""".split())
WHOLE_OPS = MATMULS | SOFTMAXES | frozenset("""convolution convolution_backward _convolution
native_layer_norm layer_norm native_layer_norm_backward rms_norm _fused_rms_norm native_batch_norm
_native_batch_norm_legit native_group_norm group_norm embedding
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
# nn.EmbeddingBag: a gather of the bags' rows and a reduction per bag; its gradient, the gradient
# rows scatter-added into the table's. The backward's arguments: _embedding_bag_backward's
# (grad, indices, offsets, ...), the dense one's (grad, indices, offset2bag, ...).
EMBEDDING_BAGS = frozenset(("_embedding_bag", "_embedding_bag_forward_only"))
EMBEDDING_BAG_BACKWARDS = frozenset(("_embedding_bag_backward", "_embedding_bag_dense_backward"))
# Scatters that combine source elements into the destination elements an index picks (read-
# modify-write of those; the out-of-place ones copy `self` first): (self, dim, index, src, ...)
SCATTERS = frozenset("""scatter_add scatter_add_ scatter_reduce scatter_reduce_ index_add index_add_
index_reduce index_reduce_""".split())
SCANS = frozenset(("cumsum", "cumsum_"))
KERNELS = (BATCH_NORMS | NORM_BACKWARDS | RNN_LAYERS | POOLS | ADAPTIVE_POOLS | POOL_BACKWARDS
           | UPSAMPLES | UPSAMPLE_BACKWARDS | POINT_LOSSES | POINT_LOSS_BACKWARDS | NLL_FORWARDS
           | NLL_BACKWARDS | EMBEDDING_BAGS | EMBEDDING_BAG_BACKWARDS | SCATTERS | SCANS
           | frozenset(("sort", "topk")))
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
# A complex tensor runs as its real and imaginary parts: a last dim twice as long, of this type.
COMPLEX_PARTS = {"torch.complex64": "torch.float32", "torch.complex128": "torch.float64",
                 "torch.complex32": "torch.float16"}


def as_real(call: "AtenCall") -> "AtenCall":
    """A call on complex tensors as the chip runs it, on their real and imaginary parts (twice
    the elements, each of the real type); any other call as it is."""
    part = COMPLEX_PARTS.get(call.dtype)
    if part is None:
        return call
    shapes = tuple((*s[:-1], 2 * s[-1]) if s else (2,) for s in call.shapes)
    out = COMPLEX_PARTS.get(call.out_dtype, call.out_dtype)
    return replace(call, shapes=shapes, dtype=part, out_numel=2 * call.out_numel,
                   out_dtype="" if out == part else out)


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
