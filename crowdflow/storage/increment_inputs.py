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

import contextlib
import hashlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from crowdflow.contracts.errors import InputError
from crowdflow.contracts.tables import INPUTS
from crowdflow.storage.datasets import read_partition
from crowdflow.storage.increments import (
    FileEntry,
    Fold,
    State,
    SumsRule,
    commit_state,
    drop_erased,
    read_state,
    state_lock,
    stored_rows,
    update_fold,
    write_stats,
    write_table,
)
from crowdflow.storage.io import LoadedTable
from crowdflow.storage.listing import Partition, list_partitions

log = logging.getLogger(__name__)

__all__ = ["Assembled", "assemble", "folded_input", "matches_partition", "merge_folds", "new_rows_source"]


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
    rows_read : int or None
        Rows of the files read now when they were checked file by file and not kept (``assemble(check=...)`` with
        ``rows=False``: ``new_rows`` is then empty); ``None``: ``new_rows`` holds them.
    stored_rows_read : int
        Rows read back from the store's per-file row copies by the assembly (0 for a folded run: ``rows=False``);
        the manifest adds those a fold read to sum a format-1 store's files (``Fold.rows_read``).
    rows_total : int or None
        Rows of every file of the dataset now (the stored files' counts plus the new rows); ``None``: ``table``
        holds every row.
    fold : Fold or None
        With a sums rule: the kind's sums folded over every file (:func:`crowdflow.storage.increments.update_fold`).
    """

    table: LoadedTable
    new_rows: pd.DataFrame
    files: dict[str, FileEntry]
    read: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    erased_rows: int = 0
    fold: Fold | None = None
    stored_rows_read: int = 0
    rows_total: int | None = None
    rows_read: int | None = None

    @property
    def n_new_rows(self) -> int:
        """Rows of the files read now (held in ``new_rows`` or, streamed, counted)."""
        return len(self.new_rows) if self.rows_read is None else self.rows_read

    def record(self) -> dict[str, Any]:
        """The manifest's account of this input: files read, reused and dropped, rows of erased workers dropped."""
        return {
            "files_read": self.read,
            "files_reused": self.reused,
            "files_dropped": self.dropped,
            "rows_read": self.n_new_rows,
            "rows": self.table.n_rows if self.rows_total is None else self.rows_total,
            "stored_rows_read": self.stored_rows_read + (self.fold.rows_read if self.fold is not None else 0),
            "erased_rows_dropped": self.erased_rows,
            **(
                {
                    "fold": {
                        "rule": self.fold.record["rule"],
                        "how": self.fold.how,
                        "files_added": self.fold.added,
                        "files_removed": self.fold.removed,
                    }
                }
                if self.fold is not None
                else {}
            ),
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
    rule: SumsRule | None = None,
    rows: bool = True,
    check: Callable[[pd.DataFrame, str], object] | None = None,
    defer: bool = False,
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
    rule : SumsRule, optional
        The kind's per-file sums: each new file's sums are stored beside its rows and folded with the stored ones
        (``Assembled.fold``).
    rows : bool
        False: the stored files' rows are not read (``table`` holds the new rows only); with a ``rule`` the fold is
        then the run's whole statistic, and the run costs the new files plus one pass over the fold.
    check : callable, optional
        Called as ``check(rows, path)`` on each new file's rows (erased workers' rows dropped) before its statistics
        are stored; an exception stops the assembly (nothing is committed). With ``rows=False`` the new files are
        then streamed: each file's rows are dropped once checked and summed, so memory is one file's rows plus the
        sums whatever the number of new files (a first run over a long history); ``new_rows`` is empty and
        ``rows_read`` counts them.
    defer : bool
        A stored fold kept in parts is not read: the new and removed files' sums are handed back in ``fold``
        (:func:`crowdflow.storage.increments.update_fold`) for the caller to fold into the parts they touch.

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
    streamed = check is not None and not rows
    n_read = 0
    from_store = 0
    total = 0
    outer = hashlib.sha256()
    for part in parts:
        rel = part.rel or Path(part.path).name
        sha = _file_sha(part)
        outer.update(part.rel.encode())
        outer.update(sha.encode())
        entry = files.get(sha) or stored.get(sha)
        if entry is not None and (sha in files or not matches_partition(rel, refresh)):
            if rows:
                frames.append(stored_rows(folder, kind, entry))
                from_store += entry.rows
            reused.append(rel)
            total += entry.rows
        else:
            loaded = read_partition(part, INPUTS[kind], columns)
            if loaded.sha256 != sha:
                raise InputError("the file changed while it was read; run again", path=part.name)
            df, n = drop_erased(state, loaded.df, kind)
            del loaded
            erased += n
            if check is not None:
                check(df, part.path)
            entry = write_stats(folder, kind, sha, df, epoch)
            if rule is not None:
                sums = rule.sums(df)
                name = write_table(folder, kind, f"{sha}-e{epoch}.sums.parquet", sums)
                entry = FileEntry(sha, entry.stats, entry.rows, (), name, rule.exact(sums))
            if not streamed:
                new_frames.append(df)
                frames.append(df)
            read.append(rel)
            total += len(df)
            n_read += len(df)
            del df
        paths = tuple(sorted({*(files[sha].paths if sha in files else ()), rel}))  # where it is now, not was
        files[sha] = entry.at(paths)
    fold = update_fold(folder, kind, state, files, rule, epoch, defer) if rule is not None else None
    if fold is not None:
        files = fold.files
    if streamed and read:
        table = _empty_like(folder, kind, files[next(iter(files))])
    elif frames:
        table = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].reset_index(drop=True)
    else:
        table = _empty_like(folder, kind, next(iter(files.values())))
    new_rows = pd.concat(new_frames, ignore_index=True) if new_frames else table.iloc[:0]
    seen = {p for e in files.values() for p in e.paths}
    dropped = sorted({p for sha, e in stored.items() if sha not in files for p in e.paths} - seen)
    log.info(
        "incremental %s: %d files read (%d rows), %d reused, %d dropped", kind, len(read), n_read,
        len(reused), len(dropped),
    )  # fmt: skip
    loaded_table = LoadedTable(df=table, source=str(src), sha256=outer.hexdigest(), format="parquet")
    return Assembled(
        loaded_table,
        new_rows,
        files,
        read,
        reused,
        dropped,
        erased,
        fold,
        from_store,
        None if rows else total,
        n_read if streamed else None,
    )


def merge_folds(
    base: Mapping[str, dict[str, Any]], more: Mapping[str, dict[str, Any] | None]
) -> dict[str, dict[str, Any]]:
    """``base`` updated by ``more``; a key set to None in ``more`` is removed (a table a new layout no longer keeps)."""
    out = dict(base)
    for key, rec in more.items():
        if rec is None:
            out.pop(key, None)
        else:
            out[key] = rec
    return out


def _empty_like(folder: str | Path, kind: str, entry: FileEntry) -> pd.DataFrame:
    """No rows, with the columns of a stored file (a folded run with no new file): its schema only, no row read."""
    out: pd.DataFrame = pq.read_schema(Path(folder) / kind / entry.stats).empty_table().to_pandas()
    return out


def new_rows_source(folder: str | Path, read: Sequence[str]) -> str:
    """How messages name the rows read now: the one new file, or the folder and the new files' paths in it."""
    if len(read) == 1:
        return str(Path(folder) / read[0])
    return f"{folder} (new files {', '.join(read[:5])}{', …' if len(read) > 5 else ''}; rows counted across them)"


def _keep_none(rows: pd.DataFrame, path: str) -> None:
    """The check of a streamed assembly without validation: nothing to check, the rows are not kept."""


@contextlib.contextmanager
def folded_input(
    folder: str | os.PathLike[str],
    source: str | os.PathLike[str],
    kind: str,
    rule: SumsRule,
    columns: Mapping[str, str] | None = None,
    refresh: Sequence[str] = (),
    run_id: str | None = None,
    timeout: float = 600.0,
    more_folds: dict[str, dict[str, Any] | None] | None = None,
    stream_until: str | None = None,
    defer: bool = False,
) -> Iterator[Assembled]:
    """A run on folded sums: the store's lock held, the new files read and folded, the state committed at the end.

    Yields the :class:`Assembled` input of :func:`assemble` with ``rows=False``: ``fold.table`` is the statistic
    of every file of ``source``, ``new_rows`` the rows read now. The new state is committed when the body returns
    (after it wrote its outputs); an exception or a kill leaves the previous state, and the files written for the
    uncommitted one are garbage that the next commit removes. ``more_folds``: a dict the body may fill with
    further stored tables of the run (state ``folds`` entries, e.g. the skills worker fold), committed with it.
    ``stream_until``: while the state holds no ``folds`` entry of this key, the new files are streamed (each
    dropped once summed, ``new_rows`` empty: :func:`assemble` with a ``check``), as a first run over a long history
    must be. ``defer``: see :func:`assemble` (the body then commits the parts' record under ``kind`` in
    ``more_folds``); a ``more_folds`` entry set to None removes that key from the state.
    """
    with state_lock(folder, timeout):
        state = read_state(folder)
        stream = stream_until is not None and stream_until not in state.folds
        check = _keep_none if stream else None
        got = assemble(
            Path(folder), state, Path(source), kind, columns, refresh, rule=rule, rows=False, check=check, defer=defer
        )
        yield got
        assert got.fold is not None
        folds = merge_folds(state.folds, {kind: got.fold.record, **(more_folds or {})})
        commit_state(folder, state, {**state.files, kind: got.files}, run_id, folds=folds)
