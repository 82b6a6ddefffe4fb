"""How the library's passes run: ``executor(fn, items)`` maps, and :func:`fold` combines results as they come.

Partitioned work (docs/scale.md) is written against one callable: ``executor(fn, items) -> [fn(x) for x in items]``
in order, with ``fn`` picklable (a module-level function or a ``functools.partial`` of one). The pipeline passes a
Dask client's map (``tasks.runners.DaskMap``); :func:`inline_executor` runs the items one after the other here.

A pass whose per-item results are large next to their combination (a file's per-pair sums, a bucket's W×W counts)
uses :func:`fold`: with an executor that has a ``fold`` method the results are combined as they complete and
released, so the calling process holds the running total and a few results, never all of them.

A job that makes many passes over the same data (a robust ranking's trimming passes, an EM) encodes each item once
with :func:`hold` and runs every later pass on what is held: ``executor(on_held(fn), handles)`` or
:func:`fold` with ``on_held(fn)``. An executor with a ``hold`` method keeps the encoded items where they were
computed (the pipeline's Dask executor: persisted futures in the workers' memory, so each pass runs on the worker
that holds its item and reads RAM, not files); :class:`InlineMemory` keeps them in this process. Any other executor
(:func:`inline_executor`, a plain map) gets :class:`Recompute` handles that encode the item again on every pass, so
a single-process run over data larger than memory still holds one item at a time. :func:`release` frees them.

A loop over such passes whose own state is as large as what it sums (an EM's parameters: W·M² numbers) runs with
:func:`elsewhere`: as one task where the items are (a Dask worker), driving the same passes from there, so only its
result comes back to the calling process, and its progress reports (fractions and pass lines,
:mod:`crowdflow.progress`) come to the caller's callback while it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from crowdflow.progress import ProgressFn

__all__ = [
    "InlineMemory",
    "MapFn",
    "Recompute",
    "balance",
    "balance_moves",
    "canonical_runs",
    "elsewhere",
    "fold",
    "held_groups",
    "hold",
    "holds",
    "inline_executor",
    "interleaved",
    "on_group_with",
    "on_held",
    "on_held_with",
    "release",
    "share",
    "slots",
    "with_shared",
]

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


@dataclass(frozen=True)
class Recompute:
    """A handle of an executor that holds nothing: ``fn(item)`` is computed again each time a pass needs it."""

    fn: Callable[[Any], Any]
    item: Any


def _apply_held(fn: Callable[[Any], Any], handle: Any) -> Any:
    return fn(handle.fn(handle.item) if isinstance(handle, Recompute) else handle)


def on_held(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` applied to a held item: the value itself (held in memory) or a :class:`Recompute` handle's value."""
    return partial(_apply_held, fn)


def _apply_held_with(fn: Callable[[Any, Any], Any], pair: tuple[Any, Any]) -> Any:
    handle, shared = pair
    return fn(handle.fn(handle.item) if isinstance(handle, Recompute) else handle, shared)


def on_held_with(fn: Callable[[Any, Any], Any]) -> Callable[[tuple[Any, Any]], Any]:
    """``fn(held value, shared value)`` on the items of :func:`with_shared` (a held item paired with a value of
    :func:`share`)."""
    return partial(_apply_held_with, fn)


def held_groups(executor: MapFn, handles: list[Any]) -> list[list[int]]:
    """The held items grouped by where they are held, as lists of positions in ``handles`` (each in order, the
    groups ordered by their first position): a pass then runs one task per group (:func:`on_group_with`), not one
    per item, so its round trips do not grow with the items.

    An executor with a ``groups(handles)`` method says (the pipeline's Dask executor: one group per worker that
    holds items); :class:`InlineMemory` and other holding executors without one: a single group; an executor that
    holds nothing: one group per item (each :class:`Recompute` handle computes its item when its task runs, so a
    single-process run still holds one item at a time).
    """
    own = getattr(executor, "groups", None)
    if own is not None:
        found: list[list[int]] = own(handles)
        return sorted((g for g in found if g), key=lambda g: g[0])
    if holds(executor):
        return [list(range(len(handles)))] if handles else []
    return [[i] for i in range(len(handles))]


def interleaved(groups: list[list[int]]) -> list[int]:
    """The positions of ``groups`` (:func:`held_groups`) taken in turn from each place: the first of every group, then
    the second of every group, and so on. A pass with one task per held item submits them in this order, so that the
    window of a :func:`fold` (a few tasks in flight) keeps every place busy; in the items' own order a window of
    consecutive buckets held by one place left the other places idle (issue #36: the consensus pass over 64 buckets
    ran about one bucket at a time on two Dask workers)."""
    out: list[int] = []
    for k in range(max((len(g) for g in groups), default=0)):
        out.extend(g[k] for g in groups if k < len(g))
    return out


def canonical_runs(sizes: list[int], n_places: int) -> list[int]:
    """The run (0 … ``n_places`` − 1) each item belongs to: the items in their order cut into contiguous runs of
    about equal total size, a rule on ``sizes`` and ``n_places`` only.

    Item i goes to run ⌊P · (S_<i + s_i / 2) / S⌋ (its size's midpoint on the cumulative axis, S the total, P the
    places; by count when every size is 0), so a run's total is within the largest item of S / P.
    """
    total = sum(int(s) for s in sizes)
    if n_places < 2 or not sizes:
        return [0] * len(sizes)
    runs, before = [], 0
    for k, size in enumerate(sizes):
        mid = (before + int(size) / 2) / total if total > 0 else (k + 0.5) / len(sizes)
        runs.append(min(int(n_places * mid), n_places - 1))
        before += int(size)
    return runs


def balance_moves(holders: list[str], sizes: list[int], places: list[str]) -> list[tuple[int, str]]:
    """Moves ``(item, place)`` that take the held items to their canonical placement: :func:`canonical_runs` cuts
    the items into one contiguous run per place, and each run goes to a distinct place, the one holding most of
    its size (greedy over the (run, place) pairs by size held, ties by run then place name).

    Two promises. *Even*: a pass whose time is its busiest place's gets every place within the largest item of
    S / P. *Reproducible*: the grouping of the items by place (:func:`held_groups`) depends only on ``sizes`` and
    the number of places, not on where the items were made, so a pass that folds each place's sums in item order
    and then the places' sums in group order gives the same bits on every run (before, a Dask fit's last bits
    followed where the encode happened to leave each bucket). Only the assignment of runs to places, which does
    not change any sum, follows the holders, to move as little as possible.
    """
    runs = canonical_runs(sizes, len(places))
    held = {(r, p): 0 for r in range(len(places)) for p in places}
    for r, h, size in zip(runs, holders, sizes, strict=True):
        if h in places:
            held[r, h] += int(size)
    target: dict[int, str] = {}
    for (r, p), _ in sorted(held.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1])):
        if r not in target and p not in target.values():
            target[r] = p
    return [(i, target[r]) for i, (r, h) in enumerate(zip(runs, holders, strict=True)) if target[r] != h]


def balance(executor: MapFn, handles: list[Any], sizes: list[int]) -> list[Any]:
    """The held items moved to their canonical placement (:func:`balance_moves`): every place holds about the same
    total ``sizes``, so a pass of one task per place (:func:`held_groups`) keeps every place busy for about the same
    time, and the grouping depends only on ``sizes`` and the number of places, so the pass's sums have the same
    bits on every run.

    Only an executor with a ``balance(handles, sizes)`` method moves anything (the pipeline's Dask executor: each
    moved item copied to its new worker once, the old copy released); the returned handles replace ``handles``
    (same order, same values). Any other executor: ``handles`` unchanged.
    """
    own = getattr(executor, "balance", None)
    if own is None or len(handles) < 2:
        return handles
    moved: list[Any] = own(handles, sizes)
    return moved


def _apply_group_with(fn: Callable[[list[Any], Any], Any], pair: tuple[list[Any], Any]) -> Any:
    group, shared = pair
    return fn([h.fn(h.item) if isinstance(h, Recompute) else h for h in group], shared)


def on_group_with(fn: Callable[[list[Any], Any], Any]) -> Callable[[tuple[list[Any], Any]], Any]:
    """``fn(held values of one group, shared value)`` on items ``([handles of the group], shared handle)``
    (:func:`held_groups`, :func:`share`)."""
    return partial(_apply_group_with, fn)


def _identity(value: Any) -> Any:
    return value


def share(executor: MapFn, value: Any) -> Any:
    """One value every item of the next passes reads, sent once instead of once per item.

    With an executor that has a ``share`` method, its handle; with one that holds (:func:`holds`), the value held
    once (a Dask executor: one future on one worker, fetched once by each worker that needs it, so the scheduler
    keeps its key, not a copy per task); otherwise the value itself. Pair it with the items by
    :func:`with_shared` and free it by :func:`release`.
    """
    own = getattr(executor, "share", None)
    if own is not None:
        return own(value)
    if not holds(executor):
        return value
    import warnings

    with warnings.catch_warnings():  # a large value in one task's arguments is the point here, not a mistake
        warnings.filterwarnings("ignore", message=".*[Ll]arge object.*")
        warnings.filterwarnings("ignore", message=".*[Ss]ending large graph.*")
        return hold(executor, _identity, [value])[0]


def with_shared(handles: list[Any], shared: Any) -> list[tuple[Any, Any]]:
    """The items of a pass of :func:`on_held_with`: each held handle with the shared value's handle."""
    return [(h, shared) for h in handles]


def holds(executor: MapFn) -> bool:
    """Whether ``executor`` keeps what :func:`hold` computes (otherwise each pass recomputes it)."""
    return getattr(executor, "hold", None) is not None


def slots(executor: MapFn) -> int:
    """How many items the executor runs at once (its ``n_workers``; 1 when it does not say)."""
    return max(int(getattr(executor, "n_workers", 1) or 1), 1)


def hold(executor: MapFn, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """``fn(item)`` for every item, kept by the executor across passes; the handles to pass to later passes.

    With an executor that has a ``hold(fn, items)`` method the results stay where they were computed (a Dask
    executor: persisted futures on the workers; :class:`InlineMemory`: values in this process). Otherwise each
    handle is a :class:`Recompute` and every pass computes ``fn(item)`` again (nothing is held).
    """
    own = getattr(executor, "hold", None)
    if own is not None:
        return list(own(fn, items))
    return [Recompute(fn, x) for x in items]


#: ``job(executor, held handles, argument, progress)``: a loop of passes that :func:`elsewhere` runs where the items
#: are; ``progress`` is a :data:`~crowdflow.progress.ProgressFn` (maybe with ``note``) or None
Job = Callable[[MapFn, list[Any], Any, Any], Any]


def elsewhere(executor: MapFn, job: Job, handles: list[Any], arg: Any, progress: ProgressFn | None = None) -> Any:
    """``job(executor, handles, arg, progress)`` run as one task beside the held items, its result returned here.

    With an executor that has an ``elsewhere`` method (the pipeline's Dask executor) ``job`` runs in one of the
    executor's worker processes, with an executor that drives the same cluster from there and the same held items
    (``handles`` seen from that process), so everything ``job`` allocates lives there and this process holds only
    ``arg`` (sent once) and the result. Otherwise ``job`` runs here with ``executor`` and ``handles`` themselves.
    ``job`` must be picklable and give the same result wherever it runs (its passes are the executor's either way).

    ``progress``: the caller's callback (:mod:`crowdflow.progress`). Run here, ``job`` gets it as it is. Run
    elsewhere, ``job`` gets a stand-in that sends each ``progress(fraction)`` and ``progress.note(line)`` to this
    process, where the executor calls the caller's callback with them, in their order and in the calling thread,
    while this call waits for the result (the Dask executor: the worker's events on a topic of this call, at most
    0.2 s late); None when ``progress`` is None. What ``job`` reports changes nothing in its result.
    """
    own = getattr(executor, "elsewhere", None)
    if own is None:
        return job(executor, handles, arg, progress)
    return own(job, handles, arg, progress)


def release(executor: MapFn, handles: list[Any]) -> None:
    """Free what :func:`hold` keeps (a no-op for executors that hold nothing or free on garbage collection)."""
    own = getattr(executor, "release", None)
    if own is not None:
        own(handles)
    handles.clear()


class InlineMemory:
    """:func:`inline_executor` that also holds: :func:`hold` keeps the encoded items in this process's memory."""

    n_workers = 1

    def __call__(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        return [fn(x) for x in items]

    def hold(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        return [fn(x) for x in items]

    def fold(
        self,
        fn: Callable[[Any], Any],
        items: list[Any],
        combine: Callable[[Any, Any], Any],
        acc: Any,
        *,
        ordered: bool = False,
    ) -> Any:
        for x in items:
            acc = combine(acc, fn(x))
        return acc
