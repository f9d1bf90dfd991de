"""What a Report lacks: the groups and fields a stream does not carry, for sinks to say so.

Streams differ across SDK releases, devices and configs (an inf1 capture has no flops, a config
may switch groups off, a group may carry an ``error``). A sink shows "N/A" for what is absent;
this module names what is absent, so the reader knows why ("stream lacks: execution_stats").
"""
from __future__ import annotations

from dataclasses import dataclass

from monitor.report import Report
from monitor.vocab import AWS_RUNTIME_GROUPS, AWS_SYSTEM_GROUPS

__all__ = ["StreamGaps", "stream_gaps"]


@dataclass(frozen=True, slots=True)
class StreamGaps:
    missing: tuple[str, ...]             # groups (or fields) no runtime / the system reports
    failed: tuple[tuple[str, str], ...]  # (group, its error text) for groups carrying an error
    dropped: tuple[str, ...]             # optional fields left out for a bad value

    def __bool__(self) -> bool:
        return bool(self.missing or self.failed or self.dropped)

    def summary(self) -> str:
        """One line: ``stream lacks: execution_stats, flops · memory_used failed: …``."""
        parts = []
        if self.missing:
            parts.append("stream lacks: " + ", ".join(self.missing))
        parts += [f"{group} failed: {error}" for group, error in self.failed]
        if self.dropped:
            parts.append(f"{len(self.dropped)} malformed field(s) ignored, e.g. {self.dropped[0]}")
        return " · ".join(parts)


def stream_gaps(report: Report) -> StreamGaps:
    missing: list[str] = []
    failed: dict[str, str] = {}
    runtimes = [r for r in report.runtimes if not r.error]
    for name in AWS_RUNTIME_GROUPS:   # the groups AWS writes with its default configuration
        groups = [r.group(name) for r in runtimes]
        if runtimes and all(g is None for g in groups):
            missing.append(name)
        for g in groups:
            if g is not None and g.error:
                failed.setdefault(name, g.error)
    cores = [c for r in runtimes if r.neuroncore_counters
             for c in r.neuroncore_counters.cores.values()]
    if cores and all(c.flops is None for c in cores):
        missing.append("flops")
    for name in AWS_SYSTEM_GROUPS:
        group = report.system.group(name)
        if group is None:
            missing.append(name)
        elif group.error:
            failed[name] = group.error
    for name, info in (("instance_info", report.instance), ("neuron_hardware_info", report.hardware)):
        if info.error:
            failed[name] = info.error
    if report.hardware.device_type is None:
        missing.append("neuron_device_type")
    if report.k8s is not None and report.k8s.error:
        failed["neuron_k8s_info"] = report.k8s.error
    return StreamGaps(tuple(missing), tuple(failed.items()), report.dropped)
