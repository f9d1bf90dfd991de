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
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
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

    def __init__(self, *, id: str | None = None, readonly: bool = False) -> None:
        super().__init__(id=id)
        self.readonly = readonly    # --readonly: no signal keys to offer
        self.rows: list[ProcessRow] = []
        self.sort_key, self.reverse, self.query = "pid", False, ""
        self.cursor = 0
        self.parents_tree: list[TreeLine] | None = None
        self._header_spans: list[tuple[int, int, str]] = []
        self._line_rows: list[int | None] = []  # per body line: index into rows, None = a parent
        self._footer_count = 0  # the last lines: a blank and the summary under the rows

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
        self._follow_cursor()

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
                  f"{'' if self.readonly else ' · I/T/K: SIGINT/SIGTERM/SIGKILL'}")
        summary = [strip([(part, self.style_of("procs--muted"))])
                   for part in wrap_words(footer, width, 3)]
        self._footer_count = 1 + len(summary)
        return lines + [Strip.blank(0)] + summary

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

    # ------------------------------------------------------------------ scrolling
    # The rows scroll between the column header and the summary under them, both kept in
    # place: with more runtimes than lines, the cursor went off screen and enter opened a
    # process nobody could see.
    def _pinned_footer(self) -> int:
        """Summary lines kept at the bottom while the rows scroll (none when it would leave
        no row on screen)."""
        lines, height = self.lines_for(self.size.width), self.size.height
        if len(lines) <= height or height - 1 - self._footer_count < 1:
            return 0
        return self._footer_count

    def _body_height(self) -> int:
        """Body lines (rows, parents and the note) on screen."""
        return max(1, self.size.height - 1 - self._pinned_footer())

    def _body_count(self) -> int:
        return len(self.lines_for(self.size.width)) - 1 - self._footer_count

    def _follow_cursor(self) -> None:
        if not self.size.height:
            return
        visible = self._body_height()
        self.top_row = min(self.top_row, max(0, self._body_count() - visible))
        if self.cursor not in self._line_rows:
            return
        line = self._line_rows.index(self.cursor)
        if line < self.top_row:
            self.top_row = line
        elif line >= self.top_row + visible:
            self.top_row = line - visible + 1
        if self.cursor == 0 and line < visible:
            self.top_row = 0  # the first row: the parent processes above it show too

    def render_line(self, y: int) -> Strip:
        lines, height = self.lines_for(self.size.width), self.size.height
        pinned = self._pinned_footer()
        if y == 0:   # the column header stays put
            return lines[0]
        if pinned and height - pinned <= y < height:   # so does the summary, at the bottom
            return lines[len(lines) - (height - y)]
        index = self.top_row + y
        if index < len(lines):
            return lines[index]
        return Strip.blank(self.size.width, self._base_style)

    def on_resize(self, event: events.Resize) -> None:
        self._follow_cursor()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.top_row = min(self.top_row + 1, max(0, self._body_count() - self._body_height()))
        self.refresh()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.top_row = max(0, self.top_row - 1)
        self.refresh()

    # ------------------------------------------------------------------ actions
    def action_cursor(self, delta: int) -> None:
        if self.rows:
            self.cursor = min(max(self.cursor + delta, 0), len(self.rows) - 1)
            self.invalidate()
            self._follow_cursor()

    def action_page(self, pages: int) -> None:
        self.action_cursor(pages * self._body_height())

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
            return
        if offset.y >= self.size.height - self._pinned_footer():
            return   # the summary
        line = offset.y - 1 + self.top_row
        if 0 <= line < len(self._line_rows) and self._line_rows[line] is not None:
            self.cursor = self._line_rows[line]
            self.invalidate()
