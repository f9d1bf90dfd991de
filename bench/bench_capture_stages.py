"""Capture time of a pipeline-parallel model preset: every stage (`--ranks stages`, the default
for pp > 1) against the first stage only (`--ranks first`, the baseline), in the same run.

    .venv/bin/python bench/bench_capture_stages.py [--runs 5] [--spec llama3-8b] [--tp 8 --pp 4]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from device_model import instance  # noqa: E402
from device_model.workloads import Placement  # noqa: E402
from profiler.capture.builtin import capture_workload  # noqa: E402
from benchlib import fmt, timed  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--spec", default="llama3-8b")
    ap.add_argument("--instance", default="trn2.48xlarge")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--pp", type=int, default=4)
    args = ap.parse_args()
    inst = instance(args.instance)
    placement = Placement(tp=args.tp, pp=args.pp)
    rows = {}
    for which in ("first", "stages"):
        # each run on a fresh instance: nothing simulated is reused between runs
        rows[which] = timed(lambda w=which: capture_workload(args.spec, instance(args.instance), placement,
                                                              ranks=w), args.runs, warmup=False)
        prof = capture_workload(args.spec, inst, placement, ranks=which)
        print(f"--ranks {which:<7} {fmt(rows[which], unit=' s', digits=3)}  ({len(prof.meta['ranks'])} ranks, "
              f"{prof.rows('instructions')} instructions)")
    ratio = statistics.median(rows["stages"]) / statistics.median(rows["first"])
    print(f"ratio stages / first: {ratio:.2f}x for {args.pp} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
