"""`profile.key_averages()`: the top operators as a list that prints like torch.profiler's.

`key_averages().table(sort_by=..., row_limit=...)` gives torch.profiler's table shape (dashed
rules, right-aligned columns, a total line at the end) with the chip model's device figures:
self device time and its share, total device time, average, calls, FLOPs, HBM bytes and the
bound engine, one row per operator and phase (forward and backward apart).
"""
from __future__ import annotations

from .render import fit_name, human_count, human_time
from .summary import OpStat

# sort keys: ours, and torch.profiler's device-time names for the same figures
SORT_KEYS = {
    "self_device_time_total": lambda s: s.self_time, "self_cuda_time_total": lambda s: s.self_time,
    "device_time_total": lambda s: s.total_time, "cuda_time_total": lambda s: s.total_time,
    "device_time": lambda s: s.total_time / max(s.count, 1),
    "count": lambda s: s.count, "flops": lambda s: s.flops, "hbm_bytes": lambda s: s.hbm_bytes,
}


class KeyAverages(list):
    """A list of `OpStat`s (highest self device time first) with torch.profiler's `table()`."""

    def table(self, sort_by: str | None = "self_device_time_total", row_limit: int = 100,
              max_name_column_width: int = 55) -> str:
        if sort_by is not None and sort_by not in SORT_KEYS:
            raise ValueError(f"sort_by must be one of {', '.join(SORT_KEYS)}; got {sort_by!r}")
        rows: list[OpStat] = sorted(self, key=SORT_KEYS[sort_by], reverse=True) if sort_by else list(self)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        total_self = sum(s.self_time for s in self)
        name_w = min(max([len("Name")] + [len(s.name) for s in rows]), max_name_column_width)
        heads = ["Name", "Phase", "Self Device %", "Self Device", "Device total", "Device time avg",
                 "# of Calls", "FLOPs", "HBM bytes", "Bound"]
        widths = [name_w, 9, 13, 12, 12, 15, 10, 12, 11, 8]

        def line(cells: list[str]) -> str:
            return "  ".join(c.rjust(w) if i else fit_name(c, w).ljust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

        rule = "  ".join("-" * w for w in widths)
        out = [rule, line(heads), rule]
        for s in rows:
            share = 100 * s.self_time / total_self if total_self > 0 else 0.0
            out.append(line([s.name, s.phase, f"{share:.2f}%", human_time(s.self_time),
                             human_time(s.total_time), human_time(s.total_time / max(s.count, 1)),
                             str(s.count), human_count(s.flops, "FLOP"), human_count(s.hbm_bytes, "B"),
                             s.bound]))
        out += [rule, f"Self device time total: {human_time(total_self)}"]
        return "\n".join(out) + "\n"

    def __str__(self) -> str:
        return self.table()
