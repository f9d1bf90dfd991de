"""Timing helpers shared by the benchmarks: repeated wall-clock runs, per-call times of batched
calls, and a median [min-max] summary."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def timed(fn: Callable[[], object], runs: int, warmup: bool = True) -> list[float]:
    """Seconds of `runs` calls of `fn`, after one untimed call when `warmup`."""
    if warmup:
        fn()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def per_call(fn: Callable[[], object], batch: int, runs: int) -> list[float]:
    """Seconds per call of `fn`, one figure per run of `batch` calls, after one untimed call (it
    warms caches and first-call state)."""
    fn()
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        out.append((time.perf_counter() - start) / batch)
    return out


def fmt(values: list[float], scale: float = 1.0, unit: str = "", digits: int = 2) -> str:
    """`median [min-max]` of `values` times `scale`, with `unit` after the median."""
    v = [x * scale for x in values]
    return f"{statistics.median(v):,.{digits}f}{unit} [{min(v):,.{digits}f}-{max(v):,.{digits}f}]"
