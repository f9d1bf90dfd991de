"""The fleet: every Trainium host a Prometheus scrapes, one row per instance, from a few queries.

Each panel of the fleet screen is ONE instant query aggregated ``by (instance_id)`` (never one
query per instance), plus one range query for the utilization history; they run concurrently
with the client's timeout. ``FleetQuery.fetch`` turns the answers into a ``FleetSnapshot``:
frozen rows a screen only has to sort, filter and draw.

A target is ``down`` when its ``up`` is 0, when it has no ``up`` sample any more (Prometheus
marks vanished targets stale), or when its newest sample is older than three scrape intervals
(a remote-write backend that never marks staleness). Down instances stay listed with the time
they were last seen up. The queries themselves: monitor.fleet_queries.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter

import numpy as np

from monitor.fleet_queries import (DEFAULT_LOOKBACK_S, DEFAULT_SCRAPE_INTERVAL_S,
                                   EXTENSION_PANELS, HISTORY_QUERY, QUERIES, RECORDED,
                                   RECORDED_PROBE, RECORDED_WINDOW, expand, rate_window)
from monitor.promql import (Matcher, PrometheusClient, PrometheusError, Sample, label_count,
                            render_selector)

__all__ = ["FleetConfig", "InstanceRow", "FleetTotals", "FleetSnapshot", "FleetQuery", "same_rows",
           "rate_window", "DEFAULT_SCRAPE_INTERVAL_S", "DEFAULT_LOOKBACK_S"]


# ------------------------------------------------------------------------------ the data
@dataclass(frozen=True, slots=True)
class FleetConfig:
    matchers: tuple[Matcher, ...] = ()
    window: float = 300.0          # history, errors and ECC window (seconds)
    lookback: float = DEFAULT_LOOKBACK_S  # how long a vanished instance is still listed
    scrape_interval: float | None = None  # None: ask /api/v1/targets, else 15 s
    workers: int = 8               # queries in flight at once
    recorded: bool | None = None   # read fleet-rules.yml's series; None: when the server has them


@dataclass(frozen=True, slots=True)
class InstanceRow:
    instance_id: str
    instance_type: str
    zone: str
    target: str                    # Prometheus's instance label (host:port of the exporter)
    job: str
    devices: int
    cores: int                     # logical NeuronCores of the instance
    cores_in_use: int              # cores some runtime reports
    util_mean: float | None        # ratio, over every core of the instance
    util_max: float | None
    engines: Mapping[str, float]   # engine -> mean busy ratio over the cores in use
    hbm_bytes_per_s: float | None
    memory_used: float | None      # device memory (HBM) bytes, all runtimes
    memory_total: float | None
    power_watts: float | None
    modelled: bool
    flops_per_s: float | None      # model FLOP/s
    mfu: float | None              # mean over the cores in use
    errors: float | None           # execution errors in the window
    ecc: float | None              # ECC events in the window
    tags: tuple[str, ...]
    up: bool
    down_reason: str               # "" when up
    since: float | None            # down: last seen up (unix s), None when not known
    history: np.ndarray = field(default_factory=lambda: np.zeros(0))  # mean utilization per step


@dataclass(frozen=True, slots=True)
class FleetTotals:
    up: int
    down: int
    cores: int
    cores_busy: float              # sum of utilization: busy core-equivalents
    flops_per_s: float | None
    mfu: float | None
    power_watts: float | None
    hbm_bytes_per_s: float | None
    errors: float
    ecc: float


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    at: float
    rows: tuple[InstanceRow, ...]
    totals: FleetTotals
    scrape_interval: float
    window: float
    step: float
    problems: tuple[str, ...]      # panels whose query failed, one line each
    extensions: bool               # neuronscope metrics present (False: AWS's exporter only)
    elapsed: float                 # seconds the queries took
    queries: int
    recorded: bool = False         # panels read the recorded series of fleet-rules.yml


# How each panel's answer is read: the panels that are one value per instance (or per scrape
# target) come back as {key: value} straight from the decoded answer, no Sample per element;
# the value panels' non-finite readings are dropped there (= no reading). The others (labels
# that matter: targets, hardware, engines, runtimes) come back as Samples.
VALUE_PANELS = ("util_sum", "util_max", "hbm", "memory_used", "power", "flops", "mfu", "errors",
                "ecc")
KEYED: dict[str, tuple[tuple[str, ...], bool]] = {
    **{name: (("instance_id",), True) for name in VALUE_PANELS},
    "modelled": (("instance_id",), False),
    "up": (("instance", "job"), False),           # what identifies a scrape target
    "sample_age": (("instance", "job"), False),
}


_SHAPE_LABELS = ("neuron_device_count", "neuroncore_per_device_count", "neuron_device_memory_size")


def _shape(hardware: Mapping[str, str]) -> tuple[int, int, int]:
    """(devices, logical NeuronCores, bytes of memory per device) from neuron_hardware_info."""
    return _parsed_shape(*(hardware.get(key, "0") for key in _SHAPE_LABELS))


@lru_cache(maxsize=4096)   # an instance's hardware labels are the same refresh after refresh
def _parsed_shape(devices: str, per_device: str, memory: str) -> tuple[int, int, int]:
    count = label_count(devices)
    return count, count * label_count(per_device), label_count(memory)


class FleetQuery:
    """Runs the panel queries against one server and remembers when each instance was up."""

    def __init__(self, client: PrometheusClient, config: FleetConfig = FleetConfig(),
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.config = config
        self.clock = clock
        self._pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="promql")
        self._last_up: dict[str, float] = {}
        self._interval: float | None = config.scrape_interval
        self._interval_checked = 0.0
        self._recorded: bool | None = None
        self._recorded_checked = 0.0

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    # ------------------------------------------------------------------ helpers
    def scrape_interval(self, now: float) -> float:
        if self.config.scrape_interval is not None:
            return self.config.scrape_interval
        if self._interval is None or now - self._interval_checked > 60:
            self._interval_checked = now
            found = sorted(self.client.scrape_intervals().values())
            if found:
                self._interval = found[len(found) // 2]
        return self._interval or DEFAULT_SCRAPE_INTERVAL_S

    def use_recorded(self, now: float) -> bool:
        """Whether the recorded series are there (asked once a minute, one cheap query)."""
        if self.config.recorded is not None:
            return self.config.recorded
        if self._recorded is None or now - self._recorded_checked > 60:
            self._recorded_checked = now
            try:
                found = self.client.query(RECORDED_PROBE, now)
                self._recorded = bool(found) and found[0].value > 0
            except PrometheusError:
                self._recorded = False
        return self._recorded

    def expr(self, name: str, interval: float, recorded: bool = False) -> str:
        record = RECORDED.get(name) if recorded else None
        if record and (name not in ("errors", "ecc") or self.config.window == RECORDED_WINDOW):
            if not self.config.matchers:
                return record
            # recorded series keep only instance_id: the selector applies through instance_info
            return (f"{record} * on (instance_id) group_left () max by (instance_id) "
                    f"(instance_info{{{render_selector(self.config.matchers)}}})")
        template = QUERIES.get(name, HISTORY_QUERY if name == "history" else name)
        return expand(template, self.config.matchers, lookback=self.config.lookback,
                      window=self.config.window, rate=rate_window(interval))

    # ------------------------------------------------------------------ the fetch
    def fetch(self, history_points: int = 60) -> FleetSnapshot:
        """Every panel query once (concurrently) -> a snapshot. Raises PrometheusError when the
        server cannot be reached or is not Prometheus; a failing panel is only a problem line."""
        started = time.perf_counter()
        now = self.clock()
        interval = self.scrape_interval(now)
        recorded = self.use_recorded(now)
        points = max(2, history_points)
        step = max(interval, self.config.window / points)
        end = (now // step) * step   # aligned: neighbouring refreshes hit the same points
        start = end - step * (points - 1)
        futures = {name: self._pool.submit(self.ask, name, self.expr(name, interval, recorded),
                                           now)
                   for name in QUERIES}
        history = self._pool.submit(self.client.query_range,
                                    self.expr("history", interval, recorded), start, end, step)
        results: dict[str, list[Sample]] = {}
        problems: list[str] = []
        fatal: PrometheusError | None = None
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except PrometheusError as exc:
                if exc.kind != "query":
                    fatal = fatal or exc
                problems.append(f"{name}: {exc}")
                results[name] = {} if name in KEYED else []
        try:
            series = history.result()
        except PrometheusError as exc:
            if exc.kind != "query":
                fatal = fatal or exc
            problems.append(f"history: {exc}")
            series = []
        if fatal is not None:
            raise fatal
        rows = self._rows(results, series, now, interval, start, step, points)
        extensions = any(results.get(name) for name in EXTENSION_PANELS)
        return FleetSnapshot(now, rows, _totals(rows), interval, self.config.window, step,
                             tuple(problems), extensions, time.perf_counter() - started,
                             len(futures) + 1, recorded)

    def ask(self, name: str, expr: str, at: float) -> list[Sample] | dict:
        """One panel's instant query, read the way ``KEYED`` says."""
        keyed = KEYED.get(name)
        if keyed is None:
            return self.client.query(expr, at)
        return self.client.query_values(expr, at, *keyed)

    def _rows(self, results: dict[str, list[Sample] | dict], series, now: float, interval: float,
              start: float, step: float, points: int) -> tuple[InstanceRow, ...]:
        up, age, modelled = results["up"], results["sample_age"], results["modelled"]

        def freshness(labels: Mapping[str, str]) -> tuple[bool, float]:
            """An instance's target that is up, else the one scraped last, stands for it: a
            pod rescheduled to a new address leaves its old target in the lookback."""
            key = (labels.get("instance", ""), labels.get("job", ""))
            return up.get(key) == 1.0, -age.get(key, math.inf)

        targets: dict[str, Mapping[str, str]] = {}
        for sample in results["targets"]:
            iid = sample.labels.get("instance_id", "")
            if iid and (iid not in targets or freshness(sample.labels) > freshness(targets[iid])):
                targets[iid] = sample.labels
        hardware_of = {(s.labels.get("instance", ""), s.labels.get("job", "")): s.labels
                       for s in results["hardware"]}
        hardware = {iid: hardware_of.get((t.get("instance", ""), t.get("job", "")), {})
                    for iid, t in targets.items()}
        engines: dict[str, dict[str, float]] = {}
        for s in results["engines"]:
            engines.setdefault(s.labels.get("instance_id", ""), {})[s.labels.get("engine", "")] = s.value
        tags: dict[str, dict[str, int]] = {}
        for s in results["runtimes"]:
            tags.setdefault(s.labels.get("instance_id", ""), {})[s.labels.get("runtime_tag", "")] = int(s.value)
        shapes = {iid: _shape(hardware.get(iid, {})) for iid in targets}
        histories: dict[str, np.ndarray] = {}
        if series:   # every series onto one grid in one pass (a row per series)
            grid = np.full((len(series), points), np.nan)
            owner = np.repeat(np.arange(len(series)), [len(s.times) for s in series])
            index = np.rint((np.concatenate([s.times for s in series]) - start) / step).astype(int)
            keep = (index >= 0) & (index < points)
            grid[owner[keep], index[keep]] = np.concatenate([s.values for s in series])[keep]
            # utilization summed over the cores -> mean per core, for every row at once
            ids = [s.labels.get("instance_id", "") for s in series]
            cores_of = np.array([shapes[i][1] if i in shapes and shapes[i][1] else 1 for i in ids],
                                dtype=float)
            grid /= cores_of[:, None]
            histories = dict(zip(ids, grid))
        util_sum, util_max, hbm, memory_used, power, flops, mfu, errors, ecc = (
            results[n] for n in VALUE_PANELS)
        # one pass over the instances with every lookup spelled out: this loop runs on every
        # refresh for every instance, and its cost is neuron-top's to carry
        last_up, state_of, rows = self._last_up, self._state, []
        append = rows.append
        for iid, labels in targets.items():
            devices, cores, mem_size = shapes[iid]
            key = (labels.get("instance", ""), labels.get("job", ""))
            state, reason = state_of(up.get(key), age.get(key), interval)
            history = histories.get(iid)
            if history is None:
                history = np.full(points, np.nan)
            memory_total = float(devices * mem_size) if mem_size else None
            if not state:
                # a down target has no readings, only what it is, when last seen, and the errors
                # and ECC events of the window, which Prometheus still holds: the ones a host
                # raised before it died are the ones an operator must not lose
                append(InstanceRow(
                    iid, labels.get("instance_type", ""), labels.get("availability_zone", ""),
                    key[0], key[1], devices, cores, 0, None, None, {}, None, None,
                    memory_total, None, bool(modelled.get(iid, 0)), None, None,
                    errors.get(iid), ecc.get(iid), (), False, reason,
                    last_up.get(iid, _last_seen(history, start, step)), history))
                continue
            last_up[iid] = now
            runtime_tags = tags.get(iid, {})
            busy = util_sum.get(iid)
            util_mean = None if busy is None else (min(1.0, busy / cores) if cores else None)
            busiest = util_max.get(iid)
            if util_mean is not None and busiest is not None:
                # two series read at one instant may come from neighbouring evaluations
                # (recorded series): the busiest core is never below the mean
                busiest = max(busiest, util_mean)
            append(InstanceRow(
                iid, labels.get("instance_type", ""), labels.get("availability_zone", ""),
                key[0], key[1], devices, cores, sum(runtime_tags.values()), util_mean, busiest,
                engines.get(iid, {}), hbm.get(iid), memory_used.get(iid), memory_total,
                power.get(iid), bool(modelled.get(iid, 0)), flops.get(iid), mfu.get(iid),
                errors.get(iid), ecc.get(iid), tuple(sorted(runtime_tags)), True, reason, None,
                history))
        return tuple(rows)

    @staticmethod
    def _state(up: float | None, age: float | None, interval: float) -> tuple[bool, str]:
        if up is None:
            return False, "no sample"
        if up == 0:
            return False, "up == 0"
        if age is not None and age > 3 * interval:
            return False, f"no sample for {age:.0f}s"
        return True, ""


_ROW_FIELDS = attrgetter(*(f for f in InstanceRow.__slots__ if f != "history"))


def same_rows(old: tuple[InstanceRow, ...], new: tuple[InstanceRow, ...]) -> bool:
    """Whether ``new`` holds exactly what ``old`` does (a refresh that brought no new sample:
    the same readings, states and histories), so a screen has nothing to redraw."""
    if len(old) != len(new):
        return False
    for a, b in zip(old, new):
        # histories compared bit for bit: NaN (no reading) equals NaN, and a difference in
        # the bits alone only costs a redraw
        if a is not b and (_ROW_FIELDS(a) != _ROW_FIELDS(b) or
                           a.history.tobytes() != b.history.tobytes()):
            return False
    return True


def _last_seen(history: np.ndarray, start: float, step: float) -> float | None:
    seen = np.flatnonzero(np.isfinite(history))
    return float(start + seen[-1] * step) if seen.size else None


def _sum(values) -> float | None:
    present = [v for v in values if v is not None]
    return float(sum(present)) if present else None


def _totals(rows: tuple[InstanceRow, ...]) -> FleetTotals:
    live = [r for r in rows if r.up]
    in_use = sum(r.cores_in_use for r in live if r.mfu is not None)
    mfu = (sum(r.mfu * r.cores_in_use for r in live if r.mfu is not None) / in_use
           if in_use else None)
    return FleetTotals(
        len(live), len(rows) - len(live), sum(r.cores for r in live),
        sum((r.util_mean or 0.0) * r.cores for r in live),
        _sum(r.flops_per_s for r in live), mfu, _sum(r.power_watts for r in live),
        _sum(r.hbm_bytes_per_s for r in live), sum(r.errors or 0.0 for r in rows),
        sum(r.ecc or 0.0 for r in rows))        # a down host's window still counts
