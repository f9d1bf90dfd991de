"""neuron-monitor on a trn2 UltraServer-sized simulation: 64 devices, 256 logical cores (LNC=2),
4 runtime processes publishing real counter files ten times a second.

Two figures, each as median [min-max] over runs:
1. report build + encode: Collector.collect() + Report.to_json() per report, against a naive
   baseline measured in the same run: the same document built as a dict with Python loops over
   the counters, element by element, then json.dumps.
2. CPU of a real `neuron-monitor` process at period 1 s, as % of one core, per window.

Usage: python bench/bench_monitor.py [--runs 7] [--batch 20] [--window 4]
"""
from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
from collector_sim import write_instance  # noqa: E402
from device_model.runtime import shm  # noqa: E402
from monitor.collector import Collector  # noqa: E402
from monitor.config import RUNTIME_GROUPS, SYSTEM_GROUPS, MonitorConfig  # noqa: E402
from benchlib import per_call  # noqa: E402

INSTANCE = "trn2u-ultraserver"
CORES_PER_DEVICE = 4  # logical, at LNC=2
# Four jobs over the 256 logical cores: a large training job, two mid-size ones, a server.
JOBS = (("llama-train", range(0, 128)), ("mixtral-train", range(128, 192)),
        ("bert-train", range(192, 224)), ("llama-serve", range(224, 256)))
CONFIG = {"period": "1s",
          "neuron_runtimes": [{"tag_filter": ".*",
                               "metrics": [{"type": t} for t in RUNTIME_GROUPS]}],
          "system_metrics": [{"type": t} for t in SYSTEM_GROUPS]}


# --------------------------------------------------------------------------- runtimes
def writer_main(root: str, tag: str, first: int, last: int) -> None:
    """One stand-in runtime process: publishes growing counters every 100 ms until killed."""
    cores = list(range(first, last))
    core_devices = [c // CORES_PER_DEVICE for c in cores]
    devices = sorted(set(core_devices))
    model = {"name": tag, "uuid": "91f2f66e83ea419dace1da07617ad39f", "model_id": 10005,
             "subgraphs": [{"name": f"sg_{i:02d}", "core": c, "device": c // CORES_PER_DEVICE,
                            "host_memory": {"application_memory": 20480, "constants": 0,
                                            "dma_buffers": 0, "tensors": 0},
                            "device_memory": {"constants": 20971520, "model_code": 29504,
                                              "runtime_memory": 0, "tensors": 0}}
                           for i, c in enumerate(cores)]}
    header = {"tag": tag, "workload": "bench", "instance_type": INSTANCE, "started_at": time.time(),
              "cores": cores, "lnc": 2, "core_devices": core_devices, "devices": devices,
              "ring": 1024, "models": [model]}
    w = shm.CounterWriter(Path(root), header)
    r = w.record
    rng = np.random.default_rng(len(tag))
    r["host_memory"] = [6996594688, 0, 1048576, 0]
    r["device_memory"] = [193986816, 176285056, 0, 33554432, 20971520]
    signal.signal(signal.SIGTERM, lambda *_: (w.close(), sys.exit(0)))
    n = len(cores)
    while True:
        dt = 0.1
        busy = rng.uniform(0.6, 0.95, n) * dt
        r["wall_time"] = time.time()
        r["core_busy_s"] += busy
        r["phys_busy_s"] += busy[:, None] * np.array([0.95, 1.05])
        r["engine_active_s"] += busy[:, None, None] * np.array([0.9, 0.4, 0.3, 0.1, 0.6])
        r["flops"] += busy[:, None] * 6e14
        r["hbm_read_bytes"] += busy * 1e11
        r["hbm_write_bytes"] += busy * 4e10
        r["dma_bytes"] += busy[:, None] * 2e10
        r["collective_bytes"] += busy * 1e9
        r["collective_s"] += busy * 0.05
        k = int(rng.integers(5, 15))
        count = int(r["latency_count"])
        r["latency_total"][(count + np.arange(k)) % 1024] = rng.uniform(0.009, 0.02, k)
        r["latency_device"][(count + np.arange(k)) % 1024] = rng.uniform(0.008, 0.018, k)
        r["latency_count"] = count + k
        r["exec_status"][0] += k
        r["dev_energy_j"] += 400 * dt
        r["dev_power_w"] = 400
        r["dev_temperature_c"] = 70
        r["dev_hbm_read_bytes"] += 4e11 * dt
        r["dev_hbm_write_bytes"] += 1.6e11 * dt
        w.publish()
        time.sleep(dt)


def start_runtimes(root: Path) -> list[subprocess.Popen]:
    procs = [subprocess.Popen([sys.executable, __file__, "--writer", str(root), tag,
                               str(cores.start), str(cores.stop)]) for tag, cores in JOBS]
    deadline = time.monotonic() + 60
    while len(shm.list_runtimes(root)) < len(procs):
        if time.monotonic() > deadline:
            raise SystemExit("runtime stand-ins did not start")
        time.sleep(0.05)
    return procs


# --------------------------------------------------------------------------- the naive baseline
def naive_document(root: Path, instance: shm.SimInstance) -> str:
    """The same report, built the obvious way: Python loops over every counter, json.dumps."""
    runtimes = []
    for handle in shm.list_runtimes(root):
        s = handle.read()
        cores, eng = {}, {}
        dt = max(1e-9, s.wall_time - s.started_at)
        for i, core in enumerate(s.cores):
            v3d = {}
            for j in range(s.lnc):
                v3d[f"nc_v3.{core * s.lnc + j}"] = {
                    "neuroncore_utilization": float(s.phys_busy_s[i][j]) / dt * 100}
            cores[str(core)] = {"neuroncore_utilization": float(s.core_busy_s[i]) / dt * 100,
                                "flops": int(float(s.flops[i][1]) / dt), "v3d": v3d}
            util = {}
            for e, name in enumerate(shm.ENGINES):
                total = 0.0
                for j in range(s.lnc):
                    total += float(s.engine_active_s[i][j][e])
                util[name] = total / s.lnc / dt * 100
            eng[str(core)] = {"engine_utilization": util, "model_flops": int(s.flops[i][0]),
                              "hardware_flops": int(s.flops[i][1]),
                              "hbm_read_bytes": int(s.hbm_read_bytes[i]),
                              "hbm_write_bytes": int(s.hbm_write_bytes[i]),
                              "dma_bytes": {q: int(s.dma_bytes[i][k])
                                            for k, q in enumerate(shm.DMA_QUEUES)},
                              "collective_bytes": int(s.collective_bytes[i]),
                              "collective_time": float(s.collective_s[i])}
        lat = sorted(float(x) for x in s.latency_total)
        pct = {p: lat[min(len(lat) - 1, int(q / 100 * len(lat)))] for p, q in
               (("p0", 0), ("p1", 1), ("p25", 25), ("p50", 50), ("p75", 75), ("p99", 99),
                ("p100", 100))} if lat else None
        mem = {str(core): {k: int(s.device_memory[i][m]) for m, k in enumerate(shm.DEVICE_MEMORY)}
               for i, core in enumerate(s.cores)}
        runtimes.append({"pid": s.pid, "neuron_runtime_tag": s.tag, "error": "", "report": {
            "neuroncore_counters": {"period": dt, "error": "", "neuroncores_in_use": cores},
            "execution_stats": {"period": dt, "error": "", "error_summary": dict(s.errors),
                                "execution_summary": dict(s.exec_status),
                                "latency_stats": {"total_latency": pct, "device_latency": pct}},
            "memory_used": {"period": dt, "error": "", "neuron_runtime_used_bytes": {
                "host": sum(s.host_memory.values()), "neuron_device": int(s.device_memory.sum()),
                "usage_breakdown": {"host": dict(s.host_memory),
                                    "neuroncore_memory_usage": mem}},
                "loaded_models": [m.to_dict() for m in s.models]},
            "neuroncore_engine_counters": {"period": dt, "error": "", "neuroncores_in_use": eng}}})
        handle.close()
    devices = []
    for d in range(instance.device_count):
        devices.append({"neuron_device_index": d, "mem_ecc_corrected": 0, "mem_ecc_uncorrected": 0,
                        "sram_ecc_corrected": 0, "sram_ecc_uncorrected": 0})
    return json.dumps({"neuron_runtime_data": runtimes,
                       "system_data": {"neuron_hw_counters": {"period": 1.0, "error": "",
                                                              "neuron_devices": devices}}})


# --------------------------------------------------------------------------- measurements
def fmt(values: list[float], unit: str, scale: float) -> str:
    v = [x * scale for x in values]
    return f"{statistics.median(v):8.2f} {unit} [{min(v):.2f}-{max(v):.2f}]"


def monitor_cpu(root: Path, config: Path, windows: int, window: float) -> list[float]:
    """% of one core used by a real neuron-monitor process, one figure per window."""
    proc = subprocess.Popen([sys.executable, "-m", "monitor.cli", "-c", str(config), "--root",
                             str(root)], stdout=subprocess.DEVNULL, cwd=REPO)
    try:
        ps = psutil.Process(proc.pid)
        time.sleep(3.0)  # imports and the first report
        out = []
        for _ in range(windows):
            before, t0 = ps.cpu_times(), time.monotonic()
            time.sleep(window)
            after, t1 = ps.cpu_times(), time.monotonic()
            used = (after.user - before.user) + (after.system - before.system)
            out.append(used / (t1 - t0))
        return out
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--window", type=float, default=4.0, help="seconds per CPU window")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "rt"
        root.mkdir(mode=0o700)
        instance = write_instance(root, INSTANCE, lnc=2)
        procs = start_runtimes(root)
        try:
            config = Path(tmp) / "monitor.json"
            config.write_text(json.dumps(CONFIG))
            t = [time.time()]

            def clock() -> float:
                t[0] += 1.0  # every group due at every call: the full report each time
                return t[0]

            collector = Collector(MonitorConfig.from_dict(CONFIG), root=root, clock=clock)
            # This clock runs ahead of the runtimes' own: their counters would look stopped.
            collector.stale_after = float("inf")
            size = len(collector.collect().to_json())
            ours = per_call(lambda: collector.collect().to_json(), args.batch, args.runs)
            build = per_call(collector.collect, args.batch, args.runs)
            report = collector.collect()
            encode = per_call(report.to_json, args.batch, args.runs)
            handles = shm.list_runtimes(root)
            reads = per_call(lambda: [h.read() for h in handles], args.batch, args.runs)
            naive = per_call(lambda: naive_document(root, instance), args.batch, args.runs)
            cpu = monitor_cpu(root, config, args.runs, args.window)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)
    cores = sum(len(c) for _, c in JOBS)
    print(f"{INSTANCE}: 64 devices, {cores} logical cores (LNC=2), {len(JOBS)} runtimes, "
          f"report {size / 1024:.0f} KiB, all groups")
    print(f"report build + encode (collect + to_json) {fmt(ours, 'ms', 1e3)}   goal <= 5 ms")
    print(f"  of which collect                        {fmt(build, 'ms', 1e3)}")
    print(f"  of which to_json (orjson)               {fmt(encode, 'ms', 1e3)}")
    print(f"  (reading the {len(JOBS)} counter files, in collect) {fmt(reads, 'ms', 1e3)}")
    print(f"naive baseline (Python loops + json.dumps) {fmt(naive, 'ms', 1e3)}")
    ratio = statistics.median(naive) / statistics.median(ours)
    print(f"ratio naive / ours                         {ratio:8.1f}x")
    print(f"neuron-monitor CPU at period 1 s          {fmt(cpu, '% of a core', 100)}   goal <= 1 %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
