"""The Prometheus client's pieces: selectors (property-tested), durations, query templates, and
every failure of the HTTP API as one line of the right kind."""
from __future__ import annotations

import http.server
import re
import threading
import time

import pytest
from hypothesis import given, strategies as st

from monitor.fleet_queries import HISTORY_QUERY, QUERIES, expand
from monitor.promql import (Matcher, PrometheusClient, PrometheusError, check_url,
                            parse_duration, parse_selector, render_selector)

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


def test_durations():
    assert parse_duration("15s") == 15 and parse_duration("1m30s") == 90
    assert parse_duration("500ms") == 0.5 and parse_duration("2h") == 7200
    for bad in ("", "15", "s", "1x", "1m 30s"):
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


class _Slow(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        time.sleep(1.5)
        self.send_response(200)
        self.end_headers()


@pytest.fixture
def slow_server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


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
