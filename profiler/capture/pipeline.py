"""The 1F1B pipeline schedule (PipeDream-flush): when each stage runs each micro-batch.

Stage s of pp first runs min(pp - s - 1, M) warm-up forwards, then alternates one forward and one
backward, then drains the remaining backwards. A forward waits for the previous stage's forward of
the same micro-batch (its activations), a backward for the next stage's backward (its gradients),
and a stage runs one slot at a time. The times are the stages' own simulated programs, so stages
that carry the embedding or the head shift their neighbours' bubbles as they would on hardware.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from device_model.errors import SpecError

FORWARD, BACKWARD = "forward", "backward"


@dataclass(frozen=True, slots=True)
class Slot:
    kind: str               # FORWARD | BACKWARD
    microbatch: int
    start: float            # seconds from the start of the step
    end: float


def order_1f1b(stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """The (kind, micro-batch) sequence one stage runs."""
    warm = min(stages - stage - 1, microbatches)
    seq = [(FORWARD, m) for m in range(warm)]
    fwd = warm
    for m in range(microbatches):
        if fwd < microbatches:
            seq.append((FORWARD, fwd))
            fwd += 1
        seq.append((BACKWARD, m))
    return seq


def _producer(kind: str, stage: int, stages: int, microbatch: int) -> tuple[str, int, int] | None:
    if kind == FORWARD:
        return (FORWARD, stage - 1, microbatch) if stage > 0 else None
    return (BACKWARD, stage + 1, microbatch) if stage < stages - 1 else None


def schedule_1f1b(forward: Sequence[float], backward: Sequence[float],
                  microbatches: int) -> list[list[Slot]]:
    """Per stage, its slots in execution order; forward[s] and backward[s] are stage s's times
    for one micro-batch."""
    stages = len(forward)
    if stages != len(backward) or stages < 1 or microbatches < 1:
        raise SpecError("a pipeline needs at least one stage and one micro-batch")
    orders = [order_1f1b(s, stages, microbatches) for s in range(stages)]
    ends: dict[tuple[str, int, int], float] = {}
    free = [0.0] * stages
    out: list[list[Slot]] = [[] for _ in range(stages)]
    placed, total = 0, sum(len(o) for o in orders)
    while placed < total:
        progressed = False
        for s in range(stages):
            while len(out[s]) < len(orders[s]):
                kind, m = orders[s][len(out[s])]
                dep = _producer(kind, s, stages, m)
                if dep is not None and dep not in ends:
                    break
                start = max(free[s], ends[dep] if dep is not None else 0.0)
                end = start + (forward[s] if kind == FORWARD else backward[s])
                out[s].append(Slot(kind, m, start, end))
                ends[(kind, s, m)] = free[s] = end
                placed += 1
                progressed = True
        if not progressed:      # cannot happen for 1F1B orders; guards against a bad order
            raise SpecError("pipeline schedule deadlocked")
    return out
