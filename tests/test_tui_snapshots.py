"""Snapshots of every neuron-top screen from the seeded demo stream (fixed clock, fixed size)."""
from __future__ import annotations

import pytest

from tests.test_tui_support import demo_reports, make_app, settle

FRAMES = 14  # includes the execution-error window of the demo stream: the fault banner shows


def app_after(frames: int = FRAMES):
    app = make_app(demo_reports(frames))

    async def ready(pilot):
        await settle(pilot, app, frames)

    return app, ready


@pytest.mark.parametrize("size", [(160, 50), (80, 24)], ids=["160x50", "80x24"])
@pytest.mark.parametrize("keys", [(), ("f",), ("x",), ("e",), ("p",), ("question_mark",), ("d",)],
                         ids=["overview", "tflops", "tree-expanded", "engines", "processes", "help",
                              "second-tab"])
def test_screens(snap_compare, keys, size):
    app, ready = app_after()
    assert snap_compare(app, press=list(keys), terminal_size=size, run_before=ready)


def test_processes_sorted_and_filtered(snap_compare):
    app, ready = app_after()
    assert snap_compare(app, press=["p", "s", "s", "s", "r"], terminal_size=(160, 50),
                        run_before=ready)
