"""Every screen and key of neuron-top on streams of every SDK shape and device (inf1 without flops,
inf2, trn2 LNC=1, trn3, Kubernetes info, null percentiles): each screen opens, draws and closes."""
from __future__ import annotations

import pytest

from monitor.report import Report
from tests.fixtures.sdk_streams import SHAPES
from tests.test_tui_support import make_app, run_async, settle

# Overview keys, the engines view, then the process table with its detail screen and tree.
BEFORE_DETAIL = ("f", "f", "x", "x", "d", "a", "e", "]", "[", "p", "s", "r")
AFTER_DETAIL = ("escape", "t", "t", "?", "escape", "o")


async def press(pilot, keys) -> None:
    for key in keys:
        await pilot.press(key)
        await pilot.pause()


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
@run_async
async def test_every_screen_draws_on_every_stream_shape(shape, size):
    report = Report.from_dict(SHAPES[shape]())
    app = make_app([report, report], readonly=True)
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, 2)
        await press(pilot, BEFORE_DETAIL)
        main_screen = app.screen
        await press(pilot, ("enter",))
        assert app.screen is not main_screen  # the runtime's detail screen is up
        await press(pilot, AFTER_DETAIL)
        assert app.screen is main_screen and app.is_running
    assert app.return_code in (None, 0)
