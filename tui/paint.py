"""Compose a screen's next frame at once, for widgets whose new data only repaints them.

Textual paints a refreshed widget after four turns of the event loop: the widget's own idle
check, an Update message to its screen, the screen's idle check, then the screen's update
timer. On the fleet screen, redrawn every refresh for 64 changing rows, those turns are a
seventh of neuron-top's CPU per refresh beyond the queries (~0.7 ms on a 2-vCPU machine, about
what the table's rows cost to build). ``paint_now`` hands the widgets to the screen's
compositor and paints in the caller's step: the same frame, composed the same way.

It reaches into Textual's screen (its dirty-widget set and update step), which is not public
API, so it checks that what it needs is there and otherwise leaves the refresh to Textual: with
another Textual version the screen draws the same, only a little later.
"""
from __future__ import annotations

from collections.abc import Iterable

from textual.dom import NoScreen
from textual.screen import Screen
from textual.widget import Widget


def paint_now(screen: Screen, widgets: Iterable[Widget]) -> bool:
    """Paint ``widgets``' pending repaints into ``screen``'s next frame now (widgets of other
    screens are left alone). False (nothing done: Textual paints them as usual) when a layout
    or scroll is pending, the screen is not the one shown, updates are batched, or this
    Textual lacks what is used here."""
    widgets = tuple(widgets)
    try:
        dirty = screen._dirty_widgets
        update = screen._on_timer_update
        batched = screen.app._batch_count
        busy = (screen._layout_required or screen._scroll_required or
                any(w._layout_required or w._scroll_required for w in widgets))
        # only the screen's own widgets: another screen's would lose their repaint here
        pending = [w for w in widgets if w._repaint_required and w.display and w.screen is screen]
    except (AttributeError, NoScreen):
        return False
    if (busy or batched or not pending or not isinstance(dirty, set) or not callable(update)
            or not screen.is_current):
        return False
    for widget in pending:
        # what the widget's idle check would do: hand itself to the screen as dirty (its
        # dirty regions go with it); its idle check then finds nothing left to do
        widget._repaint_required = False
        dirty.add(widget)
    try:
        update()
    except TypeError:   # an update step that takes other arguments: back to Textual's path
        for widget in pending:
            dirty.discard(widget)
            widget._repaint_required = True
        return False
    return True
