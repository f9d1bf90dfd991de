"""Collectives aligned in time across the ranks of a torchrun capture.

Each worker's steps are simulated on its own, each starting when its own host launched it, so a
collective began on each rank at that rank's own time. A collective cannot finish before every
rank has joined it: the ranks that arrive first wait for the last. Here the k-th collective of a
step (same kind and size on every rank) starts its transfer when the last rank arrives; an
earlier rank's collective spans its wait, as a real trace's collective kernel does, and that
rank's later work in the step moves back by the wait. A step then starts when both its host
launched it and the rank's previous step (waits included) has ended.

A step whose collectives differ between ranks (their number, kinds or sizes) is left as
simulated, and named in the profile's notes.
"""
from __future__ import annotations

import numpy as np

from ..model.profile import Profile


def align_collectives(profile: Profile, overhead_s: float) -> Profile:
    """The profile with each step's collectives aligned across its ranks (module docstring);
    `overhead_s`: the device's gap between two executions."""
    entries = profile.meta.get("ranks") or []
    if len(entries) < 2:
        return profile
    tables = {name: {c: a.copy() for c, a in cols.items()} for name, cols in profile.tables.items()}
    plans = [_RankRows(profile, e["rows"]) for e in entries]
    steps = sorted(set.intersection(*(set(p.steps.tolist()) for p in plans)))
    unmatched, waited, count = [], 0.0, 0
    for step in steps:
        for plan in plans:
            plan.start_step(step, overhead_s)
        sequences = [plan.collectives(step) for plan in plans]
        if len({tuple(s[1]) for s in sequences}) != 1:
            unmatched.append(step)
            continue
        for k in range(len(sequences[0][0])):
            arrivals = [plan.arrival(seq[0][k]) for plan, seq in zip(plans, sequences)]
            last = max(arrivals)
            for plan, seq, arrival in zip(plans, sequences, arrivals):
                plan.wait(seq[0][k], last - arrival)
                waited += last - arrival
            count += 1
    for plan in plans:
        plan.apply(tables)
    meta = dict(profile.meta)
    if count:
        meta["collective_wait_s"] = waited
    if unmatched:
        meta["notes"] = [*meta.get("notes", []),
                         f"collectives of step(s) {', '.join(map(str, unmatched))} differ between "
                         "ranks: those steps are not aligned in time across ranks"]
    return Profile(meta, profile.strings, tables)


class _RankRows:
    """One rank's rows and the shifts of its device times: a piecewise-constant shift of the
    original time (`_points`, `_shifts`: from each point on, the shift is that value), and the
    wait each of its collective operators spans."""

    def __init__(self, profile: Profile, rows: dict) -> None:
        self.rows = {name: range(*rows[name]) for name in rows}
        ops, steps = profile.table("ops"), profile.table("steps")
        self.op_rows = np.arange(*rows["ops"])
        self.op_start, self.op_end = ops["start"][self.op_rows], ops["end"][self.op_rows]
        self.op_step = ops["step"][self.op_rows]
        step_rows = np.arange(*rows["steps"])
        self.steps = steps["step"][step_rows]
        self.step_start, self.step_end = steps["start"][step_rows], steps["end"][step_rows]
        coll = profile.table("collectives")
        coll_rows = np.arange(*rows["collectives"])
        self.coll_op = coll["op"][coll_rows].astype(np.int64)
        self.coll_key = [(profile.strings[int(k)], float(b)) for k, b in
                         zip(coll["kind_s"][coll_rows], coll["bytes"][coll_rows])]
        self._points: list[float] = []
        self._shifts: list[float] = []
        self._waits: dict[int, float] = {}       # op row -> the wait its collective spans
        self._previous_end: float | None = None  # the previous step's end, as simulated
        self._by_step: dict | None = None        # step -> its collectives (`collectives`)

    def _current(self) -> float:
        return self._shifts[-1] if self._shifts else 0.0

    def shift_before(self, t: float) -> float:
        """The shift of a time just before `t`'s own wait (if `t` starts a collective)."""
        i = int(np.searchsorted(self._points, t, side="left"))
        return self._shifts[i - 1] if i else 0.0

    def start_step(self, step: int, overhead_s: float) -> None:
        at = np.flatnonzero(self.steps == step)
        start = float(self.step_start[at[0]])
        # the step starts at its host launch (its simulated start, or later), or once the
        # previous step, waits included, has ended: an idle gap between steps absorbs waits
        shift = 0.0
        if self._previous_end is not None:
            shift = max(0.0, self._previous_end + self._current() + overhead_s - start)
        self._mark(float(np.nextafter(start, -np.inf)), shift)
        self._previous_end = float(self.step_end[at[0]])

    def collectives(self, step: int) -> tuple[list[int], list]:
        """The step's collective operators (rows, in start order) and their (kind, bytes)."""
        if self._by_step is None:
            self._by_step = {}
            first = int(self.op_rows[0]) if self.op_rows.size else 0
            local = self.coll_op - first
            ok = np.flatnonzero((local >= 0) & (local < self.op_rows.size))
            for i in ok[np.argsort(self.op_start[local[ok]], kind="stable")].tolist():
                rows, keys = self._by_step.setdefault(int(self.op_step[local[i]]), ([], []))
                rows.append(int(self.coll_op[i]))
                keys.append(self.coll_key[i])
        return self._by_step.get(step, ([], []))

    def arrival(self, op: int) -> float:
        start = float(self.op_start[op - self.op_rows[0]])
        return start + self.shift_before(start)

    def wait(self, op: int, seconds: float) -> None:
        start = float(self.op_start[op - self.op_rows[0]])
        self._waits[op] = seconds
        if seconds > 0:
            self._mark(start, max(self._current(), self.shift_before(start) + seconds))

    def _mark(self, point: float, shift: float) -> None:
        """From `point` on the shift is `shift` (points come in time order)."""
        self._points.append(point)
        self._shifts.append(shift)

    def _shift_of(self, times: np.ndarray, inclusive: bool) -> np.ndarray:
        if not self._points:
            return np.zeros_like(times)
        i = np.searchsorted(np.asarray(self._points), times, side="right" if inclusive else "left")
        return np.where(i > 0, np.asarray(self._shifts)[np.maximum(i - 1, 0)], 0.0)

    def apply(self, tables: dict) -> None:
        """Move this rank's device times in `tables` (host times stay as measured)."""
        if not self._points:
            return
        ops = tables["ops"]
        rows = self.op_rows
        before = self._shift_of(self.op_start, inclusive=False)
        waits = np.array([self._waits.get(int(r), 0.0) for r in rows])
        ops["start"][rows] = self.op_start + before
        ops["end"][rows] = self.op_end + before + waits
        ops["self_time"][rows] += waits
        # an operator's instructions move with it; a collective's transfer after its wait
        ins = tables.get("instructions")
        if ins is not None and len(self.rows.get("instructions", ())):
            r = np.arange(self.rows["instructions"].start, self.rows["instructions"].stop)
            op = ins["op"][r].astype(np.int64) - rows[0]
            known = (op >= 0) & (op < rows.size)
            move = np.where(known, (before + waits)[np.clip(op, 0, rows.size - 1)],
                            self._shift_of(ins["start"][r], inclusive=False))
            ins["start"][r] += move
            ins["end"][r] += move
        coll = tables.get("collectives")
        if coll is not None and self.coll_op.size:
            r = np.arange(self.rows["collectives"].start, self.rows["collectives"].stop)
            own = (self.coll_op >= rows[0]) & (self.coll_op <= rows[-1]) if rows.size else \
                np.zeros(r.size, dtype=bool)
            coll["start"][r[own]] = ops["start"][self.coll_op[own]]
            coll["end"][r[own]] = ops["end"][self.coll_op[own]]
        steps = tables["steps"]
        r = np.arange(self.rows["steps"].start, self.rows["steps"].stop)
        steps["start"][r] = self.step_start + self._shift_of(self.step_start, inclusive=False)
        steps["end"][r] = self.step_end + self._shift_of(self.step_end, inclusive=True)
        for name, col in (("semaphores", "time"), ("throttles", "start")):
            table = tables.get(name)
            span = self.rows.get(name)
            if table is not None and span is not None and len(span):
                r = np.arange(span.start, span.stop)
                table[col][r] += self._shift_of(table[col][r], inclusive=False)
