"""Pure pieces of the fleet screen: down/stale states, column layout, wrapping, the
vectorised braille rows drawing exactly what tui.braille draws, and the lean row strips
drawing exactly what Textual's Strip draws."""
from __future__ import annotations

import sys

import numpy as np
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import arrays
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from monitor.fleet import FleetQuery, InstanceRow
from tui.braille import braille_rows
from tui.fleet_view import COLUMNS, layout
from tui.widgets.base import LeanStrip
from tui.widgets.fleet import wrap
from tui.widgets.fleet_rows import fit_all, spark_rows

RATIOS = st.one_of(st.floats(0, 1), st.just(float("nan")), st.floats(1, 3), st.floats(-1, 0),
                   st.sampled_from([float("inf"), float("-inf")]))


@given(arrays(float, st.tuples(st.integers(1, 6), st.integers(0, 40)), elements=RATIOS),
       st.integers(1, 20))
def test_spark_rows_draw_what_braille_rows_draws(histories, width):
    fitted = fit_all(list(histories), 2 * width)
    assert spark_rows(fitted, width) == [braille_rows(h, width, 1, top=1.0)[0] for h in histories]


def test_states():
    state = FleetQuery._state
    assert state(1.0, 0.5, 1.0) == (True, "")
    assert state(0.0, 0.5, 1.0) == (False, "up == 0")
    assert state(None, None, 1.0) == (False, "no sample")
    assert state(1.0, 3.5, 1.0) == (False, "no sample for 4s")     # older than 3 intervals
    assert state(1.0, 2.9, 1.0) == (True, "")


def test_layout_fits_and_keeps_the_important_columns():
    for width in (60, 80, 120, 160, 240):
        cols = layout(width)
        assert sum(w for _, w in cols) + len(cols) - 1 <= width
        keys = [k for k, _ in cols]
        assert keys[:2] == ["instance_id", "state"] and "util_mean" in keys
        assert keys == [k for k, *_ in COLUMNS if k in keys]   # table order kept
    assert len(layout(240)) == len(COLUMNS)


def test_wrap_breaks_between_parts():
    text = "2 up, 0 down · 93.4 of 96 NeuronCores busy (97%) · MFU 27.9%"
    assert wrap(text, 200) == [text]
    lines = wrap(text, 40)
    assert lines == ["2 up, 0 down", "93.4 of 96 NeuronCores busy (97%)", "MFU 27.9%"]
    assert all(len(line) <= 10 for line in wrap(text, 10))


READINGS = st.one_of(st.none(), st.just(0.0), st.just(-0.0), st.floats(0, 1e13, allow_nan=False))


@given(st.lists(st.tuples(READINGS, READINGS, READINGS, READINGS, st.booleans()),
                min_size=1, max_size=6), st.sampled_from([60, 80, 120, 160, 240]))
def test_table_cells_are_the_cell_texts_column_by_column(readings, width):
    """The table formats its numeric columns for many rows at once, each value once: every
    cell must read what the one-cell formatter gives, repeated values and -0.0 included."""
    from tui.fleet_view import cell
    from tui.widgets.fleet_rows import RIGHT, RowLayout, _pad
    rows = [InstanceRow(f"i-{n}", "trn2.48xlarge", "az", "h:1", "neuron", 16, 64, 64, util, util,
                        {"tensor": 0.4}, hbm, memory, 2e9, power, True, None, None, util, power,
                        ("train",), up, "", None, np.zeros(0))
            for n, (util, hbm, memory, power, up) in enumerate(readings * 2)]
    columns = [(key, w) for key, w in layout(width) if key != "history"]
    row_layout = RowLayout(layout(width), width)
    for _ in range(2):   # the second pass reads the remembered texts
        for row, texts in zip(rows, row_layout.texts(rows)):
            assert texts == tuple(_pad(cell(row, key), w, key in RIGHT) for key, w in columns)


def test_a_lean_strip_cut_at_its_end_is_no_reference_cycle():
    # the compositor cuts every full-width row at its end; a strip that kept itself in its own
    # cache would be freed only by the cycle collector, refresh after refresh
    import gc
    lean = LeanStrip([Segment("row text ", None), Segment("⣿⣿", Style(color="green"))], 11)
    held = sys.getrefcount(lean)
    assert lean.divide([11]) == [lean] and lean.divide([4, 11])[0].text == "row "
    assert sys.getrefcount(lean) == held
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        for _ in range(50):
            LeanStrip([Segment("x" * 11, None)], 11).divide([11])
        assert gc.collect(0) == 0 and gc.get_count()[0] <= before + 1
    finally:
        gc.enable()


SEGMENT_TEXT = st.text(st.sampled_from("ab ⣿x|"), min_size=1, max_size=12)
SEGMENT_STYLE = st.sampled_from([None, Style(color="red"), Style(bold=True, bgcolor="blue")])


@given(st.lists(st.tuples(SEGMENT_TEXT, SEGMENT_STYLE), max_size=6),
       st.lists(st.integers(0, 80), max_size=4), st.integers(0, 80), st.integers(0, 80))
def test_lean_strip_draws_and_cuts_like_textuals_strip(parts, cuts, a, b):
    segments = [Segment(text, style) for text, style in parts]
    width = sum(len(text) for text, _ in parts)
    lean, plain = LeanStrip(list(segments), width), Strip(list(segments), width)
    assert LeanStrip is not Strip   # this Textual's Strip is served (else the plain one is)
    console = Console(color_system="truecolor", width=200)
    x1, x2 = sorted((a, b))

    def seen(strip: Strip) -> tuple:
        return strip.text, strip.cell_length, strip.render(console)
    for _ in range(2):   # the second time from the caches made the first time
        assert seen(lean) == seen(plain)
        assert seen(lean.crop(x1, x2)) == seen(plain.crop(x1, x2))
        assert ([seen(s) for s in lean.divide(sorted(cuts))] ==
                [seen(s) for s in plain.divide(sorted(cuts))])
        assert ([seen(s) for s in lean.divide([width])] ==
                [seen(s) for s in plain.divide([width])])
        assert (seen(lean.apply_style(Style(italic=True))) ==
                seen(plain.apply_style(Style(italic=True))))
        assert seen(lean.extend_cell_length(x2)) == seen(plain.extend_cell_length(x2))
        assert seen(Strip.join([lean, plain])) == seen(Strip.join([plain, plain]))
