"""Utilization history per core group (one runtime's cores), drawn beside the NeuronCore grid.

It is part of the grid's own lines rather than a widget of its own: a second widget beside the
grid would cost the compositor a region per line on every frame.
"""
from __future__ import annotations

import numpy as np

from monitor.errors import one_line
from tui.braille import braille_rows
from tui.fmt import core_ranges, fit, percent

Group = tuple[str, tuple[int, ...], np.ndarray]  # (tag, its cores, utilization oldest first)


def usage_lines(groups: list[Group], width: int, height: int) -> list[list[tuple[str, str]]]:
    """``height`` lines of ``width`` cells as (text, component class) parts: each group gets a
    label line and an equal share of braille rows; groups that do not fit are counted."""
    if not groups:
        return [[(fit("no runtime reports NeuronCore utilization", width), "usage--muted")]] + [
            [(" " * width, "usage--muted")] for _ in range(height - 1)]
    shown = groups[: max(1, height // 2)]  # at least a label and one graph row each
    graph_rows, extra = divmod(height - len(shown), len(shown))
    lines: list[list[tuple[str, str]]] = []
    for index, (tag, cores, series) in enumerate(shown):
        now = float(series[-1]) if series.size and np.isfinite(series[-1]) else None
        value = f" {percent(now)}"
        label = f"{one_line(tag)} · NC {core_ranges(cores)}"   # escaped before it is measured
        lines.append([(fit(label, width - len(value)), "usage--label"),
                      (value, "usage--value")])
        rows = max(1, graph_rows + (1 if index < extra else 0))
        lines += [[(row, "usage--graph")] for row in braille_rows(series, width, rows, top=1.0)]
    hidden = len(groups) - len(shown)
    if hidden and lines:
        lines[-1] = [(fit(f"+{hidden} more: a/d selects an app", width), "usage--muted")]
    return lines[:height]
