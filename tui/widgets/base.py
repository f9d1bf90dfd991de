"""A line-API widget that builds its lines once per data change and width (render-once cache)."""
from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.cache import FIFOCache
from textual.geometry import Size
from textual.markup import escape
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
        title = escape(title)     # titles hold stream data (a core version), never markup
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


def _lean_strip() -> type[Strip]:
    """A Strip that makes its memo caches when first used, not when made.

    Textual's Strip makes seven caches up front; the rows of a table that changes every refresh
    are drawn once or twice and most of those caches are never used, yet making them is most
    of what a row strip costs, and two fifths of the objects a refresh leaves for the garbage
    collector to walk.
    Its divide() does not memoise the strip cut only at its end (see there).
    The caches are found on a plain Strip (whatever this Textual version has), so a version
    that adds one is still served; one whose Strip holds anything else that is not None by
    default gets the plain Strip back."""
    template = Strip([], 0)
    slots = [name for cls in Strip.__mro__ for name in getattr(cls, "__slots__", ())]
    caches = {name: getattr(template, name)._maxsize for name in slots
              if isinstance(getattr(template, name, None), FIFOCache)}
    others = tuple(name for name in slots if name not in caches
                   and name not in ("_segments", "_cell_length"))
    if not caches or any(getattr(template, name, 0) is not None for name in others):
        return Strip

    def lazy(name: str, size: int) -> property:
        slot = getattr(Strip, name)
        read, write = slot.__get__, slot.__set__

        def cache(self: Strip) -> FIFOCache:
            try:
                return read(self)
            except AttributeError:
                made = FIFOCache(size)
                write(self, made)
                return made
        return property(cache)

    def __init__(self: Strip, segments, cell_length: int | None = None) -> None:
        # a list is taken as it is (the callers here build a fresh one), not copied
        self._segments = segments if type(segments) is list else list(segments)
        self._cell_length = cell_length
        for name in others:
            setattr(self, name, None)

    divide_all = Strip.divide

    def divide(self: Strip, cuts) -> list[Strip]:
        # Cut only at its end (how the compositor cuts a full-width row): the strip itself,
        # not memoised. Textual's Strip keeps [self] in its own divide cache, which makes
        # every such strip a reference cycle that only the cycle collector frees (young
        # collections of ~0.3 ms and older ones of ~2 ms, on a screen that replaces its rows
        # every refresh); without the cycle it goes when its row is replaced.
        cuts = [cut for cut in cuts if cut <= self.cell_length]
        if cuts == [self.cell_length]:
            return [self]
        return divide_all(self, cuts)

    namespace: dict = {name: lazy(name, size) for name, size in caches.items()}
    namespace.update(__slots__=(), __init__=__init__, divide=divide,
                     __doc__=_lean_strip.__doc__)
    return type("LeanStrip", (Strip,), namespace)


LeanStrip = _lean_strip()


def strip(parts: list[tuple[str, Style | None]]) -> Strip:
    """A Strip from (text, style) pairs. Text from the stream (tags, errors) may hold control
    characters: they are escaped here, so none reaches the terminal."""
    return LeanStrip([Segment(one_line(text), style) for text, style in parts if text])
