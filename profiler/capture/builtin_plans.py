"""Built-in runs to capture: the step of each captured rank, by workload spec.

The workload registry (`device_model.workloads.REGISTRY`) gives every workload's step to capture
(`Workload.capture`): the small MLP training step with explicit TP/PP/DP collectives, the
microbenchmarks (matmul, collectives) and the model presets. A pipeline-parallel training step is
captured on one representative rank per pipeline stage (the first rank of the stage's
tensor-parallel group). Each stage runs its own programs: the first carries the embedding, the
last the head and the loss, and every stage but the ends sends activations forward and gradients
back. Their forwards and backwards are placed here by the 1F1B schedule (`pipeline.py`), so each
stage idles where 1F1B makes it idle.

A capture's placement (--cores, --nodes, --tp/--pp/--dp) is checked as `neuron-sim estimate`
checks it, with the estimator's own code, and every flag taken changes the step: a
microbenchmark's, by the estimate itself; the MLP step's, by the layout its ranks make (its
degrees derived from --cores, its collectives over the instances --nodes spreads it on); a model
preset's step is built from its layout.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from device_model.core import Instance
from device_model.errors import SpecError
from device_model.program import CollectiveGroup, Op, Program
from device_model.workloads import REGISTRY, Placement, Workload
from device_model.workloads.micro import place_ranks
from device_model.workloads.parallel import Layout, resolve_layout
from device_model.workloads.spec import bind, split_spec
from device_model.workloads.steps import CaptureStep, StagePrograms

from .pipeline import FORWARD, schedule_1f1b

Wall = Callable[[Program], float]
RANK_CHOICES = ("stages", "first", "last")
# operators one capture records: each is a profile row placed and written (about 35 us and
# 1 KB of the capture's memory), so this is about 70 s and 2 GB (an assumption about the
# machine). A step's operators grow with its micro-batches: gbs=1e12 was placed one
# micro-batch at a time until the machine ran out of memory.
MAX_RECORDED_OPERATORS = 1 << 21


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


def available() -> dict[str, str]:
    """Workload name -> help, for --help and error messages."""
    return dict(sorted((name, w.capture.help) for name, w in REGISTRY.items() if w.capture is not None))


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


def check_recorded(stages: Sequence[StagePrograms], microbatches: int, chosen: list[int],
                   executions: int) -> None:
    """SpecError, before anything is scheduled, when the chosen ranks' executions would record
    more than MAX_RECORDED_OPERATORS operators."""
    per_step = sum(microbatches * (len(stages[s].forward.ops) + len(stages[s].backward.ops))
                   + sum(len(p.ops) for p in stages[s].tail) for s in chosen)
    total = per_step * executions
    if total > MAX_RECORDED_OPERATORS:
        raise SpecError(f"the capture would record about {total:,} operators ({microbatches:,} "
                        f"micro-batches a step), more than {MAX_RECORDED_OPERATORS:,}: capture "
                        "fewer micro-batches (a smaller gbs), executions (--num-exec) or ranks "
                        "(--ranks)")


def pipeline_ranks(stages: Sequence[StagePrograms], microbatches: int, tp: int, chosen: list[int],
                   wall: Wall, what: str, executions: int = 1) -> tuple[RankPlan, ...]:
    """Each chosen stage's step: its forwards and backwards where 1F1B puts them, then its tail."""
    check_recorded(stages, microbatches, chosen, executions)
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


def plan_ranks(spec: str, inst: Instance, placement: Placement, which: str | None = None,
               wall: Wall | None = None, executions: int = 1) -> tuple[RankPlan, ...]:
    """The captured ranks' steps. `which`: see `select_stages`; `wall(program)` is a program's
    simulated time (the capture passes its cache of runs); `executions` of them are recorded."""
    wall = wall or (lambda prog: inst.run(prog).timeline.wall)
    name, raw = split_spec(spec)
    workload = _captured(name)
    capture = workload.capture
    if capture.single_rank:
        select_stages(which, 1)
    placed = _placed(workload, inst, raw, placement)
    step = placed.regroup(capture.build(inst, bind(name, raw, capture.params), placed.placement))
    if not step.stages:
        select_stages(which, 1)
        return (RankPlan(0, 0, 1, StepPlan(tuple((prog, 0.0) for prog in step.programs), step.description)),)
    return pipeline_ranks(step.stages, step.microbatches, step.tp, select_stages(which, len(step.stages)),
                          wall, step.description, executions)


def resolve_placement(spec: str, inst: Instance, placement: Placement) -> Placement:
    """`placement` as the capture builds it (the MLP step's degrees filled in, so the profile
    names the job's size); SpecError, in one line, for a placement `neuron-sim estimate`
    refuses, or a flag the captured step would not change with."""
    name, raw = split_spec(spec)
    return _placed(_captured(name), inst, raw, placement).placement


def _captured(name: str) -> Workload:
    workload = REGISTRY.get(name)
    if workload is None or workload.capture is None:
        raise SpecError(f"unknown workload {name!r}; allowed: {', '.join(available())}")
    return workload


# --- placement: the estimator's checks, and collectives placed where the flags put them ---------

def _unchanged(step: CaptureStep) -> CaptureStep:
    return step


@dataclass(frozen=True, slots=True)
class Placed:
    """The placement a captured step is built with, and what moves its collectives to where
    the flags put their ranks (a step's own builder places every group on one instance)."""
    placement: Placement
    regroup: Callable[[CaptureStep], CaptureStep] = _unchanged


def _placed(workload: Workload, inst: Instance, raw: dict, placement: Placement) -> Placed:
    if workload.capture.single_rank:
        return _micro_placed(workload, inst, raw, placement)
    if workload.build is not None:
        # a model preset's step is built from its layout, resolved and checked as the estimate's
        return Placed(placement)
    return _mlp_placed(inst, placement)


def _micro_placed(workload: Workload, inst: Instance, raw: dict, placement: Placement) -> Placed:
    # the estimate itself (one small program): what it refuses, in its words, the capture refuses
    workload.estimate(inst, bind(workload.name, raw, workload.params), placement)
    if placement.cores not in (None, 1):
        raise SpecError(f"{workload.name}: a capture records one logical core, not --cores "
                        f"{placement.cores} (neuron-sim estimate counts the throughput of several)")
    if placement.nodes == 1:
        return Placed(placement)

    def spread(op: Op) -> CollectiveGroup:
        return place_ranks(inst, op.get("group").ranks, placement.nodes)

    return Placed(placement, lambda step: replace(
        step, programs=tuple(_regrouped(prog, spread) for prog in step.programs)))


def _mlp_layout(inst: Instance, pl: Placement) -> Layout:
    """The MLP training step's layout, checked as the estimate checks a job's. Its ranks are
    --cores, else the degrees' product (a captured step's tp/pp/dp are the whole job), else one
    rank an instance: `neuron-sim estimate -w mlp` sizes its job so."""
    degrees = [d for d in (pl.tp, pl.pp, pl.dp) if d is not None]
    cores = pl.cores or (math.prod(degrees) if degrees else pl.nodes)
    return resolve_layout(inst, pl.nodes, cores, pl.tp, pl.pp, pl.dp, heads=1, training=True)


def _mlp_placed(inst: Instance, pl: Placement) -> Placed:
    lay = _mlp_layout(inst, pl)
    placement = Placement(pl.cores, pl.nodes, lay.tp, lay.pp, lay.dp)
    if lay.nodes == 1:
        # the builder's own groups (place_ranks) hold on one instance: what one instance
        # captured stays as it was
        return Placed(placement)
    return Placed(placement, lambda step: replace(
        step, stages=tuple(_layout_stage(st, s, lay) for s, st in enumerate(step.stages))))


def _layout_stage(stage: StagePrograms, s: int, lay: Layout) -> StagePrograms:
    """Stage `s`'s collectives over the layout's ranks: a send over the boundary to the next
    stage (forward) or the one before (backward); an all-reduce over as many ranks as the
    builder gave it, from the first of the stage's slice (a TP group, or its replicas)."""
    first = s * lay.tp * lay.dp

    def over(boundary: int) -> Callable[[Op], CollectiveGroup]:
        def group(op: Op) -> CollectiveGroup:
            if op.get("coll") == "send_recv":
                return lay.pp_pair_after(boundary)
            return lay.group(op.get("group").ranks, 1, first)
        return group

    return StagePrograms(_regrouped(stage.forward, over(s)),
                         _regrouped(stage.backward, over(s - 1)),
                         tuple(_regrouped(prog, over(s)) for prog in stage.tail))


def _regrouped(prog: Program, group_of: Callable[[Op], CollectiveGroup]) -> Program:
    """`prog` with each collective over the group `group_of(op)` gives it."""
    ops = [replace(op, params=tuple((k, group_of(op) if k == "group" else v) for k, v in op.params))
           if op.kind == "collective" else op for op in prog.ops]
    return Program(ops=ops, phase=prog.phase)
