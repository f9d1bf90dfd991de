"""monitor.loop.collect_every: one report per period on a fixed schedule, missed ticks skipped."""
from __future__ import annotations

import itertools

from monitor.loop import collect_every


class FakeTime:
    def __init__(self):
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


class Counting:
    def __init__(self, time, cost=0.0):
        self.time, self.cost, self.at = time, cost, []

    def collect(self):
        self.at.append(round(self.time.now, 6))
        self.time.now += self.cost
        return len(self.at)


def test_the_first_report_covers_one_period_and_the_schedule_does_not_drift():
    t = FakeTime()
    c = Counting(t, cost=0.3)
    got = list(itertools.islice(collect_every(c, 1.0, t.clock, t.sleep), 3))
    assert got == [1, 2, 3]
    assert c.at == [101.0, 102.0, 103.0]  # collection time is not added to the period


def test_missed_ticks_are_skipped_not_burst():
    t = FakeTime()
    c = Counting(t)
    reports = collect_every(c, 1.0, t.clock, t.sleep)
    next(reports)
    t.now += 3.5            # suspended for three and a half periods
    next(reports)
    next(reports)
    assert c.at == [101.0, 105.0, 106.0]  # the next tick on the schedule, then one a period


def test_stopped_ends_the_loop_even_when_sleep_returns_early():
    t = FakeTime()
    c = Counting(t)
    stop = []
    reports = collect_every(c, 1.0, t.clock, lambda s: stop.append(s), stopped=lambda: bool(stop))
    assert list(reports) == []
    assert c.at == []


def test_neuron_monitor_writes_no_report_when_nothing_was_due():
    """A tick that finds nothing due (it woke up late) writes nothing: an empty report would
    read as every runtime gone, and readers would drop their series and restart counters."""
    import io
    from types import SimpleNamespace

    from monitor.cli import run_loop
    from monitor.config import MonitorConfig
    from monitor.report import Report
    full = Report.from_dict({"neuron_runtime_data": [{"pid": 1, "neuron_runtime_tag": "t",
                                                      "error": "", "report": {}}],
                             "system_data": {}})
    empty = Report.from_dict({"neuron_runtime_data": [], "system_data": {}})
    t = FakeTime()
    feed = iter([full, empty, full])

    def collect():
        report = next(feed)
        fake.quiet = report is empty        # the collector says when nothing was due
        return report
    fake = SimpleNamespace(config=MonitorConfig.from_dict({"period": "1s"}), removed=0, corrupt=0,
                           tags={}, collect=collect, quiet=False)
    out = io.BytesIO()
    assert run_loop(fake, out, None, 2, lambda *_: None, sleep=t.sleep, clock=t.clock) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(b'"pid":1' in line for line in lines)


def test_without_runtimes_or_system_groups_a_report_still_comes_every_period(tmp_path):
    """A config with runtime groups only (`"system_metrics": []`) on a host where no runtime
    runs: AWS's monitor writes `"neuron_runtime_data": []` each period, which is how a reader
    learns that the last runtime exited. It wrote nothing, and `--count` never returned."""
    import io

    import orjson

    from monitor.cli import run_loop
    from monitor.collector import Collector
    from monitor.config import MonitorConfig
    config = MonitorConfig.from_dict({"period": "1s", "system_metrics": [], "neuron_runtimes": [
        {"metrics": [{"type": "neuroncore_counters"}]}]})
    t = FakeTime()
    root = tmp_path / "rt"
    root.mkdir(mode=0o700)
    collector = Collector(config, root=root, clock=t.clock)
    out = io.BytesIO()
    assert run_loop(collector, out, None, 3, lambda *_: None, sleep=t.sleep, clock=t.clock) == 0
    reports = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert len(reports) == 3 and all(r["neuron_runtime_data"] == [] for r in reports)
    assert t.now - 100.0 <= 3.5          # one a period, not a report per tick of a busy loop
