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
from operator import attrgetter

import numpy as np

from ..model.profile import Profile
from .render import fit_name, human_count, human_time
from .summary import OpStat, op_groups, scope_mask, top_operators


def _microseconds(seconds: str) -> property:
    """A field in seconds, read in microseconds (torch's unit)."""
    return property(lambda row: getattr(row, seconds) * 1e6)


def _per_call(total: str) -> property:
    """A total, read per call (torch's averages)."""
    return property(lambda row: getattr(row, total) / max(row.count, 1))


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

    self_cpu_time_total = _microseconds("self_cpu_s")
    cpu_time_total = _microseconds("cpu_time_s")
    cpu_time = _per_call("cpu_time_total")
    self_device_time_total = _microseconds("self_time")
    device_time_total = _microseconds("total_time")
    device_time = _per_call("device_time_total")
    self_cuda_time_total = self_device_time_total
    cuda_time_total = device_time_total
    cuda_time = device_time

    # torch's memory figures: memory is not recorded (docs/neuron-profile.md), so 0 as torch
    # shows them without profile_memory
    cpu_memory_usage = self_cpu_memory_usage = device_memory_usage = 0
    self_device_memory_usage = cuda_memory_usage = self_cuda_memory_usage = 0

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
SORT_KEYS = {name: attrgetter(name) for name in (
    "self_device_time_total", "self_cuda_time_total", "device_time_total", "cuda_time_total",
    "device_time", "cuda_time", "self_cpu_time_total", "cpu_time_total", "cpu_time", "count",
    "flops", "hbm_bytes", "cpu_memory_usage", "self_cpu_memory_usage", "device_memory_usage",
    "self_device_memory_usage", "cuda_memory_usage", "self_cuda_memory_usage")}


def _launching_calls(profile: Profile, groups) -> tuple[np.ndarray, np.ndarray]:
    """(group, host row) of each host call that launched operators: a call lowered to several
    operators (`aten::convolution` and its `.im2col`) counts once, in the group of the operator
    that bears its name (else its first), so its time is not counted twice."""
    ops = profile.table("ops")
    linked = ops["host"][groups.mask]
    has = np.flatnonzero(linked >= 0)
    # the operator named as the call (not its `.im2col`) first, then the first launched
    named = ops["name_s"][groups.mask][has] == profile.table("host")["name_s"][linked[has]]
    order = np.lexsort((has, ~named, linked[has]))
    rows, first = np.unique(linked[has][order], return_index=True)
    return groups.inv[has[order][first]], rows


def _annotations(profile: Profile, chosen: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The summarised steps' user annotations (`record_function` labels, `ProfilerStep#N`,
    optimizer steps): host rows and their keys, `ProfilerStep#N` as torch groups it."""
    host = profile.table("host")
    rows = _rows_of(profile, ("user_annotation",))
    rows = rows[np.isin(host["step"][rows], chosen)]
    return rows, [torch_event_name(profile.strings[int(host["name_s"][r])]) for r in rows]


def torch_event_name(trace_name: str) -> str:
    """The name torch's events and key_averages give a trace name: every `ProfilerStep#N` is
    `ProfilerStep*` (the trace keeps the number)."""
    return "ProfilerStep*" if trace_name.startswith("ProfilerStep#") else trace_name


def _rows_of(profile: Profile, categories: tuple[str, ...]) -> np.ndarray:
    """The host rows of these categories."""
    codes = [i for i, text in enumerate(profile.strings) if text in categories]
    return np.flatnonzero(np.isin(profile.table("host")["cat_s"], codes))


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
    """The profile's operators and user annotations, highest self device time first (`limit`
    of them)."""
    if profile is None:
        return KeyAverages([])
    groups = op_groups(profile, shapes=group_by_input_shape)
    stats = top_operators(profile, groups=groups)
    host = profile.table("host")
    length = host["end"] - host["start"]
    op_group, op_rows = _launching_calls(profile, groups)
    notes, keys = _annotations(profile, scope_mask(profile)[0])
    nested = _nested_time(host, np.union1d(op_rows, notes))
    n = groups.keys.size
    cpu = np.bincount(op_group, weights=length[op_rows], minlength=n)
    self_cpu = np.bincount(op_group, weights=length[op_rows] - nested[op_rows], minlength=n)
    rows = [OpAverage(*(getattr(s, f.name) for f in fields(OpStat)),
                      shape=profile.strings[int(groups.shape[i])] if group_by_input_shape else "",
                      cpu_time_s=float(cpu[i]), self_cpu_s=max(float(self_cpu[i]), 0.0))
            for i, s in enumerate(stats)]
    rows += _annotation_rows(profile, notes, keys, length - nested)
    rows.sort(key=lambda s: (-s.self_time, s.name, s.phase, s.shape))
    return KeyAverages(rows[:limit] if limit else rows, shapes=group_by_input_shape)


def merge_key_averages(windows: list["KeyAverages"], limit: int | None = None) -> "KeyAverages":
    """Several windows' rows as one list (torch's `acc_events`): a row per operator, phase and
    shape, its counts, times, FLOPs and bytes summed, its share of the self device time taken
    again over them all, and the bound of the window where it spent the most."""
    if len(windows) == 1 and limit is None:
        return windows[0]
    groups: dict[tuple, list[OpAverage]] = {}
    for window in windows:
        for row in window:
            groups.setdefault((row.name, row.phase, row.shape, row.kind), []).append(row)
    total_self = sum(r.self_time for rows in groups.values() for r in rows)
    rows = []
    for (name, phase, shape, kind), parts in groups.items():
        self_time = sum(r.self_time for r in parts)
        rows.append(OpAverage(
            name, kind, sum(r.count for r in parts), self_time, sum(r.total_time for r in parts),
            sum(r.flops for r in parts), sum(r.hbm_bytes for r in parts),
            max(parts, key=lambda r: r.self_time).bound,
            self_time / total_self if total_self > 0 else 0.0, phase, shape=shape,
            cpu_time_s=sum(r.cpu_time_s for r in parts),
            self_cpu_s=sum(r.self_cpu_s for r in parts)))
    rows.sort(key=lambda s: (-s.self_time, s.name, s.phase, s.shape))
    return KeyAverages(rows[:limit] if limit else rows,
                       shapes=any(w.shapes for w in windows))


def _annotation_rows(profile: Profile, notes: np.ndarray, keys: list[str],
                     own: np.ndarray) -> list[OpAverage]:
    """A row per annotation key, as torch has them: calls, host time (self: less the calls
    nested in it), and the device time of the operators its calls launched (no self device
    time: an annotation runs nothing itself)."""
    if notes.size == 0:
        return []
    host, ops = profile.table("host"), profile.table("ops")
    _, mask = scope_mask(profile)
    launched = ops["host"][mask]
    op_time = (ops["end"] - ops["start"])[mask][launched >= 0]
    launched = launched[launched >= 0]
    device = _device_time_within(host, launched, op_time, notes)
    out: dict[str, list] = {}
    for row, key, dev in zip(notes.tolist(), keys, device.tolist()):
        entry = out.setdefault(key, [0, 0.0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += float(host["end"][row] - host["start"][row])
        entry[2] += max(float(own[row]), 0.0)
        entry[3] += dev
    return [OpAverage(key, "annotation", calls, 0.0, device, 0, 0, "", 0.0, "",
                      cpu_time_s=cpu, self_cpu_s=self_cpu)
            for key, (calls, cpu, self_cpu, device) in out.items()]


def _device_time_within(host: dict[str, np.ndarray], launched: np.ndarray, op_time: np.ndarray,
                        notes: np.ndarray) -> np.ndarray:
    """Per annotation row, the device time of the operators whose launching call started
    inside it on its thread: prefix sums over the launches in (thread, time) order."""
    at, tid = host["start"][launched], host["tid"][launched]
    order = np.lexsort((at, tid))
    at, tid, summed = at[order], tid[order], np.r_[0.0, np.cumsum(op_time[order])]
    # one sorted key per launch: thread first, then time (threads are far apart in the key)
    threads, code = np.unique(np.r_[tid, host["tid"][notes]], return_inverse=True)
    span = max(float(np.max(np.abs(np.r_[at, host["end"][notes]]), initial=0.0)) * 4 + 1, 1.0)
    keyed = code[:tid.size] * span + at
    note_code = code[tid.size:] * span
    lo = np.searchsorted(keyed, note_code + host["start"][notes], side="left")
    hi = np.searchsorted(keyed, note_code + host["end"][notes], side="left")
    return summed[hi] - summed[lo]


@dataclass(frozen=True, slots=True)
class CallEvent:
    """One measured host call (an operator call or an annotation), as torch's FunctionEvent
    names it (`name`, and `trace_name`: the trace's, `ProfilerStep#N` where the name is
    `ProfilerStep*`); times in microseconds from the profile's start."""
    trace_name: str
    category: str               # cpu_op or user_annotation
    thread: int
    start_us: float
    end_us: float
    device_time_total: float    # the chip model's time of the operators it launched

    @property
    def name(self) -> str:
        return torch_event_name(self.trace_name)

    @property
    def key(self) -> str:
        return self.name

    @property
    def cpu_time_total(self) -> float:
        return self.end_us - self.start_us

    @property
    def time_range(self) -> tuple[float, float]:
        return (self.start_us, self.end_us)

    count = 1


def call_events(profile: Profile | None) -> list[CallEvent]:
    """Every operator call and annotation of the profile, in start order (`prof.events()`)."""
    if profile is None:
        return []
    host, ops = profile.table("host"), profile.table("ops")
    rows = _rows_of(profile, ("cpu_op", "user_annotation"))
    rows = rows[np.argsort(host["start"][rows], kind="stable")]
    launched = ops["host"] >= 0
    device = np.bincount(ops["host"][launched].astype(np.int64),
                         weights=(ops["end"] - ops["start"])[launched],
                         minlength=host["start"].size)
    text = profile.strings
    return [CallEvent(text[int(host["name_s"][r])], text[int(host["cat_s"][r])],
                      int(host["tid"][r]), float(host["start"][r]) * 1e6,
                      float(host["end"][r]) * 1e6, float(device[r]) * 1e6) for r in rows.tolist()]


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
