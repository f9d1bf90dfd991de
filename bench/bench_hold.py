"""neuron-top's group hold (monitor/held.py): its cost per report, against parsing that report.

Every report neuron-top takes passes through ``GroupHold.apply`` once, after the reader has parsed
it (``Report.from_json``), so the parse is the baseline. The stream is the demo's trn2.48xlarge
instance with its groups thinned out as a mixed-period neuron-monitor would write them (core
counters every report, memory every fifth, hardware counters every tenth), so most reports have
groups to fill. Median [min-max] of RUNS runs of REPORTS reports.
"""
from __future__ import annotations

import pathlib
import statistics
import sys
import time

import orjson

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from monitor.held import GroupHold  # noqa: E402
from monitor.report import Report  # noqa: E402
from tests.fixtures.demo_stream import generate  # noqa: E402

RUNS = 5
REPORTS = 200


def mixed_periods(lines: list[bytes]) -> list[bytes]:
    out = []
    for k, line in enumerate(lines):
        doc = orjson.loads(line)
        for runtime in doc.get("neuron_runtime_data", []):
            if k % 5:
                runtime["report"].pop("memory_used", None)
        if k % 10:
            doc.get("system_data", {}).pop("neuron_hw_counters", None)
        out.append(orjson.dumps(doc))
    return out


def per_report_us(fn, items) -> float:
    start = time.perf_counter()
    for item in items:
        fn(item)
    return (time.perf_counter() - start) / len(items) * 1e6


def main() -> None:
    lines = mixed_periods(list(generate(REPORTS, seed=7)))
    reports = [Report.from_json(line) for line in lines]
    parse, hold = [], []
    for _ in range(RUNS):
        parse.append(per_report_us(Report.from_json, lines))
        held = GroupHold()
        hold.append(per_report_us(held.apply, reports))
    p, h = statistics.median(parse), statistics.median(hold)
    print(f"stream: {REPORTS} demo reports (trn2.48xlarge), memory every 5th, hw counters every 10th")
    print(f"GroupHold.apply per report   {h:8.1f} us [{min(hold):.1f}-{max(hold):.1f}]")
    print(f"baseline: Report.from_json   {p:8.1f} us [{min(parse):.1f}-{max(parse):.1f}]")
    print(f"ratio hold / parse           {h / p:8.3f}")


if __name__ == "__main__":
    main()
