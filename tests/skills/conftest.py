"""Fixtures shared by the skills tests."""

from __future__ import annotations

from collections.abc import Iterator
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
