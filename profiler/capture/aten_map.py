"""Maps recorded aten operators onto the chip model's Program builders.

mm/addmm/bmm/linear/convolution -> TensorE matmuls; elementwise -> ScalarE activations or VectorE
binaries; softmax, layer norm and attention as composites; batch/group norm as per-channel (per-group)
statistics and a normalizing pass; RNN layers as their gate matmuls and gate elementwise work;
pooling, upsampling, losses, sorting and topk as reductions or elementwise passes over their tensors
(the NLL forward as a gather of one element per target); embedding bags as a gather of their
rows and a reduction per bag, their gradient as a scatter of gradient rows; scatter_add,
scatter_reduce, index_add and index_reduce as a read-modify-write of the elements they touch;
cumsum as one VectorE scan pass; reductions over any set of dims ->
VectorE; copies -> DMA (a VectorE conversion when the dtype changes); fused optimizers
-> one pass over their tensors; torch.distributed collectives -> collectives. Views, other
metadata-only ops and host-side checks cost nothing.

This module is the entry point: `add_call` picks the mapping by operator name. The operator
tables, the call record and the dtypes live in `aten_names`, the reading of a call's arguments
(which the recorders run) in `aten_args`, the mappings of single compute kernels in
`aten_kernels` and of whole layers in `aten_layers`. Every name the recorders, the profile
builder and the tests import from here is still importable from here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .aten_args import call_extra, conv_extra, reduce_extra, reduce_result
from .aten_kernels import (MAX8, PARTITIONS, _attention, _binary, _conv, _copy, _fused_optimizer,
                           _matmul, _reduction, _scan, _scatter, _sort, _topk)
from .aten_layers import (WINDOW_INPUTS, _embedding_bag, _embedding_bag_backward, _nll_forward,
                          _norm, _norm_backward, _norm_hidden, _point_loss, _resample, _rnn_layer)
from .aten_names import (ADAPTIVE_POOLS, ATTENTION_CAUSAL, BATCH_NORMS, BINARY, COLLECTIVES,
                         COMPARISONS, CONVOLUTIONS, COPIES, DTYPES, EMBEDDING_BAG_BACKWARDS,
                         EMBEDDING_BAGS, FUSED_OPTIMIZERS, GRADIENT_ACTIVATIONS, GROUP_NORMS,
                         INT_DIM, KEEPDIM_AT, KERNELS, LAYER_NORMS, MATMULS, NLL_BACKWARDS,
                         NLL_FORWARDS, SCANS, SCATTERS, SOFTMAXES,
                         NORM_BACKWARDS, POINT_LOSS_BACKWARDS, POINT_LOSSES, POOL_BACKWARDS, POOLS,
                         REDUCE, REDUCE_DIM_AT, RNN_LAYERS, THREE_OPERANDS, UNARY,
                         UPSAMPLE_BACKWARDS, UPSAMPLES,
                         VIEWS, WHOLE_OPS, WIDTH, AtenCall, _elements, _prod, chip_dtype)

if TYPE_CHECKING:      # a script's process imports this module without the chip model
    from device_model.program import CollectiveGroup, Program

# re-exported: the recorders, to_profile and the tests import these from here
__all__ = [
    "ADAPTIVE_POOLS", "ATTENTION_CAUSAL", "BATCH_NORMS", "BINARY", "COLLECTIVES", "COMPARISONS",
    "CONVOLUTIONS", "COPIES", "DTYPES", "EMBEDDING_BAG_BACKWARDS", "EMBEDDING_BAGS",
    "FUSED_OPTIMIZERS", "GROUP_NORMS", "INT_DIM", "KEEPDIM_AT", "SCANS", "SCATTERS",
    "KERNELS", "LAYER_NORMS", "MAX8", "NLL_BACKWARDS", "NLL_FORWARDS", "NORM_BACKWARDS",
    "PARTITIONS", "POINT_LOSS_BACKWARDS", "POINT_LOSSES", "POOL_BACKWARDS", "POOLS", "REDUCE",
    "REDUCE_DIM_AT", "RNN_LAYERS", "UNARY", "UPSAMPLE_BACKWARDS", "UPSAMPLES", "VIEWS",
    "WHOLE_OPS", "WIDTH", "WINDOW_INPUTS", "AtenCall", "add_call", "call_extra", "chip_dtype",
    "conv_extra", "reduce_extra", "reduce_result",
]


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
    elif name in MATMULS:
        _matmul(prog, name, s, mm_dtype, label, stored=dtype)
    elif name in CONVOLUTIONS:
        _conv(prog, s, call.extra, mm_dtype, label, backward=name == "convolution_backward")
    elif name in SOFTMAXES:
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
    elif name in EMBEDDING_BAGS:
        _embedding_bag(prog, s, call.extra, dtype, label)
    elif name in EMBEDDING_BAG_BACKWARDS:
        _embedding_bag_backward(prog, s, call.extra, dtype, label)
    elif name in SCATTERS:
        _scatter(prog, name, s, dtype, label)
    elif name in SCANS:
        _scan(prog, s[0] if s else (1,), dtype, label)
    elif name in FUSED_OPTIMIZERS:
        _fused_optimizer(prog, s, dtype, label)
    elif name in VIEWS:
        pass
    elif name in UNARY:
        prog.activation(UNARY[name], _elements(call), dtype, name=label,
                        inputs=2 if name in GRADIENT_ACTIVATIONS else 1)
    elif name in BINARY:
        _binary(prog, BINARY[name], call, dtype, out_dtype, label, name in THREE_OPERANDS)
    elif name in ("max", "min") and len(s) > 1:      # max.other: elementwise, as `maximum`
        _binary(prog, "max" if name == "max" else "min", call, dtype, out_dtype, label)
    elif name in REDUCE:
        _reduction(prog, s[0] if s else (1,), call.extra, dtype, label)
    elif name in COPIES:
        _copy(prog, _elements(call), dtype, out_dtype, label)
    elif call.out_numel > 0:
        prog.activation("copy", call.out_numel, dtype, name=label)      # unknown: one VectorE pass
    return len(prog.ops) - before
