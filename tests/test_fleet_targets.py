"""Which scrape target stands for an instance: within the lookback an instance can have two (a
DaemonSet pod rescheduled to a new address leaves its old target behind), and its newest
hardware layout, not a stale one, gives its cores."""
from __future__ import annotations

from monitor.fleet import VALUE_PANELS, FleetQuery
from monitor.promql import PrometheusClient, Sample

IID = "i-0123456789abcdef0"
HW = {"neuron_device_count": "16", "neuroncore_per_device_count": "2",
      "neuron_device_memory_size": "34359738368"}


def target(address: str) -> dict[str, str]:
    return {"instance": address, "job": "neuron", "instance_id": IID,
            "instance_type": "trn1.32xlarge", "availability_zone": "us-west-2a"}


def rows(targets: list[str], up: dict[str, float], hardware: dict[str, dict[str, str]]):
    results = {name: {} for name in VALUE_PANELS}
    results.update(
        targets=[Sample(target(a), 1.0, 0.0) for a in targets],
        hardware=[Sample({**target(a), **hw}, 1.0, 0.0) for a, hw in hardware.items()],
        up={(a, "neuron"): v for a, v in up.items()},
        sample_age={(a, "neuron"): 1.0 for a in up}, modelled={}, engines=[], runtimes=[])
    query = FleetQuery(PrometheusClient("http://127.0.0.1:9"))
    try:
        return query._rows(results, [], 1000.0, 15.0, 0.0, 15.0, 4)
    finally:
        query.close()


def test_the_target_that_is_up_stands_for_its_instance_whatever_the_order():
    for order in (["10.0.0.1:8000", "10.0.0.2:8000"], ["10.0.0.2:8000", "10.0.0.1:8000"]):
        (row,) = rows(order, {"10.0.0.1:8000": 0.0, "10.0.0.2:8000": 1.0},
                      {a: HW for a in order})
        assert row.up and row.target == "10.0.0.2:8000"


def test_the_layout_is_the_standing_targets():
    gone = {**HW, "neuron_device_count": "0"}       # the driver gone on the live target
    (row,) = rows(["10.0.0.1:8000", "10.0.0.2:8000"],
                  {"10.0.0.1:8000": 0.0, "10.0.0.2:8000": 1.0},
                  {"10.0.0.1:8000": HW, "10.0.0.2:8000": gone})
    assert (row.devices, row.cores) == (0, 0)
