"""A small client for the Prometheus HTTP API (Prometheus, VictoriaMetrics, Thanos, Mimir).

Only the standard library (http.client, one kept connection per thread) and orjson: instant
queries, range queries and the targets list, each with a timeout. Every failure becomes a
``PrometheusError`` whose message is one line that says what went wrong and where (unreachable,
not a Prometheus API, a query error), so a CLI or a screen can print it as is.

``parse_selector`` validates the label matchers a user adds on the command line
(``instance_type="trn2.48xlarge",availability_zone=~"us-east-2[ab]"``) and gives them back in a
canonical form to splice into PromQL selectors.
"""
from __future__ import annotations

import http.client
import math
import re
import socket
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import orjson

__all__ = ["PrometheusError", "Sample", "Series", "PrometheusClient", "Matcher", "parse_selector",
           "render_selector", "check_url", "parse_duration", "duration", "label_count"]

MAX_BODY = 64 * 1024 * 1024  # a bounded query never returns more; anything larger is refused


class PrometheusError(Exception):
    """One line for the user; ``kind`` is unreachable, timeout, not_prometheus or query."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Sample:
    """One element of an instant vector."""
    labels: Mapping[str, str]
    value: float
    timestamp: float


@dataclass(frozen=True, slots=True)
class Series:
    """One element of a range query's matrix: timestamps (unix seconds) and values."""
    labels: Mapping[str, str]
    times: np.ndarray
    values: np.ndarray


def _float(text: str) -> float:
    # The API writes values as strings: "1.5", "NaN", "+Inf", "-Inf".
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def label_count(text: str) -> int:
    """A count written in a label ("16"): 0 for anything that is not a finite number >= 0."""
    value = _float(text)
    return max(0, int(value)) if math.isfinite(value) else 0


def check_url(url: str) -> str:
    """The base URL without a trailing slash; ValueError (one line) when it cannot be one."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError(f"{url!r} has no host")
    try:
        parts.port
    except ValueError:
        raise ValueError(f"{url!r} has a bad port") from None
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r}: give the server's base URL, without ?query or #fragment")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))



def duration(seconds: float) -> str:
    """Prometheus's duration text: whole seconds as `300s`, else whole milliseconds (`500ms`;
    it refuses `0.5s`, and `1e+06s` from a float's short form), at least 1 ms."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"

class PrometheusClient:
    """The HTTP API of one server. Thread-safe: each thread keeps its own connection to the
    server (HTTP keep-alive), opened on its first request and again after the server closed it."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.url = check_url(url)
        self.timeout = timeout
        parts = urllib.parse.urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host, self._port, self._prefix = parts.hostname, parts.port, parts.path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: dict[int, http.client.HTTPConnection] = {}   # by thread

    def close(self) -> None:
        """Close every thread's connection (a later request opens a new one)."""
        with self._lock:
            connections, self._open = self._open, {}
        for connection in connections.values():
            connection.close()

    # ------------------------------------------------------------------ transport
    def _connection(self) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            connection = kind(self._host, self._port, timeout=self.timeout or None)
            self._local.connection = connection
        with self._lock:   # (again after close(): a closed connection opens on its next request)
            self._open[threading.get_ident()] = connection
        return connection

    def _exchange(self, method: str, target: str, body: bytes | None) -> tuple[int, str, bytes]:
        """One request on this thread's connection: (status, reason, body). A kept connection
        the server has closed in the meantime is opened again once, for that request only."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        reused = getattr(self._local, "connection", None) is not None
        while True:
            connection = self._connection()
            try:
                connection.request(method, target, body, headers)
                response = connection.getresponse()
                raw = response.read(MAX_BODY + 1)
                if len(raw) > MAX_BODY or response.will_close:
                    connection.close()   # the rest unread, or the server said so
                return response.status, response.reason, raw
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest, http.client.ResponseNotReady):
                connection.close()
                self._local.connection = None
                if not reused:
                    raise
                reused = False   # the kept connection had gone stale: once more, anew
            except BaseException:
                connection.close()
                self._local.connection = None
                raise

    def _get(self, path: str, params: Mapping[str, str] | None = None, *,
             post: bool = True) -> object:
        body = urllib.parse.urlencode(params or {})
        target = self._prefix + path if post or not body else f"{self._prefix}{path}?{body}"
        where = self.url
        try:
            status, reason, raw = self._exchange("POST" if post else "GET", target,
                                                 body.encode() if post else None)
        except (TimeoutError, socket.timeout):
            raise PrometheusError("timeout", f"Prometheus at {where} did not answer within "
                                  f"{self.timeout:g}s") from None
        except http.client.BadStatusLine as exc:
            if not isinstance(exc, http.client.RemoteDisconnected):   # another protocol
                raise PrometheusError("not_prometheus", f"{where} does not answer HTTP (it "
                                      f"said {str(exc).strip()[:40]!r})") from None
            raise PrometheusError("unreachable", f"cannot reach Prometheus at {where}: "
                                  f"{exc}") from None
        except (OSError, ValueError, http.client.HTTPException) as exc:
            # refused, unresolvable, reset, TLS failures, over-long headers, ...
            text = " ".join(str(getattr(exc, "strerror", None) or exc).split())
            raise PrometheusError("unreachable", f"cannot reach Prometheus at {where}: "
                                  f"{text or type(exc).__name__}") from None
        if status >= 300:
            data = self._decode(raw)
            if isinstance(data, dict) and data.get("status") == "error":
                raise self._query_error(data)
            if status in (502, 503, 504):   # a proxy without its backend, a server starting
                raise PrometheusError("unreachable", f"cannot reach Prometheus at {where}: "
                                      f"HTTP {status} {reason}")
            raise PrometheusError("not_prometheus", f"{where} does not serve the Prometheus "
                                  f"HTTP API ({path}: HTTP {status} {reason})")
        if len(raw) > MAX_BODY:
            raise PrometheusError("query", f"{where}{path}: answer larger than "
                                  f"{MAX_BODY >> 20} MiB")
        data = self._decode(raw)
        if not isinstance(data, dict) or "status" not in data:
            raise PrometheusError("not_prometheus", f"{where} does not serve the Prometheus HTTP "
                                  f"API ({path} did not answer with its JSON)")
        if data["status"] != "success":
            raise self._query_error(data)
        return data.get("data")

    @staticmethod
    def _decode(raw: bytes) -> object:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None

    @staticmethod
    def _query_error(data: dict) -> PrometheusError:
        text = " ".join(str(data.get("error", "unknown error")).split())
        kind = data.get("errorType") or "error"
        return PrometheusError("query", f"query failed ({kind}): {text[:300]}")

    # ------------------------------------------------------------------ API
    def query(self, expr: str, at: float | None = None) -> list[Sample]:
        """An instant query; a scalar answer comes back as one sample without labels."""
        kind, result = self._instant(expr, at)
        if kind == "scalar":
            return [Sample({}, _float(result[1]), float(result[0]))]
        out = []
        append = out.append
        try:
            for item in result:
                ts, value = item["value"]
                append(Sample(item.get("metric", {}), _float(value), float(ts)))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise self._malformed() from None
        return out

    def query_values(self, expr: str, at: float | None = None,
                     by: tuple[str, ...] = ("instance_id",), finite: bool = False) -> dict:
        """An instant query's values keyed by the labels ``by`` (the label's value itself when
        ``by`` is one label, else a tuple; a missing label reads ""): what an aggregation
        ``by (...)`` answers, without a Sample per element. ``finite``: NaN and infinities
        (no reading) are left out."""
        kind, result = self._instant(expr, at)
        if kind == "scalar":
            result = [{"metric": {}, "value": result}]
        out: dict = {}
        isfinite = math.isfinite
        try:
            if len(by) == 1:
                label = by[0]
                for item in result:
                    value = _float(item["value"][1])
                    if not finite or isfinite(value):
                        out[item.get("metric", {}).get(label, "")] = value
            else:
                for item in result:
                    value = _float(item["value"][1])
                    if not finite or isfinite(value):
                        labels = item.get("metric", {})
                        out[tuple([labels.get(name, "") for name in by])] = value
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            raise self._malformed() from None
        return out

    def _instant(self, expr: str, at: float | None) -> tuple[str, list]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        if self.timeout:
            params["timeout"] = duration(self.timeout)
        data = self._get("/api/v1/query", params)
        if not isinstance(data, dict):
            raise PrometheusError("not_prometheus", f"{self.url}: /api/v1/query answered without data")
        kind, result = data.get("resultType"), data.get("result")
        if kind == "scalar" and isinstance(result, list) and len(result) == 2:
            return kind, result
        if kind != "vector" or not isinstance(result, list):
            raise PrometheusError("query", f"query returned a {kind}, not an instant vector: {expr[:80]}")
        return kind, result

    def _malformed(self) -> PrometheusError:
        return PrometheusError("not_prometheus", f"{self.url}: malformed vector in the answer to "
                               "/api/v1/query")

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                  "step": duration(step)}
        if self.timeout:
            params["timeout"] = duration(self.timeout)
        data = self._get("/api/v1/query_range", params)
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusError("query", f"range query did not return a matrix: {expr[:80]}")
        out = []
        for item in data.get("result") or ():
            try:
                points = item["values"]
                times = np.fromiter((float(p[0]) for p in points), float, len(points))
                values = np.fromiter((_float(p[1]) for p in points), float, len(points))
            except (KeyError, TypeError, ValueError, IndexError):
                raise PrometheusError("not_prometheus", f"{self.url}: malformed matrix in the "
                                      "answer to /api/v1/query_range") from None
            out.append(Series(item.get("metric", {}), times, values))
        return out

    def scrape_intervals(self) -> dict[tuple[str, str], float]:
        """(job, instance) -> scrape interval in seconds, from /api/v1/targets where offered."""
        try:
            data = self._get("/api/v1/targets", {"state": "active"}, post=False)
        except PrometheusError:
            return {}
        out = {}
        for target in (data or {}).get("activeTargets") or () if isinstance(data, dict) else ():
            labels = target.get("labels") or {}
            interval = target.get("scrapeInterval") or (target.get("discoveredLabels") or {}).get(
                "__scrape_interval__")
            seconds = parse_duration(interval) if isinstance(interval, str) else None
            if seconds:
                out[(labels.get("job", ""), labels.get("instance", ""))] = seconds
        return out


# ---------------------------------------------------------------------- durations and selectors
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", re.ASCII)
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_duration(text: str) -> float | None:
    """Prometheus durations (``15s``, ``1m30s``, ``500ms``) in seconds; None when not one."""
    text = text.strip()
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNIT[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and pos > 0 else None


@dataclass(frozen=True, slots=True)
class Matcher:
    label: str
    op: str  # = != =~ !~
    value: str

    def promql(self) -> str:
        return f"{self.label}{self.op}{orjson.dumps(self.value).decode()}"


_MATCHER = re.compile(r"""\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)\s*(,|$)""")


def _unquote(token: str) -> str:
    if token[0] == "`":
        return token[1:-1]
    body = token[1:-1]
    if token[0] == "'":  # PromQL's single quotes escape the same way; JSON needs double quotes
        body = body.replace('\\\'', "'").replace('"', '\\"')
    try:
        value = orjson.loads(f'"{body}"')
    except orjson.JSONDecodeError:
        raise ValueError(f"bad escape in {token}") from None
    return value


def parse_selector(text: str) -> tuple[Matcher, ...]:
    """Label matchers, comma-separated, optionally in braces; ValueError (one line) when bad."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    if not body.strip():
        return ()
    matchers, pos = [], 0
    while pos < len(body):
        match = _MATCHER.match(body, pos)
        if match is None:
            rest = body[pos:].strip()
            raise ValueError(f"bad label matcher at {rest[:40]!r}: expected label=\"value\" "
                             "(operators = != =~ !~, values in quotes)")
        label, op, token = match.group(1), match.group(2), match.group(3)
        if label == "__name__":
            raise ValueError("the selector filters instances; it cannot match metric names")
        value = _unquote(token)
        if op in ("=~", "!~"):
            _check_re2(label, value)
        matchers.append(Matcher(label, op, value))
        pos = match.end()
        if match.group(4) == "" and pos < len(body):
            raise ValueError(f"bad label matcher at {body[pos:][:40]!r}")
    return tuple(matchers)


# RE2, which Prometheus matches with, has no lookaround or backreferences; Python's re has no
# Unicode classes (\p{L}, \pL). A regex is checked by Python's re with those told apart.
_NOT_RE2 = re.compile(r"\(\?<?[=!]|\\[1-9]")
_UNICODE_CLASS = re.compile(r"\\[pP](?:\{[^}]*\}|[A-Za-z])")


def _check_re2(label: str, value: str) -> None:
    if _NOT_RE2.search(value):
        raise ValueError(f"bad regular expression for {label}: Prometheus's RE2 has no "
                         "lookaround ((?=, (?!, (?<=) or backreferences (\\1)")
    try:
        re.compile(_UNICODE_CLASS.sub(".", value))
    except re.error as exc:
        raise ValueError(f"bad regular expression for {label}: {exc}") from None


def render_selector(matchers: tuple[Matcher, ...]) -> str:
    """The matchers joined with commas, ready to go inside ``{...}`` (empty when none)."""
    return ",".join(m.promql() for m in matchers)
