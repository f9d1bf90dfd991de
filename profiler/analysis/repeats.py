"""Executions the file holds once at instruction level and several times as operators.

A built-in capture runs a step's repeated segments (its micro-batches) as the same program: the
profile keeps their operator rows every time but their instructions only the first time (one
micro-batch of a 256-micro-batch step would otherwise be 256 copies). A figure summed or merged
over the instructions of a step must count each repeat as its first run: the same instructions,
shifted in time, and segments never overlap, so a repeat adds what its first run adds.

`Repeats` says, for the operators in scope, which recorded run stands for each repeat.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.profile import Profile


@dataclass(frozen=True, slots=True)
class Repeats:
    weight: np.ndarray                    # per instruction: how many executions it stands for
    runs: tuple[tuple[int, int, int], ...]   # (first op row, stop row, repeats) of repeated segments
    spans: tuple[np.ndarray, np.ndarray]  # (start, end) of the repeated ops, which have no instructions

    def counted(self, measure: Callable[[tuple[int, int] | None], Any]) -> Any:
        """`measure(None)` of what the file holds, plus `measure((first, stop))` of each repeated
        segment's first run as many more times as it repeated: a repeat is that run again, later,
        and segments never overlap, so lengths and sums add."""
        total = measure(None)
        for first, stop, times in self.runs:
            total = total + times * measure((first, stop))
        return total

    def weighted(self, ins: dict[str, np.ndarray], column: str | np.ndarray,
                 sel: np.ndarray | None = None) -> float:
        """Sum of an instruction column (or of an array, one value per instruction) over the
        selected instructions, each counted as many times as it ran."""
        values = ins[column] if isinstance(column, str) else column
        if sel is not None:
            values = values[sel]
        if not self.runs:                 # nothing repeated: the plain sum
            return float(values.sum(dtype=np.float64))
        w = self.weight if sel is None else self.weight[sel]
        return float(np.dot(values, w))


def repeats(profile: Profile, op_mask: np.ndarray) -> Repeats:
    """The repeated segments among the operators of ``op_mask``: runs of consecutive op rows
    without instructions in the file, at least one of which executed some (its count says so),
    each matched to the earlier rows of the same step with the same names, kinds and phases,
    whose operators that executed instructions all have them in the file."""
    ops, ins = profile.table("ops"), profile.table("instructions")
    n = ops["start"].size
    weight = np.ones(n)
    none = Repeats(np.ones(0), (), (np.zeros(0), np.zeros(0)))
    recorded = np.zeros(n, dtype=bool)
    if ins["op"].size:
        recorded[np.unique(ins["op"])] = True
    ran = ops["instructions"] > 0
    loose = op_mask & ~recorded
    if not (loose & ran).any() or not recorded.any():
        return none
    key = np.stack([ops["step"], ops["name_s"], ops["kind_s"], ops["phase"]], axis=1)
    # per op row in scope, the first row of the same step with its name, kind and phase
    scope = np.flatnonzero(op_mask)
    _, first_at, which = np.unique(key[scope], axis=0, return_index=True, return_inverse=True)
    first_of = np.full(n, -1)
    first_of[scope] = scope[first_at][which.ravel()]
    missing = loose & ran
    idx = np.flatnonzero(loose)
    runs: dict[tuple[int, int], int] = {}
    matched = np.zeros(n, dtype=bool)
    for run in np.split(idx, np.flatnonzero(np.diff(idx) != 1) + 1):
        at, end = int(run[0]), int(run[-1]) + 1
        while at < end:             # back-to-back repeats: one segment at a time
            first = int(first_of[at])
            length = _segment(key, missing, first, at, end)
            if length == 0:
                at += 1
                continue
            if missing[at:at + length].any():
                weight[first:first + length] += 1
                runs[(first, first + length)] = runs.get((first, first + length), 0) + 1
                matched[at:at + length] = True
            at += length
    if not runs:
        return none
    spans = (ops["start"][matched], ops["end"][matched])
    return Repeats(weight[ins["op"]], tuple((a, b, k) for (a, b), k in runs.items()), spans)


def _segment(key: np.ndarray, missing: np.ndarray, first: int, at: int, end: int) -> int:
    """How many rows from `at` (up to `end`) repeat the rows from `first`: the same operators in
    the same order, the earlier ones all in the file, and not reaching into the repeat."""
    if first < 0 or first >= at:
        return 0
    span = min(end - at, at - first)
    same = np.all(key[first:first + span] == key[at:at + span], axis=1) & ~missing[first:first + span]
    return int(span if same.all() else np.argmin(same))
