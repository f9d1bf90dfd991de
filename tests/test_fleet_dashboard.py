"""The fleet dashboard: generated, its panels cover the fleet view, and every query answers on a
real Prometheus scraping several exporters with the fleet recording rules loaded."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from exporters import metrics_table as mt
from fleet_env import DASHBOARDS, api, fleet, fleet_prometheus, wait_fleet_up  # noqa: F401

yaml = pytest.importorskip("yaml")
pytestmark = pytest.mark.timeout(240)
NAME = "neuronscope-fleet.json"
PROMETHEUS_OWN = {"up"}
PROMQL_WORDS = {"sum", "avg", "max", "min", "count", "by", "on", "and", "or", "topk", "bottomk",
                "group_left", "vector", "last_over_time", "e12"}
# Grafana's variables as a user with everything selected has them
VARIABLES = {"$zone": ".+", "$instance_type": ".+", "$topk": "10"}


def dashboard() -> dict:
    return json.loads((DASHBOARDS / NAME).read_text())


def panels() -> list[dict]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def substitute(expr: str) -> str:
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    assert "$" not in expr, expr
    return expr


def recorded() -> set[str]:
    rules = yaml.safe_load((DASHBOARDS / "fleet-rules.yml").read_text())
    return {r["record"] for g in rules["groups"] for r in g["rules"]}


def names_in(expr: str) -> set[str]:
    expr = re.sub(r'"[^"]*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]|(by|on|group_left) \([^)]*\)", "", expr)
    return {w for w in re.findall(r"[a-zA-Z_][a-zA-Z0-9_:]*", expr) if w not in PROMQL_WORDS}


def test_dashboard_has_the_fleet_panels():
    d = dashboard()
    assert (d["uid"], d["title"]) == ("neuronscope-fleet", "neuronscope fleet")
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]
    assert rows == ["Fleet", "Instances", "Utilization", "Errors and ECC", "Per availability zone"]
    by_title = {p["title"]: p for p in panels()}
    table = by_title["Instances"]
    assert table["type"] == "table" and all(t["instant"] for t in table["targets"])
    assert table["transformations"][0]["id"] == "merge"  # one row per instance_id
    assert by_title["Utilization by instance (held cores)"]["type"] == "status-history"
    # a down instance stays a row (instance_info goes stale with its target), with Up 0
    columns = {t["legendFormat"]: t["expr"] for t in table["targets"]}
    assert "last_over_time(instance_info" in columns["Type / zone"]
    assert columns["Up"].startswith("max by (instance_id) (") and columns["Up"].endswith(" up)")
    assert "topk(" in by_title["Busiest instances"]["targets"][0]["expr"]
    assert "bottomk(" in by_title["Idlest instances"]["targets"][0]["expr"]
    for title in ("HBM traffic per zone", "Power per zone"):
        assert "availability_zone:" in by_title[title]["targets"][0]["expr"]
    assert {v["name"] for v in d["templating"]["list"]} == {"datasource", "zone",
                                                            "instance_type", "topk"}


def test_every_instances_column_has_its_unit():
    """The table's figures show with units (96% and 1.2 TB, not 0.96 and 1200000000000): each
    column but the labels' has a unit, matched by the title it is renamed to."""
    table = next(p for p in panels() if p["title"] == "Instances")
    titles = [t["legendFormat"] for t in table["targets"]]
    renamed = set(table["transformations"][1]["options"]["renameByName"].values())
    units = {o["matcher"]["options"]: {p["id"]: p["value"] for p in o["properties"]}
             for o in table["fieldConfig"]["overrides"] if o["matcher"]["id"] == "byName"}
    assert set(units) <= renamed and set(titles[1:]) <= set(units)
    assert units["Mean util (held cores)"]["unit"] == "percentunit"
    assert units["Memory used"]["unit"] == "bytes" and units["HBM B/s"]["unit"] == "binBps"
    assert units["Power W"]["unit"] == "watt" and units["Busy cores"]["decimals"] == 0


def test_dashboard_reads_recorded_series_and_exported_metrics_only():
    known = {s.name for s in mt.ALL_METRICS} | PROMETHEUS_OWN | recorded()
    used = set()
    for panel in panels():
        for target in panel["targets"]:
            names = names_in(target["expr"])
            assert names <= known, (panel["title"], names - known)
            used |= names
    # per-core series are never read directly: at fleet scale the rules did that work
    assert not used & {"neuroncore_utilization_ratio", "neuron_core_engine_utilization_ratio",
                       "neuron_device_power_watts"}


def test_panels_do_not_overlap():
    cells = set()
    for p in dashboard()["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, p["title"]
        cells |= mine


def test_every_panel_query_answers_on_the_real_fleet(fleet, fleet_prometheus):
    wait_fleet_up(fleet, fleet_prometheus)
    fleet_prometheus.wait_for("instance_id:execution_errors:rate5m",
                              lambda r: len(r) == len(fleet.instances), 30)
    ids = set(fleet.instance_ids)
    empty = []
    for panel in panels():
        for target in panel["targets"]:
            expr = substitute(target["expr"])
            per_instance = "{{instance_id}}" in target["legendFormat"] or panel["type"] == "table"

            def answered(result, per_instance=per_instance):
                return result and (not per_instance or
                                   {s["metric"].get("instance_id") for s in result} == ids)
            try:  # every query succeeds; a recorded series may need one more evaluation
                fleet_prometheus.wait_for(expr, answered, timeout=15)
            except AssertionError as exc:
                empty.append((panel["title"], str(exc)[:300]))
    assert empty == []


def test_zone_and_type_filters_narrow_the_panels(fleet, fleet_prometheus):
    wait_fleet_up(fleet, fleet_prometheus)
    first = fleet.instances[0]
    busiest = next(p for p in panels() if p["title"] == "Busiest instances")
    expr = busiest["targets"][0]["expr"].replace("$topk", "10").replace(
        "$zone", first.availability_zone).replace("$instance_type", first.instance_type)
    result = fleet_prometheus.wait_for(expr, timeout=30)
    assert [s["metric"]["instance_id"] for s in result] == [first.instance_id]


def test_template_variables_have_the_fleet_values(fleet, fleet_prometheus):
    wait_fleet_up(fleet, fleet_prometheus)
    want = {"zone": {i.availability_zone for i in fleet.instances},
            "instance_type": {i.instance_type for i in fleet.instances}}
    for var in dashboard()["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"])
        assert m, var["definition"]
        values = api(fleet_prometheus.base_url, f"/api/v1/label/{m.group(2)}/values",
                     **{"match[]": substitute(m.group(1))})["data"]
        assert set(values) == want[var["name"]], var["name"]


def test_the_instances_table_columns_are_in_their_units(fleet, fleet_prometheus):
    """"TFLOP/s" had divided instance_info, not the rate (`/` binds before `and`): it showed
    FLOP/s, 10^12 too large. The column over its recorded series, in one query, is 1e-12."""
    wait_fleet_up(fleet, fleet_prometheus)
    table = next(p for p in panels() if p["type"] == "table")
    target = next(t for t in table["targets"] if "model_flops" in t["expr"])
    ratio = (f"({substitute(target['expr'])}) / on (instance_id) "
             "instance_id:neuron_core_model_flops:rate1m")
    result = fleet_prometheus.wait_for(ratio, lambda r: len(r) == len(fleet.instances), 30)
    assert all(float(s["value"][1]) == pytest.approx(1e-12) for s in result), result


# One target whose instance_info changed labels within the table's lookback: IMDS answered only
# after the first scrapes (instance_id "" first), then the EC2 Name tag changed. The second
# target is down.
_RELABELLED_TARGET = """
rule_files: [table.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'instance_info{instance="n1:8000", job="neuron", instance_id="", instance_type="trn2.48xlarge", availability_zone="az-a"}'
        values: '1 1 _ _ _ _'
      - series: 'instance_info{instance="n1:8000", job="neuron", instance_id="i-1", instance_type="trn2.48xlarge", availability_zone="az-a", instance_name="old"}'
        values: '_ _ 1 1 _ _'
      - series: 'instance_info{instance="n1:8000", job="neuron", instance_id="i-1", instance_type="trn2.48xlarge", availability_zone="az-a", instance_name="new"}'
        values: '_ _ _ _ 1 1'
      - series: 'up{instance="n1:8000", job="neuron"}'
        values: '1x5'
      - series: 'instance_info{instance="n2:8000", job="neuron", instance_id="i-2", instance_type="trn1.32xlarge", availability_zone="az-b"}'
        values: '1x5'
      - series: 'up{instance="n2:8000", job="neuron"}'
        values: '1 1 1 0 0 0'
    alert_rule_test: []
    promql_expr_test:
      - expr: 'table:up'
        eval_time: 5m
        exp_samples:
          - labels: 'table:up{instance_id="i-1"}'
            value: 1
          - labels: 'table:up{instance_id="i-2"}'
            value: 0
      - expr: 'table:type_zone'
        eval_time: 5m
        exp_samples:
          - labels: 'table:type_zone{instance_id="i-1", instance_type="trn2.48xlarge", availability_zone="az-a"}'
            value: 1
          - labels: 'table:type_zone{instance_id="i-2", instance_type="trn1.32xlarge", availability_zone="az-b"}'
            value: 1
"""


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_instances_table_keeps_one_row_per_instance_when_its_labels_changed(tmp_path):
    """"Up" had joined `up` to every instance_info series of the lookback on the one side:
    Prometheus refused the query (many-to-many) for 15 minutes after a target's labels changed,
    and "Type / zone" showed a row without an instance id."""
    table = next(p for p in panels() if p["type"] == "table")
    exprs = {t["legendFormat"]: substitute(t["expr"]) for t in table["targets"]}
    rules = {"groups": [{"name": "table", "rules": [
        {"record": "table:up", "expr": exprs["Up"]},
        {"record": "table:type_zone", "expr": exprs["Type / zone"]}]}]}
    (tmp_path / "table.yml").write_text(yaml.safe_dump(rules))
    (tmp_path / "table_test.yml").write_text(_RELABELLED_TARGET)
    out = subprocess.run(["promtool", "test", "rules", "table_test.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
