"""The fleet view's host screens take each report of the instance opened once. Textual calls an
``on_report_arrived`` of every class in the MRO: FleetApp's override and NeuronTopApp's both ran,
so each report was counted and pushed into the history twice."""
from __future__ import annotations

from tests.test_fleet_support import (RECORDING, ReplayServer, make_fleet_app, settle_fleet,
                                      settle_host)
from tests.test_tui_support import run_async


@run_async
async def test_a_host_report_is_taken_once():
    server = ReplayServer(RECORDING)
    try:
        app = make_fleet_app(server.url)
        async with app.run_test(size=(160, 50)) as pilot:
            await settle_fleet(pilot, app)
            await pilot.press("down", "down", "enter")
            await settle_host(pilot, app)
            await pilot.pause(0.2)
            # one fetch so far: the host source asks again only after its period (5 s here)
            assert app.reports_seen == 1
            assert app.history.core_util.count == 1
    finally:
        server.close()
