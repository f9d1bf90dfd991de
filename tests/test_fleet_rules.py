"""The fleet recording rules: promtool's checks and unit tests, and evaluation on a real fleet."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import shutil
import subprocess
import time

import pytest

from fleet_env import (FLEET_RULES, api, fleet, fleet_prometheus, fleet_victoria,  # noqa: F401
                       wait_fleet_up)
from monitor.fleet_queries import QUERIES

DASHBOARDS = FLEET_RULES.parent
yaml = pytest.importorskip("yaml")
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="needs promtool (Debian's prometheus package)")
pytestmark = pytest.mark.timeout(240)


def _fleet_gen():
    spec = importlib.util.spec_from_file_location("fleet_gen", DASHBOARDS / "fleet_gen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(FLEET_RULES.read_text())["groups"] for r in g["rules"]]


def promtool(*args: str, cwd: pathlib.Path = DASHBOARDS) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@needs_promtool
def test_promtool_checks_the_rules():
    out = promtool("check", "rules", "fleet-rules.yml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules())} rules found" in out.stdout


@needs_promtool
def test_rule_unit_tests_pass():
    out = promtool("test", "rules", "fleet-rules_test.yml")
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
@pytest.mark.parametrize("old, new, broken", [
    ("max by (instance_id) (neuroncore_utilization_ratio)",
     "min by (instance_id) (neuroncore_utilization_ratio)",
     "instance_id:neuroncore_utilization_ratio:max"),
    ("(neuroncore_utilization_ratio > 0)", "(neuroncore_utilization_ratio >= 0)",
     "instance_id:neuroncore_busy:count"),
    ('memory_location="neuron_device"', 'memory_location=~".+"',
     "instance_id:neuron_runtime_memory_used_bytes:sum"),
])
def test_rule_unit_tests_can_fail(tmp_path, old, new, broken):
    """A wrong aggregation, threshold or matcher makes promtool's unit tests fail."""
    text = FLEET_RULES.read_text()
    assert old in text
    (tmp_path / "fleet-rules.yml").write_text(text.replace(old, new))
    shutil.copy(DASHBOARDS / "fleet-rules_test.yml", tmp_path)
    out = promtool("test", "rules", "fleet-rules_test.yml", cwd=tmp_path)
    assert out.returncode != 0 and broken in out.stdout + out.stderr


def test_every_rule_has_a_unit_test():
    tests = yaml.safe_load((DASHBOARDS / "fleet-rules_test.yml").read_text())
    tested = {t["expr"] for case in tests["tests"] for t in case["promql_expr_test"]}
    assert {r["record"] for r in rules()} <= tested


def test_rule_names_follow_level_metric_operations():
    names = [r["record"] for r in rules()]
    assert len(names) == len(set(names)) >= 20
    for rule in rules():
        level, metric, ops = rule["record"].split(":")
        assert re.fullmatch(r"[a-z_]+", level) and re.fullmatch(r"[a-z0-9_]+", metric + ops)
        assert not metric.endswith("_total"), rule["record"]   # dropped with rate/increase
        grouped = re.search(r"^\w+ by \(([^)]*)\)", rule["expr"])
        assert grouped, rule["expr"]
        # the level names exactly the labels the outer aggregation keeps
        assert set(grouped.group(1).replace(" ", "").split(",")) == set(
            {"instance_id_runtime_tag": ["instance_id", "runtime_tag"],
             "instance_id_engine": ["instance_id", "engine"],
             "instance_id_error_type": ["instance_id", "error_type"],
             "instance_id_event_type": ["instance_id", "event_type"]}.get(level, [level])), rule
        window = re.fullmatch(r"(?:rate|increase)(\d+[sm])", ops)
        if window:  # the name's window is the expression's (written 1m or 60s)
            ranges = {_seconds(r) for r in re.findall(r"\[(\d+[sm])\]", rule["expr"])}
            if ranges:
                assert ranges == {_seconds(window.group(1))}, rule
            else:  # built on a recorded series of the same window
                assert f":{ops} " in rule["expr"], rule


def _seconds(duration: str) -> int:
    return int(duration[:-1]) * (60 if duration.endswith("m") else 1)


def test_instance_rules_cover_the_fleet_screen_queries():
    """Every aggregate panel of the screen has its recorded series; where the screen needs no
    join, the rule is the screen's query verbatim."""
    gen = _fleet_gen()
    by_record = {r["record"]: r["expr"] for r in rules()}
    assert set(gen.SCREEN_RECORDS) == set(QUERIES) - {"targets", "hardware", "up", "sample_age",
                                                       "modelled"}
    for name, record in gen.SCREEN_RECORDS.items():
        assert "$" not in gen.screen(name)
        if "instance_info" not in gen.screen(name):
            assert by_record[record] == gen.screen(name), name
        else:  # aggregated per target before the join
            assert "by (instance, job" in by_record[record], name
    assert gen.screen("hbm") != QUERIES["hbm"]  # placeholders really were filled in


def test_rules_file_is_generated():
    gen = _fleet_gen()
    assert FLEET_RULES.read_text() == gen.rules_yaml(), "run: python dashboards/generate.py"


# ------------------------------------------------------------------------------ on a real fleet
def test_every_rule_evaluates_on_the_real_fleet(fleet, fleet_prometheus):
    wait_fleet_up(fleet, fleet_prometheus)
    ids = set(fleet.instance_ids)
    zones = {i.availability_zone for i in fleet.instances}
    for rule in rules():  # a rule may need one more evaluation after a target came back
        if rule["record"].startswith("availability_zone:"):
            fleet_prometheus.wait_for(rule["record"], lambda r: {
                s["metric"]["availability_zone"] for s in r} == zones, timeout=30)
        else:
            fleet_prometheus.wait_for(rule["record"], lambda r: {
                s["metric"]["instance_id"] for s in r} == ids, timeout=30)
    loaded = [r for g in api(fleet_prometheus.base_url, "/api/v1/rules")["data"]["groups"]
              for r in g["rules"]]
    assert len(loaded) == len(rules())
    assert all(r["health"] == "ok" and not r.get("lastError") for r in loaded), loaded


def test_recorded_cores_match_the_instances(fleet, fleet_prometheus):
    wait_fleet_up(fleet, fleet_prometheus)
    result = fleet_prometheus.wait_for(
        "sum by (instance_id) (instance_id_runtime_tag:neuroncore_utilization_ratio:count)",
        lambda r: len(r) == len(fleet.instances), 30)
    cores = {s["metric"]["instance_id"]: float(s["value"][1]) for s in result}
    # default simulated jobs hold every core: trn2.48xlarge LNC=2 64, trn1.32xlarge 32
    assert cores == {fleet.instances[0].instance_id: 64, fleet.instances[1].instance_id: 32}
    power = fleet_prometheus.query("instance_id:neuron_device_power_watts:sum")
    assert all(float(s["value"][1]) > 0 for s in power)


def test_instance_rule_expressions_run_on_victoria_metrics(fleet, fleet_victoria):
    """Without vmalert there are no recorded series on VictoriaMetrics, but the screen sends the
    same expressions as plain queries: each answers one series per instance there too."""
    wait_fleet_up(fleet, fleet_victoria)
    ids = set(fleet.instance_ids)
    for rule in rules():
        if rule["record"].startswith("instance_id:"):
            fleet_victoria.wait_for(rule["expr"], lambda r: {
                s["metric"]["instance_id"] for s in r} == ids, timeout=30)


def test_rule_expressions_equal_the_screen_queries(fleet, fleet_prometheus):
    """Over the same stored samples (one instant a few seconds back, fully ingested), each rule
    and the screen's own query give the same numbers: aggregating per target before the join
    changes the cost, not the answer."""
    wait_fleet_up(fleet, fleet_prometheus)
    gen = _fleet_gen()
    by_record = {r["record"]: r["expr"] for r in rules()}
    # `at` must fall after every target is back (a test may have just restarted one): the first
    # instant, a few seconds back, at which every screen query answers for every instance.
    ids = set(fleet.instance_ids)
    deadline = time.monotonic() + 30
    while True:
        at = f"{time.time() - 2:.3f}"
        if all({s["metric"]["instance_id"] for s in fleet_prometheus.query(gen.screen(name), time=at)} == ids
               for name in gen.SCREEN_RECORDS) or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    for name, record in gen.SCREEN_RECORDS.items():
        want = {_key(s): float(s["value"][1])
                for s in fleet_prometheus.query(gen.screen(name), time=at)}
        got = {_key(s): float(s["value"][1])
               for s in fleet_prometheus.query(by_record[record], time=at)}
        assert {dict(k)["instance_id"] for k in want} == set(fleet.instance_ids), name
        assert got.keys() == want.keys(), name
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-12), (name, k)


def _key(sample: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in sample["metric"].items() if k != "__name__"))


@needs_promtool
def test_the_fleet_stat_panels_read_0_not_no_data_when_every_exporter_is_down(tmp_path):
    """In a full outage "Instances up" read "No data" (its query had no `or vector(0)`): the one
    number an operator looks at was blank. Both counts are evaluated by promtool on a fleet
    whose two exporters went down ten minutes ago (their instance_info series stale)."""
    board = (DASHBOARDS / "neuronscope-fleet.json").read_text()
    stats = {p["title"]: p["targets"][0]["expr"] for p in json.loads(board)["panels"]
             if p["title"] in ("Instances up", "Instances down")}
    tests = [{"expr": expr.replace("$zone", ".*").replace("$instance_type", ".*"),
              "eval_time": "30m", "exp_samples": [{"labels": "{}", "value": value}]}
             for title, expr in sorted(stats.items())
             for value in [2 if title == "Instances down" else 0]]
    series = []
    for n in (1, 2):
        target = f'instance="n{n}:8000", job="neuron"'
        series += [{"series": f'instance_info{{{target}, instance_id="i-{n}", availability_zone='
                              f'"az-a", instance_type="trn2.48xlarge"}}', "values": "1x20 stale"},
                   {"series": f"up{{{target}}}", "values": "1x20 0x20"}]
    (tmp_path / "empty.yml").write_text("groups: []\n")
    (tmp_path / "outage_test.yml").write_text(yaml.safe_dump({
        "rule_files": ["empty.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]}))
    assert len(tests) == 2
    out = promtool("test", "rules", "outage_test.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
