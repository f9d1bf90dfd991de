"""SIGTERM and SIGHUP end neuron-top as ``q`` does, from the first line of ``main`` to the last.

The app's event loop handles them while the screen is up (tui/app.py). Before that (the demo's
runtimes starting, ``-1`` waiting for a first report) and after it (the source closing), these
handlers do: without them a signal in the demo's first second killed neuron-top outright and
left its runtime directory behind.
"""
from __future__ import annotations

import signal

__all__ = ["EXIT_SIGNALS", "Terminated", "ExitSignals"]

EXIT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


class Terminated(BaseException):
    """Raised by the first exit signal, so the ``finally`` blocks of whatever runs (the demo's
    start-up, a read) clean up. A BaseException: ``except Exception`` must not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.status = 128 + signum


class ExitSignals:
    """The exit signals' handlers for the parts of ``main`` outside the app's event loop.

    ``raising``: the first signal raises Terminated (a source opening, ``-1`` reading).
    Otherwise (the demo starting, the app starting or stopping, the source closing) it is only
    recorded, for the caller to act on: an exception there would leave a runtime, the terminal
    or the clean-up half done. A later signal is only recorded either way.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.raising = True
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        try:
            for signum in EXIT_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        except ValueError:   # main() called off the main thread: only it may handle signals
            pass

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame) -> None:
        if self.received is not None:
            return
        self.received = signum
        if self.raising:
            raise Terminated(signum)

    @property
    def status(self) -> int | None:
        """128 + the signal received, or None."""
        return None if self.received is None else 128 + self.received

    def __enter__(self) -> ExitSignals:
        self.install()
        return self

    def __exit__(self, *_) -> None:
        self.restore()
