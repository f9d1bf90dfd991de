"""A rich progress bar on stderr for long captures (only on a terminal unless forced)."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def progress_bar(mode: str, total: int, label: str) -> Iterator[Callable[[int, int], None] | None]:
    show = mode == "on" or (mode == "auto" and sys.stderr.isatty() and total > 1)
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total or None)

        def tick(done: int, of: int) -> None:
            bar.update(task, completed=done, total=of or None)
        yield tick
