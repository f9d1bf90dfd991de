"""Typed readers for JSON fields: each validates one value and names its path on failure.

Used by report.py and its group modules (report_runtime.py, report_memory.py, report_system.py).
Every failure raises ReportError with a one-line ``<path>: <problem>`` message.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NoReturn

import orjson

from monitor.errors import ReportError

_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1  # orjson writes integers up to u64; larger would fail at serialisation


def fail(path: str, problem: str) -> NoReturn:
    raise ReportError(f"{path}: {problem}")


# Optional fields with a wrong value are dropped, not fatal: each drop is noted here so the
# Report can say what it left out (Report.dropped). One list per document being parsed.
_DROPPED: ContextVar[list[str] | None] = ContextVar("dropped_fields", default=None)


@contextmanager
def collecting_drops() -> Iterator[list[str]]:
    notes: list[str] = []
    token = _DROPPED.set(notes)
    try:
        yield notes
    finally:
        _DROPPED.reset(token)


def note_dropped(message: str) -> None:
    notes = _DROPPED.get()
    if notes is not None and len(notes) < 64:  # enough to explain; bounded for hostile input
        notes.append(message)


def optional(parse: Callable[..., Any], value: Any, path: str, group: bool = False) -> Any:
    """An optional field: None when absent (missing or JSON null); a value that does not parse
    is dropped (None) and noted, so the rest of the report survives. Absent is never zero.
    With ``group``, ``value`` is a whole metric group, dropped when it lacks what it needs."""
    if value is None:
        return None
    try:
        return parse(value, path)
    except ReportError as exc:
        note_dropped(f"{exc} (group {path.rsplit('.', 1)[-1]} ignored)" if group else str(exc))
        return None


def lenient_map(value: Any, path: str, parse: Callable[[Any, str], Any]) -> dict[str, Any]:
    """A required object whose entries are each optional: a bad entry is dropped and noted."""
    out = {}
    for k, v in obj(value, path).items():
        parsed = optional(parse, v, f"{path}.{k}")
        if parsed is not None:
            out[k] = parsed
    return out


def kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


def obj(value: Any, path: str) -> dict:
    if type(value) is not dict:
        fail(path, "missing" if value is None else f"expected object, got {kind(value)}")
    return value


def array(value: Any, path: str) -> list:
    if type(value) is not list:
        fail(path, "missing" if value is None else f"expected array, got {kind(value)}")
    return value


def text(value: Any, path: str) -> str:
    if type(value) is not str:
        fail(path, "missing" if value is None else f"expected string, got {kind(value)}")
    return value


def boolean(value: Any, path: str) -> bool:
    if type(value) is not bool:
        fail(path, "missing" if value is None else f"expected boolean, got {kind(value)}")
    return value


def known_groups(d: dict, table: dict[str, tuple[str, Callable[[Any, str], Any]]],
                 path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A report object's metric groups: those `table` knows (JSON key -> (attribute, parser)),
    parsed and by attribute, and the others verbatim by key. A known group its parser cannot
    read is dropped and noted; the object holding it is kept."""
    groups: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in d.items():
        known = table.get(key)
        if known is None:
            extra[key] = verbatim(value, f"{path}.{key}")
        else:
            group = optional(known[1], value, f"{path}.{key}", group=True)
            if group is not None:
                groups[known[0]] = group
    return groups, extra


def num(value: Any, path: str) -> float:
    """Any finite JSON number, as given (ints stay ints so they can be written back as ints)."""
    t = type(value)
    if t is float:
        if not math.isfinite(value):
            fail(path, "expected a finite number")
        return value
    if t is int:
        if not _I64_MIN <= value <= _U64_MAX:
            fail(path, "integer out of 64-bit range")
        return value
    fail(path, "missing" if value is None else f"expected number, got {kind(value)}")


def nonneg(value: Any, path: str) -> float:
    n = num(value, path)
    if n < 0:
        fail(path, f"expected a non-negative number, got {n!r}")
    return float(n)


def count(value: Any, path: str) -> int:
    """A non-negative integer; integral floats (1.0) are accepted and become ints."""
    t, given = type(value), value
    if t is float and value.is_integer():
        value = int(value)
    elif t is not int:
        fail(path, "missing" if value is None else f"expected integer, got {kind(value)}")
    if not 0 <= value <= _U64_MAX:       # as written: 1e300 is not echoed as 301 digits
        fail(path, f"expected a non-negative 64-bit integer, got {given!r}")
    return value


def pct(value: Any, path: str) -> float:
    """A JSON percentage (>= 0) as a ratio. Values above 100 are kept: consumers clamp."""
    return nonneg(value, path) / 100.0


def pct_out(ratio: float) -> float:
    """A ratio back as the JSON percentage it was read from. ``ratio * 100`` is not always that
    number (55.0 / 100 * 100 is 55.00000000000001), so the product is rounded to 15 significant
    digits, which any float holds exactly, and kept when it reads back as the same ratio; a
    ratio no such decimal gives back (one computed, not read) is written as the product."""
    value = ratio * 100.0
    short = float(f"{value:.15g}")
    return short if short / 100.0 == ratio else value


def index(key: str, path: str) -> int:
    """A JSON object key holding a core/device/vCPU index ("0", "12")."""
    if not (type(key) is str and key.isascii() and key.isdigit() and len(key) <= 9):
        fail(f"{path}.{key}", "expected a non-negative integer index as key")
    return int(key)


def count_map(value: Any, path: str) -> dict[str, int]:
    """Counts by name; a count that is not one is dropped (the others are kept)."""
    return lenient_map(value, path, count)


def pct_map(value: Any, path: str) -> dict[str, float]:
    return lenient_map(value, path, pct)


def error_text(value: Any, path: str) -> str:
    """A group's or runtime's ``error``: "" when absent; a non-string is still an error."""
    if value is None:
        return ""
    if type(value) is str:
        return value
    note_dropped(f"{path}: expected string, got {kind(value)}")
    return f"(malformed error field: {kind(value)})"


def group_head(value: Any, path: str) -> tuple[float | None, str, dict]:
    """Every metric group has ``period`` (seconds) and ``error`` ("" when OK); AWS's exporter
    reads neither, so a missing or bad period is None (unknown), never 0."""
    d = obj(value, path)
    error = error_text(d.get("error"), path + ".error")
    return optional(nonneg, d.get("period"), path + ".period"), error, d


def group_out(period: float | None, error: str, **body: Any) -> dict:
    head: dict[str, Any] = {} if period is None else {"period": float(period)}
    return {**head, "error": error, **body}


def without_none(d: dict) -> dict:
    """`d` without the keys whose value is None (absent fields stay absent when written)."""
    return {k: v for k, v in d.items() if v is not None}


def indexed(d: dict, key: str, path: str, error: str,
            parse: Callable[[Any, str], Any], lenient: bool = False) -> dict[int, Any]:
    """``{"0": {...}, "1": {...}}`` -> ``{0: parsed, 1: parsed}``; absent is allowed on error.
    ``lenient``: an entry that does not parse is dropped and noted, the others kept."""
    value = d.get(key)
    if value is None and error:
        return {}
    sub = f"{path}.{key}"
    read = _entry(parse) if lenient else parse
    out = {index(k, sub): read(v, f"{sub}.{k}") for k, v in obj(value, sub).items()}
    return {k: v for k, v in out.items() if v is not None} if lenient else out


def _entry(parse: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """`parse` for one entry of a list (a core, a device): None, noted, where it fails, so that
    one bad value costs that entry and not the group's others."""
    def read(value: Any, path: str) -> Any:
        try:
            return parse(value, path)
        except ReportError as exc:
            note_dropped(f"{exc} (that entry ignored)")
            return None
    return read


def indexed_out(items: dict) -> dict:
    return {str(k): v.dump() for k, v in items.items()}


def counts(d: dict, key: str, path: str, error: str) -> dict[str, int]:
    value = d.get(key)
    if value is None and error:
        return {}
    return count_map(value, f"{path}.{key}")


def optional_array(d: dict, key: str, path: str, parse: Callable[[Any, str], Any],
                   lenient: bool = False) -> tuple | None:
    """An array that may be JSON null (``neuron_devices: null`` without a Neuron driver);
    ``lenient`` as for `indexed`."""
    value = d.get(key)
    if value is None:
        return None
    sub = f"{path}.{key}"
    read = _entry(parse) if lenient else parse
    out = tuple(read(v, f"{sub}[{i}]") for i, v in enumerate(array(value, sub)))
    return tuple(v for v in out if v is not None) if lenient else out


def verbatim(value: Any, path: str) -> Any:
    """A group kept as is (unknown or k8s): it must at least be writable back as JSON."""
    try:
        orjson.dumps(value)
    except TypeError as exc:
        fail(path, f"not representable as JSON ({exc})")
    return value


def int_if_whole(value: float) -> float | int:
    """AWS writes flops as integers; keep that unless the value has a fraction."""
    if type(value) is int:
        return value
    if value.is_integer() and abs(value) <= _U64_MAX:
        return int(value)
    return value
