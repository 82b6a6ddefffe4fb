"""crowdflow.executors.fold and the pipeline's Dask executor: results combined as they complete, in order when asked."""

from __future__ import annotations

import time

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
