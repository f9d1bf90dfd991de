"""`neuron-sim estimate` speed: llama3-70b training on 32 trn1.32xlarge nodes (TP32 PP8 DP4,
seq 8192), end to end as a user runs it (a fresh process), against the baseline of simulating
every layer of every pipeline stage (the unrolled per-stage programs, one micro-batch each),
measured in the same run. One representative rank per stage and one layer per distinct shape
is what makes the estimate fast; simulating every rank and micro-batch would cost the baseline
times tp*dp*micro-batches more (printed as an extrapolation).

Prints median [min-max] over runs and the ratio baseline / ours.
Usage: python bench/bench_estimate.py [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from device_model import instance  # noqa: E402
from device_model.workloads import Placement, build_step  # noqa: E402

SPEC = "llama3-70b:mode=train,seq=8192,mbs=1,gbs=1024,ckpt=selective"
ARGS = ["estimate", "-w", SPEC, "-i", "trn1.32xlarge", "--nodes", "32", "--tp", "32", "--pp", "8",
        "--dp", "4", "--json"]


def cli_seconds() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "device_model.cli", *ARGS], check=True,
                   stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def in_process_seconds() -> float:
    from device_model.workloads import estimate
    start = time.perf_counter()
    estimate(SPEC, instance("trn1.32xlarge"), Placement(nodes=32, tp=32, pp=8, dp=4))
    return time.perf_counter() - start


def every_layer_seconds() -> float:
    """Baseline: build and simulate each stage's unrolled micro-batch program (all its layers)."""
    inst = instance("trn1.32xlarge")
    start = time.perf_counter()
    plan = build_step(SPEC, inst, Placement(nodes=32, tp=32, pp=8, dp=4))
    for stage in plan.stages:
        for execution in stage:
            inst.run(execution.program)
    return time.perf_counter() - start


def fmt(samples: list[float]) -> str:
    return f"{statistics.median(samples):7.3f} s [{min(samples):.3f}-{max(samples):.3f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    cli = [cli_seconds() for _ in range(args.runs)]
    inproc = [in_process_seconds() for _ in range(args.runs)]
    base = [every_layer_seconds() for _ in range(args.runs)]
    ratio = statistics.median(base) / statistics.median(inproc)
    print(f"workload: {SPEC} on 32 x trn1.32xlarge, TP32 PP8 DP4 ({args.runs} runs)")
    print(f"neuron-sim estimate (fresh process)      {fmt(cli)}   goal <= 1 s")
    print(f"estimate() in process                    {fmt(inproc)}")
    print(f"baseline: every layer of every stage     {fmt(base)}")
    print(f"ratio baseline / estimate()              {ratio:7.1f}x")
    every_rank = statistics.median(base) * 32 * 4 * 256
    print(f"extrapolated: every rank and micro-batch {every_rank / 3600:7.1f} h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
