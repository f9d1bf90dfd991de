"""A rich progress bar on stderr for long captures (only on a terminal unless forced)."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def progress_bar(mode: str, total: int, label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A `tick(done, of)` for a rich bar on stderr (None when no bar shows). `total`: the units of
    work, or 0 when only the work knows how many: the bar then appears at the first tick, with
    the total that tick gives, so the total shown is right from the start."""
    if mode == "off" or (mode == "auto" and not sys.stderr.isatty()):
        yield None
        return
    state: dict = {}

    def start(of: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
        bar = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        bar.start()
        state["bar"], state["task"] = bar, bar.add_task(label, total=of or None)

    def tick(done: int, of: int) -> None:
        if "bar" not in state:
            if mode == "auto" and of <= 1:
                return
            start(of)
        state["bar"].update(state["task"], completed=done, total=of or None)

    if total and (mode == "on" or total > 1):
        start(total)
    try:
        yield tick
    finally:
        if "bar" in state:
            state["bar"].stop()
