"""Snapshots of every neuron-top screen from the seeded demo stream (fixed clock, fixed size)."""
from __future__ import annotations

import pytest

from tests.test_tui_support import demo_reports, make_app, settle
from tui.ptree import Ancestor

FRAMES = 14  # includes the execution-error window of the demo stream: the fault banner shows
PARENTS = (Ancestor(1, "init", "root"), Ancestor(4100, "bash", "ops"))


def fixed_lineage(pid: int) -> tuple[Ancestor, ...]:
    """Deterministic parents for the demo's pids (they are not processes of this host)."""
    return PARENTS if pid != 60313 else PARENTS[:1]


def app_after(frames: int = FRAMES):
    app = make_app(demo_reports(frames), lineage=fixed_lineage)

    async def ready(pilot):
        await settle(pilot, app, frames)
        await pilot.pause(0.05)

    return app, ready


SCREENS = {
    "overview": (), "tflops": ("f",), "tree-expanded": ("x",), "engines": ("e",),
    "processes": ("p",), "help": ("question_mark",), "second-tab": ("d",),
    "process-detail": ("p", "enter"), "process-tree": ("p", "t"),
    "signal-confirm": ("p", "down", "T"), "third-tab-engines": ("3", "e"),
}


@pytest.mark.parametrize("size", [(160, 50), (120, 40), (80, 24)], ids=["160x50", "120x40", "80x24"])
@pytest.mark.parametrize("keys", list(SCREENS.values()), ids=list(SCREENS))
def test_screens(snap_compare, keys, size):
    app, ready = app_after()
    assert snap_compare(app, press=list(keys), terminal_size=size, run_before=ready)


def test_processes_sorted_and_filtered(snap_compare):
    app, ready = app_after()
    assert snap_compare(app, press=["p", "s", "s", "s", "r", "slash", *"tag:l", "enter"],
                        terminal_size=(160, 50), run_before=ready)
