"""crowdflow.executors.fold and the pipeline's Dask executor: results combined as they complete, in order when asked."""

from __future__ import annotations

import time
from typing import Any

import pytest

from crowdflow.executors import fold, inline_executor


def _slow_identity(x: int) -> int:
    time.sleep(0.05 * (5 - x))  # later items complete first
    return x


def test_fold_inline_combines_one_at_a_time() -> None:
    seen: list[int] = []

    def combine(acc: list[int], r: int) -> list[int]:
        seen.append(r)
        return [*acc, r]

    assert fold(inline_executor, lambda x: x * x, [1, 2, 3], combine, []) == [1, 4, 9]
    assert seen == [1, 4, 9]
    assert fold(lambda fn, xs: [fn(x) for x in xs], str, [1, 2], lambda a, r: a + r, "") == "12"  # a plain map


def test_dask_fold_keeps_the_items_order_when_asked() -> None:
    distributed = pytest.importorskip("distributed")
    from tasks.runners import DaskMap

    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        run = DaskMap(client)
        items = [0, 1, 2, 3, 4]
        assert run(_slow_identity, items) == items
        assert fold(run, _slow_identity, items, lambda a, r: [*a, r], [], ordered=True) == items
        unordered = fold(run, _slow_identity, items, lambda a, r: [*a, r], [])
        assert sorted(unordered) == items  # every result once, in completion order


def _first_slow(x: int) -> int:
    time.sleep(0.5 if x == 0 else 0.01)  # the first item completes last among the early ones
    return x


@pytest.mark.parametrize("ordered", [True, False])
def test_dask_fold_keeps_at_most_its_window_in_flight(ordered: bool) -> None:
    """However many items, the flow holds at most ``window()`` futures of the pass at any combine (docs/scale.md,
    memory laws: O(tasks in flight), not O(buckets)); every result is combined once, in order when asked. A value
    shared with :func:`crowdflow.executors.share` (scattered once) is read by every item."""
    distributed = pytest.importorskip("distributed")
    from crowdflow.executors import release, share
    from tasks.runners import DaskMap

    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        run = DaskMap(client)
        window = run.window()
        items = list(range(6 * window))
        submitted: list[int] = []
        real_submit = client.submit

        def counting_submit(*args: object, **kwargs: object) -> object:
            submitted.append(1)
            return real_submit(*args, **kwargs)

        client.submit = counting_submit  # type: ignore[method-assign]
        in_flight: list[int] = []

        def combine(acc: list[int], r: int) -> list[int]:
            in_flight.append(len(submitted) - len(acc))  # submitted and not yet combined (this one included)
            return [*acc, r]

        got = fold(run, _first_slow, items, combine, [], ordered=ordered)
        client.submit = real_submit  # type: ignore[method-assign]
        assert (got if ordered else sorted(got)) == items
        assert len(submitted) == len(items)
        assert max(in_flight) <= window < len(items)
        handle = share(run, {"offset": 1000})
        shared = fold(run, _add_offset, [(i, handle) for i in range(5)], lambda a, r: [*a, r], [], ordered=True)
        assert shared == [1000, 1001, 1002, 1003, 1004]
        release(run, [handle])


def _add_offset(pair: tuple[int, dict[str, int]]) -> int:
    return pair[0] + pair[1]["offset"]


def _total(values: list[int], shared: int) -> int:
    return sum(values) * shared


def test_held_groups_run_one_task_per_holder() -> None:
    """A pass over held items runs one task per group: every item once, in its group's order; the groups by where
    the executor holds them (one per item when nothing is held, one in this process for InlineMemory)."""
    from crowdflow.executors import InlineMemory, held_groups, hold, on_group_with

    items = [1, 2, 3, 4, 5]
    for executor, want in (
        (inline_executor, [[0], [1], [2], [3], [4]]),
        (InlineMemory(), [[0, 1, 2, 3, 4]]),
    ):
        handles = hold(executor, lambda x: 10 * x, items)
        groups = held_groups(executor, handles)
        assert groups == want
        pairs = [([handles[i] for i in g], 2) for g in groups]
        assert sum(executor(on_group_with(_total), pairs)) == 2 * 10 * sum(items)

    class Placed(InlineMemory):  # an executor that says where: groups come back ordered by their first item
        def groups(self, handles: list[int]) -> list[list[int]]:
            return [[1, 3], [], [0, 2, 4]]

    assert held_groups(Placed(), [0, 1, 2, 3, 4]) == [[0, 2, 4], [1, 3]]
    assert held_groups(InlineMemory(), []) == []


@pytest.mark.parametrize("seed", range(40))
def test_balance_moves_even_out_the_places_and_group_the_same_way_from_any_start(seed: int) -> None:
    """On drawn placements (2–4 places, some empty; sizes with zeros, ties, one item larger than the rest): the moves
    are valid; at the end every place holds within the largest item of an even share; and the grouping of the items
    by place (what decides a pass's rounding) is the same from a second, independent start: it depends only on the
    sizes and the number of places. Each group is a contiguous run of items."""
    import numpy as np

    from crowdflow.executors import balance_moves

    rng = np.random.default_rng(seed)
    places = [f"w{k}" for k in range(int(rng.integers(2, 5)))]
    n = int(rng.integers(1, 30))
    kind = seed % 4
    sizes = {
        0: rng.integers(0, 100, n),
        1: np.full(n, 7),
        2: np.where(rng.random(n) < 0.2, 0, rng.integers(1, 5, n)),
        3: np.r_[rng.integers(1, 10, n - 1), 1000][:n],
    }[kind].tolist()

    def settle(holders: list[str]) -> list[str]:
        where = list(holders)
        for i, place in balance_moves(holders, sizes, places):
            assert place in places and place != where[i]
            where[i] = place
        return where

    def start() -> list[str]:
        crowded = places[: int(rng.integers(1, len(places) + 1))]  # the items start on some of the places only
        return [str(rng.choice(crowded)) for _ in range(n)]

    first, second = settle(start()), settle(start())
    share = sum(sizes) / len(places)
    for p in places:
        load = sum(s for h, s in zip(first, sizes, strict=True) if h == p)
        assert abs(load - share) <= max(sizes) + 1e-9, (p, load, share)

    def grouping(where: list[str]) -> list[list[int]]:
        by: dict[str, list[int]] = {}
        for i, h in enumerate(where):
            by.setdefault(h, []).append(i)
        return sorted(by.values())

    assert grouping(first) == grouping(second)
    for g in grouping(first):
        assert g == list(range(g[0], g[-1] + 1))  # contiguous
    assert balance_moves(first, sizes, places) == []  # settled: nothing moves twice


def test_dask_balance_moves_held_items_and_keeps_their_values() -> None:
    """Six held items all on one worker of two: after :func:`crowdflow.executors.balance` each worker holds three
    (equal sizes: the first three on one, the last three on the other), every handle still gives its value, and a pass over the groups sees every item once."""
    distributed = pytest.importorskip("distributed")
    from crowdflow.executors import balance, held_groups, on_group_with
    from tasks.runners import DaskMap

    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        executor = DaskMap(client)
        first = sorted(client.scheduler_info()["workers"])[0]
        held = [client.submit(_slow_identity, 5, key=f"item-{k}", workers=[first], pure=False) for k in range(6)]
        distributed.wait(held)
        assert [len(g) for g in held_groups(executor, held)] == [6]
        moved = balance(executor, held, [10] * 6)
        assert held_groups(executor, moved) == [[0, 1, 2], [3, 4, 5]]  # the canonical runs, whatever the start
        assert client.gather(moved) == [5] * 6
        pairs = [([moved[i] for i in g], 1) for g in held_groups(executor, moved)]
        assert sum(executor(on_group_with(_total), pairs)) == 30
        executor.release(moved)


@pytest.mark.parametrize("seed", range(20))
def test_interleaved_takes_each_place_in_turn(seed: int) -> None:
    """Every position once; each group's positions in their order; the k-th round holds the k-th position of every
    group that has one (so the first items of a pass come from different places)."""
    import numpy as np

    from crowdflow.executors import interleaved

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 30))
    place = rng.integers(0, int(rng.integers(1, 5)), n)
    groups = [list(np.flatnonzero(place == p)) for p in range(int(place.max()) + 1 if n else 0)]
    groups = [g for g in groups if g]
    got = interleaved(groups)
    assert sorted(got) == list(range(n))
    for g in groups:
        assert [i for i in got if i in g] == g
    at = 0
    for k in range(max((len(g) for g in groups), default=0)):
        round_k = [g[k] for g in groups if k < len(g)]
        assert got[at : at + len(round_k)] == round_k
        at += len(round_k)


def _where() -> str:
    """The Dask worker running this call, "here" outside one."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return "here"


def _passes_job(executor: Any, held: list[Any], shared: int, progress: Any) -> tuple[str, int, list[list[int]]]:
    """A loop of passes over held items: where it ran, the sum of two passes over the groups, the groups it saw."""
    from crowdflow.executors import held_groups, on_group_with

    groups = held_groups(executor, held)
    pairs = [([held[i] for i in g], shared) for g in groups]
    total = sum(executor(on_group_with(_total), pairs)) + sum(executor(on_group_with(_total), pairs))
    return _where(), total, groups


def test_elsewhere_runs_a_loop_of_passes_beside_the_held_items() -> None:
    """:func:`crowdflow.executors.elsewhere` runs a job of passes in this process for an executor that cannot run it
    elsewhere, and on a Dask worker for the pipeline's executor (``DaskMap.elsewhere``): the same result (its passes
    see the same held items, grouped the same way), the held items kept for the caller afterwards."""
    distributed = pytest.importorskip("distributed")
    from crowdflow.executors import InlineMemory, elsewhere, held_groups, hold
    from tasks.runners import DaskMap

    items = [0, 1, 2, 3, 4, 5]
    inline = InlineMemory()
    where, total, groups = elsewhere(inline, _passes_job, hold(inline, _slow_identity, items), 3)
    assert (where, total, groups) == ("here", 2 * 3 * sum(items), [[0, 1, 2, 3, 4, 5]])
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        executor = DaskMap(client)
        places = sorted(client.scheduler_info()["workers"])
        held = [
            client.submit(_slow_identity, x, key=f"held-{k}", workers=[places[k % 2]], pure=False)
            for k, x in enumerate(items)
        ]
        distributed.wait(held)
        where, total, groups = elsewhere(executor, _passes_job, held, 3)
        assert where in places  # on a worker, whose thread the passes did not wait for
        assert total == 2 * 3 * sum(items)
        assert groups == held_groups(executor, held) == [[0, 2, 4], [1, 3, 5]]
        assert client.gather(held) == items  # still held for the caller
        executor.release(held)


def _reporting_job(executor: Any, held: list[Any], n: int, progress: Any) -> int:
    """A job that reports ``n`` fractions and lines (a plain callback gets the fractions), then fails if n < 0."""
    from crowdflow.progress import note

    if progress is None:
        return -1
    for k in range(1, abs(n) + 1):
        progress(k / abs(n))
        note(progress, f"pass {k}")
    if n < 0:
        raise ValueError("the job failed after its reports")
    return sum(executor(on_held_identity, held))


def on_held_identity(x: Any) -> Any:
    return x


def test_elsewhere_brings_the_jobs_progress_to_the_callers_thread() -> None:
    """A job run elsewhere reports through the caller's callback: in this process the callback itself; on a Dask
    worker (``DaskMap.elsewhere``) every fraction and line, in order, in the calling thread, before the result; also
    when the job fails (its error raised after its reports); no callback, no reports (the job gets None)."""
    import threading

    distributed = pytest.importorskip("distributed")
    from crowdflow.executors import InlineMemory, elsewhere, hold
    from tasks.runners import DaskMap

    class Seen:
        def __init__(self) -> None:
            self.events: list[Any] = []
            self.threads: set[int] = set()

        def __call__(self, fraction: float) -> None:
            self.events.append(fraction)
            self.threads.add(threading.get_ident())

        def note(self, line: str) -> None:
            self.events.append(line)
            self.threads.add(threading.get_ident())

    want = [x for k in range(1, 41) for x in (k / 40, f"pass {k}")]
    inline = InlineMemory()
    seen = Seen()
    assert elsewhere(inline, _reporting_job, hold(inline, on_held_identity, [1, 2, 3]), 40, seen) == 6
    assert seen.events == want
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        executor = DaskMap(client)
        held = hold(executor, on_held_identity, [1, 2, 3])
        for _ in range(2):  # two calls: each its own topic
            seen = Seen()
            assert elsewhere(executor, _reporting_job, held, 40, seen) == 6
            assert seen.events == want and seen.threads == {threading.get_ident()}
        plain: list[float] = []
        assert elsewhere(executor, _reporting_job, held, 40, plain.append) == 6
        assert plain == want[::2]
        seen = Seen()
        with pytest.raises(ValueError, match="failed after its reports"):
            elsewhere(executor, _reporting_job, held, -5, seen)
        assert seen.events == [x for k in range(1, 6) for x in (k / 5, f"pass {k}")]
        assert elsewhere(executor, _reporting_job, held, 40) == -1
        executor.release(held)
