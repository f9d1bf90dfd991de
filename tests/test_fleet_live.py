"""The fleet view against real servers: Prometheus and VictoriaMetrics scraping one exporter per
simulated instance (tests/fleet_env.py). Rows, the selector, the drill-down Report, and a killed
exporter marked down within three scrape intervals."""
from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np
import pytest

from fleet_env import (FLEET_INSTANCES, SCRAPE_INTERVAL_S, console_script, fleet,  # noqa: F401
                       fleet_prometheus, fleet_server, fleet_victoria, wait_fleet_up)
from monitor.fleet import FleetConfig, FleetQuery
from monitor.fleet_host import PrometheusHostSource
from monitor.vocab import HOST_MEMORY
from monitor.promql import PrometheusClient, parse_selector

pytestmark = pytest.mark.timeout(300)


def fetch_until(query: FleetQuery, predicate, timeout: float = 30.0, pause: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        snapshot = query.fetch(28)
        if predicate(snapshot):
            return snapshot
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; last rows: {snapshot.rows}, problems: "
                                 f"{snapshot.problems}")
        time.sleep(pause)


def complete(ids):
    """Every instance up with every panel read, and busy: right after start-up the first scrapes
    can find a core's utilization still 0 while the rates already move."""
    def check(snapshot):
        rows = {r.instance_id: r for r in snapshot.rows}
        return all(i in rows and rows[i].up and rows[i].flops_per_s and rows[i].engines
                   and rows[i].hbm_bytes_per_s and rows[i].util_mean
                   and np.isfinite(rows[i].history).any() for i in ids)
    return check


def test_rows_and_drill_down_from_a_real_server(fleet, fleet_server):
    wait_fleet_up(fleet, fleet_server)
    client = PrometheusClient(fleet_server.base_url)
    query = FleetQuery(client, FleetConfig())
    snapshot = fetch_until(query, complete(fleet.instance_ids))
    assert snapshot.problems == () and snapshot.extensions
    assert snapshot.scrape_interval == SCRAPE_INTERVAL_S      # from /api/v1/targets
    rows = {r.instance_id: r for r in snapshot.rows}
    for inst, (itype, _) in zip(fleet.instances, FLEET_INSTANCES):
        row = rows[inst.instance_id]
        assert row.instance_type == itype and row.zone == inst.availability_zone
        assert row.devices > 0 and row.cores % row.devices == 0
        assert 0 < row.util_mean <= 1 and row.util_mean <= row.util_max + 1e-9
        assert 0 < row.memory_used < row.memory_total and row.power_watts > 0 and row.modelled
        assert set(row.engines) == {"tensor", "vector", "scalar", "gpsimd", "dma"}
        assert row.tags and row.cores_in_use <= row.cores
        seen = row.history[np.isfinite(row.history)]
        assert row.history.size == 28 and ((seen >= 0) & (seen <= 1)).all()
        report = PrometheusHostSource(client, row.instance_id, row.target, row.job,
                                      rate_window=4 * snapshot.scrape_interval).fetch()
        assert report.instance.id == row.instance_id and report.instance.type == itype
        assert report.hardware.device_count == row.devices
        cores = {c for r in report.runtimes for c in r.neuroncore_counters.cores}
        assert len(cores) == row.cores_in_use
        assert {r.tag for r in report.runtimes} == set(row.tags)
        assert report.system.device_counters is not None and report.runtimes[0].engine_counters
        # the scraped rates come back as per-period totals: FLOPs, HBM traffic and energy
        engines = [c for r in report.runtimes for c in r.engine_counters.cores.values()]
        assert any(c.model_flops > 0 for c in engines)
        devices = report.system.device_counters.devices
        memory = [r.memory_used for r in report.runtimes if r.memory_used is not None]
        assert memory and all(m.device_bytes > 0 and m.core_breakdown for m in memory)
        # the host categories (neuronscope's series) add up to the runtime's host total
        assert all(set(m.host_breakdown) == set(HOST_MEMORY) and
                   sum(m.host_breakdown.values()) == m.host_bytes for m in memory)
        assert report.hardware.device_type == ("trainium2" if itype.startswith("trn2")
                                               else "trainium1")
        assert any(d.hbm_read_bytes > 0 for d in devices) and all(d.energy_joules > 0 for d in devices)
    totals = snapshot.totals
    assert totals.up == len(fleet.instance_ids) and totals.down == 0
    assert totals.cores == sum(rows[i].cores for i in fleet.instance_ids)
    query.close()


def sim_runtimes(instance) -> dict[str, int]:
    """tag -> pid of the simulated instance's runtimes, as `neuron-sim status --json` says."""
    out = subprocess.run([console_script("neuron-sim"), "status", "--root", str(instance.root),
                          "--json"], check=True, capture_output=True, timeout=60).stdout
    return {r["tag"]: r["pid"] for r in json.loads(out)["runtimes"] if r.get("alive") and "tag" in r}


def test_drill_down_shows_real_pids_loaded_models_and_the_vcpu_count(fleet, fleet_server):
    """neuronscope's exporter carries what AWS's does not: the pid behind each runtime tag,
    each loaded model's memory per core; system_vcpu_count labels the runtime vCPU figures."""
    from tui.history import History
    from tui.memtree import build_tree
    from tui.procdetail import process_detail
    from tui.view import vcpu_usage

    wait_fleet_up(fleet, fleet_server)
    client = PrometheusClient(fleet_server.base_url)
    query = FleetQuery(client, FleetConfig())
    snapshot = fetch_until(query, complete(fleet.instance_ids))
    rows = {r.instance_id: r for r in snapshot.rows}
    for inst in fleet.instances:
        row = rows[inst.instance_id]
        source = PrometheusHostSource(client, row.instance_id, row.target, row.job,
                                      rate_window=4 * snapshot.scrape_interval)
        expected = sim_runtimes(inst)
        deadline = time.monotonic() + 30
        while True:   # a runtime's series may need a scrape after it started
            report = source.fetch()
            pids = {r.tag: r.pid for r in report.runtimes}
            if pids == expected or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        source.close()
        assert pids == expected and all(pid > 0 for pid in pids.values())
        for pid in pids.values():
            os.kill(pid, 0)    # a live process of this host, not a placeholder
        per_device = report.hardware.cores_per_device
        for runtime in report.runtimes:
            models = runtime.memory_used.loaded_models
            assert models, runtime.tag
            cores = set(runtime.neuroncore_counters.cores)
            for model in models:
                assert model.name and model.model_id > 0
                placed = {s.global_core(per_device) for s in model.subgraphs.values()}
                assert placed and placed <= cores, (runtime.tag, placed, cores)
                assert all(s.device_bytes == sum(s.device_breakdown.values()) > 0
                           for s in model.subgraphs.values())
            # a model's memory on a core is part of what the core's breakdown counts
            for core, kinds in runtime.memory_used.core_breakdown.items():
                in_models = sum(s.device_bytes for m in models for s in m.subgraphs.values()
                                if s.global_core(per_device) == core)
                assert in_models <= sum(kinds.values())
            detail = process_detail(report, runtime.pid, History(8), runtime.tag)
            assert detail.row.pid == runtime.pid and detail.models
        tree = build_tree(report.runtimes, per_device)
        labels = {m.label for nd in tree for nc in nd.children for m in nc.children}
        assert {m.name for r in report.runtimes for m in r.memory_used.loaded_models} <= labels
        assert report.system.vcpu.per_cpu == {}          # per-CPU usage is not invented
        assert report.system.vcpu.vcpu_count == os.cpu_count()   # the exporters run here
        assert vcpu_usage(report, report.runtimes).host_vcpus == os.cpu_count()
    query.close()


def test_the_selector_is_applied_by_the_server(fleet, fleet_server):
    wait_fleet_up(fleet, fleet_server)
    wanted = FLEET_INSTANCES[1][0]
    query = FleetQuery(PrometheusClient(fleet_server.base_url),
                       FleetConfig(matchers=parse_selector(f'instance_type="{wanted}"')))
    snapshot = fetch_until(query, complete([fleet.instance_ids[1]]))
    assert [r.instance_type for r in snapshot.rows] == [wanted]
    assert snapshot.totals.cores == snapshot.rows[0].cores   # joined panels filtered too
    query.close()


def test_a_killed_exporter_is_down_within_three_scrape_intervals(fleet, fleet_server):
    wait_fleet_up(fleet, fleet_server)
    query = FleetQuery(PrometheusClient(fleet_server.base_url), FleetConfig())
    victim = fleet.instance_ids[1]
    fetch_until(query, complete([victim]))
    with fleet.exporter_down(1):
        killed = time.monotonic()
        # three scrape intervals, plus one refresh of the screen for the answer to arrive
        snapshot = fetch_until(query, lambda s: any(r.instance_id == victim and not r.up
                                                    for r in s.rows),
                               timeout=3 * SCRAPE_INTERVAL_S + 1.0, pause=0.1)
        elapsed = time.monotonic() - killed
        row = next(r for r in snapshot.rows if r.instance_id == victim)
        assert row.down_reason in ("up == 0", "no sample") and row.since is not None
        assert row.since <= time.time() and elapsed <= 3 * SCRAPE_INTERVAL_S + 1.0
        assert row.util_mean is None and row.instance_type == FLEET_INSTANCES[1][0]
        others = [r for r in snapshot.rows if r.instance_id != victim]
        assert others and all(r.up for r in others)
        assert snapshot.totals.down == 1
    fetch_until(query, lambda s: all(r.up for r in s.rows if r.instance_id == victim), 45)
    query.close()


def test_recorded_series_are_used_when_the_rules_are_loaded(fleet, fleet_prometheus):
    """fleet_prometheus loads dashboards/fleet-rules.yml: the panels read its recorded series
    (one per instance) and show what the raw queries show."""
    wait_fleet_up(fleet, fleet_prometheus)
    client = PrometheusClient(fleet_prometheus.base_url)
    auto = FleetQuery(client, FleetConfig())
    raw = FleetQuery(client, FleetConfig(recorded=False))
    recorded = fetch_until(auto, complete(fleet.instance_ids), timeout=45)
    plain = fetch_until(raw, complete(fleet.instance_ids))
    assert recorded.recorded and not plain.recorded and recorded.problems == ()
    mine, theirs = ({r.instance_id: r for r in s.rows} for s in (recorded, plain))
    for iid in fleet.instance_ids:
        a, b = mine[iid], theirs[iid]
        assert (a.tags, a.cores_in_use, a.cores, set(a.engines)) == (b.tags, b.cores_in_use,
                                                                      b.cores, set(b.engines))
        for field in ("util_mean", "memory_used", "power_watts"):   # gauges: the same reading
            x, y = getattr(a, field), getattr(b, field)
            assert x is not None and y is not None and 0.5 * y <= x <= 2 * y, (field, x, y)
        # rates: the rules' 1m window against the screen's 4 scrape intervals; bursty steps
        assert a.flops_per_s > 0 and a.hbm_bytes_per_s > 0
    zone = parse_selector(f'instance_type="{FLEET_INSTANCES[0][0]}"')
    narrowed = fetch_until(FleetQuery(client, FleetConfig(matchers=zone)),
                           complete([fleet.instance_ids[0]]))
    assert narrowed.recorded and [r.instance_id for r in narrowed.rows] == [fleet.instance_ids[0]]
    for q in (auto, raw):
        q.close()


def test_recorded_names_are_the_rules_names():
    from fleet_env import FLEET_RULES
    from monitor.fleet_queries import RECORDED
    rules = FLEET_RULES.read_text()
    for name in set(RECORDED.values()):
        assert f"record: {name}" in rules, name
