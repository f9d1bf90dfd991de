"""Operator streams: what a workload asks one NeuronCore (logical core) to execute.

A `Program` is an ordered list of `Op`s. Each op names its producers (`deps`); by default an op
depends on the one before it. Collectives carry the `CollectiveGroup` they run over.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .catalog.dtypes import get_dtype
from .errors import SpecError

ACTIVATIONS = (
    "exp", "log", "tanh", "sigmoid", "gelu", "gelu_dx", "gelu_apprx_tanh", "silu", "silu_dx",
    "softplus", "mish", "erf", "sqrt", "rsqrt", "reciprocal", "relu", "square", "copy", "sin",
)
BINARY = ("add", "sub", "mul", "div", "max", "min")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


@dataclass(frozen=True, slots=True)
class CollectiveGroup:
    """Who takes part: `ranks` in total, `ranks_per_device` of them on each chip, over `nodes`
    instances. `active_per_device` counts the ranks on each chip that run a collective of this
    kind at the same time, in this group or in others (0: this group's own); they share the
    chip's NeuronLinks and EFA."""
    ranks: int
    ranks_per_device: int = 1
    devices: int = 1
    nodes: int = 1
    topology: str = "torus2d"
    active_per_device: int = 0

    @property
    def active(self) -> int:
        return max(self.ranks_per_device, self.active_per_device)

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.ranks_per_device < 1 or self.devices < 1 or self.nodes < 1 \
                or self.active_per_device < 0:
            raise SpecError(f"collective group sizes must be positive, got {self}")


@dataclass(frozen=True, slots=True)
class Op:
    kind: str
    name: str
    params: tuple[tuple[str, Any], ...]
    deps: tuple[int, ...] | None = None      # None: depends on the previous op
    phase: str = "forward"                   # forward | backward | optimizer | other

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self.params:
            if k == key:
                return v
        return default

    @property
    def key(self) -> tuple:
        """Identity for caching lowered stages: ops with equal keys cost the same."""
        return (self.kind, self.params)


def _share(model_share: float) -> dict[str, float]:
    """The `model_share` parameter, left out where it is 1 (the op's key stays as it was)."""
    if not 0.0 < model_share <= 1.0:
        raise SpecError(f"model_share must be in (0, 1], got {model_share!r}")
    return {} if model_share == 1.0 else {"model_share": float(model_share)}


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or value != int(value):
        raise SpecError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(slots=True)
class Program:
    ops: list[Op] = field(default_factory=list)
    phase: str = "forward"

    def _add(self, kind: str, name: str | None, deps: tuple[int, ...] | None, **params: Any) -> int:
        self.ops.append(Op(kind, name or kind, tuple(sorted(params.items())), deps, self.phase))
        return len(self.ops) - 1

    # --- TensorE ---------------------------------------------------------------------------
    def matmul(self, m: int, k: int, n: int, dtype: str = "bf16", *, batch: int = 1,
               out_dtype: str | None = None, weights: bool = True, name: str | None = None,
               deps: tuple[int, ...] | None = None, run_bytes: int = 0,
               left_dtype: str | None = None, right_dtype: str | None = None,
               model_share: float = 1.0) -> int:
        """[batch, m, k] @ [k, n] (or [batch, k, n] when weights=False). `weights` marks the right
        operand as a parameter that can be prefetched before the producer op finishes.
        `run_bytes`: the right operand is read in contiguous runs of this many bytes per
        partition (a KV cache read in decode); 0: its transfers spread evenly.
        `left_dtype`/`right_dtype`: what the operands are stored in, if not `dtype` (the matmul
        converts them as it loads them). `model_share`: the part of its FLOPs that are the
        model's (MFU), the rest being padding or replicated work (HFU only)."""
        for label, v in (("m", m), ("k", k), ("n", n), ("batch", batch)):
            _positive(label, v)
        get_dtype(dtype)
        stored = {key: get_dtype(value).name for key, value in
                  (("left_dtype", left_dtype), ("right_dtype", right_dtype))
                  if value and get_dtype(value).name != get_dtype(dtype).name}
        return self._add("matmul", name, deps, m=int(m), k=int(k), n=int(n), dtype=dtype, batch=int(batch),
                         out_dtype=out_dtype or ("fp32" if dtype == "fp32" else "bf16"), weights=weights,
                         **({"run_bytes": int(run_bytes)} if run_bytes else {}), **stored,
                         **_share(model_share))

    def transpose(self, rows: int, cols: int, dtype: str = "bf16", *, engine: str = "tensor",
                  name: str | None = None, deps: tuple[int, ...] | None = None) -> int:
        if engine not in ("tensor", "vector", "dma"):
            raise SpecError(f"transpose engine {engine!r}; allowed: tensor, vector, dma")
        return self._add("transpose", name, deps, rows=_positive("rows", rows),
                         cols=_positive("cols", cols), dtype=dtype, engine=engine)

    def conv2d(self, batch: int, cin: int, h: int, w: int, cout: int, kh: int, kw: int,
               stride: int = 1, pad: int = 0, dtype: str = "bf16", *, name: str | None = None,
               deps: tuple[int, ...] | None = None) -> int:
        """Convolution lowered via im2col (a DMA gather) and one matmul."""
        oh = (h + 2 * pad - kh) // stride + 1
        ow = (w + 2 * pad - kw) // stride + 1
        if oh <= 0 or ow <= 0:
            raise SpecError(f"conv2d kernel {kh}x{kw} does not fit input {h}x{w} with pad {pad}")
        return self.conv(batch * oh * ow, cin * kh * kw, cout, dtype, name=name or "conv2d",
                         deps=deps)

    def conv(self, rows: int, patch: int, cout: int, dtype: str = "bf16", *, groups: int = 1,
             scatter: bool = False, name: str | None = None,
             deps: tuple[int, ...] | None = None) -> int:
        """A convolution of any rank as a strided DMA and a matmul per group, [rows, patch] @
        [patch, cout]: `rows` positions (batch x spatial), `patch` elements each. A normal one
        gathers its input patches (im2col); a transposed one (`scatter`) multiplies each input
        position by the kernel and scatters the products into the output (col2im)."""
        moved = rows * (cout if scatter else patch) * groups
        first = self._add("im2col", f"{name or 'conv'}.{'col2im' if scatter else 'im2col'}", deps,
                          elements=_positive("elements", moved), dtype=dtype)
        return self.matmul(rows, patch, cout, dtype, batch=groups, weights=groups == 1,
                           name=name or "conv", deps=(first,))

    def attention(self, batch: int, q_rows: int, kv_len: int, head_dim: int, dtype: str = "bf16", *,
                  causal: bool = False, backward: bool = False, name: str | None = None,
                  deps: tuple[int, ...] | None = None, model_share: float = 1.0) -> int:
        """Fused (flash) attention over `batch` (sequence, KV head) pairs: `q_rows` query rows
        (query heads sharing the KV head times query length) against `kv_len` keys.
        `model_share` as for `matmul` (padded query heads)."""
        get_dtype(dtype)
        return self._add("attention", name or ("attention_bwd" if backward else "attention"), deps,
                         batch=_positive("batch", batch), q_rows=_positive("q_rows", q_rows),
                         kv_len=_positive("kv_len", kv_len), head_dim=_positive("head_dim", head_dim),
                         dtype=dtype, causal=causal, backward=backward, **_share(model_share))

    # --- ScalarE / VectorE / GpSimdE -------------------------------------------------------
    def activation(self, func: str, elements: int, dtype: str = "bf16", *, inputs: int = 1,
                   name: str | None = None, deps: tuple[int, ...] | None = None) -> int:
        if func not in ACTIVATIONS:
            raise SpecError(f"unknown activation {func!r}; allowed: {', '.join(ACTIVATIONS)}")
        return self._add("activation", name or func, deps, func=func,
                         elements=_positive("elements", elements), dtype=dtype, inputs=inputs)

    def binary(self, func: str, elements: int, dtype: str = "bf16", *, operands: int = 2,
               out_dtype: str | None = None, name: str | None = None,
               deps: tuple[int, ...] | None = None) -> int:
        """`operands`: tensors read element by element, 2, or 1 when the other operand is a
        scalar or broadcast (VectorE tensor_scalar). `out_dtype`: the result's, when not `dtype`
        (a comparison's mask)."""
        if func not in BINARY:
            raise SpecError(f"unknown binary op {func!r}; allowed: {', '.join(BINARY)}")
        if operands not in (1, 2):
            raise SpecError(f"a binary op reads 1 or 2 tensors, got {operands!r}")
        # only what differs from a plain tensor-tensor op is a parameter: ops without them keep
        # their cache keys (and lowering)
        extra: dict[str, Any] = {"operands": 1} if operands == 1 else {}
        if out_dtype and get_dtype(out_dtype).name != get_dtype(dtype).name:
            extra["out_dtype"] = get_dtype(out_dtype).name
        return self._add("binary", name or func, deps, func=func,
                         elements=_positive("elements", elements), dtype=dtype, **extra)

    def cast(self, elements: int, src: str, dst: str, *, name: str | None = None,
             deps: tuple[int, ...] | None = None) -> int:
        get_dtype(src), get_dtype(dst)
        return self._add("cast", name or "cast", deps, elements=_positive("elements", elements),
                         dtype=src, out_dtype=dst)

    def reduce(self, rows: int, cols: int, dtype: str = "bf16", *, func: str = "add",
               name: str | None = None, deps: tuple[int, ...] | None = None) -> int:
        return self._add("reduce", name or f"reduce_{func}", deps, rows=_positive("rows", rows),
                         cols=_positive("cols", cols), dtype=dtype, func=func)

    def softmax(self, rows: int, cols: int, dtype: str = "bf16", *, causal: bool = False,
                backward: bool = False, name: str | None = None,
                deps: tuple[int, ...] | None = None) -> int:
        """Row softmax over `cols`; `backward`: its gradient from the output and the output's
        gradient, dx = y * (dy - sum(y * dy)), one pass over the same row tiles."""
        return self._add("softmax", name or ("softmax_bwd" if backward else "softmax"), deps,
                         rows=_positive("rows", rows), cols=_positive("cols", cols), dtype=dtype,
                         causal=causal and not backward, **({"backward": True} if backward else {}))

    def layernorm(self, rows: int, hidden: int, dtype: str = "bf16", *, rms: bool = False,
                  name: str | None = None, deps: tuple[int, ...] | None = None) -> int:
        return self._add("rmsnorm" if rms else "layernorm", name or ("rmsnorm" if rms else "layernorm"),
                         deps, rows=_positive("rows", rows), hidden=_positive("hidden", hidden), dtype=dtype)

    def embedding(self, tokens: int, hidden: int, dtype: str = "bf16", *, name: str | None = None,
                  deps: tuple[int, ...] | None = None) -> int:
        return self._add("embedding", name or "embedding", deps, tokens=_positive("tokens", tokens),
                         hidden=_positive("hidden", hidden), dtype=dtype)

    def dma(self, nbytes: int, *, direction: str = "load", name: str | None = None,
            deps: tuple[int, ...] | None = None) -> int:
        if direction not in ("load", "store", "copy"):
            raise SpecError(f"dma direction {direction!r}; allowed: load, store, copy")
        return self._add("dma", name or f"dma_{direction}", deps, bytes=_positive("bytes", nbytes),
                         direction=direction)

    # --- collectives -----------------------------------------------------------------------
    def collective(self, kind: str, nbytes: int, group: CollectiveGroup, *, dtype: str = "bf16",
                   name: str | None = None, deps: tuple[int, ...] | None = None) -> int:
        """`nbytes` is the per-rank buffer: the input of all-reduce/reduce-scatter/all-to-all, the
        output of all-gather (nccl-tests convention)."""
        if kind not in COLLECTIVES:
            raise SpecError(f"unknown collective {kind!r}; allowed: {', '.join(COLLECTIVES)}")
        return self._add("collective", name or kind, deps, coll=kind, bytes=_positive("bytes", nbytes),
                         group=group, dtype=dtype)
