"""Fleet at scale: what neuron-top's fleet queries cost a real Prometheus holding N instances.

    python bench/bench_fleet_scale.py                        # 64 trn2.48xlarge instances
    python bench/bench_fleet_scale.py --sizes 64,128,256,512 --interval 15   # the biggest fleet

Per size N: bench/fleet_replay.py serves N instances (the real exporter, one loopback port each,
replaying a trn2.48xlarge stream recorded from the simulator with ``neuron-monitor --record``: 16
devices, 64 cores, ~1,950 series per instance), a real Prometheus scrapes them every
``--interval`` seconds with dashboards/fleet-rules.yml loaded. Then, median of ``--runs``:

- every panel query of the fleet screen (``monitor.fleet_queries.QUERIES`` as ``FleetQuery`` sends them,
  and the history range query): Prometheus's own evaluation time (``stats=all``) and the HTTP
  round trip; beside it the recorded series that replaces it (fleet-rules.yml);
- one whole refresh (``FleetQuery.fetch``: every query at once, as the screen does) and the
  Prometheus CPU it costs beyond ingestion (``/proc`` CPU time during refreshes minus the idle
  rate measured just before);
- Prometheus RSS, head series, rule evaluation time, the oldest target sample, the feed's time.

N "holds" when every target is up and fresh (no sample older than 2 intervals), the fleet rules
evaluate within one interval, the feed keeps its period and a refresh answers within the screen's
query timeout (5 s). The ratio is against the issue's 250 ms refresh budget.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "dashboards"))
import fleet_env  # noqa: E402  (the test fleet's Prometheus / VictoriaMetrics launchers)
import fleet_gen  # noqa: E402
from monitor.fleet import FleetConfig, FleetQuery  # noqa: E402
from monitor.fleet_queries import QUERIES  # noqa: E402
from monitor.promql import PrometheusClient  # noqa: E402

REFRESH_BUDGET_S = 0.25   # issue 15: fleet screen refresh <= 250 ms at 64 instances
CLIENT_TIMEOUT_S = 5.0    # monitor.promql.PrometheusClient's default
HISTORY_POINTS = 60
TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------ measuring
def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_bytes(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def timed_query(base: str, expr: str, range_s: float | None = None,
                step: float | None = None) -> tuple[float, float, int]:
    """(wall seconds, server evaluation seconds or nan, series) of one query."""
    params = {"query": expr, "stats": "all"}
    path = "/api/v1/query"
    if range_s is not None:
        end = time.time()
        params.update(start=f"{end - range_s:.3f}", end=f"{end:.3f}", step=f"{step:g}")
        path = "/api/v1/query_range"
    started = time.perf_counter()
    with urllib.request.urlopen(f"{base}{path}?{urllib.parse.urlencode(params)}",
                                timeout=60) as resp:
        body = json.load(resp)
    wall = time.perf_counter() - started
    assert body["status"] == "success", (expr, body)
    timings = (body["data"].get("stats") or {}).get("timings") or {}
    return wall, float(timings.get("evalTotalTime", "nan")), len(body["data"]["result"])


def own_metrics(base: str) -> dict[str, float]:
    """A few of the server's own metrics (/metrics), summed over their label sets."""
    wanted = ("prometheus_tsdb_head_series", "prometheus_rule_group_last_duration_seconds",
              "vm_rows", "vm_cache_entries")
    out: dict[str, float] = {}
    with urllib.request.urlopen(base + "/metrics", timeout=30) as resp:
        for line in resp.read().decode().splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in wanted:
                key = name
                if name == "prometheus_rule_group_last_duration_seconds":
                    key += ":max"
                    out[key] = max(out.get(key, 0.0), float(line.rsplit(" ", 1)[1]))
                else:
                    out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)


# ------------------------------------------------------------------------------ the fleet
def record_stream(workdir: pathlib.Path, reports: int = 12) -> pathlib.Path:
    """A trn2.48xlarge stream from the simulator: neuron-monitor --record, every group, 1 s."""
    root = workdir / "sim"
    root.mkdir(mode=0o700)
    config = workdir / "monitor.json"
    config.write_text(json.dumps(fleet_env.MONITOR_CONFIG))
    out = workdir / "trn2.jsonl"
    sim = fleet_env.console_script("neuron-sim")
    subprocess.run([sim, "start", "--root", str(root), "-i", "trn2.48xlarge", "--seed", "7"],
                   check=True, capture_output=True, timeout=120)
    try:
        time.sleep(2)
        subprocess.run([fleet_env.console_script("neuron-monitor"), "-c", str(config), "--root",
                        str(root), "--count", str(reports), "--record", str(out)],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
    finally:
        subprocess.run([sim, "stop", "--root", str(root)], capture_output=True, timeout=60)
    return out


class Replay:
    """bench/fleet_replay.py as a subprocess; its per-feed times are collected from stderr."""

    def __init__(self, stream: pathlib.Path, n: int, interval: float, workdir: pathlib.Path):
        ports = workdir / f"ports-{n}"
        ports.unlink(missing_ok=True)  # a previous run's file must not be taken for this one
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "fleet_replay.py"), "--stream", str(stream),
             "--instances", str(n), "--period", str(interval), "--ports-file", str(ports),
             "--verbose"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.feeds: list[float] = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 60 + n * 0.2
        while not ports.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"fleet_replay did not start {n} exporters")
            time.sleep(0.2)
        self.targets = [f"127.0.0.1:{p}" for p in ports.read_text().split()]

    def _read(self) -> None:
        for line in self.proc.stderr:
            if " in " in line and line.rstrip().endswith(" ms"):
                self.feeds.append(float(line.rsplit(" ", 2)[1]) / 1000)

    def close(self) -> None:
        fleet_env._stop(self.proc)


def screen_queries(base: str, interval: float) -> tuple[FleetQuery, dict[str, str]]:
    fq = FleetQuery(PrometheusClient(base, timeout=60),
                    FleetConfig(scrape_interval=interval))
    return fq, {name: fq.expr(name, interval) for name in QUERIES}


def recorded_equivalents() -> dict[str, tuple[str, str]]:
    """screen panel -> (recorded series of fleet-rules.yml holding the same aggregate, the
    rule's expression)."""
    exprs = {record: expr for _, rules in fleet_gen.RULE_GROUPS for record, expr, _ in rules}
    return {name: (record, exprs[record]) for name, record in fleet_gen.SCREEN_RECORDS.items()}


def measure(kind: str, server, n: int, interval: float, runs: int, replay: Replay) -> dict:
    base, pid = server.base_url, server.proc.pid
    fleet_env.wait_for(base, 'count(up{job="neuron"} == 1)',
                       lambda r: r and int(float(r[0]["value"][1])) == n, 120 + n * 0.3)
    settle = 6 * interval  # rate windows (4 intervals) filled, rules evaluated a few times
    time.sleep(settle)
    if kind == "prometheus":
        fleet_env.wait_for(base, "count(instance_id:neuron_core_model_flops:rate1m)",
                           lambda r: r and int(float(r[0]["value"][1])) == n, 60)
    fq, exprs = screen_queries(base, interval)
    rec = recorded_equivalents() if kind == "prometheus" else {}
    # idle: what ingestion (and rule evaluation) costs without queries
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(max(10.0, 2 * interval))
    idle_cpu_per_s = (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
    panels = {}
    step = max(interval, 300.0 / HISTORY_POINTS)
    history = fq.expr("history", interval)
    for name, expr in list(exprs.items()) + [("history", history)]:
        rng = (step * (HISTORY_POINTS - 1), step) if name == "history" else (None, None)
        walls, evals, series = [], [], 0
        timed_query(base, expr, *rng)  # warm
        for _ in range(runs):
            wall, ev, series = timed_query(base, expr, *rng)
            walls.append(wall)
            evals.append(ev)
        entry = {"wall_s": median(walls), "eval_s": median(evals), "series": series}
        if name in rec:
            record, rule_expr = rec[name]
            rwalls, fwalls = [], []
            for _ in range(runs):
                rwalls.append(timed_query(base, record)[0])
                fwalls.append(timed_query(base, rule_expr)[1])
            entry.update(recorded=record, recorded_wall_s=median(rwalls),
                         rule_eval_s=median(fwalls))
        panels[name] = entry
    fq.fetch(HISTORY_POINTS)  # warm
    refresh, cpu = [], []
    for _ in range(runs):
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        snap = fq.fetch(HISTORY_POINTS)
        wall = time.perf_counter() - t0
        cpu.append(cpu_seconds(pid) - c0 - idle_cpu_per_s * wall)
        refresh.append(wall)
    fq.close()
    rows_up = sum(1 for r in snap.rows if r.up)
    age = fleet_env.query(base, 'max(time() - timestamp(up{job="neuron"}))')
    scrape = fleet_env.query(base, 'max(scrape_duration_seconds{job="neuron"})')
    own = own_metrics(base)
    feeds = replay.feeds[-10:] or [float("nan")]
    result = {
        "server": kind, "instances": n, "interval_s": interval, "runs": runs,
        "rows": len(snap.rows), "rows_up": rows_up, "problems": list(snap.problems),
        "refresh_s": median(refresh), "refresh_max_s": max(refresh),
        "refresh_cpu_s": median(cpu), "idle_cpu_per_s": idle_cpu_per_s,
        "rss_bytes": rss_bytes(pid), "head_series": own.get("prometheus_tsdb_head_series"),
        "rule_eval_s": own.get("prometheus_rule_group_last_duration_seconds:max"),
        "oldest_sample_s": float(age[0]["value"][1]) if age else None,
        "max_scrape_s": float(scrape[0]["value"][1]) if scrape else None,
        "feed_s": max(feeds), "panels": panels, "load_average": os.getloadavg()[0],
    }
    holds = (rows_up == n and not snap.problems
             and (result["oldest_sample_s"] or 0) <= 2 * interval
             and (result["rule_eval_s"] or 0) < interval and result["feed_s"] < interval
             and result["refresh_s"] < CLIENT_TIMEOUT_S)
    result["holds"] = bool(holds)
    return result


def run_size(kind: str, n: int, interval: float, runs: int, stream: pathlib.Path,
             workdir: pathlib.Path) -> dict:
    replay = Replay(stream, n, interval, workdir)
    server = None
    try:
        data = workdir / f"{kind}-{n}"
        if kind == "prometheus":
            server = fleet_env.start_prometheus(replay.targets, data,
                                                rule_files=[fleet_env.FLEET_RULES],
                                                interval_s=interval)
        else:
            server = fleet_env.start_victoria(replay.targets, data, interval_s=interval)
        return measure(kind, server, n, interval, runs, replay)
    finally:
        if server is not None:
            server.stop()
        replay.close()
        shutil.rmtree(workdir / f"{kind}-{n}", ignore_errors=True)


# ------------------------------------------------------------------------------ output
def report(r: dict) -> None:
    ms = 1000
    print(f"\n{r['server']}: {r['instances']} instances x 16 devices (64 cores), "
          f"{r['interval_s']:g} s scrapes; median of {r['runs']}")
    print(f"  {'panel query':<14}{'series':>7}{'eval ms':>9}{'http ms':>9}"
          f"{'rule eval ms':>14}{'recorded ms':>13}{'raw/rec':>9}")
    for name, p in r["panels"].items():
        rec, rule = p.get("recorded_wall_s"), p.get("rule_eval_s")
        ratio = f"{p['wall_s'] / rec:>8.1f}x" if rec else ""
        rule_s = f"{rule * ms:>13.1f}" if rule is not None else " " * 13
        rec_s = f"{rec * ms:>12.1f}" if rec else " " * 12
        print(f"  {name:<14}{p['series']:>7}{p['eval_s'] * ms:>9.1f}{p['wall_s'] * ms:>9.1f}"
              f" {rule_s} {rec_s}{ratio}")
    raw_total = sum(p["wall_s"] for p in r["panels"].values())
    print(f"  whole refresh (all queries at once): {r['refresh_s'] * ms:.0f} ms "
          f"(max {r['refresh_max_s'] * ms:.0f}); {r['refresh_s'] / REFRESH_BUDGET_S:.2f}x the "
          f"250 ms budget; sequential sum {raw_total * ms:.0f} ms")
    print(f"  server CPU per refresh beyond ingestion: {r['refresh_cpu_s'] * ms:.0f} ms; "
          f"ingestion + rules: {r['idle_cpu_per_s'] * 100:.0f}% of a core")
    head = f"{r['head_series']:,.0f}" if r["head_series"] else "n/a"
    rule = f"{r['rule_eval_s'] * ms:.0f} ms" if r["rule_eval_s"] is not None else "n/a"
    print(f"  RSS {r['rss_bytes'] / 2**20:.0f} MiB, head series {head}, fleet rules {rule} per "
          f"evaluation, oldest sample {r['oldest_sample_s']:.1f} s, slowest scrape "
          f"{(r['max_scrape_s'] or 0) * ms:.0f} ms, feed {r['feed_s'] * ms:.0f} ms per period")
    print(f"  rows {r['rows']} ({r['rows_up']} up), problems {r['problems'] or 'none'}; "
          f"holds: {'yes' if r['holds'] else 'NO'}; machine load average "
          f"{r['load_average']:.1f} on {os.cpu_count()} CPUs")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_fleet_scale", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="64", help="comma-separated instance counts")
    p.add_argument("--interval", type=float, default=5.0, help="scrape and report period (s)")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--stream", type=pathlib.Path, help="recorded stream (default: record one)")
    p.add_argument("--victoria", action="store_true", help="also VictoriaMetrics at each size")
    p.add_argument("--stop-when-not-held", action="store_true")
    p.add_argument("--json", type=pathlib.Path, help="also write the figures here")
    args = p.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        p.error(f"--sizes {args.sizes!r}: comma-separated integers")
    if args.runs < 5 or min(sizes) < 1:
        p.error("--runs must be at least 5 and sizes positive")
    if shutil.which("prometheus") is None:
        print("bench_fleet_scale: needs Debian's prometheus package", file=sys.stderr)
        return 2
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    workdir.chmod(0o700)
    version = subprocess.run(["prometheus", "--version"], capture_output=True,
                             text=True).stdout.splitlines()[0]
    print(f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{version}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    results = []
    try:
        stream = args.stream or record_stream(workdir)
        for n in sizes:
            kinds = ["prometheus"] + (["victoria-metrics"] if args.victoria else [])
            for kind in kinds:
                r = run_size(kind, n, args.interval, args.runs, stream, workdir)
                report(r)
                results.append(r)
            if args.stop_when_not_held and not results[-len(kinds)]["holds"]:
                break
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    held = [r["instances"] for r in results if r["server"] == "prometheus" and r["holds"]]
    print(f"\nbiggest fleet held here: {max(held) if held else 'none'} instances "
          f"(of {', '.join(map(str, sizes))})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
