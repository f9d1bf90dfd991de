"""One instance of the fleet as a Report, built from instant queries: the drill-down's input.

The single-host screens read nothing but Reports, so the fleet's drill-down rebuilds the
neuron-monitor document from what the exporter exposes and parses it with ``Report.from_dict``
(the one parser). Counters become per-period counts (``increase``/``rate`` over the refresh
period). AWS's metrics name runtimes by ``runtime_tag`` only; neuronscope's exporter adds
``neuron_runtime_info`` (the pid behind each tag) and ``neuron_runtime_model_memory_used_bytes``
(each loaded model's device memory per core and category), so pids and loaded models come
back. The host's vCPU count comes from ``system_vcpu_count`` (the document's ``vcpu_count``); each
vCPU's own usage does not travel (the exporter does not export it: one series per vCPU and usage
type on every host of a fleet costs more than the screen gains), nor do a model's uuid and
is_running. With AWS's exporter only AWS's metrics exist: a pid is known only where the tag is
one (untagged runtimes), loaded models are unknown, and the neuronscope extension groups (engine
counters, device counters) are left out; the screens say so rather than show zeros.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import CancelledError, ThreadPoolExecutor

from monitor.errors import ReportError
from monitor.hardware import hardware_of_instance_type, hbm_bandwidth_of_instance_type
from monitor.promql import (Matcher, PrometheusClient, PrometheusError, Sample, duration,
                            label_count, render_selector)
from monitor.report import Report
from monitor.sources import Source
from monitor.vocab import CORE_MEMORY

__all__ = ["host_queries", "host_report", "PrometheusHostSource"]


def host_queries(instance_id: str, target: str, job: str, rate: str) -> dict[str, str]:
    """The drill-down's queries for one instance: AWS's metrics by instance_id, neuronscope's by
    the exporter's target (they carry no instance labels)."""
    aws = render_selector((Matcher("instance_id", "=", instance_id),))
    own = render_selector((Matcher("instance", "=", target), Matcher("job", "=", job)))
    memory = "|".join(CORE_MEMORY)
    return {
        "info": f"instance_info{{{aws}}}",
        "hardware": f"neuron_hardware_info{{{aws}}}",
        "util": f"neuroncore_utilization_ratio{{{aws}}}",
        "errors": f"rate(execution_errors_total{{{aws}}}[{rate}])",
        "statuses": f"rate(execution_status_total{{{aws}}}[{rate}])",
        "latency": f"execution_latency_seconds{{{aws}}}",
        "runtime_memory": f"neuron_runtime_memory_used_bytes{{{aws}}}",
        "core_memory": f'{{__name__=~"neuroncore_memory_usage_({memory})",{aws}}}',
        "runtime_vcpu": f"neuron_runtime_vcpu_usage_ratio{{{aws}}}",
        "ecc": f"rate(hardware_ecc_events_total{{{aws}}}[{rate}])",
        "system": f'{{__name__=~"system_(vcpu_count|vcpu_usage_ratio|memory_total_bytes|'
                  f'memory_used_bytes|swap_total_bytes|swap_used_bytes)",{aws}}}',
        "engine_util": f"neuron_core_engine_utilization_ratio{{{own}}}",
        "model_flops": f"rate(neuron_core_model_flops_total{{{own}}}[{rate}])",
        "hardware_flops": f"rate(neuron_core_hardware_flops_total{{{own}}}[{rate}])",
        "dma": f"rate(neuron_core_dma_bytes_total{{{own}}}[{rate}])",
        "collective_bytes": f"rate(neuron_core_collective_bytes_total{{{own}}}[{rate}])",
        "collective_seconds": f"rate(neuron_core_collective_seconds_total{{{own}}}[{rate}])",
        "device": f'{{__name__=~"neuron_device_(hbm_bandwidth_utilization_ratio|power_watts|'
                  f'temperature_celsius|throttle_ratio|modelled)",{own}}}',
        "hbm_read": f"rate(neuron_device_hbm_read_bytes_total{{{own}}}[{rate}])",
        "hbm_write": f"rate(neuron_device_hbm_write_bytes_total{{{own}}}[{rate}])",
        "energy": f"rate(neuron_device_energy_joules_total{{{own}}}[{rate}])",
        "runtime_info": f"neuron_runtime_info{{{own}}}",
        "models": f"neuron_runtime_model_memory_used_bytes{{{own}}}",
        "host_memory": f"neuron_runtime_host_memory_used_bytes{{{own}}}",
    }


def _n(value: float, scale: float = 1.0) -> float:
    return value * scale if math.isfinite(value) else 0.0


def _count(value: float) -> int:
    return max(0, int(round(value))) if math.isfinite(value) else 0


def _idx(labels: Mapping[str, str], key: str) -> int | None:
    text = labels.get(key, "")
    return int(text) if text.isdigit() else None


def host_report(results: Mapping[str, list[Sample]], period: float,
                received_at: float | None = None) -> Report:
    """The Report of one instance from the answers to ``host_queries``; ReportError when the
    answers do not make one (no instance_info: the instance is gone)."""
    if not results.get("info"):
        raise ReportError("instance_info: the instance has no current series (down or gone)")
    info = dict(results["info"][0].labels)
    hw = results["hardware"][0].labels if results.get("hardware") else {}
    runtimes: dict[str, dict] = {}

    def group(tag: str, name: str) -> dict:
        report = runtimes.setdefault(tag, {})
        return report.setdefault(name, {"period": period, "error": ""})

    for s in results.get("util", ()):
        core = _idx(s.labels, "neuroncore")
        if core is not None:
            group(s.labels.get("runtime_tag", ""), "neuroncore_counters").setdefault(
                "neuroncores_in_use", {})[str(core)] = {"neuroncore_utilization": _n(s.value, 100)}
    _execution(results, group, period)
    _memory(results, group)
    # neuronscope's exporter (its runtime info answered) and the model query answered: a runtime
    # without model series has none loaded; otherwise loaded models are unknown (left out)
    loaded = _models(results) if results.get("runtime_info") and "models" in results else None
    for tag in loaded or {}:   # model memory alone still makes a memory group
        if "memory_used" not in runtimes.get(tag, {}):
            _used_of(group(tag, "memory_used"))
    for s in results.get("runtime_vcpu", ()):
        g = group(s.labels.get("runtime_tag", ""), "neuron_runtime_vcpu_usage")
        g.setdefault("vcpu_usage", {"user": 0.0, "system": 0.0})[s.labels.get("usage_type", "user")] = _n(s.value, 100)
    engines = _engines(results, period)
    # the grid's FLOP/s, as the host's own neuroncore_counters give them: hardware FLOPs per
    # second. AWS's exporter has no FLOPs series: the cores' flops stay unknown (N/A), not 0
    hardware_flops = bool(results.get("hardware_flops"))
    for tag, cores in engines.items():
        group(tag, "neuroncore_engine_counters")["neuroncores_in_use"] = cores
        counters = runtimes[tag].get("neuroncore_counters", {}).get("neuroncores_in_use", {})
        for core, values in cores.items():
            if core in counters and hardware_flops:
                counters[core]["flops"] = _count(values["hardware_flops"] / period)
    pids = _pids(results)
    for tag in pids:
        runtimes.setdefault(tag, {})
    if loaded is not None:
        for tag, rep in runtimes.items():
            if "memory_used" in rep:
                rep["memory_used"]["loaded_models"] = loaded.get(tag, [])
    pid_of = {tag: pids.get(tag, _pid(tag)) for tag in runtimes}
    # in pid order, as the host's collector lists them (its app tabs keep their numbers);
    # runtimes of unknown pid after, by tag
    order = sorted(runtimes, key=lambda tag: (not pid_of[tag], pid_of[tag], tag))
    document = {
        "neuron_runtime_data": [{"pid": pid_of[tag], "neuron_runtime_tag": tag,
                                 "error": "", "report": runtimes[tag]} for tag in order],
        "system_data": _system(results, period,
                               hbm_bandwidth_of_instance_type(info.get("instance_type", ""))),
        "instance_info": {"instance_name": info.get("instance_name", ""),
                          "instance_id": info.get("instance_id", ""),
                          "instance_type": info.get("instance_type", ""),
                          "instance_availability_zone": info.get("availability_zone", ""),
                          "instance_region": info.get("region", ""),
                          "subnet_id": info.get("subnet_id", ""), "error": ""},
        "neuron_hardware_info": _hardware(info.get("instance_type", ""), hw),
    }
    return Report.from_dict(document, received_at=received_at)


def _hardware(instance_type: str, hw: Mapping[str, str]) -> dict:
    """neuron_hardware_info: the counts from its series; the device type, versions and LNC,
    which the series does not carry, from the instance type (a trn2 holds Trainium2 chips), so
    the drill-down names its devices as neuron-monitor on the host would."""
    counts = {key: label_count(hw.get(key, "")) for key in (
        "neuron_device_count", "neuron_device_memory_size", "neuroncore_per_device_count")}
    named = {key: hw[key] for key in ("neuron_device_type", "neuron_device_version",
                                      "neuroncore_version") if hw.get(key)}
    return (hardware_of_instance_type(instance_type, counts["neuroncore_per_device_count"])
            | named | counts | {"error": ""})


def _execution(results, group, period: float) -> None:
    for name, key, label in (("errors", "error_summary", "error_type"),
                             ("statuses", "execution_summary", "status_type")):
        for s in results.get(name, ()):
            g = group(s.labels.get("runtime_tag", ""), "execution_stats")
            g.setdefault(key, {})[s.labels.get(label, "")] = _count(s.value * period)
    for s in results.get("latency", ()):
        g = group(s.labels.get("runtime_tag", ""), "execution_stats")
        g.setdefault("latency_stats", {"total_latency": {}})["total_latency"][
            s.labels.get("percentile", "")] = max(0.0, _n(s.value))


def _pid(text: str) -> int:
    """A process id written as text; 0 (unknown, which the screens show as such) for anything
    else. Without neuron_runtime_info an untagged runtime's tag is its pid, so this reads tags too."""
    return int(text) if text.isdigit() and 0 < int(text) < 2 ** 32 else 0


def _pids(results) -> dict[str, int]:
    """The pid behind each tag from neuron_runtime_info (the larger one if an instant query
    still sees both sides of a restart under the same tag)."""
    pids: dict[str, int] = {}
    for s in results.get("runtime_info", ()):
        tag, pid = s.labels.get("runtime_tag", ""), _pid(s.labels.get("pid", ""))
        if pid:
            pids[tag] = max(pids.get(tag, 0), pid)
    return pids


def _models(results) -> dict[str, list[dict]]:
    """loaded_models per runtime tag from the per-core model memory series: one subgraph per
    core, its device memory by category (host-side model memory, uuid and is_running do not
    travel)."""
    models: dict[str, dict[tuple[str, str], dict]] = {}
    for s in results.get("models", ()):
        labels = s.labels
        core, device = _idx(labels, "neuroncore"), _idx(labels, "neuron_device_index")
        model_id = _idx(labels, "model_id")
        location = labels.get("memory_location", "")
        if core is None or device is None or model_id is None or location not in (
                "host", "neuron_device"):
            continue
        model = models.setdefault(labels.get("runtime_tag", ""), {}).setdefault(
            (str(model_id), labels.get("model_name", "")),
            {"name": labels.get("model_name", ""), "uuid": "", "model_id": model_id,
             "is_running": False, "subgraphs": {}})
        sub = model["subgraphs"].setdefault(f"nc_{core}", {
            "neuroncore_index": core, "neuron_device_index": device,
            "memory_used_bytes": {"neuron_device": 0,    # host: only where a series says
                                  "usage_breakdown": {"host": {}, "neuron_device": {}}}})
        used = sub["memory_used_bytes"]
        value = _count(s.value)
        used["usage_breakdown"][location][labels.get("category", "")] = value
        used[location] = used.get(location, 0) + value
    return {tag: [m for _, m in sorted(by_id.items(), key=lambda kv: (int(kv[0][0]), kv[0][1]))]
            for tag, by_id in models.items()}


def _used_of(memory_group: dict) -> dict:
    return memory_group.setdefault("neuron_runtime_used_bytes", {
        "host": 0, "neuron_device": 0,
        "usage_breakdown": {"host": {}, "neuroncore_memory_usage": {}}})


def _memory(results, group) -> None:
    def used_of(s: Sample) -> dict:
        return _used_of(group(s.labels.get("runtime_tag", ""), "memory_used"))

    for s in results.get("runtime_memory", ()):
        used_of(s)[s.labels.get("memory_location", "host")] = _count(s.value)
    for s in results.get("host_memory", ()):   # neuronscope's exporter: the host categories
        if s.labels.get("category"):
            used_of(s)["usage_breakdown"]["host"][s.labels["category"]] = _count(s.value)
    for s in results.get("core_memory", ()):
        core = _idx(s.labels, "neuroncore")
        kind = s.labels.get("__name__", "").removeprefix("neuroncore_memory_usage_")
        if core is None or kind not in CORE_MEMORY:
            continue
        used_of(s)["usage_breakdown"]["neuroncore_memory_usage"].setdefault(str(core), {})[kind] = \
            _count(s.value)


def _put(results, fields, entry_of, value) -> None:
    """For each (sample family, key) of `fields`, `value(sample)` of each of its samples stored
    under `key` in the entry `entry_of(sample)` (samples whose labels name none are skipped):
    the per-period totals of a scraped rate."""
    for name, key in fields:
        for s in results.get(name, ()):
            entry = entry_of(s)
            if entry is not None:
                entry[key] = value(s)


def _engines(results, period: float) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}

    def core_of(s: Sample) -> dict | None:
        core = _idx(s.labels, "neuroncore")
        if core is None:
            return None
        return out.setdefault(s.labels.get("runtime_tag", ""), {}).setdefault(str(core), {
            "engine_utilization": {}, "model_flops": 0, "hardware_flops": 0, "hbm_read_bytes": 0,
            "hbm_write_bytes": 0, "dma_bytes": {}, "collective_bytes": 0, "collective_time": 0.0})

    for s in results.get("engine_util", ()):
        c = core_of(s)
        if c is not None:
            c["engine_utilization"][s.labels.get("engine", "")] = max(0.0, _n(s.value, 100))
    _put(results, (("model_flops", "model_flops"), ("hardware_flops", "hardware_flops"),
                   ("collective_bytes", "collective_bytes")), core_of, lambda s: _count(s.value * period))
    _put(results, (("collective_seconds", "collective_time"),), core_of,
         lambda s: max(0.0, _n(s.value * period)))
    for s in results.get("dma", ()):
        c = core_of(s)
        if c is not None:
            c["dma_bytes"][s.labels.get("purpose", "")] = _count(s.value * period)
    return out


def _system(results, period: float, hbm_bw: float | None = None) -> dict:
    """system_data. `hbm_bw`: a device's peak HBM bandwidth, where the instance type names it."""
    system: dict[str, dict] = {}
    values = {s.labels.get("__name__", "") + "/" + s.labels.get("usage_type", ""): s.value
              for s in results.get("system", ())}
    cpus = _count(values.get("system_vcpu_count/", 0.0))
    if "system_vcpu_usage_ratio/user" in values:
        user, sys_ = values["system_vcpu_usage_ratio/user"], values.get("system_vcpu_usage_ratio/system", 0.0)
        system["vcpu_usage"] = {"period": period, "error": "", "context_switch_count": 0,
                                "average_usage": {"user": _n(user, 100), "nice": 0.0,
                                                  "system": _n(sys_, 100), "idle": max(0.0, 100 - _n(user, 100) - _n(sys_, 100)),
                                                  "io_wait": 0.0, "irq": 0.0, "soft_irq": 0.0},
                                # how many vCPUs, not each one's usage: that does not travel
                                "usage_data": {}, **({"vcpu_count": cpus} if cpus else {})}
    if "system_memory_total_bytes/" in values:
        system["memory_info"] = {"period": period, "error": "", **{
            f"{area}_{stat}": _count(values.get(f"system_{area}_{stat}/", 0.0))
            for area in ("memory", "swap") for stat in ("total_bytes", "used_bytes")}}
    ecc: dict[int, dict] = {}
    for s in results.get("ecc", ()):
        device = _idx(s.labels, "neuron_device_index")
        if device is not None:
            ecc.setdefault(device, {"neuron_device_index": device, "mem_ecc_corrected": 0,
                                    "mem_ecc_uncorrected": 0, "sram_ecc_corrected": 0,
                                    "sram_ecc_uncorrected": 0})[s.labels.get("event_type", "")] = _count(s.value * period)
    if ecc:
        system["neuron_hw_counters"] = {"period": period, "error": "",
                                        "neuron_devices": [ecc[d] for d in sorted(ecc)]}
    devices: dict[int, dict] = {}

    def device_of(s: Sample) -> dict | None:
        index = _idx(s.labels, "neuron_device_index")
        if index is None:
            return None
        return devices.setdefault(index, {
            "neuron_device_index": index, "hbm_read_bytes": 0, "hbm_write_bytes": 0,
            "hbm_bandwidth_utilization": 0.0, "power_watts": 0.0, "energy_joules": 0.0,
            "temperature_celsius": 0.0, "throttle_ratio": 0.0, "modelled": False})

    fields = {"neuron_device_hbm_bandwidth_utilization_ratio": ("hbm_bandwidth_utilization", 100.0),
              "neuron_device_power_watts": ("power_watts", 1.0),
              "neuron_device_temperature_celsius": ("temperature_celsius", 1.0),
              "neuron_device_throttle_ratio": ("throttle_ratio", 1.0)}
    for s in results.get("device", ()):
        d = device_of(s)
        name = s.labels.get("__name__", "")
        if d is None:
            continue
        if name == "neuron_device_modelled":
            d["modelled"] = s.value == 1
        elif name in fields:
            key, scale = fields[name]
            d[key] = max(0.0, _n(s.value, scale))
    _put(results, (("hbm_read", "hbm_read_bytes"), ("hbm_write", "hbm_write_bytes")), device_of,
         lambda s: _count(s.value * period))
    if hbm_bw:
        # The gauge is the exporter's last collection period; the bytes beside it are a rate
        # over the rate window. The share of peak those bytes are is the gauge's own
        # definition over the same window, so the drill-down's HBM line agrees with itself.
        moved: dict[int, float] = {}
        for name in ("hbm_read", "hbm_write"):
            for s in results.get(name, ()):
                d = device_of(s)
                if d is not None:
                    index = d["neuron_device_index"]
                    moved[index] = moved.get(index, 0.0) + max(0.0, _n(s.value))
        for index, rate in moved.items():
            devices[index]["hbm_bandwidth_utilization"] = 100.0 * rate / hbm_bw
    _put(results, (("energy", "energy_joules"),), device_of, lambda s: max(0.0, _n(s.value * period)))
    if devices:
        system["neuron_device_counters"] = {"period": period, "error": "",
                                            "neuron_devices": [devices[d] for d in sorted(devices)]}
    return system


class PrometheusHostSource(Source):
    """Reports of one instance of the fleet, one per ``period``, from instant queries."""

    def __init__(self, client: PrometheusClient, instance_id: str, target: str, job: str, *,
                 period: float = 2.0, rate_window: float = 60.0, workers: int = 8,
                 clock: Callable[[], float] = time.time, label: str | None = None) -> None:
        super().__init__()
        self.client = client
        self.instance_id = instance_id
        self.period = period
        self.label = label or f"prometheus {client.url} · {instance_id}"
        self.last_error = ""
        self._queries = host_queries(instance_id, target, job, duration(max(rate_window, 1.0)))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="promql-host")
        self._clock = clock

    def fetch(self) -> Report:
        now = self._clock()
        futures = {name: self._pool.submit(self.client.query, expr, now)
                   for name, expr in self._queries.items()}
        results = {}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except PrometheusError as exc:
                if exc.kind != "query" or name == "info":
                    raise
                # one panel's error leaves that panel out: empty, or unknown where that differs
                # (loaded models); an older recording or server without a series answers so too
        return host_report(results, self.period, received_at=now)

    def reports(self) -> Iterator[Report]:
        while not self._stop.is_set():
            try:
                report = self.fetch()
                self.last_error = ""
                yield report
            except (PrometheusError, ReportError) as exc:
                # the stale banner shows it; the last good report stays on screen
                self.last_error = str(exc)
                self.diagnostics.write(f"{exc}\n")
            except (CancelledError, RuntimeError):   # closed while a refresh was in flight
                if self._stop.is_set():
                    return
                raise
            if self._stop.wait(self.period):
                return

    def close(self) -> None:
        super().close()
        self._pool.shutdown(wait=False, cancel_futures=True)
