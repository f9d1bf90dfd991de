"""Workload steps as a profiler captures them: the programs of each pipeline stage's
representative rank, or of one rank in order, for every workload of the registry.

A pipelined step (`CaptureStep.stages`) gives each stage one micro-batch's forward and backward
and what runs once after the last backward; the profiler places them by the 1F1B schedule. A
plain step (`CaptureStep.programs`) is one rank's programs, run in order. The small MLP training
step (explicit TP/PP/DP collectives) and the microbenchmarks are built here; the model presets'
steps come from their `build()` plans (`from_step_plan`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..catalog.specs import check_dtype
from ..core import Instance
from ..program import CollectiveGroup, Op, Program
from . import micro
from .spec import Param, parse_int
from .training import stage_layers

FORWARD = "forward"


@dataclass(frozen=True, slots=True)
class StagePrograms:
    """A pipeline stage's representative rank: one micro-batch's forward and backward, and what
    runs once after the last backward (gradient reduction, optimizer)."""
    forward: Program
    backward: Program
    tail: tuple[Program, ...]


@dataclass(frozen=True, slots=True)
class CaptureStep:
    """One step to capture: pipeline `stages` (1F1B over `microbatches`, the stage's first rank
    being `stage * tp`), or, without stages, one rank's `programs` in order."""
    description: str
    stages: tuple[StagePrograms, ...] = ()
    microbatches: int = 1
    tp: int = 1
    programs: tuple[Program, ...] = ()


@dataclass(frozen=True, slots=True)
class Capture:
    """How a workload is captured: its options (they may differ from the estimate's), the step
    builder, a help line, and whether it is always one rank (its rank choice is checked first)."""
    params: tuple[Param, ...]
    build: Callable[[Instance, dict[str, Any], Any], CaptureStep]
    help: str
    single_rank: bool = False


# --- the MLP training step ------------------------------------------------------------------

MLP_STEP_PARAMS = (
    Param("tokens", parse_int, 2048, help="tokens per micro-batch"),
    Param("hidden", parse_int, 2048, help="model width"),
    Param("layers", parse_int, 2, help="MLP blocks (split over pipeline stages)"),
    Param("microbatches", parse_int, 1, help="micro-batches per step"),
    Param("dtype", str, "bf16", choices=micro.DTYPE_NAMES),
)
MLP_STEP_HELP = "MLP training step (embedding, blocks, head and loss; forward, backward, optimizer; tp/pp/dp)"


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


def _mlp_forward(o: dict, s: int, pp: int, tp: int, layers: range, tp_group, pp_group) -> Program:
    t, h, dtype = o["tokens"], o["hidden"], o["dtype"]
    prog = Program(phase="forward")
    if s == 0:
        prog.dma(t * 4, name="input_batch")                 # token ids
        prog.embedding(t, h, dtype, name="embed")
    for layer in layers:
        mlp_block(prog, t, h, dtype, layer, tp, tp_group)
    if s == pp - 1:
        prog.matmul(t, h, max(1, h // tp), dtype, name="head")
        prog.softmax(t, max(1, h // tp), dtype, name="loss.cross_entropy")
        if tp_group is not None:
            prog.collective("all_reduce", t * 8, tp_group, name="loss.all_reduce")
    else:
        prog.collective("send_recv", t * h * 2, pp_group, name="pp.send_activations")
    return prog


def _mlp_backward(o: dict, s: int, pp: int, tp: int, layers: range, pp_group) -> Program:
    t, h, dtype = o["tokens"], o["hidden"], o["dtype"]
    back = Program(phase="backward")
    if s == pp - 1:
        back.binary("sub", t * max(1, h // tp), dtype, name="loss.backward")
        back.matmul(t, max(1, h // tp), h, dtype, name="head.dgrad", weights=True)
        back.matmul(h, t, max(1, h // tp), dtype, name="head.wgrad", weights=False)
    for layer in reversed(layers):
        mlp_backward(back, t, h, dtype, layer, tp)
    if s == 0:
        back.binary("add", t * h, "fp32", name="embed.backward")
    else:
        back.collective("send_recv", t * h * 2, pp_group, name="pp.send_gradients")
    return back


def _mlp_tail(inst: Instance, o: dict, s: int, pp: int, tp: int, dp: int, layers: range) -> Program:
    h = o["hidden"]
    per_layer_params = 2 * h * (4 * h // tp)
    tail = Program(phase="backward")
    if dp > 1:
        dp_group = micro.place_ranks(inst, dp * tp)
        for layer in reversed(layers):
            tail.collective("all_reduce", per_layer_params * 2, dp_group, name=f"layers.{layer}.grad_all_reduce")
    tail.phase = "optimizer"
    for layer in layers:
        tail.binary("mul", per_layer_params, "fp32", name=f"optimizer.layers.{layer}.scale")
        tail.binary("add", per_layer_params, "fp32", name=f"optimizer.layers.{layer}.update")
    if s == pp - 1:
        tail.binary("add", h * max(1, h // tp), "fp32", name="optimizer.head.update")
    return tail


def mlp_stages(inst: Instance, o: dict, pl) -> tuple[list[StagePrograms], int, str]:
    check_dtype(inst.spec, o["dtype"])
    tp, pp, dp = pl.tp or 1, pl.pp or 1, pl.dp or 1
    tp_group = micro.place_ranks(inst, tp) if tp > 1 else None
    pp_group = CollectiveGroup(2, 1, 2, 1, inst.spec.topology) if pp > 1 else None
    counts = stage_layers(o["layers"], pp)
    stages = []
    for s in range(pp):
        layers = range(sum(counts[:s]), sum(counts[:s + 1]))
        stages.append(StagePrograms(_mlp_forward(o, s, pp, tp, layers, tp_group, pp_group),
                                    _mlp_backward(o, s, pp, tp, layers, pp_group),
                                    (_mlp_tail(inst, o, s, pp, tp, dp, layers),)))
    return stages, tp, f"MLP training step (tp={tp} pp={pp} dp={dp})"


def mlp_step(inst: Instance, o: dict, pl) -> CaptureStep:
    stages, tp, what = mlp_stages(inst, o, pl)
    return CaptureStep(what, tuple(stages), o["microbatches"], tp)


# --- microbenchmarks ------------------------------------------------------------------------

def matmul_step(inst: Instance, opts: dict, pl) -> CaptureStep:
    check_dtype(inst.spec, opts["dtype"])
    prog = Program()
    prog.matmul(opts["m"], opts["k"], opts["n"], opts["dtype"], batch=opts["batch"])
    return CaptureStep("one matmul", programs=(prog,))


def collective_step(kind: str) -> Callable[[Instance, dict, Any], CaptureStep]:
    def step(inst: Instance, opts: dict, pl) -> CaptureStep:
        check_dtype(inst.spec, opts["dtype"])
        prog = Program()
        prog.collective(kind, opts["bytes"], micro.place_ranks(inst, opts["ranks"]), dtype=opts["dtype"])
        return CaptureStep(f"one {kind}", programs=(prog,))
    return step


# --- model presets --------------------------------------------------------------------------

def split_phases(prog: Program) -> tuple[Program, Program]:
    """A micro-batch program (forward ops, then backward ops) as two programs, so the schedule
    can put other micro-batches between them. Backward deps on forward ops are dropped: those
    activations are already in memory when the backward runs."""
    cut = next((i for i, op in enumerate(prog.ops) if op.phase != FORWARD), len(prog.ops))
    back_ops = [op if op.deps is None else Op(op.kind, op.name, op.params,
                                              tuple(d - cut for d in op.deps if d >= cut), op.phase)
                for op in prog.ops[cut:]]
    return Program(ops=list(prog.ops[:cut]), phase=FORWARD), Program(ops=back_ops, phase="backward")


def from_step_plan(plan) -> CaptureStep:
    """A preset's step plan (`estimate_model.StepPlan`) as a capture step: training steps are
    pipelined on their `microbatch` executions; inference is one stage's executions in order."""
    lay = plan.layout
    what = f"{plan.workload} {plan.mode} step (tp={lay.tp} pp={lay.pp} dp={lay.dp})"
    micro_execs = [e for e in plan.stages[0] if e.name == "microbatch"]
    if not micro_execs:         # inference: one stage, its executions in order
        return CaptureStep(what, programs=tuple(e.program for e in plan.stages[0] for _ in range(max(1, e.count))))
    stages = []
    for execs in plan.stages:
        mb = next(e for e in execs if e.name == "microbatch")
        fwd, bwd = split_phases(mb.program)
        tail = tuple(e.program for e in execs if e is not mb for _ in range(max(1, e.count)))
        stages.append(StagePrograms(fwd, bwd, tail))
    return CaptureStep(what, tuple(stages), max(1, micro_execs[0].count), lay.tp)
