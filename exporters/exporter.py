"""Reports in, a published `Exposition` out: the Prometheus exporter without its HTTP server.

`ingest` runs on one thread (the input reader); HTTP threads only read `current`, a reference
swapped atomically, so a scrape never sees a half-applied report and never waits for one.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping

from exporters import metrics_table as mt
from exporters.exposition import Exposition
from exporters.extract import Context, Problem, extract
from exporters.render import OPENMETRICS_EOF, render_openmetrics, render_text
from exporters.state import MetricState
from monitor import __version__
from monitor.report import Report

# Kinds exported as 0 from the start, so rate() and alerts see the series before the first error.
KNOWN_ERROR_KINDS = ("not_json", "truncated", "wrong_type", "not_object", "not_utf8", "too_long",
                     "unknown_group", "group_error", "runtime_error", "eof")


def package_version() -> str:
    return __version__


class PrometheusExporter:
    """``notice`` receives a one-line message the first time each kind of problem is seen (the
    CLI prints it with its name); later ones are only counted."""

    def __init__(self, clock: Callable[[], float] = time.time,
                 notice: Callable[[str], None] | None = None,
                 stream_errors: Callable[[], Mapping[str, int]] | None = None,
                 timer: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._timer = timer
        self._notice = notice or (lambda line: None)
        self._stream_errors = stream_errors or (lambda: {})
        self.state = MetricState(clock)
        self._health = MetricState(clock)
        self._context: Context | None = None
        self.problems: Counter[str] = Counter()
        self.reports = 0
        self._last_report_at = clock()  # staleness counts from start until the first report
        self._last_duration = 0.0
        self._generation = 0
        self._published_stream_errors = 0
        self._main_text: list[str] = []
        self._main_om: list[str] = []
        self.current = self._publish()

    # ------------------------------------------------------------------ input
    def ingest(self, report: Report) -> Exposition:
        started = self._timer()
        if self._context is None:
            self._context = Context.of(report.instance, report.hardware)
            self.state.instance = self._context.instance
        ctx = self._context
        problems: list[Problem] = []
        self.state.apply(extract(report, ctx, problems))
        self.state.keep_runtimes({r.tag for r in report.runtimes})
        self.state.set_info(mt.BY_NAME["instance_info"], ())
        hw = report.hardware
        self.state.set_info(mt.BY_NAME["neuron_hardware_info"], tuple(
            "" if v is None else str(v)
            for v in (hw.device_count, hw.device_memory_bytes, hw.cores_per_device)))
        for problem in problems:
            self.note_problem(problem)
        self.reports += 1
        self._last_report_at = report.received_at if report.received_at is not None else self._clock()
        families = self.state.families.values()
        self._main_text = render_text(families)
        self._main_om = render_openmetrics(families)
        self._last_duration = self._timer() - started
        return self.refresh()

    def note_problem(self, problem: Problem) -> None:
        self.problems[problem.kind] += 1
        if self.problems[problem.kind] == 1:
            self._notice(f"{problem.message} (further {problem.kind} problems are counted in "
                      f"neuron_exporter_input_errors_total)")

    def set_stream_errors(self, stream_errors: Callable[[], Mapping[str, int]]) -> None:
        self._stream_errors = stream_errors

    def refresh_if_input_errors_changed(self) -> None:
        """Called after each input line: publish when a bad line was just counted."""
        total = sum(self._stream_errors().values())
        if total != self._published_stream_errors:
            self.refresh()

    def note_eof(self) -> Exposition:
        self.note_problem(Problem("eof", "input ended (EOF); serving the last report"))
        return self.refresh()

    def refresh(self) -> Exposition:
        """Re-publish with fresh exporter-health values (main lines are reused as they are)."""
        self.current = self._publish()
        return self.current

    # ------------------------------------------------------------------ output
    def _publish(self) -> Exposition:
        self._update_health()
        health = self._health.families.values()
        text = "".join(self._main_text + render_text(health))
        om = "".join(self._main_om + render_openmetrics(health) + [OPENMETRICS_EOF])
        self._generation += 1
        return Exposition(self._generation, text.encode(), om.encode())

    def _update_health(self) -> None:
        now = self._clock()
        h = self._health
        spec = mt.BY_NAME
        h.family(spec["neuron_exporter_scrape_duration_seconds"]).set_gauges(
            [((), self._last_duration)], now)
        h.family(spec["neuron_exporter_last_report_timestamp_seconds"]).set_gauges(
            [((), self._last_report_at)], now)
        h.family(spec["neuron_exporter_reports_total"]).set_gauges([((), float(self.reports))], now)
        errors = Counter(dict.fromkeys(KNOWN_ERROR_KINDS, 0))
        stream_errors = self._stream_errors()
        self._published_stream_errors = sum(stream_errors.values())
        errors.update(stream_errors)
        errors.update(self.problems)
        h.family(spec["neuron_exporter_input_errors_total"]).set_gauges(
            [((kind,), float(n)) for kind, n in errors.items()], now)
        h.family(spec["neuron_exporter_series"]).set_gauges(
            [((), float(self.state.series_count()))], now)
        h.family(spec["neuron_exporter_build_info"]).set_gauges([((package_version(),), 1.0)], now)
