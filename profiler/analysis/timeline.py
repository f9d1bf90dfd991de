"""The device timeline at operator granularity, as HolisticTraceAnalysis and TensorBoard see it.

Each operator execution is one kernel of one type: communication (a collective), memory (it only
moves data: DMA busy, no compute engine busy) or computation (the rest). `device_breakdown` gives
what HTA's temporal, kernel-type and comm/comp-overlap breakdowns compute from our Chrome trace,
from the profile itself: the span from the first operator's start to the last one's end, the time
some operator runs (busy), idle = span - busy, the time each type runs and the time collectives run
under computation. Times are seconds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.profile import BUSY_ENGINES, Profile
from .summary import intersection_length, union_length

COMPUTATION, COMMUNICATION, MEMORY = 0, 1, 2
_COMPUTE_BUSY = tuple(f"busy_{e}" for e in BUSY_ENGINES if e not in ("dma", "collective"))


def op_types(profile: Profile) -> np.ndarray:
    """Per op row its kernel type (COMPUTATION, COMMUNICATION, MEMORY)."""
    ops = profile.table("ops")
    n = ops["start"].size
    out = np.full(n, COMPUTATION, dtype=np.int8)
    compute = np.zeros(n)
    for c in _COMPUTE_BUSY:
        compute = compute + ops[c]
    out[(compute <= 0) & (ops["busy_dma"] > 0)] = MEMORY
    coll = profile.table("collectives")["op"]
    coll = coll[(coll >= 0) & (coll < n)]
    out[coll] = COMMUNICATION
    return out


def collective_kinds(profile: Profile) -> dict[int, str]:
    """Op row -> the collective's kind (`all_reduce`, `send_recv`, ...)."""
    coll = profile.table("collectives")
    return {op: profile.strings[k] for op, k in zip(coll["op"].tolist(), coll["kind_s"].tolist())
            if 0 <= k < len(profile.strings)}


@dataclass(frozen=True, slots=True)
class DeviceBreakdown:
    span: float             # first operator start to last operator end
    busy: float             # some operator running
    idle: float             # span - busy
    computation: float      # a computation kernel running
    communication: float    # a collective running
    memory: float           # a memory-only operator running
    comm_overlapped: float  # a collective and a computation kernel running together


def device_breakdown(profile: Profile, steps=None) -> DeviceBreakdown:
    """The breakdown over the operators of `steps` (default: every step)."""
    ops = profile.table("ops")
    sel = np.ones(ops["start"].size, dtype=bool) if steps is None else np.isin(ops["step"], list(steps))
    start, end = ops["start"][sel], np.maximum(ops["end"][sel], ops["start"][sel])
    kinds = op_types(profile)[sel]
    if start.size == 0:
        return DeviceBreakdown(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    span = float(end.max() - start.min())
    busy = union_length(start, end)
    of = {k: (start[kinds == k], end[kinds == k]) for k in (COMPUTATION, COMMUNICATION, MEMORY)}
    return DeviceBreakdown(span, busy, span - busy, union_length(*of[COMPUTATION]),
                           union_length(*of[COMMUNICATION]), union_length(*of[MEMORY]),
                           intersection_length(of[COMMUNICATION], of[COMPUTATION]))
