"""The Prometheus client's pieces: selectors (property-tested), durations, query templates, and
every failure of the HTTP API as one line of the right kind."""
from __future__ import annotations

import re
import threading
import time

import pytest
from hypothesis import given, strategies as st

from monitor.fleet_queries import HISTORY_QUERY, QUERIES, expand
from monitor.promql import (Matcher, PrometheusClient, PrometheusError, check_url,
                            parse_duration, parse_selector, render_selector)
from tests.http_stub import Quiet, serving

LABEL = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,20}", fullmatch=True).filter(lambda s: s != "__name__")
VALUE = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(st.lists(st.tuples(LABEL, st.sampled_from(["=", "!="]), VALUE), max_size=5))
def test_selectors_round_trip(items):
    matchers = tuple(Matcher(*item) for item in items)
    assert parse_selector(render_selector(matchers)) == matchers
    assert parse_selector("{" + render_selector(matchers) + "}") == matchers


@given(st.text(max_size=40))
def test_any_text_parses_or_is_one_line_value_error(text):
    try:
        parse_selector(text)
    except ValueError as exc:
        assert "\n" not in str(exc)


def test_selector_forms():
    assert parse_selector("") == ()
    assert parse_selector(" a = 'x' , b=~`y.*`, ") == (Matcher("a", "=", "x"), Matcher("b", "=~", "y.*"))
    assert parse_selector(r'a="q\"uote"') == (Matcher("a", "=", 'q"uote'),)
    for bad in ('a="x"b="y"', "a=x", 'a=="x"', 'a="x', '{a="x"', 'a!~"["'):
        with pytest.raises(ValueError):
            parse_selector(bad)


def test_regexes_are_checked_as_prometheus_reads_them():
    """RE2's Unicode classes pass (Python's re rejected \\p{L}: "bad escape"); Python's
    lookaround and backreferences, which RE2 has not, are refused before start."""
    assert parse_selector(r'instance_type=~"\\p{L}.*"')[0].value == r"\p{L}.*"
    assert parse_selector(r'instance_type=~"\\pL+"')[0].value == r"\pL+"
    for bad in ('instance_type=~"(?=trn).*"', 'instance_type!~"(?<!x)y"',
                r'instance_type=~"(a)\\1"'):
        with pytest.raises(ValueError, match="RE2 has no lookaround"):
            parse_selector(bad)


def test_durations():
    assert parse_duration("15s") == 15 and parse_duration("1m30s") == 90
    assert parse_duration("500ms") == 0.5 and parse_duration("2h") == 7200
    for bad in ("", "15", "s", "1x", "1m 30s", "\u0661\u0665s"):   # Arabic-Indic digits
        assert parse_duration(bad) is None


def test_templates_expand_with_and_without_a_selector():
    sel = parse_selector('instance_type="trn2.48xlarge"')
    for template in (*QUERIES.values(), HISTORY_QUERY):
        for matchers in ((), sel):
            expr = expand(template, matchers, lookback=900, window=300, rate=4)
            assert "$" not in expr and "{}" not in expr and ",}" not in expr
            if matchers:   # every panel is filtered by the selector, joined or not
                assert 'instance_type="trn2.48xlarge"' in expr
    assert "[900s]" in expand(QUERIES["targets"]) and "[300s]" in expand(QUERIES["errors"])
    # one series per instance: every panel aggregates by instance_id (or is per target)
    for name, template in QUERIES.items():
        assert re.search(r"by \(instance_id|last_over_time\(|^up |^time\(\)", template), name


def test_urls():
    assert check_url("http://h:9090/prefix/") == "http://h:9090/prefix"
    for bad in ("h:9090", "file:///x", "http://", "http://h:x"):
        with pytest.raises(ValueError):
            check_url(bad)


class _Slow(Quiet):
    def do_POST(self) -> None:
        time.sleep(1.5)
        self.send_response(200)
        self.end_headers()


@pytest.fixture
def slow_server():
    with serving(_Slow) as url:
        yield url


def test_a_slow_server_is_a_timeout(slow_server):
    with pytest.raises(PrometheusError) as info:
        PrometheusClient(slow_server, timeout=0.3).query("up")
    assert info.value.kind == "timeout" and "did not answer within 0.3s" in str(info.value)


def test_refused_connection_is_unreachable():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PrometheusError) as info:
        PrometheusClient(f"http://127.0.0.1:{port}").query("up")
    assert info.value.kind == "unreachable" and "refused" in str(info.value).lower()


class _Answer(Quiet):
    body = b""   # the answer of every request, set by the test

    def do_POST(self) -> None:   # HTTP/1.0 (the handler's default): one request a connection
        self.answer(200, type(self).body)


@pytest.fixture(scope="module")
def answering():
    handler = type("Answer", (_Answer,), {"body": b""})
    with serving(handler) as url:
        yield handler, PrometheusClient(url, timeout=5)


ELEMENT = st.fixed_dictionaries({
    "metric": st.dictionaries(st.sampled_from(["instance_id", "instance", "job", "engine"]),
                              st.text(max_size=8), max_size=4),
    "value": st.tuples(st.floats(0, 2e9), st.one_of(
        st.floats(allow_nan=False).map(repr), st.sampled_from(["NaN", "+Inf", "-Inf", "1e308"]))),
})


@given(st.lists(ELEMENT, max_size=12), st.sampled_from([("instance_id",), ("instance", "job")]),
       st.booleans())
def test_values_by_label_are_the_samples_values(answering, elements, by, finite):
    """query_values (a panel's answer keyed by its labels, no Sample per element) reads what
    query reads: the same value for the same key (the last one when keys repeat), the
    non-finite ones left out only when asked."""
    import math

    import orjson
    handler, client = answering
    handler.body = orjson.dumps({"status": "success",
                                 "data": {"resultType": "vector", "result": elements}})
    expected = {}
    for sample in client.query("x"):
        key = tuple(sample.labels.get(name, "") for name in by)
        if not finite or math.isfinite(sample.value):
            expected[key[0] if len(by) == 1 else key] = sample.value
    got = client.query_values("x", by=by, finite=finite)
    assert got.keys() == expected.keys()
    assert all(got[k] == expected[k] or (math.isnan(got[k]) and math.isnan(expected[k]))
               for k in got)


@pytest.mark.parametrize("result", [
    [{"metric": {}, "value": "1"}], [{"metric": {}}], [["x"]], [{"metric": {}, "value": []}]])
def test_a_malformed_vector_is_one_line_for_either_reading(answering, result):
    import orjson
    handler, client = answering
    handler.body = orjson.dumps({"status": "success",
                                 "data": {"resultType": "vector", "result": result}})
    for read in (client.query, client.query_values):
        with pytest.raises(PrometheusError) as info:
            read("x")
        assert info.value.kind == "not_prometheus" and "malformed vector" in str(info.value)


class _KeepAlive(Quiet):
    """Answers every query with one sample; counts the connections it was asked on and can
    drop a kept connection after its answer without saying so (as an idle timeout does)."""
    protocol_version = "HTTP/1.1"
    connections: set = set()
    drop_after_answer = False

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).connections.add(self.client_address)
        self.answer(200, b'{"status":"success","data":{"resultType":"vector",'
                         b'"result":[{"metric":{},"value":[1,"2"]}]}}')
        if type(self).drop_after_answer:
            self.close_connection = True


@pytest.fixture
def keep_alive():
    handler = type("KeepAlive", (_KeepAlive,), {"connections": set()})
    with serving(handler) as url:
        yield handler, url


def test_a_thread_keeps_its_connection(keep_alive):
    handler, url = keep_alive
    client = PrometheusClient(url, timeout=5)
    for _ in range(5):
        assert client.query("x")[0].value == 2.0
    assert len(handler.connections) == 1
    # another thread has its own
    done = []
    worker = threading.Thread(target=lambda: done.append(client.query_values("x", by=("a",))))
    worker.start()
    worker.join()
    assert done == [{"": 2.0}] and len(handler.connections) == 2
    client.close()
    assert client.query("x")[0].value == 2.0 and len(handler.connections) == 3


def test_a_connection_the_server_dropped_is_opened_again(keep_alive):
    handler, url = keep_alive
    handler.drop_after_answer = True   # every kept connection is gone by the next request
    client = PrometheusClient(url, timeout=5)
    for _ in range(4):
        assert client.query("x")[0].value == 2.0
    assert len(handler.connections) == 4


def test_an_http_1_0_server_is_asked_anew_each_time(answering):
    handler, client = answering   # BaseHTTPRequestHandler's default: HTTP/1.0, closes each time
    handler.body = b'{"status":"success","data":{"resultType":"scalar","result":[1,"3"]}}'
    assert [client.query_values("x") for _ in range(3)] == [{"": 3.0}] * 3


def test_a_server_that_does_not_speak_http_is_one_line():
    import socket
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def greet() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        threading.Thread(target=greet, daemon=True).start()
        with pytest.raises(PrometheusError) as info:
            PrometheusClient(f"http://127.0.0.1:{listener.getsockname()[1]}").query("up")
    assert info.value.kind == "not_prometheus" and "\n" not in str(info.value)
    assert "does not answer HTTP" in str(info.value) and "SSH-2.0" in str(info.value)
