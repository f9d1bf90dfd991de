"""Vectorised JSON records: every event of a batch has the same byte layout.

A record is a template of constant bytes and fields; each field has a fixed width for the whole
batch (the widest value's). Numbers are right-aligned behind spaces and strings are padded with
spaces after their closing quote: JSON allows whitespace between tokens, so the output stays valid
JSON while numpy fills one (events x width) byte matrix column block by column block.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

SPACE, ZERO = 32, 48


@dataclass(frozen=True, slots=True)
class Int:
    """A non-negative integer field."""
    values: np.ndarray


@dataclass(frozen=True, slots=True)
class Micros:
    """Nanoseconds written as microseconds with three decimals (Kineto's `ts`/`dur`)."""
    ns: np.ndarray


@dataclass(frozen=True, slots=True)
class Text:
    """A string field chosen per record from a small table by index."""
    index: np.ndarray
    table: tuple[str, ...]


Field = Int | Micros | Text


def _digits_needed(values: np.ndarray) -> int:
    top = int(values.max()) if values.size else 0
    return max(1, len(str(top)))


_PAIRS = np.array([[ZERO + i // 10, ZERO + i % 10] for i in range(100)], dtype=np.uint8)
_POW10 = 10 ** np.arange(19, dtype=np.int64)


def write_int(out: np.ndarray, values: np.ndarray, width: int) -> None:
    """Right-aligned decimal digits of `values` into the (n, width) view `out`, two digits per
    division (int64 division is the cost), leading zeros blanked in one masked store."""
    v = values.astype(np.int64, copy=True)
    digits = np.maximum(np.searchsorted(_POW10, v, side="right"), 1)
    k = width
    while k >= 2:
        v, r = np.divmod(v, 100)
        out[:, k - 2: k] = _PAIRS[r]
        k -= 2
    if k == 1:
        out[:, 0] = ZERO + v % 10
    blank = np.arange(width)[None, :] < (width - digits)[:, None]
    out[blank] = SPACE


def _text_matrix(table: tuple[str, ...]) -> tuple[np.ndarray, int]:
    encoded = [orjson.dumps(t) for t in table]
    width = max(len(e) for e in encoded)
    mat = np.full((len(encoded), width), SPACE, dtype=np.uint8)
    for i, e in enumerate(encoded):
        mat[i, : len(e)] = np.frombuffer(e, dtype=np.uint8)
    return mat, width


def encode_records(parts: list[bytes | Field], n: int) -> bytes:
    """Concatenate `n` records laid out as `parts` (constant bytes or fields)."""
    if n == 0:
        return b""
    plan = []
    width = 0
    for part in parts:
        if isinstance(part, bytes):
            plan.append((width, part, None))
            width += len(part)
        elif isinstance(part, Int):
            w = _digits_needed(part.values)
            plan.append((width, part, w))
            width += w
        elif isinstance(part, Micros):
            w = _digits_needed(part.ns // 1000)
            plan.append((width, part, w))
            width += w + 4
        else:
            mat, w = _text_matrix(part.table)
            plan.append((width, part, (mat, w)))
            width += w
    buf = np.empty((n, width), dtype=np.uint8)
    for pos, part, w in plan:
        if isinstance(part, bytes):
            buf[:, pos: pos + len(part)] = np.frombuffer(part, dtype=np.uint8)
        elif isinstance(part, Int):
            write_int(buf[:, pos: pos + w], part.values, w)
        elif isinstance(part, Micros):
            ns = part.ns.astype(np.int64)
            write_int(buf[:, pos: pos + w], ns // 1000, w)
            buf[:, pos + w] = ord(".")
            frac = buf[:, pos + w + 1: pos + w + 4]
            rem = ns % 1000
            frac[:, 0] = ZERO + rem // 100
            frac[:, 1] = ZERO + (rem // 10) % 10
            frac[:, 2] = ZERO + rem % 10
        else:
            mat, tw = w
            buf[:, pos: pos + tw] = mat[part.index]
    return buf.tobytes()
