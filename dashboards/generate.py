"""Writes the Grafana dashboards and the fleet recording rules of this folder from their tables.

    python dashboards/generate.py          # rewrite neuron-monitor.json, neuronscope.json,
                                           # neuronscope-fleet.json and fleet-rules.yml
    python dashboards/generate.py --check  # exit 1 if any of the four is out of date

neuron-monitor.json reproduces AWS's example dashboard (src/examples/neuron-monitor/
neuron-monitor-grafana.json: title, uid, datasource "Prometheus", adhoc "Filters" variable,
panels and PromQL), so it works unmodified on our exporter. neuronscope.json adds what AWS's
lacks. neuronscope-fleet.json and fleet-rules.yml come from fleet_gen.py, which takes the fleet
screen's queries from monitor/fleet_queries.py (so it needs this repository on the path, as here).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent

# ------------------------------------------------------------------------------ AWS's dashboard
MEM_RATIO = "avg(system_memory_used_bytes / system_memory_total_bytes)"
VCPU = "avg(sum by (instance_id) (system_vcpu_usage_ratio))"
SUCCESS = 'sum(rate(execution_status_total{status_type="completed"}[1m]))'
ERRORS = 'sum(rate(execution_status_total{status_type!="completed"}[1m]))'

# (title, type, unit, width, height, [(expr, legend)])
AWS_PANELS = [
    ("Instance Info", "table", "", 24, 5, [("instance_info", "")]),
    ("Instance Count", "stat", "", 4, 4, [("count(instance_info)", "")]),
    ("vCPU Count", "stat", "none", 4, 4, [("sum (system_vcpu_count)", "")]),
    ("vCPU Utilization", "gauge", "percentunit", 4, 4, [(VCPU, "")]),
    ("Host Memory Usage", "gauge", "percentunit", 4, 4, [(MEM_RATIO, "")]),
    ("NeuronCores in Use", "stat", "", 4, 4, [("count(neuroncore_utilization_ratio > 0)", "")]),
    ("NeuronCore Utilization", "gauge", "percentunit", 4, 4, [("avg(neuroncore_utilization_ratio)", "")]),
    ("Execution Success Rate", "stat", "cps", 12, 4, [(SUCCESS, "")]),
    ("Execution Error Rate", "stat", "cps", 12, 4, [(ERRORS, "")]),
    ("Execution Status Rates", "graph", "short", 12, 8,
     [(SUCCESS, "Execution Success Rate"), (ERRORS, "Execution Error Rate")]),
    ("Execution Latency", "graph", "s", 12, 8,
     [("avg by (percentile) (execution_latency_seconds)", "{{percentile}}")]),
    ("NeuronCore Utilization", "graph", "percentunit", 12, 8,
     [("avg by (neuroncore) (neuroncore_utilization_ratio)", "nc{{neuroncore}}")]),
    ("Neuron Runtime vCPU Usage", "graph", "percentunit", 12, 8,
     [("avg by (usage_type) (neuron_runtime_vcpu_usage_ratio)",
       "Neuron Runtime {{usage_type}} CPU usage ")]),
    ("Neuron Runtime Used Memory", "graph", "bytes", 12, 8,
     [("avg by (memory_location) (sum by (instance_id, memory_location) "
       "(neuron_runtime_memory_used_bytes))", "{{memory_location}}")]),
    ("Host System Utilization", "graph", "percentunit", 12, 8,
     [(MEM_RATIO, "Memory Usage"), (VCPU, "vCPU Usage"),
      ("avg(neuroncore_utilization_ratio)", "NeuronCore Usage")]),
    ("Host vCPU Usage", "graph", "percentunit", 12, 8,
     [("avg by (usage_type) (system_vcpu_usage_ratio)", "{{usage_type}}")]),
    ("Host Memory Usage", "graph", "percentunit", 12, 8,
     [(MEM_RATIO, "Memory Usage"), ("avg(system_memory_used_bytes)", "Memory Used")]),
]


def _layout(panels: list[dict]) -> list[dict]:
    x = y = row_h = 0
    for panel in panels:
        w, h = panel["gridPos"]["w"], panel["gridPos"]["h"]
        if panel["type"] == "row" or x + w > 24:
            x, y, row_h = 0, y + row_h, 0
        panel["gridPos"].update(x=x, y=y)
        x, row_h = (0, 0) if panel["type"] == "row" else (x + w, max(row_h, h))
        if panel["type"] == "row":
            y += h
    return panels


def _targets(queries: list[tuple[str, str]], datasource) -> list[dict]:
    return [{"expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i), "interval": "",
             "datasource": datasource} for i, (expr, legend) in enumerate(queries)]


def aws_dashboard() -> dict:
    panels = []
    for n, (title, kind, unit, w, h, queries) in enumerate(AWS_PANELS, start=1):
        panel = {"id": n, "title": title, "type": kind, "datasource": "Prometheus",
                 "gridPos": {"w": w, "h": h}, "targets": _targets(queries, "Prometheus"),
                 "fieldConfig": {"defaults": {"unit": unit} if unit else {}, "overrides": []}}
        if kind == "graph":
            panel.update(lines=True, linewidth=1, fill=1, legend={"show": True},
                         yaxes=[{"format": unit, "show": True}, {"format": "bytes" if
                                 title == "Host Memory Usage" else "short", "show": True}],
                         xaxis={"mode": "time", "show": True})
            if title == "Host Memory Usage":
                panel["seriesOverrides"] = [{"alias": "Memory Used", "yaxis": 2}]
        if kind == "table":
            panel["transformations"] = [{"id": "labelsToFields", "options": {}}]
            panel["targets"][0].update(format="table", instant=True)
        panels.append(panel)
    return {"title": "neuron-monitor", "uid": "EqWNYf5Mz", "schemaVersion": 26, "version": 1,
            "editable": True, "refresh": "5s", "time": {"from": "now-15m", "to": "now"},
            "tags": ["neuron", "neuron-monitor"], "timezone": "",
            "annotations": {"list": []}, "panels": _layout(panels),
            "templating": {"list": [{"name": "Filters", "type": "adhoc", "datasource": "Prometheus",
                                     "filters": [], "hide": 0, "label": ""}]}}


# ------------------------------------------------------------------------------ neuronscope
SEL = 'instance=~"$instance"'
DEV = 'instance=~"$instance", neuron_device_index=~"$device"'
R = "$__rate_interval"

# ("row", title) or (title, type, unit, width, [(expr, legend)])
NS_PANELS = [
    ("row", "Overview"),
    ("NeuronCore utilization", "stat", "percentunit", 6,
     [(f"avg(neuroncore_utilization_ratio{{{SEL}}})", "")]),
    ("Model FLOPs utilization (MFU)", "stat", "percentunit", 6,
     [(f"avg(neuron_core_model_flops_utilization_ratio{{{DEV}}})", "")]),
    ("Model FLOP/s", "stat", "flops", 6,
     [(f"sum(rate(neuron_core_model_flops_total{{{DEV}}}[{R}]))", "")]),
    ("Device power", "stat", "watt", 6, [(f"sum(neuron_device_power_watts{{{DEV}}})", "")]),
    ("row", "Engines"),
    ("Engine utilization", "timeseries", "percentunit", 12,
     [(f"avg by (engine) (neuron_core_engine_utilization_ratio{{{DEV}}})", "{{engine}}")]),
    ("Tensor engine utilization per core", "timeseries", "percentunit", 12,
     [(f'avg by (neuron_device_index, neuroncore) (neuron_core_engine_utilization_ratio'
       f'{{{DEV}, engine="tensor"}})', "nd{{neuron_device_index}} nc{{neuroncore}}")]),
    ("row", "HBM"),
    ("HBM bandwidth utilization", "timeseries", "percentunit", 8,
     [(f"neuron_device_hbm_bandwidth_utilization_ratio{{{DEV}}}", "nd{{neuron_device_index}}")]),
    ("HBM traffic", "timeseries", "Bps", 8,
     [(f"sum(rate(neuron_device_hbm_read_bytes_total{{{DEV}}}[{R}]))", "read"),
      (f"sum(rate(neuron_device_hbm_write_bytes_total{{{DEV}}}[{R}]))", "write")]),
    ("Device memory used by runtime", "timeseries", "bytes", 8,
     [(f'sum by (runtime_tag) (neuron_runtime_memory_used_bytes{{{SEL}, '
       f'memory_location="neuron_device"}})', "{{runtime_tag}}")]),
    ("row", "FLOPs"),
    ("Model and hardware FLOP/s", "timeseries", "flops", 12,
     [(f"sum(rate(neuron_core_model_flops_total{{{DEV}}}[{R}]))", "model"),
      (f"sum(rate(neuron_core_hardware_flops_total{{{DEV}}}[{R}]))", "hardware")]),
    ("MFU per device", "timeseries", "percentunit", 12,
     [(f"avg by (neuron_device_index) (neuron_core_model_flops_utilization_ratio{{{DEV}}})",
       "nd{{neuron_device_index}}")]),
    ("row", "Collectives and DMA"),
    ("DMA traffic by purpose", "timeseries", "Bps", 8,
     [(f"sum by (purpose) (rate(neuron_core_dma_bytes_total{{{DEV}}}[{R}]))", "{{purpose}}")]),
    ("Collective traffic", "timeseries", "Bps", 8,
     [(f"sum by (neuron_device_index) (rate(neuron_core_collective_bytes_total{{{DEV}}}[{R}]))",
       "nd{{neuron_device_index}}")]),
    ("Time in collectives", "timeseries", "percentunit", 8,
     [(f"avg by (neuron_device_index) (rate(neuron_core_collective_seconds_total{{{DEV}}}[{R}]))",
       "nd{{neuron_device_index}}")]),
    ("row", "Power and thermal"),
    ("Power", "timeseries", "watt", 6,
     [(f"neuron_device_power_watts{{{DEV}}}", "nd{{neuron_device_index}}")]),
    ("Energy over the range", "stat", "joule", 6,
     [(f"sum(increase(neuron_device_energy_joules_total{{{DEV}}}[$__range]))", "")]),
    ("Temperature", "timeseries", "celsius", 6,
     [(f"neuron_device_temperature_celsius{{{DEV}}}", "nd{{neuron_device_index}}")]),
    ("Throttled", "timeseries", "percentunit", 6,
     [(f"neuron_device_throttle_ratio{{{DEV}}}", "nd{{neuron_device_index}}")]),
    ("row", "Errors"),
    ("Execution errors", "timeseries", "cps", 8,
     [(f"sum by (error_type) (rate(execution_errors_total{{{SEL}}}[{R}]))", "{{error_type}}")]),
    ("Execution outcomes", "timeseries", "cps", 8,
     [(f"sum by (status_type) (rate(execution_status_total{{{SEL}}}[{R}]))", "{{status_type}}")]),
    ("ECC events", "timeseries", "short", 8,
     [(f"sum by (event_type) (increase(hardware_ecc_events_total{{{DEV}}}[{R}]))",
       "{{event_type}}")]),
    ("row", "Exporter health"),
    ("Report age", "timeseries", "s", 6,
     [(f"time() - neuron_exporter_last_report_timestamp_seconds{{{SEL}}}", "{{instance}}")]),
    ("Exporter work per report", "timeseries", "s", 6,
     [(f"neuron_exporter_scrape_duration_seconds{{{SEL}}}", "{{instance}} render"),
      (f"scrape_duration_seconds{{{SEL}}}", "{{instance}} scrape")]),
    ("Input errors", "timeseries", "cps", 6,
     [(f"sum by (kind) (rate(neuron_exporter_input_errors_total{{{SEL}}}[{R}]))", "{{kind}}")]),
    ("Series exposed", "timeseries", "short", 6,
     [(f"neuron_exporter_series{{{SEL}}}", "{{instance}}")]),
]

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def neuronscope_dashboard() -> dict:
    panels = []
    for n, entry in enumerate(NS_PANELS, start=1):
        if entry[0] == "row":
            panels.append({"id": n, "type": "row", "title": entry[1], "collapsed": False,
                           "gridPos": {"w": 24, "h": 1}, "panels": []})
            continue
        title, kind, unit, width, queries = entry
        panels.append({"id": n, "title": title, "type": kind, "datasource": DATASOURCE,
                       "gridPos": {"w": width, "h": 4 if kind == "stat" else 8},
                       "targets": _targets(queries, DATASOURCE),
                       "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                       "options": {"legend": {"displayMode": "list", "placement": "bottom"}}})
    variables = [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source",
         "hide": 0, "current": {}},
        {"name": "instance", "type": "query", "datasource": DATASOURCE, "label": "Instance",
         "query": {"query": "label_values(neuron_exporter_build_info, instance)", "refId": "instance"},
         "definition": "label_values(neuron_exporter_build_info, instance)",
         # one host: its per-device panels group by device index, which several hosts share
         # (the fleet dashboard is the all-hosts view); Grafana opens on the first
         "multi": False, "includeAll": False, "refresh": 2, "sort": 1, "hide": 0,
         "current": {}},
        {"name": "device", "type": "query", "datasource": DATASOURCE, "label": "Device",
         "query": {"query": 'label_values(hardware_ecc_events_total{instance=~"$instance"}, '
                            'neuron_device_index)', "refId": "device"},
         "definition": 'label_values(hardware_ecc_events_total{instance=~"$instance"}, '
                       'neuron_device_index)',
         "multi": True, "includeAll": True, "allValue": ".*", "refresh": 2, "sort": 3, "hide": 0,
         "current": {}},
    ]
    return {"title": "neuronscope", "uid": "neuronscope-main", "schemaVersion": 39, "version": 1,
            "editable": True, "refresh": "5s", "time": {"from": "now-30m", "to": "now"},
            "tags": ["neuron", "neuronscope"], "timezone": "", "annotations": {"list": []},
            "panels": _layout(panels), "templating": {"list": variables}}


def neuronscope_fleet_dashboard() -> dict:
    import fleet_gen  # the fleet's panels and rules (fleet_gen.py, beside this file)
    return fleet_gen.fleet_dashboard(_layout, _targets)


def fleet_rules() -> str:
    import fleet_gen
    return fleet_gen.rules_yaml()


DASHBOARDS = {"neuron-monitor.json": aws_dashboard, "neuronscope.json": neuronscope_dashboard,
              "neuronscope-fleet.json": neuronscope_fleet_dashboard}
TEXT_FILES = {"fleet-rules.yml": fleet_rules}


def render(build) -> str:
    return json.dumps(build(), indent=2) + "\n"


def outputs() -> dict:
    """file name -> function returning its text."""
    out = {name: (lambda build=build: render(build)) for name, build in DASHBOARDS.items()}
    return out | TEXT_FILES


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="generate.py", description="Write the dashboards and fleet rules of this folder "
        "from their tables (neuron-monitor.json, neuronscope.json, neuronscope-fleet.json, "
        "fleet-rules.yml).")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if any file is out of date")
    args = parser.parse_args(argv)       # --help, or an unknown flag, writes nothing
    files = {name: text() for name, text in outputs().items()}
    stale = [name for name, text in files.items()
             if not (HERE / name).exists() or (HERE / name).read_text() != text]
    if args.check:
        for name in stale:
            print(f"dashboards/{name} is out of date: run python dashboards/generate.py",
                  file=sys.stderr)
        return 1 if stale else 0
    for name, text in files.items():
        tmp = HERE / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(HERE / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
