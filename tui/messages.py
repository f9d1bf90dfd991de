"""Messages the source worker posts to the app (post_message is thread-safe)."""
from __future__ import annotations

import threading
from collections import Counter

from textual.message import Message

from monitor.report import Report


class ReportArrived(Message):
    """A new Report; ``malformed`` counts the lines skipped so far, by kind. ``handled`` is set
    once the app has taken it: the worker posts the next one only then."""

    def __init__(self, report: Report, malformed: Counter[str], received_at: float,
                 handled: threading.Event | None = None) -> None:
        super().__init__()
        self.report = report
        self.malformed = malformed
        self.received_at = received_at
        self.handled = handled if handled is not None else threading.Event()


class SourceEnded(Message):
    """The source reached its end (EOF) or failed; ``error`` is "" on a clean end."""

    def __init__(self, malformed: Counter[str], ended_at: float, error: str = "") -> None:
        super().__init__()
        self.malformed = malformed
        self.ended_at = ended_at
        self.error = error


class ParentsFound(Message):
    """The parent processes of the runtimes' pids (None: not a process on this host)."""

    def __init__(self, lineages: dict) -> None:
        super().__init__()
        self.lineages = lineages
