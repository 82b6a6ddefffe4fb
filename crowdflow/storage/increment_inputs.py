"""An input table assembled from the increment store plus the files it has not seen (``incremental: true``).

:func:`assemble` lists the dataset (:func:`crowdflow.storage.listing.list_partitions`, the one listing every reader
uses), hashes each file's bytes, takes the rows of every file whose content hash the store holds from its stats
file, reads only the other files (:func:`crowdflow.storage.datasets.read_partition`: the same column mapping and
coercion as a full read) and stores their rows. The table is the files' rows **in the dataset's listing order**, so
it is the table a full read of the folder gives (less the rows of erased workers): every fit downstream receives
the same rows in the same order and returns the same tables, bit for bit, whatever its method. Files that vanished
or changed drop out (their stored rows are no longer named by the state the run commits); ``refresh`` names
partitions to re-read even when their bytes are unchanged (a backfill).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from crowdflow.contracts.errors import InputError
from crowdflow.contracts.tables import INPUTS
from crowdflow.storage.datasets import read_partition
from crowdflow.storage.increments import FileEntry, State, drop_erased, stored_rows, write_stats
from crowdflow.storage.io import LoadedTable
from crowdflow.storage.listing import Partition, list_partitions

log = logging.getLogger(__name__)

__all__ = ["Assembled", "assemble", "matches_partition", "new_rows_source"]


@dataclass(frozen=True)
class Assembled:
    """An input assembled from the store and the new files.

    Attributes
    ----------
    table : LoadedTable
        Every file's rows in listing order; ``sha256`` is the dataset's fingerprint as a full read computes it.
    new_rows : pandas.DataFrame
        The rows of the files read now (what this run validates).
    files : dict
        Content sha256 → :class:`FileEntry` of every file of the dataset now (the state the run commits).
    read, reused, dropped : list of str
        Paths (relative to the dataset) read now, taken from the store, and stored files no longer in the dataset.
    erased_rows : int
        Rows of erased workers dropped from the new files.
    """

    table: LoadedTable
    new_rows: pd.DataFrame
    files: dict[str, FileEntry]
    read: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    erased_rows: int = 0

    def record(self) -> dict[str, Any]:
        """The manifest's account of this input: files read, reused and dropped, rows of erased workers dropped."""
        return {
            "files_read": self.read,
            "files_reused": self.reused,
            "files_dropped": self.dropped,
            "rows_read": len(self.new_rows),
            "rows": self.table.n_rows,
            "erased_rows_dropped": self.erased_rows,
        }


def matches_partition(rel: str, wanted: Sequence[str]) -> bool:
    """A file belongs to a named partition: its relative path starts with it or has it as one folder (``day=…``)."""
    parts = rel.split("/")
    return any(rel == w or rel.startswith(w.rstrip("/") + "/") or w.strip("/") in parts for w in wanted)


def _file_sha(part: Partition) -> str:
    h = hashlib.sha256()
    with Path(part.path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def assemble(
    folder: str | Path,
    state: State,
    source: str | Path,
    kind: str,
    columns: Mapping[str, str] | None = None,
    refresh: Sequence[str] = (),
) -> Assembled:
    """The ``kind`` table of the local Parquet file or folder ``source``, from the store in ``folder`` plus new files.

    Parameters
    ----------
    folder : path
        The increment store (:func:`crowdflow.storage.increments.state_dir`).
    state : State
        The committed state the run started from (read under the store's lock).
    source : path
        A local Parquet file or folder (the spec's input, resolved).
    kind : str
        The input kind (``labels``, ``comparisons``).
    columns : mapping, optional
        The spec's column mapping.
    refresh : sequence of str
        Partitions to re-read even when their content hash is stored (a backfill).

    Raises
    ------
    InputError
        The source is not a local Parquet dataset, or a file cannot be read (naming it).
    """
    src = Path(source)
    if not src.exists():
        raise InputError("dataset not found", path=str(src))
    if src.is_file() and src.suffix.lower() not in (".parquet", ".pq", ".parq"):
        raise InputError("incremental runs read a Parquet file or a folder of Parquet files", path=str(src))
    parts = list_partitions(src)
    if not parts:
        raise InputError("no data rows: every Parquet file of this folder is empty", path=str(src))
    stored = state.files.get(kind, {})
    epoch = len(state.erasures)
    frames: list[pd.DataFrame] = []
    new_frames: list[pd.DataFrame] = []
    files: dict[str, FileEntry] = {}
    read: list[str] = []
    reused: list[str] = []
    erased = 0
    outer = hashlib.sha256()
    for part in parts:
        rel = part.rel or Path(part.path).name
        sha = _file_sha(part)
        outer.update(part.rel.encode())
        outer.update(sha.encode())
        entry = files.get(sha) or stored.get(sha)
        if entry is not None and (sha in files or not matches_partition(rel, refresh)):
            df = stored_rows(folder, kind, entry)
            reused.append(rel)
        else:
            loaded = read_partition(part, INPUTS[kind], columns)
            if loaded.sha256 != sha:
                raise InputError("the file changed while it was read; run again", path=part.name)
            df, n = drop_erased(state, loaded.df, kind)
            erased += n
            entry = write_stats(folder, kind, sha, df, epoch)
            new_frames.append(df)
            read.append(rel)
        paths = tuple(sorted({*files.get(sha, entry).paths, rel}))
        files[sha] = FileEntry(sha, entry.stats, entry.rows, paths)
        frames.append(df)
    table = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].reset_index(drop=True)
    new_rows = pd.concat(new_frames, ignore_index=True) if new_frames else table.iloc[:0]
    seen = {p for e in files.values() for p in e.paths}
    dropped = sorted({p for sha, e in stored.items() if sha not in files for p in e.paths} - seen)
    log.info(
        "incremental %s: %d files read (%d rows), %d reused, %d dropped", kind, len(read), len(new_rows),
        len(reused), len(dropped),
    )  # fmt: skip
    loaded_table = LoadedTable(df=table, source=str(src), sha256=outer.hexdigest(), format="parquet")
    return Assembled(loaded_table, new_rows, files, read, reused, dropped, erased)


def new_rows_source(folder: str | Path, read: Sequence[str]) -> str:
    """How messages name the rows read now: the one new file, or the folder and the new files' paths in it."""
    if len(read) == 1:
        return str(Path(folder) / read[0])
    return f"{folder} (new files {', '.join(read[:5])}{', …' if len(read) > 5 else ''}; rows counted across them)"
