"""The exporter's metric state: families of series, each series' text line kept ready.

Applying a report sets gauges and adds each period's counts to counters, as AWS's exporter does
with prometheus_client; a series' line is re-formatted only when its value changes, so turning
the state into an exposition is a join of cached strings (see `render`).

Families appear the first time their group carries data (AWS creates its Gauge/Counter objects
lazily, so a family's position in the output is its first-seen order). Series of a runtime that
is no longer in the report are removed; groups or runtimes that report an error keep their last
good values. Families marked `replaced` (a runtime's pid, its loaded models) hold only what the
runtime's latest group carries.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from exporters import metrics_table as mt
from exporters.extract import GroupSamples
from exporters.textformat import format_value, label_block


class Series:
    """One labelled sample (a counter also owns its `_created` line)."""

    __slots__ = ("prefix", "value", "line", "created_line", "runtime_tag")

    def __init__(self, prefix: str, value: float, created_line: str, runtime_tag: str | None):
        self.prefix = prefix
        self.value = value
        self.line = prefix + format_value(value) + "\n"
        self.created_line = created_line
        self.runtime_tag = runtime_tag

    def set(self, value: float) -> None:
        if value != self.value:
            self.value = value
            self.line = self.prefix + format_value(value) + "\n"


class Family:
    """Series keyed by their own label values; AWS's instance labels (`instance`) are constant
    for the exporter's life, so they are only written into each series' prefix."""

    __slots__ = ("spec", "series", "_instance", "_runtime_index")

    def __init__(self, spec: mt.MetricSpec, instance: tuple[str, ...]):
        self.spec = spec
        self.series: dict[tuple[str, ...], Series] = {}
        self._instance = instance if spec.instance_labels else ()
        self._runtime_index = spec.labels.index("runtime_tag") if spec.per_runtime else -1

    def relabel(self, instance: tuple[str, ...]) -> None:
        """Every series under these instance labels, its value and `_created` kept."""
        if not self.spec.instance_labels:
            return
        self._instance = instance
        for key, s in self.series.items():
            block = label_block(self.spec.all_labels, instance + key)
            s.prefix = f"{self.spec.name}{block} "
            s.line = s.prefix + format_value(s.value) + "\n"
            if s.created_line:
                s.created_line = f"{self.spec.family}_created{block} " \
                                 f"{s.created_line.rsplit(' ', 1)[1]}"

    def new_series(self, key: tuple[str, ...], value: float, now: float) -> Series:
        block = label_block(self.spec.all_labels, self._instance + key)
        spec = self.spec
        created = ""
        if spec.created:
            created = f"{spec.family}_created{block} {format_value(now)}\n"
        tag = key[self._runtime_index] if self._runtime_index >= 0 else None
        series = Series(f"{spec.name}{block} ", value, created, tag)
        self.series[key] = series
        return series

    # The two loops below run once per series per report: Series.set is inlined on purpose.
    def set_gauges(self, samples: Iterable[tuple[tuple[str, ...], float]], now: float) -> None:
        get, fmt = self.series.get, format_value
        for key, value in samples:
            s = get(key)
            if s is None:
                self.new_series(key, value, now)
            elif value != s.value:
                s.value = value
                s.line = s.prefix + fmt(value) + "\n"

    def add_counts(self, samples: Iterable[tuple[tuple[str, ...], float]], now: float) -> None:
        get, fmt = self.series.get, format_value
        for key, count in samples:
            s = get(key)
            if s is None:
                self.new_series(key, count, now)
            elif count:
                s.value = value = s.value + count
                s.line = s.prefix + fmt(value) + "\n"

    def joined(self, samples: Iterable[tuple[tuple[str, ...], float]], adds_up: bool,
               done: set[tuple[str, ...]]) -> list[tuple[tuple[str, ...], float]]:
        """`samples` of a second process under one tag, joined with the values this report
        already set (`done`): added where readings add up, else the larger."""
        out = []
        for key, value in samples:
            if key in done:
                old = self.series[key].value
                value = old + value if adds_up else max(old, value)
            out.append((key, value))
        return out

    def replace_runtimes(self, kept: dict[str | None, set[tuple[str, ...]]]) -> None:
        """Each runtime of `kept` has exactly the series whose keys it lists (their values set
        already): the ones it no longer has go. One pass over the family for a whole report,
        not one per runtime (a host of 128 runtimes made that quadratic)."""
        gone = [k for k, s in self.series.items()
                if s.runtime_tag in kept and k not in kept[s.runtime_tag]]
        for key in gone:
            del self.series[key]

    def drop_runtimes(self, alive: set[str]) -> None:
        gone = [k for k, s in self.series.items() if s.runtime_tag not in alive]
        for key in gone:
            del self.series[key]

    def keep_latest_placement(self, current: Iterable[tuple[str, ...]], placement: int) -> None:
        """The last `placement` labels of a key say where its core or device is placed (the
        k8s pod): a core has one placement at a time, so the series of its earlier ones go
        (two pods would each count the core)."""
        now = {key[:-placement]: key for key in current}
        gone = [k for k in self.series if now.get(k[:-placement], k) != k]
        for key in gone:
            del self.series[key]


class MetricState:
    """Families in creation order; `apply` one report's groups at a time."""

    def __init__(self, clock: Callable[[], float], instance: tuple[str, ...] = ()):
        self._clock = clock
        self.instance = instance  # AWS instance label values, set from the first report
        self.families: dict[str, Family] = {}
        self._alive: set[str] | None = None

    def relabel(self, instance: tuple[str, ...]) -> None:
        """The instance's labels on every series from now on (its metadata read at last)."""
        self.instance = instance
        for fam in self.families.values():
            fam.relabel(instance)

    def family(self, spec: mt.MetricSpec) -> Family:
        fam = self.families.get(spec.name)
        if fam is None:
            fam = self.families[spec.name] = Family(spec, self.instance)
        return fam

    def apply(self, groups: Iterable[GroupSamples], shared_tags: frozenset[str] = frozenset()
              ) -> None:
        """`shared_tags`: tags more than one runtime of the report has (torchrun workers that
        inherit one NEURON_PROCESS_TAG): the gauges of the second and later runtimes under one
        join the first's instead of overwriting them."""
        now = self._clock()
        replaced: dict[str, dict[str | None, set[tuple[str, ...]]]] = {}
        tags_seen: set[str | None] = set()
        gauges_set: dict[str, set[tuple[str, ...]]] = {}    # keys set under shared tags
        placed: dict[str, list[tuple[str, ...]]] = {}      # keys of placement-labelled families
        for group in groups:
            tag = group.runtime_tag
            sharing = tag in shared_tags
            joins = sharing and tag in tags_seen
            tags_seen.add(tag)
            for spec, samples in group.families:
                fam = self.family(spec)
                counts = spec.kind == "counter" and not spec.replaced
                if sharing and not counts and not spec.replaced:
                    done = gauges_set.setdefault(spec.name, set())
                    if joins:
                        samples = fam.joined(samples, spec.adds_up, done)
                    done.update(key for key, _ in samples)
                (fam.add_counts if counts else fam.set_gauges)(samples, now)
                if spec.placement_labels:
                    placed.setdefault(spec.name, []).extend(key for key, _ in samples)
                if spec.replaced:      # a runtime's set of series is what it carries now
                    replaced.setdefault(spec.name, {}).setdefault(group.runtime_tag, set()).update(
                        key for key, _ in samples)
        for name, kept in replaced.items():
            self.families[name].replace_runtimes(kept)
        for name, keys in placed.items():     # once per family and report, all runtimes at once
            fam = self.families[name]
            fam.keep_latest_placement(keys, fam.spec.placement_labels)

    def set_info(self, spec: mt.MetricSpec, values: tuple[str, ...], update: bool = False) -> None:
        """An info metric is set from the first report, as AWS's exporter does; with `update`,
        these values replace what it holds (one series: the latest known)."""
        fam = self.family(spec)
        if fam.series and update and values not in fam.series:
            fam.series.clear()
        if not fam.series:
            fam.new_series(values, 1.0, 0.0)

    def keep_runtimes(self, alive: set[str]) -> None:
        """Remove the series of runtimes that are not in the latest report."""
        if alive == self._alive:
            return
        if self._alive is not None and not (self._alive - alive):
            self._alive = alive  # only new runtimes: nothing to remove
            return
        self._alive = alive
        for fam in self.families.values():
            if fam.spec.per_runtime:
                fam.drop_runtimes(alive)

    def drop_devices(self) -> None:
        """Remove every per-device series (power, temperature, HBM, ECC, device memory): the
        source says the host has no devices now (the instance went away), and a device's last
        readings would otherwise be served for as long as the exporter runs."""
        for fam in self.families.values():
            if "neuron_device_index" in fam.spec.labels and not fam.spec.per_runtime:
                fam.series.clear()

    def drop_unknown_devices(self) -> None:
        """Remove the series whose `neuron_device_index` is empty: written while the stream
        had not said how many cores a device has; from now on the same cores have their device."""
        for fam in self.families.values():
            if "neuron_device_index" in fam.spec.labels:
                at = fam.spec.labels.index("neuron_device_index")
                for key in [k for k in fam.series if k[at] == ""]:
                    del fam.series[key]

    def series_count(self) -> int:
        return sum(len(f.series) for f in self.families.values())
