"""How the library's passes run: ``executor(fn, items)`` maps, and :func:`fold` combines results as they come.

Partitioned work (docs/scale.md) is written against one callable: ``executor(fn, items) -> [fn(x) for x in items]``
in order, with ``fn`` picklable (a module-level function or a ``functools.partial`` of one). The pipeline passes a
Dask client's map (``tasks.runners.DaskMap``); :func:`inline_executor` runs the items one after the other here.

A pass whose per-item results are large next to their combination (a file's per-pair sums, a bucket's W×W counts)
uses :func:`fold`: with an executor that has a ``fold`` method the results are combined as they complete and
released, so the calling process holds the running total and a few results, never all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MapFn", "fold", "inline_executor"]

#: ``executor(fn, items) -> [fn(x) for x in items]`` (in order), e.g. a Dask client's map + gather.
MapFn = Callable[[Callable[[Any], Any], list[Any]], list[Any]]


def inline_executor(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """Run ``fn`` on every item in this process, in order."""
    return [fn(x) for x in items]


def fold(
    executor: MapFn,
    fn: Callable[[Any], Any],
    items: list[Any],
    combine: Callable[[Any, Any], Any],
    acc: Any,
    *,
    ordered: bool = False,
) -> Any:
    """``acc = combine(acc, fn(item))`` over the items, holding as few results as the executor allows.

    Parameters
    ----------
    executor : MapFn
        An executor; if it has a ``fold(fn, items, combine, acc, ordered=...)`` method (the pipeline's Dask
        executor), that takes the results as they complete. :func:`inline_executor` computes and combines one item
        at a time. Any other executor returns the whole list first.
    ordered : bool
        Combine in the order of ``items`` (a floating-point sum then has the same bits whatever the order in which
        the results complete); otherwise in any order (integer counts).
    """
    own = getattr(executor, "fold", None)
    if own is not None:
        return own(fn, items, combine, acc, ordered=ordered)
    results = (fn(x) for x in items) if executor is inline_executor else executor(fn, items)
    for result in results:
        acc = combine(acc, result)
    return acc
