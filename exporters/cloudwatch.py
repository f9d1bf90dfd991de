"""Report -> CloudWatch Embedded Metric Format (EMF) records: one JSON object per line.

The same metrics as the Prometheus exporter (the metric table), with the label values as
dimensions. Counters carry the count of the report's period (CloudWatch sums them), gauges their
value. The CloudWatch agent or a Lambda/ECS log driver turns these lines into metrics: nothing
here needs AWS credentials. Info metrics have no EMF form and are left out; a label whose value
is AWS's "None" placeholder, or empty (a device index the stream has not given yet), is not
made a dimension.

EMF limits respected: at most 100 metrics per record, 100 values per metric and 30 dimensions
per dimension set; each metric name once per record (two runtimes sharing a tag: their counts
are added, their gauges sent as one array of values); dimension values as CloudWatch takes them
(1-1024 printable ASCII characters: others are written as backslash escapes, longer ones cut).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator

import orjson

from exporters import metrics_table as mt
from exporters.extract import Context, Problem, extract, instance_label_values
from monitor.report import Report

MAX_METRICS_PER_RECORD = 100
MAX_VALUES_PER_METRIC = 100
# CloudWatch takes magnitudes from 8.515920e-109 to 1.174271e+108 (2^-360 to 2^360), and 0
# (PutMetricData's MetricDatum.Value): beyond it a record is refused, below it the value is 0.
LARGEST_VALUE = 1.174271e108
SMALLEST_VALUE = 8.515920e-109
MAX_DIMENSION_VALUE = 1024
# Of AWS's six instance labels, these identify the host; the others only repeat them.
INSTANCE_DIMENSIONS = ("instance_id", "instance_type")
CLOUDWATCH_UNITS = {"bytes": "Bytes", "seconds": "Seconds", "executions": "Count",
                    "events": "Count", "errors": "Count", "reports": "Count", "FLOP": "Count",
                    "vCPUs": "Count", "series": "Count"}

Dims = tuple[tuple[str, str], ...]


def unit_of(spec: mt.MetricSpec) -> str:
    return CLOUDWATCH_UNITS.get(spec.unit, "None")


@functools.lru_cache(maxsize=1 << 16)      # per sample and label: the same few values each report
def dimension_value(value: str) -> str | None:
    """`value` as a CloudWatch dimension value, or None for no dimension (AWS's "None"
    placeholder, an empty or blank value). Characters outside printable ASCII become Python's
    backslash escapes (distinct values stay distinct); a value over 1024 characters is cut."""
    if value == "None" or not value.strip():
        return None
    if not (value.isascii() and value.isprintable()):
        value = ascii(value)[1:-1]
    if len(value) > MAX_DIMENSION_VALUE:
        value = value[:MAX_DIMENSION_VALUE - 3] + "..."
    return value


class EmfEncoder:
    def __init__(self, namespace: str, clock: Callable[[], float],
                 exclude: Iterable[str] = ()):
        self.namespace = namespace
        self._clock = clock
        self._exclude = frozenset(exclude)
        self._context: Context | None = None
        self._instance: Dims = ()
        self._rewritten: set[str] = set()       # label values already said to be rewritten

    def records(self, report: Report, problems: list[Problem]) -> Iterator[dict]:
        ctx = self._context_for(report, problems)
        at = report.received_at if report.received_at is not None else self._clock()
        timestamp = int(at * 1000)
        by_dims: dict[Dims, dict[str, tuple[mt.MetricSpec, list[float]]]] = {}
        for group in extract(report, ctx, problems):
            if group.group == mt.RUNTIME_GROUP:
                # neuron_runtime_info is always 1, with the pid as a dimension: in CloudWatch a
                # new custom metric per process, billed, and nothing to graph
                continue
            for spec, samples in group.families:
                if spec.name in self._exclude:
                    continue
                for key, value in samples:
                    if abs(value) > LARGEST_VALUE:
                        problems.append(Problem("value_range", f"{spec.name} {value:.4g} is beyond "
                                                "what CloudWatch takes (1.17e108): not written"))
                        continue
                    if abs(value) < SMALLEST_VALUE:
                        value = 0.0
                    dims = self._instance + self._dimensions(spec.labels, key, problems)
                    metrics = by_dims.setdefault(dims, {})
                    metrics.setdefault(spec.name, (spec, []))[1].append(value)
        for dims, metrics in by_dims.items():
            for chunk in _chunks(metrics.values()):
                yield self._record(timestamp, dims, chunk)

    def _context_for(self, report: Report, problems: list[Problem]) -> Context:
        """The first report's context; a later report supplies what the first lacked (its
        instance or hardware information had failed): CloudWatch has no series to keep stable."""
        if self._context is None:
            self._context = Context.of(report.instance, report.hardware)
        if not self._instance and not report.instance.error:
            values = dict(zip(mt.INSTANCE_LABELS, instance_label_values(report.instance)))
            self._instance = tuple((k, v) for k in INSTANCE_DIMENSIONS
                                   if (v := dimension_value(values[k])) is not None)
        if not self._instance:
            why = report.instance.error or "no instance id"
            problems.append(Problem("instance_info", f"instance_info: {why}: records carry no "
                                    "instance dimensions until a report has them"))
        self._context = self._context.with_hardware_of(report.hardware)
        return self._context

    def _dimensions(self, labels: tuple[str, ...], key: tuple[str, ...],
                    problems: list[Problem]) -> Dims:
        dims = []
        for name, raw in zip(labels, key):
            value = dimension_value(raw)
            if value is None:
                continue
            if value != raw and raw not in self._rewritten:     # said once per value
                self._rewritten.add(raw)
                problems.append(Problem("dimension_value", f"{name} {raw[:60]!r} is not a "
                                        f"CloudWatch dimension value: written as '{value[:60]}'"))
            dims.append((name, value))
        return tuple(dims)

    def _record(self, timestamp: int, dims: Dims,
                metrics: list[tuple[mt.MetricSpec, float | list[float]]]) -> dict:
        record: dict = {"_aws": {"Timestamp": timestamp, "CloudWatchMetrics": [{
            "Namespace": self.namespace,
            "Dimensions": [[name for name, _ in dims]],
            "Metrics": [{"Name": spec.name, "Unit": unit_of(spec)} for spec, _ in metrics]}]}}
        record.update(dims)
        record.update((spec.name, value) for spec, value in metrics)
        return record

    def lines(self, report: Report, problems: list[Problem]) -> bytes:
        return b"".join(orjson.dumps(r) + b"\n" for r in self.records(report, problems))


def _chunks(metrics: Iterable[tuple[mt.MetricSpec, list[float]]]
            ) -> Iterator[list[tuple[mt.MetricSpec, float | list[float]]]]:
    """Records' metric lists: each name once per record, at most 100 metrics and 100 values
    each. A counter's values are added (the period's count of every process under that tag), and
    so are those of a gauge whose processes' readings add up to the tag's (bytes held, vCPU
    shares), as the Prometheus exporter adds them; any other gauge's stay separate data points
    (CloudWatch's statistics then span them all)."""
    first: list[tuple[mt.MetricSpec, float | list[float]]] = []
    spill: list[list[tuple[mt.MetricSpec, float | list[float]]]] = []
    for spec, values in metrics:
        if spec.kind == "counter" or spec.adds_up:
            first.append((spec, float(sum(values))))
        elif len(values) == 1:
            first.append((spec, values[0]))
        else:
            parts = [values[i:i + MAX_VALUES_PER_METRIC]
                     for i in range(0, len(values), MAX_VALUES_PER_METRIC)]
            first.append((spec, parts[0]))
            spill += [[(spec, part)] for part in parts[1:]]    # over 100 values: more records
    for start in range(0, len(first), MAX_METRICS_PER_RECORD):
        yield first[start:start + MAX_METRICS_PER_RECORD]
    yield from spill
