"""`profile.key_averages()`: the operators of a profile as a list that reads like torch.profiler's.

Each row keeps the chip model's figures under our names (seconds) and answers torch's
`FunctionEventAvg` names too (`key`, `count`, `self_cpu_time_total`, `cpu_time_total`,
`self_device_time_total`, `device_time_total`, ... in microseconds, `input_shapes`), so that a
script written for torch.profiler runs unchanged: `for e in prof.key_averages(): e.key, ...`.
The CPU figures are the measured host calls that launched the operators; the device figures are
the chip model's.

`key_averages().table(sort_by=..., row_limit=...)` gives torch.profiler's table shape (dashed
rules, right-aligned columns, total lines at the end), one row per operator and phase (forward
and backward apart), and per input shape when grouped by it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..model.profile import Profile
from .render import fit_name, human_count, human_time
from .summary import OpStat, op_groups, top_operators


@dataclass(frozen=True, slots=True)
class OpAverage(OpStat):
    """One operator (and phase, and input shape when grouped by it) over the profiled steps."""
    shape: str = ""             # the recorded input shapes, as the profile holds them
    cpu_time_s: float = 0.0     # host calls that launched it, inclusive, seconds
    self_cpu_s: float = 0.0     # the same, less the host calls nested in them

    # torch.profiler's FunctionEventAvg names (microseconds, as torch's)
    @property
    def key(self) -> str:
        return self.name

    @property
    def self_cpu_time_total(self) -> float:
        return self.self_cpu_s * 1e6

    @property
    def cpu_time_total(self) -> float:
        return self.cpu_time_s * 1e6

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / max(self.count, 1)

    @property
    def self_device_time_total(self) -> float:
        return self.self_time * 1e6

    @property
    def device_time_total(self) -> float:
        return self.total_time * 1e6

    @property
    def device_time(self) -> float:
        return self.device_time_total / max(self.count, 1)

    self_cuda_time_total = self_device_time_total
    cuda_time_total = device_time_total
    cuda_time = device_time

    @property
    def input_shapes(self) -> list[list[int]]:
        """torch's list of input shapes: `64,64x64` holds [[64, 64], [64]]; [] where the
        profile's shape is not a recorded one (a built-in workload's operator sizes)."""
        try:
            return [[int(d) for d in part.split(",") if d] for part in self.shape.split("x")] \
                if self.shape else []
        except ValueError:
            return []


# sort keys: ours, and torch.profiler's names for the same figures
SORT_KEYS = {
    "self_device_time_total": lambda s: s.self_time, "self_cuda_time_total": lambda s: s.self_time,
    "device_time_total": lambda s: s.total_time, "cuda_time_total": lambda s: s.total_time,
    "device_time": lambda s: s.total_time / max(s.count, 1),
    "cuda_time": lambda s: s.total_time / max(s.count, 1),
    "self_cpu_time_total": lambda s: s.self_cpu_s, "cpu_time_total": lambda s: s.cpu_time_s,
    "cpu_time": lambda s: s.cpu_time_s / max(s.count, 1),
    "count": lambda s: s.count, "flops": lambda s: s.flops, "hbm_bytes": lambda s: s.hbm_bytes,
}


def _host_times(profile: Profile, groups) -> tuple[np.ndarray, np.ndarray]:
    """(inclusive, self) host seconds per group: the distinct host calls that launched its
    operators; self leaves out the operator calls nested in a call on its thread."""
    n = groups.keys.size
    host = profile.table("host")
    linked = profile.table("ops")["host"][groups.mask]
    has = linked >= 0
    if not has.any():
        return np.zeros(n), np.zeros(n)
    pairs = np.unique(np.stack([groups.inv[has], linked[has]], axis=1), axis=0)
    grp, rows = pairs[:, 0], pairs[:, 1]
    length = host["end"] - host["start"]
    nested = _nested_time(host, np.unique(rows))
    inclusive = np.bincount(grp, weights=length[rows], minlength=n)
    own = np.bincount(grp, weights=length[rows] - nested[rows], minlength=n)
    return inclusive, np.maximum(own, 0.0)


def _nested_time(host: dict[str, np.ndarray], calls: np.ndarray) -> np.ndarray:
    """Per host row, the time of the operator calls directly nested in it on its thread (rows
    not in `calls` are neither parents nor children)."""
    nested = np.zeros(host["start"].size)
    order = calls[np.lexsort((-host["end"][calls], host["start"][calls], host["tid"][calls]))]
    stack: list[int] = []
    for row in order.tolist():
        while stack and (host["tid"][stack[-1]] != host["tid"][row]
                         or host["start"][row] >= host["end"][stack[-1]]):
            stack.pop()
        if stack:
            nested[stack[-1]] += host["end"][row] - host["start"][row]
        stack.append(row)
    return nested


def key_averages(profile: Profile | None, group_by_input_shape: bool = False,
                 limit: int | None = None) -> "KeyAverages":
    """The profile's operators, highest self device time first (`limit` of them)."""
    if profile is None:
        return KeyAverages([])
    groups = op_groups(profile, shapes=group_by_input_shape)
    stats = top_operators(profile, groups=groups)
    cpu, self_cpu = _host_times(profile, groups)
    rows = [OpAverage(*(getattr(s, f.name) for f in fields(OpStat)),
                      shape=profile.strings[int(groups.shape[i])] if group_by_input_shape else "",
                      cpu_time_s=float(cpu[i]), self_cpu_s=float(self_cpu[i]))
            for i, s in enumerate(stats)]
    rows.sort(key=lambda s: (-s.self_time, s.name, s.phase, s.shape))
    return KeyAverages(rows[:limit] if limit else rows, shapes=group_by_input_shape)


class KeyAverages(list):
    """A list of `OpAverage`s with torch.profiler's `table()` and `total_average()`."""

    def __init__(self, rows=(), shapes: bool = False) -> None:
        super().__init__(rows)
        self.shapes = shapes

    def total_average(self) -> OpAverage:
        """All rows summed into one named "Total", like torch's."""
        return OpAverage("Total", "", sum(s.count for s in self),
                         sum(s.self_time for s in self), sum(s.total_time for s in self),
                         sum(s.flops for s in self), sum(s.hbm_bytes for s in self), "",
                         1.0 if self else 0.0, "", cpu_time_s=sum(s.cpu_time_s for s in self),
                         self_cpu_s=sum(s.self_cpu_s for s in self))

    def table(self, sort_by: str | None = "self_device_time_total", row_limit: int = 100,
              max_name_column_width: int = 55, max_shapes_column_width: int = 80,
              header: str | None = None, top_level_events_only: bool = False, **_unused) -> str:
        """torch's `table()`; its stack and source width options are taken and have nothing to
        show (no stacks are recorded)."""
        if sort_by is not None and sort_by not in SORT_KEYS:
            raise ValueError(f"sort_by must be one of {', '.join(SORT_KEYS)}; got {sort_by!r}")
        rows = sorted(self, key=SORT_KEYS[sort_by], reverse=True) if sort_by else list(self)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        total_self = sum(s.self_time for s in self)
        total_cpu = sum(s.self_cpu_s for s in self)
        name_w = min(max([len("Name")] + [len(s.name) for s in rows]), max_name_column_width)
        heads = ["Name", "Phase", "Self CPU", "CPU total", "Self Device %", "Self Device",
                 "Device total", "Device time avg", "# of Calls", "FLOPs", "HBM bytes", "Bound"]
        widths = [name_w, 9, 12, 12, 13, 12, 12, 15, 10, 12, 11, 8]
        if self.shapes:
            shape_w = min(max([len("Input Shapes")] + [len(str(s.input_shapes)) for s in rows]),
                          max_shapes_column_width)
            heads.append("Input Shapes")
            widths.append(shape_w)

        def line(cells: list[str]) -> str:
            return "  ".join(c.rjust(w) if i else fit_name(c, w).ljust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

        rule = "  ".join("-" * w for w in widths)
        out = ([header] if header else []) + [rule, line(heads), rule]
        for s in rows:
            share = 100 * s.self_time / total_self if total_self > 0 else 0.0
            cells = [s.name, s.phase, human_time(s.self_cpu_s), human_time(s.cpu_time_s),
                     f"{share:.2f}%", human_time(s.self_time), human_time(s.total_time),
                     human_time(s.total_time / max(s.count, 1)), str(s.count),
                     human_count(s.flops, "FLOP"), human_count(s.hbm_bytes, "B"), s.bound]
            if self.shapes:
                cells.append(fit_name(str(s.input_shapes), widths[-1]))
            out.append(line(cells))
        out += [rule, f"Self CPU time total: {human_time(total_cpu)}",
                f"Self device time total: {human_time(total_self)}"]
        return "\n".join(out) + "\n"

    def __str__(self) -> str:
        return self.table()
