"""The fleet's recording rules (fleet-rules.yml) and Grafana dashboard (neuronscope-fleet.json).

Written by ``python dashboards/generate.py`` with the other dashboards. The per-instance rules are
the fleet screen's own panel queries (``monitor.fleet_queries.QUERIES``, filled in with no
selector, a 1m rate window and a 5m error window), so neuron-top, the rules and the dashboard
aggregate the same way. Where the screen joins neuronscope's per-core or per-device series to
``instance_info``, the rule first aggregates them per target and joins that (``joined``): the
same values (a test compares them on a real fleet), with a join 64 to 320 times smaller. The per-zone rules are built
on the recorded per-instance series. Names follow Prometheus's ``level:metric:
operations`` convention: the level is the labels kept, ``_total`` goes when a rate is taken.

At fleet scale the dashboard reads only recorded series: one series per instance (or per zone)
instead of one per core, so a panel's cost grows with the instances, not with their cores.
"""
from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from monitor.fleet_queries import QUERIES, RECORDED, expand  # noqa: E402

RATE_S, WINDOW_S = 60.0, 300.0  # rate() and increase() windows of the rules: 1m and 5m


def screen(name: str) -> str:
    """A fleet-screen panel query as the rules evaluate it (no selector)."""
    return expand(QUERIES[name], rate=RATE_S, window=WINDOW_S)


# neuronscope's metrics have no instance labels: join them to instance_info on the target.
JOIN = "* on (instance, job) group_left (instance_id) instance_info"


def joined(outer: str, inner: str, by: str = "") -> str:
    """``outer by (instance_id[, by]) (inner joined to instance_info)``, aggregated per target
    before the join: the same answer as the screen's join of every per-core series (one target
    is one instance), at a fraction of the cost (BENCHMARKS.md: the engine mix of 64 instances
    joins 20,480 series; this joins 320)."""
    keep = f", {by}" if by else ""
    return f"{outer} by (instance_id{keep}) ({outer} by (instance, job{keep}) ({inner}) {JOIN})"
# a per-instance recorded series gains its zone from instance_info (one zone per instance id)
TO_ZONE = ("* on (instance_id) group_left (availability_zone) "
           "max by (instance_id, availability_zone) (instance_info)")

# (record, expression, what it holds)
INSTANCE_RULES = [
    ("instance_id:neuroncore_utilization_ratio:sum", screen("util_sum"),
     "busy core-equivalents: NeuronCore utilization summed over the instance's cores"),
    ("instance_id:neuroncore_utilization_ratio:max", screen("util_max"),
     "utilization of the instance's busiest core"),
    ("instance_id:neuroncore_utilization_ratio:avg",
     "avg by (instance_id) (neuroncore_utilization_ratio)",
     "mean utilization over the cores some runtime holds"),
    ("instance_id_runtime_tag:neuroncore_utilization_ratio:count", screen("runtimes"),
     "cores each runtime (tag) holds"),
    ("instance_id:neuroncore_busy:count",
     "count by (instance_id) (neuroncore_utilization_ratio > 0)",
     "cores that did any work in the last period"),
    ("instance_id_engine:neuron_core_engine_utilization_ratio:avg",
     joined("avg", "neuron_core_engine_utilization_ratio", "engine"),
     "engine mix: mean busy ratio per engine over the cores in use"),
    ("instance_id:neuron_core_model_flops:rate1m",
     joined("sum", "rate(neuron_core_model_flops_total[1m])"), "model FLOP/s"),
    ("instance_id:neuron_core_model_flops_utilization_ratio:avg",
     joined("avg", "neuron_core_model_flops_utilization_ratio"),
     "mean MFU over the cores in use"),
    ("instance_id:neuron_device_hbm_bytes:rate1m",
     joined("sum", "rate(neuron_device_hbm_read_bytes_total[1m]) + "
                   "rate(neuron_device_hbm_write_bytes_total[1m])"),
     "HBM bytes read + written per second"),
    ("instance_id:neuron_device_hbm_bandwidth_utilization_ratio:avg",
     joined("avg", "neuron_device_hbm_bandwidth_utilization_ratio"),
     "mean HBM bandwidth utilization over the devices"),
    ("instance_id:neuron_runtime_memory_used_bytes:sum", screen("memory_used"),
     "device memory (HBM) the runtimes use"),
    ("instance_id:neuron_device_memory_used_bytes:sum",
     joined("sum", "neuron_device_memory_used_bytes"),
     "device memory (HBM) in use, all runtimes, from the device counters"),
    ("instance_id:neuron_device_memory_total_bytes:sum",
     joined("sum", "neuron_device_memory_total_bytes"),
     "device memory (HBM) capacity"),
    ("instance_id:neuron_device_power_watts:sum", joined("sum", "neuron_device_power_watts"),
     "device power"),
    ("instance_id:execution_errors:increase5m", screen("errors"),
     "execution errors in the last 5 minutes"),
    ("instance_id:execution_errors:rate5m",
     "sum by (instance_id) (rate(execution_errors_total[5m]))", "execution errors per second"),
    ("instance_id_error_type:execution_errors:rate5m",
     "sum by (instance_id, error_type) (rate(execution_errors_total[5m]))",
     "execution errors per second by kind"),
    ("instance_id:hardware_ecc_events:increase5m", screen("ecc"),
     "ECC events in the last 5 minutes"),
    ("instance_id:hardware_ecc_events:rate5m",
     "sum by (instance_id) (rate(hardware_ecc_events_total[5m]))", "ECC events per second"),
    ("instance_id_event_type:hardware_ecc_events:rate5m",
     "sum by (instance_id, event_type) (rate(hardware_ecc_events_total[5m]))",
     "ECC events per second by kind (corrected, uncorrected; HBM, SRAM)"),
]

ZONE_RULES = [
    (f"availability_zone:{metric}:{op}",
     f"sum by (availability_zone) (instance_id:{metric}:{op} {TO_ZONE})", what)
    for metric, op, what in [
        ("neuroncore_utilization_ratio", "sum", "busy core-equivalents per zone"),
        ("neuron_core_model_flops", "rate1m", "model FLOP/s per zone"),
        ("neuron_device_hbm_bytes", "rate1m", "HBM bytes per second per zone"),
        ("neuron_device_power_watts", "sum", "device power per zone"),
        ("neuron_runtime_memory_used_bytes", "sum", "device memory used per zone"),
        ("execution_errors", "rate5m", "execution errors per second per zone"),
        ("hardware_ecc_events", "rate5m", "ECC events per second per zone"),
    ]
] + [
    ("availability_zone:instances_up:count",
     "count by (availability_zone) (instance_info and on (instance, job) (up == 1)) "
     "or 0 * count by (availability_zone) (last_over_time(instance_info[1h]))",
     "exporters up per zone (0 where all are down: their instance_info stale within the hour)"),
]

# fleet screen panel (monitor.fleet_queries.QUERIES) -> the recorded series holding the same
# aggregate (the screen's own table, less the history, which reads the same series as util_sum)
SCREEN_RECORDS = {name: record for name, record in RECORDED.items() if name != "history"}

RULE_GROUPS = [("neuron-fleet-instance", INSTANCE_RULES), ("neuron-fleet-zone", ZONE_RULES)]


def rules_yaml() -> str:
    """fleet-rules.yml. Hand-written YAML (the generator needs only the standard library and
    the fleet screen's query table): block scalars keep the PromQL unescaped."""
    out = ["# Recording rules for the fleet aggregates of neuron-top --prometheus and the",
           "# neuronscope-fleet dashboard. Generated by dashboards/generate.py; do not edit.",
           "# Load with: rule_files: [fleet-rules.yml]   (check: promtool check rules)", "groups:"]
    for name, rules in RULE_GROUPS:
        out += [f"  - name: {name}", "    rules:"]  # evaluated at the global evaluation_interval
        for record, expr, what in rules:
            out += [f"      # {what}", f"      - record: {record}", "        expr: >-",
                    f"          {expr}"]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------ the dashboard
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
PICK = 'instance_info{availability_zone=~"$zone", instance_type=~"$instance_type"}'
# instance_info of the lookback, for a row per instance: one target can hold several series
# there (its id read only once IMDS answered, a Name tag changed), and a row needs an id
KNOWN = PICK.replace("{", '{instance_id!="", ')
F = f"and on (instance_id) {PICK}"   # keeps the chosen zones' and types' instances
ZONE = 'availability_zone=~"$zone"'
TOP = "$topk"


def per_instance(record: str) -> str:
    return f"{record} {F}"


# Instances table: one instant query per column, merged on instance_id by Grafana.
TABLE_COLUMNS = [
    # (title, query, Grafana unit): each column says its unit, as neuron-top's table does
    # every instance of the lookback, down ones too (instance_info goes stale with its target)
    ("Type / zone", "max by (instance_id, instance_type, availability_zone) "
                    f"(last_over_time({KNOWN}[15m]))", ""),
    # instance_info on the many side: a target's several series of the lookback each take its
    # one `up` (the other way round, Prometheus refuses them as duplicates of one match group)
    ("Up", "max by (instance_id) (max by (instance, job, instance_id) "
           f"(last_over_time({KNOWN}[15m])) * on (instance, job) group_left () up)",
     "bool_yes_no"),
    # the mean over the cores runtimes hold: over every core needs the core count, a label of
    # neuron_hardware_info, which PromQL cannot divide by (neuron-top does)
    ("Mean util (held cores)", per_instance("instance_id:neuroncore_utilization_ratio:avg"),
     "percentunit"),
    ("Max util", per_instance("instance_id:neuroncore_utilization_ratio:max"), "percentunit"),
    ("Busy cores", per_instance("instance_id:neuroncore_busy:count"), "none"),
    # parenthesised: `/` binds tighter than `and`, and divided instance_info, not the rate
    ("TFLOP/s", f"({per_instance('instance_id:neuron_core_model_flops:rate1m')}) / 1e12",
     "none"),
    ("HBM B/s", per_instance("instance_id:neuron_device_hbm_bytes:rate1m"), "binBps"),
    ("Memory used", per_instance("instance_id:neuron_device_memory_used_bytes:sum"), "bytes"),
    ("Memory total", per_instance("instance_id:neuron_device_memory_total_bytes:sum"), "bytes"),
    ("Power W", per_instance("instance_id:neuron_device_power_watts:sum"), "watt"),
    ("Errors 5m", per_instance("instance_id:execution_errors:increase5m"), "none"),
    ("ECC 5m", per_instance("instance_id:hardware_ecc_events:increase5m"), "none"),
]
# decimals where Grafana's automatic choice would show a count as 3.00 or a TFLOP/s as 12.3456
TABLE_DECIMALS = {"Busy cores": 0, "Errors 5m": 0, "ECC 5m": 0, "TFLOP/s": 1, "Power W": 0}

UTIL = per_instance("instance_id:neuroncore_utilization_ratio:avg")
# ("row", title) or (title, type, unit, width, height, [(expr, legend)], options)
FLEET_PANELS = [
    ("row", "Fleet"),
    ("Instances up", "stat", "none", 4, 4,
     [(f"count(up == 1 and on (instance, job) {PICK}) or vector(0)", "")], {}),
    ("Instances down", "stat", "none", 4, 4,
     [(f"count(up == 0 and on (instance, job) last_over_time({PICK}[1h])) or vector(0)", "")],
     {}),
    ("Busy NeuronCores", "stat", "none", 4, 4,
     [(f"sum({per_instance('instance_id:neuroncore_utilization_ratio:sum')})", "")], {}),
    ("Model FLOP/s", "stat", "flops", 4, 4,
     [(f"sum({per_instance('instance_id:neuron_core_model_flops:rate1m')})", "")], {}),
    ("HBM traffic", "stat", "Bps", 4, 4,
     [(f"sum({per_instance('instance_id:neuron_device_hbm_bytes:rate1m')})", "")], {}),
    ("Device power", "stat", "watt", 4, 4,
     [(f"sum({per_instance('instance_id:neuron_device_power_watts:sum')})", "")], {}),
    ("row", "Instances"),
    ("Instances", "table", "", 24, 10, [(expr, title) for title, expr, _ in TABLE_COLUMNS],
     {"table": True}),
    ("row", "Utilization"),
    ("Utilization by instance (held cores)", "status-history", "percentunit", 24, 10,
     [(UTIL, "{{instance_id}}")], {"heat": True}),
    ("Busiest instances", "bargauge", "percentunit", 8, 8,
     [(f"topk({TOP}, {UTIL})", "{{instance_id}}")], {"instant": True}),
    ("Idlest instances", "bargauge", "percentunit", 8, 8,
     [(f"bottomk({TOP}, {UTIL})", "{{instance_id}}")], {"instant": True}),
    ("Engine mix", "timeseries", "percentunit", 8, 8,
     [("avg by (engine) (instance_id_engine:neuron_core_engine_utilization_ratio:avg "
       f"{F})", "{{engine}}")], {}),
    ("row", "Errors and ECC"),
    ("Execution errors by instance", "timeseries", "cps", 12, 8,
     [(f"topk({TOP}, {per_instance('instance_id:execution_errors:rate5m')})",
       "{{instance_id}}")], {}),
    ("Execution errors by kind", "timeseries", "cps", 12, 8,
     [(f"sum by (error_type) (instance_id_error_type:execution_errors:rate5m {F})",
       "{{error_type}}")], {}),
    ("ECC events by instance", "timeseries", "cps", 12, 8,
     [(f"topk({TOP}, {per_instance('instance_id:hardware_ecc_events:rate5m')})",
       "{{instance_id}}")], {}),
    ("ECC events by kind", "timeseries", "cps", 12, 8,
     [(f"sum by (event_type) (instance_id_event_type:hardware_ecc_events:rate5m {F})",
       "{{event_type}}")], {}),
    ("row", "Per availability zone"),
    ("HBM traffic per zone", "timeseries", "Bps", 8, 8,
     [(f"availability_zone:neuron_device_hbm_bytes:rate1m{{{ZONE}}}", "{{availability_zone}}")],
     {}),
    ("Power per zone", "timeseries", "watt", 8, 8,
     [(f"availability_zone:neuron_device_power_watts:sum{{{ZONE}}}", "{{availability_zone}}")],
     {}),
    ("Busy NeuronCores per zone", "timeseries", "none", 8, 8,
     [(f"availability_zone:neuroncore_utilization_ratio:sum{{{ZONE}}}",
       "{{availability_zone}}")], {}),
    ("Model FLOP/s per zone", "timeseries", "flops", 8, 8,
     [(f"availability_zone:neuron_core_model_flops:rate1m{{{ZONE}}}", "{{availability_zone}}")],
     {}),
    ("Errors and ECC per zone", "timeseries", "cps", 8, 8,
     [(f"availability_zone:execution_errors:rate5m{{{ZONE}}}", "{{availability_zone}} errors"),
      (f"availability_zone:hardware_ecc_events:rate5m{{{ZONE}}}", "{{availability_zone}} ECC")],
     {}),
    ("Instances up per zone", "timeseries", "none", 8, 8,
     [(f"availability_zone:instances_up:count{{{ZONE}}}", "{{availability_zone}}")], {}),
]


def _variables() -> list[dict]:
    def query_var(name: str, label: str, definition: str, sort: int) -> dict:
        return {"name": name, "type": "query", "datasource": DATASOURCE, "label": label,
                "query": {"query": definition, "refId": name}, "definition": definition,
                "multi": True, "includeAll": True, "allValue": ".*", "refresh": 2, "sort": sort,
                "hide": 0, "current": {}}

    return [
        {"name": "datasource", "type": "datasource", "query": "prometheus",
         "label": "Data source", "hide": 0, "current": {}},
        query_var("zone", "Availability zone", "label_values(instance_info, availability_zone)", 1),
        query_var("instance_type", "Instance type",
                  'label_values(instance_info{availability_zone=~"$zone"}, instance_type)', 1),
        {"name": "topk", "type": "custom", "label": "Top k", "query": "5,10,20,50",
         "current": {"text": "10", "value": "10"}, "hide": 0,
         "options": [{"text": v, "value": v, "selected": v == "10"}
                     for v in ("5", "10", "20", "50")]},
    ]


def _panel(n: int, entry: tuple, targets) -> dict:
    title, kind, unit, width, height, queries, opts = entry
    panel = {"id": n, "title": title, "type": kind, "datasource": DATASOURCE,
             "gridPos": {"w": width, "h": height}, "targets": targets(queries, DATASOURCE),
             "fieldConfig": {"defaults": {"unit": unit} if unit else {}, "overrides": []},
             "options": {}}
    if opts.get("table"):
        for target in panel["targets"]:
            target.update(format="table", instant=True)
        panel["transformations"] = [
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {
                "excludeByName": {"Time": True, "Value #A": True},  # instance_info's 1
                "renameByName": {f"Value #{t['refId']}": t["legendFormat"]
                                 for t in panel["targets"][1:]}}}]
        panel["options"] = {"showHeader": True, "sortBy": [{"displayName": "Mean util (held cores)",
                                                              "desc": True}]}
        panel["fieldConfig"]["overrides"] = _column_units()
    if opts.get("instant"):
        for target in panel["targets"]:
            target["instant"] = True
        panel["options"] = {"orientation": "horizontal", "displayMode": "gradient"}
        panel["fieldConfig"]["defaults"].update(min=0, max=1)
    if opts.get("heat"):  # one row per instance, colour = utilization: a heatmap by instance
        panel["fieldConfig"]["defaults"].update(
            min=0, max=1, color={"mode": "continuous-GrYlRd"})
        panel["options"] = {"showValue": "never", "rowHeight": 0.9,
                            "legend": {"showLegend": False}}
    if kind == "timeseries":
        panel["options"] = {"legend": {"displayMode": "list", "placement": "bottom"}}
    return panel


def _column_units() -> list[dict]:
    """The Instances table's unit (and decimals) per column, matched by its renamed title."""
    overrides = []
    for title, _, unit in TABLE_COLUMNS:
        props = ([{"id": "unit", "value": unit}] if unit else []) + \
            ([{"id": "decimals", "value": TABLE_DECIMALS[title]}]
             if title in TABLE_DECIMALS else [])
        if props:
            overrides.append({"matcher": {"id": "byName", "options": title}, "properties": props})
    return overrides


def fleet_dashboard(layout, targets) -> dict:
    panels = []
    for n, entry in enumerate(FLEET_PANELS, start=1):
        if entry[0] == "row":
            panels.append({"id": n, "type": "row", "title": entry[1], "collapsed": False,
                           "gridPos": {"w": 24, "h": 1}, "panels": []})
        else:
            panels.append(_panel(n, entry, targets))
    return {"title": "neuronscope fleet", "uid": "neuronscope-fleet", "schemaVersion": 39,
            "version": 1, "editable": True, "refresh": "30s",
            "time": {"from": "now-1h", "to": "now"}, "tags": ["neuron", "neuronscope", "fleet"],
            "timezone": "", "annotations": {"list": []},
            "description": "Every Trainium instance a Prometheus scrapes; needs the recording "
                           "rules of fleet-rules.yml.",
            "panels": layout(panels), "templating": {"list": _variables()}}
