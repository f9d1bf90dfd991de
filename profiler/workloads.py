"""Built-in runs to capture: the step Program of one rank, by workload spec.

A workload in `device_model.workloads.REGISTRY` with a `build(inst, opts, placement)` step plan
(the models: llama, gpt, bert presets) is captured as its first pipeline stage's representative
rank runs it: each execution (micro-batch, optimizer) `count` times. The microbenchmarks (matmul,
collectives) and a small MLP training step with explicit TP/PP/DP collectives and the 1F1B bubble
are built here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from device_model.core import Instance
from device_model.errors import SpecError
from device_model.program import CollectiveGroup, Program
from device_model.specs import check_dtype
from device_model.workloads import REGISTRY, Placement, micro
from device_model.workloads.spec import Param, bind, parse_int, split_spec


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One rank's step: its program in segments, with idle time (pipeline bubbles) between."""
    segments: tuple[tuple[Program, float], ...]     # (program, idle seconds before it)
    description: str


MLP_PARAMS = (
    Param("tokens", parse_int, 2048, help="tokens per micro-batch"),
    Param("hidden", parse_int, 2048, help="model width"),
    Param("layers", parse_int, 2, help="MLP blocks"),
    Param("microbatches", parse_int, 1, help="micro-batches per step"),
    Param("dtype", str, "bf16", choices=micro.DTYPE_NAMES),
)


def _group(inst: Instance, ranks: int) -> CollectiveGroup:
    return micro.place_ranks(inst, ranks)


def mlp_block(prog: Program, tokens: int, hidden: int, dtype: str, layer: int, tp: int,
              tp_group: CollectiveGroup | None) -> None:
    ffn = max(1, 4 * hidden // tp)
    prog.layernorm(tokens, hidden, dtype, name=f"layers.{layer}.norm")
    prog.matmul(tokens, hidden, ffn, dtype, name=f"layers.{layer}.up")
    prog.activation("gelu", tokens * ffn, dtype, name=f"layers.{layer}.gelu")
    prog.matmul(tokens, ffn, hidden, dtype, name=f"layers.{layer}.down")
    if tp_group is not None:
        prog.collective("all_reduce", tokens * hidden * 2, tp_group, name=f"layers.{layer}.tp_all_reduce")
    prog.binary("add", tokens * hidden, dtype, name=f"layers.{layer}.residual")


def mlp_backward(prog: Program, tokens: int, hidden: int, dtype: str, layer: int, tp: int) -> None:
    ffn = max(1, 4 * hidden // tp)
    prog.matmul(tokens, hidden, ffn, dtype, name=f"layers.{layer}.down.dgrad", weights=True)
    prog.matmul(hidden, tokens, ffn, dtype, name=f"layers.{layer}.down.wgrad", weights=False)
    prog.activation("gelu_dx", tokens * ffn, dtype, name=f"layers.{layer}.gelu.backward")
    prog.matmul(tokens, ffn, hidden, dtype, name=f"layers.{layer}.up.dgrad", weights=True)
    prog.matmul(ffn, tokens, hidden, dtype, name=f"layers.{layer}.up.wgrad", weights=False)
    prog.layernorm(tokens, hidden, dtype, name=f"layers.{layer}.norm.backward")


def mlp_plan(inst: Instance, opts: dict, pl: Placement) -> StepPlan:
    check_dtype(inst.spec, opts["dtype"])
    tp, pp, dp = pl.tp or 1, pl.pp or 1, pl.dp or 1
    t, h, dtype, mb = opts["tokens"], opts["hidden"], opts["dtype"], opts["microbatches"]
    layers = max(1, opts["layers"] // pp)
    tp_group = _group(inst, tp) if tp > 1 else None
    pp_group = CollectiveGroup(2, 1, 2, 1, inst.spec.topology) if pp > 1 else None
    per_layer_params = 2 * h * (4 * h // tp)
    segments = []
    fwd_programs, bwd_programs = [], []
    for m in range(mb):
        prog = Program(phase="forward")
        if m == 0:
            prog.dma(t * h * 2, name="input_batch")
        for layer in range(layers):
            mlp_block(prog, t, h, dtype, layer, tp, tp_group)
        if pp_group is not None:
            prog.collective("send_recv", t * h * 2, pp_group, name=f"pp.send_activations.mb{m}")
        fwd_programs.append(prog)
        back = Program(phase="backward")
        for layer in reversed(range(layers)):
            mlp_backward(back, t, h, dtype, layer, tp)
        if pp_group is not None:
            back.collective("send_recv", t * h * 2, pp_group, name=f"pp.send_grads.mb{m}")
        bwd_programs.append(back)
    tail = Program(phase="backward")
    if dp > 1:
        dp_group = _group(inst, dp * tp)
        for layer in reversed(range(layers)):
            tail.collective("all_reduce", per_layer_params * 2, dp_group, name=f"layers.{layer}.grad_all_reduce")
    tail.phase = "optimizer"
    for layer in range(layers):
        tail.binary("mul", per_layer_params, "fp32", name=f"optimizer.layers.{layer}.scale")
        tail.binary("add", per_layer_params, "fp32", name=f"optimizer.layers.{layer}.update")
    # 1F1B on the first pipeline stage: it waits (pp - 1) micro-batch slots for the last stage.
    bubble = 0.0
    if pp > 1:
        probe = inst.run(fwd_programs[0]).timeline.wall + inst.run(bwd_programs[0]).timeline.wall
        bubble = probe * (pp - 1) / 2
    for m in range(mb):
        segments.append((fwd_programs[m], 0.0))
    for m in range(mb):
        segments.append((bwd_programs[m], bubble if m == 0 else 0.0))
    segments.append((tail, 0.0))
    return StepPlan(tuple(segments), f"MLP training step, tp={tp} pp={pp} dp={dp}")


def matmul_plan(inst: Instance, opts: dict, pl: Placement) -> StepPlan:
    check_dtype(inst.spec, opts["dtype"])
    prog = Program()
    prog.matmul(opts["m"], opts["k"], opts["n"], opts["dtype"], batch=opts["batch"])
    return StepPlan(((prog, 0.0),), "one matmul")


def collective_plan(kind: str) -> Callable[[Instance, dict, Placement], StepPlan]:
    def plan(inst: Instance, opts: dict, pl: Placement) -> StepPlan:
        check_dtype(inst.spec, opts["dtype"])
        prog = Program()
        prog.collective(kind, opts["bytes"], micro.place_ranks(inst, opts["ranks"]), dtype=opts["dtype"])
        return StepPlan(((prog, 0.0),), f"one {kind}")
    return plan


LOCAL: dict[str, tuple[tuple[Param, ...], Callable[[Instance, dict, Placement], StepPlan], str]] = {
    "mlp": (MLP_PARAMS, mlp_plan, "MLP training step (forward, backward, optimizer; tp/pp/dp)"),
    "matmul": (micro.MATMUL_PARAMS, matmul_plan, "one [m,k] @ [k,n] matmul"),
    **{name: (micro.COLLECTIVE_PARAMS, collective_plan(kind), f"one {kind.replace('_', '-')}")
       for name, kind in micro.COLLECTIVE_KINDS.items()},
}


def _model_workloads() -> dict[str, Any]:
    return {name: w for name, w in REGISTRY.items() if callable(getattr(w, "build", None))}


def available() -> dict[str, str]:
    """Workload name -> help, for --help and error messages."""
    out = {name: w.help for name, w in _model_workloads().items()}
    out.update({name: help_ for name, (_, _, help_) in LOCAL.items()})
    return dict(sorted(out.items()))


def plan_step(spec: str, inst: Instance, placement: Placement) -> StepPlan:
    name, raw = split_spec(spec)
    registered = _model_workloads().get(name)
    if registered is not None and name not in LOCAL:
        opts: dict[str, Any] = bind(name, raw, registered.params)
        plan = registered.build(inst, opts, placement)
        segments = tuple((e.program, 0.0) for e in plan.stages[0] for _ in range(max(1, e.count)))
        lay = plan.layout
        return StepPlan(segments, f"{plan.workload} {plan.mode} step, first pipeline stage "
                        f"(tp={lay.tp} pp={lay.pp} dp={lay.dp})")
    if name not in LOCAL:
        raise SpecError(f"unknown workload {name!r}; allowed: {', '.join(available())}")
    params, fn, _ = LOCAL[name]
    return fn(inst, bind(name, raw, params), placement)
