"""HTTP(S) server for the exposition: stdlib ThreadingHTTPServer serving pre-rendered bytes.

A scrape does no metric work at all: it picks the current `Exposition` (OpenMetrics when the
Accept header asks for it, gzip when Accept-Encoding allows it) and writes its cached bytes.
Like prometheus_client's server, every path serves the metrics, except `/-/healthy`, and
`?name[]=NAME` (repeatable) serves only those samples (filtered from the cached body).

Bounded against slow or hostile clients: at most ``MAX_CONNECTIONS`` connections (one thread
each). A request must arrive whole within ``REQUEST_TIMEOUT_S`` of its first byte (a client
trickling a byte at a time is cut off), a connection may wait ``IDLE_TIMEOUT_S`` for its next
request, and an answer must be taken within ``WRITE_TIMEOUT_S``. When every slot is taken, a new
connection evicts the one that has waited longest without a complete request, or else one that
has taken over ``SLOW_ANSWER_S`` to read its answer (slow readers with requests pipelined behind
them), so a scraper that sends its request at once is always served, however many slow clients
hold connections.
"""
from __future__ import annotations

import hashlib
import http.server
import io
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from exporters.exposition import Exposition

HEALTH_PATH = "/-/healthy"
IDLE_TIMEOUT_S = 30.0  # a keep-alive connection with no request for this long is closed
REQUEST_TIMEOUT_S = 5.0  # from a request's first byte (or the TLS hello) to its last header line
WRITE_TIMEOUT_S = 10.0  # to take an answer (a body is at most a few hundred kB)
MAX_CONNECTIONS = 64
SLOW_ANSWER_S = 1.0  # an answer still being read after this long may be cut off for a new client


class _Connection:
    """What the server knows of one accepted connection: whether it is waiting for (or reading)
    a request, and since when; the socket, to cut it off when its slot is needed."""

    __slots__ = ("sock", "waiting", "since", "deadline", "evicted")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.waiting = True
        self.since = time.monotonic()
        self.deadline = self.since + REQUEST_TIMEOUT_S  # the TLS handshake, or the first request
        self.evicted = False

    def evict(self) -> None:
        self.evicted = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # its thread's recv returns at once
        except OSError:
            pass


class _DeadlineReader(io.RawIOBase):
    """The request side of a connection, reading under the connection's deadline: a request
    gets REQUEST_TIMEOUT_S from its first byte however slowly the bytes come."""

    def __init__(self, sock: socket.socket, conn: _Connection) -> None:
        self._sock, self._conn = sock, conn

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        remaining = self._conn.deadline - time.monotonic()
        if remaining <= 0 or self._conn.evicted:
            raise TimeoutError("request not received in time")
        self._sock.settimeout(remaining)
        n = self._sock.recv_into(buffer)
        if n and self._conn.waiting:
            self._conn.deadline = min(self._conn.deadline, time.monotonic() + REQUEST_TIMEOUT_S)
        return n


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
    timeout = IDLE_TIMEOUT_S
    server: MetricsHTTPServer

    def version_string(self) -> str:
        return self.server_version      # the base class adds " Python/3.x" (or a bare space)

    def setup(self) -> None:
        self.conn = self.server.connection_of(self.request)
        self.timeout = REQUEST_TIMEOUT_S  # the TLS handshake's bound (setup() applies it)
        super().setup()
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()  # here, in the connection's thread, not in accept()
        self.rfile.close()  # the plain socket file: requests are read under the deadline instead
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self.conn))
        self.answered = 0

    def handle_one_request(self) -> None:
        conn = self.conn
        conn.waiting, conn.since = True, time.monotonic()
        if self.answered:  # a kept-alive connection may wait this long for its next request
            conn.deadline = conn.since + IDLE_TIMEOUT_S
        super().handle_one_request()
        self.answered += 1

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._respond(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._respond(head=True)

    def _respond(self, head: bool) -> None:
        # a whole request: answered, evicted only if its reader takes over SLOW_ANSWER_S
        self.conn.waiting, self.conn.since = False, time.monotonic()
        self.connection.settimeout(WRITE_TIMEOUT_S)
        if self.path.split("?", 1)[0] == HEALTH_PATH:
            ok, text = self.server.health()
            self._send(text.encode() + b"\n", "text/plain; charset=utf-8", False, head,
                       200 if ok else 503)
            return
        exposition = self.server.source()
        gzip = accepts_gzip(self.headers.get("Accept-Encoding"))
        openmetrics = wants_openmetrics(self.headers.get("Accept"))
        names = _requested_names(self.path)
        if names:
            body, content_type = exposition.restricted(names, openmetrics, gzip)
        else:
            body, content_type = exposition.body(openmetrics, gzip)
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


def _requested_names(path: str) -> frozenset[str]:
    """The `name[]` query values (`/metrics?name[]=up&name[]=instance_info`): only those
    samples are served, as prometheus_client's server does."""
    query = path.split("?", 1)[1] if "?" in path else ""
    return frozenset(urllib.parse.parse_qs(query).get("name[]", ()))


class MetricsHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], source: Callable[[], Exposition],
                 tls: TlsReloader | None = None,
                 health: Callable[[], tuple[bool, str]] | None = None,
                 max_connections: int = MAX_CONNECTIONS):
        self.source = source
        self.tls = tls
        self.health = health or (lambda: (True, "OK"))  # (healthy, text) for /-/healthy
        self.max_connections = max_connections
        self.refused = 0  # connections closed at once: every slot busy answering
        self.evicted = 0  # connections cut off to make room
        self._connections: dict[object, _Connection] = {}
        self._lock = threading.Lock()
        super().__init__(address, _Handler)
        if tls is not None:
            self.socket = tls.context.wrap_socket(self.socket, server_side=True,
                                                  do_handshake_on_connect=False)

    def process_request(self, request, client_address) -> None:  # type: ignore[override]
        """Admit the connection if a slot is free or can be freed; else close it at once."""
        with self._lock:
            live = [c for c in self._connections.values() if not c.evicted]
            if len(live) >= self.max_connections:
                slow_since = time.monotonic() - SLOW_ANSWER_S
                evictable = ([c for c in live if c.waiting]
                             or [c for c in live if c.since < slow_since])
                if not evictable:
                    self.refused += 1
                    self._close(request)
                    return
                min(evictable, key=lambda c: c.since).evict()
                self.evicted += 1
            self._connections[request] = _Connection(request)
        super().process_request(request, client_address)

    def connection_of(self, request: object) -> _Connection:
        with self._lock:
            return self._connections.setdefault(request, _Connection(request))  # type: ignore[arg-type]

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def shutdown_request(self, request) -> None:  # type: ignore[override]
        with self._lock:
            self._connections.pop(request, None)
        super().shutdown_request(request)

    def _close(self, request) -> None:
        try:
            request.close()
        except OSError:
            pass

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a broken connection must not print a traceback

    @property
    def port(self) -> int:
        return self.server_address[1]


def tls_problem(cert_file: Path, key_file: Path, exc: Exception) -> str:
    """What is wrong with a certificate/key pair, naming the file: OpenSSL says only "[SSL] PEM
    lib (_ssl.c:3905)" for a file that holds no PEM block at all."""
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError):
        return f"{exc.filename or cert_file}: {exc.strerror or exc}"
    for path, marker, what in ((cert_file, b"-----BEGIN CERTIFICATE-----", "certificate"),
                               (key_file, b"PRIVATE KEY-----", "private key")):
        try:
            if marker not in path.read_bytes():
                return f"{path}: holds no PEM {what}"
        except OSError as err:
            return f"{path}: {err.strerror or err}"
    if _encrypted(key_file):
        return f"{key_file}: the private key is encrypted; give the exporter an unencrypted key"
    reason = getattr(exc, "reason", None) or ""
    if reason == "KEY_VALUES_MISMATCH":
        return f"{key_file} is not the private key of {cert_file}"
    return f"{cert_file} / {key_file}: {reason or exc}"


def _encrypted(key_file: Path) -> bool:
    """A pass-phrase protected key, in PKCS#8 or the traditional PEM header's form."""
    try:
        text = key_file.read_bytes()
    except OSError:
        return False
    return b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in text or b"Proc-Type: 4,ENCRYPTED" in text


def _no_passphrase() -> bytes:
    # Without a pass-phrase callback OpenSSL asks for one on the terminal: the exporter stopped
    # there at start, and its reload check would stop serving new pairs. An empty one fails.
    return b""


class TlsReloader:
    """An SSL context whose certificate and key are reloaded when either file changes."""

    def __init__(self, cert_file: Path, key_file: Path):
        self.cert_file, self.key_file = cert_file, key_file
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._digest = ""
        self._refused = ""      # the digest of a changed pair that failed to load
        self.refusal = ""       # why it failed, for one warning per such change
        self.reload_if_changed()

    def _files_digest(self) -> str:
        h = hashlib.sha256()
        for path in (self.cert_file, self.key_file):
            h.update(path.read_bytes())
        return h.hexdigest()

    def reload_if_changed(self) -> bool:
        """Raises OSError / ssl.SSLError only on the first load; later failures keep the old pair
        and set ``refusal`` once per changed pair (a half-written renewal is retried, and said
        once it stays unloadable)."""
        self.refusal = ""
        digest = ""
        try:
            digest = self._files_digest()
            if digest in (self._digest, self._refused):
                return False
            self.context.load_cert_chain(self.cert_file, self.key_file, password=_no_passphrase)
        except (OSError, ssl.SSLError) as exc:
            if not self._digest:
                raise
            if digest:
                self._refused = digest
                self.refusal = (f"the changed TLS certificate or key cannot be loaded "
                                f"({tls_problem(self.cert_file, self.key_file, exc)}); still "
                                "serving the previous pair")
            return False
        self._digest, self._refused = digest, ""
        return True


def serve_in_thread(server: MetricsHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="metrics-http", daemon=True)
    thread.start()
    return thread
