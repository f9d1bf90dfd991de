"""A line-API widget that builds its lines once per data change and width (render-once cache)."""
from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from monitor.errors import one_line


class LineWidget(Widget):
    """Subclasses implement ``build_lines(width)``; ``invalidate()`` after changing attributes."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._version = 0
        self._cache_key: tuple | None = None
        self._lines: list[Strip] = []
        self._line_count = -1
        self._base_style = Style()
        self.top_row = 0  # first line shown when the lines outgrow the widget
        self._title = ""

    FOCUS_MARK = "▶ "

    def set_title(self, title: str) -> None:
        """The section's frame title; the focused section's starts with a mark, so focus reads
        even without colour (NO_COLOR) and with the one-line frames of short terminals."""
        self._title = title
        shown = (self.FOCUS_MARK + title) if self.has_focus else title
        if shown != self.border_title:  # an unchanged title costs no refresh
            self.border_title = shown

    def watch_has_focus(self, has_focus: bool) -> None:
        super().watch_has_focus(has_focus)
        if self._title:
            self.set_title(self._title)

    def clamp_scroll(self, visible: int) -> None:
        """After a resize: no scroll offset past the end, none at all when everything fits."""
        total = len(self.lines_for(self.size.width)) if self.size.width else 0
        self.top_row = min(self.top_row, max(0, total - visible))

    def build_lines(self, width: int) -> list[Strip]:
        raise NotImplementedError

    def lines_for(self, width: int) -> list[Strip]:
        # Resolving rich_style walks the CSS; only a new theme or focus can change it.
        key = (width, self._version, self.app.theme, self.has_focus)
        if key != self._cache_key:
            base = self._base_style = self.base_style()  # unstyled text: the widget's colours
            self._lines = [line.apply_style(base).adjust_cell_length(width, base)
                           for line in self.build_lines(width)]
            self._cache_key = key
        return self._lines

    def base_style(self) -> Style:
        """The widget's own colours (resolving them walks the CSS)."""
        return self.rich_style

    def invalidate(self, layout: bool = False) -> None:
        """New data: rebuild on the next render; re-layout only when the line count changed,
        since a full layout pass costs more than rendering every line of the screen."""
        self._version += 1
        count = len(self.lines_for(self.size.width)) if self.size.width else -1
        changed = count != self._line_count
        self._line_count = count
        self.refresh(layout=layout and changed)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(self.lines_for(width)))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        lines = self.lines_for(width)
        index = y + self.top_row
        if 0 <= index < len(lines):
            return lines[index]
        return Strip.blank(width, self._base_style)

    def style_of(self, component: str) -> Style:
        return self.get_component_rich_style(component, partial=True)


def strip(parts: list[tuple[str, Style | None]]) -> Strip:
    """A Strip from (text, style) pairs. Text from the stream (tags, errors) may hold control
    characters: they are escaped here, so none reaches the terminal."""
    return Strip([Segment(one_line(text), style) for text, style in parts if text])
