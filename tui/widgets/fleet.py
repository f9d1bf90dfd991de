"""The fleet screen's widgets: the totals header and the instance table (line API). What a
row's text and strip are: tui.widgets.fleet_rows."""
from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.color import Color
from textual.filter import ANSIToTruecolor, DimFilter, LineFilter, Monochrome, NoColor
from textual.geometry import Region, Size
from textual.message import Message
from textual.strip import Strip

from monitor.fleet import InstanceRow
from tui.fleet_view import header_cell, layout
from tui.fmt import wrap_words
from tui.widgets.base import LineWidget, strip
from tui.widgets.fleet_rows import RIGHT, RowLayout, fit_all, spark_rows


BANNER_LINES = 3     # the banner and the notes: at most this many lines each


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
        self._styles_key: tuple | None = None
        self._styles: dict[str, Style] = {}

    def show(self, totals: str, source: str, banner: str, notes: tuple[str, ...]) -> None:
        if (totals, source, banner, notes) != (self.totals, self.source, self.banner, self.notes):
            self.totals, self.source, self.banner, self.notes = totals, source, banner, notes
            self.invalidate(layout=True)

    def _palette(self) -> dict[str, Style]:
        # the totals and refresh time change every refresh, the styles only with the theme:
        # resolved (a walk of the CSS each) once per theme and focus, not once per refresh
        key = (self.app.theme, self.has_focus)
        if key != self._styles_key:
            self._styles_key = key
            self._styles = {name: self.style_of(f"fleet--{name}")
                            for name in ("totals", "source", "banner", "note")}
            self._styles[""] = self.rich_style
        return self._styles

    def base_style(self) -> Style:
        return self._palette()[""]

    def build_lines(self, width: int) -> list[Strip]:
        styles = self._palette()
        lines = [strip([(text, styles["totals"])]) for text in wrap(self.totals, width)]
        lines += [strip([(text, styles["source"])]) for text in wrap(self.source, width)]
        # wrapped, as the host screens' banner is: cut at 80 columns, an outage lost its time
        if self.banner:
            lines += [strip([(f" {text}".ljust(width), styles["banner"])])
                      for text in wrap_words(self.banner, width - 1, BANNER_LINES)]
        notes = [text for note in self.notes for text in wrap_words(note, width - 1, BANNER_LINES)]
        lines += [strip([(f" {text}", styles["note"])]) for text in notes[:BANNER_LINES]]
        return lines


class FleetTable(LineWidget, can_focus=True):
    """Attributes down: rows, sort and filter. Messages up: Opened (enter), Highlighted (the
    cursor on another instance), SortChanged (click)."""

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

    class Highlighted(Message):
        """The cursor moved to another instance (its id; "" when no row is left)."""
        def __init__(self, instance_id: str) -> None:
            super().__init__()
            self.instance_id = instance_id

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
        self._row_strips: dict[tuple, Strip] = {}   # last build's rows, by cells and state
        self._used: dict[tuple, Strip] = {}         # this build's rows
        self._shown: dict[int, Strip] = {}          # line index -> Strip, built so far
        self._columns: list[tuple[str, int]] = []
        self._styles: dict[str, Style] = {}
        self._on_cursor: dict[str, Style] = {}
        self._styles_key: tuple | None = None
        self._header_key: tuple | None = None
        self._header: Strip | None = None
        self._header_styles: dict[str, Style] = {}
        self._layout: RowLayout | None = None
        self._prefiltered = False
        self._frame: Size | None = None   # the size, during one render_lines
        self._rendered_key: tuple | None = None   # the last render_lines: its inputs, its lines
        self._rendered: list[Strip] = []

    def show(self, rows: list[InstanceRow], sort_key: str, reverse: bool, query: str,
             empty_text: str) -> None:
        self.rows, self.sort_key, self.reverse, self.query = rows, sort_key, reverse, query
        self.empty_text = empty_text
        ids = [r.instance_id for r in rows]
        # the cursor follows its instance when the order changes
        self.cursor = ids.index(self._cursor_id) if self._cursor_id in ids else min(
            self.cursor, max(0, len(rows) - 1))
        self._select(ids[self.cursor] if ids else "")
        self._repaint()

    def _select(self, instance_id: str) -> None:
        if instance_id != self._cursor_id:
            self._cursor_id = instance_id
            self.post_message(self.Highlighted(instance_id))

    def _repaint(self) -> None:
        """Rebuild, then repaint only the lines that changed (unchanged rows keep their Strip).
        Only the rows on screen are built; the others are built when scrolled into view."""
        width, height = self.size.width, self.size.height
        top = self.top_row
        shown = self._shown   # what is on screen now, before this change
        before = [shown.get(0)] + [shown.get(top + y) for y in range(1, height)]
        self._version += 1
        if not width:
            return
        count = 1 + max(1, len(self.rows))
        if count != self._line_count:
            self._line_count = count
            self.refresh(layout=True)
            return
        new_top = self._top(height)
        if new_top != top:
            self.refresh()
            return
        after = self._window(width, top, height)
        changed = [y for y, (old, line) in enumerate(zip(before, after)) if old is not line]
        if changed:   # one region for every changed line: each refresh call has its own cost
            self.refresh(Region(0, changed[0], width, changed[-1] - changed[0] + 1))

    def history_width(self, width: int) -> int:
        return dict(layout(width)).get("history", 0)

    @property
    def selected(self) -> InstanceRow | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def _top(self, height: int) -> int:
        visible = max(1, height - 1)
        return max(0, self.cursor - visible + 1) if self.rows else 0

    def _prepare(self, width: int) -> None:
        """Start a new build when the data, width, theme or focus changed: the header, the
        resolved styles; rows are built on demand by ``_ensure``."""
        key = (width, self._version, self.app.theme, self.has_focus)
        if key == self._cache_key:
            return
        filters = tuple(self.get_line_filters())
        styles_key = (width, self.app.theme, self.has_focus, filters, self.background_colors[1])
        if styles_key != self._styles_key:   # a new theme, focus or filter: every style changes
            self._styles_key, self._row_strips, self._used = styles_key, {}, {}
            self._resolve_styles(width, filters, styles_key[-1])
        else:   # the strips of the last build's rows can be reused by unchanged rows
            self._row_strips, self._used = self._used, {}
        base = self._base_style
        header_key = (self.sort_key, self.reverse)
        if header_key != self._header_key:
            self._header_key, self._header = header_key, self._header_strip(width)
        shown = {0: self._header}
        if not self.rows:
            text = f"  no instance matches {self.query!r}" if self.query else f"  {self.empty_text}"
            shown[1] = (strip([(text[:width], self.style_of("fleet--muted"))])
                        .apply_style(base).adjust_cell_length(width, base))
        self._shown = shown
        self._cache_key = key

    def _resolve_styles(self, width: int, filters: tuple[LineFilter, ...],
                        background: Color) -> None:
        """What only the width, theme, focus and the app's line filters change: styles
        (resolving one walks the CSS) and the column layout with its cell formatters.

        The filters Textual applies to every line (ANSI to truecolor, monochrome, no colour,
        dim) each map a segment's style alone, so the rows are built in the filtered styles
        and are not filtered again, line after line, on every repaint."""
        base = self._base_style = self.rich_style
        self._header_styles = {name: self.style_of(f"fleet--{name}") for name in ("sorted", "header")}
        components = {name: self.style_of(f"fleet--{name}") for name in ("muted", "graph", "down")}
        cursor = self.style_of("fleet--cursor")
        styles = {name: base + style for name, style in components.items()} | {"plain": base}
        on_cursor = {name: base + cursor + style for name, style in components.items()} | {
            "plain": base + cursor}
        self._prefiltered = all(type(f) in STYLE_FILTERS for f in filters)
        if self._prefiltered and filters:
            styles, on_cursor = (_filtered(palette, filters, background)
                                 for palette in (styles, on_cursor))
        self._styles, self._on_cursor = styles, on_cursor
        self._columns = layout(width)
        self._layout = RowLayout(self._columns, width)
        self._header_key = None

    def _header_strip(self, width: int) -> Strip:
        header, spans, x = [], [], 0
        for key_, w in self._columns:
            style = "sorted" if key_ == self.sort_key else "header"
            header.append((header_cell(key_, w, key_ in RIGHT, self.sort_key, self.reverse) + " ",
                           self._header_styles[style]))
            spans.append((x, x + w, key_))
            x += w + 1
        self._header_spans = spans
        base = self._base_style
        return strip(header).apply_style(base).adjust_cell_length(width, base)

    def _ensure(self, width: int, start: int, stop: int) -> None:
        """Build the lines of rows ``start``..``stop`` not built yet (line = row index + 1),
        their braille histories in one vectorised pass."""
        self._prepare(width)
        shown, rows = self._shown, self.rows
        missing = [i for i in range(max(0, start), min(stop, len(rows))) if i + 1 not in shown]
        if not missing:
            return
        row_layout = self._layout
        graph_w = row_layout.graph_width
        sparks = spark_rows(fit_all([rows[i].history for i in missing], 2 * graph_w),
                            graph_w) if graph_w else [""] * len(missing)
        cache, used, cursor = self._row_strips, self._used, self.cursor
        built = [rows[i] for i in missing]
        for i, row, texts, spark in zip(missing, built, row_layout.texts(built), sparks):
            row_key = (texts, spark, row.up, i == cursor)
            line = used.get(row_key)
            if line is None:
                line = cache.get(row_key)
            if line is None:
                line = row_layout.strip(row_key[0], spark, row.up,
                                        self._on_cursor if i == cursor else self._styles)
            used[row_key] = line
            shown[i + 1] = line

    def _window(self, width: int, top: int, height: int) -> list[Strip | None]:
        """The lines on screen: the header, then the rows from ``top``."""
        self._ensure(width, top, top + height - 1)
        shown = self._shown
        return [shown.get(0)] + [shown.get(top + y) for y in range(1, height)]

    def lines_for(self, width: int) -> list[Strip]:
        """Every line, the header first (builds the rows not on screen too)."""
        self._ensure(width, 0, len(self.rows))
        shown = self._shown
        return [shown[i] for i in range(len(shown))]

    def render_lines(self, crop: Region) -> list[Strip]:
        # Textual asks line by line; the size (a region computation), the scroll position and
        # the rows on screen are settled once for all the lines of this render.
        self._frame = size = self._settle()
        try:
            if not self._plain_box():
                return super().render_lines(crop)
            # No border, padding, outline, tint or opacity: the lines are the row strips as
            # they are (each already exactly the width, in the widget's colours), so Textual's
            # per-line box styling, which would copy every strip, is skipped; the app's line
            # filters (colour conversion, dimming) still apply, and a strip that comes back
            # unchanged keeps its filtered copy.
            filters = tuple(self.get_line_filters())
            background = self.background_colors[1]
            # Textual's compositor renders every visible widget on any partial update (a new
            # header line too): the same lines as last time come back as they were
            key = (crop, self._cache_key, self.top_row, len(self._shown), filters, background)
            if key == self._rendered_key:
                return self._rendered
            rows_ready = self._prefiltered and bool(self.rows)   # rows: filtered styles
            shown, top, lines = self._shown, self.top_row, []
            for y in crop.line_range:
                line = shown.get(0 if y == 0 else y + top)
                if line is None:
                    line = Strip.blank(size.width, self._base_style)
                elif y and rows_ready:
                    lines.append(line)
                    continue
                for line_filter in filters:
                    line = line.apply_filter(line_filter, background)
                lines.append(line)
            if crop.column_span != (0, size.width):
                x1, x2 = crop.column_span
                lines = [line.crop(x1, x2) for line in lines]
            self._rendered_key, self._rendered = key, lines
            return lines
        finally:
            self._frame = None

    def _plain_box(self) -> bool:
        styles = self.styles
        return (not any(edge for edge, _ in styles.border) and
                not any(edge for edge, _ in styles.outline) and not any(styles.padding) and
                not styles.tint.a and self.opacity == 1.0 and styles.text_opacity == 1.0 and
                not (styles.has_rule("hatch") and styles.hatch != "none"))

    def _settle(self) -> Size:
        size = self.size
        self.top_row = top = self._top(size.height)
        self._ensure(size.width, top, top + max(1, size.height - 1))
        return size

    def render_line(self, y: int) -> Strip:
        # the header stays on line 0; the rows scroll under it to keep the cursor in view
        width = (self._frame or self._settle()).width
        line = self._shown.get(0 if y == 0 else y + self.top_row)
        return line if line is not None else Strip.blank(width, self._base_style)

    def action_cursor(self, step: int) -> None:
        if self.rows:
            self.cursor = min(max(self.cursor + step, 0), len(self.rows) - 1)
            self._select(self.rows[self.cursor].instance_id)
            self._repaint()

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
            self._select(self.rows[index].instance_id)
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


# Textual's line filters that map each segment's style alone (text and cells unchanged)
STYLE_FILTERS = (ANSIToTruecolor, Monochrome, NoColor, DimFilter)


def _filtered(palette: dict[str, Style], filters: tuple[LineFilter, ...],
              background: Color) -> dict[str, Style]:
    """Each style as the filters make it: run through them as a one-segment line."""
    out = {}
    for name, style in palette.items():
        line = Strip([Segment(" ", style)], 1)
        for line_filter in filters:
            line = line.apply_filter(line_filter, background)
        out[name] = next(iter(line)).style
    return out
