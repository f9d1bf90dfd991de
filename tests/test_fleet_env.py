"""The fleet test environment is real: both servers scrape every exporter of distinct instances."""
from __future__ import annotations

import pytest

from fleet_env import (FLEET_INSTANCES, JOB, fleet, fleet_prometheus, fleet_server,  # noqa: F401
                       fleet_victoria, wait_fleet_up)

pytestmark = pytest.mark.timeout(240)


def test_instances_are_distinct(fleet):
    assert len(fleet.instances) == len(FLEET_INSTANCES) >= 2
    assert len(set(fleet.instance_ids)) == len(fleet.instance_ids)
    assert len({i.instance_type for i in fleet.instances}) == len(fleet.instances)
    assert len(set(fleet.targets)) == len(fleet.targets)
    assert all(t.startswith("127.0.0.1:") for t in fleet.targets)


def test_server_sees_every_exporter_up_with_distinct_instance_ids(fleet, fleet_server):
    wait_fleet_up(fleet, fleet_server)
    up = fleet_server.query(f'up{{job="{JOB}"}}')
    assert sorted(s["metric"]["instance"] for s in up) == sorted(fleet.targets)
    assert all(float(s["value"][1]) == 1 for s in up)
    info = fleet_server.query("instance_info")
    by_target = {s["metric"]["instance"]: s["metric"] for s in info}
    assert sorted(by_target) == sorted(fleet.targets)
    for inst, target in zip(fleet.instances, fleet.targets):
        assert by_target[target]["instance_id"] == inst.instance_id
        assert by_target[target]["instance_type"] == inst.instance_type
        assert by_target[target]["availability_zone"] == inst.availability_zone


def test_server_has_neuron_metrics_per_instance(fleet, fleet_server):
    wait_fleet_up(fleet, fleet_server)
    cores = fleet_server.query(
        "count by (instance_id, instance_type) (neuroncore_utilization_ratio)")
    got = {s["metric"]["instance_id"]: (s["metric"]["instance_type"], int(s["value"][1]))
           for s in cores}
    # trn2.48xlarge at LNC=2: 16 devices x 4 logical cores; trn1.32xlarge: 16 x 2.
    assert got == {fleet.instances[0].instance_id: ("trn2.48xlarge", 64),
                   fleet.instances[1].instance_id: ("trn1.32xlarge", 32)}
    devices = fleet_server.query("count by (instance) (neuron_device_power_watts)")
    assert sorted(int(s["value"][1]) for s in devices) == [16, 16]


def test_killed_exporter_is_down_within_three_scrapes_and_comes_back(fleet, fleet_prometheus):
    wait_fleet_up(fleet, fleet_prometheus)
    target = fleet.targets[1]
    with fleet.exporter_down(1):
        fleet_prometheus.wait_for(f'up{{instance="{target}"}} == 0', timeout=3 * 1.0 + 3)
        assert len(fleet_prometheus.query(f'up{{job="{JOB}"}} == 1')) == len(fleet.targets) - 1
    fleet_prometheus.wait_for(f'up{{instance="{target}"}} == 1', timeout=30)


def test_every_duration_the_client_sends_is_one_both_servers_take(fleet_server):
    """`--query-timeout 0.5` sent `timeout=0.5s`, which Prometheus refuses ("cannot parse"); a
    window or step of a million seconds went as `1e+06s`."""
    from monitor.promql import PrometheusClient
    for seconds in (0.25, 0.5, 1.5, 5.0):
        client = PrometheusClient(fleet_server.base_url, timeout=seconds)
        assert client.query("vector(1)")
        client.query_range("vector(1)", 1_000_000.0, 2_000_000.0, 1e6)
