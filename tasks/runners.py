"""Executors that fan a library's independent work items out to a real engine (Dask).

The library's blocked algorithms accept any ``executor(fn, items) -> results`` callable; this module
provides one backed by ``dask.distributed`` — an existing cluster (``address``) or a local one that is
started for the call and torn down after it. Dask is an optional dependency (``pip install .[dask]``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MapFn = Callable[[Callable[[Any], Any], list[Any]], list[Any]]


@contextmanager
def dask_executor(address: str | None = None, n_workers: int = 2, processes: bool = True) -> Iterator[MapFn]:
    """Yield ``map(fn, items)`` running each item as a Dask task (results in input order).

    Parameters
    ----------
    address : str, optional
        Scheduler address of an existing cluster; a ``LocalCluster`` of ``n_workers`` single-threaded
        processes (dashboard on a random port, scratch in a temporary folder) when omitted.
    n_workers : int
        Workers of the local cluster.
    processes : bool
        Local cluster of worker processes (default) or of threads in this process (cheap to start;
        the GIL limits the gain to code that releases it, e.g. sparse products and Parquet I/O).
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError("the dask executor needs dask.distributed: pip install 'crowdflow[dask]'") from exc

    cluster = None
    scratch = tempfile.TemporaryDirectory(prefix="crowdflow-dask-")
    try:
        if address is None:
            cluster = LocalCluster(
                n_workers=n_workers,
                threads_per_worker=1,
                processes=processes,
                dashboard_address=":0",
                local_directory=scratch.name,
            )
            client = Client(cluster)
        else:
            client = Client(address)
        try:
            yield lambda fn, items: list(client.gather(client.map(fn, items, pure=False)))
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()
        scratch.cleanup()
