"""Snapshots of the fleet screen from a recorded Prometheus (fixed clock, fixed sizes)."""
from __future__ import annotations

import pytest

from tests.test_fleet_support import RECORDING, ReplayServer, make_fleet_app, settle_fleet, settle_host


@pytest.fixture(scope="module")
def replay():
    server = ReplayServer(RECORDING)
    yield server
    server.close()


def fleet_app(url: str, drill: bool = False):
    app = make_fleet_app(url, url_label="http://prometheus.test:9090")  # the port varies

    async def ready(pilot):
        await settle_fleet(pilot, app)
        if drill:
            await pilot.press("down", "down", "enter")
            await settle_host(pilot, app)

    return app, ready


@pytest.mark.parametrize("size", [(160, 50), (80, 24)], ids=["160x50", "80x24"])
def test_fleet_screen(snap_compare, replay, size):
    app, ready = fleet_app(replay.url)
    assert snap_compare(app, terminal_size=size, run_before=ready)


def test_fleet_sorted_by_utilization_reversed(snap_compare, replay):
    app, ready = fleet_app(replay.url)
    assert snap_compare(app, press=["s"] * 5 + ["r"], terminal_size=(160, 50), run_before=ready)


def test_fleet_drill_down_overview(snap_compare, replay):
    app, ready = fleet_app(replay.url, drill=True)
    assert snap_compare(app, terminal_size=(160, 50), run_before=ready)


def test_fleet_help(snap_compare, replay):
    app, ready = fleet_app(replay.url)
    assert snap_compare(app, press=["question_mark"], terminal_size=(80, 24), run_before=ready)
