"""Host sample cost: HostSampler (host-wide counters + the runtimes' own pids) against the
psutil.process_iter-based sample that tools like glances take, measured in the same run.

Prints per-sample cost as median [min-max] over runs, and the ratio baseline / ours.
Usage: python bench/bench_host.py [--runs 7] [--batch 200] [--runtimes 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from monitor.host import HostSampler  # noqa: E402
from benchlib import per_call  # noqa: E402


def fmt(samples: list[float]) -> str:
    us = [s * 1e6 for s in samples]
    return f"{statistics.median(us):8.1f} µs [{min(us):.1f}-{max(us):.1f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--runtimes", type=int, default=2, help="runtime processes sampled")
    args = parser.parse_args()

    # Stand-ins for Neuron runtime processes: real, sleeping children.
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
                for _ in range(args.runtimes)]
    try:
        sampler = HostSampler()
        pids = [c.pid for c in children]

        def ours():
            sampler.vcpu_usage()
            sampler.memory_info()
            for pid in pids:
                sampler.process_vcpu(pid)

        def baseline():
            psutil.cpu_percent(percpu=True)
            psutil.cpu_stats()
            psutil.virtual_memory()
            psutil.swap_memory()
            for proc in psutil.process_iter(["cpu_percent", "memory_info"]):
                proc.info  # noqa: B018 (the attribute read is the work)

        processes = len(psutil.pids())
        rows = [("HostSampler full sample", per_call(ours, args.batch, args.runs)),
                ("psutil process_iter sample", per_call(baseline, max(10, args.batch // 20), args.runs))]
    finally:
        for c in children:
            c.kill()
            c.wait()
    print(f"host sample, {processes} processes on the host, {args.runtimes} runtime pids, "
          f"{psutil.cpu_count()} vCPUs, median [min-max] of {args.runs} runs")
    for name, samples in rows:
        print(f"  {name:30s} {fmt(samples)}")
    ratio = statistics.median(rows[1][1]) / statistics.median(rows[0][1])
    print(f"  ratio process_iter / HostSampler: {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
