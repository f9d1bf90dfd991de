"""HTTP(S) server for the exposition: stdlib ThreadingHTTPServer serving pre-rendered bytes.

A scrape does no metric work at all: it picks the current `Exposition` (OpenMetrics when the
Accept header asks for it, gzip when Accept-Encoding allows it) and writes its cached bytes.
Like prometheus_client's server, every path serves the metrics, except `/-/healthy`.
"""
from __future__ import annotations

import hashlib
import http.server
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

from exporters.exposition import Exposition

HEALTH_PATH = "/-/healthy"
IDLE_TIMEOUT_S = 30.0  # a keep-alive connection with no request for this long is closed


def wants_openmetrics(accept: str | None) -> bool:
    """True when Accept lists OpenMetrics 1.0.0 / 0.0.1 (Prometheus does by default)."""
    for clause in (accept or "").split(","):
        media, *params = (p.strip() for p in clause.split(";"))
        if media.lower() != "application/openmetrics-text":
            continue
        options = dict(p.split("=", 1) for p in params if "=" in p)
        if options.get("q", "1").strip() in ("0", "0.0", "0.00", "0.000"):
            continue
        if options.get("version", "1.0.0").strip() in ("1.0.0", "0.0.1"):
            return True
    return False


def accepts_gzip(accept_encoding: str | None) -> bool:
    for clause in (accept_encoding or "").split(","):
        coding, *params = (p.strip() for p in clause.split(";"))
        if coding.lower() in ("gzip", "*") and not any(
                p.replace(" ", "") in ("q=0", "q=0.0", "q=0.00", "q=0.000") for p in params):
            return True
    return False


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection
    server_version = "neuron-monitor-prometheus"
    sys_version = ""
    timeout = IDLE_TIMEOUT_S
    server: MetricsHTTPServer

    def setup(self) -> None:
        super().setup()
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()  # here, in the connection's thread, not in accept()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._respond(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._respond(head=True)

    def _respond(self, head: bool) -> None:
        if self.path.split("?", 1)[0] == HEALTH_PATH:
            ok, text = self.server.health()
            self._send(text.encode() + b"\n", "text/plain; charset=utf-8", False, head,
                       200 if ok else 503)
            return
        exposition = self.server.source()
        gzip = accepts_gzip(self.headers.get("Accept-Encoding"))
        body, content_type = exposition.body(wants_openmetrics(self.headers.get("Accept")), gzip)
        self._send(body, content_type, gzip, head)

    def _send(self, body: bytes, content_type: str, gzip: bool, head: bool,
              status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Vary", "Accept, Accept-Encoding")
        if gzip:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # one line per scrape would flood stderr; errors are answered, not logged

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError, ssl.SSLError):
            pass  # the scraper went away or spoke no TLS: nothing to answer


class MetricsHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], source: Callable[[], Exposition],
                 tls: TlsReloader | None = None,
                 health: Callable[[], tuple[bool, str]] | None = None):
        self.source = source
        self.tls = tls
        self.health = health or (lambda: (True, "OK"))  # (healthy, text) for /-/healthy
        super().__init__(address, _Handler)
        if tls is not None:
            self.socket = tls.context.wrap_socket(self.socket, server_side=True,
                                                  do_handshake_on_connect=False)

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a broken connection must not print a traceback

    @property
    def port(self) -> int:
        return self.server_address[1]


class TlsReloader:
    """An SSL context whose certificate and key are reloaded when either file changes."""

    def __init__(self, cert_file: Path, key_file: Path):
        self.cert_file, self.key_file = cert_file, key_file
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._digest = ""
        self.reload_if_changed()

    def _files_digest(self) -> str:
        h = hashlib.sha256()
        for path in (self.cert_file, self.key_file):
            h.update(path.read_bytes())
        return h.hexdigest()

    def reload_if_changed(self) -> bool:
        """Raises OSError / ssl.SSLError only on the first load; later failures keep the old pair."""
        try:
            digest = self._files_digest()
            if digest == self._digest:
                return False
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError):
            if not self._digest:
                raise
            return False
        self._digest = digest
        return True


def serve_in_thread(server: MetricsHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="metrics-http", daemon=True)
    thread.start()
    return thread
