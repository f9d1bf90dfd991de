"""What the mapping needs of a call beyond its shapes and dtypes, read from its arguments.

`call_extra` (convolution geometry, attention causality, a reduction's dims and keepdim, the
arguments of add_call's own kernel branches), `reduce_result` (the elements a reduction returns)
and their helpers, each reading an operator's arguments in schema order as either recorder gives
them. Separate from the mapping because the recorders run these, per call, in the script's own
process; the mapping reads only what they return (`AtenCall.extra`).
"""
from __future__ import annotations

from .aten_names import (ADAPTIVE_POOLS, ATTENTION_CAUSAL, BATCH_NORMS, CONVOLUTIONS,
                         EMBEDDING_BAGS, GROUP_NORMS, INT_DIM, KEEPDIM_AT, KERNELS, LAYER_NORMS,
                         NLL_FORWARDS, POINT_LOSSES, POOLS, REDUCE, REDUCE_DIM_AT,
                         UPSAMPLE_BACKWARDS, UPSAMPLES, _prod)


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


def _int(v, default: int) -> int:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else default


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
    if name in EMBEDDING_BAGS:  # (weight, indices, offsets, scale_grad_by_freq, mode, sparse,
        # per_sample_weights, include_last_offset, ...): (mode, include_last_offset)
        return (_int(_arg(a, 4), 0), _flag(_arg(a, 7), 0))
    if name == "_embedding_bag_backward":   # (grad, indices, offsets, offset2bag, bag_size,
        # maximum_indices, num_weights, scale_grad_by_freq, mode, ...): (num_weights, mode)
        return (_int(_arg(a, 6), 0), _int(_arg(a, 8), 0))
    if name == "_embedding_bag_dense_backward":   # (grad, indices, offset2bag, bag_size,
        # maximum_indices, num_weights, scale_grad_by_freq, mode, ...)
        return (_int(_arg(a, 5), 0), _int(_arg(a, 7), 0))
    if name == "sort":        # sort(self, dim=-1, descending), sort.stable(self, stable, dim, ...)
        dim = _arg(a, 2 if len(a) >= 4 else 1, -1)
        return (int(dim) if isinstance(dim, int) else -1,)
    return None
