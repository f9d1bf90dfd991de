"""Utilization history per core group (one runtime's cores) beside the grid on the overview."""
from __future__ import annotations

import numpy as np
from textual.strip import Strip

from tui.braille import braille_rows
from tui.fmt import core_ranges, fit, percent
from tui.widgets.base import LineWidget, strip


class UsageHistoryView(LineWidget):
    """Attributes down: ``groups`` as (tag, cores, series oldest first), and ``rows``, the height
    to match (the grid's). Each group gets a label line and an equal share of braille rows."""

    COMPONENT_CLASSES = {"usage--label", "usage--graph", "usage--muted"}
    DEFAULT_CSS = """
    UsageHistoryView { height: auto; }
    UsageHistoryView > .usage--label { text-style: bold; }
    UsageHistoryView > .usage--graph { color: $accent; }
    UsageHistoryView > .usage--muted { color: $text-muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.groups: list[tuple[str, tuple[int, ...], np.ndarray]] = []
        self.rows = 1

    def show(self, groups: list[tuple[str, tuple[int, ...], np.ndarray]], rows: int) -> None:
        self.groups, self.rows = groups, max(1, rows)
        self.invalidate(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return self.rows

    def on_resize(self, event) -> None:  # the graphs share the height: rebuild at the new one
        self.invalidate()

    def build_lines(self, width: int) -> list[Strip]:
        if not self.groups:
            return [strip([("no runtime reports NeuronCore utilization", self.style_of(
                "usage--muted"))])]
        height = max(self.size.height or self.rows, 1)
        groups = self.groups[: max(1, height // 2)]  # at least a label and one graph row each
        graph_rows, extra = divmod(height - len(groups), len(groups))
        lines: list[Strip] = []
        for index, (tag, cores, series) in enumerate(groups):
            now = float(series[-1]) if series.size and np.isfinite(series[-1]) else None
            label = f"{tag} · NC {core_ranges(cores)}"
            value = f" {percent(now)}"
            lines.append(strip([(fit(label, width - len(value)), self.style_of("usage--label")),
                                (value, None)]))
            rows = max(1, graph_rows + (1 if index < extra else 0))
            lines += [strip([(row, self.style_of("usage--graph"))])
                      for row in braille_rows(series, width, rows, top=1.0)]
        hidden = len(self.groups) - len(groups)
        if hidden and lines:
            lines[-1] = strip([(fit(f"+{hidden} more: a/d selects an app", width),
                                self.style_of("usage--muted"))])
        return lines
