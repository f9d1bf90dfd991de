"""Layer recipes: a layer's forward ops, each with the ops its backward pass runs.

A `Recipe` records `Program` builder calls. `emit_forward` replays them; `emit_backward` replays
each step's gradient ops in reverse order; `emit_forward(..., only="attn")` replays the steps a
selective activation checkpoint recomputes. One recipe serves training, recompute and inference.

A backward call may name its producers by how many ops back they were emitted (`back`): a
column-parallel linear's backward runs its collectives beside the matmuls that do not need
them, as the compiler schedules the graph by its data dependencies.
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


def _shared(model_share: float) -> dict[str, float]:
    """The builder argument for a share of model work, none where it is all the model's."""
    return {} if model_share == 1.0 else {"model_share": model_share}


@dataclass(frozen=True, slots=True)
class Join:
    """How a column-parallel linear meets its tensor-parallel `group`: `nbytes` is its gathered
    input (all tokens x the model width, at the activation width); `sp`: sequence parallel (the
    input arrives as a 1/tp shard of the tokens and is all-gathered)."""
    group: CollectiveGroup
    nbytes: int
    sp: bool


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
    def linear(self, name: str, m: int, k: int, n: int, join: Join | None = None,
               model_share: float = 1.0) -> None:
        """X[m,k] @ W[k,n]; backward dX = dY @ W^T and dW = X^T @ dY. With `join` the linear is
        column parallel (NxD's `LinearWithAsyncCommunication`, Megatron's alike): under sequence
        parallelism X is all-gathered first, and again in backward for dW (only the shard is
        saved); the partial dX is reduce-scattered (all-reduced without SP). Nothing waits on
        those collectives but the ops after the linear: the backward gather runs beside dX and
        the dX reduction beside dW. `model_share`: the part of its work that is the model's
        (columns of padded or replicated heads are the chip's only), in all three matmuls."""
        dt, act = self.mm_dtype, self.act
        on_weights = {"left_dtype": act, "right_dtype": self.weight or dt, "out_dtype": act,
                      **_shared(model_share)}
        forward = [_call("matmul", m, k, n, dt, name=name, **on_weights)]

        def dx(**after):
            return _call("matmul", m, n, k, dt, name=f"{name}.dx", **on_weights, **after)

        def dw(**after):
            return _call("matmul", k, m, n, dt, weights=False, out_dtype=self.grad,
                         left_dtype=act, right_dtype=act, name=f"{name}.dw",
                         **_shared(model_share), **after)

        if join is None or join.group.ranks <= 1:
            self._add(name, forward, [dx(), dw()])
            return

        def collective(kind: str, label: str, **after):
            return _call("collective", kind, join.nbytes, join.group, dtype=act,
                         name=f"{name}.{label}", **after)

        # the input gradient's reduction waits on dX (two ops back), not on dW between them
        kind = "reduce_scatter" if join.sp else "all_reduce"
        reduce = collective(kind, f"dx_{kind}", back=(2,))
        if not join.sp:
            self._add(name, forward, [dx(), dw(back=(2,)), reduce])     # dW on dY, before dX
            return
        # dX on dY (before the gather), dW on the gathered X and dY
        self._add(name, [collective("all_gather", "all_gather"), *forward],
                  [collective("all_gather", "dw_all_gather"), dx(back=(2,)), dw(back=(2, 3)),
                   reduce])

    def bmm(self, name: str, batch: int, m: int, k: int, n: int, run_bytes: int = 0,
            model_share: float = 1.0) -> None:
        """Activation @ activation (attention): both operands get gradients. `run_bytes`: the
        right operand comes from the KV cache in runs of that many bytes per partition."""
        dt, act = self.mm_dtype, self.act
        both = {"left_dtype": act, "right_dtype": act, "out_dtype": act, **_shared(model_share)}
        extra = {"run_bytes": run_bytes} if run_bytes else {}
        self._add(name, [_call("matmul", m, k, n, dt, batch=batch, weights=False, name=name,
                               **both, **extra)],
                  [_call("matmul", m, n, k, dt, batch=batch, weights=False, name=f"{name}.da", **both),
                   _call("matmul", k, m, n, dt, batch=batch, weights=False, name=f"{name}.db", **both)])

    def attention(self, name: str, batch: int, q_rows: int, kv_len: int, head_dim: int,
                  causal: bool, model_share: float = 1.0) -> None:
        """Fused attention: its backward recomputes the scores itself (no saved probabilities)."""
        args = (batch, q_rows, kv_len, head_dim, self.act)
        share = _shared(model_share)
        self._add(name, [_call("attention", *args, causal=causal, name=name, **share)],
                  [_call("attention", *args, causal=causal, backward=True, name=f"{name}.bwd",
                         **share)])

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

    def softmax(self, name: str, rows: int, cols: int, causal: bool, *,
                fused: bool = False) -> None:
        """`fused`: the backward as one op (neuronx-cc's AwsNeuronSoftmaxBackward custom call,
        which torch-neuronx emits under NEURON_FUSE_SOFTMAX=1); else the graph autograd
        decomposes it into: y * dy, its row sum, the shift and the scale, each over HBM."""
        e = rows * cols
        self._add(name, [_call("softmax", rows, cols, self.act, causal=causal, name=name)],
                  [_call("softmax", rows, cols, self.act, backward=True, name=f"{name}.dx")]
                  if fused else
                  [_call("binary", "mul", e, self.act, name=f"{name}.dy_y"),
                   _call("reduce", rows, cols, self.act, name=f"{name}.dsum"),
                   _call("binary", "sub", e, self.act, name=f"{name}.dsub"),
                   _call("binary", "mul", e, self.act, name=f"{name}.dx")])

    def collective(self, name: str, kind: str, nbytes: int, group: CollectiveGroup, *,
                   mirror: bool = True) -> None:
        """`mirror`: backward runs the transposed collective; False: its gradient passes
        through (a row-parallel linear's all-reduce, whose input gradient is already whole)."""
        if group.ranks <= 1:
            return
        back = [_call("collective", _MIRROR[kind], nbytes, group, dtype=self.act,
                      name=f"{name}.bwd")] if mirror else []
        self._add(name, [_call("collective", kind, nbytes, group, dtype=self.act, name=name)],
                  back)

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
        back = kw.pop("back", None)
        if back is not None:
            here = len(program.ops)
            kw["deps"] = tuple(here - b for b in back if here - b >= 0)
        getattr(program, method)(*args, **kw)


def emit_forward(program: Program, recipe: Recipe, prefix: str = "", only: str | None = None) -> None:
    for step in recipe.steps:
        if only is None or step.tag == only:
            _replay(program, step.forward, prefix)


def emit_backward(program: Program, recipe: Recipe, prefix: str = "") -> None:
    for step in reversed(recipe.steps):
        _replay(program, step.backward, prefix)
