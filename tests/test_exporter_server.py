"""The HTTP(S) server: content negotiation, cached bodies, keep-alive, TLS with hot reload."""
from __future__ import annotations

import fcntl
import gzip
import http.client
import os
import pathlib
import pty
import select
import shutil
import ssl
import subprocess
import sys
import termios
import time

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporters.exporter import PrometheusExporter
from exporters.exposition import Exposition
from exporters.server import (MetricsHTTPServer, TlsReloader, accepts_gzip, serve_in_thread,
                              tls_problem, wants_openmetrics)
from exporters.textformat import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE
from monitor.report import Report

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


@pytest.fixture
def exporter():
    exp = PrometheusExporter()
    exp.ingest(Report.from_json((FIXTURES / "neuron_monitor_extensions.json").read_bytes()))
    return exp


@pytest.fixture
def server(exporter):
    srv = MetricsHTTPServer(("127.0.0.1", 0), lambda: exporter.current)
    serve_in_thread(srv)
    yield srv
    srv.shutdown()
    srv.server_close()


def get(port, path="/metrics", headers=None, method="GET", conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read()
    if own:
        conn.close()
    return resp, body


@pytest.mark.parametrize("accept, expected", [
    (PROMETHEUS_ACCEPT, True),
    ("application/openmetrics-text; version=1.0.0; charset=utf-8", True),
    ("application/openmetrics-text", True),
    ("application/openmetrics-text;version=2.0.0", False),
    ("application/openmetrics-text;q=0", False),
    ("text/plain;version=0.0.4", False),
    ("", False),
    (None, False),
])
def test_wants_openmetrics(accept, expected):
    assert wants_openmetrics(accept) is expected


@pytest.mark.parametrize("value, expected", [
    ("gzip", True), ("gzip, deflate, br", True), ("identity", False), ("gzip;q=0", False),
    ("*", True), ("", False), (None, False), ("deflate, GZIP;q=0.5", True)])
def test_accepts_gzip(value, expected):
    assert accepts_gzip(value) is expected


def test_a_problem_of_a_kind_no_sink_counts_is_refused():
    from exporters.extract import PROBLEM_KINDS, Problem
    assert Problem("eof", "input ended").kind in PROBLEM_KINDS
    with pytest.raises(ValueError, match="unknown problem kind"):
        Problem("eof_error", "a kind the error counter never starts at 0")


def test_the_server_header_names_the_exporter_alone(server):
    resp, _ = get(server.server_port)
    assert resp.getheader("Server") == "neuron-monitor-prometheus"     # had a trailing space


def test_the_stale_health_line_gives_its_limit_rounded():
    now = {"t": 1000.0}
    exp = PrometheusExporter(clock=lambda: now["t"])
    exp.ingest(Report.from_json((FIXTURES / "neuron_monitor_extensions.json").read_bytes()))
    now["t"] += 60
    healthy, line = exp.health(stale_after=3.091812)
    assert not healthy and line == "stale: no report for 60s (limit 3.1s)"   # was 3.09181s
    assert exp.health(stale_after=0.04)[1].endswith("(limit 0.04s)")         # not "0s"


def test_plain_text_by_default(server, exporter):
    resp, body = get(server.port)
    assert resp.status == 200
    assert resp.getheader("Content-Type") == TEXT_CONTENT_TYPE
    assert int(resp.getheader("Content-Length")) == len(body)
    assert body == exporter.current.text
    names = {f.name for f in parse_text(body.decode())}
    assert {"neuroncore_utilization_ratio", "neuron_core_engine_utilization_ratio"} <= names


def test_openmetrics_when_prometheus_asks(server, exporter):
    resp, body = get(server.port, headers={"Accept": PROMETHEUS_ACCEPT})
    assert resp.getheader("Content-Type") == OPENMETRICS_CONTENT_TYPE
    assert body.endswith(b"# EOF\n")
    families = {f.name: f for f in parse_om(body.decode())}  # the strict OpenMetrics parser
    assert families["execution_errors"].type == "counter"
    assert families["instance"].type == "info"


def test_gzip_is_compressed_once_and_served_from_cache(server, exporter):
    first, body1 = get(server.port, headers={"Accept-Encoding": "gzip"})
    second, body2 = get(server.port, headers={"Accept-Encoding": "gzip"})
    assert first.getheader("Content-Encoding") == "gzip"
    assert gzip.decompress(body1) == exporter.current.text
    assert body1 == body2
    assert exporter.current.body(False, True)[0] is exporter.current.body(False, True)[0]
    assert len(body1) * 5 < len(exporter.current.text)


def test_new_report_is_served_at_once(server, exporter):
    before = exporter.current.generation
    exporter.ingest(Report.from_json((FIXTURES / "neuron_monitor_aws_example.json").read_bytes()))
    resp, body = get(server.port)
    assert exporter.current.generation == before + 1
    assert body == exporter.current.text
    assert b"neuron_exporter_reports_total 2.0" in body


def test_keep_alive_head_and_health(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    resp, body = get(server.port, method="HEAD", conn=conn)
    assert resp.status == 200 and body == b"" and int(resp.getheader("Content-Length")) > 1000
    resp, body = get(server.port, path="/-/healthy", conn=conn)  # same connection
    assert (resp.status, body) == (200, b"OK\n")
    resp, body = get(server.port, path="/anything", conn=conn)
    assert resp.status == 200 and body.startswith(b"# HELP")
    conn.close()


def test_served_before_any_report():
    exp = PrometheusExporter()
    srv = MetricsHTTPServer(("127.0.0.1", 0), lambda: exp.current)
    serve_in_thread(srv)
    try:
        resp, body = get(srv.port)
        assert b"neuron_exporter_reports_total 0.0" in body
        assert b"neuroncore_utilization_ratio" not in body
    finally:
        srv.shutdown()
        srv.server_close()


def test_exposition_gzip_is_deterministic():
    a = Exposition(1, b"x" * 1000, b"y")
    b = Exposition(2, b"x" * 1000, b"y")
    assert a.body(False, True) == b.body(False, True)


# ------------------------------------------------------------------------------------ TLS
def make_cert(directory: pathlib.Path, name: str) -> tuple[pathlib.Path, pathlib.Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def peer_cn(port: int, cafile: pathlib.Path) -> str:
    ctx = ssl.create_default_context(cafile=str(cafile))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read().startswith(b"# HELP")
    subject = dict(x[0] for x in conn.sock.getpeercert()["subject"])
    conn.close()
    return subject["commonName"]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_and_certificate_hot_reload(tmp_path, exporter):
    cert, key = make_cert(tmp_path, "first")
    tls = TlsReloader(cert, key)
    srv = MetricsHTTPServer(("127.0.0.1", 0), lambda: exporter.current, tls)
    serve_in_thread(srv)
    try:
        assert peer_cn(srv.port, cert) == "first"
        assert tls.reload_if_changed() is False
        new_cert, new_key = make_cert(tmp_path, "second")
        cert.write_bytes(new_cert.read_bytes())
        key.write_bytes(new_key.read_bytes())
        assert tls.reload_if_changed() is True
        assert peer_cn(srv.port, cert) == "second"
        # A plain-HTTP client gets no answer, and the server keeps serving TLS clients.
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            get(srv.port)
        assert peer_cn(srv.port, cert) == "second"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_broken_replacement_certificate_keeps_the_old_one(tmp_path):
    cert, key = make_cert(tmp_path, "first")
    tls = TlsReloader(cert, key)
    cert.write_text("not a certificate")
    assert tls.reload_if_changed() is False
    # said once for that change (the CLI prints it as a warning), not at every check
    assert "cannot be loaded" in tls.refusal and "previous pair" in tls.refusal
    assert tls.reload_if_changed() is False and tls.refusal == ""
    with pytest.raises(ssl.SSLError):
        TlsReloader(cert, key)
    cert.write_text("still not one")       # another bad change: said again
    assert tls.reload_if_changed() is False and "cannot be loaded" in tls.refusal


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_a_pair_that_cannot_load_names_the_file_and_why(tmp_path):
    """OpenSSL's own words were "[SSL] PEM lib (_ssl.c:3905)", naming no file."""
    cert, key = make_cert(tmp_path, "first")
    other_cert, other_key = make_cert(tmp_path, "other")
    cases = ((cert, cert, f"{cert}: holds no PEM private key"),
             (key, key, f"{key}: holds no PEM certificate"),
             (cert, other_key, f"{other_key} is not the private key of {cert}"),
             (cert, tmp_path / "missing.key", f"{tmp_path / 'missing.key'}: No such file"))
    for cert_file, key_file, message in cases:
        with pytest.raises((OSError, ssl.SSLError)) as failed:
            TlsReloader(cert_file, key_file)
        assert tls_problem(cert_file, key_file, failed.value).startswith(message)


def test_slow_clients_are_bounded_and_scrapes_go_on(exporter, monkeypatch):
    """Slow-loris clients (silent ones and ones trickling a byte at a time) hold no more than
    the connection cap, are cut off once their request is overdue, and a scraper sending whole
    requests is answered throughout."""
    import socket
    import threading
    import time

    from exporters import server as server_mod

    # A shorter request deadline than the default 5 s (still four trickled bytes long): the
    # bound is what is under test, not its length, and the test waits it out.
    monkeypatch.setattr(server_mod, "REQUEST_TIMEOUT_S", 2.0)
    cap = 16
    srv = MetricsHTTPServer(("127.0.0.1", 0), lambda: exporter.current, max_connections=cap)
    serve_in_thread(srv)
    threads_before = threading.active_count()
    slow: list[socket.socket] = []
    stop = threading.Event()
    try:
        for i in range(120):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            if i % 2:
                s.sendall(b"GET /metrics HTTP/1.1\r\n")  # and then a byte now and then
            slow.append(s)

        def trickle():
            while not stop.is_set():
                for s in slow[1::2]:
                    try:
                        s.send(b"X")
                    except OSError:
                        pass
                stop.wait(0.5)

        threading.Thread(target=trickle, daemon=True).start()
        scrapes = 0
        peak_threads = 0
        deadline = time.monotonic() + server_mod.REQUEST_TIMEOUT_S + 3
        while time.monotonic() < deadline:
            resp, body = get(srv.port)
            assert resp.status == 200 and b"neuron" in body
            scrapes += 1
            peak_threads = max(peak_threads, threading.active_count())
            assert srv.connections <= cap + 2
        assert scrapes > 10
        # Bounded by the cap, not by the 120 clients; an evicted connection's thread may still be
        # finishing its last write when its slot's next thread starts, on a loaded machine.
        assert peak_threads - threads_before <= 2 * cap
        # Every slow client has been cut off by now: each read sees the connection closed.
        for s in slow:
            s.settimeout(2)
            try:
                assert s.recv(1 << 16) == b""
            except (ConnectionResetError, BrokenPipeError):
                pass
        assert srv.evicted > 0
    finally:
        stop.set()
        for s in slow:
            s.close()
        srv.shutdown()
        srv.server_close()


def test_slow_readers_with_pipelined_requests_cannot_lock_scrapers_out(monkeypatch):
    """Every slot taken by a client that pipelines requests and reads none of the answers: each
    connection is mid-answer, never 'waiting', so a new scraper was refused. A connection whose
    answer has not been taken for SLOW_ANSWER_S may now be cut off for a new one."""
    import socket
    import sys
    import time

    from exporters import server as server_mod
    sys.path.insert(0, str(FIXTURES / "exporter"))
    from stream_gen import StreamGen
    monkeypatch.setattr(server_mod, "SLOW_ANSWER_S", 0.3, raising=False)
    big = PrometheusExporter()
    big.ingest(Report.from_json(StreamGen(seed=3, runtimes=16, devices=16).line()))
    assert len(big.current.text) > 1 << 18      # far more than socket buffers hold, x20
    cap = 4
    srv = MetricsHTTPServer(("127.0.0.1", 0), lambda: big.current, max_connections=cap)
    serve_in_thread(srv)
    hogs: list[socket.socket] = []
    try:
        for _ in range(cap):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            s.connect(("127.0.0.1", srv.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
            hogs.append(s)
        time.sleep(0.6)                      # every slot is now writing an answer nobody reads
        resp, body = get(srv.port)
        assert resp.status == 200 and b"neuron" in body
        assert srv.evicted >= 1
    finally:
        for s in hogs:
            s.close()
        srv.shutdown()
        srv.server_close()


def _run_on_a_terminal(command: list[str], timeout: float) -> tuple[int | None, str]:
    """Runs `command` with a pseudo-terminal as its controlling terminal, as from a shell:
    what OpenSSL's pass-phrase prompt would read. Exit status (None: still running when the
    timeout came, then killed) and everything it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True,
                            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(slave)
    output, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if select.select([master], [], [], 0.1)[0]:
            try:
                output += os.read(master, 4096)
            except OSError:
                break
    try:   # the terminal closes as the process ends: wait for its status
        status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        status = None
        proc.kill()
        proc.wait()
    while select.select([master], [], [], 0)[0]:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    return status, output.decode(errors="replace")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_an_encrypted_key_is_refused_at_once_not_asked_for(tmp_path):
    """OpenSSL asked for the pass-phrase on the terminal: the exporter waited there for ever
    (and, without a terminal, blamed the certificate)."""
    cert, key = tmp_path / "enc.crt", tmp_path / "enc.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-days", "1", "-subj",
                    "/CN=enc", "-passout", "pass:secret", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    exporter_cli = pathlib.Path(sys.executable).parent / "neuron-monitor-prometheus"
    status, output = _run_on_a_terminal(
        [str(exporter_cli), "--port", "0", "--cert-file", str(cert), "--key-file", str(key)], 30)
    assert status == 2, output
    assert "pass phrase" not in output.lower()
    assert f"{key}: the private key is encrypted" in output
