"""The Prometheus exporter's ingestion against the number of runtimes in a report.

A runtime's `replaced` families (its pid, its loaded models) hold exactly what its latest report
carries. Ingestion now settles them in one pass per family and report; the baseline is the
previous way, one pass over the family per runtime (quadratic in runtimes), run here in the same
process on the same reports. Generated trn2 streams, 16 devices; median [min-max] of RUNS runs of
REPORTS reports each (the first
only creates the series), milliseconds per report.
"""
from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "exporter"))
from benchlib import fmt, timed  # noqa: E402
from exporters.exporter import PrometheusExporter  # noqa: E402
from exporters.state import MetricState  # noqa: E402
from monitor.report import Report  # noqa: E402
from stream_gen import StreamGen  # noqa: E402

RUNS = 5
REPORTS = 6


def per_runtime_apply(self, groups, shared_tags: frozenset[str] = frozenset()) -> None:
    """The baseline: each runtime's replaced families settled by a scan of the whole family.
    (`shared_tags`, a join of workers under one tag, does not occur in these streams.)"""
    now = self._clock()
    for group in groups:
        for spec, samples in group.families:
            fam = self.family(spec)
            if spec.replaced:
                fam.set_gauges(samples, now)
                fam.replace_runtimes({group.runtime_tag: {key for key, _ in samples}})
            elif spec.kind == "counter":
                fam.add_counts(samples, now)
            else:
                fam.set_gauges(samples, now)


def ms_per_report(reports: list[Report]) -> list[float]:
    """Steady state: the series exist (the first report made them), later reports update them."""
    exporter = PrometheusExporter(clock=lambda: 0.0)
    exporter.ingest(reports[0])

    def run() -> None:
        for report in reports[1:]:
            exporter.ingest(report)
    return [t / (len(reports) - 1) * 1e3 for t in timed(run, RUNS)]


def main() -> None:
    ours_apply = MetricState.apply
    print(f"{'runtimes':>8} {'series':>7}  {'ours, per report':>24}  {'baseline':>24}  ratio")
    for n in (4, 32, 128, 512):
        gen = StreamGen(seed=1, runtimes=n, devices=16)
        reports = [Report.from_json(gen.line()) for _ in range(REPORTS)]
        MetricState.apply = ours_apply
        ours = ms_per_report(reports)
        MetricState.apply = per_runtime_apply
        base = ms_per_report(reports)
        MetricState.apply = ours_apply
        exporter = PrometheusExporter(clock=lambda: 0.0)
        exporter.ingest(reports[-1])
        ratio = sorted(base)[RUNS // 2] / sorted(ours)[RUNS // 2]
        print(f"{n:>8} {exporter.state.series_count():>7}  {fmt(ours, unit=' ms'):>24}  "
              f"{fmt(base, unit=' ms'):>24}  {ratio:.2f}x")


if __name__ == "__main__":
    main()
