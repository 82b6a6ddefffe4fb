"""Partitioned Parquet inputs: list a dataset's files where it lives, read one file in canonical columns.

A run on a Dask cluster never materialises a partitioned input in the flow's process: the flow lists the
dataset (:func:`list_partitions`, file names and sizes only) and the workers read it file by file
(:func:`read_partition`) through the same column mapping, aliases and coercion as every other source
(:func:`crowdflow.storage.io.read_frame`'s rules), so an error names the file, the column and the row *in that file*.

A dataset is a local folder of Parquet files (hive sub-folders such as ``day=2026-11-01/`` included; files whose
name starts with ``.`` or ``_`` are skipped, as Arrow does) or an fsspec URL (``s3://bucket/labels/``,
``gs://…``, ``file:///…``) opened with the source's ``storage_options``. Remote file systems need their fsspec
package (``s3fs``, ``gcsfs``) on the flow and on every worker; credentials come from the environment or the
file system's own configuration, never from the spec (docs/scale.md).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from crowdflow.contracts.errors import InputError
from crowdflow.contracts.tables import TableSchema
from crowdflow.storage.io import LoadedTable, read_frame

log = logging.getLogger(__name__)

_PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")


@dataclass(frozen=True)
class Partition:
    """One Parquet file of a partitioned input.

    Attributes
    ----------
    path : str
        The file (a local path or a path on the fsspec file system of ``url``).
    index : int
        Position in the dataset's sorted file list (0-based); messages and output parts use it.
    dataset : str
        The dataset as the spec names it (for messages).
    n_bytes : int
        The file's size.
    protocol : str
        ``"file"`` for a local file, else the fsspec protocol (``s3``, ``gs``…).
    storage_options : tuple of (str, value)
        Options of the fsspec file system (sorted items, so the partition is hashable and picklable).
    """

    path: str
    index: int
    dataset: str
    n_bytes: int
    protocol: str = "file"
    storage_options: tuple[tuple[str, Any], ...] = ()

    @property
    def name(self) -> str:
        """How messages name the file: its path, with the URL scheme for a remote one."""
        return self.path if self.protocol == "file" else f"{self.protocol}://{self.path}"


def is_url(path: str) -> bool:
    """``True`` for an fsspec URL (``scheme://…``), which is read where it lives, never copied."""
    return "://" in path


def _visible(rel: str) -> bool:
    return not any(part.startswith((".", "_")) for part in rel.replace("\\", "/").split("/"))


def list_partitions(
    source: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> list[Partition]:
    """The Parquet files of a dataset, sorted by path (file names and sizes only; no row is read).

    Parameters
    ----------
    source : str or PathLike
        A local folder, a single Parquet file, or an fsspec URL of either.
    storage_options : mapping, optional
        Options of the fsspec file system of a URL.

    Returns
    -------
    list of Partition

    Raises
    ------
    InputError
        The source does not exist, cannot be listed, or holds no Parquet file.
    """
    text = str(source)
    opts = tuple(sorted((storage_options or {}).items()))
    if is_url(text):
        import fsspec

        try:
            fs, root = fsspec.core.url_to_fs(text, **dict(opts))
            protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
            if fs.isfile(root):
                found = {root: fs.info(root)}
            else:
                found = fs.find(root, detail=True)
        except ImportError as exc:
            raise InputError(
                f"cannot open the dataset: {exc} (install the file system's fsspec package on the flow and the "
                "workers)",
                path=text,
            ) from None
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot list the dataset: {exc}", path=text) from None
        protocol = "file" if protocol == "local" else protocol
        rows = [
            (p, int(info.get("size") or 0))
            for p, info in found.items()
            if p.endswith(_PARQUET_SUFFIXES) and _visible(os.path.relpath(p, root) if p != root else Path(p).name)
        ]
    else:
        root_path = Path(text)
        if not root_path.exists():
            raise InputError("dataset not found", path=text)
        protocol = "file"
        if root_path.is_file():
            rows = [(str(root_path), root_path.stat().st_size)]
        else:
            rows = [
                (str(p), p.stat().st_size)
                for p in root_path.rglob("*")
                if p.is_file() and p.suffix in _PARQUET_SUFFIXES and _visible(str(p.relative_to(root_path)))
            ]
    rows.sort()
    if not rows:
        raise InputError("no Parquet file in this dataset (expected *.parquet files)", path=text)
    parts = [Partition(p, k, text, size, protocol, opts) for k, (p, size) in enumerate(rows)]
    log.info("dataset %s: %d Parquet files, %.1f MB", text, len(parts), sum(p.n_bytes for p in parts) / 1e6)
    return parts


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

    try:
        if part.protocol == "file":
            raw = Path(part.path).read_bytes()
        else:
            import fsspec

            fs = fsspec.filesystem(part.protocol, **dict(part.storage_options))
            with fs.open(part.path, "rb") as fh:
                raw = fh.read()
        table = pq.read_table(pa.BufferReader(raw))
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"cannot read Parquet: {exc}", path=part.name) from None
    digest = hashlib.sha256(raw).hexdigest()
    del raw
    loaded = read_frame(table.to_pandas(), schema, columns, source=part.name, fingerprint=False)
    df = loaded.df if wanted is None else loaded.df[[c for c in loaded.df.columns if c in wanted]]
    return LoadedTable(df=df, source=part.name, sha256=digest, format="parquet", renamed=loaded.renamed)


def dataset_fingerprint(parts: list[Partition], digests: list[str]) -> str:
    """SHA-256 over the dataset's files: each file's path relative to the dataset and its content hash, in order."""
    h = hashlib.sha256()
    for part, digest in zip(parts, digests, strict=True):
        root = part.dataset.split("://", 1)[-1].rstrip("/")
        rel = part.path[len(root) :].lstrip("/") if part.path.startswith(root) else part.path
        h.update(rel.encode())
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
    """

    path: str
    partition: int
    n_rows: int
    sha256: str
    found: Any = None


def read_check_copy(
    part: Partition,
    schema: TableSchema,
    folder: str,
    columns: Mapping[str, str] | None = None,
    check: Callable[[LoadedTable], Any] | None = None,
) -> CopiedPartition:
    """Read one file (:func:`read_partition`), run ``check`` on it, write its canonical columns to ``folder``.

    The first pass of a job that reads its input several times (a robust ranking): the contract's coercion and the
    validation run once, where the file is read; every later pass reads the compact copy.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    loaded = read_partition(part, schema, columns)
    found = check(loaded) if check is not None else None
    out = Path(folder) / f"part-{part.index:06d}.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(loaded.df, preserve_index=False), out)
    return CopiedPartition(str(out), part.index, len(loaded.df), loaded.sha256, found)


def read_copy(path: str) -> pd.DataFrame:
    """A canonical copy written by :func:`read_check_copy`."""
    import pyarrow.parquet as pq

    frame: pd.DataFrame = pq.read_table(path).to_pandas()
    return frame
