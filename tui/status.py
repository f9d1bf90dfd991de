"""What neuron-top says about its input: why nothing is shown, what the stream lacks, how it
ended, and the exit status that follows (non-zero when the input had no valid report, failed,
or was a live neuron-monitor stream that ended: neuron-monitor itself never stops).

Plain functions of the source's state, shared by the screen (tui/app.py) and ``-1``/``--json``
(tui/cli.py). Text from the stream is escaped: no control sequence reaches the terminal.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from monitor.coverage import stream_gaps
from monitor.errors import one_line
from monitor.report import Report
from monitor.sources import Source
from monitor.vocab import RUNTIME_GROUPS
from tui.faults import Fault, report_faults
from tui.view import failed_groups

__all__ = ["stream_faults", "gaps_text", "source_status", "exit_status"]


def stream_faults(report: Report | None, vanished: Iterable[tuple[int | None, str]],
                  rejections: list[str]) -> tuple[Fault, ...]:
    """The banner's fault lines: the report's faults and gaps, or (before any valid report)
    the first rejected lines' reasons."""
    if report is None:
        return tuple(Fault("error", one_line(r)) for r in rejections[:3])
    faults = tuple(Fault(f.severity, one_line(f.text)) for f in report_faults(report, vanished))
    gaps = gaps_text(report)
    if gaps:
        faults += (Fault("warning", one_line(gaps)),)
    return faults


def malformed_text(malformed: dict[str, int]) -> str:
    """The lines a stream's reader skipped, by kind (`malformed lines skipped: 2
    (not_json:1,not_object:1)`); "" when none were."""
    bad = sum(malformed.values())
    if not bad:
        return ""
    kinds = ",".join(f"{k}:{v}" for k, v in sorted(malformed.items()) if v)
    return f"malformed lines skipped: {bad} ({kinds})"


def gaps_text(report: Report) -> str:
    """One line: what the stream lacks and which groups failed, a runtime's failed groups
    under its tag (``stream lacks: flops · err-mem: memory_used failed: …``): with several
    runtimes, "memory_used failed" alone left the reader to guess whose."""
    gaps = stream_gaps(report)
    parts = ["stream lacks: " + ", ".join(gaps.missing)] if gaps.missing else []
    parts += [f"{group} failed: {error}" for group, error in gaps.failed
              if group not in RUNTIME_GROUPS]
    for runtime in report.runtimes:
        groups_by_error: dict[str, list[str]] = {}
        for group, error in failed_groups(runtime).items():
            groups_by_error.setdefault(error, []).append(group)
        parts += [f"{runtime.tag}: {', '.join(groups)} failed: {error}"
                  for error, groups in groups_by_error.items()]
    if gaps.dropped:
        parts.append(f"{len(gaps.dropped)} malformed field(s) ignored, e.g. {gaps.dropped[0]}")
    return " · ".join(parts)


def source_status(source: Source, ended, have_report: bool,
                  clock_text: Callable[[float], str]) -> str:
    """The status line while no report is shown, or once the source ended ("" when fine)."""
    bad = sum(source.malformed.values())
    rejected = f" ({bad} line{'s' if bad != 1 else ''} rejected)" if bad else ""
    if ended is None:
        return f"no valid report yet from {source.label}{rejected}" if bad else ""
    at = clock_text(ended.ended_at)
    if ended.error:
        return f"source failed at {at}: {one_line(ended.error)}"
    if not have_report:
        return f"source ended at {at} without a single valid report{rejected}"
    if source.live:
        return f"source ended at {at} (the neuron-monitor stream stopped); showing the last report"
    return f"source ended at {at}; showing the last report"


def exit_status(ended, reports_seen: int, live: bool) -> int:
    """0 unless the input ended badly: no valid report, a read failure, or a live stream that
    stopped (its neuron-monitor died). Quitting while the input still flows is 0."""
    if ended is None:
        return 0
    if ended.error or reports_seen == 0 or live:
        return 1
    return 0
