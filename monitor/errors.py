"""Exceptions of the monitor library.

Both derive from ValueError and carry a single-line message that names the offending field
path (``neuron_runtime_data[0].report.memory_used.period``) so a CLI can print it as is.
"""
from __future__ import annotations


class MonitorError(ValueError):
    """Base class: bad external input reached the monitor library."""


class ReportError(MonitorError):
    """A neuron-monitor JSON document (or line) does not match the schema."""


class ConfigError(MonitorError):
    """A neuron-monitor configuration file is invalid."""
