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
