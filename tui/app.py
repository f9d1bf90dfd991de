"""The neuron-top application: AWS's layout and keys, plus engine, HBM and process views.

Attributes down, messages up: one background worker iterates the Source and posts
``ReportArrived``; the app keeps the latest Report and hands each widget the view data it draws.
"""
from __future__ import annotations

import asyncio
import copy
import errno
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import ContentSwitcher, Input

from monitor.report import Report
from tui import __version__
from tui.commands import app_commands
from tui.status import malformed_text, source_status, stream_faults
from tui.history import History, runtime_key
from tui.keys import bindings
from tui.memtree import build_tree
from tui.messages import ParentsFound, ReportArrived, SourceEnded
from tui.procdetail import find_runtime, process_detail
from tui.procs import SORT_KEYS, highest_first, process_rows
from tui.ptree import Ancestor, tree_lines
from tui.signals import EXIT_SIGNALS
from monitor.held import GroupHold
from monitor.sources import ReplaySource, Source, report_interval
from tui.view import (ALL_TAB, app_tabs, core_grid, core_layout, instance_stopped, instance_title,
                      memory_summary, runtimes_for, tab_cores, vcpu_usage)
from tui.widgets.engines import EngineView
from tui.widgets.footer import KeyFooter
from tui.widgets.grid import HISTORY_MIN_WIDTH, CoreGridView
from tui.widgets.help import HelpScreen
from tui.widgets.overview import Overview
from tui.widgets.panels import AppsBar, Banner, MemorySummaryView, TitleBar, VcpuPanel
from tui.widgets.processes import ProcessTable
from tui.widgets.procscreen import ConfirmSignal, ProcessDetailView, ProcessScreen
from tui.widgets.tree import MemoryTreeView

VIEWS = {"overview": "overview", "engines": "engines-view", "processes": "processes-view"}
REPLAY_MIN_GAP = 0.05  # seconds: a replay shows at most 20 reports a second, whatever --speed says
VANISHED_KEEP_S = 60.0  # a runtime that stopped reporting stays in the banner this long
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
Lineage = Callable[[int], "tuple[Ancestor, ...] | None"]


def write_new_file(folder: str, stem: str, suffix: str, text: str, tries: int = 100) -> str:
    """`text` in a file of this name that did not exist (`stem_2` and on when it did): never
    through a symlink someone left in a shared directory, never over another file, 0644."""
    for n in range(1, tries + 1):
        path = os.path.join(folder, f"{stem}{suffix}" if n == 1 else f"{stem}_{n}{suffix}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return path
    raise FileExistsError(errno.EEXIST, f"{tries} files named {stem}* already exist", folder)


def known_pids(report: Report) -> tuple[int, ...]:
    """The runtimes' pids, less the unknown ones (pid 0 in the stream): the rows' keys."""
    return tuple(r.known_pid for r in report.runtimes if r.known_pid is not None)


def clock_text(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(seconds))


class NeuronTopApp(App[None]):
    CSS_PATH = "neuron_top.tcss"
    TITLE = "neuron-top"
    BINDINGS = bindings()
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]

    def __init__(self, source: Source, *, clock: Callable[[], float] = time.time,
                 stale_after: float | None = None, history_length: int = 300,
                 readonly: bool = False, lineage: Lineage | None = None,
                 early_signal: Callable[[], int | None] | None = None) -> None:
        """``lineage``: how to find a pid's parent processes, given only when the source's
        runtimes are processes on this host (then signals can reach them too); None for a
        stream or recording from elsewhere, whose pids mean nothing here. ``early_signal``:
        the exit signal that arrived before the app took the signals over, if any."""
        super().__init__()
        self.early_signal = early_signal
        self._outer_handlers: dict[int, object] = {}
        self.readonly = readonly  # no key may change anything outside neuron-top (signals)
        self.lineage = lineage
        self.tree_mode = False
        self.lineages: dict[int, tuple[Ancestor, ...] | None] = {}
        self.detail_pid: int | None = None
        self.detail_tag: str | None = None  # with the pid: which runtime the detail screen shows
        self.source = source
        self.clock = clock
        self.stale_after = stale_after
        self.history = History(history_length)
        self.paused_history: History | None = None  # the history as of the report shown, paused
        self._tab_changed = False  # the grid brings the new tab's first core to its top
        self.hold = GroupHold()  # a group not due in this report shows its last reading
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
        # (pid, tag) of the runtimes that stopped reporting in the last VANISHED_KEEP_S, and when
        self.vanished: dict[tuple[int | None, str], float] = {}
        self.stopped_at: float | None = None  # the instance stopped; the last live state stays up
        self._tree_input: tuple | None = None

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield TitleBar(__version__, id="title")
        yield Banner(id="banner")
        with ContentSwitcher(initial="overview", id="views"):
            with Overview(id="overview"):
                yield CoreGridView(id="grid")
                yield VcpuPanel(id="vcpu")
                yield MemorySummaryView(id="memsum")
                yield MemoryTreeView(id="tree")
            with Vertical(id="engines-view"):
                yield EngineView(id="engines")
            with Vertical(id="processes-view"):
                yield ProcessTable(id="procs", readonly=self.readonly)
                # fits an 80-column terminal's input box whole (its end was cut: "es")
                yield Input(placeholder="pid:N, tag:TEXT or any text, commas for several; "
                                        "enter applies, esc clears",
                            id="filter")
        yield AppsBar(id="apps")
        yield KeyFooter(id="footer")

    def on_mount(self) -> None:
        for widget_id, title in (("grid", "NeuronCore Utilization"),
                                 ("vcpu", "vCPU Utilization"),
                                 ("memsum", "Memory Usage Summary"), ("tree", "Memory Usage Details"),
                                 ("engines", "Engines, HBM and power"), ("procs", "Processes")):
            widget = self.query_one(f"#{widget_id}")
            widget.add_class("section")
            widget.set_title(title)
        self.query_one("#tree").focus()
        self._update_status()
        self.set_interval(1.0, self._check_stale)
        self._exit_on_signals(install=True)
        early = self.early_signal() if self.early_signal else None
        if early is not None:   # it came while the app was starting: end as it would have
            self.exit(return_code=128 + early)
            return
        self.pump_reports()

    def _exit_on_signals(self, install: bool) -> None:
        """A closed terminal (SIGHUP) or a `kill` (SIGTERM) ends neuron-top as q does: the
        terminal is restored and the source closed (the demo's runtimes stopped and its
        directory removed), exit status 128 + the signal. Removing them puts back the handlers
        found (tui/signals.py), not the default: a signal while closing must not kill us."""
        try:
            loop = asyncio.get_running_loop()
            for signum in EXIT_SIGNALS:
                if install:
                    self._outer_handlers[signum] = signal.getsignal(signum)
                    loop.add_signal_handler(signum, lambda s=signum: self.exit(return_code=128 + s))
                else:
                    loop.remove_signal_handler(signum)
                    outer = self._outer_handlers.pop(signum, None)
                    if outer is not None:
                        signal.signal(signum, outer)
        except (NotImplementedError, RuntimeError, ValueError):   # no signals here, not main thread
            pass

    # ------------------------------------------------------------------ the worker
    @work(thread=True, exclusive=True, name="report-source")
    def pump_reports(self) -> None:
        source = self.source
        handled = threading.Event()
        handled.set()
        # A recording at --speed=1e6 would redraw the screen hundreds of times a second, for
        # nothing: no one reads that fast. A file or a stream is read as fast as it comes.
        gap = REPLAY_MIN_GAP if isinstance(source, ReplaySource) else 0.0
        posted = float("-inf")
        try:
            for report in source.reports():
                if not self._wait_handled(handled, source):
                    return
                time.sleep(max(0.0, posted + gap - time.monotonic()))
                posted = time.monotonic()
                self.post_message(ReportArrived(report, source.malformed, self.clock(), handled))
        except (OSError, ValueError) as exc:  # an unreadable source ends it, never the UI
            self.post_message(SourceEnded(source.malformed, self.clock(), f"{exc}"))
            return
        if not source.closed:
            self.post_message(SourceEnded(source.malformed, self.clock()))

    @staticmethod
    def _wait_handled(handled: threading.Event, source: Source) -> bool:
        """Back-pressure: a report is posted only once the app handled the one before. Posted
        as read, a replay at --speed=1e6 queued reports by the GB and the event loop never
        came round to SIGTERM. False: the source closed meanwhile."""
        while not handled.wait(0.1):
            if source.closed:
                return False
        handled.clear()
        return not source.closed

    @work(thread=True, exclusive=True, group="parents", name="process-parents")
    def find_parents(self, pids: tuple[int, ...]) -> None:
        """psutil walks off the UI thread; the app only receives the result."""
        lookup = self.lineage
        found = {pid: lookup(pid) if lookup else None for pid in pids}
        self.post_message(ParentsFound(found))

    def on_parents_found(self, message: ParentsFound) -> None:
        self.lineages = message.lineages
        if self.tree_mode and self.view == "processes":
            self.refresh_views()

    def on_unmount(self) -> None:
        self._exit_on_signals(install=False)
        self.source.close()

    def on_report_arrived(self, message: ReportArrived) -> None:
        try:
            if self.is_running:   # not while shutting down: the screens may be gone already
                self.take_report(message)
        finally:
            message.handled.set()   # the worker may post the next one (_wait_handled)

    def take_report(self, message: ReportArrived) -> None:
        self.reports_seen += 1
        self.malformed = message.malformed
        self.last_received = message.received_at
        if (self.report is not None and not instance_stopped(self.report)
                and instance_stopped(message.report)):
            # An empty report after a live one: the instance went away. Keep its last state on
            # screen rather than drawing a blank one-device host. A stream empty from its start
            # (a container without the driver or instance metadata) is a host: every report of
            # it is shown.
            if self.stopped_at is None:
                self.stopped_at = message.received_at
                self.vanished = {}
                self._update_status()
                self._update_banner()
            return
        self.stopped_at = None
        report = self.hold.apply(message.report)
        self.history.push(report)
        if self.tree_mode:
            self.find_parents(known_pids(report))
        self._track_vanished(report, message.received_at)
        if self.paused:
            self.pending = report
            self._update_status()
        else:
            self.show_report(report)

    def on_source_ended(self, message: SourceEnded) -> None:
        self.ended = message
        self.malformed = message.malformed
        if self.report is None:     # no report will come: not "waiting for the first report"
            grid, engines = self.query_one(CoreGridView), self.query_one(EngineView)
            grid.waiting = engines.waiting = "no report: the source ended"
            grid.set_title(grid.heading())
            grid.invalidate(layout=True)
            engines.invalidate(layout=True)
        self._update_status()
        self._update_banner()

    def _track_vanished(self, report: Report, now: float) -> None:
        """Runtimes that left the stream stay named for VANISHED_KEEP_S (one report's warning
        was gone before anyone read it), until they report again."""
        # (pid, tag): runtimes whose pid the source does not know are told apart by their tag
        previous = {(r.known_pid, r.tag) for r in self.report.runtimes} if self.report else set()
        current = {(r.known_pid, r.tag) for r in report.runtimes}
        kept = {k: at for k, at in self.vanished.items()
                if k not in current and now - at < VANISHED_KEEP_S}
        for k in previous - current:
            kept.setdefault(k, now)
        self.vanished = dict(sorted(kept.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1])))

    # ------------------------------------------------------------------ rendering
    def show_report(self, report: Report) -> None:
        self.report = report
        tabs = app_tabs(report)
        if self.tab not in tabs:
            self.tab = ALL_TAB
        self._follow_tab()
        self.refresh_views()

    def _follow_tab(self) -> None:
        """Keep the selected core inside the selected app's cores."""
        cores = tab_cores(self.report, self.tab) if self.report else ()
        if cores and self.core not in cores:
            self.core = cores[0]

    def set_tab(self, tab: str) -> None:
        self.tab = tab
        self._follow_tab()
        self._tab_changed = True
        self.refresh_views()

    def refresh_views(self) -> None:
        report = self.report
        self.query_one(KeyFooter).show(self.view, self.readonly)
        self._update_status()
        self._update_banner()
        if report is None:
            return
        self.query_one(AppsBar).show(app_tabs(report), self.tab)
        runtimes = runtimes_for(report, self.tab)
        self._refresh_detail()
        if self.view == "overview":
            grid = core_grid(report, runtimes, own_cores_only=self.tab != ALL_TAB)
            groups = None
            if self.size.width >= HISTORY_MIN_WIDTH:  # narrower, no history column: no cost
                groups = [(r.tag, cores, self.shown_history.runtime_series(runtime_key(r)))
                          for r in runtimes if (cores := tuple(sorted(r.neuroncore_counters.cores))
                                                if r.neuroncore_counters else ())]
            cores = tab_cores(report, self.tab) if self._tab_changed else ()
            self.query_one(CoreGridView).show(grid, self.show_flops, self.core, groups,
                                              top_core=min(cores) if cores else None)
            self._tab_changed = False
            self.query_one(VcpuPanel).show(vcpu_usage(report, runtimes))
            self.query_one(MemorySummaryView).show(memory_summary(runtimes))
            # Device memory changes rarely: skip the rebuild unless the bytes do (not the period,
            # which jitters in every report).
            memory = (self.tab, core_layout(report)[1],
                      tuple(replace(r.memory_used, period=None) if r.memory_used else None
                            for r in runtimes))
            if memory != self._tree_input:
                self._tree_input = memory
                self.query_one(MemoryTreeView).show(build_tree(runtimes, memory[1]))
            self.call_after_refresh(self.query_one(Overview).fit)   # once laid out anew
        elif self.view == "engines":
            self.query_one(EngineView).show(report, self.shown_history, self.core,
                                            None if self.tab == ALL_TAB else runtimes)
        else:
            rows = process_rows(report, self.sort_key, self.sort_reverse, self.filter_text,
                                runtimes)
            tree = tree_lines(rows, self.lineages) if self.tree_mode else None
            self.query_one(ProcessTable).show(rows, self.sort_key, self.sort_reverse,
                                              self.filter_text, tree)

    @property
    def shown_history(self) -> History:
        """The history up to the report on screen: reports that arrive while paused go on
        filling `history`, but the graphs stay with the paused report (its figures and its
        graph's last point are one reading)."""
        return self.paused_history if self.paused and self.paused_history is not None \
            else self.history

    def _refresh_detail(self) -> None:
        if self.detail_tag is not None and isinstance(self.screen, ProcessScreen):
            detail = process_detail(self.report, self.detail_pid, self.shown_history,
                                    self.detail_tag)
            self.screen.query_one(ProcessDetailView).show(detail)

    def _update_status(self) -> None:
        report = self.report
        parts = ["PAUSED"] if self.paused else []
        if skipped := malformed_text(self.malformed):
            parts.append(skipped)
        if self.stopped_at is not None:
            parts.append("instance stopped")
        parts.append(self.source.label)
        self.query_one(TitleBar).show(*instance_title(report), " · ".join(parts))

    def _update_banner(self) -> None:
        # tui/status.py: what the stream lacks, and why nothing shows yet
        faults = stream_faults(self.report, self.vanished, self.source.rejections)
        self.query_one(Banner).show(faults, self._stale_text())

    def _stale_text(self) -> str:
        if self.stopped_at is not None:
            return (f"instance stopped at {clock_text(self.stopped_at)}; showing its last state "
                    f"(from {self.source.label})")
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
        try:
            self._update_banner()
        except NoMatches:  # the interval fired while the app was closing its screens
            pass

    # ------------------------------------------------------------------ actions (tui.keys)
    def notify(self, message: str, *, markup: bool = False, **options) -> None:
        """Notifications carry tags, paths and URLs from the data: plain text, not markup (a
        tag "[/]" would otherwise end the app in a markup error)."""
        super().notify(message, markup=markup, **options)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(__version__))

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.paused_history = copy.deepcopy(self.history) if self.paused else None
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
        self.set_tab(tabs[(index + step) % len(tabs)])

    def action_tab_number(self, number: int) -> None:
        tabs = app_tabs(self.report) if self.report else (ALL_TAB,)
        if number <= len(tabs):
            self.set_tab(tabs[number - 1])

    def action_expand_all(self) -> None:
        self.query_one(MemoryTreeView).toggle_all()

    def action_view(self, name: str) -> None:
        if isinstance(self.screen, ProcessScreen):
            self.screen.dismiss(None)
        self.view = name
        self.query_one(ContentSwitcher).current = VIEWS[name]
        focus = {"overview": "#tree", "engines": "#grid", "processes": "#procs"}[name]
        if name != "engines":
            self.query_one(focus).focus()
        self.refresh_views()

    def action_cycle_view(self) -> None:
        names = list(VIEWS)
        self.action_view(names[(names.index(self.view) + 1) % len(names)])

    def action_core(self, step: int) -> None:
        """Step through the selected app's cores (every core on the ``all`` tab)."""
        if self.report is None:
            return
        cores = tab_cores(self.report, self.tab)
        if not cores:
            return
        index = cores.index(self.core) if self.core in cores else 0
        self.select_core(cores[min(max(index + step, 0), len(cores) - 1)])

    def select_core(self, core: int) -> None:
        if self.report is None:
            return
        devices, per_device = core_layout(self.report)
        core = min(max(core, 0), devices * per_device - 1)
        cores = tab_cores(self.report, self.tab)
        if cores and core not in cores:  # another app's core: the tab keeps its own
            return
        self.core = core
        self.refresh_views()

    def set_sort(self, key: str) -> None:
        """Choose a sort column; choosing the current one again reverses it."""
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_key, self.sort_reverse = key, highest_first(key)
        self.refresh_views()

    def action_sort(self) -> None:
        self.set_sort(SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)])

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

    def sort_by_command(self, key: str) -> None:
        """The palette's "Sort processes by …": show the table, sorted by ``key``."""
        if key != self.sort_key:
            self.set_sort(key)
        if self.view != "processes":
            self.action_view("processes")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from app_commands(self)
        yield from self.textual_commands(screen)

    def textual_commands(self, screen: Screen) -> Iterator[SystemCommand]:
        """Textual's own commands (theme, keys, quit) but its screenshot: ours saves where the
        user is, and says where."""
        for command in App.get_system_commands(self, screen):
            if command.title != "Screenshot":
                yield command

    def action_save_screenshot(self) -> None:
        """An SVG of the screen, in the working directory; the path shows in a notification."""
        stem = time.strftime("neuron-top_%Y%m%d_%H%M%S", time.localtime(self.clock()))
        try:
            path = write_new_file(os.getcwd(), stem, ".svg", self.export_screenshot())
        except OSError as exc:
            self.notify(f"screenshot not saved: {exc.strerror or exc}", severity="error")
            return
        self.notify(f"screenshot saved: {path}", title="neuron-top")

    def action_next_theme(self) -> None:
        names = sorted(self.available_themes)
        self.theme = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]

    # ------------------------------------------------------------------ messages up from widgets
    def on_core_grid_view_core_selected(self, message: CoreGridView.CoreSelected) -> None:
        self.select_core(message.core)

    def on_apps_bar_tab_clicked(self, message: AppsBar.TabClicked) -> None:
        self.set_tab(message.tab)

    def on_process_table_sort_changed(self, message: ProcessTable.SortChanged) -> None:
        self.set_sort(message.key)

    def on_process_table_details_requested(self, message: ProcessTable.DetailsRequested) -> None:
        runtime = find_runtime(self.report, message.pid, message.tag) if self.report else None
        if runtime is None:
            return
        self.detail_pid, self.detail_tag = runtime.known_pid, runtime.tag

        def closed(_: None) -> None:
            self.detail_pid = self.detail_tag = None

        self.push_screen(ProcessScreen(runtime.known_pid, runtime.tag, self.readonly), closed)
        self.call_after_refresh(self._refresh_detail)

    def show_app(self, tag: str) -> None:
        """The process screen's ``o``: that runtime's tab on the overview."""
        self.tab = tag
        self._follow_tab()
        self.action_view("overview")

    def action_details(self) -> None:
        if self.view != "processes":
            self.action_view("processes")
        self.query_one(ProcessTable).action_details()

    def action_process_tree(self) -> None:
        """Runtimes under their parent processes (nvitop's tree view); again: the flat table."""
        self.tree_mode = not self.tree_mode
        if self.tree_mode:
            if self.lineage is None:
                self.notify("parent processes are looked up on this host; this source's "
                            "runtimes run elsewhere, so they show without parents")
            if self.report is not None and self.lineage is not None:
                # A handful of psutil reads, once, so the tree shows at once; later reports
                # look their parents up on the worker thread.
                self.lineages = {pid: self.lineage(pid) for pid in known_pids(self.report)}
        if self.view != "processes":
            self.action_view("processes")
        else:
            self.refresh_views()

    # ------------------------------------------------------------------ signals (I / T / K)
    def _signal_target(self) -> tuple[int, str] | None:
        if isinstance(self.screen, ProcessScreen):
            return self.screen.pid, self.screen.tag
        if self.view != "processes" or self.report is None:
            return None
        table = self.query_one(ProcessTable)
        return table.selected_key

    def action_signal(self, name: str) -> None:
        if isinstance(self.screen, ConfirmSignal):  # one question at a time
            return
        if self.readonly:
            self.notify("read-only (--readonly): no signals are sent", severity="warning")
            return
        target = self._signal_target()
        if target is None:
            self.notify("select a runtime in the process table (p) to send a signal")
            return
        if self.lineage is None:
            self.notify(f"{self.source.label}: its runtimes are not processes on this host; "
                        "signals are off", severity="warning")
            return
        pid, tag = target
        if pid is None:
            self.notify(f"{tag}: its pid is not known; no signal is sent", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.send_signal(pid, tag, name)

        self.push_screen(ConfirmSignal(f"Send {name} to pid {pid} ({tag})?"), answered)

    def send_signal(self, pid: int, tag: str, name: str) -> None:
        try:
            os.kill(pid, SIGNALS[name])
        except ProcessLookupError:
            self.notify(f"pid {pid} ({tag}) has already exited", severity="warning")
        except PermissionError:
            self.notify(f"not permitted to signal pid {pid} ({tag})", severity="error")
        else:
            self.notify(f"sent {name} to pid {pid} ({tag})")
