"""Exceptions of the monitor library.

The schema and config errors derive from ValueError and carry a single-line message that names
the offending field path (``neuron_runtime_data[0].report.memory_used.period``) so a CLI can
print it as is.
"""
from __future__ import annotations


def one_line(text: str) -> str:
    """`text` with control characters escaped (a field path is external input and may hold a
    newline), so the message stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class MonitorError(ValueError):
    """Base class: bad external input reached the monitor library."""

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(one_line(str(message)), *args)


class ReportError(MonitorError):
    """A neuron-monitor JSON document (or line) does not match the schema."""


class ConfigError(MonitorError):
    """A neuron-monitor configuration file is invalid."""


class InputError(Exception):
    """The input cannot be opened (a usage or configuration problem: exit status 2)."""
