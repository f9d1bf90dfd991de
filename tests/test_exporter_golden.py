"""The exposition of AWS's metrics is byte-identical to what prometheus_client produces.

`AwsReference` re-implements AWS's neuron-monitor-prometheus.py with prometheus_client's own
Gauge/Counter/Info classes (lazy family creation, `.inc()` of per-period counts, instance labels
from the first report, `memory_location=None`, info metrics set once), plus our one documented
change: series of runtimes that left the report are removed. Every report of several sequences is
fed to both; after each one the AWS families of our output must equal generate_latest's, in the
0.0.4 text format and in OpenMetrics.
"""
from __future__ import annotations

import os
import pathlib
import sys
import types

import orjson
import prometheus_client.metrics
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Info, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from exporters import metrics_table as mt
from exporters.exporter import PrometheusExporter
from monitor.report import PERCENTILES, Report

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES / "exporter"))
from stream_gen import StreamGen  # noqa: E402
GOLDEN = FIXTURES / "exporter"
T0 = 1764476000.25
AWS_TEXT_NAMES = ({s.name for s in mt.AWS_METRICS}
                  | {s.family + "_created" for s in mt.AWS_METRICS if s.created})
AWS_OM_NAMES = {s.family for s in mt.AWS_METRICS}


class AwsReference:
    """AWS's exporter logic on prometheus_client classes, reading our Report."""

    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=False)
        self.objects: dict[str, object] = {}
        self.instance: dict[str, str] | None = None

    def _get(self, cls, name: str, doc: str, labels: list[str]):
        if name not in self.objects:
            self.objects[name] = cls(name, doc, labels, registry=self.registry)
        return self.objects[name]

    def apply(self, report: Report) -> None:
        if self.instance is None:
            i = report.instance
            self.instance = {"instance_name": i.name, "instance_id": i.id, "instance_type": i.type,
                             "availability_zone": i.availability_zone, "region": i.region,
                             "subnet_id": i.subnet_id}
        for rt in report.runtimes:
            if not rt.error:
                self._runtime(rt, dict(self.instance, runtime_tag=rt.tag))
        self._drop_defunct({rt.tag for rt in report.runtimes})
        self._system(report, dict(self.instance))
        if "instance_info" not in self.objects:
            self.objects["instance_info"] = Info("instance", "EC2 instance information",
                                                 registry=self.registry)
            self.objects["instance_info"].info(dict(self.instance))
        if "neuron_hardware_info" not in self.objects:
            hw = report.hardware
            info = Info("neuron_hardware", "Neuron Hardware Information", registry=self.registry)
            def label(v):  # a value the stream lacks (inf1: no memory size) is an empty label
                return "" if v is None else str(v)
            info.info({"neuron_device_count": label(hw.device_count),
                       "neuron_device_memory_size": label(hw.device_memory_bytes),
                       "neuroncore_per_device_count": label(hw.cores_per_device), **self.instance})
            self.objects["neuron_hardware_info"] = info

    def _runtime(self, rt, labels: dict) -> None:
        keys = list(labels)
        g = rt.neuroncore_counters
        if g is not None and not g.error:
            m = self._get(Gauge, "neuroncore_utilization_ratio", "NeuronCore utilization ratio",
                          keys + ["neuroncore"])
            for idx, core in g.cores.items():
                m.labels(**labels, neuroncore=int(idx)).set(core.utilization)
        g = rt.execution_stats
        if g is not None and not g.error:
            errors = self._get(Counter, "execution_errors_total", "Execution errors total",
                               keys + ["error_type"])
            for kind, n in g.errors.items():
                errors.labels(**labels, error_type=kind).inc(n)
            status = self._get(Counter, "execution_status_total", "Execution status total",
                               keys + ["status_type"])
            for kind, n in g.statuses.items():
                status.labels(**labels, status_type=kind).inc(n)
            latency = self._get(Gauge, "execution_latency_seconds", "Execution latency in seconds",
                                keys + ["percentile"])
            if g.total_latency is not None:
                for p in PERCENTILES:  # a percentile the stream lacks has no series
                    if getattr(g.total_latency, p) is not None:
                        latency.labels(**labels, percentile=p).set(getattr(g.total_latency, p))
        g = rt.memory_used
        if g is not None and not g.error:
            used = self._get(Gauge, "neuron_runtime_memory_used_bytes", "Runtime memory used bytes",
                             keys + ["memory_location"])
            used.labels(**labels, memory_location="host").set(g.host_bytes)
            used.labels(**labels, memory_location="neuron_device").set(g.device_bytes)
            for kind in mt.CORE_MEMORY_KINDS:
                m = self._get(Gauge, f"neuroncore_memory_usage_{kind}",
                              f"NeuronCore memory utilization for {kind}",
                              keys + ["memory_location", "neuroncore"])
                for idx, kinds in g.core_breakdown.items():
                    if kind in kinds:
                        m.labels(**labels, memory_location=None, neuroncore=int(idx)).set(kinds[kind])
        g = rt.vcpu
        if g is not None and not g.error:
            m = self._get(Gauge, "neuron_runtime_vcpu_usage_ratio", "Runtime vCPU utilization ratio",
                          keys + ["usage_type"])
            m.labels(**labels, usage_type="user").set(g.user)
            m.labels(**labels, usage_type="system").set(g.system)

    def _drop_defunct(self, alive: set[str]) -> None:
        for obj in self.objects.values():
            names = getattr(obj, "_labelnames", ())
            if "runtime_tag" in names:
                at = names.index("runtime_tag")
                for key in [k for k in obj._metrics if k[at] not in alive]:
                    obj.remove(*key)

    def _system(self, report: Report, labels: dict) -> None:
        keys = list(labels)
        s = report.system
        if s.hw_counters is not None and not s.hw_counters.error:
            c = self._get(Counter, "hardware_ecc_events_total", "Hardware ecc events total",
                          keys + ["event_type", "neuron_device_index"])
            for d in s.hw_counters.devices or ():
                for event in mt.ECC_EVENTS:
                    if getattr(d, event) is not None:
                        c.labels(**labels, event_type=event, neuron_device_index=d.index).inc(
                            getattr(d, event))
        if s.vcpu is not None and not s.vcpu.error:
            self._get(Gauge, "system_vcpu_count", "System vCPU count", keys).labels(**labels).set(
                len(s.vcpu.per_cpu))
            ratio = self._get(Gauge, "system_vcpu_usage_ratio", "System CPU utilization ratio",
                              keys + ["usage_type"])
            for kind, parts in (("user", ["user", "nice"]),
                                ("system", ["system", "io_wait", "irq", "soft_irq"])):
                value = min(sum([s.vcpu.average.get(p, 0.0) for p in parts]), 1.0)
                ratio.labels(**labels, usage_type=kind).set(value)
        if s.memory is not None and not s.memory.error:
            for area in ("memory", "swap"):
                for stat in ("total_bytes", "used_bytes"):
                    attr = f"{'swap_' if area == 'swap' else ''}{stat}"
                    if getattr(s.memory, attr) is None:
                        continue
                    self._get(Gauge, f"system_{area}_{stat}", f"System {area} {stat} bytes",
                              keys).labels(**labels).set(getattr(s.memory, attr))


def aws_families(exposition: bytes, names: set[str]) -> bytes:
    """Only the families of AWS's metrics, in their order, from a whole exposition."""
    out, keep = [], False
    for line in exposition.decode().splitlines(keepends=True):
        if line.startswith("# HELP "):
            keep = line.split(" ", 3)[2] in names
        if keep and line != "# EOF\n":
            out.append(line)
    return "".join(out).encode()


@pytest.fixture
def fake_time(monkeypatch):
    now = {"t": T0}
    monkeypatch.setattr(prometheus_client.metrics, "time", types.SimpleNamespace(time=lambda: now["t"]))
    return now


def assert_equivalent(reports: list[Report], now: dict) -> None:
    ours = PrometheusExporter(clock=lambda: now["t"])
    ref = AwsReference()
    for n, report in enumerate(reports):
        now["t"] = T0 + n + 0.125 * n
        ours.ingest(report)
        ref.apply(report)
        expected = generate_latest(ref.registry)
        assert aws_families(ours.current.text, AWS_TEXT_NAMES) == expected, f"text, report {n}"
        expected_om = generate_openmetrics(ref.registry)
        assert aws_families(ours.current.openmetrics, AWS_OM_NAMES) + b"# EOF\n" == expected_om, \
            f"OpenMetrics, report {n}"


def _report(doc: dict) -> Report:
    return Report.from_json(orjson.dumps(doc))


def churn_sequence() -> list[Report]:
    gen = StreamGen(seed=7, runtimes=3, devices=2, churn_every=3)
    docs = [gen.document() for _ in range(9)]
    docs[2]["neuron_runtime_data"][1]["report"]["memory_used"]["error"] = "ioctl failed"
    docs[3]["neuron_runtime_data"][0]["error"] = "runtime gone away"
    docs[4]["neuron_runtime_data"][2]["report"]["execution_stats"]["latency_stats"] = None
    docs[5]["neuron_runtime_data"] = []
    docs[6]["system_data"]["neuron_hw_counters"]["neuron_devices"] = None
    docs[7]["neuron_runtime_data"][0]["neuron_runtime_tag"] = 'tag "with" \\ odd\nchars'
    return [_report(d) for d in docs]


def test_aws_example_matches_prometheus_client(fake_time):
    doc = (FIXTURES / "neuron_monitor_aws_example.json").read_bytes()
    assert_equivalent([Report.from_json(doc)] * 3, fake_time)


@pytest.mark.parametrize("names", [
    {"neuroncore_utilization_ratio"}, {"execution_status_total", "instance_info"},
    {"no_such_metric"}])
def test_name_filter_serves_what_prometheus_client_serves(fake_time, names):
    """`/metrics?name[]=...` keeps the samples named, as prometheus_client's restricted registry
    does (a `_total` without its `_created`, a family's HELP and TYPE with them). (Asked for
    `_created` alone, prometheus_client also writes the empty `_total` family's header; this
    exporter writes the `_created` family only.)"""
    from exporters.exposition import restrict
    ours = PrometheusExporter(clock=lambda: fake_time["t"])
    ref = AwsReference()
    report = Report.from_json((FIXTURES / "neuron_monitor_aws_example.json").read_bytes())
    ours.ingest(report)
    ref.apply(report)
    restricted = ref.registry.restricted_registry(names)

    def families(body: bytes) -> list[bytes]:
        """Its family blocks, sorted: prometheus_client's filtered order follows a set's."""
        body = body.removesuffix(b"# EOF\n")
        return sorted(b"# HELP " + block for block in body.split(b"# HELP ")[1:])
    text = restrict(ours.current.text, frozenset(names), False)
    assert families(text) == families(generate_latest(restricted))
    om = restrict(ours.current.openmetrics, frozenset(names), True)
    assert om.endswith(b"# EOF\n")
    assert families(om) == families(generate_openmetrics(restricted))


def test_stream_with_churn_errors_and_quirks_matches_prometheus_client(fake_time):
    assert_equivalent(churn_sequence(), fake_time)


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("neuron_monitor_*.json")))
def test_monitor_quirk_fixtures_match_prometheus_client(fixture, fake_time):
    report = Report.from_json((FIXTURES / fixture).read_bytes())
    assert_equivalent([report, report], fake_time)


def test_first_report_without_runtimes_puts_system_families_first(fake_time):
    """Family order is first-seen order, as with AWS's lazily created objects."""
    docs = churn_sequence()
    empty = _report(dict(orjson.loads(docs[0].to_json()), neuron_runtime_data=[]))
    assert_equivalent([empty] + docs[:3], fake_time)
    ours = PrometheusExporter(clock=lambda: T0)
    ours.ingest(empty)
    first = ours.current.text.decode().split("\n", 1)[0]
    assert first == "# HELP hardware_ecc_events_total Hardware ecc events total"


@pytest.mark.parametrize("suffix, attr", [("prom", "text"), ("om", "openmetrics")])
def test_golden_files(suffix, attr):
    """Our full output for AWS's example (extras and exporter health included) is pinned."""
    doc = (FIXTURES / "neuron_monitor_extensions.json").read_bytes()
    ours = PrometheusExporter(clock=lambda: T0, timer=lambda: 0.0)
    ours.ingest(Report.from_json(doc, received_at=T0))
    body = getattr(ours.current, attr).decode().replace(
        f'version="{_version()}"', 'version="VERSION"')
    golden = GOLDEN / f"extensions_example.{suffix}"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(body)
    assert body == golden.read_text()


def _version() -> str:
    from exporters.exporter import package_version
    return package_version()
