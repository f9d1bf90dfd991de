"""Exporter performance at UltraServer scale, against prometheus_client in the same run.

Scale: 64 Trainium2 devices x 8 physical cores (LNC=1: 512 NeuronCores), 4 runtimes each
reporting every core (e.g. four replicas time-sharing the cores), both extension groups
-> about 41k series (plus AWS's `_created` samples).

Figures (median over RUNS runs, each a timed batch):
  render per report   PrometheusExporter.ingest: extract + apply + render both formats
  baseline render     the same series in prometheus_client Gauge/Counter objects, the ordinary
                      way (.labels().set()/.inc() per report), then generate_latest()
  scrape p50/p99      GET /metrics on our server (other process, new TCP connection per GET),
                      1 client and 8 concurrent client processes, while reports arrive at 1 Hz;
                      as Prometheus asks (OpenMetrics + gzip) and as plain text
  baseline scrape     prometheus_client.start_http_server over the baseline registry

    .venv/bin/python bench/bench_exporter.py [--runs 5] [--quick]
"""
from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server  # noqa: E402

from exporters import metrics_table as mt  # noqa: E402
from exporters.exporter import PrometheusExporter  # noqa: E402
from exporters.extract import Context, extract  # noqa: E402
from exporters.server import MetricsHTTPServer, serve_in_thread  # noqa: E402
from monitor.report import Report  # noqa: E402

DEVICES, CORES_PER_DEVICE, RUNTIMES = 64, 8, 4
OM_GZIP = {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
           "Accept-Encoding": "gzip"}
PLAIN = {}


# ------------------------------------------------------------------------------ the report
def ultraserver_doc(rng: random.Random) -> dict:
    cores = range(DEVICES * CORES_PER_DEVICE)
    pct = lambda: round(rng.uniform(0, 100), 2)  # noqa: E731

    def runtime(i: int) -> dict:
        return {"pid": 4000 + i, "neuron_runtime_tag": f"replica_{i}", "error": "", "report": {
            "neuroncore_counters": {"period": 1.0, "error": "", "neuroncores_in_use": {
                str(c): {"neuroncore_utilization": pct(), "flops": rng.randrange(10**13)} for c in cores}},
            "execution_stats": {"period": 1.0, "error": "",
                                "error_summary": dict.fromkeys(mt.ERROR_TYPES, 0),
                                "execution_summary": {s: rng.randrange(5) for s in mt.STATUS_TYPES},
                                "latency_stats": {"total_latency": {p: 0.01 for p in mt.PERCENTILES},
                                                  "device_latency": None}},
            "memory_used": {"period": 1.0, "error": "", "neuron_runtime_used_bytes": {
                "host": rng.randrange(10**10), "neuron_device": rng.randrange(10**11),
                "usage_breakdown": {"host": {"application_memory": 1, "constants": 0, "dma_buffers": 0, "tensors": 0},
                                    "neuroncore_memory_usage": {str(c): {
                                        k: rng.randrange(10**8) for k in mt.CORE_MEMORY_KINDS} for c in cores}}},
                "loaded_models": []},
            "neuron_runtime_vcpu_usage": {"period": 1.0, "error": "", "vcpu_usage": {"user": pct(), "system": pct()}},
            "neuroncore_engine_counters": {"period": 1.0, "error": "", "neuroncores_in_use": {str(c): {
                "engine_utilization": {e: pct() for e in mt.ENGINES},
                "model_flops": rng.randrange(10**14), "hardware_flops": rng.randrange(10**14),
                "hbm_read_bytes": rng.randrange(10**11), "hbm_write_bytes": rng.randrange(10**11),
                "dma_bytes": {p: rng.randrange(10**10) for p in mt.DMA_PURPOSES},
                "collective_bytes": rng.randrange(10**10), "collective_time": rng.random() / 5}
                for c in cores}}}}

    devices = range(DEVICES)
    return {"neuron_runtime_data": [runtime(i) for i in range(RUNTIMES)],
            "system_data": {
                "neuron_hw_counters": {"period": 1.0, "error": "", "neuron_devices": [
                    {"neuron_device_index": d, **dict.fromkeys(mt.ECC_EVENTS, 0)} for d in devices]},
                "vcpu_usage": {"period": 1.0, "error": "", "context_switch_count": 1,
                               "average_usage": {k: 5.0 for k in ("user", "nice", "system", "idle", "io_wait", "irq", "soft_irq")},
                               "usage_data": {str(i): {"user": 5.0} for i in range(192)}},
                "memory_info": {"period": 1.0, "error": "", "memory_total_bytes": 2 * 10**12,
                                "memory_used_bytes": 10**12, "swap_total_bytes": 0, "swap_used_bytes": 0},
                "neuron_device_counters": {"period": 1.0, "error": "", "neuron_devices": [
                    {"neuron_device_index": d, "hbm_read_bytes": rng.randrange(10**12),
                     "hbm_write_bytes": rng.randrange(10**12), "hbm_bandwidth_utilization": pct(),
                     "power_watts": 400.0, "energy_joules": 400.0, "temperature_celsius": 60.0,
                     "throttle_ratio": 0.0, "modelled": True} for d in devices]}},
            "instance_info": {"instance_name": "bench", "instance_id": "i-0123456789abcdef0",
                              "instance_type": "trn2u.48xlarge", "instance_availability_zone": "us-east-2c",
                              "instance_availability_zone_id": "use2-az3", "instance_region": "us-east-2",
                              "ami_id": "ami-0", "subnet_id": "subnet-0", "error": ""},
            "neuron_hardware_info": {"neuron_device_type": "trainium2", "neuron_device_version": "v4",
                                     "neuroncore_version": "v3", "neuron_device_count": DEVICES,
                                     "neuron_device_memory_size": 96 * 2**30,
                                     "neuroncore_per_device_count": CORES_PER_DEVICE,
                                     "logical_neuroncore_config": 1, "error": ""}}


def reports(n: int, seed: int = 1) -> list[Report]:
    rng = random.Random(seed)
    return [Report.from_dict(ultraserver_doc(rng)) for _ in range(n)]


# ------------------------------------------------------------------------------ baseline
class ClientLibraryExporter:
    """The same metrics kept in prometheus_client objects, updated per report (the usual way)."""

    def __init__(self, report: Report):
        self.registry = CollectorRegistry(auto_describe=False)
        self.ctx = Context.of(report.instance, report.hardware)
        self.metrics = {}
        for spec in mt.ALL_METRICS:
            if spec.kind == "info" or spec.group == mt.EXPORTER_GROUP:
                continue
            cls = Counter if spec.kind == "counter" else Gauge
            self.metrics[spec.name] = cls(spec.name, spec.help, spec.all_labels, registry=self.registry)

    def update(self, report: Report) -> None:
        for group in extract(report, self.ctx, []):
            for spec, samples in group.families:
                metric = self.metrics[spec.name]
                inst = self.ctx.instance if spec.instance_labels else ()
                if spec.kind == "counter":
                    for key, value in samples:
                        metric.labels(*inst, *key).inc(value)
                else:
                    for key, value in samples:
                        metric.labels(*inst, *key).set(value)


# ------------------------------------------------------------------------------ timing
def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def med(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def fmt_ms(values: list[float]) -> str:
    m, lo, hi = med(values)
    return f"{m * 1e3:8.2f} ms [{lo * 1e3:.2f}-{hi * 1e3:.2f}]"


def get(port: int, headers: dict) -> float:
    t = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics", headers=headers)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    assert resp.status == 200
    return time.perf_counter() - t


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _client(port: int, headers: dict, n: int, out) -> None:
    out.put([get(port, headers) for _ in range(n)])


def scrape_run(port: int, headers: dict, clients: int, gets: int) -> tuple[float, float]:
    """p50, p99 of `gets` GETs per client, the clients in separate processes."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_client, args=(port, headers, gets, out)) for _ in range(clients)]
    for p in procs:
        p.start()
    lat = [x for _ in procs for x in out.get()]
    for p in procs:
        p.join()
    return percentile(lat, 0.50), percentile(lat, 0.99)


def _serve_ours(docs_seed: int, port_out, stop) -> None:
    feed = reports(4, docs_seed)
    exp = PrometheusExporter()
    exp.ingest(feed[0]).prepare_gzip()
    srv = MetricsHTTPServer(("127.0.0.1", 0), lambda: exp.current)
    serve_in_thread(srv)
    port_out.put(srv.port)
    n = 1
    while not stop.wait(1.0):  # a new report every second, as neuron-monitor would send
        exp.ingest(feed[n % len(feed)]).prepare_gzip()
        n += 1


def _serve_baseline(port_out, stop) -> None:
    feed = reports(1, 3)
    base = ClientLibraryExporter(feed[0])
    base.update(feed[0])
    server, _ = start_http_server(0, addr="127.0.0.1", registry=base.registry)
    port_out.put(server.server_port)
    stop.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="fewer GETs per run")
    args = ap.parse_args(argv)
    runs = args.runs
    feed = reports(runs + 1)

    exp = PrometheusExporter()
    exp.ingest(feed[0])
    series = exp.state.series_count()
    body = exp.current.text
    lines = body.count(b"\n")
    print(f"scale: {DEVICES} devices, {DEVICES * CORES_PER_DEVICE} cores, {RUNTIMES} runtimes, "
          f"{series} series, {lines} lines, {len(body) / 1e6:.1f} MB text, "
          f"{len(exp.current.body(True, True)[0]) / 1e6:.2f} MB OpenMetrics+gzip")

    render = [timed(exp.ingest, feed[1 + i]) for i in range(runs)]
    gz = [timed(lambda: exp.current.prepare_gzip()) for _ in range(1)]
    base = ClientLibraryExporter(feed[0])
    base.update(feed[0])
    base_update = [timed(base.update, feed[1 + i]) for i in range(runs)]
    base_render = [timed(generate_latest, base.registry) for _ in range(runs)]
    print(f"render per report (ours, both formats): {fmt_ms(render)}  (+ gzip both: {gz[0] * 1e3:.0f} ms)")
    print(f"baseline update per report:             {fmt_ms(base_update)}")
    print(f"baseline generate_latest:               {fmt_ms(base_render)}")
    print(f"ratio generate_latest / our render:     {med(base_render)[0] / med(render)[0]:.1f}x")

    ctx = mp.get_context("fork")
    stop, port_q = ctx.Event(), ctx.Queue()
    server = ctx.Process(target=_serve_ours, args=(7, port_q, stop))
    server.start()
    port = port_q.get(timeout=120)
    gets = 40 if args.quick else 200
    results = {}
    for name, headers in (("OpenMetrics+gzip", OM_GZIP), ("text", PLAIN)):
        for clients in (1, 8):
            per_run = [scrape_run(port, headers, clients, max(5, gets // clients)) for _ in range(runs)]
            p50 = [r[0] for r in per_run]
            p99 = [r[1] for r in per_run]
            results[(name, clients)] = (p50, p99)
            print(f"scrape {name:16s} {clients} client(s): p50 {fmt_ms(p50)}  p99 {fmt_ms(p99)}")
    stop.set()
    server.join(10)

    stop_b, port_b = ctx.Event(), ctx.Queue()
    baseline = ctx.Process(target=_serve_baseline, args=(port_b, stop_b))
    baseline.start()
    bport = port_b.get(timeout=300)
    base_scrape = [get(bport, OM_GZIP) for _ in range(runs)]
    stop_b.set()
    baseline.join(10)
    if baseline.is_alive():
        baseline.terminate()
    ours_p50 = med(results[("OpenMetrics+gzip", 1)][0])[0]
    print(f"baseline scrape (start_http_server, OM+gzip, 1 client): {fmt_ms(base_scrape)}")
    print(f"ratio baseline scrape / our scrape p50:  {med(base_scrape)[0] / ours_p50:.0f}x")
    goals = {"scrape p50 <= 5 ms (OM+gzip, 1 client)": ours_p50 <= 0.005,
             "render per report <= 100 ms": med(render)[0] <= 0.100,
             ">= 50x faster than generate_latest": med(base_scrape)[0] / ours_p50 >= 50,
             ">= 40k series": series >= 40_000}
    for goal, ok in goals.items():
        print(f"goal {'met' if ok else 'MISSED'}: {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
