"""Text-format building blocks agree with prometheus_client for every input."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st
from prometheus_client.openmetrics.exposition import _escape
from prometheus_client.utils import floatToGoString

from exporters.textformat import escape_label_value, format_value, label_block


@settings(max_examples=3000)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_format_value_is_floattogostring(x):
    assert format_value(x) == floatToGoString(x)


def test_format_value_edges():
    for x in (1e6, 999999.0, 1234567.0, 1e15, 1e16, 9999999999999998.0, 0.0, -0.0, -1e7,
              1e300, 5e-324, 12519788544.0, float("inf"), float("-inf"), float("nan")):
        assert format_value(x) == floatToGoString(x), x


@given(st.text())
def test_label_values_escape_like_the_client(value):
    assert escape_label_value(value) == _escape(value, "allow-utf-8", None)


def test_label_block_sorts_names():
    assert label_block(("b", "a"), ("2", 'x"y')) == '{a="x\\"y",b="2"}'
    assert label_block((), ()) == ""
