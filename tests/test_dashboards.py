"""Dashboards, the scrape config, the DaemonSet and docs/metrics.md are consistent with the code."""
from __future__ import annotations

import json
import pathlib
import shutil
import re
import subprocess
import sys

import pytest

from exporters import docs, metrics_table as mt

ROOT = pathlib.Path(__file__).resolve().parent.parent
DASHBOARDS = ROOT / "dashboards"
yaml = pytest.importorskip("yaml")

# AWS's dashboard (neuron-tools.md §2.1): panel title -> its PromQL expressions.
AWS_PANELS = {
    ("Instance Info", "table"): ["instance_info"],
    ("Instance Count", "stat"): ["count(instance_info)"],
    ("vCPU Count", "stat"): ["sum (system_vcpu_count)"],
    ("vCPU Utilization", "gauge"): ["avg(sum by (instance_id) (system_vcpu_usage_ratio))"],
    ("NeuronCores in Use", "stat"): ["count(neuroncore_utilization_ratio > 0)"],
    ("Execution Latency", "graph"): ["avg by (percentile) (execution_latency_seconds)"],
    ("NeuronCore Utilization", "graph"): ["avg by (neuroncore) (neuroncore_utilization_ratio)"],
    ("Neuron Runtime Used Memory", "graph"): [
        "avg by (memory_location) (sum by (instance_id, memory_location) "
        "(neuron_runtime_memory_used_bytes))"],
}
PROMETHEUS_OWN = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
PROMQL_WORDS = {"sum", "avg", "max", "min", "count", "by", "without", "rate", "increase", "time",
                "on", "and", "or", "unless", "max_over_time", "group_left", "bool", "offset"}


def load(name: str) -> dict:
    return json.loads((DASHBOARDS / name).read_text())


def exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    expr = re.sub(r'"[^"]*"', '""', expr)         # label values
    expr = re.sub(r"\{[^}]*\}", "", expr)          # selectors
    expr = re.sub(r"\[[^\]]*\]", "", expr)         # ranges
    expr = re.sub(r"by \([^)]*\)", "", expr)       # grouping labels
    expr = re.sub(r"offset \d+[smhdwy]", "", expr)   # offsets (a duration, not a name)
    return {w for w in re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*", expr) if w not in PROMQL_WORDS}


def test_dashboards_are_generated_from_the_tables():
    out = subprocess.run([sys.executable, str(DASHBOARDS / "generate.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_aws_dashboard_keeps_aws_identity_and_queries():
    d = load("neuron-monitor.json")
    assert (d["title"], d["uid"], d["schemaVersion"]) == ("neuron-monitor", "EqWNYf5Mz", 26)
    assert d["templating"]["list"][0]["type"] == "adhoc"
    panels = {(p["title"], p["type"]): [t["expr"] for t in p["targets"]] for p in d["panels"]}
    for key, queries in AWS_PANELS.items():
        assert panels[key] == queries, key
    assert all(p["datasource"] == "Prometheus" for p in d["panels"])


def test_neuronscope_dashboard_covers_the_issue_topics():
    d = load("neuronscope.json")
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "Engines", "HBM", "FLOPs", "Collectives and DMA",
                    "Power and thermal", "Errors", "Exporter health"]
    names = {v["name"] for v in d["templating"]["list"]}
    assert {"instance", "device"} <= names
    for expr in exprs(d):
        assert 'instance=~"$instance"' in expr or "$instance" in expr, expr


@pytest.mark.parametrize("name", ["neuron-monitor.json", "neuronscope.json"])
def test_dashboards_query_only_metrics_we_export(name):
    known = {s.name for s in mt.ALL_METRICS} | PROMETHEUS_OWN
    for expr in exprs(load(name)):
        assert metric_names(expr) <= known, (expr, metric_names(expr) - known)


def test_panels_do_not_overlap():
    for name in ("neuron-monitor.json", "neuronscope.json"):
        cells = set()
        for p in load(name)["panels"]:
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                    for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & mine, (name, p["title"])
            cells |= mine


def test_alerts_use_only_metrics_we_export():
    known = {s.name for s in mt.ALL_METRICS} | PROMETHEUS_OWN
    rules = yaml.safe_load((DASHBOARDS / "alerts.yml").read_text())
    for rule in rules["groups"][0]["rules"]:
        assert metric_names(rule["expr"]) - {"humanize"} <= known, rule["expr"]


def test_daemonset_runs_one_exporter_per_node():
    docs_ = list(yaml.safe_load_all((DASHBOARDS / "k8s" / "neuron-monitor-daemonset.yaml").read_text()))
    ds = next(d for d in docs_ if d["kind"] == "DaemonSet")
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert "\"$monitor\" | neuron-monitor-prometheus" in container["args"][0]
    assert container["ports"][0] == {"name": "metrics", "containerPort": 8000, "protocol": "TCP"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/-/healthy"
    scrape = yaml.safe_load((DASHBOARDS / "k8s" / "prometheus-scrape.yml").read_text())
    assert scrape["scrape_configs"][0]["kubernetes_sd_configs"][0]["role"] == "pod"


def test_metrics_doc_is_up_to_date():
    assert (ROOT / "docs" / "metrics.md").read_text() == docs.markdown(), \
        "run: python -m exporters.docs --write"


def test_metric_table_follows_conventions():
    names = [s.name for s in mt.ALL_METRICS]
    assert len(names) == len(set(names))
    for spec in mt.EXTRA_METRICS:
        assert spec.name.startswith("neuron_"), spec.name
        assert (spec.kind == "counter") == spec.name.endswith("_total"), spec.name
        assert "type" not in spec.labels and "instance" not in spec.labels
        assert not spec.instance_labels


def _vmagent() -> str | None:
    """Debian's victoria-metrics package ships vmagent, which knows kubernetes_sd_configs
    (Debian's promtool does not): scripts/ensure-prometheus.sh installs it."""
    found = shutil.which("vmagent")
    if found is None and pathlib.Path("/usr/bin/vmagent").exists():
        found = "/usr/bin/vmagent"
    return found


def _vmagent_dry_run(config: pathlib.Path, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([_vmagent(), f"-promscrape.config={config}", "-promscrape.config.dryRun",
                           "-loggerLevel=ERROR"], capture_output=True, text=True, timeout=60,
                          cwd=cwd)


@pytest.mark.skipif(_vmagent() is None, reason="vmagent not installed (Debian package "
                    "victoria-metrics; scripts/ensure-prometheus.sh installs it)")
def test_kubernetes_scrape_config_passes_vmagent_dry_run(tmp_path):
    result = _vmagent_dry_run(DASHBOARDS / "k8s" / "prometheus-scrape.yml", tmp_path)
    assert result.returncode == 0, result.stderr
    # The check is real: the same file with a misspelt key is refused.
    broken = tmp_path / "broken.yml"
    broken.write_text((DASHBOARDS / "k8s" / "prometheus-scrape.yml").read_text().replace(
        "kubernetes_sd_configs", "kubernetes_sd_config"))
    result = _vmagent_dry_run(broken, tmp_path)
    assert result.returncode != 0 and "kubernetes_sd_config" in result.stderr


def test_daemonset_liveness_probe_is_the_health_endpoint_that_goes_stale():
    docs_ = list(yaml.safe_load_all((DASHBOARDS / "k8s" / "neuron-monitor-daemonset.yaml").read_text()))
    ds = next(d for d in docs_ if d["kind"] == "DaemonSet")
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/-/healthy"
    # the exporter exits when neuron-monitor's output ends, so the container restarts
    assert "--keep-serving" not in container["args"][0]
