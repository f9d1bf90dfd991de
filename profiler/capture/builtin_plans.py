"""Built-in runs to capture: the step of each captured rank, by workload spec.

A pipeline-parallel training step is captured on one representative rank per pipeline stage
(the first rank of the stage's tensor-parallel group). Each stage runs its own programs: the
first carries the embedding, the last the head and the loss, and every stage but the ends sends
activations forward and gradients back. Their forwards and backwards are placed by the 1F1B
schedule (`pipeline.py`), so each stage idles where 1F1B makes it idle. The model presets of
`device_model.workloads.REGISTRY` give their stage programs through `build()`; a small MLP
training step with explicit TP/PP/DP collectives and the microbenchmarks (matmul, collectives)
are built here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from device_model.core import Instance
from device_model.errors import SpecError
from device_model.program import CollectiveGroup, Op, Program
from device_model.catalog.specs import check_dtype
from device_model.workloads import REGISTRY, Placement, micro
from device_model.workloads.spec import Param, bind, parse_int, split_spec
from device_model.workloads.training import stage_layers

from .pipeline import FORWARD, schedule_1f1b

Wall = Callable[[Program], float]
RANK_CHOICES = ("stages", "first", "last")


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One rank's step: its program in segments, with idle time (pipeline bubbles) between."""
    segments: tuple[tuple[Program, float], ...]     # (program, idle seconds before it)
    description: str


@dataclass(frozen=True, slots=True)
class RankPlan:
    """A captured rank: where it sits in the job, and its step."""
    rank: int               # global rank (tp fastest, then pp, then dp)
    stage: int
    stages: int
    plan: StepPlan
    job_step: float = 0.0   # device time of the whole pipeline's step (its slowest stage)


@dataclass(frozen=True, slots=True)
class StagePrograms:
    """A pipeline stage's representative rank: one micro-batch's forward and backward, and what
    runs once after the last backward (gradient reduction, optimizer)."""
    forward: Program
    backward: Program
    tail: tuple[Program, ...]


MLP_PARAMS = (
    Param("tokens", parse_int, 2048, help="tokens per micro-batch"),
    Param("hidden", parse_int, 2048, help="model width"),
    Param("layers", parse_int, 2, help="MLP blocks (split over pipeline stages)"),
    Param("microbatches", parse_int, 1, help="micro-batches per step"),
    Param("dtype", str, "bf16", choices=micro.DTYPE_NAMES),
)


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


def mlp_stages(inst: Instance, o: dict, pl: Placement) -> tuple[list[StagePrograms], int, str]:
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


MICRO: dict[str, tuple[tuple[Param, ...], Callable[[Instance, dict, Placement], StepPlan], str]] = {
    "matmul": (micro.MATMUL_PARAMS, matmul_plan, "one [m,k] @ [k,n] matmul"),
    **{name: (micro.COLLECTIVE_PARAMS, collective_plan(kind), f"one {kind.replace('_', '-')}")
       for name, kind in micro.COLLECTIVE_KINDS.items()},
}
MLP_HELP = "MLP training step (embedding, blocks, head and loss; forward, backward, optimizer; tp/pp/dp)"


def _model_workloads() -> dict[str, Any]:
    return {name: w for name, w in REGISTRY.items() if callable(getattr(w, "build", None))}


def available() -> dict[str, str]:
    """Workload name -> help, for --help and error messages."""
    out = {name: w.help for name, w in _model_workloads().items()}
    out.update({name: help_ for name, (_, _, help_) in MICRO.items()})
    out["mlp"] = MLP_HELP
    return dict(sorted(out.items()))


def split_phases(prog: Program) -> tuple[Program, Program]:
    """A micro-batch program (forward ops, then backward ops) as two programs, so the schedule
    can put other micro-batches between them. Backward deps on forward ops are dropped: those
    activations are already in memory when the backward runs."""
    cut = next((i for i, op in enumerate(prog.ops) if op.phase != FORWARD), len(prog.ops))
    back_ops = [op if op.deps is None else Op(op.kind, op.name, op.params,
                                              tuple(d - cut for d in op.deps if d >= cut), op.phase)
                for op in prog.ops[cut:]]
    return Program(ops=list(prog.ops[:cut]), phase=FORWARD), Program(ops=back_ops, phase="backward")


def select_stages(which: str | None, pp: int) -> list[int]:
    """`stages` (default): every stage; `first`, `last`; or stage numbers like `0,3`."""
    if which in (None, "stages"):
        return list(range(pp))
    if which == "first":
        return [0]
    if which == "last":
        return [pp - 1]
    try:
        chosen = [int(x) for x in which.split(",")]
    except ValueError:
        raise SpecError(f"--ranks {which!r}: give {', '.join(RANK_CHOICES)} or stage numbers "
                        "like 0,3") from None
    bad = [s for s in chosen if not 0 <= s < pp]
    if bad or len(set(chosen)) != len(chosen):
        raise SpecError(f"--ranks {which!r}: stage numbers must be distinct and within 0..{pp - 1}")
    return sorted(chosen)


def pipeline_ranks(stages: list[StagePrograms], microbatches: int, tp: int, chosen: list[int],
                   wall: Wall, what: str) -> tuple[RankPlan, ...]:
    """Each chosen stage's step: its forwards and backwards where 1F1B puts them, then its tail."""
    pp = len(stages)
    slots = schedule_1f1b([wall(s.forward) for s in stages], [wall(s.backward) for s in stages],
                          microbatches)
    ends = [slots[s][-1].end + sum(wall(p) for p in stages[s].tail) for s in range(pp)]
    out = []
    for s in chosen:
        segments, t = [], 0.0
        for slot in slots[s]:
            prog = stages[s].forward if slot.kind == FORWARD else stages[s].backward
            segments.append((prog, max(0.0, slot.start - t)))
            t = slot.end
        segments += [(prog, 0.0) for prog in stages[s].tail]
        where = f"pipeline stage {s} of {pp}" if pp > 1 else "one rank"
        out.append(RankPlan(s * tp, s, pp, StepPlan(tuple(segments), f"{what}, {where}"), max(ends)))
    return tuple(out)


def _preset_ranks(name: str, raw: str, inst: Instance, placement: Placement, which: str | None,
                  wall: Wall) -> tuple[RankPlan, ...]:
    registered = _model_workloads()[name]
    plan = registered.build(inst, bind(name, raw, registered.params), placement)
    lay = plan.layout
    what = f"{plan.workload} {plan.mode} step (tp={lay.tp} pp={lay.pp} dp={lay.dp})"
    micro_execs = [e for e in plan.stages[0] if e.name == "microbatch"]
    if not micro_execs:         # inference: one stage, its executions in order
        select_stages(which, 1)
        segments = tuple((e.program, 0.0) for e in plan.stages[0] for _ in range(max(1, e.count)))
        return (RankPlan(0, 0, 1, StepPlan(segments, what)),)
    stages = []
    for execs in plan.stages:
        mb = next(e for e in execs if e.name == "microbatch")
        fwd, bwd = split_phases(mb.program)
        tail = tuple(e.program for e in execs if e is not mb for _ in range(max(1, e.count)))
        stages.append(StagePrograms(fwd, bwd, tail))
    return pipeline_ranks(stages, max(1, micro_execs[0].count), lay.tp,
                          select_stages(which, lay.pp), wall, what)


def plan_ranks(spec: str, inst: Instance, placement: Placement, which: str | None = None,
               wall: Wall | None = None) -> tuple[RankPlan, ...]:
    """The captured ranks' steps. `which`: see `select_stages`; `wall(program)` is a program's
    simulated time (the capture passes its cache of runs)."""
    wall = wall or (lambda prog: inst.run(prog).timeline.wall)
    name, raw = split_spec(spec)
    if name == "mlp":
        opts = bind(name, raw, MLP_PARAMS)
        stages, tp, what = mlp_stages(inst, opts, placement)
        return pipeline_ranks(stages, opts["microbatches"], tp, select_stages(which, len(stages)),
                              wall, what)
    if name in MICRO:
        params, fn, _ = MICRO[name]
        select_stages(which, 1)
        return (RankPlan(0, 0, 1, fn(inst, bind(name, raw, params), placement)),)
    if name in _model_workloads():
        return _preset_ranks(name, raw, inst, placement, which, wall)
    raise SpecError(f"unknown workload {name!r}; allowed: {', '.join(available())}")
