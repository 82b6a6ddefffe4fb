"""Fixtures shared by the skills tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def dask_map() -> Iterator[Any]:
    """A two-process Dask LocalCluster's executor (``tasks.runners.DaskMap``), one per test module."""
    distributed = pytest.importorskip("distributed")
    from tasks.runners import DaskMap

    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as client,
    ):
        yield DaskMap(client)


@pytest.fixture
def held_after_release(dask_map: Any) -> Callable[..., dict[str, int]]:
    """``held_after_release(wait=10.0)``: the items each Dask worker of :func:`dask_map` still holds once the releases
    have reached it. A release is a message to the scheduler, which tells the workers to forget (and a task still
    running when its future was released finishes first), so the count is polled until it is zero or ``wait``
    seconds have passed: a test asserts that nothing *stays* held, not that forgetting is instantaneous."""

    def held(wait: float = 10.0) -> dict[str, int]:
        deadline = time.monotonic() + wait
        while True:
            info: dict[str, int] = dask_map.client.run(lambda dask_worker: len(dask_worker.data))
            if all(n == 0 for n in info.values()) or time.monotonic() > deadline:
                return info
            time.sleep(0.1)

    return held
