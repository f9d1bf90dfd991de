"""A throwaway HTTP server on a loopback port, for the tests of the Prometheus client and the
fleet CLI's bad-server cases: a handler class in, the server's base URL out."""
from __future__ import annotations

import contextlib
import http.server
import sys
import threading
from collections.abc import Iterator


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A client that hangs up mid-answer (the tests' own clients do, on purpose) is not a
        fault of the stub; anything else still prints."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    httpd = _Server(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class Quiet(http.server.BaseHTTPRequestHandler):
    """A handler that does not log each request to stderr."""

    def log_message(self, *args) -> None:
        pass

    def answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
