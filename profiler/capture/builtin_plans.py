"""Built-in runs to capture: the step of each captured rank, by workload spec.

The workload registry (`device_model.workloads.REGISTRY`) gives every workload's step to capture
(`Workload.capture`): the small MLP training step with explicit TP/PP/DP collectives, the
microbenchmarks (matmul, collectives) and the model presets. A pipeline-parallel training step is
captured on one representative rank per pipeline stage (the first rank of the stage's
tensor-parallel group). Each stage runs its own programs: the first carries the embedding, the
last the head and the loss, and every stage but the ends sends activations forward and gradients
back. Their forwards and backwards are placed here by the 1F1B schedule (`pipeline.py`), so each
stage idles where 1F1B makes it idle.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from device_model.core import Instance
from device_model.errors import SpecError
from device_model.program import Program
from device_model.workloads import REGISTRY, Placement
from device_model.workloads.spec import bind, split_spec
from device_model.workloads.steps import StagePrograms

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
    workload = REGISTRY.get(name)
    if workload is None or workload.capture is None:
        raise SpecError(f"unknown workload {name!r}; allowed: {', '.join(available())}")
    capture = workload.capture
    if capture.single_rank:
        select_stages(which, 1)
    step = capture.build(inst, bind(name, raw, capture.params), placement)
    if not step.stages:
        select_stages(which, 1)
        return (RankPlan(0, 0, 1, StepPlan(tuple((prog, 0.0) for prog in step.programs), step.description)),)
    return pipeline_ranks(step.stages, step.microbatches, step.tp, select_stages(which, len(step.stages)),
                          wall, step.description, executions)
