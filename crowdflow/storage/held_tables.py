"""Output tables a run's workers build and keep: the flow holds a handle and the row count, never the rows.

A partitioned run's worker-sized tables (the skills table: one row per worker) are built on a Dask worker from
the fit's per-worker arrays and stay in that worker's memory (:func:`crowdflow.executors.hold`) until the export
(issue #36, docs/scale.md memory laws: the flow's memory must not grow with the workers). A :class:`HeldTable`
stands in for the DataFrame in the run's tables: :func:`crowdflow.storage.run_store.write_run` asks it to write
itself (:meth:`HeldTable.write_to`: the worker writes the file in its final form with the export's own writer,
:func:`crowdflow.storage.run_store.write_output_table`, into the run's scratch folder, and the file is moved into
place), so the file has the bytes the flow would have written; :meth:`HeldTable.apply` runs any other reader of
the table (the report) where it is held. With an executor that holds nothing the table is built in the calling
process and a :class:`HeldTable` is never made (:func:`held_or_built`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from crowdflow.executors import MapFn, hold, holds, on_held, on_held_with, release, share, with_shared
from crowdflow.storage.run_store import place_file, write_output_table

__all__ = ["HeldTable", "held_or_built", "released"]


@dataclass
class HeldTable:
    """One output table held in a worker's memory (a handle of :func:`crowdflow.executors.hold`).

    Attributes
    ----------
    name : str
        The output table's name (``skills``).
    rows : int
        Its row count (what the report's planned outputs and the manifest record).
    executor : MapFn
        The executor that holds it (the run's Dask executor).
    handle : Any
        The held DataFrame's handle.
    scratch : str
        A folder the workers and this process both see (the run's scratch folder): where the worker writes the file
        before it is moved into the run.
    """

    name: str
    rows: int
    executor: MapFn
    handle: Any
    scratch: str

    def __len__(self) -> int:
        return self.rows

    def apply(self, fn: Callable[[pd.DataFrame, Any], Any], arg: Any) -> Any:
        """``fn(table, arg)`` run where the table is held (``fn`` picklable, ``arg`` sent once); its result."""
        shared = share(self.executor, arg)
        try:
            return self.executor(on_held_with(fn), with_shared([self.handle], shared))[0]
        finally:
            release(self.executor, [shared])

    def write_to(self, path: Path, schema: pa.Schema | None, run_id: str | None) -> int:
        """Write the table to ``path`` as :func:`~crowdflow.storage.run_store.write_run` writes an in-memory table
        (the worker runs :func:`~crowdflow.storage.run_store.write_output_table` into the scratch folder; the file
        is then moved to ``path``); returns its rows."""
        src = Path(self.scratch) / f".{self.name}-{uuid.uuid4().hex}.parquet"
        try:
            rows = int(self.apply(write_output_table, (self.name, str(src), schema, run_id)))
            place_file(str(src), path)
        finally:
            src.unlink(missing_ok=True)
        return rows

    def release(self) -> None:
        """Free the held table (once the run no longer reads it)."""
        release(self.executor, [self.handle])


def held_or_built(
    executor: MapFn, build: Callable[[Any], pd.DataFrame], args: Any, name: str, rows: int, scratch: str | None
) -> HeldTable | pd.DataFrame:
    """``build(args)`` run and kept where the executor holds (a :class:`HeldTable` of ``rows`` rows), or here.

    Held only with an executor that holds (:func:`crowdflow.executors.holds`) and a ``scratch`` folder for the
    export; ``args`` are sent once (:func:`crowdflow.executors.share`), so the scheduler keeps a key, not a copy.
    """
    if scratch is None or not holds(executor) or getattr(executor, "elsewhere", None) is None:
        return build(args)
    shared = share(executor, args)
    try:
        handle = hold(executor, on_held(_BoundBuild(build)), [shared])[0]
    finally:
        release(executor, [shared])
    return HeldTable(name, rows, executor, handle, scratch)


@contextmanager
def released(tables: Mapping[str, Any]) -> Iterator[None]:
    """Run the block, then free every :class:`HeldTable` among ``tables`` whether it ended or raised (the run's
    export is their last reader)."""
    try:
        yield
    finally:
        for t in tables.values():
            if isinstance(t, HeldTable):
                t.release()


@dataclass(frozen=True)
class _BoundBuild:
    """``build`` as a picklable one-argument function (a module-level ``build``)."""

    build: Callable[[Any], pd.DataFrame]

    def __call__(self, args: Any) -> pd.DataFrame:
        return self.build(args)
