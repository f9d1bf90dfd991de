"""Vectorised JSON records: every event of a chunk has the same byte layout.

A record is a template of constant bytes and fields; within a chunk of records each field has a
fixed width (the widest value's in that chunk). Numbers are right-aligned behind spaces and
strings are padded with spaces after their closing quote: JSON allows whitespace between tokens,
so the output stays valid JSON while numpy fills one (records x width) byte matrix. Chunks are
encoded as they are consumed, so a million-event trace never sits in memory whole.

Why it is fast: chunks of a few thousand records keep the matrix in cache while every field is
stored into it as one strided column of fixed-size byte strings (numpy `V<k>` items); integers
are cut into 4-digit groups with one division each (numpy divides by a constant with a multiply)
and each group is looked up in a table of 10,000 ready-made 4-byte strings; constant bytes are
written once per layout, not once per chunk.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator

import numpy as np
import orjson

SPACE = 32
CHUNK_ROWS = 8192       # ~1.3 MB of 160-byte records: the chunk's matrix stays in L2/L3
GROUP = 10_000          # integers are converted four digits at a time


@dataclass(frozen=True, slots=True)
class Int:
    """An integer field."""
    values: np.ndarray


@dataclass(frozen=True, slots=True)
class Micros:
    """Integer nanoseconds written as microseconds with three decimals (Kineto's `ts`/`dur`)."""
    ns: np.ndarray


@dataclass(frozen=True, slots=True)
class Text:
    """A string field chosen per record from a small table by index."""
    index: np.ndarray
    table: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IntOf:
    """An integer field chosen per record from a small table by index: each table entry is
    formatted once and records copy it (cheaper than converting every record)."""
    index: np.ndarray
    table: np.ndarray


Field = Int | Micros | Text | IntOf


def _as_items(rows: np.ndarray) -> np.ndarray:
    """(n, k) uint8 rows as n byte strings of dtype V<k>."""
    rows = np.ascontiguousarray(rows, dtype=np.uint8)
    return rows.view(f"V{rows.shape[1]}").reshape(rows.shape[0])


@lru_cache(maxsize=None)
def _digit_table(width: int, pad: str, zero: bool) -> np.ndarray:
    """All `width`-digit numbers as V<width> strings: zero-padded (`pad="0"`) or right-aligned
    behind spaces (`pad=" "`); `zero=False` blanks the value 0 entirely (a group above the
    number's leading digit)."""
    values = np.arange(10 ** width, dtype=np.int64)
    scale = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    rows = (values[:, None] // scale[None, :]) % 10 + ord("0")
    if pad == " ":
        leading = values[:, None] < scale[None, :]
        leading[:, -1] = (values == 0) & (not zero)
        rows[leading] = SPACE
    return _as_items(rows)


@lru_cache(maxsize=None)
def _lower_group_table(lowest: bool) -> np.ndarray:
    """Index `g + GROUP * (nothing above)`: zero-padded when higher digits follow, otherwise
    right-aligned; an empty group above the leading digit is blank, except the lowest (a 0)."""
    return np.concatenate([_digit_table(4, "0", True), _digit_table(4, " ", lowest)])


@lru_cache(maxsize=None)
def _fraction_table() -> np.ndarray:
    """`.ddd` for 0..999: the decimal point and three decimals as one 4-byte string."""
    rows = np.zeros((1000, 4), np.int64)
    rows[:, 0] = ord(".")
    rows[:, 1:] = (np.arange(1000)[:, None] // np.array([100, 10, 1])) % 10 + ord("0")
    return _as_items(rows)


def _narrow(values: np.ndarray) -> np.ndarray:
    """uint32 when the values fit: numpy divides uint32 by a constant several times faster."""
    if values.size and int(values.max()) < 1 << 32:
        return values.astype(np.uint32, copy=False)
    return values.astype(np.int64, copy=False)


def _column(buf: np.ndarray, pos: int, width: int, rows: int) -> np.ndarray:
    """Column `pos:pos+width` of the first `rows` records as V<width> items (a strided view)."""
    return np.ndarray((rows,), dtype=f"V{width}", buffer=buf, offset=pos, strides=(buf.shape[1],))


def write_int(buf: np.ndarray, pos: int, values: np.ndarray, width: int) -> None:
    """Right-aligned decimal digits of non-negative `values` into columns `pos:pos+width` of
    `buf`'s first len(values) records, four digits per division, low group first."""
    v = _narrow(values)
    n = v.size
    end = pos + width
    while end - pos > 4:
        rest = v // GROUP
        group = v - rest * GROUP
        index = np.where(rest == 0, group + GROUP, group)
        _column(buf, end - 4, 4, n)[...] = np.take(_lower_group_table(end == pos + width), index)
        v, end = rest, end - 4
    top = _digit_table(end - pos, " ", end == pos + width)
    _column(buf, pos, end - pos, n)[...] = np.take(top, v)


def write_micros(buf: np.ndarray, pos: int, ns: np.ndarray, width: int) -> None:
    """Non-negative nanoseconds as `<micros>.ddd` into columns `pos:pos+width` (width includes
    `.ddd`)."""
    v = _narrow(ns)
    micros = v // 1000
    _column(buf, pos + width - 4, 4, v.size)[...] = np.take(_fraction_table(), v - micros * 1000)
    write_int(buf, pos, micros, width - 4)


def write_signed(write, buf: np.ndarray, pos: int, values: np.ndarray, width: int) -> None:
    """`write` (write_int or write_micros) for values of any sign: magnitudes one column to the
    right, then a minus in front of each negative value's leading digit (rare, so not fast)."""
    if values.size == 0 or int(values.min()) >= 0:
        write(buf, pos, values, width)
        return
    buf[: values.size, pos] = SPACE            # may hold a sign from the previous chunk
    write(buf, pos + 1, np.abs(values.astype(np.int64)), width - 1)
    neg = np.flatnonzero(values < 0)
    first_digit = np.argmax(buf[neg, pos + 1: pos + width] != SPACE, axis=1)
    buf[neg, pos + first_digit] = ord("-")


class _Choices:
    """A Text or IntOf table as a byte matrix (strings padded after, numbers right-aligned) and
    each entry's length, so a chunk uses the width of the longest entry it actually picks."""

    def __init__(self, part: Text | IntOf):
        if isinstance(part, Text):
            encoded = [orjson.dumps(t) for t in part.table]
        else:
            encoded = [str(int(v)).encode() for v in np.asarray(part.table).tolist()]
        self.left = isinstance(part, Text)
        self.lengths = np.array([len(e) for e in encoded] or [1], dtype=np.int64)
        width = int(self.lengths.max())
        padded = b"".join(e.ljust(width) if self.left else e.rjust(width) for e in encoded)
        self.matrix = np.frombuffer(padded, dtype=np.uint8).reshape(len(encoded), width)
        self.by_width: dict[int, np.ndarray] = {}

    def width(self, index: np.ndarray) -> int:
        return int(np.take(self.lengths, index).max()) if index.size else 1

    def items(self, width: int) -> np.ndarray:
        if width not in self.by_width:
            full = self.matrix.shape[1]
            cols = self.matrix[:, :width] if self.left else self.matrix[:, full - width:]
            self.by_width[width] = _as_items(cols)
        return self.by_width[width]


def _width(part: Field, values: np.ndarray, choices: dict[int, _Choices]) -> int:
    """Columns the chunk's widest value needs (a minus sign included)."""
    if id(part) in choices:
        return choices[id(part)].width(values)
    low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
    top = max(high, -low)
    if isinstance(part, Micros):
        return len(str(top // 1000)) + 4 + (low < 0)
    return len(str(top)) + (low < 0)


def _chunk(part: bytes | Field, lo: int, hi: int) -> np.ndarray | None:
    if isinstance(part, Int):
        return part.values[lo:hi]
    if isinstance(part, Micros):
        return part.ns[lo:hi]
    return None if isinstance(part, bytes) else part.index[lo:hi]


class _Records:
    """One chunk's record matrix: field positions for the current widths, constant bytes
    written only when the widths change (the memory is reused across chunks)."""

    def __init__(self, rows: int):
        self.rows = rows
        self.memory = np.empty(0, dtype=np.uint8)
        self.widths: list[int] | None = None

    def lay_out(self, parts: list, widths: list[int]) -> np.ndarray:
        if widths != self.widths:
            template = bytearray()
            self.positions = []
            for part, w in zip(parts, widths):
                self.positions.append(len(template))
                template += part if isinstance(part, bytes) else b" " * w
            if self.memory.size < self.rows * len(template):
                self.memory = np.empty(self.rows * len(template), dtype=np.uint8)
            self.buf = self.memory[: self.rows * len(template)].reshape(self.rows, len(template))
            self.buf[:] = np.frombuffer(bytes(template), dtype=np.uint8)
            self.widths = widths
        return self.buf


def iter_records(parts: list[bytes | Field], n: int, rows: int | None = None) -> Iterator[bytes]:
    """`n` records laid out as `parts` (constant bytes or fields), as chunks of `rows` records
    (CHUNK_ROWS by default). A field object given twice is converted once and copied."""
    rows = rows or CHUNK_ROWS
    choices = {id(p): _Choices(p) for p in parts if isinstance(p, (Text, IntOf))}
    records = _Records(min(rows, n))
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)
        values = [_chunk(p, lo, hi) for p in parts]
        widths = [len(p) if isinstance(p, bytes) else _width(p, v, choices)
                  for p, v in zip(parts, values)]
        buf = records.lay_out(parts, widths)
        _fill(buf, records.positions, parts, values, widths, choices)
        yield buf[: hi - lo].tobytes()


def _fill(buf: np.ndarray, positions: list[int], parts: list, values: list, widths: list[int],
          choices: dict[int, _Choices]) -> None:
    done: dict[int, int] = {}
    for part, v, w, pos in zip(parts, values, widths, positions):
        if isinstance(part, bytes):
            continue
        m = v.size
        if id(part) in done:
            _column(buf, pos, w, m)[...] = _column(buf, done[id(part)], w, m)
        elif id(part) in choices:
            _column(buf, pos, w, m)[...] = np.take(choices[id(part)].items(w), v)
        else:
            write_signed(write_int if isinstance(part, Int) else write_micros, buf, pos, v, w)
        done[id(part)] = pos


def encode_records(parts: list[bytes | Field], n: int) -> bytes:
    """Concatenate `n` records laid out as `parts` (constant bytes or fields)."""
    return b"".join(iter_records(parts, n))

