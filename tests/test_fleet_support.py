"""Shared set-up for the fleet screen tests: a recorded Prometheus answering over HTTP."""
from __future__ import annotations

import copy
import os
import sys
import time

import pytest

from tests.test_tui_support import FIXTURES

sys.path.insert(0, str(FIXTURES))
from fleet_replay import ReplayServer, load  # noqa: E402

from monitor.fleet import FleetConfig, FleetQuery  # noqa: E402
from monitor.promql import PrometheusClient  # noqa: E402
from tui.fleet import FleetApp  # noqa: E402

RECORDING = load()
AT = RECORDING["at"]
# what AWS's exporter does not serve
OWN_METRICS = ("neuron_core_", "neuron_device_", "neuron_runtime_info", "neuron_runtime_model_")

os.environ["TZ"] = "UTC"   # the screen prints wall-clock times
time.tzset()


def aws_only(recording: dict) -> dict:
    """The same answers as a Prometheus scraping AWS's exporter would give: no neuronscope
    metric exists, so every query over one answers an empty result."""
    out = copy.deepcopy(recording)
    for key, entry in out.items():
        if key != "at" and any(name in key for name in OWN_METRICS):
            entry["body"]["data"]["result"] = []
    return out


@pytest.fixture
def replay():
    """A Prometheus answering from RECORDING, for one test (import it into the test module)."""
    server = ReplayServer(RECORDING)
    yield server
    server.close()


def make_fleet_app(url: str, *, refresh: float = 3600.0, selector: str = "",
                   url_label: str | None = None) -> FleetApp:
    client = PrometheusClient(url, timeout=5.0)
    fleet = FleetQuery(client, FleetConfig(), clock=lambda: AT)
    return FleetApp(fleet, selector=selector, refresh=refresh, clock=lambda: AT,
                    url_label=url_label)


async def settle_fleet(pilot, app: FleetApp) -> None:
    """Wait for the first fleet snapshot (or failure) to be on screen."""
    for _ in range(500):
        screen = app.fleet_screen
        if screen.snapshot is not None or screen.error:
            break
        await pilot.pause(0.01)
    assert app.fleet_screen.snapshot is not None or app.fleet_screen.error
    await pilot.pause()


async def settle_host(pilot, app: FleetApp) -> None:
    for _ in range(500):
        if app.report is not None:
            break
        await pilot.pause(0.01)
    assert app.report is not None
    await pilot.pause()


__all__ = ["ReplayServer", "RECORDING", "AT", "aws_only", "make_fleet_app", "settle_fleet",
           "settle_host"]
