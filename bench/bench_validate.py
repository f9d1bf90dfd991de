"""`neuron-sim validate` speed: every published row simulated, end to end as a user runs it (a
fresh process, `--json`), against the baseline of simulating each row on its own (a run's TTFT
and time per output token rows each running the run's estimate), measured in the same run.

Prints median [min-max] over runs and the ratio baseline / ours.
Usage: python bench/bench_validate.py [--runs 5]
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
from device_model.workloads.validation import ROWS  # noqa: E402


def cli_seconds() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "device_model.cli", "validate", "--json"], check=True,
                   stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def row_by_row_seconds() -> float:
    """Baseline, in a fresh process as the CLI is: each row's own estimate."""
    code = ("from device_model.workloads.validation import ROWS, simulate; "
            "[simulate(r) for r in ROWS]")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def _fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s [{min(xs):.2f}-{max(xs):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    runs = ap.parse_args().runs
    ours, base = [], []
    for _ in range(runs):
        ours.append(cli_seconds())
        base.append(row_by_row_seconds())
    estimates = len({(r.spec, r.instance, r.lnc, r.placement) for r in ROWS})
    print(f"rows: {len(ROWS)}, distinct estimates: {estimates} ({runs} runs, fresh processes)")
    print(f"neuron-sim validate --json : {_fmt(ours)}")
    print(f"baseline, row by row      : {_fmt(base)}")
    print(f"ratio baseline / ours     : {statistics.median(base) / statistics.median(ours):.2f}x")


if __name__ == "__main__":
    main()
