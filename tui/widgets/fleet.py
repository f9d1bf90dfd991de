"""The fleet screen's widgets: the totals header and the instance table (line API)."""
from __future__ import annotations

import numpy as np
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip

from monitor.fleet import FleetSnapshot, InstanceRow
from tui.braille import braille_rows
from tui.fleet_view import COLUMNS, cell, header_cell, layout
from tui.widgets.base import LineWidget, strip

RIGHT = {key for key, _, _, right, _ in COLUMNS if right}


class FleetHeader(LineWidget):
    """Attributes down: the totals line, the source line and the banner (problems, outages)."""

    COMPONENT_CLASSES = {"fleet--totals", "fleet--source", "fleet--banner", "fleet--note"}
    DEFAULT_CSS = """
    FleetHeader { height: auto; }
    FleetHeader > .fleet--totals { text-style: bold; color: $text-accent; }
    FleetHeader > .fleet--source { color: $text-muted; }
    FleetHeader > .fleet--banner { background: $error; color: $text; text-style: bold; }
    FleetHeader > .fleet--note { color: $warning; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.totals, self.source, self.banner, self.notes = "", "", "", ()

    def show(self, totals: str, source: str, banner: str, notes: tuple[str, ...]) -> None:
        if (totals, source, banner, notes) != (self.totals, self.source, self.banner, self.notes):
            self.totals, self.source, self.banner, self.notes = totals, source, banner, notes
            self.invalidate(layout=True)

    def build_lines(self, width: int) -> list[Strip]:
        lines = [strip([(text, self.style_of("fleet--totals"))]) for text in wrap(self.totals, width)]
        lines += [strip([(text, self.style_of("fleet--source"))]) for text in wrap(self.source, width)]
        if self.banner:
            lines.append(strip([(f" {self.banner}"[:width].ljust(width), self.style_of("fleet--banner"))]))
        for note in self.notes[:3]:
            lines.append(strip([(f" {note}"[:width], self.style_of("fleet--note"))]))
        return lines


class FleetTable(LineWidget, can_focus=True):
    """Attributes down: rows, sort and filter. Messages up: Opened (enter), SortChanged (click)."""

    COMPONENT_CLASSES = {"fleet--header", "fleet--sorted", "fleet--cursor", "fleet--down",
                         "fleet--muted", "fleet--graph"}
    DEFAULT_CSS = """
    FleetTable { height: 1fr; }
    FleetTable > .fleet--header { text-style: bold; background: $panel; }
    FleetTable > .fleet--sorted { text-style: bold underline; background: $panel; color: $text-accent; }
    FleetTable > .fleet--cursor { background: $accent 40%; }
    FleetTable:focus > .fleet--cursor { background: $accent; color: $text; }
    FleetTable > .fleet--down { color: $error; text-style: bold; }
    FleetTable > .fleet--muted { color: $text-muted; }
    FleetTable > .fleet--graph { color: $success; }
    """
    BINDINGS = [
        Binding("up", "cursor(-1)", show=False),
        Binding("down", "cursor(1)", show=False),
        Binding("pageup", "cursor(-10)", show=False),
        Binding("pagedown", "cursor(10)", show=False),
        Binding("home", "cursor(-1000000)", show=False),
        Binding("end", "cursor(1000000)", show=False),
        Binding("enter", "open", "open instance"),
    ]

    class Opened(Message):
        def __init__(self, row: InstanceRow) -> None:
            super().__init__()
            self.row = row

    class SortChanged(Message):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[InstanceRow] = []
        self.sort_key, self.reverse, self.query = "instance_id", False, ""
        self.empty_text = "waiting for Prometheus…"
        self.cursor = 0
        self._cursor_id = ""
        self._header_spans: list[tuple[int, int, str]] = []

    def show(self, rows: list[InstanceRow], sort_key: str, reverse: bool, query: str,
             empty_text: str) -> None:
        self.rows, self.sort_key, self.reverse, self.query = rows, sort_key, reverse, query
        self.empty_text = empty_text
        ids = [r.instance_id for r in rows]
        # the cursor follows its instance when the order changes
        self.cursor = ids.index(self._cursor_id) if self._cursor_id in ids else min(
            self.cursor, max(0, len(rows) - 1))
        self._cursor_id = ids[self.cursor] if ids else ""
        self.invalidate(layout=True)

    def history_width(self, width: int) -> int:
        return dict(layout(width)).get("history", 0)

    @property
    def selected(self) -> InstanceRow | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def build_lines(self, width: int) -> list[Strip]:
        columns = layout(width)
        header, spans, x = [], [], 0
        for key, w in columns:
            style = "fleet--sorted" if key == self.sort_key else "fleet--header"
            header.append((header_cell(key, w, key in RIGHT, self.sort_key, self.reverse) + " ",
                           self.style_of(style)))
            spans.append((x, x + w, key))
            x += w + 1
        self._header_spans = spans
        lines = [strip(header)]
        if not self.rows:
            text = f"  no instance matches {self.query!r}" if self.query else f"  {self.empty_text}"
            return lines + [strip([(text[:width], self.style_of("fleet--muted"))])]
        cursor_style = self.style_of("fleet--cursor")
        for index, row in enumerate(self.rows):
            parts = []
            for key, w in columns:
                if key == "history":
                    text = _spark(row.history, w)
                    style = self.style_of("fleet--graph") if row.up else self.style_of("fleet--muted")
                else:
                    raw = cell(row, key)
                    text = raw[:w].rjust(w) if key in RIGHT else (raw if len(raw) <= w else raw[:w - 1] + "…").ljust(w)
                    style = self.style_of("fleet--down") if key == "state" and not row.up else (
                        None if row.up else self.style_of("fleet--muted"))
                if index == self.cursor:
                    style = cursor_style + style if style else cursor_style
                parts.append((text + " ", style))
            lines.append(strip(parts))
        return lines

    def render_line(self, y: int) -> Strip:
        # the header stays on line 0; the rows scroll under it to keep the cursor in view
        width = self.size.width
        lines = self.lines_for(width)
        if y == 0:
            return lines[0] if lines else Strip.blank(width, self._base_style)
        visible = max(1, self.size.height - 1)
        self.top_row = max(0, self.cursor - visible + 1) if self.rows else 0
        index = y + self.top_row
        return lines[index] if 0 <= index < len(lines) else Strip.blank(width, self._base_style)

    def action_cursor(self, step: int) -> None:
        if self.rows:
            self.cursor = min(max(self.cursor + step, 0), len(self.rows) - 1)
            self._cursor_id = self.rows[self.cursor].instance_id
            self.invalidate()

    def action_open(self) -> None:
        if self.selected is not None:
            self.post_message(self.Opened(self.selected))

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            for start, end, key in self._header_spans:
                if start <= event.x < end and key not in ("history", "tags", "engines"):
                    self.post_message(self.SortChanged(key))
            return
        index = event.y - 1 + self.top_row
        if 0 <= index < len(self.rows):
            self.cursor = index
            self._cursor_id = self.rows[index].instance_id
            self.invalidate()
            if event.chain >= 2:
                self.action_open()


def wrap(text: str, width: int, sep: str = " · ") -> list[str]:
    """``text`` in lines of at most ``width`` cells, broken between its `` · `` parts."""
    lines, current = [], ""
    for part in text.split(sep):
        candidate = f"{current}{sep}{part}" if current else part
        if len(candidate) <= width or not current:
            current = candidate
        else:
            lines.append(current)
            current = part
    lines.append(current)
    return [line[:width] for line in lines if line]


def _spark(history: np.ndarray, width: int) -> str:
    if width <= 0:
        return ""
    return braille_rows(history, width, 1, top=1.0)[0]
