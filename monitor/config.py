"""neuron-monitor configuration: which metric groups to collect, for which runtimes, how often.

The file format is AWS's (docs/report.md, neuron-tools.md §1.1)::

    {"period": "1s",
     "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": "neuroncore_counters"}]}],
     "system_metrics": [{"type": "vcpu_usage"}, {"period": "2s", "type": "neuron_hw_counters"}]}

``period`` may appear on the root, on each ``neuron_runtimes[]`` entry and on each metric, and is
inherited downward. Periods are ``<number><unit>`` with unit ``s`` or ``m`` as AWS documents, plus
``ms`` as a neuronscope extension. No configuration at all means every group every 5 s for every
runtime, like neuron-monitor started without ``-c``.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from monitor.errors import ConfigError, not_utf8
from monitor.vocab import RENAMED_GROUPS as _RENAMED
from monitor.vocab import RUNTIME_GROUPS, SYSTEM_GROUPS

__all__ = ["ConfigError", "MonitorConfig", "RuntimeSelector", "RUNTIME_GROUPS", "SYSTEM_GROUPS",
           "DEFAULT_PERIOD", "parse_period", "due_groups", "next_due"]

DEFAULT_PERIOD = 5.0
MAX_PERIOD = 86_400.0  # a day; anything longer is almost certainly a unit mistake
MIN_PERIOD = 0.01      # 10 ms: a shorter tick would only burn CPU (runtimes publish every 0.1 s)
MAX_CONFIG_BYTES = 1 << 20
_PERIOD = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m)")  # ASCII digits only, as AWS's parser
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0}


def parse_period(value: Any, path: str = "period") -> float:
    """``"1s"`` -> 1.0, ``"2m"`` -> 120.0, ``"500ms"`` -> 0.5 (seconds)."""
    if type(value) is not str:
        raise ConfigError(f"{path}: expected a string like \"1s\", \"2m\" or \"500ms\", "
                          f"got {_kind(value)}")
    match = _PERIOD.fullmatch(value.strip(" \t"))
    if match is None:
        raise ConfigError(f"{path}: {value!r} is not a period (<number><s|m|ms>, e.g. \"5s\")")
    seconds = float(match[1]) * _UNIT_SECONDS[match[2]]
    if not MIN_PERIOD <= seconds <= MAX_PERIOD:
        raise ConfigError(f"{path}: {value!r} must be at least 10ms and at most 24 hours")
    return seconds


def format_period(seconds: float) -> str:
    ms = round(seconds * 1000)
    if ms % 60_000 == 0:
        return f"{ms // 60_000}m"
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


@dataclass(frozen=True, slots=True)
class RuntimeSelector:
    """One ``neuron_runtimes[]`` entry: runtimes whose tag matches get these groups."""
    tag_filter: re.Pattern[str] | None
    groups: Mapping[str, float]  # group -> period in seconds
    period: float = DEFAULT_PERIOD

    def matches(self, tag: str) -> bool:
        # Unanchored, like grep: "train" selects "train_7b"; anchor with ^...$ for exact tags.
        return self.tag_filter is None or self.tag_filter.search(tag) is not None


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    period: float = DEFAULT_PERIOD
    runtimes: tuple[RuntimeSelector, ...] = ()
    system_groups: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def default(cls) -> MonitorConfig:
        every = dict.fromkeys(RUNTIME_GROUPS, DEFAULT_PERIOD)
        return cls(DEFAULT_PERIOD, (RuntimeSelector(None, every),),
                   dict.fromkeys(SYSTEM_GROUPS, DEFAULT_PERIOD))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> MonitorConfig:
        try:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{os.fspath(path)}: cannot read config ({exc.strerror})") from None
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{os.fspath(path)}: config is larger than 1 MiB")
        problem = not_utf8(raw)
        if problem:
            raise ConfigError(f"{os.fspath(path)}: {problem}")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{os.fspath(path)}: not valid JSON ({exc})") from None
        try:
            return cls.from_dict(data)
        except ConfigError as exc:
            raise ConfigError(f"{os.fspath(path)}: {exc}") from None

    @classmethod
    def from_dict(cls, data: Any) -> MonitorConfig:
        root = _object(data, "config", {"period", "neuron_runtimes", "system_metrics"})
        period = parse_period(root["period"]) if "period" in root else DEFAULT_PERIOD
        entries = _array(root.get("neuron_runtimes", []), "neuron_runtimes")
        runtimes = tuple(_selector(e, f"neuron_runtimes[{i}]", period) for i, e in enumerate(entries))
        system = _metrics(root.get("system_metrics", []), "system_metrics", period, SYSTEM_GROUPS,
                          RUNTIME_GROUPS)
        return cls(period, runtimes, system)

    def runtime_groups_for(self, tag: str) -> dict[str, float]:
        """Groups to collect for a runtime with this tag; the shortest period wins on overlap."""
        groups: dict[str, float] = {}
        for selector in self.runtimes:
            if selector.matches(tag):
                for group, period in selector.groups.items():
                    groups[group] = min(period, groups.get(group, period))
        return groups

    @property
    def periods(self) -> tuple[float, ...]:
        found = {p for s in self.runtimes for p in s.groups.values()}
        found.update(self.system_groups.values())
        return tuple(sorted(found)) or (self.period,)

    @property
    def base_period(self) -> float:
        """The collector's tick: the gcd of all periods at 1 ms resolution (so "2s" and "3s" tick
        every second, not every 2 s)."""
        return math.gcd(*(max(1, round(p * 1000)) for p in self.periods)) / 1000.0

    @property
    def min_period(self) -> float:
        return self.periods[0]

    def to_dict(self) -> dict:
        """The configuration in AWS file form, every period spelled out."""
        out: dict[str, Any] = {"period": format_period(self.period), "neuron_runtimes": []}
        for s in self.runtimes:
            entry: dict[str, Any] = {"period": format_period(s.period)}
            if s.tag_filter is not None:
                entry["tag_filter"] = s.tag_filter.pattern
            entry["metrics"] = _metrics_out(s.groups)
            out["neuron_runtimes"].append(entry)
        out["system_metrics"] = _metrics_out(self.system_groups)
        return out


def due_groups(periods: Mapping[Hashable, float], last_collected: Mapping[Hashable, float],
               now: float, slack: float = 0.001) -> list[Hashable]:
    """Keys (groups, or (tag, group) pairs) whose period has elapsed since their last collection.
    A key never collected is due at once. `slack` absorbs timer jitter (the collector gives a
    quarter of its tick, so a tick a little early after a late one still collects)."""
    return [key for key, period in periods.items()
            if now - last_collected.get(key, -math.inf) >= period - slack]


def next_due(periods: Mapping[Hashable, float], last_collected: Mapping[Hashable, float],
             now: float) -> float:
    """Seconds until the next key falls due (0 when one is due now; inf when there are none)."""
    waits = (last_collected.get(key, -math.inf) + period - now for key, period in periods.items())
    return max(0.0, min(waits, default=math.inf))


# --------------------------------------------------------------------------- parsing helpers
def _selector(value: Any, path: str, inherited: float) -> RuntimeSelector:
    entry = _object(value, path, {"tag_filter", "period", "metrics"})
    period = parse_period(entry["period"], path + ".period") if "period" in entry else inherited
    pattern = None
    if "tag_filter" in entry:
        raw = entry["tag_filter"]
        if type(raw) is not str:
            raise ConfigError(f"{path}.tag_filter: expected a regular expression string, "
                              f"got {_kind(raw)}")
        try:
            pattern = re.compile(raw)
        except (re.error, RecursionError, OverflowError) as exc:
            raise ConfigError(f"{path}.tag_filter: invalid regular expression {raw!r} ({exc})") from None
    groups = _metrics(entry.get("metrics", []), path + ".metrics", period, RUNTIME_GROUPS,
                      SYSTEM_GROUPS)
    return RuntimeSelector(pattern, groups, period)


def _metrics(value: Any, path: str, inherited: float, allowed: tuple[str, ...],
             other: tuple[str, ...]) -> dict[str, float]:
    groups: dict[str, float] = {}
    for i, item in enumerate(_array(value, path)):
        item_path = f"{path}[{i}]"
        metric = _object(item, item_path, {"type", "period"})
        kind = _metric_type(metric.get("type"), item_path + ".type", allowed, other)
        period = (parse_period(metric["period"], item_path + ".period") if "period" in metric
                  else inherited)
        groups[kind] = min(period, groups.get(kind, period))
    return groups


def _metric_type(kind: Any, path: str, allowed: tuple[str, ...], other: tuple[str, ...]) -> str:
    if type(kind) is not str:
        raise ConfigError(f"{path}: missing" if kind is None
                          else f"{path}: expected a string, got {_kind(kind)}")
    if kind in allowed:
        return kind
    if kind in _RENAMED:
        raise ConfigError(f"{path}: metric type {kind!r} was renamed {_RENAMED[kind]!r}")
    if kind in other:
        where = "neuron_runtimes[].metrics" if kind in RUNTIME_GROUPS else "system_metrics"
        raise ConfigError(f"{path}: {kind!r} belongs in {where}")
    raise ConfigError(f"{path}: unknown metric type {kind!r} (expected one of {', '.join(allowed)})")


def _metrics_out(groups: Mapping[str, float]) -> list[dict]:
    return [{"type": g, "period": format_period(p)} for g, p in groups.items()]


def _object(value: Any, path: str, keys: set[str]) -> dict:
    if type(value) is not dict:
        raise ConfigError(f"{path}: expected an object, got {_kind(value)}")
    unknown = sorted(str(k) for k in value if k not in keys)
    if unknown:
        where = unknown[0] if path == "config" else f"{path}.{unknown[0]}"
        raise ConfigError(f"{where}: unknown key (expected one of {', '.join(sorted(keys))})")
    return value


def _array(value: Any, path: str) -> list:
    if type(value) is not list:
        raise ConfigError(f"{path}: expected an array, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string",
            list: "array", dict: "object"}.get(type(value), type(value).__name__)
