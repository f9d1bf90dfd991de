"""``neuron-top --prometheus URL``: the fleet view's flags and start-up checks.

A bad URL, a bad selector, a server that cannot be reached or that is not a Prometheus HTTP API
is one line on stderr and exit status 2 before the screen starts; once running, an outage is a
banner and the last good data stays.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

ENV = "NEURONSCOPE_PROMETHEUS"
# (least, most) seconds of each duration flag: Prometheus takes durations from 1 ms, and a huge
# one overflowed the clock or the socket's timeout (tracebacks); a refresh under 0.1 s would
# only hammer the server
LIMITS = {"window": (0.001, 365 * 86400.0), "refresh": (0.1, 86400.0),
          "query_timeout": (0.01, 3600.0), "scrape_interval": (0.001, 86400.0)}


# the fleet view's own flags (argparse dests), a usage error without --prometheus
FLAGS = ("selector", *LIMITS)


def add_arguments(parser: argparse.ArgumentParser, sources) -> None:
    sources.add_argument("--prometheus", metavar="URL",
                         help=f"fleet view: every instance this Prometheus (or VictoriaMetrics, "
                              f"Thanos, Mimir) scrapes; also ${ENV}")
    fleet = parser.add_argument_group("fleet view (--prometheus)")
    fleet.add_argument("--selector", default="", metavar="MATCHERS",
                       help="PromQL label matchers that pick the instances, e.g. "
                            "'instance_type=\"trn2.48xlarge\",availability_zone=~\"us-east-2.\"'")
    fleet.add_argument("--window", type=float, default=300.0, metavar="SECONDS",
                       help="utilization history and error/ECC window (default 300)")
    fleet.add_argument("--refresh", type=float, default=2.0, metavar="SECONDS",
                       help="seconds between fleet refreshes (default 2)")
    fleet.add_argument("--query-timeout", type=float, default=5.0, metavar="SECONDS",
                       help="timeout of each query (default 5)")
    fleet.add_argument("--scrape-interval", type=float, default=None, metavar="SECONDS",
                       help="the targets' scrape interval (default: from /api/v1/targets, else 15)")


def wanted(args: argparse.Namespace) -> str | None:
    """The Prometheus URL when the fleet view is asked for (flag, or the environment when no
    other source is named)."""
    if args.prometheus is not None:
        return args.prometheus
    named = args.stream is not None or args.input is not None or args.replay is not None or args.demo
    env = os.environ.get(ENV, "").strip()
    return env if env and not named else None


def build(url: str, args: argparse.Namespace):
    """(FleetQuery, selector text) or ValueError with one line."""
    from monitor.fleet import DEFAULT_LOOKBACK_S, FleetConfig, FleetQuery
    from monitor.promql import PrometheusClient, PrometheusError, parse_selector, render_selector

    for name, (least, most) in LIMITS.items():
        value = getattr(args, name)
        # float() takes "inf" and "nan": neither is a duration (an infinite window or refresh)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"--{name.replace('_', '-')} must be > 0 and finite, got {value:g}")
        if value is not None and not least <= value <= most:
            raise ValueError(f"--{name.replace('_', '-')} must be between {least:g} and "
                             f"{most:g} seconds, got {value:g}")
    try:
        matchers = parse_selector(args.selector)
    except ValueError as exc:
        raise ValueError(f"--selector: {exc}") from None
    try:
        client = PrometheusClient(url, timeout=args.query_timeout)
    except ValueError as exc:
        raise ValueError(f"--prometheus: {exc}") from None
    try:   # one cheap query proves the URL is a Prometheus HTTP API
        client.query("vector(1)")
    except PrometheusError as exc:
        raise ValueError(str(exc)) from None
    config = FleetConfig(matchers=matchers, window=args.window,
                         lookback=max(DEFAULT_LOOKBACK_S, 3 * args.window),
                         scrape_interval=args.scrape_interval)
    return FleetQuery(client, config), render_selector(matchers)


def run(url: str, args: argparse.Namespace, prog: str) -> int:
    try:
        fleet, selector = build(url, args)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    if not sys.stdout.isatty():   # checked after the URL, whose errors say more
        fleet.close()
        print(f"{prog}: stdout is not a terminal; the fleet view needs one", file=sys.stderr)
        return 2
    from tui.fleet import FleetApp

    app = FleetApp(fleet, selector=selector, refresh=args.refresh)
    try:
        app.run()
    except KeyboardInterrupt:
        pass
    finally:
        fleet.close()
    return app.return_code or 0
