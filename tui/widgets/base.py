"""A line-API widget that builds its lines once per data change and width (render-once cache)."""
from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget


class LineWidget(Widget):
    """Subclasses implement ``build_lines(width)``; ``invalidate()`` after changing attributes."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._version = 0
        self._cache_key: tuple | None = None
        self._lines: list[Strip] = []
        self.top_row = 0  # first line shown when the lines outgrow the widget

    def build_lines(self, width: int) -> list[Strip]:
        raise NotImplementedError

    def lines_for(self, width: int) -> list[Strip]:
        base = self.rich_style
        key = (width, self._version, base)
        if key != self._cache_key:
            # Unstyled text takes the widget's own colours (and the theme's, after a switch).
            self._lines = [line.apply_style(base) for line in self.build_lines(width)]
            self._cache_key = key
        return self._lines

    def invalidate(self, layout: bool = False) -> None:
        self._version += 1
        self.refresh(layout=layout)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(self.lines_for(width)))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        lines = self.lines_for(width)
        index = y + self.top_row
        if 0 <= index < len(lines):
            return lines[index].adjust_cell_length(width, self.rich_style)
        return Strip.blank(width, self.rich_style)

    def style_of(self, component: str) -> Style:
        return self.get_component_rich_style(component, partial=True)


def strip(parts: list[tuple[str, Style | None]]) -> Strip:
    """A Strip from (text, style) pairs."""
    return Strip([Segment(text, style) for text, style in parts if text])
