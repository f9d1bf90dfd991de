"""Capture of built-in runs: `--num-exec` executions of each captured rank's step on the chip model.

Like AWS's `--profile-nth-exec`, every Nth execution is kept at instruction level (the others at
operator level), so `--num-exec 3 --profile-nth-exec 2` keeps the second, warmed-up execution.
The first execution is a cold one: it also loads the weights into HBM (`warmup.load_weights`).

A pipeline-parallel job is captured on one rank per stage (`--ranks`), each its own NeuronCore in
the profile. All ranks start a step together (the pipeline flush of 1F1B ends every step), at the
end of the slowest rank's previous step; inside a step each rank idles where 1F1B makes it idle.
The ranks are placed one execution at a time (every rank's first, then every rank's second, ...),
so a stop signal ends the capture after at most one more execution per rank, every rank alike.
"""
from __future__ import annotations

from typing import Callable

from device_model.core import Instance, Run
from device_model.errors import SpecError
from device_model.program import Program
from device_model.workloads import Placement

from ..model.builder import ProfileBuilder, join_ranks
from ..model.profile import Profile, StringTable
from .builtin_plans import RankPlan, plan_ranks

HOST_TID = 1
Progress = Callable[[int, int], None]


def weight_bytes(prog: Program) -> int:
    """Bytes of the matmul weights a program streams: what the first execution loads."""
    from device_model.catalog.dtypes import get_dtype
    total = 0
    for op in prog.ops:
        if op.kind == "matmul" and op.get("weights"):
            total += int(op.get("k") * op.get("n") * get_dtype(op.get("dtype")).bytes)
    return total


def warmup_program(first: Program) -> Program | None:
    """The cold execution's weight load: the weights the step's first program streams (a
    pipeline stage's forward: its layers; the backward reuses them)."""
    nbytes = weight_bytes(first)
    if nbytes <= 0:
        return None
    warm = Program(phase="other")
    warm.dma(nbytes, name="warmup.load_weights")
    return warm


class RunCache:
    """Each distinct program is simulated once (runs are deterministic) and shifted per use."""

    def __init__(self, inst: Instance) -> None:
        self.inst = inst
        self._runs: dict[int, tuple[Program, Run]] = {}

    def run(self, prog: Program) -> Run:
        hit = self._runs.get(id(prog))
        if hit is None:                 # the program is kept so its id stays unique
            hit = self._runs[id(prog)] = (prog, self.inst.run(prog))
        return hit[1]

    def wall(self, prog: Program) -> float:
        return self.run(prog).timeline.wall


def _segments(rp: RankPlan, warm: Program | None, step: int, runs: RunCache) -> list[tuple[Program, float]]:
    """The rank's segments of `step`; the first step loads the weights first, inside the
    pipeline bubble before the first segment where there is one."""
    segments = list(rp.plan.segments)
    if step == 1 and warm is not None:
        first, idle = segments[0]
        segments[0] = (first, max(0.0, idle - runs.wall(warm)))
        segments.insert(0, (warm, 0.0))
    return segments


def _step_spans(plans: tuple[RankPlan, ...], warm: list[Program | None], runs: RunCache, num_exec: int,
                overhead: float) -> list[tuple[float, float]]:
    """(start, device time) of every step: the slowest stage's step time (captured or not), and
    each step starts when the previous one ended on every rank."""
    spans, start = [], 0.0
    for step in range(1, num_exec + 1):
        longest = max(max(rp.job_step, sum(idle + runs.wall(prog) for prog, idle in _segments(rp, w, step, runs)))
                      for rp, w in zip(plans, warm))
        spans.append((start, longest))
        start += overhead + longest
    return spans


def _add_step(builder: ProfileBuilder, runs: RunCache, segments: list[tuple[Program, float]],
              step: int, span: tuple[float, float], detailed: bool, overhead: float) -> None:
    start = span[0]
    execute = builder.add_host("nrt_execute", "runtime", HOST_TID, start, start, step=step)
    t = start + overhead
    seen: set[int] = set()      # repeated executions (micro-batches): instructions of the first
    for prog, idle in segments:
        first_time = id(prog) not in seen
        seen.add(id(prog))
        t += idle
        run = runs.run(prog)
        n_before = builder.n_ops
        builder.add_step(step, prog, run, detailed=detailed and first_time, host_start=start,
                         host_end=start, info=None, shift=t)
        builder.link_ops_to_host(n_before, builder.n_ops, execute)
        t += run.timeline.wall
    builder.set_host_end(execute, t)
    # the job's step on every rank: a stage's pipeline idle is part of its step time, and the
    # next step starts where it ends (a faster rank's step left a gap no step held)
    end = start + overhead + span[1]
    builder.add_host(f"ProfilerStep#{step}", "user_annotation", HOST_TID, start, end, step=step)
    builder.set_step_host(step, start, end)
    builder.set_step_device(step, start + overhead, end)


def capture_workload(spec: str, inst: Instance, placement: Placement = Placement(), *,
                     num_exec: int = 1, nth_exec: int = 1, ranks: str | None = None,
                     progress: Progress | None = None, stop=None) -> Profile:
    """`ranks`: `stages` (default: one rank per pipeline stage), `first`, `last` or stage
    numbers like `0,3`. The ranks are placed execution by execution (every rank's first, then
    every rank's second, ...), each rank into a builder of its own, joined at the end.
    `progress(done, total)` is told of each rank's execution placed (first with done=0, so a bar
    shows the right total from the start); `stop()`, asked once every rank has placed an
    execution, ends the run there: every rank holds as many executions (at least one), and the
    profile's `num_exec` says how many."""
    if num_exec < 1 or nth_exec < 1:
        raise SpecError("--num-exec and --profile-nth-exec must be positive")
    if nth_exec > num_exec:
        raise SpecError(f"--profile-nth-exec {nth_exec} is larger than --num-exec {num_exec}: "
                        "no execution would be profiled")
    runs = RunCache(inst)
    plans = plan_ranks(spec, inst, placement, ranks, runs.wall, num_exec)
    builders = _rank_builders(plans, inst, spec, placement, num_exec, nth_exec, ranks)
    overhead = inst.costs.exec_overhead_s
    warm = [warmup_program(rp.plan.segments[0][0]) for rp in plans]
    spans = _step_spans(plans, warm, runs, num_exec, overhead)
    steps, done = num_exec, 0
    if progress:
        progress(0, steps * len(plans))
    for step in range(1, num_exec + 1):
        for rp, rank_warm, builder in zip(plans, warm, builders):
            _add_step(builder, runs, _segments(rp, rank_warm, step, runs), step, spans[step - 1],
                      step % nth_exec == 0, overhead)
            done += 1
            if progress:
                progress(done, steps * len(plans))
        if step < num_exec and stop is not None and stop():
            steps = step
            if progress:                        # the bar ends full at what was kept
                progress(done, done)
            break
    # stopped early: the profile says what it holds and what was asked
    meta = {} if steps == num_exec else {"num_exec": steps, "num_exec_requested": num_exec}
    return join_ranks(builders, **meta)


def _rank_builders(plans: tuple[RankPlan, ...], inst: Instance, spec: str, placement: Placement,
                   num_exec: int, nth_exec: int, ranks: str | None) -> list[ProfileBuilder]:
    """A builder per captured rank (its own NeuronCore), all sharing one string table."""
    strings = StringTable()
    cores = inst.device.logical_cores(inst.lnc) * inst.spec.devices
    builders = []
    for rp in plans:
        builder = ProfileBuilder(inst, "workload", strings=strings, workload=spec,
                                 description=plans[0].plan.description,
                                 placement={"tp": placement.tp or 1, "pp": placement.pp or 1,
                                            "dp": placement.dp or 1},
                                 num_exec=num_exec, profile_nth_exec=nth_exec,
                                 ranks_option=ranks or "stages")
        builder.begin_rank(rp.rank, stage=rp.stage, stages=rp.stages, core=rp.rank % cores,
                           node=rp.rank // cores, description=rp.plan.description)
        builders.append(builder)
    return builders
