"""Input handling of the skills fit: a validated label matrix with its entries in (task, worker) order.

A DataFrame is encoded by :func:`crowdflow.labels.encode_canonical` (ids hashed to dense codes, the
duplicate policy applied, one stable sort by (task, worker)); an encoded
:class:`~crowdflow.labels.LabelMatrix` is checked for repeated (task, worker) pairs and put in the same
order. With one fixed order every floating-point sum over a task's labels runs the same way, so the
outputs do not depend on the order of the input rows. At least two classes are needed (a declared label
set wins over the observed labels). See docs/methods/skills.md §1.3.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from crowdflow.labels import DuplicatePolicy, LabelMatrix, encode_canonical, task_major_order


def _canonical_order(lm: LabelMatrix) -> np.ndarray:
    """Order of the entries by (task, worker); ``ValueError`` on a repeated (task, worker) pair."""
    order, key = task_major_order(lm.task_idx, lm.worker_idx, lm.n_workers)
    dup = key[1:] == key[:-1]
    if dup.any():
        w = max(lm.n_workers, 1)
        bad = np.unique(key[1:][dup])[:5]
        pairs = ", ".join(f"(task={lm.tasks[k // w]}, worker={lm.workers[k % w]})" for k in bad)
        raise ValueError(
            f"{int(dup.sum())} repeated (task, worker) pairs in the label matrix, e.g. {pairs}; "
            "deduplicate first (crowdflow.labels.deduplicate)"
        )
    return order


def canonical_label_matrix(lm: LabelMatrix) -> LabelMatrix:
    """The same labels with entries sorted by (task, worker).

    Floating-point sums over a task's labels then run in a fixed order, so outputs are byte-identical
    under any permutation of the input rows (docs/methods/skills.md §1.3, test AT-P2 of §6). Returns
    ``lm`` itself when it is already in that order.
    """
    order, _ = task_major_order(lm.task_idx, lm.worker_idx, lm.n_workers)
    return _reordered(lm, order)


def _reordered(lm: LabelMatrix, order: np.ndarray) -> LabelMatrix:
    """``lm`` with its entries in ``order`` (``lm`` itself when ``order`` is the identity)."""
    if order.size and order[-1] == order.size - 1 and bool(np.all(order[1:] > order[:-1])):
        return lm
    return LabelMatrix(
        workers=lm.workers,
        tasks=lm.tasks,
        classes=lm.classes,
        worker_idx=np.ascontiguousarray(lm.worker_idx[order]),
        task_idx=np.ascontiguousarray(lm.task_idx[order]),
        class_idx=np.ascontiguousarray(lm.class_idx[order]),
    )


def prepare_labels(
    labels: pd.DataFrame | LabelMatrix,
    classes: list[str] | None = None,
    duplicates: DuplicatePolicy = "error",
) -> tuple[LabelMatrix, int]:
    """Validate and encode a label table (docs/methods/skills.md §1.3, §8.4).

    DataFrame input goes through :func:`crowdflow.labels.encode_canonical` (hash-based codes, the
    duplicate policy applied on integer codes, one stable sort by (task, worker)); a LabelMatrix is
    checked for repeated pairs and sorted the same way.

    Parameters
    ----------
    labels : pandas.DataFrame or LabelMatrix
        Long table with columns ``task, worker, label`` (no nulls), or an encoded matrix.
    classes : list of str, optional
        Declared label set; wins over the observed labels (docs/methods/skills.md §1.3).
    duplicates : {"error", "keep_last", "keep_first"}
        Policy for repeated (task, worker) pairs (DataFrame input only).

    Returns
    -------
    (LabelMatrix, int)
        Canonically ordered label matrix and the number of duplicate rows dropped.
    """
    dropped = 0
    if isinstance(labels, LabelMatrix):
        lm = labels
        if lm.n_labels == 0:
            raise ValueError("label matrix is empty")
        if classes is not None and [str(c) for c in classes] != lm.classes.astype(str).tolist():
            raise ValueError(
                f"declared classes {list(classes)} differ from the label matrix's classes "
                f"{lm.classes.tolist()}; encode with crowdflow.labels.encode_labels(df, classes)"
            )
        lm = _reordered(lm, _canonical_order(lm))
    elif isinstance(labels, pd.DataFrame):
        lm, dropped = encode_canonical(labels, classes, duplicates)
    else:
        raise ValueError(f"labels must be a pandas DataFrame or a LabelMatrix, got {type(labels).__name__}")
    if lm.n_classes < 2:
        raise ValueError(
            f"need at least 2 classes, the labels use only {lm.classes.tolist()}; "
            "declare the label set with classes=[...]"
        )
    return lm, dropped
