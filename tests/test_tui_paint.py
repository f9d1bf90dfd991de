"""tui.paint.paint_now: the fleet screen paints a refresh in the handler's own step, and the
frames are the ones Textual's own path paints."""
from __future__ import annotations

import dataclasses
import types
from contextlib import asynccontextmanager

import tui.fleet
from tests.test_fleet_support import make_fleet_app, replay, settle_fleet  # noqa: F401
from tests.test_tui_support import run_async
from tui.fleet import FleetArrived
from tui.paint import paint_now


def _moved(snapshot, step: int):
    """The snapshot with every up row's readings moved, as a new scrape brings."""
    rows = tuple(dataclasses.replace(r, util_mean=(0.1 + 0.07 * step + 0.01 * i) % 1,
                                     power_watts=(r.power_watts or 0) + step)
                 if r.up else r for i, r in enumerate(snapshot.rows))
    return dataclasses.replace(snapshot, rows=rows, at=snapshot.at + step)


@asynccontextmanager
async def _fleet(url: str):
    """The fleet app at 120x30 with its first snapshot on screen: (app, pilot)."""
    app = make_fleet_app(url)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle_fleet(pilot, app)
        yield app, pilot


@run_async
async def _frames(url: str) -> tuple[list[str], list[int]]:
    """The screen after each of a few refreshes, a sort, a reverse and cursor moves, and how
    many frames each refresh painted before its handler returned."""
    shots, in_step = [], []
    async with _fleet(url) as (app, pilot):
        frames = []
        display = app._display
        app._display = lambda s, r: (frames.append(r), display(s, r))
        first = app.fleet_screen.snapshot
        for step in range(1, 4):
            frames.clear()
            app.on_fleet_arrived(FleetArrived(_moved(first, step)))
            in_step.append(sum(r is not None for r in frames))
            await pilot.pause()
            shots.append(app.export_screenshot())
        for key in ("s", "r", "down", "down", "up"):
            await pilot.press(key)
            await pilot.pause()
            shots.append(app.export_screenshot())
    return shots, in_step


def test_a_refresh_is_painted_in_its_step_and_looks_as_textual_paints_it(replay, monkeypatch):
    painted, in_step = _frames(replay.url)
    assert in_step == [1, 1, 1]   # the frame is out before the handler returns
    monkeypatch.setattr(tui.fleet, "paint_now", lambda screen, widgets: False)
    plain, later = _frames(replay.url)
    assert later == [0, 0, 0]     # Textual's own path paints on a later turn of the loop
    assert painted == plain       # the same screens, refresh after refresh and key after key


def test_without_the_internals_it_leaves_the_refresh_to_textual():
    assert paint_now(types.SimpleNamespace(), ()) is False


@run_async
async def test_an_update_step_of_another_shape_is_left_to_textual(replay, monkeypatch):
    async with _fleet(replay.url) as (app, pilot):
        screen = app.fleet_screen
        monkeypatch.setattr(screen, "_on_timer_update", lambda required: None)
        app.on_fleet_arrived(FleetArrived(_moved(screen.snapshot, 1)))   # painted anyway
        assert screen.table._repaint_required and screen.table not in screen._dirty_widgets
        monkeypatch.undo()
        await pilot.pause()
        assert not screen.table._repaint_required


@run_async
async def test_a_pending_layout_is_left_to_textual(replay):
    async with _fleet(replay.url) as (app, pilot):
        screen = app.fleet_screen
        screen.header.show("a new totals line", "source", "outage", ("note",))  # more lines
        assert screen.header._layout_required
        assert paint_now(screen, (screen.header, screen.table)) is False
        await pilot.pause()
        assert "outage" in app.export_screenshot()
