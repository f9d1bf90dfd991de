"""A sped-up simulation (``neuron-sim start --speed 10``): every figure stays in its physical
range, because the counters grow in simulated seconds and each counter group's ``period`` is the
simulated time they cover (docs/neuron-monitor.md, "Sped-up simulations"). Real runtime
processes, the real ``neuron-monitor`` and the Prometheus exporter reading its stream."""
from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector_sim import console_script, start_instance, stop_instance, wait_for
from device_model.catalog.specs import get_instance
from device_model.runtime import shm
from exporters.exporter import PrometheusExporter
from monitor.config import RUNTIME_GROUPS, SYSTEM_GROUPS
from monitor.report import Report
from monitor.sources import report_interval

SPEED = 10
INSTANCE = "trn2.48xlarge"
# 2 s periods: a runtime publishes every 0.1 s of wall time, so one whose publication lands just
# after a collection covers a step less than its neighbours; over 2 s that is 5 %.
CONFIG = {"period": "2s",
          "neuron_runtimes": [{"metrics": [{"type": t} for t in RUNTIME_GROUPS]}],
          "system_metrics": [{"type": t} for t in SYSTEM_GROUPS]}
APPS = ("mm=matmul:m=2048,k=2048,n=2048@0-7",                 # devices 0-1: TensorE-bound
        "ar=allreduce:bytes=64M,ranks=4@8-11",                # device 2: collectives
        "serve=demo-serve:layers=1,hidden=512,seq=128@12-13")  # half of device 3: bursty
FIXTURES = pathlib.Path(__file__).parent / "fixtures"
WALL_GROUPS = {"neuron_runtime_vcpu_usage", "memory_used", "vcpu_usage", "memory_info"}
ENERGY_TOLERANCE = 0.3  # power is the latest reading, energy the period's; steady apps vary little


@pytest.fixture(scope="module")
def stream(tmp_path_factory) -> list[bytes]:
    """Three reports of every group from ``neuron-monitor`` on an instance at --speed 10."""
    root = tmp_path_factory.mktemp("speed") / "rt"
    root.mkdir(mode=0o700)
    config = root.parent / "monitor.json"
    config.write_bytes(orjson.dumps(CONFIG))
    try:
        start_instance(root, *APPS, instance=INSTANCE, speed=SPEED)
        # past the model loads, into steady work
        wait_for(lambda: all(h.read().sim_time > 20 for h in shm.list_runtimes(root)), timeout=60)
        out = subprocess.run([*console_script("neuron-monitor"), "-c", str(config), "--root",
                              str(root), "--count", "3"], capture_output=True, timeout=120)
    finally:
        stop_instance(root)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def percents_and_ratios(node: Any, path: str = "") -> Iterator[tuple[str, float, float]]:
    """(path, value, most) of every utilization (a percentage in the JSON) and every ratio."""
    if isinstance(node, dict):
        for key, value in node.items():
            sub = f"{path}.{key}"
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if key.endswith("utilization") or path.endswith(".engine_utilization"):
                    yield sub, value, 100.0
                elif key.endswith("_ratio"):
                    yield sub, value, 1.0
            else:
                yield from percents_and_ratios(value, sub)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from percents_and_ratios(value, f"{path}[{i}]")


def test_every_figure_stays_in_its_physical_range_at_speed_10(stream):
    assert len(stream) == 3
    device = get_instance(INSTANCE).device
    collective = model_flops = 0.0
    for line in stream:
        figures = list(percents_and_ratios(orjson.loads(line)))
        assert len(figures) > 100
        assert [f for f in figures if not 0.0 <= f[1] <= f[2]] == []
        report = Report.from_json(line)
        for runtime in report.runtimes:
            assert runtime.error == "", runtime.error
            engines, counters = runtime.engine_counters, runtime.neuroncore_counters
            period = engines.period
            assert period > 0 and counters.period == period
            for core, c in engines.cores.items():
                # totals in the period over the period are the rates neuroncore_counters gives
                assert c.hardware_flops / period == pytest.approx(counters.cores[core].flops,
                                                                  rel=1e-6, abs=1)
                assert c.collective_time <= period * (1 + 1e-9)
                assert c.hbm_read_bytes + c.hbm_write_bytes <= device.hbm_bw * period
                collective += c.collective_time
                model_flops += c.model_flops
        group = report.system.device_counters
        assert group.period > 0
        for d in group.devices:
            assert d.energy_joules == pytest.approx(d.power_watts * group.period,
                                                    rel=ENERGY_TOLERANCE), d
            assert d.hbm_read_bytes + d.hbm_write_bytes <= device.hbm_bw * group.period
    assert collective > 0 and model_flops > 0  # the checks above were not vacuous

    exporter = PrometheusExporter(clock=lambda: 1.0)
    for line in stream:
        exporter.ingest(Report.from_json(line, received_at=1.0))
    ratios: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(exporter.current.text.decode()):
        for s in family.samples:
            if s.name.endswith("_ratio"):
                ratios.setdefault(s.name, []).append(s.value)
    assert ratios["neuron_core_model_flops_utilization_ratio"]  # MFU, from period and FLOPs
    assert ratios["neuron_device_hbm_bandwidth_utilization_ratio"]
    assert {name: v for name, values in ratios.items() for v in values
            if not 0.0 <= v <= 1.0} == {}


def test_a_sped_up_stream_keeps_its_wall_clock_pace():
    """Replays and staleness go by the wall-clock groups, not by the simulated periods."""
    doc = json.loads((FIXTURES / "neuron_monitor_aws_example.json").read_text())
    for groups in [r["report"] for r in doc["neuron_runtime_data"]] + [doc["system_data"]]:
        for name, group in groups.items():
            group["period"] = 1.0 if name in WALL_GROUPS else 10.0
    assert report_interval(Report.from_dict(doc)) == 1.0
    for name in ("neuron_runtime_vcpu_usage", "memory_used"):
        del doc["neuron_runtime_data"][0]["report"][name]
    for name in ("vcpu_usage", "memory_info"):
        del doc["system_data"][name]
    assert report_interval(Report.from_dict(doc)) == 10.0   # nothing else to go by


def test_host_groups_on_a_longer_period_do_not_set_the_pace():
    """Runtime groups every second, the host's vCPU and memory every 4 s: a replay waited 4 s
    between 1 s reports, and staleness took three 4 s periods to see."""
    doc = json.loads((FIXTURES / "neuron_monitor_aws_example.json").read_text())
    for runtime in doc["neuron_runtime_data"]:
        runtime["report"].pop("neuron_runtime_vcpu_usage", None)
        for group in runtime["report"].values():
            group["period"] = 1.0
    for group in doc["system_data"].values():
        group["period"] = 4.0
    assert report_interval(Report.from_dict(doc)) == 1.0
