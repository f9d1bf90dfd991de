"""The neuron-top application: AWS's layout and keys, plus engine, HBM and process views.

Attributes down, messages up: one background worker iterates the Source and posts
``ReportArrived``; the app keeps the latest Report and hands each widget the view data it draws.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from textual import work
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, Footer, Input

from monitor.report import Report
from tui import __version__
from tui.status import source_status, stream_faults
from tui.history import History
from tui.keys import bindings
from tui.memtree import build_tree
from tui.messages import ReportArrived, SourceEnded
from tui.procs import SORT_KEYS, process_rows
from monitor.sources import Source, report_interval
from tui.view import ALL_TAB, app_tabs, core_grid, core_layout, memory_summary, runtimes_for, vcpu_usage
from tui.widgets.engines import EngineView
from tui.widgets.grid import CoreGridView
from tui.widgets.help import HelpScreen
from tui.widgets.panels import AppsBar, Banner, MemorySummaryView, TitleBar, VcpuPanel
from tui.widgets.processes import ProcessTable
from tui.widgets.tree import MemoryTreeView

VIEWS = {"overview": "overview", "engines": "engines-view", "processes": "processes-view"}


def clock_text(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(seconds))


class NeuronTopApp(App[None]):
    CSS_PATH = "neuron_top.tcss"
    TITLE = "neuron-top"
    BINDINGS = bindings()
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]

    def __init__(self, source: Source, *, clock: Callable[[], float] = time.time,
                 stale_after: float | None = None, history_length: int = 300) -> None:
        super().__init__()
        self.source = source
        self.clock = clock
        self.stale_after = stale_after
        self.history = History(history_length)
        self.report: Report | None = None
        self.pending: Report | None = None  # newest report held back while paused
        self.reports_seen = 0
        self.malformed: Counter[str] = Counter()
        self.last_received: float | None = None
        self.ended: SourceEnded | None = None
        self.tab = ALL_TAB
        self.show_flops = False
        self.paused = False
        self.view = "overview"
        self.core = 0
        self.sort_key, self.sort_reverse, self.filter_text = "pid", False, ""
        self.vanished: dict[int, str] = {}
        self._tree_input: tuple | None = None

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield TitleBar(__version__, id="title")
        yield Banner(id="banner")
        with ContentSwitcher(initial="overview", id="views"):
            with Vertical(id="overview"):
                yield CoreGridView(id="grid")
                yield VcpuPanel(id="vcpu")
                yield MemorySummaryView(id="memsum")
                yield MemoryTreeView(id="tree")
            with Vertical(id="engines-view"):
                yield EngineView(id="engines")
            with Vertical(id="processes-view"):
                yield ProcessTable(id="procs")
                yield Input(placeholder="filter by pid, tag or status; enter applies, esc clears",
                            id="filter")
        yield AppsBar(id="apps")
        yield Footer()

    def on_mount(self) -> None:
        for widget_id, title in (("grid", "NeuronCore Utilization"), ("vcpu", "vCPU Utilization"),
                                 ("memsum", "Memory Usage Summary"), ("tree", "Memory Usage Details"),
                                 ("engines", "Engines, HBM and power"), ("procs", "Processes")):
            widget = self.query_one(f"#{widget_id}")
            widget.add_class("section")
            widget.border_title = title
        self.query_one("#tree").focus()
        self._update_status()
        self.set_interval(1.0, self._check_stale)
        self.pump_reports()

    # ------------------------------------------------------------------ the worker
    @work(thread=True, exclusive=True, name="report-source")
    def pump_reports(self) -> None:
        source = self.source
        try:
            for report in source.reports():
                self.post_message(ReportArrived(report, source.malformed, self.clock()))
        except (OSError, ValueError) as exc:  # an unreadable source ends it, never the UI
            self.post_message(SourceEnded(source.malformed, self.clock(), f"{exc}"))
            return
        if not source.closed:
            self.post_message(SourceEnded(source.malformed, self.clock()))

    def on_unmount(self) -> None:
        self.source.close()

    def on_report_arrived(self, message: ReportArrived) -> None:
        self.reports_seen += 1
        self.malformed = message.malformed
        self.last_received = message.received_at
        self.history.push(message.report)
        self._track_vanished(message.report)
        if self.paused:
            self.pending = message.report
            self._update_status()
        else:
            self.show_report(message.report)

    def on_source_ended(self, message: SourceEnded) -> None:
        self.ended = message
        self.malformed = message.malformed
        self._update_status()
        self._update_banner()

    def _track_vanished(self, report: Report) -> None:
        previous = {r.pid: r.tag for r in self.report.runtimes} if self.report else {}
        current = {r.pid for r in report.runtimes}
        self.vanished = {pid: tag for pid, tag in previous.items() if pid not in current}

    # ------------------------------------------------------------------ rendering
    def show_report(self, report: Report) -> None:
        self.report = report
        tabs = app_tabs(report)
        if self.tab not in tabs:
            self.tab = ALL_TAB
        self.refresh_views()

    def refresh_views(self) -> None:
        report = self.report
        self._update_status()
        self._update_banner()
        if report is None:
            return
        self.query_one(AppsBar).show(app_tabs(report), self.tab)
        runtimes = runtimes_for(report, self.tab)
        if self.view == "overview":
            self.query_one(CoreGridView).show(core_grid(report, runtimes), self.show_flops, self.core)
            self.query_one(VcpuPanel).show(vcpu_usage(report, runtimes))
            self.query_one(MemorySummaryView).show(memory_summary(runtimes))
            memory = (self.tab, core_layout(report)[1], tuple(r.memory_used for r in runtimes))
            if memory != self._tree_input:  # device memory changes rarely; skip the rebuild
                self._tree_input = memory
                self.query_one(MemoryTreeView).show(build_tree(runtimes, memory[1]))
        elif self.view == "engines":
            self.query_one(EngineView).show(report, self.history, self.core)
        else:
            rows = process_rows(report, self.sort_key, self.sort_reverse, self.filter_text)
            self.query_one(ProcessTable).show(rows, self.sort_key, self.sort_reverse, self.filter_text)

    def _update_status(self) -> None:
        report = self.report
        parts = ["PAUSED"] if self.paused else []
        bad = sum(self.malformed.values())
        if bad:
            kinds = ",".join(f"{k}:{v}" for k, v in sorted(self.malformed.items()))
            parts.append(f"malformed lines skipped: {bad} ({kinds})")
        parts.append(self.source.label)
        instance = report.instance if report else None
        self.query_one(TitleBar).show(instance.id if instance else "…", instance.type if instance
                                      else "", " · ".join(parts))

    def _update_banner(self) -> None:
        # tui/status.py: what the stream lacks, and why nothing shows yet
        faults = stream_faults(self.report, self.vanished, self.source.rejections)
        self.query_one(Banner).show(faults, self._stale_text())

    def _stale_text(self) -> str:
        if self.ended is not None or self.last_received is None:
            return source_status(self.source, self.ended, self.report is not None, clock_text)
        limit = self.stale_after
        if limit is None:
            limit = max(5.0, 3 * report_interval(self.report)) if self.report else 5.0
        silent = self.clock() - self.last_received
        if silent <= limit:
            return ""
        return (f"stale since {clock_text(self.last_received)}: no report for {silent:.0f}s "
                f"from {self.source.label}")

    def _check_stale(self) -> None:
        self._update_banner()

    # ------------------------------------------------------------------ actions (tui.keys)
    def action_help(self) -> None:
        self.push_screen(HelpScreen(__version__))

    def action_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused and self.pending is not None:
            report, self.pending = self.pending, None
            self.show_report(report)
        self._update_status()

    def action_toggle_flops(self) -> None:
        self.show_flops = not self.show_flops
        self.refresh_views()

    def action_tab(self, step: int) -> None:
        tabs = app_tabs(self.report) if self.report else (ALL_TAB,)
        index = tabs.index(self.tab) if self.tab in tabs else 0
        self.tab = tabs[(index + step) % len(tabs)]
        self.refresh_views()

    def action_tab_number(self, number: int) -> None:
        tabs = app_tabs(self.report) if self.report else (ALL_TAB,)
        if number <= len(tabs):
            self.tab = tabs[number - 1]
            self.refresh_views()

    def action_expand_all(self) -> None:
        self.query_one(MemoryTreeView).toggle_all()

    def action_view(self, name: str) -> None:
        self.view = name
        self.query_one(ContentSwitcher).current = VIEWS[name]
        focus = {"overview": "#tree", "engines": "#grid", "processes": "#procs"}[name]
        if name != "engines":
            self.query_one(focus).focus()
        self.refresh_views()

    def action_core(self, step: int) -> None:
        self.select_core(self.core + step)

    def select_core(self, core: int) -> None:
        if self.report is None:
            return
        devices, per_device = core_layout(self.report)
        self.core = min(max(core, 0), devices * per_device - 1)
        self.refresh_views()

    def action_sort(self) -> None:
        self.sort_key = SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)]
        self.refresh_views()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.refresh_views()

    def action_filter(self) -> None:
        if self.view != "processes":
            self.action_view("processes")
        box = self.query_one("#filter", Input)
        box.value = self.filter_text
        box.add_class("-visible")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.filter_text = event.value.strip()
        self._close_filter()

    def _close_filter(self) -> None:
        self.query_one("#filter").remove_class("-visible")
        self.query_one("#procs").focus()
        self.refresh_views()

    def key_escape(self) -> None:
        if self.query_one("#filter").has_class("-visible") or self.filter_text:
            self.filter_text = ""
            self._close_filter()

    def action_next_theme(self) -> None:
        names = sorted(self.available_themes)
        self.theme = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]

    # ------------------------------------------------------------------ messages up from widgets
    def on_core_grid_view_core_selected(self, message: CoreGridView.CoreSelected) -> None:
        self.select_core(message.core)

    def on_apps_bar_tab_clicked(self, message: AppsBar.TabClicked) -> None:
        self.tab = message.tab
        self.refresh_views()

    def on_process_table_sort_changed(self, message: ProcessTable.SortChanged) -> None:
        if message.key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        self.sort_key = message.key
        self.refresh_views()

    def on_process_table_picked(self, message: ProcessTable.Picked) -> None:
        self.tab = message.tag
        self.action_view("overview")
