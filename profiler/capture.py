"""Capture of built-in runs: `--num-exec` executions of one rank's step on the chip model.

Like AWS's `--profile-nth-exec`, every Nth execution is kept at instruction level (the others at
operator level), so `--num-exec 3 --profile-nth-exec 2` keeps the second, warmed-up execution.
The first execution is a cold one: it also loads the weights into HBM (`warmup.load_weights`).
"""
from __future__ import annotations

from typing import Callable

from device_model.core import Instance
from device_model.errors import SpecError
from device_model.program import Program
from device_model.workloads import Placement

from .builder import ProfileBuilder
from .model import Profile
from .workloads import plan_step

HOST_TID = 1
Progress = Callable[[int, int], None]


def weight_bytes(prog: Program) -> int:
    """Bytes of the matmul weights a program streams: what the first execution loads."""
    from device_model.dtypes import get_dtype
    total = 0
    for op in prog.ops:
        if op.kind == "matmul" and op.get("weights"):
            total += int(op.get("k") * op.get("n") * get_dtype(op.get("dtype")).bytes)
    return total


def _with_warmup(prog: Program) -> Program:
    nbytes = weight_bytes(prog)
    if nbytes <= 0:
        return prog
    warm = Program(phase="other")
    warm.dma(nbytes, name="warmup.load_weights")
    shifted = [op if op.deps is None else type(op)(op.kind, op.name, op.params,
                                                   tuple(d + 1 for d in op.deps), op.phase)
               for op in prog.ops]
    warm.ops.extend(shifted)
    return warm


def capture_workload(spec: str, inst: Instance, placement: Placement = Placement(), *,
                     num_exec: int = 1, nth_exec: int = 1, progress: Progress | None = None) -> Profile:
    if num_exec < 1 or nth_exec < 1:
        raise SpecError("--num-exec and --profile-nth-exec must be positive")
    if nth_exec > num_exec:
        raise SpecError(f"--profile-nth-exec {nth_exec} is larger than --num-exec {num_exec}: "
                        "no execution would be profiled")
    plan = plan_step(spec, inst, placement)
    builder = ProfileBuilder(inst, "workload", workload=spec, description=plan.description,
                             placement={"tp": placement.tp or 1, "pp": placement.pp or 1,
                                        "dp": placement.dp or 1},
                             num_exec=num_exec, profile_nth_exec=nth_exec)
    warm_segments = [(_with_warmup(plan.segments[0][0]), plan.segments[0][1]), *plan.segments[1:]]
    runs = {}          # deterministic: each (warm, segment) is simulated once and shifted per step
    overhead = inst.costs.exec_overhead_s
    t = 0.0
    for step in range(1, num_exec + 1):
        detailed = step % nth_exec == 0
        segments = warm_segments if step == 1 else plan.segments
        host_start = t
        execute = builder.add_host("nrt_execute", "runtime", HOST_TID, host_start, host_start, step=step)
        t += overhead
        seen: set[int] = set()      # repeated executions (micro-batches): instructions of the first
        for i, (prog, idle) in enumerate(segments):
            first_time = id(prog) not in seen
            seen.add(id(prog))
            t += idle
            key = (step == 1, i if i == 0 else id(prog))
            if key not in runs:
                runs[key] = inst.run(prog)
            run = runs[key]
            n_before = builder.n_ops
            builder.add_step(step, prog, run, detailed=detailed and first_time, host_start=host_start,
                             host_end=host_start, info=None, shift=t)
            builder.link_ops_to_host(n_before, builder.n_ops, execute)
            t += run.timeline.wall
        builder.set_host_end(execute, t)
        builder.add_host(f"ProfilerStep#{step}", "user_annotation", HOST_TID, host_start, t, step=step)
        builder.set_step_host(step, host_start, t)
        if progress:
            progress(step, num_exec)
    return builder.build()
