"""`neuron-monitor-prometheus`: serve neuron-monitor reports as Prometheus metrics.

    neuron-monitor | neuron-monitor-prometheus [-p PORT] [--bind ADDR]

A drop-in for AWS's neuron-monitor-prometheus.py (same flags, names, labels and HELP), plus
neuronscope's engine, HBM, FLOPs, power and exporter-health metrics (docs/metrics.md).
"""
from __future__ import annotations

import argparse
import math
import signal
import socket
import ssl
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

from exporters.exporter import PrometheusExporter, package_version
from exporters.server import MetricsHTTPServer, TlsReloader, serve_in_thread, tls_problem
from monitor.errors import one_line
from monitor.live import InputError, collector_reports
from monitor.report import Report
from monitor.sources import default_stdin, stdin_stream
from monitor.stdout import stderr_or_null

PROG = "neuron-monitor-prometheus"
TLS_CHECK_INTERVAL_S = 5.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Serve neuron-monitor JSON reports (read from stdin, or collected "
        "in-process with --collect) as Prometheus metrics.",
        epilog="Example: neuron-monitor | neuron-monitor-prometheus --port 8000")
    p.add_argument("-p", "--port", type=int, default=8000, help="TCP port (default 8000; 0 picks one)")
    p.add_argument("--bind", default="127.0.0.1", metavar="ADDR",
                   help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--cert-file", type=Path, metavar="F", help="TLS certificate (PEM); needs --key-file")
    p.add_argument("--key-file", type=Path, metavar="F", help="TLS private key (PEM); needs --cert-file")
    p.add_argument("--collect", action="store_true",
                   help="run the collector in this process instead of reading stdin")
    p.add_argument("-c", "--config", type=Path, metavar="CONFIG",
                   help="neuron-monitor configuration file for --collect")
    p.add_argument("--root", metavar="DIR", type=Path,
                   help="with --collect: the simulated instance `neuron-sim start --root DIR` "
                   "runs (default: the per-user one)")
    p.add_argument("--stale-after", type=float, metavar="SECONDS",
                   help="/-/healthy answers 503 once no report arrived for this long "
                        "(default: 3 report periods; 15 s before the first report)")
    p.add_argument("--keep-serving", action="store_true",
                   help="at the end of input keep serving the last report instead of exiting "
                        "with status 1 (for replaying a file)")
    p.add_argument("--enable-k8s-info", action="store_true",
                   help="add pod, namespace and container labels from neuron_k8s_info to the "
                        "per-core and per-device series (as AWS's exporter does with this flag)")
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    return p


def _usage_error(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    if not 0 <= args.port <= 65535:
        return f"--port {args.port}: must be between 0 and 65535"
    if (args.cert_file is None) != (args.key_file is None):
        return "--cert-file and --key-file go together"
    if args.config is not None and not args.collect:
        return "-c/--config applies to --collect only (neuron-monitor reads its own config)"
    if args.stale_after is not None and not (math.isfinite(args.stale_after)
                                             and args.stale_after > 0):
        # inf turned the health check off: /-/healthy could never answer 503
        return f"--stale-after must be > 0 seconds and finite, got {args.stale_after:g}"
    if args.root is not None and not args.collect:
        return "--root applies to --collect only (neuron-monitor --root reads the instance)"
    if args.keep_serving and args.collect:
        return "--keep-serving applies to stdin input; --collect never ends"
    return None


def _server_class(bind: str) -> type[MetricsHTTPServer]:
    if ":" not in bind:
        return MetricsHTTPServer
    return type("MetricsHTTPServer6", (MetricsHTTPServer,), {"address_family": socket.AF_INET6})


def _notice(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    stderr_or_null()          # before anything could print a diagnostic
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = _usage_error(parser, args)
    if problem:
        parser.print_usage(sys.stderr)
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    try:
        tls = TlsReloader(args.cert_file, args.key_file) if args.cert_file else None
    except (OSError, ssl.SSLError) as exc:
        problem = tls_problem(Path(args.cert_file), Path(args.key_file), exc)
        print(f"{PROG}: error: cannot load the TLS certificate/key: {problem}", file=sys.stderr)
        return 2
    exporter = PrometheusExporter(notice=_notice, k8s_labels=args.enable_k8s_info)
    try:
        server = _server_class(args.bind)((args.bind, args.port), lambda: exporter.current, tls,
                                          health=lambda: exporter.health(args.stale_after))
    except (OSError, OverflowError) as exc:
        print(f"{PROG}: error: cannot listen on {args.bind}:{args.port}: {exc}", file=sys.stderr)
        return 1
    try:
        reports = _reports(args, exporter)
    except InputError as exc:
        server.server_close()
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    return _run(server, exporter, reports, tls, args)


def _reports(args: argparse.Namespace, exporter: PrometheusExporter) -> Iterable[Report]:
    if args.collect:
        return collector_reports(args.config, root=args.root)
    stream = stdin_stream(default_stdin(), "neuron-monitor-prometheus: input", None,
                          after_each=exporter.refresh_if_input_errors_changed)
    exporter.set_stream_errors(lambda: stream.errors)
    return stream


def _run(server: MetricsHTTPServer, exporter: PrometheusExporter, reports: Iterable[Report],
         tls: TlsReloader | None, args: argparse.Namespace) -> int:
    stop = threading.Event()
    signalled = threading.Event()

    def on_signal(*_: object) -> None:
        signalled.set()
        stop.set()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    # Without --keep-serving, the end of stdin ends the process with status 1: a supervisor
    # (systemd, a Kubernetes liveness probe) then restarts the pipeline with a live monitor.
    ended = None if (args.collect or args.keep_serving) else stop
    serve_in_thread(server)
    scheme = "https" if tls else "http"
    source = "the in-process collector" if args.collect else "neuron-monitor JSON lines on stdin"
    print(f"{PROG}: serving {scheme}://{args.bind}:{server.port}/metrics from {source}",
          file=sys.stderr, flush=True)
    reader = threading.Thread(target=_ingest_all, args=(exporter, reports, ended), name="input",
                              daemon=True)
    reader.start()
    while not stop.wait(TLS_CHECK_INTERVAL_S):
        if tls is not None and tls.reload_if_changed():
            print(f"{PROG}: reloaded the TLS certificate", file=sys.stderr, flush=True)
        elif tls is not None and tls.refusal:
            print(f"{PROG}: warning: {tls.refusal}", file=sys.stderr, flush=True)
    server.shutdown()
    server.server_close()
    return 1 if exporter.ended and not signalled.is_set() else 0


def _ingest_all(exporter: PrometheusExporter, reports: Iterable[Report],
                ended: threading.Event | None) -> None:
    failure = ""
    try:
        for report in reports:
            exporter.ingest(report).prepare_gzip()
    except (OSError, ValueError) as exc:  # a collector failure: keep serving the last state
        failure = one_line(str(exc).splitlines()[0] if str(exc) else repr(exc))
    if ended is None:
        exporter.note_eof(f"input failed: {failure}; serving the last report" if failure else
                          "input ended (EOF); serving the last report")
        return
    valid = "" if exporter.reports else " without a single valid report"
    exporter.note_eof(f"input {'failed: ' + failure if failure else 'ended (EOF)'}{valid}; "
                      "exiting with status 1")
    ended.set()


if __name__ == "__main__":
    sys.exit(main())
