"""The fleet screen's PromQL: one expression per panel, aggregated ``by (instance_id)``, the
recorded series of dashboards/fleet-rules.yml that hold the same aggregates, and ``expand`` to
fill in the selector and windows. The screen (monitor.fleet), the recording rules and the fleet
dashboard (dashboards/fleet_gen.py) all read this one table.
"""
from __future__ import annotations

import re

from monitor.promql import Matcher, duration, render_selector

__all__ = ["QUERIES", "HISTORY_QUERY", "RECORDED", "RECORDED_WINDOW", "RECORDED_PROBE",
           "EXTENSION_PANELS", "expand", "rate_window", "DEFAULT_LOOKBACK_S",
           "DEFAULT_SCRAPE_INTERVAL_S"]

# The fleet screen's PromQL, one expression per panel. The recording rules
# (dashboards/fleet-rules.yml) and the fleet dashboard reuse these expressions: keep them here,
# once. Placeholders, filled by expand():
#   $SEL       the user's label matchers (--selector), e.g. instance_type="trn2.48xlarge";
#              an empty selector leaves `{}` / `,}` behind, which expand() tidies up
#   $LOOKBACK  how far back a down instance is still remembered (default 15m)
#   $WINDOW    the window of the error and ECC counts (default 5m)
#   $RATE      rate() window: four scrape intervals, at least 4s
# AWS's metrics carry the instance labels (instance_id, instance_type, availability_zone, ...);
# neuronscope's own metrics do not, so they are joined to instance_info on the target
# (`* on (instance, job) group_left (instance_id) instance_info{$SEL}`), which also applies the
# selector to them. Every expression answers at most one series per instance (engines: per
# instance and engine; runtimes: per instance and tag).
_JOIN = "* on (instance, job) group_left (instance_id) instance_info{$SEL}"
_KNOWN = "max by (instance, job) (last_over_time(instance_info{$SEL}[$LOOKBACK]))"
QUERIES: dict[str, str] = {
    # every instance seen within the lookback, with its labels (type, AZ, target)
    "targets": "last_over_time(instance_info{$SEL}[$LOOKBACK])",
    # a live target's current layout (a driver gone: 0 devices), a down one's last
    "hardware": "neuron_hardware_info{$SEL} or on (instance, job) "
                "last_over_time(neuron_hardware_info{$SEL}[$LOOKBACK])",
    # per target (instance, job): 1 up, 0 failed scrape; absent = no sample (stale)
    "up": f"up and on (instance, job) {_KNOWN}",
    "sample_age": f"time() - timestamp(up) and on (instance, job) {_KNOWN}",
    "util_sum": "sum by (instance_id) (neuroncore_utilization_ratio{$SEL})",
    "util_max": "max by (instance_id) (neuroncore_utilization_ratio{$SEL})",
    # cores per runtime tag: the tags column and the cores in use
    "runtimes": "count by (instance_id, runtime_tag) (neuroncore_utilization_ratio{$SEL})",
    "engines": f"avg by (instance_id, engine) (neuron_core_engine_utilization_ratio {_JOIN})",
    "hbm": "sum by (instance_id) ((rate(neuron_device_hbm_read_bytes_total[$RATE]) + "
           f"rate(neuron_device_hbm_write_bytes_total[$RATE])) {_JOIN})",
    "memory_used": 'sum by (instance_id) '
                   '(neuron_runtime_memory_used_bytes{memory_location="neuron_device",$SEL})',
    "power": f"sum by (instance_id) (neuron_device_power_watts {_JOIN})",
    "modelled": f"max by (instance_id) (neuron_device_modelled {_JOIN})",
    "flops": f"sum by (instance_id) (rate(neuron_core_model_flops_total[$RATE]) {_JOIN})",
    "mfu": f"avg by (instance_id) (neuron_core_model_flops_utilization_ratio {_JOIN})",
    "errors": "sum by (instance_id) (increase(execution_errors_total{$SEL}[$WINDOW]))",
    "ecc": "sum by (instance_id) (increase(hardware_ecc_events_total{$SEL}[$WINDOW]))",
}
# range query behind each row's braille history (divided by the instance's cores)
HISTORY_QUERY = "sum by (instance_id) (neuroncore_utilization_ratio{$SEL})"
# The recorded series of dashboards/fleet-rules.yml that hold the same aggregate as a panel
# (rate windows 1m, error/ECC windows 5m). When the server has them, FleetQuery reads these
# instead: one series per instance, whatever the cores (tests check the names against the rules).
RECORDED: dict[str, str] = {
    "util_sum": "instance_id:neuroncore_utilization_ratio:sum",
    "util_max": "instance_id:neuroncore_utilization_ratio:max",
    "runtimes": "instance_id_runtime_tag:neuroncore_utilization_ratio:count",
    "engines": "instance_id_engine:neuron_core_engine_utilization_ratio:avg",
    "flops": "instance_id:neuron_core_model_flops:rate1m",
    "mfu": "instance_id:neuron_core_model_flops_utilization_ratio:avg",
    "hbm": "instance_id:neuron_device_hbm_bytes:rate1m",
    "memory_used": "instance_id:neuron_runtime_memory_used_bytes:sum",
    "power": "instance_id:neuron_device_power_watts:sum",
    "errors": "instance_id:execution_errors:increase5m",
    "ecc": "instance_id:hardware_ecc_events:increase5m",
    "history": "instance_id:neuroncore_utilization_ratio:sum",
}
RECORDED_WINDOW = 300.0   # the errors/ECC records count over 5m: used only for that window
RECORDED_PROBE = "count(instance_id:neuroncore_utilization_ratio:sum)"
# panels that only neuronscope's exporter serves (AWS's exporter has none of these metrics)
EXTENSION_PANELS = ("engines", "hbm", "power", "modelled", "flops", "mfu")


DEFAULT_SCRAPE_INTERVAL_S = 15.0    # Prometheus's default, when the server does not say
DEFAULT_LOOKBACK_S = 900.0          # how long a vanished instance is still listed


def rate_window(scrape_interval: float) -> float:
    """A rate()'s window: four scrapes, at least 4 s (fewer samples make rate() jumpy, and a
    window under two scrapes can hold one sample and give nothing)."""
    return max(4.0, 4 * scrape_interval)


def expand(template: str, matchers: tuple[Matcher, ...] = (), *,
           lookback: float = DEFAULT_LOOKBACK_S, window: float = 300.0, rate: float = 60.0) -> str:
    """A QUERIES template with its placeholders filled in."""
    expr = (template.replace("$SEL", render_selector(matchers))
            .replace("$LOOKBACK", duration(lookback)).replace("$WINDOW", duration(window))
            .replace("$RATE", duration(rate)))
    expr = re.sub(r",\s*}", "}", expr)
    return expr.replace("{}", "")
