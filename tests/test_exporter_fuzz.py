"""Whatever arrives on stdin, the exporter's input path never raises and keeps a valid exposition."""
from __future__ import annotations

import json
import os
import pathlib
import re
import sys

import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from exporters.exporter import PrometheusExporter
from monitor.lines import fd_lines, watched_lines
from monitor.stream import ReportStream

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES / "exporter"))
from stream_gen import StreamGen  # noqa: E402

GOOD = StreamGen(seed=5, runtimes=2, devices=1, cores_per_device=2).line()
SAMPLE_LINE = re.compile(rb'[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*",?)*\})? '
                         rb'(NaN|[+-]Inf|-?[0-9.]+(e[+-][0-9]+)?)')
GOOD_DOC = orjson.loads(GOOD)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12),
                                                                         children, max_size=4),
    max_leaves=20)


def mutate(doc, path_choices, value):
    """Replace one nested value of a copy of the good document."""
    doc = orjson.loads(orjson.dumps(doc))
    node = doc
    for choice in path_choices:
        if isinstance(node, dict) and node:
            key = sorted(node)[choice % len(node)]
            if not isinstance(node[key], (dict, list)) or choice % 3 == 0:
                node[key] = value
                return doc
            node = node[key]
        elif isinstance(node, list) and node:
            i = choice % len(node)
            if not isinstance(node[i], (dict, list)) or choice % 3 == 0:
                node[i] = value
                return doc
            node = node[i]
    return doc


lines = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda v: json.dumps(v).encode(), json_values),
    st.builds(lambda p, v: json.dumps(mutate(GOOD_DOC, p, v)).encode(),
              st.lists(st.integers(0, 50), min_size=1, max_size=8), json_values),
    st.integers(1, len(GOOD) - 1).map(lambda n: GOOD[:n]),
    st.just(GOOD.rstrip(b"\n")),
)


def check(batch: list[bytes]) -> None:
    data = b"\n".join(line.replace(b"\n", b" ") for line in batch) + b"\n"
    exp = PrometheusExporter(clock=lambda: 1764476000.0)
    stream = ReportStream(data.splitlines(keepends=True), stderr=open(os.devnull, "w"))
    exp.set_stream_errors(lambda: stream.errors)
    for report in stream:
        exp.ingest(report)
    exp.note_eof()
    for body in (exp.current.text, exp.current.openmetrics):
        # both formats end lines at \n only: a raw \r is legal inside a label value (only \\, "
        # and \n are escaped, as prometheus_client does too), so bytes.splitlines() would be wrong
        assert body.endswith(b"\n")
        for line in body[:-1].split(b"\n"):
            assert line.startswith(b"# ") or SAMPLE_LINE.fullmatch(line), line
    assert exp.current.openmetrics.endswith(b"# EOF\n")
    counted = sum(stream.errors.values()) + stream.reports
    assert counted == sum(1 for line in data.splitlines() if line.strip())


FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.lists(lines, min_size=1, max_size=4))
def test_stream_fuzz_quick(batch):
    check(batch)


@pytest.mark.slow
@SLOW
@given(st.lists(lines, min_size=1, max_size=3))
def test_stream_fuzz_10000_examples(batch):
    check(batch)


@pytest.mark.parametrize("key", ["neuron_device_count", "neuroncore_per_device_count"])
def test_absurd_hardware_counts_are_input_errors_not_allocations(key):
    doc = orjson.loads(GOOD)
    doc["neuron_hardware_info"][key] = 2**62          # sinks lay out one row per device
    check([GOOD.rstrip(b"\n"), orjson.dumps(doc)])


@pytest.mark.parametrize("text", ["\r", "a\nb", 'q"q', "back\\slash", "\u2028"])
def test_control_characters_in_label_values_keep_one_sample_per_line(text):
    doc = orjson.loads(GOOD)
    doc["instance_info"]["instance_availability_zone"] = text
    check([orjson.dumps(doc)])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=6), st.integers(1, 64), st.integers(8, 400))
def test_fd_lines_splits_exactly_like_splitlines(parts, chunk, limit):
    data = b"".join(parts)
    r, w = os.pipe()
    try:
        os.write(w, data)
        os.close(w)
        got = list(fd_lines(r, max_line_bytes=limit, chunk=chunk))
    finally:
        os.close(r)
    pieces = data.split(b"\n")
    expected = [p + b"\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
    long_ok = all(len(x) <= limit + chunk + 1 for x in got)
    assert long_ok
    short = [x for x in expected if len(x) <= limit]
    assert [x for x in got if len(x) <= limit] == short


def test_watched_lines_calls_back_after_each_line():
    seen = []
    lines_ = watched_lines(iter([b"a\n", b"b\n"]), lambda: seen.append(len(seen)))
    assert next(lines_) == b"a\n" and seen == []
    assert next(lines_) == b"b\n" and seen == [0]
