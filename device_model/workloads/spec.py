"""Workload specs on the command line: `NAME[:key=value,...]`, validated against a schema."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import SpecError, did_you_mean


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    parse: Callable[[str], Any]
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] | None = None


_DIGITS = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")
MAX_SIZE = 1 << 50        # 1 PiB: a buffer or count beyond this is a typo, not a workload
MAX_INT = 1 << 40


def parse_size(text: str) -> int:
    """Integers with optional binary suffixes: 512, 4K, 16M, 1G (KiB/MiB/GiB), at most 1 PiB."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = 1
    if t and t[-1] in units:
        scale, t = units[t[-1]], t[:-1]
    if not _DECIMAL.fullmatch(t):      # what float() also takes: "1_000", "+5", "1e3", "inf"
        raise ValueError(text)
    value = float(t)
    if not 0 < value * scale <= MAX_SIZE or value * scale != int(value * scale):  # also inf, nan
        raise ValueError(text)
    return int(value * scale)


def parse_int(text: str) -> int:
    if not _DIGITS.fullmatch(text.strip()):     # int() also takes "1_000", "+5", "٣"
        raise ValueError(text)
    value = int(text)
    if not 0 < value <= MAX_INT:
        raise ValueError(text)
    return value


def split_spec(spec: str) -> tuple[str, dict[str, str]]:
    name, _, rest = spec.strip().partition(":")
    if not name:
        raise SpecError(f"empty workload spec {spec!r}; expected NAME[:key=value,...]")
    pairs: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not key or not value:
            raise SpecError(f"workload option {item!r} is not key=value")
        if key in pairs:          # stripped first: "m=1,m =2" names m twice too
            raise SpecError(f"workload option {key!r} given twice")
        pairs[key] = value
    return name.strip().lower(), pairs


def _expected(p: Param) -> str:
    """What a bad value should have been: the option's help and, for counts and sizes, that
    they are whole and positive (seq=0 said only "at most 1,099,511,627,776")."""
    what = p.help or "a positive number"
    if p.parse is parse_int:
        return f"{what}: a whole number from 1 to {MAX_INT:,}"
    if p.parse is parse_size:
        return f"{what}: a whole number of bytes from 1 to {MAX_SIZE:,}; 1.5K is 1,536"
    return what


def bind(workload: str, raw: dict[str, str], params: tuple[Param, ...]) -> dict[str, Any]:
    """Typed options with defaults; unknown keys and bad values name the key and what is allowed."""
    by_name = {p.name: p for p in params}
    out = {p.name: p.default for p in params}
    for key, text in raw.items():
        p = by_name.get(key)
        if p is None:
            raise SpecError(f"unknown option {key!r} for workload {workload!r}; "
                            f"{did_you_mean(key, by_name)}allowed: {', '.join(by_name)}")
        if p.choices is not None and text.lower() not in p.choices:
            raise SpecError(f"{workload}: {key}={text!r} not allowed; allowed: {', '.join(p.choices)}")
        try:
            out[key] = p.parse(text.lower() if p.choices else text)
        except (ValueError, TypeError, OverflowError):
            raise SpecError(f"{workload}: bad value {key}={text!r} "
                            f"({_expected(p)})") from None
    missing = [p.name for p in params if out[p.name] is None]
    if missing:
        raise SpecError(f"workload {workload!r} needs {', '.join(missing)}")
    return out
