"""The process table: one row per runtime; sorts (s / r / click a header) and filters (/)."""
from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip

from tui.fmt import fit, wrap_words
from tui.procs import COLUMNS, ProcessRow, fit_columns
from tui.procs import cell_text as _cell
from tui.ptree import TreeLine
from tui.widgets.base import LineWidget, strip


class ProcessTable(LineWidget, can_focus=True):
    """Attributes down: ``rows``, ``sort_key``, ``reverse``, ``query``, ``parents_tree`` (the
    rows under their parent processes, or None for the flat table). Messages up: sort, details."""

    COMPONENT_CLASSES = {"procs--header", "procs--sorted", "procs--cursor", "procs--error",
                         "procs--muted"}
    DEFAULT_CSS = """
    ProcessTable { height: 1fr; }
    ProcessTable > .procs--header { text-style: bold; background: $panel; }
    ProcessTable > .procs--sorted { text-style: bold underline; background: $panel; color: $text-accent; }
    ProcessTable > .procs--cursor { background: $accent 40%; }
    ProcessTable:focus > .procs--cursor { background: $accent; color: $text; }
    ProcessTable > .procs--error { color: $error; text-style: bold; }
    ProcessTable > .procs--muted { color: $text-muted; }
    """
    BINDINGS = [
        Binding("up", "cursor(-1)", show=False),
        Binding("down", "cursor(1)", show=False),
        Binding("enter", "details", "details"),
        Binding("home", "cursor(-100000)", show=False),
        Binding("end", "cursor(100000)", show=False),
    ]

    class SortChanged(Message):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    class DetailsRequested(Message):
        def __init__(self, pid: int | None, tag: str) -> None:
            super().__init__()
            self.pid, self.tag = pid, tag

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[ProcessRow] = []
        self.sort_key, self.reverse, self.query = "pid", False, ""
        self.cursor = 0
        self.parents_tree: list[TreeLine] | None = None
        self._header_spans: list[tuple[int, int, str]] = []
        self._line_rows: list[int | None] = []  # per body line: index into rows, None = a parent

    def show(self, rows: list[ProcessRow], sort_key: str, reverse: bool, query: str,
             tree: list[TreeLine] | None = None) -> None:
        selected = self.selected_key
        if tree is not None:  # the tree orders the runtimes: under their parents
            rows = [line.row for line in tree if line.row is not None]
        self.rows, self.sort_key, self.reverse, self.query = rows, sort_key, reverse, query
        self.parents_tree = tree
        keys = [(row.pid, row.tag) for row in rows]
        if selected in keys:  # the cursor stays on its process when the order changes
            self.cursor = keys.index(selected)
        self.cursor = min(self.cursor, max(0, len(rows) - 1))
        self.invalidate(layout=True)

    @property
    def selected_pid(self) -> int | None:
        key = self.selected_key
        return None if key is None else key[0]

    @property
    def selected_key(self) -> tuple[int | None, str] | None:
        """(pid, tag) of the row under the cursor: the tag tells apart runtimes of unknown pid."""
        if not self.rows or self.cursor >= len(self.rows):
            return None
        row = self.rows[self.cursor]
        return row.pid, row.tag

    def _columns(self, width: int) -> list[tuple[tuple, int]]:
        """The columns that fit ``width`` (tui.procs.fit_columns); in the tree the tag column
        grows by the deepest branch drawing."""
        grow = max((len(line.prefix) for line in self.parents_tree or () if line.row), default=0)
        return fit_columns(width, self.rows, grow)

    def build_lines(self, width: int) -> list[Strip]:
        columns = self._columns(width)
        header, x, self._header_spans = [], 0, []
        for (key, title, _, right, _), w in columns:
            arrow = ("▼" if self.reverse else "▲") if key == self.sort_key else ""
            text = (title + arrow).rjust(w) if right else fit(title + arrow, w)
            style = "procs--sorted" if key == self.sort_key else "procs--header"
            header += [(text, self.style_of(style)), (" ", self.style_of("procs--header"))]
            self._header_spans.append((x, x + w, key))
            x += w + 1
        lines = [strip(header)]
        self._line_rows = []
        if self.parents_tree is None:
            for index, row in enumerate(self.rows):
                lines.append(self._row_line(row, columns, index == self.cursor))
                self._line_rows.append(index)
        else:
            lines += self._tree_lines(columns, width)
        if not self.rows:
            note = f"no runtime matches “{self.query}”" if self.query else "no Neuron runtime is running"
            lines.append(strip([(note, self.style_of("procs--muted"))]))
        count = len(self.rows)
        order = "highest first" if self.reverse else "lowest first"
        if self.sort_key == "tag":
            order = "Z to A" if self.reverse else "A to Z"
        titles = {key: title for key, title, *_ in COLUMNS}
        by = titles.get(self.sort_key, self.sort_key)
        if not any(key == self.sort_key for (key, *_), _ in columns):
            by += " (not shown at this width)"
        footer = (f"{count} runtime{'s' if count != 1 else ''} · sorted by {by}, {order}"
                  f"{f' · filter: {self.query}' if self.query else ''}"
                  " · s: next sort column · r: reverse · /: filter (tag:, pid:) · enter: details"
                  f" · t: {'flat list' if self.parents_tree is not None else 'tree of parents'}"
                  " · I/T/K: SIGINT/SIGTERM/SIGKILL")
        lines.append(Strip.blank(0))
        lines += [strip([(part, self.style_of("procs--muted"))])
                  for part in wrap_words(footer, width, 3)]
        return lines

    def _tree_lines(self, columns: list[tuple[tuple, int]], width: int) -> list[Strip]:
        lines, index = [], 0
        pid_width = columns[0][1]
        for line in self.parents_tree or ():
            if line.row is None:
                ancestor = line.ancestor
                text = f"{ancestor.pid:>{pid_width}} {line.prefix}{ancestor.name} ({ancestor.user})"
                lines.append(strip([(fit(text, width), self.style_of("procs--muted"))]))
                self._line_rows.append(None)
            else:
                lines.append(self._row_line(line.row, columns, index == self.cursor, line.prefix))
                self._line_rows.append(index)
                index += 1
        return lines

    def _row_line(self, row: ProcessRow, columns: list[tuple[tuple, int]], is_cursor: bool,
                  prefix: str = "") -> Strip:
        cells = []
        for (key, _, _, right, _), w in columns:
            text = _cell(row, key)
            if key == "tag":
                text = prefix + text
            cells.append(text.rjust(w) if right else fit(text, w))
        line = " ".join(cells)
        if is_cursor:
            return strip([(line, self.style_of("procs--cursor"))])
        bad = row.status or (row.errors or 0) > 0
        return strip([(line, self.style_of("procs--error") if bad else None)])

    def action_cursor(self, delta: int) -> None:
        if self.rows:
            self.cursor = min(max(self.cursor + delta, 0), len(self.rows) - 1)
            self.invalidate()

    def action_details(self) -> None:
        if self.rows:
            row = self.rows[self.cursor]
            self.post_message(self.DetailsRequested(row.pid, row.tag))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:
            for start, end, key in self._header_spans:
                if start <= offset.x < end and key != "status":
                    self.post_message(self.SortChanged(key))
        elif 1 <= offset.y <= len(self._line_rows):
            index = self._line_rows[offset.y - 1]
            if index is not None:
                self.cursor = index
                self.invalidate()
