"""Report -> CloudWatch Embedded Metric Format (EMF) records: one JSON object per line.

The same metrics as the Prometheus exporter (the metric table), with the label values as
dimensions. Counters carry the count of the report's period (CloudWatch sums them), gauges their
value. The CloudWatch agent or a Lambda/ECS log driver turns these lines into metrics: nothing
here needs AWS credentials. Info metrics have no EMF form and are left out; a label whose value
is AWS's "None" placeholder is not made a dimension.

EMF limits respected: at most 100 metrics per record and 30 dimensions per dimension set.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

import orjson

from exporters import metrics_table as mt
from exporters.extract import Context, Problem, extract
from monitor.report import Report

MAX_METRICS_PER_RECORD = 100
# Of AWS's six instance labels, these identify the host; the others only repeat them.
INSTANCE_DIMENSIONS = ("instance_id", "instance_type")
CLOUDWATCH_UNITS = {"bytes": "Bytes", "seconds": "Seconds", "executions": "Count",
                    "events": "Count", "errors": "Count", "reports": "Count", "FLOP": "Count",
                    "vCPUs": "Count", "series": "Count"}


def unit_of(spec: mt.MetricSpec) -> str:
    return CLOUDWATCH_UNITS.get(spec.unit, "None")


class EmfEncoder:
    def __init__(self, namespace: str, clock: Callable[[], float]):
        self.namespace = namespace
        self._clock = clock
        self._context: Context | None = None
        self._instance: tuple[tuple[str, str], ...] = ()

    def records(self, report: Report, problems: list[Problem]) -> Iterator[dict]:
        if self._context is None:
            self._context = Context.of(report.instance, report.hardware)
            values = dict(zip(mt.INSTANCE_LABELS, self._context.instance))
            self._instance = tuple((k, values[k]) for k in INSTANCE_DIMENSIONS if values[k])
        at = report.received_at if report.received_at is not None else self._clock()
        timestamp = int(at * 1000)
        groups: dict[tuple[tuple[str, str], ...], list[tuple[mt.MetricSpec, float]]] = {}
        for group in extract(report, self._context, problems):
            if group.group == mt.RUNTIME_GROUP:
                # neuron_runtime_info is always 1, with the pid as a dimension: in CloudWatch a
                # new custom metric per process, billed, and nothing to graph
                continue
            for spec, samples in group.families:
                labels = spec.labels
                for key, value in samples:
                    dims = self._instance + tuple(
                        (name, v) for name, v in zip(labels, key) if v != "None")
                    groups.setdefault(dims, []).append((spec, value))
        for dims, metrics in groups.items():
            for start in range(0, len(metrics), MAX_METRICS_PER_RECORD):
                yield self._record(timestamp, dims, metrics[start:start + MAX_METRICS_PER_RECORD])

    def _record(self, timestamp: int, dims: tuple[tuple[str, str], ...],
                metrics: list[tuple[mt.MetricSpec, float]]) -> dict:
        record: dict = {"_aws": {"Timestamp": timestamp, "CloudWatchMetrics": [{
            "Namespace": self.namespace,
            "Dimensions": [[name for name, _ in dims]],
            "Metrics": [{"Name": spec.name, "Unit": unit_of(spec)} for spec, _ in metrics]}]}}
        record.update(dims)
        record.update((spec.name, value) for spec, value in metrics)
        return record

    def lines(self, report: Report, problems: list[Problem]) -> bytes:
        return b"".join(orjson.dumps(r) + b"\n" for r in self.records(report, problems))
