"""Wall-clock helpers shared by the benchmarks: the best or the median of repeated calls (``time.perf_counter``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` calls of ``fn``, in seconds."""
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def median_of(fn: Callable[[], T], repeats: int) -> tuple[float, T]:
    """The median wall time of ``repeats`` calls of ``fn`` (seconds) and the last call's result."""
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(statistics.median(times)), out
