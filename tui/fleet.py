"""neuron-top's fleet screen: every instance a Prometheus scrapes, one row each; Enter drills down.

``FleetApp`` is neuron-top itself (the single-host screens, unchanged) with the fleet screen
pushed on top. A background worker runs ``FleetQuery.fetch`` every refresh and posts the
snapshot; when Prometheus cannot be reached the banner says so and the last good snapshot
stays. Enter on an instance swaps the app's Source for a ``PrometheusHostSource`` of that
instance and shows the host screens; Escape comes back to the fleet.
"""
from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError

from textual import work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input

from monitor.fleet import (DEFAULT_SCRAPE_INTERVAL_S, FleetQuery, FleetSnapshot, InstanceRow,
                           rate_window, same_rows)
from monitor.fleet_host import PrometheusHostSource
from monitor.promql import PrometheusClient, PrometheusError
from monitor.report import Report
from monitor.sources import Source
from tui import __version__
from tui.app import NeuronTopApp
from tui.commands import fleet_commands
from tui.fleet_view import (SORT_KEYS, clock_text, down_note, fleet_rows, source_line,
                             totals_line)
from tui.history import History
from tui.keys import fleet_bindings, fleet_help_lines, help_lines
from tui.paint import paint_now
from tui.view import ALL_TAB
from tui.widgets.fleet import FleetHeader, FleetTable
from tui.widgets.footer import KeyFooter
from tui.widgets.help import HelpScreen

# host-screen actions that make no sense while the fleet screen is on top
FLEET_ACTIONS = {"quit", "help", "next_theme", "command_palette", "save_screenshot"}


def no_rows_text(url: str, selector: str) -> str:
    """Why the table is empty: no exporter scraped, or a selector no instance matches (it
    filters instance_info's labels: a runtime_tag= matches nothing)."""
    if selector:
        return (f"no instance at {url} matches {{{selector}}}: the selector filters instances "
                "by instance_info's labels (instance_id, instance_type, availability_zone, "
                "region, ...)")
    return (f"no neuron metrics at {url}: no instance_info series; is "
            "neuron-monitor-prometheus being scraped?")


class FleetArrived(Message):
    def __init__(self, snapshot: FleetSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class FleetFailed(Message):
    def __init__(self, error: str, at: float) -> None:
        super().__init__()
        self.error = error
        self.at = at


class IdleSource(Source):
    """The host screens' source until an instance is opened: no reports, until closed."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def reports(self) -> Iterator[Report]:
        self._stop.wait()
        return iter(())


class FleetScreen(Screen):
    """Attributes down from the app: ``show(snapshot, error, ...)``. Keys: tui.keys.FLEET_KEYS."""

    DEFAULT_CSS = """
    FleetScreen { layout: vertical; }
    FleetScreen #fleet-filter { dock: bottom; display: none; }
    FleetScreen #fleet-filter.-visible { display: block; }
    """
    BINDINGS = fleet_bindings()

    def __init__(self, url: str, selector: str) -> None:
        super().__init__(id="fleet")
        self.url, self.selector = url, selector
        self.snapshot: FleetSnapshot | None = None
        self.error, self.error_since = "", None
        self.asked_down = ""   # a down instance opened: its line shows while it is selected
        self.sort_key, self.reverse, self.filter_text = "instance_id", False, ""
        self.header = FleetHeader(id="fleet-header")
        self.table = FleetTable(id="fleet-table")
        self.points = 2 * 14   # history samples per row; set from the table's width on resize

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.table
        yield Input(placeholder="instance id, type, AZ, up/down or runtime tag; "
                                "enter applies, esc clears", id="fleet-filter")
        yield KeyFooter(id="fleet-footer", view="fleet")

    def on_mount(self) -> None:
        self.query_one(FleetTable).focus()
        self.redraw()

    def on_fleet_table_highlighted(self, message: FleetTable.Highlighted) -> None:
        if self.asked_down and message.instance_id != self.asked_down:
            self.asked_down = ""
            self.redraw(rows_changed=False)

    def action_open(self) -> None:   # the footer's "enter open", clicked
        self.table.action_open()

    def history_points(self) -> int:
        """Samples per history graph (two per braille cell); read by the worker thread."""
        return self.points

    def redraw(self, rows_changed: bool = True) -> None:
        """Header and table from the snapshot; ``rows_changed=False``: the table already
        shows these rows (a refresh that brought no new sample), only the header is redone."""
        snap = self.snapshot
        banner = ""
        if self.error:
            kept = f"; showing data from {clock_text(snap.at)}" if snap else ""
            banner = f"{self.error} (since {clock_text(self.error_since)}){kept}"
        notes = tuple(snap.problems) if snap else ()
        down = next((r for r in snap.rows if r.instance_id == self.asked_down and not r.up),
                    None) if snap and self.asked_down else None
        self.asked_down = down.instance_id if down else ""   # up again or gone: the line goes
        if down:
            notes = (down_note(down), *notes)
        if snap is None:
            totals = "neuron-top fleet view"
            empty = "waiting for Prometheus…" if not self.error else "no data yet"
        else:
            totals = totals_line(snap.totals, snap)
            empty = no_rows_text(self.url, self.selector)
        self.header.show(totals, source_line(self.url, self.selector, snap),
                                         banner, notes)
        if rows_changed:
            rows = fleet_rows(snap, self.sort_key, self.reverse, self.filter_text)
            self.table.show(rows, self.sort_key, self.reverse, self.filter_text, empty)
        paint_now(self, (self.header, self.table))

    # ------------------------------------------------------------------ keys
    def action_sort(self) -> None:
        self.sort_key = SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)]
        self.redraw()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self.redraw()

    def sort_by(self, key: str) -> None:
        """The palette's "Sort instances by …" (the order stays as it is)."""
        self.sort_key = key
        self.redraw()

    def action_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.value = self.filter_text
        box.add_class("-visible")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.filter_text = event.value.strip()
        self._close_filter()

    def _close_filter(self) -> None:
        self.query_one("#fleet-filter").remove_class("-visible")
        self.table.focus()
        self.redraw()

    def action_clear_filter(self) -> None:
        if self.query_one("#fleet-filter").has_class("-visible") or self.filter_text:
            self.filter_text = ""
            self._close_filter()

    def on_fleet_table_sort_changed(self, message: FleetTable.SortChanged) -> None:
        if message.key == self.sort_key:
            self.reverse = not self.reverse
        self.sort_key = message.key
        self.redraw()

    def on_resize(self) -> None:
        self.points = max(2, 2 * self.table.history_width(self.size.width or 80))
        self.redraw()


class FleetApp(NeuronTopApp):
    """neuron-top over Prometheus: the fleet screen on top of the single-host screens."""

    BINDINGS = [*NeuronTopApp.BINDINGS, Binding("escape", "fleet", "fleet")]

    def __init__(self, fleet: FleetQuery, *, selector: str = "", refresh: float = 2.0,
                 clock: Callable[[], float] = time.time, poll: bool = True,
                 history_length: int = 300, url_label: str | None = None) -> None:
        client: PrometheusClient = fleet.client
        self.url_label = url_label or client.url   # how the server is named on screen
        super().__init__(IdleSource(f"prometheus {self.url_label}"), clock=clock,
                         history_length=history_length)
        self.fleet = fleet
        self.client = client
        self.refresh_s = refresh
        self.poll = poll
        self.history_length = history_length
        self.fleet_screen = FleetScreen(self.url_label, selector)
        self.opened: InstanceRow | None = None
        self._stop_polling = threading.Event()
        self._frozen = False
        self._wake = threading.Event()

    def on_mount(self) -> None:
        super().on_mount()
        self.install_screen(self.fleet_screen, name="fleet")  # kept while the host screens show
        self.push_screen("fleet")
        if self.poll:
            self.poll_fleet()
        self.call_after_refresh(self._freeze_heap)

    def _freeze_heap(self) -> None:
        # The app's own objects (widgets, CSS, styles: most of the heap) live as long as the
        # app; frozen, the collector stops walking them on every full collection, which
        # otherwise stalls a refresh by tens of milliseconds now and then. Undone on unmount.
        gc.collect()
        gc.freeze()
        self._frozen = True

    def on_unmount(self) -> None:
        self._stop_polling.set()
        self._wake.set()
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
        super().on_unmount()
        self.fleet.close()

    # ------------------------------------------------------------------ the fleet worker
    @work(thread=True, exclusive=True, group="fleet", name="fleet-poll")
    def poll_fleet(self) -> None:
        while not self._stop_polling.is_set():
            if self.opened is None:
                self.fetch_once()
            self._wake.wait(self.refresh_s)
            self._wake.clear()

    def fetch_once(self) -> None:
        """One refresh (also called directly by tests and the benchmark)."""
        try:
            snapshot = self.fleet.fetch(self.fleet_screen.history_points())
        except PrometheusError as exc:
            self.post_message(FleetFailed(str(exc), self.clock()))
            return
        except (CancelledError, RuntimeError):   # the app closed while a refresh was in flight
            if self._stop_polling.is_set():
                return
            raise
        self.post_message(FleetArrived(snapshot))

    def on_fleet_arrived(self, message: FleetArrived) -> None:
        screen = self.fleet_screen
        previous, snapshot = screen.snapshot, message.snapshot
        screen.snapshot, screen.error, screen.error_since = snapshot, "", None
        # Refreshes come faster than scrapes (2 s against 15 s by default): one that brought
        # no new sample redraws only the header's refresh time, not the table.
        screen.redraw(rows_changed=previous is None or
                      not same_rows(previous.rows, snapshot.rows))

    def on_fleet_failed(self, message: FleetFailed) -> None:
        screen = self.fleet_screen
        if not screen.error:
            screen.error_since = message.at
        screen.error = message.error
        screen.redraw()

    # ------------------------------------------------------------------ drill down and back
    def on_fleet_table_opened(self, message: FleetTable.Opened) -> None:
        row = message.row
        if not row.up:
            self.fleet_screen.asked_down = row.instance_id
            self.fleet_screen.redraw()
            return
        self.fleet_screen.asked_down = ""
        snapshot = self.fleet_screen.snapshot   # no network call on the UI thread
        interval = snapshot.scrape_interval if snapshot else DEFAULT_SCRAPE_INTERVAL_S
        self.source.close()
        self.source = PrometheusHostSource(self.client, row.instance_id, row.target, row.job,
                                           period=max(1.0, min(self.refresh_s, 5.0)),
                                           rate_window=rate_window(interval), clock=self.clock,
                                           label=f"prometheus {self.url_label} · {row.instance_id}")
        self.opened = row
        self.report, self.pending, self.reports_seen = None, None, 0
        self.history = History(self.history_length)
        self.last_received, self.ended, self.vanished = None, None, {}
        self.tab, self.core, self._tree_input = ALL_TAB, 0, None
        self.pop_screen()
        self.pump_reports()
        self.refresh_views()

    def action_help(self) -> None:
        # the keys of the screen it was asked on: the fleet's, or the host screens' and the way back
        if self._host_visible():
            lines = [*help_lines(), ("esc", "back to the fleet (clears a process filter first)")]
            self.push_screen(HelpScreen(__version__, lines))
        else:
            self.push_screen(HelpScreen(__version__, fleet_help_lines(), "fleet keys"))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        if self._host_visible():
            yield from super().get_system_commands(screen)
            return
        yield from fleet_commands(self.fleet_screen, self.action_save_screenshot)
        yield from self.textual_commands(screen)

    def back_to_fleet(self) -> None:
        self.source.close()
        self.source = IdleSource(f"prometheus {self.url_label}")
        self.opened = None
        self.push_screen("fleet")
        self._wake.set()   # refresh the fleet at once

    def action_fleet(self) -> None:
        """Escape on the host screens: clear the process filter first, else back to the fleet."""
        if not self._host_visible():
            return
        if self.query_one("#filter").has_class("-visible") or self.filter_text:
            super().key_escape()
        else:
            self.back_to_fleet()

    def take_report(self, message) -> None:
        # a report of the instance left behind may still be in flight
        if self.opened is None or message.report.instance.id != self.opened.instance_id:
            return
        super().take_report(message)

    # ------------------------------------------------------------------ host screens only when shown
    def _host_visible(self) -> bool:
        return len(self.screen_stack) == 1

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self._host_visible() and action not in FLEET_ACTIONS:
            return False
        return True

    def refresh_views(self) -> None:
        if self._host_visible():
            super().refresh_views()

    def _update_status(self) -> None:
        if self._host_visible():
            super()._update_status()

    def _update_banner(self) -> None:
        if self._host_visible():
            super()._update_banner()
