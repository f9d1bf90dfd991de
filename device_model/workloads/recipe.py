"""Layer recipes: a layer's forward ops, each with the ops its backward pass runs.

A `Recipe` records `Program` builder calls. `emit_forward` replays them; `emit_backward` replays
each step's gradient ops in reverse order; `emit_forward(..., only="attn")` replays the steps a
selective activation checkpoint recomputes. One recipe serves training, recompute and inference.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..program import CollectiveGroup, Program

Call = tuple[str, tuple, tuple[tuple[str, Any], ...]]
_GRAD_OF = {"silu": "silu_dx", "gelu": "gelu_dx", "gelu_apprx_tanh": "gelu_dx"}
_MIRROR = {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather",
           "all_reduce": "all_reduce", "send_recv": "send_recv"}


def _call(method: str, *args: Any, **kwargs: Any) -> Call:
    return method, args, tuple(sorted(kwargs.items()))


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    forward: tuple[Call, ...]
    backward: tuple[Call, ...]
    tag: str = ""            # "attn": recomputed by selective checkpointing


@dataclass(slots=True)
class Recipe:
    """`act` is the dtype of activations and elementwise math; `grad` the dtype weight gradients
    are written in (FP32 for mixed precision, so accumulation over micro-batches is exact);
    `weight` the dtype weights are stored in ("": as `mm_dtype`). Matmuls read each operand at
    the width it is stored in and write their output as an activation."""
    mm_dtype: str = "bf16"
    act: str = "bf16"
    grad: str = "fp32"
    weight: str = ""
    steps: list[Step] = field(default_factory=list)
    tag: str = ""

    @classmethod
    def of(cls, prec, weight: str = "") -> "Recipe":
        """An empty recipe in a precision's dtypes (a `transformer.Precision`); `weight`: the
        weights' stored dtype where it is not the precision's (quantized layers)."""
        return cls(prec.matmul, prec.act, weight=weight or prec.weight)

    def _add(self, name: str, fwd: list[Call], bwd: list[Call]) -> None:
        self.steps.append(Step(name, tuple(fwd), tuple(bwd), self.tag))

    # --- builders --------------------------------------------------------------------------
    def linear(self, name: str, m: int, k: int, n: int) -> None:
        """X[m,k] @ W[k,n]; backward dX = dY @ W^T and dW = X^T @ dY."""
        dt, act = self.mm_dtype, self.act
        on_weights = {"left_dtype": act, "right_dtype": self.weight or dt, "out_dtype": act}
        self._add(name, [_call("matmul", m, k, n, dt, name=name, **on_weights)],
                  [_call("matmul", m, n, k, dt, name=f"{name}.dx", **on_weights),
                   _call("matmul", k, m, n, dt, weights=False, out_dtype=self.grad,
                         left_dtype=act, right_dtype=act, name=f"{name}.dw")])

    def bmm(self, name: str, batch: int, m: int, k: int, n: int, run_bytes: int = 0) -> None:
        """Activation @ activation (attention): both operands get gradients. `run_bytes`: the
        right operand comes from the KV cache in runs of that many bytes per partition."""
        dt, act = self.mm_dtype, self.act
        both = {"left_dtype": act, "right_dtype": act, "out_dtype": act}
        extra = {"run_bytes": run_bytes} if run_bytes else {}
        self._add(name, [_call("matmul", m, k, n, dt, batch=batch, weights=False, name=name,
                               **both, **extra)],
                  [_call("matmul", m, n, k, dt, batch=batch, weights=False, name=f"{name}.da", **both),
                   _call("matmul", k, m, n, dt, batch=batch, weights=False, name=f"{name}.db", **both)])

    def attention(self, name: str, batch: int, q_rows: int, kv_len: int, head_dim: int,
                  causal: bool) -> None:
        """Fused attention: its backward recomputes the scores itself (no saved probabilities)."""
        args = (batch, q_rows, kv_len, head_dim, self.act)
        self._add(name, [_call("attention", *args, causal=causal, name=name)],
                  [_call("attention", *args, causal=causal, backward=True, name=f"{name}.bwd")])

    def norm(self, name: str, rows: int, hidden: int, rms: bool) -> None:
        self._add(name, [_call("layernorm", rows, hidden, self.act, rms=rms, name=name)],
                  [_call("layernorm", rows, hidden, self.act, rms=rms, name=f"{name}.dx"),
                   _call("binary", "mul", rows * hidden, self.act, name=f"{name}.dgamma"),
                   _call("reduce", hidden, rows, self.act, name=f"{name}.dgamma_sum")])

    def activation(self, name: str, func: str, elements: int) -> None:
        self._add(name, [_call("activation", func, elements, self.act, name=name)],
                  [_call("activation", _GRAD_OF.get(func, "copy"), elements, self.act, inputs=2,
                         name=f"{name}.dx")])

    def binary(self, name: str, func: str, elements: int, *, grads: int = 1) -> None:
        """`grads` ops in backward: 0 for a bias or residual add whose gradient passes through,
        1 for a mask or a residual fork, 2 for a product of two activations."""
        back = [_call("binary", "mul" if func == "mul" else "add", elements, self.act,
                      name=f"{name}.d{i}") for i in range(grads)]
        self._add(name, [_call("binary", func, elements, self.act, name=name)], back)

    def softmax(self, name: str, rows: int, cols: int, causal: bool) -> None:
        e = rows * cols
        self._add(name, [_call("softmax", rows, cols, self.act, causal=causal, name=name)],
                  [_call("binary", "mul", e, self.act, name=f"{name}.dy_y"),
                   _call("reduce", rows, cols, self.act, name=f"{name}.dsum"),
                   _call("binary", "sub", e, self.act, name=f"{name}.dsub"),
                   _call("binary", "mul", e, self.act, name=f"{name}.dx")])

    def collective(self, name: str, kind: str, nbytes: int, group: CollectiveGroup) -> None:
        if group.ranks <= 1:
            return
        self._add(name, [_call("collective", kind, nbytes, group, dtype=self.act, name=name)],
                  [_call("collective", _MIRROR[kind], nbytes, group, dtype=self.act,
                         name=f"{name}.bwd")])

    def embedding(self, name: str, tokens: int, hidden: int) -> None:
        self._add(name, [_call("embedding", tokens, hidden, self.act, name=name)],
                  [_call("binary", "add", tokens * hidden, "fp32", name=f"{name}.dw")])

    def reduce(self, name: str, rows: int, cols: int, func: str = "max") -> None:
        """A reduction with no gradient (sampling's argmax)."""
        self._add(name, [_call("reduce", rows, cols, self.act, func=func, name=name)], [])

    def store(self, name: str, nbytes: int) -> None:
        """A write with no gradient (the KV cache)."""
        self._add(name, [_call("dma", nbytes, direction="store", name=name)], [])


def _replay(program: Program, calls: tuple[Call, ...], prefix: str) -> None:
    for method, args, kwargs in calls:
        kw = dict(kwargs)
        kw["name"] = prefix + kw.get("name", method)
        getattr(program, method)(*args, **kw)


def emit_forward(program: Program, recipe: Recipe, prefix: str = "", only: str | None = None) -> None:
    for step in recipe.steps:
        if only is None or step.tag == only:
            _replay(program, step.forward, prefix)


def emit_backward(program: Program, recipe: Recipe, prefix: str = "") -> None:
    for step in reversed(recipe.steps):
        _replay(program, step.backward, prefix)
