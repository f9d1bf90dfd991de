"""The fleet table's rows as text and strips: the cell texts of a layout's columns, compiled
once per layout (memos for what an instance is, one loop per column for what it does), the
braille histories of every row in one numpy pass, and a row's few segments."""
from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter, itemgetter

import numpy as np
from rich.segment import Segment
from textual.strip import Strip

from monitor.fleet import InstanceRow
from tui.braille import _LEFT, _RIGHT  # the braille dot tables, shared
from tui.fleet_view import CELL_TEXT, COLUMNS, VALUE_TEXT
from tui.widgets.base import LeanStrip

RIGHT = {key for key, _, _, right, _ in COLUMNS if right}


def fit_all(histories: list[np.ndarray], points: int) -> np.ndarray:
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


class RowLayout:
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
