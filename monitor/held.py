"""Each group of a stream at its latest reading, for views that draw one report at a time.

neuron-monitor writes a report whenever any group is due, and a report carries only the groups
that are due (AWS's neuron-monitor user guide: each report holds "the newly collected data").
With groups on different periods (core counters every second, memory every five), most reports
lack most groups. A sink that keeps state per series (the Prometheus exporter) holds the last
value by itself; a view that draws the newest report would blink to N/A in between.
``GroupHold`` fills a group a report lacks with the same runtime's (or the host's) last reading
of it, for as long as that reading is recent: ``hold_periods`` times the group's own period, in
the stream's own time (each report advances it by the shortest period among its groups: the
interval at which the monitor writes), so a recording read at any pace holds the same groups.
A group that arrives with an ``error`` replaces the held one (the failure is news); a runtime
gone from the report takes its held groups with it; a group never seen stays absent.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from monitor.report import Report
from monitor.report_runtime import RUNTIME_GROUP_PARSERS, RuntimeReport
from monitor.report_system import SYSTEM_GROUP_PARSERS

__all__ = ["GroupHold", "RUNTIME_GROUP_ATTRS", "SYSTEM_GROUP_ATTRS"]

# the schema's groups, as the parsers name their attributes
RUNTIME_GROUP_ATTRS = tuple(attr for attr, _ in RUNTIME_GROUP_PARSERS.values())
SYSTEM_GROUP_ATTRS = tuple(attr for attr, _ in SYSTEM_GROUP_PARSERS.values())
# neuron-monitor's default period (neuron-tools.md §1.1), for a group that gives none
_DEFAULT_PERIOD_S = 5.0

_Key = tuple  # (pid, tag) of a runtime, or ("system",)
_SYSTEM: _Key = ("system",)


class GroupHold:
    """Feed it every report in order (``apply``); it returns the report with its missing
    groups held."""

    def __init__(self, hold_periods: float = 2.0) -> None:
        if hold_periods <= 0:
            raise ValueError("hold_periods must be > 0")
        self.hold_periods = hold_periods
        self._held: dict[_Key, dict[str, tuple[Any, float]]] = {}
        self._now = 0.0   # stream seconds

    def apply(self, report: Report) -> Report:
        self._now += _interval(report)
        now = self._now
        runtimes = tuple(self._runtime(r, now) for r in report.runtimes)
        keys = {(r.pid, r.tag) for r in report.runtimes}
        for key in [k for k in self._held if k != _SYSTEM and k not in keys]:
            del self._held[key]   # the runtime left the stream: nothing of it to hold
        system = self._fill(_SYSTEM, report.system, SYSTEM_GROUP_ATTRS, now)
        if system is report.system and all(a is b for a, b in zip(runtimes, report.runtimes)):
            return report
        return replace(report, runtimes=runtimes, system=system)

    def _runtime(self, runtime: RuntimeReport, now: float) -> RuntimeReport:
        if runtime.error:   # the runtime itself failed: show that, not its old readings
            self._held.pop((runtime.pid, runtime.tag), None)
            return runtime
        return self._fill((runtime.pid, runtime.tag), runtime, RUNTIME_GROUP_ATTRS, now)

    def _fill(self, key: _Key, obj: Any, attrs: tuple[str, ...], now: float) -> Any:
        held = self._held.setdefault(key, {})
        filled = {}
        for attr in attrs:
            group = getattr(obj, attr)
            if group is not None:
                held[attr] = (group, now)
                continue
            last = held.get(attr)
            if last is None:
                continue
            group, seen_at = last
            if now - seen_at <= self.hold_periods * (group.period or _DEFAULT_PERIOD_S):
                filled[attr] = group
            else:
                del held[attr]   # stopped arriving: absent again, as the stream says
        return replace(obj, **filled) if filled else obj


def _interval(report: Report) -> float:
    """The stream time since the report before: the shortest period among the groups it
    carries (the group that made the monitor write it), 0 for one that carries none."""
    groups = [getattr(r, a) for r in report.runtimes for a in RUNTIME_GROUP_ATTRS]
    groups += [getattr(report.system, a) for a in SYSTEM_GROUP_ATTRS]
    periods = [g.period for g in groups if g is not None and g.period]
    return min(periods, default=0.0)
