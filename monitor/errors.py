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


def not_utf8(data: bytes) -> str | None:
    """Why `data` is not UTF-8 text, in words a user can act on (a file saved as UTF-16 by an
    editor, a stray byte and where); None when it is UTF-8. orjson's own message ("str is not
    valid UTF-8: surrogates not allowed: line 1 column 1") names neither."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "UTF-16 text (it starts with a UTF-16 byte-order mark); save it as UTF-8"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} ({exc.reason})"
    return None


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
