"""Partitioned Parquet inputs: list a dataset's files where it lives, read one file in canonical columns.

A run on a Dask cluster never materialises a partitioned input in the flow's process: the flow lists the
dataset (:func:`list_partitions`, file names and sizes only) and the workers read it file by file
(:func:`read_partition`) through the same column mapping, aliases and coercion as every other source
(:func:`crowdflow.storage.io.read_frame`'s rules), so an error names the file, the column and the row *in that file*.

A dataset is a local folder of Parquet files or an fsspec URL (``s3://bucket/labels/``, ``gs://…``,
``file:///…``) opened with the source's ``storage_options``; which files it holds is decided by one rule for every
runner (:mod:`crowdflow.storage.listing`: links followed once, loops walked once, empty files zero rows).
Remote file systems need their fsspec
package (``s3fs``, ``gcsfs``) on the flow and on every worker; credentials come from the environment or the
file system's own configuration, never from the spec (docs/scale.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from crowdflow.contracts.errors import InputError
from crowdflow.contracts.tables import TableSchema
from crowdflow.storage.io import LoadedTable, read_frame
from crowdflow.storage.listing import Partition, is_url, list_partitions

__all__ = [
    "CopiedPartition",
    "Partition",
    "is_url",
    "list_partitions",
    "partition_bytes",
    "read_check_copy",
    "read_copy",
    "read_partition",
]

log = logging.getLogger(__name__)


def partition_bytes(part: Partition) -> tuple[bytes, str]:
    """The bytes of one file of a dataset (local or through fsspec) and their SHA-256 (the file's fingerprint)."""
    try:
        if part.protocol == "file":
            raw = Path(part.path).read_bytes()
        else:
            import fsspec

            fs = fsspec.filesystem(part.protocol, **dict(part.storage_options))
            with fs.open(part.path, "rb") as fh:
                raw = fh.read()
    except OSError as exc:
        raise InputError(f"cannot read Parquet: {exc}", path=part.name) from None
    return raw, hashlib.sha256(raw).hexdigest()


def read_partition(
    part: Partition, schema: TableSchema, columns: Mapping[str, str] | None = None, wanted: list[str] | None = None
) -> LoadedTable:
    """One file of a dataset in the canonical columns of ``schema`` (the rules of
    :func:`crowdflow.storage.io.read_frame`).

    Parameters
    ----------
    part : Partition
    schema : TableSchema
        The input's contract (``crowdflow.contracts.tables.INPUTS[kind]``).
    columns : mapping, optional
        The spec's ``columns:`` (canonical → the file's name).
    wanted : list of str, optional
        Canonical columns to keep (others are not returned); all of the contract's by default.

    Returns
    -------
    LoadedTable
        ``source`` is the file's name; row numbers in messages are 1-based rows of that file.

    Raises
    ------
    InputError
        Unreadable bytes, a missing column, values of the wrong type (naming the file, column and rows).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw, digest = partition_bytes(part)
    try:
        table = pq.read_table(pa.BufferReader(raw))
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"cannot read Parquet: {exc}", path=part.name) from None
    del raw
    loaded = read_frame(table.to_pandas(), schema, columns, source=part.name, fingerprint=False, part=True)
    df = loaded.df if wanted is None else loaded.df[[c for c in loaded.df.columns if c in wanted]]
    return LoadedTable(df=df, source=part.name, sha256=digest, format="parquet", renamed=loaded.renamed)


def dataset_fingerprint(parts: list[Partition], digests: list[str]) -> str:
    """SHA-256 over the dataset's files: each file's path relative to the dataset and its content hash, in order.

    The same value as :func:`crowdflow.storage.io.fingerprint` of the folder (one listing, one hash).
    """
    h = hashlib.sha256()
    for part, digest in zip(parts, digests, strict=True):
        h.update(part.rel.encode())
        h.update(digest.encode())
    return h.hexdigest()


@dataclass(frozen=True)
class CopiedPartition:
    """One input file read, checked and copied in canonical columns (:func:`read_check_copy`).

    Attributes
    ----------
    path : str
        The canonical copy (later passes read it with :func:`read_copy`, never the source again).
    partition, n_rows : int
    sha256 : str
        The source file's content hash.
    found : object
        What the injected check returned (a validation report), or None.
    kept, summary : object
        What the injected ``encode`` returned for the canonical table (the rows a job keeps in memory for its
        passes, and a small summary of them), or None.
    """

    path: str
    partition: int
    n_rows: int
    sha256: str
    found: Any = None
    kept: Any = None
    summary: Any = None

    def light(self) -> CopiedPartition:
        """The same record without ``kept`` (what the flow gathers while the workers hold the rows)."""
        return dataclasses.replace(self, kept=None)


def read_check_copy(
    part: Partition,
    schema: TableSchema,
    folder: str,
    columns: Mapping[str, str] | None = None,
    check: Callable[[LoadedTable], Any] | None = None,
    encode: Callable[[Any], tuple[Any, Any]] | None = None,
) -> CopiedPartition:
    """Read one file (:func:`read_partition`), run ``check`` on it, write its canonical columns to ``folder``.

    The first pass of a job that reads its input several times (a robust ranking): the contract's coercion and the
    validation run once, where the file is read; later passes read the compact copy, or, with ``encode``, what
    ``encode(table)`` (the canonical pyarrow table just written) kept of the rows: ``(kept, summary)`` go into
    the result, which an executor that holds (:func:`crowdflow.executors.hold`) keeps where the file was read.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    loaded = read_partition(part, schema, columns)
    found = check(loaded) if check is not None else None
    out = Path(folder) / f"part-{part.index:06d}.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(loaded.df, preserve_index=False)
    pq.write_table(table, out, write_statistics=False)  # read whole by the later passes: no column statistics
    kept, summary = encode(table) if encode is not None else (None, None)
    return CopiedPartition(str(out), part.index, len(loaded.df), loaded.sha256, found, kept, summary)


def read_copy(path: str) -> pd.DataFrame:
    """A canonical copy written by :func:`read_check_copy`."""
    import pyarrow.parquet as pq

    frame: pd.DataFrame = pq.read_table(path).to_pandas()
    return frame
