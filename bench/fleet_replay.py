"""Many instances' exporters in one process, for fleet-scale benchmarks on a small machine.

    python bench/fleet_replay.py --stream trn2.jsonl --instances 64 --ports-file ports

Each simulated instance is neuronscope's real exporter (``PrometheusExporter``, the metric state
and renderer behind ``neuron-monitor-prometheus``) served by its real HTTP server on its own
loopback port. Every ``--period`` seconds (by default the recording's own, as its first report
says) each one ingests the next report of a recorded
neuron-monitor stream (``neuron-monitor --record``), under its own instance id, name and zone and
starting at its own offset in the recording, so instances differ. The ports are written to
``--ports-file`` (one per line, atomically) once every exporter has served its first report; the
feed's own cost per period goes to stderr with ``--verbose``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import signal
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from exporters.exporter import PrometheusExporter  # noqa: E402
from exporters.server import MetricsHTTPServer, serve_in_thread  # noqa: E402
from monitor.report import Report  # noqa: E402
from monitor.sources import report_interval  # noqa: E402

ZONES = ("us-east-2a", "us-east-2b", "us-east-2c")


def load_stream(path: pathlib.Path) -> list[Report]:
    reports = [Report.from_json(line) for line in path.read_bytes().splitlines() if line.strip()]
    if len(reports) < 2:
        raise SystemExit(f"fleet_replay: {path}: needs at least 2 reports, found {len(reports)}")
    return reports


def identity(base: Report, k: int):
    zone = ZONES[k % len(ZONES)]
    return dataclasses.replace(base.instance, id=f"i-{k:017x}", name=f"fleet-{k:04d}",
                               availability_zone=zone, availability_zone_id=f"use2-az{k % 3 + 1}")


class Fleet:
    def __init__(self, reports: list[Report], n: int) -> None:
        self.reports = reports
        self.instances = [identity(reports[0], k) for k in range(n)]
        self.exporters = [PrometheusExporter() for _ in range(n)]
        self.servers = []
        for exporter in self.exporters:
            server = MetricsHTTPServer(("127.0.0.1", 0), lambda e=exporter: e.current)
            serve_in_thread(server)
            self.servers.append(server)
        self.tick = 0

    def feed(self) -> float:
        """Every exporter ingests its next report; returns the seconds it took."""
        started = time.perf_counter()
        now = time.time()
        m = len(self.reports)
        for k, exporter in enumerate(self.exporters):
            report = self.reports[(k + self.tick) % m]
            exporter.ingest(dataclasses.replace(report, instance=self.instances[k],
                                                received_at=now))
        self.tick += 1
        return time.perf_counter() - started

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fleet_replay", description=__doc__.splitlines()[0])
    p.add_argument("--stream", type=pathlib.Path, required=True, help="recorded JSON lines")
    p.add_argument("--instances", type=int, default=64)
    p.add_argument("--period", type=float, default=None,
                   help="seconds between reports (default: the recording's own period)")
    p.add_argument("--ports-file", type=pathlib.Path, required=True)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.instances < 1 or (args.period is not None and args.period <= 0):
        p.error("--instances and --period must be positive")
    reports = load_stream(args.stream)
    period = args.period if args.period is not None else report_interval(reports[0])
    fleet = Fleet(reports, args.instances)
    fleet.feed()
    tmp = args.ports_file.with_suffix(".tmp")
    tmp.write_text("".join(f"{s.port}\n" for s in fleet.servers))
    os.replace(tmp, args.ports_file)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    next_at = time.monotonic() + period
    while not stop.wait(max(0.0, next_at - time.monotonic())):
        took = fleet.feed()
        if args.verbose:
            print(f"fleet_replay: fed {args.instances} exporters in {took * 1000:.0f} ms",
                  file=sys.stderr, flush=True)
        next_at += period
        if next_at < time.monotonic():  # fell behind: skip the missed ticks, as collect_every does
            next_at = time.monotonic() + period
    fleet.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
