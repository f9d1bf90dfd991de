"""A crowded host at 80x24: more runtimes than the process table has lines, more tabs than the
Apps bar has columns, tags that share a long prefix or hold control characters."""
from __future__ import annotations

import copy

import orjson

from monitor.report import Report
from monitor.sources import ListSource
from tests.test_tui_support import AWS_EXAMPLE, FIXED_NOW, run_async, settle
from tui.app import NeuronTopApp
from tui.widgets.panels import AppsBar, elide_middle, short_tab_names
from tui.widgets.processes import ProcessTable
from tui.widgets.procscreen import ProcessDetailView


def crowded(tags: list[str]) -> Report:
    """AWS's example report with one runtime per tag (pids 7000 and up), each on core i."""
    doc = orjson.loads(AWS_EXAMPLE.read_bytes())
    template = doc["neuron_runtime_data"][0]
    runtimes = []
    for index, tag in enumerate(tags):
        runtime = copy.deepcopy(template)
        runtime["pid"], runtime["neuron_runtime_tag"] = 7000 + index, tag
        counters = runtime["report"]["neuroncore_counters"]["neuroncores_in_use"]
        counters[str(index)] = counters.pop("0")
        runtimes.append(runtime)
    doc["neuron_runtime_data"] = runtimes
    return Report.from_dict(doc)


def workers(count: int = 24) -> list[str]:
    return [f"worker-{i:02d}" for i in range(count)]


def app_of(report: Report) -> NeuronTopApp:
    return NeuronTopApp(ListSource([report], label="test stream", hold_open=True),
                        clock=lambda: FIXED_NOW)


def screen_lines(widget) -> list[str]:
    """The widget's lines as drawn on screen (after its scrolling), not as built."""
    return [widget.render_line(y).text for y in range(widget.size.height)]


# ------------------------------------------------------------------ the process table scrolls
@run_async
async def test_the_process_table_follows_its_cursor_down_and_up():
    """Down x20 in 24 runtimes at 80x24: the cursor row left the screen and enter opened a
    process the user never saw."""
    app = app_of(crowded(workers()))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("p")
        table = app.query_one(ProcessTable)
        assert len(table.lines_for(table.size.width)) > table.size.height   # it must scroll
        await pilot.press(*["down"] * 20)
        shown = screen_lines(table)
        assert shown[0].split()[:2] == ["PID▲", "TAG"]   # the column header stays
        assert any(line.split()[:2] == ["7020", "worker-20"] for line in shown), shown
        assert "24 runtimes" in "\n".join(shown)   # and so does the summary under the rows
        await pilot.press("end")
        assert any(line.startswith("   7023 worker-23") for line in screen_lines(table))
        await pilot.press("home")
        assert screen_lines(table)[1].split()[:2] == ["7000", "worker-00"]


async def open_worker_20(pilot, app) -> None:
    """The process screen of the 21st runtime, reached by cursor from the top of the table."""
    await settle(pilot, app, 1)
    await pilot.press("p", *["down"] * 20, "enter")
    await pilot.pause()


@run_async
async def test_enter_opens_the_runtime_under_the_cursor_on_screen():
    app = app_of(crowded(workers()))
    async with app.run_test(size=(80, 24)) as pilot:
        await open_worker_20(pilot, app)
        assert app.screen.tag == "worker-20"


@run_async
async def test_a_click_on_a_scrolled_row_selects_that_row():
    app = app_of(crowded(workers()))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("p", "end")
        table = app.query_one(ProcessTable)
        row = next(y for y, line in enumerate(screen_lines(table)) if "worker-22" in line)
        frame = table.content_region.y - table.region.y   # its heading rule above the lines
        await pilot.click(ProcessTable, offset=(10, frame + row))
        assert table.selected_key == (7022, "worker-22")


# ------------------------------------------------------------------ the Apps bar
def bar_text(app) -> str:
    bar = app.query_one(AppsBar)
    return bar.render_line(0).text


def drawn_tabs(app) -> list[str]:
    """Each tab as drawn where the bar says it is (its click span)."""
    text = bar_text(app)
    return [text[start:end] for start, end, _ in app.query_one(AppsBar)._spans]


def test_shortened_tags_keep_what_tells_them_apart():
    """Shortened evenly, worker-00 … worker-23 all read "wor…"."""
    assert short_tab_names(["worker-00", "worker-13"], 5) == ["…00", "…13"]
    assert short_tab_names(["worker-0", "worker-13"], 4) == ["…0", "…13"]   # never empty
    assert short_tab_names(["llama3-70b-train", "mistral-serve"], 8) == ["lla…rain", "mis…erve"]
    assert elide_middle("worker-13", 5) == "wo…13" and elide_middle("worker", 9) == "worker"


@run_async
async def test_the_selected_tab_always_shows_and_the_tags_stay_distinct():
    """24 tabs at 80 columns: the bar was cut at the terminal's edge, the selected tab with it."""
    app = app_of(crowded(workers()))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        for step in range(24):
            tabs = [tab for tab in drawn_tabs(app) if "]:" in tab]   # not the ‹N N› counts
            assert f">[{step + 1 if step < 9 else '-'}]:" in bar_text(app)   # the selected one
            names = [tab.split(":", 1)[1].strip(" <") for tab in tabs]
            assert len(set(names)) == len(names), names
            assert all(tab.endswith((" ", "<")) for tab in tabs), tabs   # none cut
            await pilot.press("d")
        assert "]:…23<" in bar_text(app) and bar_text(app).startswith(" Apps: ‹")


@run_async
async def test_a_click_on_the_count_of_hidden_tabs_steps_to_them():
    app = app_of(crowded(workers()))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        hidden = bar_text(app).rstrip()
        assert hidden.endswith("›")
        await pilot.click(AppsBar, offset=(len(hidden) - 1, 0))
        await pilot.pause()
        shown = bar_text(app)
        assert app.tab in [tab for _, _, tab in app.query_one(AppsBar)._spans]
        assert f"]:…{app.tab[-2:]}<" in shown


# ------------------------------------------------------------------ tags with control characters
CONTROL_TAG = "x\x1b[31mRED\x1b[0m"


@run_async
async def test_a_tag_with_control_characters_is_measured_as_shown():
    """Measured before it was escaped, it pushed the table's columns right and was never
    shortened in the Apps bar (cut at the edge instead)."""
    long_tags = ["a-very-long-process-tag-name-for-a-distributed-training-job",
                 "another-extremely-long-tag-name-that-goes-on-and-on", CONTROL_TAG]
    app = app_of(crowded(long_tags))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        tabs = drawn_tabs(app)
        assert len(tabs) == 4 and all(tab.endswith((" ", "<")) for tab in tabs), tabs
        assert "\\x1b" in tabs[-1] and "\x1b" not in bar_text(app)
        await pilot.press("p")
        table = app.query_one(ProcessTable)
        header, *rows = screen_lines(table)[:4]
        cores_at = header.index("CORES")
        assert [row[cores_at:cores_at + 2] for row in rows] == ["0 ", "1 ", "2 "], rows


@run_async
async def test_the_process_screen_of_a_one_core_runtime_says_core():
    """It said "1 cores (20)"."""
    app = app_of(crowded(workers()))
    async with app.run_test(size=(80, 24)) as pilot:
        await open_worker_20(pilot, app)
        view = app.screen.query_one(ProcessDetailView)
        shown = "\n".join(line.text for line in view.lines_for(view.size.width))
    assert "worker-20 · 1 core (20) ·" in shown and "mean over its 1 core " in shown


@run_async
async def test_page_keys_move_the_process_tables_cursor_a_screen_at_a_time():
    app = app_of(crowded(workers()))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("p", "pagedown")
        table = app.query_one(ProcessTable)
        paged = table.selected_key
        assert paged is not None and paged[0] > 7001          # more than one row down
        assert any(f"worker-{paged[0] - 7000:02d}" in line for line in screen_lines(table))
        await pilot.press("pagedown", "pagedown", "pagedown")
        assert table.selected_key == (7023, "worker-23")      # held at the last row
        await pilot.press("pageup")
        assert table.selected_key[0] < 7023
        await pilot.press("pageup", "pageup", "pageup")
        assert table.selected_key == (7000, "worker-00")
