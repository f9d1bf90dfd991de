"""`neuron-sim estimate` speed: llama3-70b training on 32 trn1.32xlarge nodes (TP32 PP8 DP4,
seq 8192), end to end as a user runs it (a fresh process), against the baseline of simulating
every layer of every pipeline stage (the unrolled per-stage programs, one micro-batch each),
measured in the same run. One representative rank per stage and one layer per distinct shape
is what makes the estimate fast; simulating every rank and micro-batch would cost the baseline
times tp*dp*micro-batches more (printed as an extrapolation).

With --inference, the same for Llama-3.1-405B decode on trn2.48xlarge (LNC=2, TP64, the J2 row
of docs/fidelity.md): the baseline simulates the whole prefill program and each decode bucket's
whole program, and the estimate's time to first token is set beside the whole prefill
program's time (the estimate scales a first and a steady-state layer to all of them).

Prints median [min-max] over runs and the ratio baseline / ours.
Usage: python bench/bench_estimate.py [--runs 5] [--inference]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from device_model import instance  # noqa: E402
from device_model.workloads import Placement, build_step  # noqa: E402
from device_model.workloads.cost import measure  # noqa: E402

@dataclass(frozen=True)
class Case:
    spec: str
    instance: str
    placement: Placement
    lnc: int | None
    where: str

    def cli_args(self) -> list[str]:
        p = self.placement
        args = ["estimate", "-w", self.spec, "-i", self.instance, "--json"]
        args += [a for k in ("nodes", "tp", "pp", "dp") if getattr(p, k) and getattr(p, k) > 1
                 for a in (f"--{k}", str(getattr(p, k)))]
        return args + (["--lnc", str(self.lnc)] if self.lnc else [])

    def inst(self):
        return instance(self.instance, lnc=self.lnc)


TRAINING = Case("llama3-70b:mode=train,seq=8192,mbs=1,gbs=1024,ckpt=selective", "trn1.32xlarge",
                Placement(nodes=32, tp=32, pp=8, dp=4), None, "32 x trn1.32xlarge, TP32 PP8 DP4")
INFERENCE = Case("llama3.1-405b:mode=decode,batch=1,in=10000,out=1785,bucket=10240,"
                 "tkg_bucket=12800,sp=1", "trn2.48xlarge", Placement(tp=64), 2,
                 "trn2.48xlarge LNC=2, TP64")


def cli_seconds(case: Case) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "device_model.cli", *case.cli_args()], check=True,
                   stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def in_process_seconds(case: Case) -> float:
    from device_model.workloads import estimate
    start = time.perf_counter()
    estimate(case.spec, case.inst(), case.placement)
    return time.perf_counter() - start


def every_layer_seconds(case: Case) -> float:
    """Baseline: build and simulate each stage's unrolled programs (all their layers)."""
    inst = case.inst()
    start = time.perf_counter()
    plan = build_step(case.spec, inst, case.placement)
    for stage in plan.stages:
        for execution in stage:
            inst.run(execution.program)
    return time.perf_counter() - start


def ttft_check(case: Case) -> tuple[float, float]:
    """The estimate's time to first token and the whole prefill program's simulated time, with
    the same fixed costs (the execution's launch, the decoder request's start)."""
    from device_model.workloads import estimate
    inst = case.inst()
    est = estimate(case.spec, inst, case.placement)
    prefill = build_step(case.spec, inst, case.placement).stages[0][0]
    fixed = inst.costs.exec_overhead_s + inst.costs.generation_start_s   # the case is a decoder
    return est["ttft_s"], measure(inst, prefill.program).time + fixed


def fmt(samples: list[float]) -> str:
    return f"{statistics.median(samples):7.3f} s [{min(samples):.3f}-{max(samples):.3f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--inference", action="store_true",
                        help="the 405B decode case instead of the 1024-rank training one")
    args = parser.parse_args()
    case = INFERENCE if args.inference else TRAINING
    cli = [cli_seconds(case) for _ in range(args.runs)]
    inproc = [in_process_seconds(case) for _ in range(args.runs)]
    base = [every_layer_seconds(case) for _ in range(args.runs)]
    ratio = statistics.median(base) / statistics.median(inproc)
    print(f"workload: {case.spec} on {case.where} ({args.runs} runs)")
    print(f"neuron-sim estimate (fresh process)      {fmt(cli)}   goal <= 1 s")
    print(f"estimate() in process                    {fmt(inproc)}")
    print(f"baseline: every layer of every stage     {fmt(base)}")
    print(f"ratio baseline / estimate()              {ratio:7.1f}x")
    if args.inference:
        est, whole = ttft_check(case)
        print(f"TTFT: estimate {est * 1e3:.1f} ms, whole prefill program {whole * 1e3:.1f} ms "
              f"({est / whole - 1:+.2%})")
    else:
        every_rank = statistics.median(base) * 32 * 4 * 256
        print(f"extrapolated: every rank and micro-batch {every_rank / 3600:7.1f} h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
