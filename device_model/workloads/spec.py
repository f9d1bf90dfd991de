"""Workload specs on the command line: `NAME[:key=value,...]`, validated against a schema."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import SpecError


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    parse: Callable[[str], Any]
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] | None = None


def parse_size(text: str) -> int:
    """Integers with optional binary suffixes: 512, 4K, 16M, 1G (KiB/MiB/GiB)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = 1
    if t and t[-1] in units:
        scale, t = units[t[-1]], t[:-1]
    value = float(t)
    if value <= 0 or value * scale != int(value * scale):
        raise ValueError(text)
    return int(value * scale)


def parse_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(text)
    return value


def split_spec(spec: str) -> tuple[str, dict[str, str]]:
    name, _, rest = spec.strip().partition(":")
    if not name:
        raise SpecError(f"empty workload spec {spec!r}; expected NAME[:key=value,...]")
    pairs: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise SpecError(f"workload option {item!r} is not key=value")
        if key in pairs:
            raise SpecError(f"workload option {key!r} given twice")
        pairs[key.strip()] = value.strip()
    return name.strip().lower(), pairs


def bind(workload: str, raw: dict[str, str], params: tuple[Param, ...]) -> dict[str, Any]:
    """Typed options with defaults; unknown keys and bad values name the key and what is allowed."""
    by_name = {p.name: p for p in params}
    out = {p.name: p.default for p in params}
    for key, text in raw.items():
        p = by_name.get(key)
        if p is None:
            raise SpecError(f"unknown option {key!r} for workload {workload!r}; allowed: "
                            f"{', '.join(by_name)}")
        if p.choices is not None and text.lower() not in p.choices:
            raise SpecError(f"{workload}: {key}={text!r} not allowed; allowed: {', '.join(p.choices)}")
        try:
            out[key] = p.parse(text.lower() if p.choices else text)
        except (ValueError, TypeError):
            raise SpecError(f"{workload}: bad value {key}={text!r} ({p.help or 'positive number'})") from None
    missing = [p.name for p in params if out[p.name] is None]
    if missing:
        raise SpecError(f"workload {workload!r} needs {', '.join(missing)}")
    return out
