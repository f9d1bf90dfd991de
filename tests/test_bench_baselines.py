"""A benchmark's baseline must do the work ours does, or its ratio compares nothing: the
exporter's previous per-runtime apply, which bench/bench_exporter_runtimes.py times against the
current one, still takes what the exporter passes and exports the same series."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

from exporters.exporter import PrometheusExporter
from exporters.state import MetricState
from monitor.report import Report

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _bench(name: str):
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _exposition(reports: list[Report]) -> list[bytes]:
    """The series after the last report, less the exporter's own timing of its work."""
    exporter = PrometheusExporter(clock=lambda: 0.0)
    text = [exporter.ingest(r) for r in reports][-1].text
    return [line for line in text.splitlines()
            if not line.startswith(b"neuron_exporter_scrape_duration_seconds")]


def test_the_runtime_ingestion_baseline_exports_what_the_exporter_does(monkeypatch):
    bench = _bench("bench_exporter_runtimes")
    gen = bench.StreamGen(seed=3, runtimes=6, devices=2)
    reports = [Report.from_json(gen.line()) for _ in range(3)]
    ours = _exposition(reports)
    monkeypatch.setattr(MetricState, "apply", bench.per_runtime_apply)
    assert _exposition(reports) == ours
    assert sum(line.startswith(b"neuroncore_utilization_ratio{") for line in ours) == 6  # a core each


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
