"""End to end through a real Prometheus: source | neuron-monitor-prometheus <- prometheus (1 s).

Every PromQL expression of every panel of every dashboard in dashboards/ must return at least
one series, every template variable at least one value, and the alert rules must load and
evaluate without error.
"""
from __future__ import annotations

import json
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DASHBOARDS = ROOT / "dashboards"
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "exporter"))
from harness import MONITOR_CONFIG, ExporterProcess, console_script  # noqa: E402

pytestmark = [
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="needs Debian's prometheus package (scripts/ensure-prometheus.sh)"),
    pytest.mark.timeout(240),
]
# The fleet dashboard reads the fleet recording rules and filters by zone and type: its queries
# are checked against a real fleet of several exporters in tests/test_fleet_dashboard.py.
FLEET_DASHBOARDS = {"neuronscope-fleet.json"}
GRAFANA_VARIABLES = {"$instance": ".+", "$device": ".+", "$__rate_interval": "1m",
                     "$__range": "5m", "$__interval": "1s"}




@pytest.fixture(scope="module")
def simulated_instance(tmp_path_factory):
    """`neuron-sim start` on a private runtime directory; stopped at the end."""
    root = tmp_path_factory.mktemp("sim")
    root.chmod(0o700)
    sim = console_script("neuron-sim")
    subprocess.run([sim, "start", "--instance", "trn2.48xlarge", "--root", str(root)],
                   check=True, capture_output=True, timeout=120)
    try:
        yield root
    finally:
        subprocess.run([sim, "stop", "--root", str(root)], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def monitor_command(simulated_instance, tmp_path_factory) -> list[str]:
    """The report source piped into the exporter: our neuron-monitor on the simulated instance.
    (tests/fixtures/exporter/stream_gen.py is a drop-in replacement: stream_gen_command(...).)"""
    config = tmp_path_factory.mktemp("monitor") / "monitor.json"
    config.write_text(json.dumps(MONITOR_CONFIG))
    return [console_script("neuron-monitor"), "-c", str(config), "--root", str(simulated_instance)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base: str, path: str, **params: str) -> dict:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)


@pytest.fixture(scope="module")
def stack(monitor_command, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prom")
    source = subprocess.Popen(monitor_command, stdout=subprocess.PIPE)
    exporter = ExporterProcess(stdin=source.stdout)
    source.stdout.close()  # the exporter holds the pipe now
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{DASHBOARDS / 'alerts.yml'}']\n"
        "scrape_configs:\n"
        f"  - job_name: neuron\n    static_configs: [{{targets: ['127.0.0.1:{exporter.port}']}}]\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={config}",
                             f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=(tmp / "prometheus.log").open("wb"))
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(base), 60, "Prometheus ready")
        yield base, exporter
    finally:
        for proc in (prom, source):
            proc.terminate()
        exporter.close()
        for proc in (prom, source):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/-/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def dashboard_queries() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(p for p in DASHBOARDS.glob("*.json") if p.name not in FLEET_DASHBOARDS):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                out.append((path.name, panel["title"], substitute(target["expr"])))
    return out


def substitute(expr: str) -> str:
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    assert "$" not in expr, expr
    return expr


def template_queries() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(p for p in DASHBOARDS.glob("*.json") if p.name not in FLEET_DASHBOARDS):
        for var in json.loads(path.read_text())["templating"]["list"]:
            if var["type"] == "query":
                m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"])
                assert m, var["definition"]
                out.append((path.name, substitute(m.group(1)), m.group(2)))
    return out


def _query_series(base: str, expr: str) -> int:
    body = api(base, "/api/v1/query", query=expr)
    assert body["status"] == "success", (expr, body)
    return len(body["data"]["result"])


def test_every_dashboard_query_returns_series(stack):
    base, exporter = stack
    wait_until(lambda: _query_series(base, 'up{job="neuron"} == 1'), 60, "first scrape")
    # rate() over [1m] needs two samples of a counter that moved: give it a few reports.
    wait_until(lambda: _query_series(base, "neuron_exporter_reports_total >= 6"), 60, "6 reports")
    queries = dashboard_queries()
    assert len(queries) > 40
    empty = [q for q in queries if _query_series(base, q[2]) == 0]
    if empty:  # a counter may need one more scrape to show an increase; retry once
        time.sleep(3)
        empty = [q for q in empty if _query_series(base, q[2]) == 0]
    assert empty == [], f"queries without series: {empty}"


def test_template_variables_have_values(stack):
    base, _ = stack
    wait_until(lambda: _query_series(base, 'up{job="neuron"} == 1'), 60, "first scrape")
    for name, selector, label in template_queries():
        values = api(base, f"/api/v1/label/{label}/values", **{"match[]": selector})["data"]
        assert values, (name, selector, label)


def test_prometheus_scrapes_openmetrics_without_errors(stack):
    base, exporter = stack
    wait_until(lambda: _query_series(base, 'up{job="neuron"} == 1'), 60, "first scrape")
    targets = api(base, "/api/v1/targets")["data"]["activeTargets"]
    assert [t["health"] for t in targets] == ["up"] and targets[0]["lastError"] == ""
    samples = api(base, "/api/v1/query", query="scrape_samples_scraped")["data"]["result"]
    assert float(samples[0]["value"][1]) > 500


def test_alert_rules_load_and_evaluate(stack):
    base, _ = stack

    def evaluated():
        groups = api(base, "/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules) \
            else None

    rules = wait_until(evaluated, 30, "rule evaluation")
    assert len(rules) == 6
    assert all(r["health"] == "ok" and not r.get("lastError") for r in rules), rules
