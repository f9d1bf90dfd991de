"""Memory Usage Details: an expandable ND -> NC -> model -> category tree (line API)."""
from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.strip import Strip

from tui.fmt import fit, human_bytes
from tui.memtree import TreeNode, TreeRow, all_branch_keys, visible_rows
from tui.widgets.base import LineWidget, strip

NUMBER_COLUMNS = (("Model ID", 10), ("Device Memory", 15), ("Host Memory", 13))


class MemoryTreeView(LineWidget, can_focus=True):
    """Attributes down: ``roots``. Expansion and cursor are local view state keyed by node key."""

    COMPONENT_CLASSES = {"tree--header", "tree--cursor", "tree--branch", "tree--muted"}
    DEFAULT_CSS = """
    MemoryTreeView { height: 1fr; }
    MemoryTreeView > .tree--header { text-style: bold underline; }
    MemoryTreeView > .tree--cursor { background: $accent 40%; text-style: bold; }
    MemoryTreeView:focus > .tree--cursor { background: $accent; color: $text; }
    MemoryTreeView > .tree--branch { color: $text-accent; }
    MemoryTreeView > .tree--muted { color: $text-muted; }
    """
    BINDINGS = [
        Binding("up", "cursor(-1)", "move up", show=False),
        Binding("down", "cursor(1)", "move down", show=False),
        Binding("pageup", "cursor(-10)", show=False),
        Binding("pagedown", "cursor(10)", show=False),
        Binding("home", "cursor(-100000)", show=False),
        Binding("end", "cursor(100000)", show=False),
        Binding("enter", "toggle", "expand/collapse"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.roots: tuple[TreeNode, ...] = ()
        self.expanded: set = set()
        self.cursor = 0
        self._rows: list[TreeRow] = []

    def show(self, roots: tuple[TreeNode, ...]) -> None:
        self.roots = roots
        self._refresh_rows()

    def _refresh_rows(self) -> None:
        cursor_key = self._rows[self.cursor].node.key if self._rows else None
        self._rows = visible_rows(self.roots, self.expanded)
        keys = [row.node.key for row in self._rows]
        if cursor_key in keys:
            self.cursor = keys.index(cursor_key)
        self.cursor = min(self.cursor, max(0, len(self._rows) - 1))
        self._follow_cursor()
        self.invalidate()

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self._rows) + 1)

    def build_lines(self, width: int) -> list[Strip]:
        numbers = sum(w for _, w in NUMBER_COLUMNS)
        name_width = max(8, width - numbers)
        header = [(fit("Name", name_width), None)] + [(t.rjust(w), None) for t, w in NUMBER_COLUMNS]
        lines = [strip([(text, self.style_of("tree--header")) for text, _ in header])]
        if not self._rows:
            lines.append(strip([("no device memory reported", self.style_of("tree--muted"))]))
        for index, row in enumerate(self._rows):
            lines.append(self._row_line(row, name_width, index == self.cursor))
        return lines

    def _row_line(self, row: TreeRow, name_width: int, is_cursor: bool) -> Strip:
        node = row.node
        marker = ("[-] " if row.expanded else "[+] ") if node.children else "    "
        name = fit("  " * row.depth + marker + node.label, name_width)
        values = ("" if node.model_id is None else str(node.model_id), human_bytes(node.device_bytes),
                  "" if node.host_bytes is None else human_bytes(node.host_bytes))
        text = name + "".join(v.rjust(w) for v, (_, w) in zip(values, NUMBER_COLUMNS))
        if is_cursor:
            return strip([(text, self.style_of("tree--cursor"))])
        style = self.style_of("tree--branch") if node.children else None
        return strip([(name, style), (text[len(name):], None)])

    def render_line(self, y: int) -> Strip:
        lines = self.lines_for(self.size.width)
        if y == 0:  # the column header stays put while rows scroll
            return lines[0]
        return super().render_line(y)

    def _follow_cursor(self) -> None:
        visible = max(1, self.size.height - 1)  # minus the header line
        if self.cursor < self.top_row:
            self.top_row = self.cursor
        elif self.cursor >= self.top_row + visible:
            self.top_row = self.cursor - visible + 1

    def action_cursor(self, delta: int) -> None:
        if self._rows:
            self.cursor = min(max(self.cursor + delta, 0), len(self._rows) - 1)
            self._follow_cursor()
            self.invalidate()

    def action_toggle(self) -> None:
        if not self._rows:
            return
        node = self._rows[self.cursor].node
        if node.children:
            self.expanded ^= {node.key}
            self._refresh_rows()

    def toggle_all(self) -> None:
        """AWS's ``x``: expand everything, or collapse everything when all is already open."""
        branches = all_branch_keys(self.roots)
        self.expanded = set() if branches <= self.expanded else set(branches)
        self._refresh_rows()

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        index = offset.y - 1 + self.top_row
        if offset.y >= 1 and 0 <= index < len(self._rows):
            self.cursor = index
            self.action_toggle() if self._rows[index].node.children else self.invalidate()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.top_row = min(self.top_row + 1, max(0, len(self._rows) - self.size.height + 1))
        self.refresh()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.top_row = max(0, self.top_row - 1)
        self.refresh()

    def on_resize(self, event: events.Resize) -> None:
        self.top_row = min(self.top_row, max(0, len(self._rows) - max(1, self.size.height - 1)))
        self._follow_cursor()
