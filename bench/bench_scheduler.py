"""Instructions scheduled per second by the chip model, for a long operator stream.

Baseline, measured in the same run: the same instructions placed by a plain Python loop over
instructions (what a per-instruction object scheduler does at minimum). Goal: >= 1,000,000/s.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from device_model import Program, instance  # noqa: E402
from device_model.core import Lowerer  # noqa: E402
from device_model.engine.schedule import Scheduler  # noqa: E402
from device_model.engine.timeline import Timeline  # noqa: E402

RUNS = 5


def stream(layers: int = 24) -> Program:
    """A decoder-like stream: distinct shapes per layer so lowering is not all cache hits."""
    p = Program()
    for i in range(layers):
        t = 2048 + 128 * i
        p.layernorm(t, 4096, rms=True)
        p.matmul(t, 4096, 3 * 4096)
        p.softmax(32 * t // 16, 2048, causal=True)
        p.matmul(t, 4096, 4096)
        p.binary("add", t * 4096)
        p.matmul(t, 4096, 11008)
        p.activation("silu", t * 11008)
        p.binary("mul", t * 11008)
        p.matmul(t, 11008, 4096)
    return p


def model_run(inst, prog) -> Timeline:
    lower = Lowerer(inst.context())
    lowered = [lower(i, op) for i, op in enumerate(prog.ops)]
    sched = Scheduler(inst.costs)
    sched.run(lowered)
    return Timeline.from_scheduler(sched, prog.ops)


@dataclass(slots=True)
class Instr:
    lane: int
    dur: float
    dep: int
    start: float = 0.0
    end: float = 0.0


def python_object_baseline(tl: Timeline) -> float:
    """The same instructions as one Python object each, with one dependency each (the previous
    instruction on another lane), placed by a loop: the per-instruction design."""
    lanes = tl.columns["lane"].tolist()
    dur = (tl.columns["end"] - tl.columns["start"]).tolist()
    t0 = time.perf_counter()
    instrs, last_other = [], -1
    for i, (lane, d) in enumerate(zip(lanes, dur)):
        instrs.append(Instr(lane, d, last_other))
        if i + 1 < len(lanes) and lanes[i + 1] != lane:
            last_other = i
    free = [0.0] * 8
    for ins in instrs:
        ready = instrs[ins.dep].end if ins.dep >= 0 else 0.0
        ins.start = max(free[ins.lane], ready)
        ins.end = free[ins.lane] = ins.start + ins.dur
    return time.perf_counter() - t0


def main() -> None:
    inst = instance("trn2.48xlarge", lnc=1)
    prog = stream()
    model_run(inst, prog)                    # warm-up (imports, numpy caches)
    times, base = [], []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        tl = model_run(inst, prog)
        times.append(time.perf_counter() - t0)
        base.append(python_object_baseline(tl))
    n = len(tl)
    rate = n / statistics.median(times)
    base_rate = n / statistics.median(base)
    print(f"instructions per run: {n:,} over {len(prog.ops)} ops")
    print(f"chip model (lower + schedule + timeline): {rate:,.0f} instructions/s "
          f"(median of {RUNS}; min {n / max(times):,.0f}, max {n / min(times):,.0f})")
    print(f"baseline, one Python object per instruction: {base_rate:,.0f} instructions/s")
    print(f"ratio vs baseline: {rate / base_rate:.1f}x; goal >= 1,000,000/s: "
          f"{'met' if rate >= 1e6 else 'NOT met'}")


if __name__ == "__main__":
    main()
