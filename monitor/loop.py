"""The collect-every-period loop shared by neuron-monitor, the exporters' --collect and neuron-top.

Ticks are kept on a fixed schedule of the monotonic ``clock`` (not "sleep a period after each
collection"), so the reports' periods stay equal however long a collection takes; ticks missed
while suspended or overloaded are skipped instead of collected in a burst to catch up.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Protocol

from monitor.report import Report

__all__ = ["Collects", "collect_every"]


class Collects(Protocol):
    """Anything that makes one Report per call: the Collector, or a wrapper around it."""

    def collect(self) -> Report: ...


def collect_every(collector: Collects, period: float,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], object] = time.sleep, *,
                  stopped: Callable[[], bool] = lambda: False) -> Iterator[Report]:
    """``collector.collect()`` once per ``period`` seconds, forever or until ``stopped()``.

    Like neuron-monitor, the first report comes one period after the start (it then covers a
    whole period; collected at once, it would cover only the moment since the collector's
    baseline). ``sleep`` may return early (an event's ``wait``): ``stopped`` is
    checked again before collecting. The collector is not closed here: its owner closes it.
    """
    next_at = clock() + period
    while not stopped():
        delay = next_at - clock()
        if delay > 0:
            sleep(delay)
            if stopped():
                return
        yield collector.collect()
        next_at += period * max(1, int((clock() - next_at) // period) + 1)
