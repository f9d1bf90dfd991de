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
from exporters.extract import (INPUT_PROBLEMS, REPORT_PROBLEMS, Context, Problem, extract,
                               with_k8s_labels)
from exporters.render import OPENMETRICS_EOF, render_openmetrics, render_text
from exporters.state import MetricState
from monitor import __version__
from monitor.report import K8sInfo, Report
from monitor.sources import report_interval
from monitor.stream import LINE_KINDS

DEFAULT_PERIOD_S = 5.0      # neuron-monitor's default period, assumed until a report says
STALE_PERIODS = 3           # /-/healthy fails after this many periods without a report

# Kinds exported as 0 from the start, so rate() and alerts see the series before the first error.
KNOWN_ERROR_KINDS = (*LINE_KINDS, *REPORT_PROBLEMS, *INPUT_PROBLEMS)


def _seconds(value: float) -> str:
    """A limit in seconds as a person reads it: `15s`, `3.1s`, `0.04s` (never `0s`)."""
    return f"{round(value, 1):g}s" if value >= 0.95 else f"{value:.2g}s"


def package_version() -> str:
    return __version__


class PrometheusExporter:
    """``notice`` receives a one-line message the first time each kind of problem is seen (the
    CLI prints it with its name); later ones are only counted."""

    def __init__(self, clock: Callable[[], float] = time.time,
                 notice: Callable[[str], None] | None = None,
                 stream_errors: Callable[[], Mapping[str, int]] | None = None,
                 timer: Callable[[], float] = time.perf_counter, k8s_labels: bool = False):
        self._clock = clock
        self._timer = timer
        self._k8s_labels = k8s_labels  # --enable-k8s-info
        self._placements: K8sInfo | None = None  # the last neuron_k8s_info read without error
        self._notice = notice or (lambda line: None)
        self._stream_errors = stream_errors or (lambda: {})
        self.state = MetricState(clock)
        self._health = MetricState(clock)
        self._context: Context | None = None
        self.problems: Counter[str] = Counter()
        self.reports = 0
        self._last_report_at = clock()  # staleness counts from start until the first report
        self._period = DEFAULT_PERIOD_S
        self.ended = False  # the input reached its end (or the collector failed)
        self._last_duration = 0.0
        self._generation = 0
        self._published_stream_errors = 0
        self._main_text: list[str] = []
        self._main_om: list[str] = []
        self.current = self._publish()

    # ------------------------------------------------------------------ input
    def ingest(self, report: Report) -> Exposition:
        started = self._timer()
        fresh = Context.of(report.instance, report.hardware)
        if self._context is None:
            self._context = fresh
            self.state.instance = fresh.instance
        elif _instance_id(fresh) and _instance_id(fresh) != _instance_id(self._context):
            # Judged by the id alone: a report whose other metadata reads differently (a field
            # missing once) must not reset every counter.
            if _instance_id(self._context):
                # another instance: every series names it, so they start over under its labels
                self.state = MetricState(self._clock, fresh.instance)
            else:
                # the same host, whose metadata could not be read for the first reports: its
                # series take the labels and keep what they counted
                self.state.relabel(fresh.instance)
            self._context = fresh
        elif (later := self._context.with_hardware_of(report.hardware)) is not self._context:
            self._context = later          # the devices are known now: per-core series get theirs
            self.state.drop_unknown_devices()
        ctx = self._context
        problems: list[Problem] = []
        groups = extract(report, ctx, problems)
        if self._k8s_labels:
            groups = with_k8s_labels(groups, self._latest_placements(report, problems))
        tags = Counter(r.tag for r in report.runtimes)
        self.state.apply(groups, frozenset(t for t, n in tags.items() if n > 1))
        self.state.keep_runtimes({r.tag for r in report.runtimes})
        if report.hardware.device_count == 0 and not report.hardware.error:
            self.state.drop_devices()
        self.state.set_info(mt.BY_NAME["instance_info"], ())
        hw = report.hardware
        # the layout as last given: a driver loaded after the exporter started shows its devices
        self.state.set_info(mt.BY_NAME["neuron_hardware_info"], tuple(
            "" if v is None else str(v)
            for v in (hw.device_count, hw.device_memory_bytes, hw.cores_per_device)),
            update=hw.device_count is not None and not hw.error)
        for problem in problems:
            self.note_problem(problem)
        self.reports += 1
        self._period = report_interval(report)
        self._last_report_at = report.received_at if report.received_at is not None else self._clock()
        families = self.state.families.values()
        self._main_text = render_text(families)
        self._main_om = render_openmetrics(families)
        self._last_duration = self._timer() - started
        return self.refresh()

    def _latest_placements(self, report: Report, problems: list[Problem]) -> K8sInfo | None:
        """neuron_k8s_info has a period of its own (15 s by default, beside 1 s or 5 s groups):
        a report without it, or with its error set, says nothing new about who holds a core, so
        the pods last read stay on the series. Dropping them there would empty every pod label
        and start the counters over between two k8s periods."""
        k8s = report.k8s
        if k8s is not None and k8s.error:
            problems.append(Problem("group_error", f"Error getting neuron_k8s_info: {k8s.error}"))
        elif k8s is not None:
            self._placements = k8s
        return self._placements

    def note_problem(self, problem: Problem) -> None:
        self.problems[problem.kind] += 1
        if self.problems[problem.kind] == 1:
            # the input ends once: a line about "further" ends would promise what cannot come
            further = "" if problem.kind == "eof" else (
                f" (further {problem.kind} problems are counted in "
                "neuron_exporter_input_errors_total)")
            self._notice(problem.message + further)

    def set_stream_errors(self, stream_errors: Callable[[], Mapping[str, int]]) -> None:
        self._stream_errors = stream_errors

    def refresh_if_input_errors_changed(self) -> None:
        """Called after each input line: publish when a bad line was just counted."""
        total = sum(self._stream_errors().values())
        if total != self._published_stream_errors:
            self.refresh()

    def note_eof(self, message: str = "input ended (EOF)") -> Exposition:
        self.ended = True
        self.note_problem(Problem("eof", message))
        return self.refresh()

    def health(self, stale_after: float | None = None) -> tuple[bool, str]:
        """(healthy, one line) for /-/healthy: unhealthy once no report arrived for
        ``stale_after`` seconds (default: 3 periods of the latest report, 5 s before one)."""
        limit = stale_after if stale_after is not None else STALE_PERIODS * self._period
        silent = self._clock() - self._last_report_at
        if silent <= limit:
            return True, "OK"
        what = "no report yet" if not self.reports else "no report"
        ended = "; input ended" if self.ended else ""
        return False, f"stale: {what} for {silent:.0f}s (limit {_seconds(limit)}){ended}"

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


def _instance_id(context: Context) -> str:
    """The instance id among a context's instance label values ("" while unknown)."""
    return dict(zip(mt.INSTANCE_LABELS, context.instance)).get("instance_id", "")
