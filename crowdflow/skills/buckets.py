"""Labels in task buckets: the per-partition work of a partitioned skills run (runs on any worker process).

A partitioned run (docs/scale.md, :mod:`crowdflow.skills.partitioned`) never holds the labels in one process.
Its passes over the data are the functions here, each sent to a worker with a file path and small arguments:

1. :func:`split_labels` — one input file: rows go to bucket ``h(task) mod B`` (a fixed hash of the task id),
   so every task lies in exactly one bucket; returns the file's distinct workers and labels;
2. :func:`encode_bucket` — one bucket: its pieces (in input order) are encoded with the run's global worker
   and class dictionaries, the duplicate policy applied, the task ids written (``tasks.parquet``) and the codes
   kept for the executor to hold in memory (:class:`~crowdflow.skills.held.HeldCodes`; or, for an executor that
   holds nothing, written to ``codes.parquet`` and read again by every pass), and the bucket's sums returned:
   labels per worker, tasks and labels, the parity forest and strengths (or for pgd the packed co-label counts
   P = N + 2³²·Agree, W×W);
3. one or more passes over the held codes (:func:`crowdflow.skills.held.em_sums` per Dawid–Skene iteration, then
   one consensus pass: :func:`ds_consensus`, :func:`mv_consensus` or :func:`weighted_consensus_pass`), each
   returning sums over the bucket's tasks and writing its consensus rows as one Parquet part.

Every sum is over tasks, so the sum over buckets is the statistic of all the labels: integer counts exactly,
floating-point sums up to their order of addition (docs/methods/skills.md §4.3).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.contracts.errors import InputError
from crowdflow.contracts.tables import OUTPUTS
from crowdflow.graphs import ParityForest, pair_counts, worker_strength
from crowdflow.labels import DuplicatePolicy, LabelMatrix, natural_order
from crowdflow.metrics import ReviewPart, review_part
from crowdflow.skills.coded import task_worker_order
from crowdflow.skills.consensus import weighted_consensus
from crowdflow.skills.dawid_skene import _pick
from crowdflow.skills.held import HeldCodes, by_activity, held_codes, label_row_major, posteriors
from crowdflow.skills.identifiability import labels_and_tasks_per_component
from crowdflow.skills.majority import majority_vote
from crowdflow.skills.moments import pack_counts
from crowdflow.skills.types import Fallback, TieBreak

log = logging.getLogger(__name__)

_CODES, _TASKS = "codes.parquet", "tasks.parquet"


def task_buckets(task: np.ndarray | pd.Series, n_buckets: int) -> np.ndarray:
    """Bucket of every row: a fixed 64-bit hash of the task id's text mod ``n_buckets`` (the same in every process)."""
    h = pd.util.hash_array(np.asarray(task, dtype=object), categorize=True)
    return (h % np.uint64(n_buckets)).astype(np.int64)


@dataclass(frozen=True)
class SplitSummary:
    """What :func:`split_labels` found in one input file.

    Attributes
    ----------
    partition : int
        The file's index in the dataset.
    n_rows, n_dropped_null : int
        Rows read, and rows without a task, worker or label (not used, as in an in-memory run).
    workers, labels : pyarrow.Array
        Distinct worker ids and label texts of the file (Arrow strings: an offset and the bytes of each id, never
        a Python object per id, in the message back to the flow and in the flow's running union,
        :class:`crowdflow.skills.partitioned.IdUnion`).
    sha256 : str
        The file's content hash (set by the reader; empty for a table given in memory).
    """

    partition: int
    n_rows: int
    n_dropped_null: int
    workers: Any
    labels: Any
    sha256: str = ""


@dataclass(frozen=True)
class CodedPiece:
    """One file's rows of one task bucket as codes: each id column as int32 codes into the piece's own distinct
    texts (first-seen order), and each row's 1-based row number in its file (for the duplicate error; int32 when the
    file has fewer than 2³¹ rows).

    16 bytes a label and the piece's distinct texts (≈ 38 bytes a label as Arrow text before): what a worker holds
    between the read and the encode, and what moves to the worker that encodes the bucket.
    """

    partition: int
    tasks: Any
    task_idx: np.ndarray
    workers: Any
    worker_idx: np.ndarray
    labels: Any
    label_idx: np.ndarray
    rows: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.rows.size)

    def text(self) -> Any:
        """The piece as the text table of :func:`bucket_order` (``task, worker, label`` and ``row``)."""
        import pyarrow as pa

        return pa.table(
            {
                "task": self.tasks.take(pa.array(self.task_idx)),
                "worker": self.workers.take(pa.array(self.worker_idx)),
                "label": self.labels.take(pa.array(self.label_idx)),
                "row": pa.array(self.rows.astype(np.int64)),
            }
        )


def coded_piece(partition: int, table: Any) -> CodedPiece:
    """A text piece (Arrow ``task, worker, label, row``, as :func:`bucket_order` slices it) as a :class:`CodedPiece`."""
    import pyarrow.compute as pc

    cols: dict[str, Any] = {}
    for name in ("task", "worker", "label"):
        enc = pc.dictionary_encode(table.column(name).combine_chunks())
        cols[name + "s"] = enc.dictionary
        cols[name + "_idx"] = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int32)
    rows = np.asarray(table.column("row").to_numpy(), dtype=np.int64)
    return CodedPiece(partition=partition, rows=rows, **cols)


def bucket_order(labels: pd.DataFrame, n_buckets: int) -> tuple[Any, np.ndarray, int]:
    """One file's canonical labels as one Arrow table in bucket order (``task, worker, label`` text and the file's
    1-based ``row``) and the bucket bounds: bucket b's rows are ``table[bounds[b]:bounds[b+1]]``; with the rows read
    (before the rows with a missing task, worker or label are dropped)."""
    import pyarrow as pa

    n_rows = len(labels)
    df = labels[["task", "worker", "label"]].dropna()
    # hash each distinct task once (the same 64-bit hash of the text as task_buckets row by row), then gather
    codes, uniques = pd.factorize(df["task"], use_na_sentinel=True)
    bucket = task_buckets(np.asarray(uniques, dtype=object), n_buckets)[codes]
    order = np.argsort(bucket, kind="stable")
    bounds = np.searchsorted(bucket[order], np.arange(n_buckets + 1))
    table = pa.table(
        {
            "task": _text_array(df["task"]),
            "worker": _text_array(df["worker"]),
            "label": _text_array(df["label"]),
            "row": pa.array(df.index.to_numpy(dtype=np.int64) + 1),
        }
    ).take(pa.array(order))  # one gather in bucket order; each bucket's rows are then a zero-copy slice
    return table, bounds, n_rows


def split_summary(table: Any, partition: int, n_rows: int) -> SplitSummary:
    """The :class:`SplitSummary` of a file's table of :func:`bucket_order`."""
    return SplitSummary(
        partition=partition,
        n_rows=n_rows,
        n_dropped_null=n_rows - int(table.num_rows),
        workers=_distinct_text(table.column("worker")),
        labels=_distinct_text(table.column("label")),
    )


def split_labels(labels: pd.DataFrame, partition: int, folder: str, n_buckets: int) -> SplitSummary:
    """Write one input file's labels into the task buckets under ``folder`` (``bucket-<b>/part-<partition>.parquet``).

    Parameters
    ----------
    labels : pandas.DataFrame
        Canonical ``task, worker, label`` text columns of one file (``crowdflow.storage.datasets.read_partition``).
    partition : int
        The file's index (orders the pieces of a bucket as the input is ordered).
    folder : str
        The run's scratch folder for buckets (visible to every worker).
    n_buckets : int
        B ≥ 1.
    """
    import pyarrow.parquet as pq

    table, bounds, n_rows = bucket_order(labels, n_buckets)
    for b in range(n_buckets):
        start, stop = int(bounds[b]), int(bounds[b + 1])
        if stop == start:
            continue
        out = Path(folder) / f"bucket-{b:05d}"
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.slice(start, stop - start), out / f"part-{partition:06d}.parquet")
    return split_summary(table, partition, n_rows)


def _codes_in(column: Any, ids: np.ndarray) -> np.ndarray:
    """Position of each value of an Arrow text column in ``ids`` (hash lookup in Arrow), -1 where absent."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found = pc.index_in(column, value_set=pa.array(np.asarray(ids, dtype=object).astype(str), pa.string()))
    return np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)


def _text_array(column: pd.Series) -> Any:
    """A text column as an Arrow ``string`` array (zero-copy for Arrow-backed strings, else converted once)."""
    import pyarrow as pa

    if isinstance(column.dtype, (pd.ArrowDtype, pd.StringDtype)):
        arr = pa.array(column)
    else:
        arr = pa.array(column.to_numpy(dtype=object), pa.string())
    return arr.cast(pa.string()) if arr.type != pa.string() else arr


def _distinct_text(column: Any) -> Any:
    """Distinct values of an Arrow text column, as one Arrow ``string`` array (first-seen order)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found = pc.unique(column)
    return found.combine_chunks() if isinstance(found, pa.ChunkedArray) else found


@dataclass(frozen=True)
class BucketStats:
    """Sums over one bucket's tasks (:func:`encode_bucket`).

    Attributes
    ----------
    path : str
        The bucket's folder (its codes are read by every later pass).
    n_tasks, n_labels, n_dropped : int
        Tasks, labels kept, and duplicate (task, worker) rows dropped by the policy.
    packed : scipy.sparse.csr_matrix or None
        P = N + 2³²·Agree (W×W int64) of the bucket; None when the run forms no pair (``pairs=False``).
    labels_per_worker : numpy.ndarray
        n_i (int64, length W).
    forest : ParityForest or None
        The parity union-find of the bucket's tasks (O(W); ``pairs=False``), merged over buckets in the flow.
    strength : numpy.ndarray or None
        Σ_{t∋i} (k_t − 1) over the bucket's tasks (``pairs=False``): the row sums of N, summed over buckets.
    """

    path: str
    n_tasks: int
    n_labels: int
    n_dropped: int
    packed: sp.csr_matrix | None
    labels_per_worker: np.ndarray
    forest: ParityForest | None = None
    strength: np.ndarray | None = None
    codes: HeldCodes | None = None


@dataclass(frozen=True)
class EncodeArgs:
    """What every bucket's encode gets (shared once per pass: the W worker ids are the large part).

    ``keep`` True: the codes are returned in :attr:`BucketStats.codes` to be held in memory (nothing written but
    the task ids); False: they are written to ``codes.parquet`` for every later pass to read.
    """

    workers: Any
    classes: np.ndarray
    duplicates: DuplicatePolicy
    file_names: list[str]
    pairs: bool
    keep: bool

    def value_sets(self) -> tuple[Any, Any]:
        """The worker and class dictionaries as Arrow strings, built once per process that holds these arguments
        (the encode of every bucket looks its pieces' ids up in them)."""
        got = self.__dict__.get("_value_sets")
        if got is None:
            got = (_value_set(self.workers), _value_set(self.classes))
            object.__setattr__(self, "_value_sets", got)
        return cast(tuple[Any, Any], got)


def encode_shared(folder: str, args: EncodeArgs) -> BucketStats:
    """:func:`encode_bucket` with the shared arguments (the item function of the encode pass)."""
    return encode_bucket(folder, args.workers, args.classes, args.duplicates, args.file_names, args.pairs, args.keep)


def stats_only(stats: BucketStats) -> BucketStats:
    """The sums of a held encode, without its codes (what goes back to the flow)."""
    return replace(stats, codes=None)


def codes_only(stats: BucketStats) -> HeldCodes:
    """The codes of a held encode (what stays held for the passes)."""
    assert stats.codes is not None
    return stats.codes


def codes_by_activity(stats: BucketStats, order: np.ndarray) -> HeldCodes:
    """The codes of a held encode with the workers numbered by activity (:func:`crowdflow.skills.held.by_activity`;
    ``order`` the run's, from the summed label counts)."""
    return by_activity(codes_only(stats), order)


def _duplicates(
    key: np.ndarray, order: np.ndarray, policy: DuplicatePolicy, frame: Callable[[], pd.DataFrame]
) -> tuple[np.ndarray, int]:
    same = key[1:] == key[:-1]
    if not same.any():
        return order, 0
    if policy == "error":
        in_dup = np.zeros(key.size, dtype=bool)
        in_dup[1:] |= same
        in_dup[:-1] |= same
        rows = np.sort(order[in_dup])
        rows_df = frame()
        task, worker, file, row = (rows_df[c].to_numpy() for c in ("task", "worker", "file", "row"))
        ex = ", ".join(f"(task={task[r]}, worker={worker[r]}: {file[r]} row {row[r]})" for r in rows[:5])
        raise InputError(
            f"{rows.size} rows repeat a (task, worker) pair, e.g. {ex}; "
            "set duplicates: keep_last or keep_first in the spec to keep one answer per pair",
            column="task,worker",
        )
    keep = np.ones(key.size, dtype=bool)
    if policy == "keep_last":
        keep[:-1] = ~same  # stable order: the last of a run is the last in input order
    else:
        keep[1:] = ~same
    return order[keep], int(key.size - keep.sum())


def encode_bucket(
    folder: str,
    workers: Any,
    classes: np.ndarray,
    duplicates: DuplicatePolicy,
    file_names: list[str],
    pairs: bool = True,
    keep: bool = False,
) -> BucketStats:
    """Encode one bucket with the global dictionaries, write (or keep) its codes, return its sums (pass 2).

    Pieces are read in input-file order, so ``keep_first``/``keep_last`` keep the answer an in-memory run
    keeps. Tasks get local codes in :func:`~crowdflow.labels.natural_sort` order; entries are sorted by
    (task, worker) like :func:`~crowdflow.labels.encode_canonical`, so every per-task sum runs in the order
    of an in-memory run.

    Parameters
    ----------
    folder : str
        ``bucket-<b>`` folder of :func:`split_labels`.
    workers : pyarrow.Array or numpy.ndarray
        The run's sorted worker ids (position = code): Arrow strings from the run's dictionary, or ids.
    classes : numpy.ndarray
        The run's sorted classes (position = code).
    duplicates : {"error", "keep_last", "keep_first"}
    file_names : list of str
        Input file names by partition index (for the duplicate message).
    pairs : bool
        True: return the bucket's packed co-label counts (O(pairs of the bucket), for PGD); False: its parity
        forest and worker strengths instead (O(W), never a pair; docs/scale.md, memory laws).
    keep : bool
        True: the codes are returned as :attr:`BucketStats.codes` (:class:`~crowdflow.skills.held.HeldCodes`, to be
        held in memory by the executor) and not written; False: written to ``codes.parquet``.
    """
    import pyarrow.parquet as pq

    pieces = sorted(Path(folder).glob("part-*.parquet"))
    parts = [pq.read_table(piece) for piece in pieces]
    origin = [(int(p.stem.split("-")[1]), t.num_rows) for p, t in zip(pieces, parts, strict=True)]
    return encode_table(folder, parts, origin, workers, classes, duplicates, file_names, pairs, keep)


def encode_table(
    folder: str,
    parts: list[Any],
    origin: list[tuple[int, int]],
    workers: Any,
    classes: np.ndarray,
    duplicates: DuplicatePolicy,
    file_names: list[str],
    pairs: bool = True,
    keep: bool = False,
) -> BucketStats:
    """:func:`encode_bucket` on the bucket's pieces given as Arrow text tables (``task, worker, label, row``), in
    input-file order, ``origin`` the (file index, rows) of each piece: :func:`encode_pieces` on them as codes."""
    pieces = [coded_piece(i, t) for (i, _), t in zip(origin, parts, strict=True)]
    return encode_pieces(folder, pieces, workers, classes, duplicates, file_names, pairs, keep)


def _value_set(ids: Any) -> Any:
    import pyarrow as pa

    if isinstance(ids, pa.Array):  # the run's worker dictionary (IdUnion.finish): already the ids' text
        return ids.cast(pa.string())
    return pa.array(np.asarray(ids, dtype=object).astype(str), pa.string())


def _bucket_tasks(pieces: list[CodedPiece]) -> tuple[np.ndarray, np.ndarray]:
    """The bucket's task code of every row (pieces in order) and its task ids, in :func:`natural_sort` order (the
    codes and ids :func:`~crowdflow.labels.factorize_ids` gives the bucket's task column): the pieces' distinct
    texts united by Arrow, sorted once."""
    import pyarrow as pa
    import pyarrow.compute as pc

    texts = pa.concat_arrays([p.tasks for p in pieces]) if pieces else pa.array([], pa.string())
    enc = pc.dictionary_encode(texts)
    of_text = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    ids = enc.dictionary
    first = ids[0].as_py() if len(ids) else ""
    try:
        float(first)
        numeric = True
    except ValueError:
        numeric = False
    if numeric or pc.any(pc.match_substring(ids, "\x00")).as_py():  # natural_order decides (numpy's text order
        # ignores trailing NULs, Arrow's does not)
        obj = np.asarray(ids.to_numpy(zero_copy_only=False), dtype=object)
        order = natural_order(obj)
    else:  # some id is not a number: text order, which Arrow's byte order of UTF-8 is (code points)
        order = np.asarray(pc.sort_indices(ids), dtype=np.int64)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    starts = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum([len(p.tasks) for p in pieces], out=starts[1:])
    task_idx = np.concatenate(
        [rank[of_text[starts[k] + p.task_idx]] for k, p in enumerate(pieces)] or [np.zeros(0, np.int64)]
    )
    return task_idx, np.asarray(ids.take(pa.array(order)).to_numpy(zero_copy_only=False), dtype=object)


def _bucket_codes(pieces: list[CodedPiece], field: str, value_set: Any) -> np.ndarray:
    """Every row's position in the run's dictionary ``value_set`` (-1 where absent): one lookup per distinct text of
    each piece, then a gather."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pieces:
        return np.zeros(0, dtype=np.int64)
    texts = pa.concat_arrays([getattr(p, field) for p in pieces])
    found = pc.index_in(texts, value_set=value_set)
    at = np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    starts = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum([len(getattr(p, field)) for p in pieces], out=starts[1:])
    idx = field[:-1] + "_idx"
    return np.concatenate([at[starts[k] + getattr(p, idx)] for k, p in enumerate(pieces)])


def encode_pieces(
    folder: str,
    pieces: list[CodedPiece],
    workers: Any,
    classes: np.ndarray,
    duplicates: DuplicatePolicy,
    file_names: list[str],
    pairs: bool = True,
    keep: bool = False,
    value_sets: tuple[Any, Any] | None = None,
) -> BucketStats:
    """:func:`encode_bucket` on the bucket's pieces as codes (:class:`CodedPiece`, in input-file order): read from
    the bucket's folder, or kept in memory by the first read (:mod:`crowdflow.skills.pieces`). The same codes and
    sums either way. ``value_sets``: the run's worker and class dictionaries as Arrow arrays, if already built."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    Path(folder).mkdir(parents=True, exist_ok=True)
    w_set, c_set = value_sets if value_sets is not None else (_value_set(workers), _value_set(classes))
    task_idx, tasks = _bucket_tasks(pieces)
    worker_idx = _bucket_codes(pieces, "workers", w_set)
    class_idx = _bucket_codes(pieces, "labels", c_set)
    if (worker_idx < 0).any() or (class_idx < 0).any():
        raise InputError(
            "a worker or label outside the run's dictionaries: an input file changed during the run", path=folder
        )

    def frame() -> pd.DataFrame:  # the rows with their file, only for a duplicate's message
        text = pa.concat_tables([p.text() for p in pieces]).select(["task", "worker", "row"]).to_pandas()
        files = np.repeat([file_names[p.partition] for p in pieces], [p.n_rows for p in pieces])
        rows: pd.DataFrame = text.assign(file=files)
        return rows

    n_workers = len(workers)
    order, key = task_worker_order(task_idx, worker_idx, int(tasks.size), n_workers)
    order, dropped = _duplicates(key, order, duplicates, frame)
    task_idx, worker_idx, class_idx = task_idx[order], worker_idx[order].astype(np.int64), class_idx[order]
    used = np.bincount(task_idx, minlength=tasks.size) > 0
    if not used.all():  # a task whose rows were all dropped cannot happen (one row per pair is kept)
        raise AssertionError("a task lost every label to the duplicate policy")
    held = None
    if keep:
        held = held_codes(str(folder), task_idx, worker_idx, class_idx, int(tasks.size), int(classes.size), n_workers)
    else:  # int32 on disk, read back by every pass (crowdflow.skills.held.read_codes)
        codes = pa.table(
            {
                "task": task_idx.astype(np.int32),
                "worker": worker_idx.astype(np.int32),
                "label": class_idx.astype(np.int32),
            }
        )
        pq.write_table(codes, Path(folder) / _CODES)
    pq.write_table(pa.table({"task": pa.array(tasks, pa.string())}), Path(folder) / _TASKS)
    indptr = np.zeros(tasks.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(task_idx, minlength=tasks.size), out=indptr[1:])
    n_i = np.bincount(worker_idx, minlength=n_workers).astype(np.int64)
    if not pairs:
        return BucketStats(
            str(folder),
            int(tasks.size),
            int(task_idx.size),
            dropped,
            None,
            n_i,
            forest=ParityForest.from_labels(indptr, worker_idx, n_workers),
            strength=worker_strength(indptr, worker_idx, n_workers),
            codes=held,
        )
    n_b, ag_b = pair_counts(indptr, worker_idx, class_idx, n_workers, int(classes.size))
    return BucketStats(
        str(folder), int(tasks.size), int(task_idx.size), dropped, pack_counts(n_b, ag_b), n_i, codes=held
    )


def load_bucket(codes: HeldCodes, n_workers: int, classes: np.ndarray) -> LabelMatrix:
    """The held bucket as a :class:`LabelMatrix` (global worker and class codes, local task codes; the task ids
    read from the bucket's ``tasks.parquet``).

    Its ``workers`` are the global codes (as ids), so any in-memory function of one label matrix runs on it.
    """
    import pyarrow.parquet as pq

    tasks = pq.read_table(Path(codes.path) / _TASKS).column("task").to_numpy(zero_copy_only=False)
    return LabelMatrix(
        workers=np.arange(n_workers).astype(object),
        tasks=np.asarray(tasks, dtype=object),
        classes=classes,
        worker_idx=codes.worker_idx(),
        task_idx=codes.task_idx(),
        class_idx=codes.class_idx(),
    )


@dataclass(frozen=True)
class ConsensusPart:
    """One bucket's consensus (written as a Parquet part) and its sums.

    Attributes
    ----------
    path : str
        The written part.
    n_tasks, n_ties, n_fallback : int
    log_likelihood : float
        Dawid–Skene: the final E-step's log-likelihood of the bucket; else 0.
    agreements : numpy.ndarray
        Per worker, labels equal to the consensus (majority vote's accuracy; length W).
    per_component : (numpy.ndarray, numpy.ndarray)
        Labels and tasks per worker-graph component.
    tasks_with_ok_worker : int
        Tasks with a label from a worker whose status is ok.
    review : ReviewPart
        Gold counts, gold accuracy per worker (workers as global codes) and the changes against majority vote of
        the bucket's tasks (:func:`crowdflow.metrics.review_part`).
    """

    path: str
    n_tasks: int
    n_ties: int
    n_fallback: int
    log_likelihood: float
    agreements: np.ndarray
    per_component: tuple[np.ndarray, np.ndarray]
    tasks_with_ok_worker: int
    review: ReviewPart


def consensus_part_path(folder: str, out_folder: str) -> str:
    """Where the consensus of the bucket ``folder`` is written: ``<out_folder>/part-<b>.parquet``."""
    return str(Path(out_folder) / f"part-{Path(folder).name.split('-')[-1]}.parquet")


def _write_consensus(
    lm: LabelMatrix,
    table: pd.DataFrame,
    out: str,
    winner: np.ndarray,
    n_ties: int,
    n_fallback: int,
    ll: float,
    component: np.ndarray,
    ok: np.ndarray,
    truth: pd.DataFrame | None,
) -> ConsensusPart:
    from crowdflow.storage.run_store import write_final_part

    cols = ["task", "label", "confidence", "n_labels", "fallback"]
    frame = table[cols].reset_index(drop=True)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    # the run's rule for worker parts (missing reasons checked and their column added once there, schema), marked: a
    # flat run's export moves the file; the review below reads the consensus columns only, not ``missing_reason``
    write_final_part(frame, out, "consensus", OUTPUTS["skills"]["consensus"], None)
    agree = np.bincount(
        lm.worker_idx, weights=(lm.class_idx == winner[lm.task_idx]).astype(np.float64), minlength=lm.n_workers
    )
    has_ok = np.bincount(lm.task_idx[ok[lm.worker_idx]], minlength=lm.n_tasks) > 0
    # the review reads only the tasks it can report on: those whose consensus is not a majority label (found here on
    # the integer codes) and the gold tasks; every count it makes is per task, so its sums are those of all the tasks
    keep = _changed_tasks(lm, winner)
    gold = np.zeros(lm.n_tasks, dtype=bool)
    if truth is not None and len(truth):
        truth, gold = bucket_truth(lm.tasks, truth)
        keep |= gold
    rows = keep[lm.task_idx]
    # the text of the gold tasks' labels only: the review reads labels as text only for the gold (gold_by_worker); the
    # changes against majority vote come from the codes (``coded``), so the changed tasks' ~8 % of the labels are not
    # turned into text (the same review as in memory: tests/skills/test_partitioned.py)
    on_gold = gold[lm.task_idx]
    labels = pd.DataFrame(
        {
            "task": lm.tasks[lm.task_idx[on_gold]],
            "worker": lm.worker_idx[on_gold].astype(str),  # global codes; the flow maps them back to ids
            "label": lm.classes[lm.class_idx[on_gold]],
        }
    )
    if len(frame) != lm.n_tasks:
        raise AssertionError("a consensus part has one row per task of its bucket, in task order")
    # the votes of the reviewed tasks from their codes (one bincount), not from the text columns; their tasks renumbered
    # among the reviewed ones, so the review maps its few rows back through an index of those, not of the bucket's
    kept = np.flatnonzero(keep)
    local = np.full(lm.n_tasks, -1, dtype=np.int64)
    local[kept] = np.arange(kept.size)
    coded = replace(
        lm,
        tasks=lm.tasks[kept],
        worker_idx=lm.worker_idx[rows],
        task_idx=local[lm.task_idx[rows]],
        class_idx=lm.class_idx[rows],
    )
    part = review_part(labels, frame.iloc[kept], truth, lm.classes.astype(str).tolist(), coded=coded)
    review = replace(part, n_tasks=lm.n_tasks)
    return ConsensusPart(
        path=out,
        n_tasks=lm.n_tasks,
        n_ties=n_ties,
        n_fallback=n_fallback,
        log_likelihood=ll,
        agreements=agree,
        per_component=labels_and_tasks_per_component(lm, component, int(component.max()) + 1 if component.size else 0),
        tasks_with_ok_worker=int(has_ok.sum()),
        review=review,
    )


def _as_arrow_text(values: np.ndarray) -> Any:
    """An object array of ids as an Arrow ``string`` array of their text (``str(v)``; ids that are already text are
    taken as they are, without numpy's fixed-width copy)."""
    import pyarrow as pa

    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(values.astype(str), pa.string())


def _named_text(column: pd.Series) -> tuple[np.ndarray, Any]:
    """Which values of ``column`` are present, and those values as Arrow text (:func:`_as_arrow_text`). A pandas
    string column is taken as the Arrow array it is (or converts to) without a Python object a row: the gold table's
    task ids are converted once per bucket of every consensus pass (2·10⁵ rows at 10⁸ labels)."""
    import pyarrow as pa

    if isinstance(column.dtype, pd.StringDtype):
        text = pa.array(column.array)
        text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
        text = text.cast(pa.string())
        named = np.asarray(text.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        return named, text.drop_null()
    named = column.notna().to_numpy(dtype=bool)
    return named, _as_arrow_text(column.to_numpy(dtype=object)[named])


def bucket_truth(tasks: np.ndarray, truth: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The gold rows of a bucket's tasks and which of its tasks have one: (the rows of ``truth`` whose task, as text,
    is one of ``tasks``, in their order; per task of ``tasks``, whether a row of ``truth`` names it).

    Ids compare as text (the review's rule, :func:`crowdflow.metrics.gold_metrics`); rows without a task are dropped.
    Two Arrow hash look-ups (``pyarrow.compute.is_in``): the review of a bucket then reads its own gold rows, never
    the whole gold table (a pandas ``isin`` of text built one Arrow scalar per gold row, per bucket: 1.4 s of a
    10⁶-task bucket's consensus with 2·10⁵ gold tasks).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    named, gold_text = _named_text(truth["task"])
    task_text = _as_arrow_text(np.asarray(tasks, dtype=object))
    mine = pc.is_in(gold_text, value_set=task_text).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(named)[mine]
    has_gold = pc.is_in(task_text, value_set=gold_text.filter(pa.array(mine))).to_numpy(zero_copy_only=False)
    return truth.iloc[rows], np.asarray(has_gold, dtype=bool)


def _changed_tasks(lm: LabelMatrix, winner: np.ndarray) -> np.ndarray:
    """Tasks whose consensus class ``winner`` is not one of their most frequent labels (integer codes; the rule of
    :func:`crowdflow.metrics.majority_changes`)."""
    m = max(lm.n_classes, 1)
    counts = np.bincount(lm.task_idx * m + lm.class_idx, minlength=lm.n_tasks * m).reshape(lm.n_tasks, m)
    top = counts.max(axis=1) if m else np.zeros(lm.n_tasks, np.int64)
    ok = (winner >= 0) & (winner < m)
    got = np.where(ok, counts[np.arange(lm.n_tasks), np.clip(winner, 0, m - 1)], -1)
    changed: np.ndarray = got < top
    return changed


def ds_consensus(
    codes: HeldCodes,
    out_folder: str,
    n_workers: int,
    classes: np.ndarray,
    log_pi_t: np.ndarray,
    log_q: np.ndarray,
    tie_break: TieBreak,
    seed: int,
    component: np.ndarray,
    ok: np.ndarray,
    truth: pd.DataFrame | None = None,
) -> ConsensusPart:
    """Final Dawid–Skene E-step of one bucket and its consensus part (label = arg-max posterior)."""
    lm = load_bucket(codes, n_workers, classes)
    post, ll = posteriors(codes, label_row_major(log_pi_t), log_q)
    winner, ties = _pick(post, lm, tie_break, seed)
    table = pd.DataFrame(
        {
            "task": lm.tasks,
            "label": lm.classes[winner],
            "confidence": post[np.arange(lm.n_tasks), winner].astype(np.float64),
            "n_labels": lm.labels_per_task().astype(np.int64),
            "fallback": False,
        }
    )
    return _write_consensus(
        lm, table, consensus_part_path(codes.path, out_folder), winner, ties, 0, ll, component, ok, truth
    )


def mv_consensus(
    codes: HeldCodes,
    out_folder: str,
    n_workers: int,
    classes: np.ndarray,
    tie_break: TieBreak,
    seed: int,
    component: np.ndarray,
    ok: np.ndarray,
    truth: pd.DataFrame | None = None,
) -> ConsensusPart:
    """Majority vote of one bucket (:func:`~crowdflow.skills.majority_vote`) and its consensus part."""
    lm = load_bucket(codes, n_workers, classes)
    mv = majority_vote(lm, tie_break, seed)
    table = mv.consensus.assign(fallback=False)
    return _write_consensus(
        lm, table, consensus_part_path(codes.path, out_folder), mv.winner, mv.n_ties, 0, 0.0, component, ok, truth
    )


def weighted_consensus_pass(
    codes: HeldCodes,
    out_folder: str,
    n_workers: int,
    classes: np.ndarray,
    weights: np.ndarray,
    identified: np.ndarray,
    fallback: Fallback,
    tie_break: TieBreak,
    seed: int,
    component: np.ndarray,
    ok: np.ndarray,
    truth: pd.DataFrame | None = None,
) -> ConsensusPart:
    """MAP weighted vote of one bucket with the broadcast weights (:func:`~crowdflow.skills.weighted_consensus`)."""
    lm = load_bucket(codes, n_workers, classes)
    cons = weighted_consensus(lm, weights, identified=identified, fallback=fallback, tie_break=tie_break, seed=seed)
    winner = pd.Index(lm.classes).get_indexer(cons.consensus["label"].to_numpy())
    return _write_consensus(
        lm,
        cons.consensus,
        consensus_part_path(codes.path, out_folder),
        winner,
        cons.n_ties,
        cons.n_fallback,
        0.0,
        component,
        ok,
        truth,
    )


def bucket_tasks(folder: str) -> int:
    """Tasks of an encoded bucket (for progress messages)."""
    import pyarrow.parquet as pq

    return int(pq.read_metadata(Path(folder) / _TASKS).num_rows)


__all__ = [
    "BucketStats",
    "CodedPiece",
    "ConsensusPart",
    "EncodeArgs",
    "SplitSummary",
    "bucket_order",
    "bucket_tasks",
    "bucket_truth",
    "coded_piece",
    "codes_by_activity",
    "codes_only",
    "consensus_part_path",
    "ds_consensus",
    "encode_bucket",
    "encode_pieces",
    "encode_shared",
    "encode_table",
    "load_bucket",
    "mv_consensus",
    "split_labels",
    "split_summary",
    "stats_only",
    "task_buckets",
    "weighted_consensus_pass",
]
