"""Per-file sums of a labels input and their fold: majority vote that costs what is new (issue #38).

A labels file contributes to majority vote only through its per-task class counts
``c_{t,l} = Σ_{rows of the file} 1{task = t, label = l}`` (docs/methods/skills.md §7.1). Counts are integers, so
the fold over files is exact and order free: ``C = C_prev + Σ_{new files} c − Σ_{dropped files} c`` equals the
counts of a full read of the files the dataset holds now, whatever the order the files arrived, were replaced,
re-delivered or deleted in. The votes are then taken from ``C`` by the one vote rule
(:func:`crowdflow.skills.majority.vote_winners`, ties included), so the consensus equals
:func:`crowdflow.skills.majority_vote` of a full read **bit for bit**: same tasks in the same order, same labels,
same ``confidence`` (the same float64 quotient of the same integers), same ``n_labels``.

Costs, for a run that adds ``d`` rows to a fold of ``T`` tasks: the new files' rows are read once (O(d)), the
fold is a merge of the day's ``(task, label, count)`` cells into the stored sorted fold (O(d log T) search plus
one O(T·M) copy), and the votes are one vectorised O(T·M) pass. Nothing is O(history rows).

Erasure (``crowdflow forget``) is a sum too: a worker's rows in a stored file are that file's rows whose worker is
the erased id; the file's sums are re-derived from its own stored rows without them and the difference is
subtracted (:func:`fold_labels` with ``remove`` the old sums and ``add`` the new).

What is not a sum over files, and so not folded here: the pair statistics of rank-one PGD (co-label counts of a
worker pair need both workers' labels of a task, and a task's labels may land in different files), the agreement of
a worker with the majority label (a task's winner moves when its counts move) and Dawid–Skene (not a sum at all).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crowdflow.contracts.missing import reasons_as_text
from crowdflow.labels import answered, natural_order
from crowdflow.skills.majority import vote_winners
from crowdflow.skills.types import TieBreak
from crowdflow.storage.increment_inputs import folded_input
from crowdflow.storage.increments import SumsRule

__all__ = [
    "LABEL_COUNTS",
    "SUMS_COLUMNS",
    "FoldedLabels",
    "FoldedMajority",
    "fold_labels",
    "folded_from_table",
    "label_sums",
    "majority_from_folded",
    "majority_run",
    "text_ids",
    "vote_folded",
]

#: the columns of one file's stored label sums
SUMS_COLUMNS = ("task", "label", "count")


def text_ids(column: pd.Series) -> pa.Array:
    """Ids as the label encoder compares them, as text (``1`` and ``"1"`` are one id), without Python objects."""
    arr = pa.array(column) if not isinstance(column.dtype, pd.ArrowDtype) else column.array._pa_array
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return arr.cast(pa.string())
    return pa.array(column.astype(str).to_numpy(dtype=object), type=pa.string())


def label_sums(labels: pd.DataFrame) -> pd.DataFrame:
    """The per-task class counts of one file's (de-duplicated, erased) rows: ``task, label, count``.

    Sorted by ``(task, label)`` as text (code-point order); ``count`` is int64. An empty file gives an empty table.
    """
    labels = answered(labels)
    table = pa.table({"task": text_ids(labels["task"]), "label": text_ids(labels["label"])})
    out = table.group_by(["task", "label"]).aggregate([([], "count_all")]).rename_columns(["task", "label", "count"])
    out = out.sort_by([("task", "ascending"), ("label", "ascending")])
    result: pd.DataFrame = out.to_pandas().astype({"count": np.int64})
    return result


@dataclass(frozen=True)
class FoldedLabels:
    """Per-task class counts folded over every file of a dataset.

    Attributes
    ----------
    tasks : pyarrow.Array
        (T,) task ids (text), sorted in code-point order (the merge order; the vote's order is the natural one).
        Kept as Arrow text: a fold of 10^6 tasks is never turned into 10^6 Python objects.
    classes : numpy.ndarray
        (M,) observed labels (``str``), sorted.
    counts : numpy.ndarray
        (T, M) int64 counts ``C_{t,l}``; every row has a positive total.
    """

    tasks: pa.Array
    classes: np.ndarray
    counts: np.ndarray

    @property
    def n_labels(self) -> int:
        return int(self.counts.sum())

    def to_frame(self) -> pd.DataFrame:
        """The fold as a table (one column per class, named ``n:<label>``), for the increment store."""
        data: dict[str, Any] = {"task": self.tasks}
        for k, c in enumerate(self.classes):
            data[f"n:{c}"] = pa.array(self.counts[:, k])
        out: pd.DataFrame = pa.table(data).to_pandas()
        return out

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> FoldedLabels:
        cols = [c for c in df.columns if str(c).startswith("n:")]
        classes = np.asarray([str(c)[2:] for c in cols], dtype=object)
        counts = df[cols].to_numpy(dtype=np.int64) if cols else np.zeros((len(df), 0), dtype=np.int64)
        return cls(text_ids(df["task"]), classes, counts)

    @classmethod
    def empty(cls) -> FoldedLabels:
        return cls(pa.array([], type=pa.string()), np.zeros(0, dtype=object), np.zeros((0, 0), dtype=np.int64))


def _delta(add: Sequence[pd.DataFrame], remove: Sequence[pd.DataFrame]) -> pa.Table:
    """The signed ``(task, label, count)`` cells of ``add`` minus ``remove``, summed, zero cells dropped."""
    parts = [
        pa.table(
            {
                "task": text_ids(s["task"]),
                "label": text_ids(s["label"]),
                "count": pa.array(sign * s["count"].to_numpy(dtype=np.int64)),
            }
        )
        for group, sign in ((add, 1), (remove, -1))
        for s in group
        if len(s)
    ]
    if not parts:
        return pa.table({"task": pa.array([], pa.string()), "label": pa.array([], pa.string()),
                         "count": pa.array([], pa.int64())})  # fmt: skip
    if len(parts) == 1 and (len(add), len(remove)) == (1, 0):  # one file's sums: its cells are already distinct
        return parts[0]
    cells = pa.concat_tables(parts).group_by(["task", "label"]).aggregate([("count", "sum")])
    cells = cells.rename_columns(["task", "label", "count"])
    return cells.filter(pc.not_equal(cells["count"], 0))


def fold_labels(
    base: FoldedLabels, add: Sequence[pd.DataFrame] = (), remove: Sequence[pd.DataFrame] = ()
) -> tuple[FoldedLabels, pa.Array]:
    """``base`` plus the sums of the files in ``add`` minus those in ``remove`` (exact integer sums).

    Parameters
    ----------
    base : FoldedLabels
        The fold of the previous state (:meth:`FoldedLabels.empty` for none).
    add, remove : sequence of pandas.DataFrame
        :func:`label_sums` of the files read now, and of the files that vanished, changed or lost rows.

    Returns
    -------
    (FoldedLabels, pyarrow.Array)
        The new fold (tasks whose total fell to zero and classes no task has any more dropped) and the ids of the
        tasks whose counts changed (the only tasks whose vote can move, save random tie-breaks: see
        :func:`majority_from_folded`).

    Raises
    ------
    ValueError
        A count would become negative: the removed sums are not part of ``base`` (a store out of step).
    """
    delta = _delta(add, remove)
    if delta.num_rows == 0:
        return base, pa.array([], type=pa.string())
    d_labels = delta["label"].combine_chunks()
    seen = set(pc.unique(d_labels).to_pylist())
    classes = np.asarray(sorted(set(base.classes.tolist()) | seen), dtype=object)
    counts = base.counts
    if classes.size != base.classes.size:  # a new label: widen the fold, columns in text order
        widened = np.zeros((counts.shape[0], classes.size), dtype=np.int64)
        widened[:, pd.Index(classes).get_indexer(base.classes)] = counts
        counts = widened
    else:
        counts = counts.copy()
    d_tasks = delta["task"].combine_chunks()
    touched = pc.unique(d_tasks)
    tasks = base.tasks
    found = _in_sorted_fold(base.tasks, touched)
    if found is not None:
        # every touched task is in the fold or sorts after its last one (ids that grow, e.g. dated, with some old
        # tasks labelled again): the new ones are appended in text order, the old ones found by probing the fold
        # against the few touched ids (no hash table over the fold's T ids, no sort of them)
        inner, at, fresh = found
        fresh = fresh.take(pc.sort_indices(fresh))
        tasks = pa.concat_arrays([base.tasks, fresh])
        counts = np.vstack([counts, np.zeros((len(fresh), classes.size), dtype=np.int64)])
        keys = pa.concat_arrays([inner, fresh])
        where = np.concatenate([at, len(base.tasks) + np.arange(len(fresh), dtype=np.int64)])
        rows = where[pc.index_in(d_tasks, value_set=keys).to_numpy(zero_copy_only=False).astype(np.int64)]
    else:
        at = pc.index_in(touched, value_set=base.tasks)  # hash lookup: null where the task is new
        fresh = touched.filter(pc.is_null(at))
        if len(fresh):  # the new tasks appended, then everything put back in text order (one sort in Arrow)
            tasks = pa.concat_arrays([base.tasks, fresh])
            counts = np.vstack([counts, np.zeros((len(fresh), classes.size), dtype=np.int64)])
            order = pc.sort_indices(tasks).to_numpy()
            tasks, counts = tasks.take(pa.array(order)), counts[order]
        rows = pc.index_in(d_tasks, value_set=tasks).to_numpy(zero_copy_only=False).astype(np.int64)
    cols = pc.index_in(d_labels, value_set=pa.array(classes.tolist(), pa.string()))
    cols = cols.to_numpy(zero_copy_only=False).astype(np.int64)
    np.add.at(counts, (rows, cols), delta["count"].to_numpy())
    if (counts[rows] < 0).any():
        raise ValueError("the removed label sums are not part of the folded state (a count became negative)")
    keep_rows = counts.sum(axis=1) > 0
    keep_cols = counts.sum(axis=0) > 0
    if not keep_rows.all():
        tasks, counts = tasks.filter(pa.array(keep_rows)), counts[keep_rows]
    if not keep_cols.all():
        counts, classes = counts[:, keep_cols], classes[keep_cols]
    return FoldedLabels(tasks, classes, counts), touched


def _in_sorted_fold(tasks: pa.Array, touched: pa.Array) -> tuple[pa.Array, np.ndarray, pa.Array] | None:
    """Split ``touched`` ids into those the (text-sorted) fold ``tasks`` holds, with their positions, and those
    that sort after its last id; None when a new id would sort among the fold's (then the fold is re-sorted)."""
    if len(tasks) == 0:
        return touched.slice(0, 0), np.zeros(0, dtype=np.int64), touched
    above = pc.greater(touched, tasks[len(tasks) - 1])
    inner, fresh = touched.filter(pc.invert(above)), touched.filter(above)
    if len(inner) == 0:
        return inner, np.zeros(0, dtype=np.int64), fresh
    hit = pc.index_in(tasks, value_set=inner).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    at = np.full(len(inner), -1, dtype=np.int64)
    on = np.flatnonzero(hit >= 0)
    at[hit[on]] = on
    if (at < 0).any():
        return None
    return inner, at, fresh


def folded_from_table(labels: pd.DataFrame) -> FoldedLabels:
    """The fold of one whole table (a full read): :func:`fold_labels` of its :func:`label_sums`."""
    return fold_labels(FoldedLabels.empty(), [label_sums(labels)])[0]


def _natural_task_order(tasks: pa.Array) -> np.ndarray | None:
    """The label encoder's order of the fold's tasks (:func:`crowdflow.labels.natural_order`); None: as stored.

    Text order (what the fold keeps) unless every id is a number; numbers are ordered by value (ties of equal
    numbers such as ``1`` and ``1.0`` by text, as the encoder does).
    """
    if len(tasks) == 0:
        return None
    try:
        float(tasks[0].as_py())
    except (TypeError, ValueError):
        return None  # not all numbers: text order, which is the stored order
    return natural_order(np.asarray(tasks.to_pylist(), dtype=object))


def majority_from_folded(
    folded: FoldedLabels, classes: Sequence[str] | None = None, tie_break: TieBreak = "random", seed: int = 0
) -> tuple[pd.DataFrame, int]:
    """The majority-vote consensus of the folded counts (:func:`vote_folded` without the fold-order votes)."""
    table, ties, _ = vote_folded(folded, classes, tie_break, seed)
    return table, ties


def vote_folded(
    folded: FoldedLabels,
    classes: Sequence[str] | None = None,
    tie_break: TieBreak = "random",
    seed: int = 0,
    text_order: bool = False,
) -> tuple[pd.DataFrame, int, pa.Array]:
    """The majority-vote consensus of the folded counts: ``task, label, confidence, n_labels``, the tie count, and
    each task's vote in the fold's (text) order (what :mod:`crowdflow.skills.folded` keeps per task).

    Tasks and classes are put in the label encoder's order (:func:`crowdflow.labels.natural_sort` of the ids; the
    declared ``classes`` when given), the scores are the counts as float64 (what a full read's ``bincount`` gives),
    and the winners come from :func:`~crowdflow.skills.majority.vote_winners`: the table equals
    ``majority_vote(encode_labels(rows), tie_break, seed).consensus`` bit for bit. Random tie-breaks draw by
    (task id, class, seed) only (:mod:`crowdflow.skills.ties`), so a task's vote depends on its own counts alone.

    ``text_order``: keep the fold's (text) order whatever the ids (a part of a fold whose whole order is text:
    :mod:`crowdflow.skills.folded_parts`).

    Raises
    ------
    ValueError
        A folded label is not one of the declared ``classes``.
    """
    order = None if text_order else _natural_task_order(folded.tasks)
    tasks = folded.tasks if order is None else folded.tasks.take(pa.array(order))
    counts = folded.counts if order is None else folded.counts[order]
    if classes is None:
        cls = folded.classes[natural_order(folded.classes)].astype(str).astype(object)
    else:
        cls = np.asarray([str(c) for c in classes], dtype=object)
        unknown = sorted(set(folded.classes.astype(str).tolist()) - set(cls.astype(str).tolist()))
        if unknown:
            raise ValueError(f"labels outside the declared label set {cls.tolist()}: {unknown[:5]}")
    scores = np.zeros((counts.shape[0], cls.size), dtype=np.float64)
    scores[:, pd.Index(cls.astype(str)).get_indexer(folded.classes.astype(str))] = counts.astype(np.float64)
    winner, ties = vote_winners(scores, tasks, cls, tie_break, seed)
    n_labels = counts.sum(axis=1).astype(np.int64)
    confidence = scores[np.arange(scores.shape[0]), winner] / np.maximum(n_labels, 1)
    labels = pa.array(cls.tolist(), pa.string()).take(pa.array(winner))
    table: pd.DataFrame = pa.table(
        {"task": tasks, "label": labels, "confidence": pa.array(confidence), "n_labels": pa.array(n_labels)}
    ).to_pandas()
    if order is not None:  # back to the fold's order
        back = np.empty_like(order)
        back[order] = np.arange(order.size)
        labels = labels.take(pa.array(back))
    return table, ties, labels


def _update(fold: pd.DataFrame, add: Sequence[pd.DataFrame], remove: Sequence[pd.DataFrame]) -> pd.DataFrame:
    return fold_labels(FoldedLabels.from_frame(fold), add, remove)[0].to_frame()


def _refold(sums: Sequence[pd.DataFrame]) -> pd.DataFrame:
    return fold_labels(FoldedLabels.empty(), sums)[0].to_frame()


#: the increment store's rule for a labels input: per-task class counts, integers (always exact)
LABEL_COUNTS = SumsRule("label_counts", label_sums, lambda _sums: True, _update, _refold)


@dataclass(frozen=True)
class FoldedMajority:
    """What :func:`majority_run` computed: the consensus of every task, its ties, and the input's account.

    ``input`` is the manifest's account of the files (read, reused, dropped) and how the fold was made
    (``updated`` from the stored fold, or ``refolded`` from the per-file sums).
    """

    consensus: pd.DataFrame
    n_ties: int
    input: dict[str, Any]


def majority_run(
    store: str | os.PathLike[str],
    source: str | os.PathLike[str],
    *,
    classes: Sequence[str] | None = None,
    tie_break: TieBreak = "random",
    seed: int = 0,
    columns: Mapping[str, str] | None = None,
    refresh: Sequence[str] = (),
    run_id: str | None = None,
    out: str | os.PathLike[str] | None = None,
) -> FoldedMajority:
    """Majority vote over every file of ``source`` that reads only the files the increment store has not seen.

    Holds the store's lock, reads and sums the new files, folds them into the stored counts
    (:func:`crowdflow.storage.increment_inputs.folded_input`), votes on the folded counts
    (:func:`majority_from_folded`), writes the consensus to ``out`` (Parquet, temp + rename) when given, then
    commits the new state. The consensus equals ``majority_vote`` of a full read of the folder, bit for bit, as
    long as every (task, worker) pair answers once across the files (a full run's ``duplicates`` rule sees every
    file at once; the fold sees one file at a time).
    """
    with folded_input(store, source, "labels", LABEL_COUNTS, columns, refresh, run_id) as got:
        assert got.fold is not None
        table, ties = majority_from_folded(FoldedLabels.from_frame(got.fold.table), classes, tie_break, seed)
        if out is not None:
            path = Path(out)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            pq.write_table(reasons_as_text(pa.Table.from_pandas(table, preserve_index=False)), tmp)
            os.replace(tmp, path)
    return FoldedMajority(table, ties, got.record())
