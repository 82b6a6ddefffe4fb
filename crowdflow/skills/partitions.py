"""Co-label statistics summed over Parquet partitions of the labels (scale-out on Dask or any executor).

The encoded labels are written as files that each hold whole tasks; the packed counts
P = N + 2³²·Agree of each file are computed wherever the file is read (one integer sparse product), and
their sum equals the in-memory statistics exactly (docs/methods/skills.md §4.3).
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from crowdflow.executors import MapFn
from crowdflow.graphs import pair_counts
from crowdflow.labels import LabelMatrix, task_major_order
from crowdflow.skills.moments import LabelMoments, moments_from_packed, pack_counts


def write_label_partitions(lm: LabelMatrix, folder: str | Path, n_partitions: int) -> list[str]:
    """Write the encoded labels as Parquet files, each holding whole tasks (task code mod ``n_partitions``).

    Columns ``task, worker, label`` are the dense int64 codes of ``lm``. Because no task is split
    across files, the pair statistics of the files add up exactly to those of ``lm``
    (:func:`partition_pair_counts`, :func:`moments_from_partitions`). Empty partitions are not written.

    Returns
    -------
    list of str
        The written file paths, in partition order.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if n_partitions < 1:
        raise ValueError("n_partitions must be >= 1")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    part = lm.task_idx % n_partitions
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(n_partitions + 1))
    paths = []
    for p in range(n_partitions):
        rows = order[bounds[p] : bounds[p + 1]]
        if not rows.size:
            continue
        table = pa.table({"task": lm.task_idx[rows], "worker": lm.worker_idx[rows], "label": lm.class_idx[rows]})
        path = out / f"part-{p:05d}.parquet"
        pq.write_table(table, path)
        paths.append(str(path))
    return paths


def partition_pair_counts(path: str, n_workers: int, n_classes: int) -> sp.csr_matrix:
    """P = N + 2³²·Agree (int64, W×W CSR) of the tasks in one partition file of :func:`write_label_partitions`.

    Runs anywhere (e.g. a Dask worker): it reads the file, groups its labels by task and makes one
    integer sparse product (``crowdflow.graphs.pair_counts``). Partitions are summed by
    :func:`moments_from_partitions`.
    """
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["task", "worker", "label"])
    task = t.column("task").to_numpy().astype(np.int64)
    worker = t.column("worker").to_numpy().astype(np.int64)
    label = t.column("label").to_numpy().astype(np.int64)
    order, _ = task_major_order(task, worker, n_workers)
    _, local = np.unique(task[order], return_inverse=True)
    indptr = np.zeros(int(local.max()) + 2 if local.size else 1, dtype=np.int64)
    np.cumsum(np.bincount(local, minlength=indptr.size - 1), out=indptr[1:])
    n_b, ag_b = pair_counts(indptr, worker[order], label[order], n_workers, n_classes)
    return pack_counts(n_b, ag_b)


def moments_from_partitions(parts: Iterable[sp.csr_matrix], n_classes: int, min_pair_count: int = 1) -> LabelMoments:
    """Sum the packed counts of :func:`partition_pair_counts` and build N, agreements and C^.

    Integer sums, so the result equals :func:`label_moments` on all the labels entry for entry,
    provided every task lies in exactly one partition.
    """
    total: sp.csr_matrix | None = None
    for p in parts:
        total = p.copy() if total is None else total + p
    if total is None:
        raise ValueError("no partitions to sum")
    return moments_from_packed(total, n_classes, min_pair_count)


def partitioned_moments(
    lm: LabelMatrix, executor: MapFn, n_partitions: int, *, min_pair_count: int, scratch_dir: str | None = None
) -> tuple[LabelMoments, int]:
    """N, agreements and C^ of ``lm`` summed over whole-task Parquet partitions, one executor item per file.

    The partition files (:func:`write_label_partitions`) go to a temporary folder under ``scratch_dir``;
    the executor's workers receive their paths, never DataFrames, and send back one packed count matrix
    each (:func:`partition_pair_counts`). Integer sums: equal to :func:`~crowdflow.skills.label_moments`.

    Parameters
    ----------
    lm : LabelMatrix
        Encoded labels.
    executor : callable
        ``executor(fn, items) -> results`` in the order of ``items`` (e.g. a Dask client's map).
    n_partitions : int
        Partitions to write (empty ones are skipped).
    min_pair_count : int
        Pairs with N_ij below this are dropped (as in :func:`~crowdflow.skills.label_moments`).
    scratch_dir : str, optional
        Folder for the partition files; it must be visible to the executor's workers.

    Returns
    -------
    (LabelMoments, int)
        The moments and the number of partition files.
    """
    with tempfile.TemporaryDirectory(prefix="crowdflow-parts-", dir=scratch_dir) as tmp:
        paths = write_label_partitions(lm, tmp, n_partitions)
        count = functools.partial(partition_pair_counts, n_workers=lm.n_workers, n_classes=lm.n_classes)
        parts = executor(count, paths)
    return moments_from_partitions(parts, lm.n_classes, min_pair_count), len(paths)
