"""ReportStream: a neuron-monitor JSON-lines stream with bad lines mixed in."""
from __future__ import annotations

import io
import pathlib
import subprocess
import sys

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.report import Report
from monitor.stream import LINE_KINDS, ReportStream, classify_line

GOOD = (pathlib.Path(__file__).parent / "fixtures" / "neuron_monitor_aws_example.json").read_bytes().strip()

# A child process writes these lines to a real pipe, flushing after each, as neuron-monitor does.
WRITER = r"""
import sys, time
lines = sys.stdin.buffer.read().split(b"\x00")
for line in lines:
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.buffer.flush()
"""


def feed_through_pipe(lines: list[bytes], **kwargs) -> tuple[list[Report], ReportStream, str]:
    child = subprocess.Popen([sys.executable, "-c", WRITER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    child.stdin.write(b"\x00".join(lines))
    child.stdin.close()
    err = io.StringIO()
    ticks = iter(range(1000, 10_000))
    stream = ReportStream.from_file(child.stdout, clock=lambda: float(next(ticks)), stderr=err, **kwargs)
    reports = list(stream)
    child.stdout.close()
    assert child.wait(timeout=30) == 0
    return reports, stream, err.getvalue()


def test_pipe_with_every_kind_of_bad_line():
    huge = b'{"neuron_runtime_data": [], "pad": "' + b"x" * 3_000_000 + b'"}'
    lines = [GOOD, b"not json at all", GOOD[: len(GOOD) // 2], b"", b"   ", GOOD,
             b"[1, 2, 3]", b'{"neuron_runtime_data": {"pid": 1}}', b"\xff\xfe{}", huge,
             b"not json again", GOOD]
    reports, stream, err = feed_through_pipe(lines, max_line_bytes=1_000_000)
    assert len(reports) == 3 == stream.reports
    assert [r.received_at for r in reports] == [1000.0, 1003.0, 1008.0]  # clock read per parsed line
    assert all(r.runtimes[0].tag == "my_app_1" for r in reports)
    assert stream.errors == {"not_json": 2, "truncated": 1, "not_object": 1, "wrong_type": 1,
                             "not_utf8": 1, "too_long": 1}
    assert stream.skipped == 7
    messages = err.splitlines()
    assert len(messages) == 6  # one per kind, the repeated not_json is silent
    assert messages[0].startswith("neuron-monitor stream: skipped line 2 (not_json)")
    assert any("wrong_type" in m and "neuron_runtime_data: expected array" in m for m in messages)


def test_huge_valid_line_within_limit_is_read():
    doc = orjson.loads(GOOD)
    doc["neuron_runtime_data"] *= 2000  # ~6 MB line
    line = orjson.dumps(doc)
    reports, stream, err = feed_through_pipe([line])
    assert len(reports) == 1 and len(reports[0].runtimes) == 2000 and err == ""


def test_str_lines_and_eof():
    err = io.StringIO()
    stream = ReportStream([GOOD.decode() + "\n", "{\n"], stderr=err)
    assert len(list(stream)) == 1
    assert stream.errors == {"truncated": 1}


def test_classify_distinguishes_truncation_from_garbage():
    assert classify_line(b'{"a": 1')[1] == "truncated"
    assert classify_line(b'{"a": 1}}')[1] == "not_json"
    assert classify_line(b"nan")[1] == "not_json"
    assert classify_line(b'"x"')[1] == "not_object"
    assert classify_line(GOOD)[0] is not None


BAD_LINE = st.one_of(
    st.binary(max_size=60).filter(lambda b: b"\n" not in b),
    st.text(max_size=40).filter(lambda t: "\n" not in t).map(str.encode),
    st.integers(1, len(GOOD) - 1).map(lambda n: GOOD[:n]),
    st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.text(max_size=4),
                 lambda k: st.lists(k, max_size=3) | st.dictionaries(st.text(max_size=4), k, max_size=3),
                 max_leaves=10).map(orjson.dumps),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.just(GOOD), BAD_LINE), max_size=12))
def test_no_exception_escapes_and_every_line_is_accounted(lines):
    err = io.StringIO()
    stream = ReportStream(lines, stderr=err)
    reports = list(stream)
    good = sum(1 for line in lines if classify_line(line)[0] is not None)
    blank = sum(1 for line in lines if not line.strip())
    assert len(reports) == good == stream.reports
    assert stream.skipped == len(lines) - good - blank
    assert len(err.getvalue().splitlines()) == len(stream.errors)
    assert lines.count(GOOD) <= good
    assert set(stream.errors) <= set(LINE_KINDS)    # the exporter's counter starts each at 0


def test_bad_bytes_and_huge_numbers_are_named_as_given():
    """Where the byte is and what it is (orjson said only "str is not valid UTF-8: surrogates
    not allowed: line 1 column 1"), and a count too large as written, not as 301 digits."""
    _, kind, detail = classify_line(b'{"neuron_runtime_data": [], "x": "\xff"}')
    assert kind == "not_utf8" and detail == ("not UTF-8 text: byte 0xff at offset 34 "
                                             "(invalid start byte)")
    doc = orjson.loads(GOOD)
    doc["neuron_runtime_data"][0]["pid"] = 1e300
    _, kind, detail = classify_line(orjson.dumps(doc))
    assert kind == "wrong_type" and detail.endswith("got 1e+300"), detail
