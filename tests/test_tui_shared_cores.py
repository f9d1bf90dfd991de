"""Two runtimes reporting one core (my_app_1 and my_app_2 on core 0, 42.01 % each): the ``all``
tab adds their shares up (84.02 %), every view of one app shows that app's own share."""
from __future__ import annotations

from monitor.report import Report
from tests.test_tui_support import FIXTURES, make_app, run_async, settle
from tui import history as tui_history, view
from tui.procdetail import process_detail
from tui.widgets.engines import EngineView
from tui.widgets.grid import CoreGridView
from tui.widgets.processes import ProcessTable
from tui.widgets.procscreen import ProcessDetailView

SHARED = Report.from_json((FIXTURES / "neuron_monitor_latency_null.json").read_bytes())


def text(widget) -> str:
    return "\n".join(line.text for line in widget.lines_for(widget.size.width))


def test_the_fixture_has_two_runtimes_on_core_0():
    owners = [r.tag for r in SHARED.runtimes if 0 in r.neuroncore_counters.cores]
    assert owners == ["my_app_1", "my_app_2"]


def test_history_keeps_each_runtimes_own_share_and_the_host_total():
    history = tui_history.History(8)
    history.push(SHARED)
    history.push(SHARED)
    app_1, app_2 = (tui_history.runtime_key(r) for r in SHARED.runtimes)
    assert float(history.core_series(0)[-1]) == 0.8402   # the all tab: the shares added up
    for key in (app_1, app_2):
        assert float(history.runtime_series(key)[-1]) == 0.4201
        assert float(history.core_series(0, [key])[-1]) == 0.4201
    detail = process_detail(SHARED, 12346, history, "my_app_2")
    assert float(detail.history[0][1][-1]) == 0.4201   # its process screen: its own share


def test_a_cores_share_is_the_selected_runtimes_only():
    alone = view.core_share(SHARED.runtimes[:1], 0)
    assert [r.tag for r in alone.owners] == ["my_app_1"] and alone.utilization == 0.4201
    both = view.core_share(SHARED.runtimes, 0)
    assert [r.tag for r in both.owners] == ["my_app_1", "my_app_2"]
    assert both.utilization == 0.8402


@run_async
async def test_an_app_tab_shows_its_own_share_in_the_history_and_engines_view():
    app = make_app([SHARED, SHARED])
    async with app.run_test(size=(130, 40)) as pilot:
        await settle(pilot, app, 2)
        await pilot.press("2")   # my_app_1
        await pilot.pause()
        label = next(line for line in text(app.query_one(CoreGridView)).splitlines()
                     if "my_app_1 · NC 0" in line)
        assert "42.01%" in label and "84.02%" not in label
        await pilot.press("e")
        await pilot.pause()
        engines = text(app.query_one(EngineView))
        heading = engines.splitlines()[0]
        assert "my_app_1 (pid 12345)" in heading and "my_app_2" not in heading
        assert "utilization 42.01%" in heading
        core_line = next(line for line in engines.splitlines() if line.startswith("NeuronCore"))
        assert "42.01%" in core_line and "84.02%" not in core_line
        await pilot.press("1")   # the all tab: both runtimes, their shares added up
        await pilot.pause()
        heading = text(app.query_one(EngineView)).splitlines()[0]
        assert "my_app_1 (pid 12345) + my_app_2 (pid 12346)" in heading
        assert "utilization 84.02%" in heading


@run_async
async def test_the_process_screen_history_is_its_own_share():
    app = make_app([SHARED, SHARED])
    async with app.run_test(size=(130, 40)) as pilot:
        await settle(pilot, app, 2)
        await pilot.press("p")
        table = app.query_one(ProcessTable)
        table.cursor = [row.tag for row in table.rows].index("my_app_2")
        await pilot.press("enter")
        await pilot.pause(0.05)
        shown = text(app.screen.query_one(ProcessDetailView))
    assert "NC utilization 42.01%" in shown
    history = next(line for line in shown.splitlines() if line.startswith("NeuronCore"))
    assert "42.01%" in history and "84.02%" not in history
