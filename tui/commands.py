"""neuron-top's own commands for the command palette (ctrl+p), from the app's current state."""
from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any, Callable, Protocol

from textual.app import SystemCommand

from monitor.report import Report
from tui.fleet_view import HEADERS, SORT_KEYS
from tui.procs import COLUMNS
from tui.view import app_tabs


class Commandable(Protocol):
    """What the palette's commands read and call on the app (the app itself, without importing it)."""

    report: Report | None
    paused: bool
    show_flops: bool
    action_view: Callable[[str], Any]
    set_tab: Callable[[str], Any]
    sort_by_command: Callable[[str], Any]
    action_reverse: Callable[[], Any]
    action_pause: Callable[[], Any]
    action_toggle_flops: Callable[[], Any]
    action_expand_all: Callable[[], Any]
    action_process_tree: Callable[[], Any]
    action_save_screenshot: Callable[[], Any]

VIEW_HELP = {"overview": "the NeuronCore grid, vCPU and memory (AWS's layout)",
             "engines": "per-engine bars and history, HBM and power of the selected core",
             "processes": "the table of runtime processes"}


def app_commands(app: Commandable) -> Iterator[SystemCommand]:
    for view, help_text in VIEW_HELP.items():
        yield SystemCommand(f"View: {view}", help_text, partial(app.action_view, view))
    tabs = app_tabs(app.report) if app.report else ("all",)
    for number, tab in enumerate(tabs, start=1):
        yield SystemCommand(f"App: {tab}", f"show Neuron Apps tab {number}", partial(app.set_tab, tab))
    for key, title, *_ in COLUMNS:
        if key != "status":
            yield SystemCommand(f"Sort processes by {title}", f"sort the process table by {title}",
                                partial(app.sort_by_command, key))
    yield SystemCommand("Reverse the sort order", "processes: reverse the sort order",
                        app.action_reverse)
    yield SystemCommand("Resume" if app.paused else "Pause",
                        "pause / resume the display (reports keep arriving)", app.action_pause)
    yield SystemCommand("Show utilization" if app.show_flops else "Show TFLOPs",
                        "NeuronCore grid: utilization % <-> TFLOPs", app.action_toggle_flops)
    yield SystemCommand("Expand / collapse the memory tree", "the whole Memory Usage Details tree",
                        app.action_expand_all)
    yield SystemCommand("Process tree", "processes: runtimes under their parent processes",
                        app.action_process_tree)
    yield SystemCommand("Save screenshot", "save an SVG of the screen in the working directory",
                        app.action_save_screenshot)


class FleetCommandable(Protocol):
    """What the fleet screen's commands call on it."""

    sort_by: Callable[[str], Any]
    action_reverse: Callable[[], Any]
    action_filter: Callable[[], Any]
    action_open: Callable[[], Any]


def fleet_commands(screen: FleetCommandable,
                   save_screenshot: Callable[[], Any]) -> Iterator[SystemCommand]:
    """The palette on the fleet screen: its own commands (the host views' apply once an
    instance is open)."""
    yield SystemCommand("Open the selected instance", "the host screens of the instance under "
                        "the cursor, built from Prometheus (esc returns)", screen.action_open)
    for key in SORT_KEYS:
        yield SystemCommand(f"Sort instances by {HEADERS[key]}", f"sort the fleet table by {key}",
                            partial(screen.sort_by, key))
    yield SystemCommand("Reverse the sort order", "fleet: reverse the sort order",
                        screen.action_reverse)
    yield SystemCommand("Filter instances", "by instance id, type, AZ, up/down or runtime tag",
                        screen.action_filter)
    yield SystemCommand("Save screenshot", "save an SVG of the screen in the working directory",
                        save_screenshot)
