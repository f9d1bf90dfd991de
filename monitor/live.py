"""Reports collected in this process: the local simulated instance, the demo, --collect.

neuron-top shows the instance `neuron-sim start` left running, or starts a private demo instance
(a Llama training job and an inference service) and stops it on quit; the exporters' --collect
runs the collector on the configuration's base period. The sinks reach the chip model only
through here (and monitor.hardware). The collector is imported on first use: a sink reading a
stream never loads it.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from monitor.errors import InputError
from monitor.loop import collect_every
from monitor.report import Report
from monitor.sources import Source

if TYPE_CHECKING:
    from monitor.collector import Collector
    from monitor.config import MonitorConfig

__all__ = ["InputError", "CollectorSource", "live_config", "local_instance_source",
           "simulated_demo_source", "collector_reports"]

SETTLE_POLL_S = 0.1


def live_config(period_s: float = 1.0) -> MonitorConfig:
    """Every runtime and system group at one period: what neuron-top shows."""
    from monitor.config import RUNTIME_GROUPS, SYSTEM_GROUPS, MonitorConfig, format_period
    return MonitorConfig.from_dict({
        "period": format_period(period_s),     # rounded: int() truncated 0.3 s to 299 ms
        "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": g} for g in RUNTIME_GROUPS]}],
        "system_metrics": [{"type": g} for g in SYSTEM_GROUPS],
    })


class CollectorSource(Source):
    """Reports collected in-process from the simulated instance's runtimes under ``root``, one
    per period. The first comes one period after start and covers it, as neuron-monitor's does:
    collected at once it would cover only the ~2 ms since the baseline, every core at 0 %."""

    def __init__(self, root: pathlib.Path | None = None, *, period_s: float = 1.0,
                 label: str = "local simulated instance",
                 on_close: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.root = root
        self.period_s = period_s
        self.label = label
        self._on_close = on_close
        self.settle_s = 0.0     # wait up to this long for the runtimes to load their models

    def reports(self) -> Iterator[Report]:
        from monitor.collector import Collector
        collector = Collector(live_config(self.period_s), root=self.root)
        try:
            if self.settle_s > 0:
                self._settle(collector)
            yield from collect_every(collector, self.period_s, time.monotonic, self._stop.wait,
                                     stopped=self._stop.is_set)
        finally:
            collector.close()

    def _settle(self, collector: Collector) -> None:
        """A one-shot view of an instance just started would show its cores idle while the
        runtimes load their models (seconds): wait for them, then start the first period."""
        deadline = time.monotonic() + self.settle_s
        while collector.loading() and time.monotonic() < deadline:
            if self._stop.wait(SETTLE_POLL_S):
                return
        collector.rebaseline()

    def close(self) -> None:
        super().close()
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close()


def local_instance_source(root: pathlib.Path | None = None) -> Source | None:
    """The simulated instance `neuron-sim start` left running for this user (in `root`, if
    given: `neuron-sim start --root DIR`), if any. A root that does not exist is not made; one
    named that is not safe to read (open to others) raises its ValueError."""
    from device_model.runtime.rundir import RuntimeDirError
    from device_model.runtime.shm import read_instance
    if root is not None and not os.path.lexists(root):
        return None
    try:
        desc = read_instance(root)
    except RuntimeDirError:
        if root is not None:
            raise
        return None
    except (OSError, ValueError):
        return None
    if desc is None:
        return None
    return CollectorSource(root, label=f"local simulated {desc.instance_type}")


def simulated_demo_source(instance_name: str = "trn2.48xlarge", seed: int = 0) -> Source:
    """Start the default simulated instance (a Llama training job and an inference service) in a
    private runtime directory, show it, and stop it when the source closes."""
    from device_model import instance
    from device_model.runtime.launcher import cleanup, launch, plan, terminate

    root = pathlib.Path(tempfile.mkdtemp(prefix="neuron-top-demo-"))
    os.chmod(root, 0o700)
    try:
        # foreground: the runtimes are this process's and end with it, even if it is killed
        desc, procs = launch(plan(instance(instance_name), [], []), root, seed, 1.0, foreground=True)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise

    def stop() -> None:
        terminate(procs)
        cleanup(root)
        shutil.rmtree(root, ignore_errors=True)

    return CollectorSource(root, label=f"demo: simulated {desc.instance_type}", on_close=stop)


def collector_reports(config_path: pathlib.Path | None, clock: Callable[[], float] = time.time,
                      sleep: Callable[[float], None] = time.sleep,
                      monotonic: Callable[[], float] = time.monotonic,
                      root: pathlib.Path | None = None) -> Iterator[Report]:
    """Reports from the in-process collector, one per base period of the configuration, each
    stamped with its ``clock()`` arrival time; `root`: the runtime directory of the simulated
    instance (`neuron-sim start --root DIR`; default the per-user one).

    Configuration and runtime-directory problems raise InputError here, before serving starts.
    """
    from device_model.runtime.rundir import runtime_dir
    from monitor.collector import Collector  # imported on demand: stdin users do not need it
    from monitor.config import MonitorConfig

    if root is not None and not os.path.lexists(root):     # looking must not create it
        raise InputError(f"--root: no simulated instance at {root}")
    try:
        config = (MonitorConfig.from_file(config_path) if config_path is not None
                  else MonitorConfig.default())
        if root is not None:
            runtime_dir(root)          # an unsafe directory is refused before serving starts
        collector = Collector(config, root=root)
    except (OSError, ValueError) as exc:
        # The message as the other tools print it (first line, not repr-quoted).
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"--collect: {message}") from None
    return _stamped(collector, config.base_period, clock, sleep, monotonic)


def _stamped(collector: Collector, period: float, clock: Callable[[], float],
             sleep: Callable[[float], None], monotonic: Callable[[], float]) -> Iterator[Report]:
    try:
        for report in collect_every(collector, period, monotonic, sleep):
            yield dataclasses.replace(report, received_at=clock())
    finally:
        collector.close()
