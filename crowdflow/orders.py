"""The stable (task, worker) order of label entries in O(rows): a compiled two-pass counting sort.

Every skills fit puts its entries in (task, worker) order (:func:`crowdflow.labels.task_major_order`, so each float
sum over a task's labels runs in one fixed order, docs/methods/skills.md §1.3). A comparison sort of the keys
``task·W + worker`` costs O(n log n) and, on ids whose order of appearance is not their sorted order (integer ids
spread over 2⁴⁰, say), 0.09–0.13 s at 10⁶ labels on this host; this least-significant-digit sort (a stable counting
sort by worker, then a stable counting sort of that order by task) gives the same permutation in two passes over
the rows, O(rows + tasks + workers) time and two int64 arrays of the rows' length (0.017 s on those rows).
Separate from :mod:`crowdflow.labels` so that importing the encoding does not import numba.
"""

from __future__ import annotations

import numpy as np

from crowdflow.compiled import compiled_kernel

__all__ = ["task_worker_order"]


@compiled_kernel
def _lsd_order(task: np.ndarray, worker: np.ndarray, n_tasks: int, n_workers: int) -> np.ndarray:
    n = task.size
    by_worker = np.zeros(n_workers + 1, dtype=np.int64)
    by_task = np.zeros(n_tasks + 1, dtype=np.int64)
    for i in range(n):
        by_worker[worker[i] + 1] += 1
        by_task[task[i] + 1] += 1
    for k in range(n_workers):
        by_worker[k + 1] += by_worker[k]
    for k in range(n_tasks):
        by_task[k + 1] += by_task[k]
    first = np.empty(n, dtype=np.int64)  # the rows in stable worker order
    for i in range(n):
        w = worker[i]
        first[by_worker[w]] = i
        by_worker[w] += 1
    order = np.empty(n, dtype=np.int64)  # that order, stably by task: (task, worker), ties in row order
    for p in range(n):
        i = first[p]
        t = task[i]
        order[by_task[t]] = i
        by_task[t] += 1
    return order


def task_worker_order(task: np.ndarray, worker: np.ndarray, n_tasks: int, n_workers: int) -> np.ndarray:
    """The permutation ``np.argsort(task * n_workers + worker, kind="stable")`` by two stable counting sorts.

    Parameters
    ----------
    task, worker : numpy.ndarray
        Integer codes per entry, ``0 <= task < n_tasks`` and ``0 <= worker < n_workers`` (not checked here).
    n_tasks, n_workers : int
        The code ranges.

    Returns
    -------
    numpy.ndarray
        int64 permutation of the entries: by task, then worker, equal keys in input order.
    """
    t = np.ascontiguousarray(task, dtype=np.int64)
    w = np.ascontiguousarray(worker, dtype=np.int64)
    return _lsd_order(t, w, int(n_tasks), int(n_workers))
