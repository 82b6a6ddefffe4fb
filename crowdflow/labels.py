"""Long label tables → dense integer codes and sparse worker×task matrices.

Every label-aggregation method (majority vote, Dawid–Skene, rank-one PGD) starts from the same
encoding, so it lives here once. Ids are strings; dense ids are assigned by sorted original id so
results are deterministic and independent of input row order (docs/methods/skills.md §1.3).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp

log = logging.getLogger(__name__)

DuplicatePolicy = Literal["error", "keep_last", "keep_first"]


def natural_order(values: np.ndarray) -> np.ndarray:
    """Permutation that sorts unique string ids as :func:`natural_sort` does.

    Numeric order when every id parses as a number (``float()``; equal numbers such as ``"1"`` and
    ``"1.0"`` are ordered by their string), else lexicographic.
    """
    values = np.asarray(values, dtype=object)
    if values.size == 0:
        return np.zeros(0, dtype=np.int64)
    numeric = None
    try:
        float(values[0])  # cheap early exit: numpy's failed bulk conversion costs ~0.2 µs per id
        numeric = values.astype(np.float64)
    except (TypeError, ValueError):
        pass
    if numeric is not None and not np.isnan(numeric).any():
        order = np.argsort(numeric, kind="stable")
        srt = numeric[order]
        if srt.size < 2 or bool(np.all(srt[1:] > srt[:-1])):
            return order
        return np.lexsort((values.astype(str), numeric))
    return np.argsort(values.astype(str), kind="stable")


def natural_order_text(values: Any) -> np.ndarray:
    """:func:`natural_order` of distinct ids held as an Arrow string array, computed in Arrow (issue #36).

    The same rule, without a Python ``str`` per id: numeric order when every id parses as a number (Arrow's
    ``float64`` cast; equal numbers ordered by their text), else lexicographic (Arrow compares UTF-8 bytes, which
    orders as code points, as numpy's ``str`` sort does). An id that Arrow does not read as a number but Python's
    ``float()`` does (whitespace, ``_``, a leading ``+``) sends the whole array to :func:`natural_order` itself, so
    the rule stays the one in :func:`natural_order`.

    Parameters
    ----------
    values : pyarrow.Array
        Distinct ids (``string`` or ``large_string``), no nulls.

    Returns
    -------
    numpy.ndarray
        int64 permutation: ``values.take(order)`` is in :func:`natural_sort` order.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    numeric = None
    try:
        float(values[0].as_py())  # the cheap early exit of natural_order: text ids fail on the first value
    except (TypeError, ValueError):
        pass
    else:
        try:
            numeric = pc.cast(values, pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # Python reads more as numbers: its rule decides
            return natural_order(np.asarray(values.to_numpy(zero_copy_only=False), dtype=object))
    if numeric is not None and not pc.any(pc.is_nan(numeric)).as_py():
        order = np.asarray(pc.sort_indices(numeric), dtype=np.int64)
        srt = numeric.to_numpy()[order]
        if srt.size < 2 or bool(np.all(srt[1:] > srt[:-1])):
            return order
        keys = pa.table({"n": numeric, "s": values})
        return np.asarray(pc.sort_indices(keys, sort_keys=[("n", "ascending"), ("s", "ascending")]), dtype=np.int64)
    return np.asarray(pc.sort_indices(values), dtype=np.int64)


def natural_sort_text(values: Any) -> Any:
    """:func:`natural_sort` of distinct Arrow string ids, as an Arrow ``large_string`` array
    (:func:`natural_order_text`): a run's worker dictionary held as 8 bytes + the id's text a worker instead of a
    Python ``str`` each (~60 bytes; docs/scale.md memory laws). ``large_string`` is the type :func:`text_column`
    gives a table's text column, so the tables built from the dictionary (the skills table, the worker-graph
    report) share its buffers instead of copying them."""
    import pyarrow as pa

    text = values.cast(pa.large_string()) if isinstance(values, pa.Array) else pa.array([], pa.large_string())
    return text.take(pa.array(natural_order_text(text)))


def id_text(ids: Any, index: Any) -> list[str]:
    """The ids at ``index`` as Python strings, from a numpy id array or an Arrow string array: the one way a few
    rows a user sees (a component's listed workers, the gold table's) get their ids' text."""
    import pyarrow as pa

    index = np.asarray(index, dtype=np.int64)
    if isinstance(ids, (pa.Array, pa.ChunkedArray)):
        return cast(list[str], ids.take(pa.array(index)).to_pylist())
    return [v if isinstance(v, str) else str(v) for v in np.asarray(ids)[index].tolist()]  # no ``<U`` copy


def text_column(values: Any) -> Any:
    """``values`` (ids or statuses: a numpy text or object array, or an Arrow string array) as the pandas ``str``
    column a ``DataFrame`` would infer from them (``values.astype(str)``), built in Arrow: no fixed-width numpy text
    (4 bytes a character of the longest value, a row) and no Python object per row on the way (issue #36, docs/scale.md
    memory laws)."""
    import pyarrow as pa

    if isinstance(values, pd.api.extensions.ExtensionArray) and str(values.dtype) == "str":
        return values
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return pd.array(values.cast(pa.large_string()), dtype="str")
    try:
        text = pa.array(np.asarray(values), pa.large_string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # not all text (e.g. integer ids in an object array)
        text = pa.array(np.asarray(values).astype(str), pa.large_string())
    return pd.array(text, dtype="str")


def natural_sort(values: np.ndarray) -> np.ndarray:
    """Sort string ids numerically when every id parses as a number, else lexicographically.

    Parameters
    ----------
    values : numpy.ndarray
        Unique string ids.

    Returns
    -------
    numpy.ndarray
        The same ids in a deterministic order (``"2" < "10"`` when all ids are numeric).
    """
    values = np.asarray(values, dtype=object)
    if values.size == 0:
        return values
    return cast(np.ndarray, values[natural_order(values)].astype(str).astype(object))


def deduplicate(labels: pd.DataFrame, policy: DuplicatePolicy = "error") -> tuple[pd.DataFrame, int]:
    """Apply the duplicate (task, worker) policy (the spec's `skills.duplicates`; docs/reference/spec.md).

    Parameters
    ----------
    labels : pandas.DataFrame
        Columns ``task, worker, label`` (strings).
    policy : {"error", "keep_last", "keep_first"}
        ``error`` raises on any repeated (task, worker) pair; the others keep one row per pair in
        input order.

    Returns
    -------
    (pandas.DataFrame, int)
        The de-duplicated table (original index kept) and the number of rows dropped.
    """
    dup = labels.duplicated(["task", "worker"], keep=False)
    n_dup_rows = int(dup.sum())
    if n_dup_rows == 0:
        return labels, 0
    if policy == "error":
        first = labels.loc[dup, ["task", "worker"]].head(5)
        examples = ", ".join(f"(task={t}, worker={w})" for t, w in first.itertuples(index=False))
        raise ValueError(
            f"{n_dup_rows} rows repeat a (task, worker) pair, e.g. {examples}; "
            "set duplicates: keep_last or keep_first in the spec to keep one answer per pair"
        )
    keep: Literal["first", "last"] = "last" if policy == "keep_last" else "first"
    out = labels[~labels.duplicated(["task", "worker"], keep=keep)]
    dropped = len(labels) - len(out)
    log.info("dropped %d duplicate (task, worker) rows (policy %s)", dropped, policy)
    return out, dropped


@dataclass(frozen=True)
class LabelMatrix:
    """A label table encoded as dense integer codes.

    Attributes
    ----------
    workers, tasks, classes : numpy.ndarray
        Sorted unique ids (object arrays of ``str``); position = dense id.
    worker_idx, task_idx, class_idx : numpy.ndarray
        One entry per label: dense worker, task and class codes (int64).
    """

    workers: np.ndarray
    tasks: np.ndarray
    classes: np.ndarray
    worker_idx: np.ndarray
    task_idx: np.ndarray
    class_idx: np.ndarray

    @property
    def n_workers(self) -> int:
        return int(self.workers.size)

    @property
    def n_tasks(self) -> int:
        return int(self.tasks.size)

    @property
    def n_classes(self) -> int:
        return int(self.classes.size)

    @property
    def n_labels(self) -> int:
        return int(self.worker_idx.size)

    def incidence(self) -> sp.csr_matrix:
        """B: W×T 0/1 matrix, B[i, t] = 1 iff worker i labelled task t."""
        data = np.ones(self.n_labels, dtype=np.float64)
        return sp.csr_matrix((data, (self.worker_idx, self.task_idx)), shape=(self.n_workers, self.n_tasks))

    def task_class_counts(self, worker_weights: np.ndarray | None = None) -> sp.csr_matrix:
        """T×M matrix of (weighted) votes: entry (t, l) = Σ_i v_i 1{Y_it = l}.

        Parameters
        ----------
        worker_weights : numpy.ndarray, optional
            One weight v_i per worker; unweighted counts when omitted.
        """
        if worker_weights is None:
            data = np.ones(self.n_labels, dtype=np.float64)
        else:
            data = np.asarray(worker_weights, dtype=np.float64)[self.worker_idx]
        return sp.csr_matrix((data, (self.task_idx, self.class_idx)), shape=(self.n_tasks, self.n_classes))

    def labels_per_worker(self) -> np.ndarray:
        """n_i: number of labels given by each worker."""
        return np.bincount(self.worker_idx, minlength=self.n_workers)

    def labels_per_task(self) -> np.ndarray:
        """k_t: number of labels received by each task."""
        return np.bincount(self.task_idx, minlength=self.n_tasks)


def factorize_ids(values: pd.Series | np.ndarray, what: str = "values") -> tuple[np.ndarray, np.ndarray]:
    """Dense codes of an id column, the codes ordered as :func:`natural_sort` orders the ids.

    Hash-based (``pandas.factorize``) on the raw column, then only the distinct values are
    converted to ``str`` and sorted: O(n) + O(u log u) for n rows and u distinct ids, instead of
    converting every row to ``str`` first. Values that become equal as strings (``1`` and ``"1"``)
    share a code, exactly as ``astype(str)`` would make them equal.

    Parameters
    ----------
    values : pandas.Series or numpy.ndarray
        One id per row; nulls are rejected.
    what : str
        Column name used in the error message.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        int64 code per row, and the sorted distinct ids (object array of ``str``); ``ids[code]``
        is the row's id.
    """
    dense = _dense_integer_codes(values)
    if dense is not None:
        return dense
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    codes = np.asarray(codes, dtype=np.int64)
    if codes.size and codes.min() < 0:
        raise ValueError(f"labels column '{what}' has {int((codes < 0).sum())} null values")
    if uniques.dtype.kind in "iu" and (uniques.size == 0 or int(np.abs(np.asarray(uniques)).max()) < 2**53):
        # integers: distinct numbers are distinct strings, and natural order is numeric order (exact as
        # float64 below 2**53), so sort the numbers and write only the distinct ones as text
        order = np.argsort(np.asarray(uniques), kind="stable")
        rank = np.empty(order.size, dtype=np.int64)
        rank[order] = np.arange(order.size)
        return rank[codes], np.asarray(uniques)[order].astype(str).astype(object)
    if pd.api.types.is_string_dtype(uniques.dtype) and not pd.api.types.is_object_dtype(uniques.dtype):
        ustr = np.asarray(uniques, dtype=object)  # a string dtype: already distinct strings
    elif pd.api.types.infer_dtype(uniques, skipna=False) == "string":
        ustr = np.asarray(uniques, dtype=object)  # Python strings: distinct already, no second pass
    else:
        ustr = pd.Index(uniques).astype(str).to_numpy(dtype=object)
        c2, u2 = pd.factorize(ustr)
        if len(u2) != len(ustr):  # distinct raw values with the same string form: merge them
            codes = np.asarray(c2, dtype=np.int64)[codes]
            ustr = np.asarray(u2, dtype=object)
    order = natural_order(ustr)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return rank[codes], ustr[order]


def _dense_integer_codes(values: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`factorize_ids` of a NumPy integer column spanning few values (max − min ≤ 4 × rows): a table
    lookup over the range instead of a hash, O(n + range). None for any other column."""
    arr = values.to_numpy() if isinstance(values, pd.Series) and values.dtype.kind in "iu" else values
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu" or arr.size == 0:
        return None
    lo, hi = int(arr.min()), int(arr.max())
    if hi - lo > 4 * arr.size + 1024 or max(abs(lo), abs(hi)) >= 2**53:
        return None
    shifted = (arr - lo).astype(np.int64) if lo else arr.astype(np.int64, copy=False)
    seen = np.zeros(hi - lo + 1, dtype=bool)
    seen[shifted] = True
    present = np.flatnonzero(seen)
    rank = np.cumsum(seen, dtype=np.int64) - 1
    return rank[shifted], (present + lo).astype(str).astype(object)


def _columns(labels: pd.DataFrame) -> None:
    for col in ("task", "worker", "label"):
        if col not in labels.columns:
            raise ValueError(f"labels table has no column '{col}' (columns: {list(labels.columns)})")
    if len(labels) == 0:
        raise ValueError("labels table is empty")


def _class_codes(labels: pd.DataFrame, classes: list[str] | None) -> tuple[np.ndarray, np.ndarray]:
    codes, observed = factorize_ids(labels["label"], "label")
    if classes is None:
        return codes, observed
    cls = np.asarray([str(c) for c in classes], dtype=object)
    pos = pd.Index(cls).get_indexer(observed)
    if np.any(pos < 0):
        unknown = sorted(observed[pos < 0].tolist())
        raise ValueError(f"labels outside the declared label set {cls.tolist()}: {unknown[:5]}")
    return pos.astype(np.int64)[codes], cls


#: the columns a label row needs to count (a row missing one is left out of every fit)
ANSWER_COLUMNS = ("task", "worker", "label")


def answered(labels: pd.DataFrame) -> pd.DataFrame:
    """The rows of a labels table that name a task, a worker and a label: what every skills fit encodes (a row with
    a missing one fails validation; with ``checks.validation: warn`` it is left out, by this rule, everywhere)."""
    cols = [c for c in ANSWER_COLUMNS if c in labels.columns]
    out: pd.DataFrame = labels.dropna(subset=cols) if len(labels) else labels
    return out


def encode_labels(labels: pd.DataFrame, classes: list[str] | None = None) -> LabelMatrix:
    """Encode a de-duplicated long label table.

    Ids are compared as strings (``1`` and ``"1"`` are the same id); dense ids follow
    :func:`natural_sort`. Entries stay in input row order.

    Parameters
    ----------
    labels : pandas.DataFrame
        Columns ``task, worker, label``; values are converted to ``str`` (nulls are rejected).
    classes : list of str, optional
        The declared label set (docs/methods/skills.md §1.3: a declared M wins over the observed labels). Labels
        outside it raise ``ValueError``.

    Returns
    -------
    LabelMatrix
    """
    _columns(labels)
    task_idx, tasks = factorize_ids(labels["task"], "task")
    worker_idx, workers = factorize_ids(labels["worker"], "worker")
    class_idx, cls = _class_codes(labels, classes)
    return LabelMatrix(
        workers=workers,
        tasks=tasks,
        classes=cls,
        worker_idx=worker_idx,
        task_idx=task_idx,
        class_idx=class_idx,
    )


#: Entries from which :func:`task_major_order` sorts by counting (below it numpy's sort is as fast, without numba).
COUNTING_SORT_MIN = 1 << 16


def task_major_order(task_idx: np.ndarray, worker_idx: np.ndarray, n_workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable order of the entries by (task, worker) and the sorted keys task·W + worker.

    Returns the identity without sorting when the entries are already in that order. From
    :data:`COUNTING_SORT_MIN` entries, with codes in ranges no wider than a few times the entries, the order is
    found by two stable counting sorts in O(entries + tasks + workers) (:func:`crowdflow.orders.task_worker_order`),
    else by ``np.argsort(key, kind="stable")``: the same permutation either way.
    """
    task = np.asarray(task_idx, dtype=np.int64)
    worker = np.asarray(worker_idx, dtype=np.int64)
    key = task * max(int(n_workers), 1) + worker
    if key.size < 2 or bool(np.all(key[1:] >= key[:-1])):
        return np.arange(key.size), key
    if key.size >= COUNTING_SORT_MIN:
        t_lo, t_hi, w_lo, w_hi = int(task.min()), int(task.max()), int(worker.min()), int(worker.max())
        if min(t_lo, w_lo) >= 0 and w_hi < max(int(n_workers), 1) and t_hi + w_hi <= 4 * key.size:
            from crowdflow.orders import task_worker_order  # numba only when the entries are many

            order = task_worker_order(task, worker, t_hi + 1, w_hi + 1)
            return order, key[order]
    order = np.argsort(key, kind="stable")
    return order, key[order]


def encode_canonical(
    labels: pd.DataFrame, classes: list[str] | None = None, duplicates: DuplicatePolicy = "error"
) -> tuple[LabelMatrix, int]:
    """Encode, apply the duplicate policy and sort the entries by (task, worker), in one pass.

    Equivalent to ``encode_labels(deduplicate(labels, duplicates)[0], classes)`` followed by a
    sort by (task, worker), but the duplicate check runs on the integer codes (one stable sort of
    task·W + worker) instead of hashing string pairs. Entries sorted by (task, worker) make every
    floating-point sum over a task's labels run in a fixed order, so results do not depend on the
    input row order.

    Parameters
    ----------
    labels : pandas.DataFrame
        Columns ``task, worker, label``.
    classes : list of str, optional
        Declared label set.
    duplicates : {"error", "keep_last", "keep_first"}
        ``keep_last`` / ``keep_first`` keep the last / first answer of a repeated (task, worker)
        pair in input row order.

    Returns
    -------
    (LabelMatrix, int)
        The canonically ordered matrix and the number of rows dropped as duplicates.
    """
    lm = encode_labels(labels, classes)
    order, key = task_major_order(lm.task_idx, lm.worker_idx, lm.n_workers)
    same = key[1:] == key[:-1]
    dropped = 0
    if same.any():
        if duplicates == "error":
            in_dup = np.zeros(key.size, dtype=bool)
            in_dup[1:] |= same
            in_dup[:-1] |= same
            rows = np.sort(order[in_dup])
            ex = ", ".join(
                f"(task={lm.tasks[lm.task_idx[r]]}, worker={lm.workers[lm.worker_idx[r]]})" for r in rows[:5]
            )
            raise ValueError(
                f"{rows.size} rows repeat a (task, worker) pair, e.g. {ex}; "
                "set duplicates: keep_last or keep_first in the spec to keep one answer per pair"
            )
        if duplicates not in ("keep_last", "keep_first"):
            raise ValueError(f"unknown duplicates policy {duplicates!r}; use 'error', 'keep_last' or 'keep_first'")
        keep = np.ones(key.size, dtype=bool)
        if duplicates == "keep_last":
            keep[:-1] = ~same  # stable sort: the last of a run is the last in input order
        else:
            keep[1:] = ~same
        order = order[keep]
        dropped = int(key.size - order.size)
        log.info("dropped %d duplicate (task, worker) rows (policy %s)", dropped, duplicates)
    class_idx = lm.class_idx[order]
    cls = lm.classes
    if dropped and classes is None:  # a label seen only in dropped rows is not an observed class
        used = np.bincount(class_idx, minlength=cls.size) > 0
        if not used.all():
            class_idx = (np.cumsum(used) - 1)[class_idx]
            cls = cls[used]
    return (
        LabelMatrix(
            workers=lm.workers,
            tasks=lm.tasks,
            classes=cls,
            worker_idx=np.ascontiguousarray(lm.worker_idx[order]),
            task_idx=np.ascontiguousarray(lm.task_idx[order]),
            class_idx=np.ascontiguousarray(class_idx),
        ),
        dropped,
    )


_INTEGER = re.compile(r"[+-]?\d+")


def canonical_label_text(values: pd.Series) -> pd.Series:
    """Label values with every number written one way: ``1``, ``1.0``, ``1.00``, ``+1`` and ``01`` are ``1``.

    The one rule for numeric-looking labels, applied wherever labels enter (the reader's label columns of the
    labels and truth tables, the declared ``classes``): a value that parses as a finite number is written as
    the integer when it is whole (an integer literal exactly, however long; a decimal below 2**53), else as
    the shortest decimal that round-trips (``0.5``, ``2.5e-08``); any other text is kept as it is. So a float
    export (``1.0``) matches integer gold (``1``), a
    decimal Parquet column (``1.00``) reads as ``1``, and ``1`` and ``1.0`` in one file are one class, not two.
    Missing values stay missing. Vectorised over the distinct values (a label column has few).
    """
    codes, uniques = pd.factorize(values.astype("string"), use_na_sentinel=True)
    text = np.array([str(u).strip() for u in uniques], dtype=object)
    canon = text.copy()
    for k, word in enumerate(text):
        if _INTEGER.fullmatch(word):
            canon[k] = str(int(word))  # exact, however many digits
            continue
        try:
            v = float(word)
        except ValueError:
            continue
        if not np.isfinite(v):
            continue
        canon[k] = str(int(v)) if v == np.floor(v) and abs(v) < 2**53 else repr(v)
    out = np.full(len(codes), None, dtype=object)
    present = codes >= 0
    out[present] = canon[codes[present]]
    return pd.Series(out, index=values.index, dtype="string")
