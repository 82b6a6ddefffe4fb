"""Long label tables → dense integer codes and sparse worker×task matrices.

Every label-aggregation method (majority vote, Dawid–Skene, rank-one PGD) starts from the same
encoding, so it lives here once. Ids are strings; dense ids are assigned by sorted original id so
results are deterministic and independent of input row order (spec skills-rank-one.md §1.3).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import scipy.sparse as sp

log = logging.getLogger(__name__)

DuplicatePolicy = Literal["error", "keep_last", "keep_first"]


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
    numeric = pd.to_numeric(pd.Series(values), errors="coerce")
    if not numeric.isna().any():
        order = np.lexsort((values.astype(str), numeric.to_numpy()))
        return values[order]
    return np.sort(values.astype(str)).astype(object)


def deduplicate(labels: pd.DataFrame, policy: DuplicatePolicy = "error") -> tuple[pd.DataFrame, int]:
    """Apply the duplicate (task, worker) policy of design.md §3.

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
    keep = "last" if policy == "keep_last" else "first"
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


def _codes(values: pd.Series, order: np.ndarray) -> np.ndarray:
    return pd.Categorical(values, categories=order).codes.astype(np.int64)


def encode_labels(labels: pd.DataFrame, classes: list[str] | None = None) -> LabelMatrix:
    """Encode a de-duplicated long label table.

    Parameters
    ----------
    labels : pandas.DataFrame
        Columns ``task, worker, label``; values are converted to ``str``.
    classes : list of str, optional
        The declared label set (spec §1.3: a declared M wins over the observed labels). Labels
        outside it raise ``ValueError``.

    Returns
    -------
    LabelMatrix
    """
    for col in ("task", "worker", "label"):
        if col not in labels.columns:
            raise ValueError(f"labels table has no column '{col}'")
    if len(labels) == 0:
        raise ValueError("labels table is empty")
    task = labels["task"].astype(str)
    worker = labels["worker"].astype(str)
    label = labels["label"].astype(str)
    workers = natural_sort(worker.unique())
    tasks = natural_sort(task.unique())
    if classes is None:
        cls = natural_sort(label.unique())
    else:
        cls = np.asarray([str(c) for c in classes], dtype=object)
        unknown = sorted(set(label.unique()) - set(cls.tolist()))
        if unknown:
            raise ValueError(f"labels outside the declared label set {cls.tolist()}: {unknown[:5]}")
    return LabelMatrix(
        workers=workers,
        tasks=tasks,
        classes=cls,
        worker_idx=_codes(worker, workers),
        task_idx=_codes(task, tasks),
        class_idx=_codes(label, cls),
    )
