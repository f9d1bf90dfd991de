"""The fleet screen's widgets: the totals header and the instance table (line API)."""
from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter, itemgetter

import numpy as np
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip

from monitor.fleet import InstanceRow
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import ANSIToTruecolor, DimFilter, LineFilter, Monochrome, NoColor
from textual.geometry import Region, Size

from tui.braille import _LEFT, _RIGHT  # the braille dot tables, shared
from tui.fleet_view import CELL_TEXT, COLUMNS, VALUE_TEXT, header_cell, layout
from tui.widgets.base import LeanStrip, LineWidget, strip

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
        if self.banner:
            lines.append(strip([(f" {self.banner}"[:width].ljust(width), styles["banner"])]))
        for note in self.notes[:3]:
            lines.append(strip([(f" {note}"[:width], styles["note"])]))
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
        self._layout: _RowLayout | None = None
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
        self._layout = _RowLayout(self._columns, width)
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
        sparks = spark_rows(_fit_all([rows[i].history for i in missing], 2 * graph_w),
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


def _fit_all(histories: list[np.ndarray], points: int) -> np.ndarray:
    """The newest ``points`` samples of every history, NaN-padded on the left (no reading =
    no dots), one row each, in one block."""
    if points and histories and all(h.size >= points for h in histories):
        return np.stack([h[-points:] for h in histories])   # the usual case: one copy
    out = np.full((len(histories), points), np.nan)
    if points:
        for row, history in zip(out, histories):
            recent = history[-points:]
            if recent.size:
                row[points - recent.size:] = recent
    return out


def spark_rows(histories: np.ndarray, width: int) -> list[str]:
    """One line of braille per row of ``histories`` (ratios, 2 samples per cell), all rows in
    one vectorised pass: the same drawing as tui.braille.braille_rows at height 1."""
    if width <= 0 or histories.size == 0:
        return [""] * len(histories)
    values = np.fmax(histories, 0.0)   # no reading (NaN) and below zero: no dots
    levels = np.rint(np.minimum(values, 1.0) * 4).astype(np.int32)
    levels[(levels == 0) & (values > 0)] = 1
    codes = (_LEFT[levels[:, 0::2]] | _RIGHT[levels[:, 1::2]]) + 0x2800
    # each row's code points read as one fixed-width numpy string: every line in one step
    return np.ascontiguousarray(codes, dtype="<u4").view(f"<U{width}").ravel().tolist()


class _RowLayout:
    """One layout's columns compiled once: a function per cell that gives its text already
    padded to the column (a memo for the cells that hold what an instance is, not what it
    does), and where the coloured cells (state, graph) split the row into segments."""

    def __init__(self, columns: list[tuple[str, int]], width: int) -> None:
        self.width = width
        self.graph_width = dict(columns).get("history", 0)
        cells = [(key, w) for key, w in columns if key != "history"]
        keys = [key for key, _ in cells]
        # what an instance is (id, type, AZ, cores, state, runtimes) is formatted once per
        # instance and state, in one memo; what it does is formatted every time
        fixed = [i for i, key in enumerate(keys) if key in STATIC]
        moving = [i for i, key in enumerate(keys) if key not in STATIC]
        self.fixed_fns = [_cell(*cells[i]) for i in fixed]
        self.moving_columns = [_by_value(*cells[i]) if keys[i] in VALUE_TEXT else
                               _each(_cell(*cells[i])) for i in moving]
        self.memo: dict[tuple, tuple[str, ...]] = {}
        where = {cell: n for n, cell in enumerate(fixed + moving)}
        order = [where[i] for i in range(len(keys))]
        self.reorder = itemgetter(*order) if len(order) > 1 else (lambda texts: texts)
        self.graph = "history" in dict(columns)
        # the cells left of the graph (all of them without one), and where the state cell is
        self.split = [key for key, _ in columns].index("history") if self.graph else len(keys)
        self.state_at = keys.index("state") if "state" in keys else -1
        # every cell is its column's width and a space: whether a row fits without cutting,
        # and the blank that fills it to the width
        used = sum(w + 1 for _, w in columns)
        self.fits = used <= width and all(w > 0 for _, w in cells[:self.split])
        self.pad = " " * (width - used) if self.fits else ""

    def texts(self, rows: list[InstanceRow]) -> list[tuple[str, ...]]:
        """Every cell but the graph of each row, in column order, each padded and followed by
        a space. Column by column: one loop per column instead of a call per cell."""
        memo, fixed_fns, fixed_rows = self.memo, self.fixed_fns, []
        for identity, row in zip(map(_IDENTITY, rows), rows):
            fixed = memo.get(identity)
            if fixed is None:
                if len(memo) > 65536:   # bounded: a fleet's churn cannot grow it for ever
                    memo.clear()
                fixed = memo[identity] = tuple([fn(row) for fn in fixed_fns])
            fixed_rows.append(fixed)
        reorder = self.reorder
        moving = zip(*[column(rows) for column in self.moving_columns])
        return [reorder(fixed + cells) for fixed, cells in zip(fixed_rows, moving)]

    def strip(self, texts: tuple[str, ...], spark: str, up: bool, styles: dict) -> Strip:
        """One row as few segments (plain cells run together; state and graph carry their
        colours), the base style already in, exactly ``width`` cells: every character here is
        one cell wide."""
        split, join = self.split, "".join
        if up and self.graph and self.fits:   # the usual row: three parts, no cutting
            plain = styles["plain"]
            segments = [Segment(join(texts[:split]), plain),
                        Segment(spark + " ", styles["graph"])]
            tail = join(texts[split:]) + self.pad
            if tail:
                segments.append(Segment(tail, plain))
            return LeanStrip(segments, self.width)
        if up:
            plain = styles["plain"]
            parts = [(join(texts[:split]), plain)]
            if self.graph:
                parts.append((spark + " ", styles["graph"]))
        else:
            muted, at = styles["muted"], self.state_at
            if 0 <= at < split:
                parts = [(join(texts[:at]), muted), (texts[at], styles["down"]),
                         (join(texts[at + 1:split]), muted)]
            else:
                parts = [(join(texts[:split]), muted)]
            if self.graph:
                parts.append((spark + " ", muted))
        parts.append((join(texts[split:]), styles["plain"] if up else styles["muted"]))
        segments, left = [], self.width
        for text, style in parts:
            if text and left > 0:
                if len(text) > left:
                    text = text[:left]
                segments.append(Segment(text, style))
                left -= len(text)
        if left > 0:
            segments.append(Segment(" " * left, styles["plain"]))
        return LeanStrip(segments, self.width)


# Cells that hold what an instance is, not what it does: the same text refresh after refresh,
# so their text is looked up by the fields it is made of instead of formatted again.
STATIC = {"instance_id": ("instance_id",), "instance_type": ("instance_type",), "zone": ("zone",),
          "cores": ("devices", "cores"), "tags": ("tags", "up"), "state": ("up", "since")}
_IDENTITY = attrgetter(*sorted({name for fields in STATIC.values() for name in fields}))


def _by_value(key: str, width: int) -> Callable[[list[InstanceRow]], list[str]]:
    """A numeric column's padded texts for many rows, each formatted once per value read."""
    fields, text_of = VALUE_TEXT[key]
    read, several = attrgetter(*fields), len(fields) > 1
    right = key in RIGHT
    memo: dict = {}

    def texts(rows: list[InstanceRow]) -> list[str]:
        out = []
        for value in map(read, rows):
            # 0.0 and -0.0 are one key but print differently
            key_ = repr(value) if (0 in value if several else not value) else value
            found = memo.get(key_)
            if found is None:
                if len(memo) > 4096:   # bounded: readings that keep moving cannot grow it
                    memo.clear()
                found = memo[key_] = _pad(text_of(value), width, right)
            out.append(found)
        return out
    return texts


def _each(cell: Callable[[InstanceRow], str]) -> Callable[[list[InstanceRow]], list[str]]:
    return lambda rows: [cell(row) for row in rows]


def _cell(key: str, width: int) -> Callable[[InstanceRow], str]:
    text_of, right = CELL_TEXT[key], key in RIGHT
    return lambda row: _pad(text_of(row), width, right)


def _pad(text: str, width: int, right: bool) -> str:
    """A cell's text fitted to ``width`` (right-aligned columns cut, others get an ellipsis),
    and the space that separates it from the next column."""
    if right:
        return text[:width].rjust(width) + " "
    return (text if len(text) <= width else text[:width - 1] + "…").ljust(width) + " "
