"""Shared set-up for the neuron-top tests: deterministic reports, a fixed clock, settling."""
from __future__ import annotations

import asyncio
import functools
import pathlib

from monitor.report import Report
from tui.app import NeuronTopApp
from tests.fixtures.demo_stream import generate
from monitor.sources import ListSource

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
AWS_EXAMPLE = FIXTURES / "neuron_monitor_aws_example.json"
FIXED_NOW = 1_764_480_000.0  # 2025-11-30 05:20:00 UTC


def demo_reports(frames: int = 6) -> list[Report]:
    return [Report.from_json(line) for line in generate(frames, seed=7)]


def make_app(reports: list[Report] | None = None, clock=lambda: FIXED_NOW, **kwargs) -> NeuronTopApp:
    source = ListSource(demo_reports() if reports is None else reports, label="test stream",
                        hold_open=True)
    return NeuronTopApp(source, clock=clock, **kwargs)


async def settle(pilot, app: NeuronTopApp, reports: int) -> None:
    """Wait until the worker has delivered ``reports`` reports, then let the screen update."""
    for _ in range(500):
        if app.reports_seen >= reports:
            break
        await pilot.pause(0.01)
    assert app.reports_seen >= reports
    await pilot.pause()


def run_async(test):
    """Run an async test function with asyncio (no async pytest plugin needed)."""
    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))
    return wrapper
