"""Worker pairs of labels grouped by task: co-label counts N = B Bᵀ and agreements (compiled, exact integers).

docs/methods/skills.md §1.4, §2.1. Only rank-one PGD (and the optional pair statistics: spectral diagnostics,
``min_pair_count``, ``prune_spammers``) needs them; every other path of the skills job is pair-free
(:mod:`crowdflow.graphs.parity`, docs/scale.md "Memory laws").
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from crowdflow.compiled import compiled_kernel
from crowdflow.labels import LabelMatrix, task_major_order


def labels_by_task(lm: LabelMatrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels grouped by task: row pointer over tasks (length T + 1), worker and class code per label.

    Entries are in (task, worker) order; no sort when ``lm`` is already in that order.
    """
    order, _ = task_major_order(lm.task_idx, lm.worker_idx, lm.n_workers)
    t = lm.task_idx[order]
    indptr = np.zeros(lm.n_tasks + 1, dtype=np.int64)
    np.cumsum(np.bincount(t, minlength=lm.n_tasks), out=indptr[1:])
    return indptr, lm.worker_idx[order], lm.class_idx[order]


def _symmetric_sorted(m: sp.csr_matrix) -> sp.csr_matrix:
    """Canonical (sorted-index) CSR of a *symmetric* CSR matrix by one counting-sort transposition.

    The CSC arrays of a symmetric matrix are its CSR arrays with sorted indices; ``csr_tocsc`` is
    O(nnz + n), cheaper than sorting every row.
    """
    c = m.tocsc()
    out = sp.csr_matrix((c.data, c.indices, c.indptr), shape=m.shape)
    out.has_sorted_indices = True
    return out


def pair_counts(
    task_indptr: np.ndarray,
    worker_idx: np.ndarray,
    class_idx: np.ndarray | None,
    n_workers: int,
    n_classes: int,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Co-label counts N and agreement counts of labels grouped by task, in one compiled pass.

    docs/methods/skills.md §2.1. Every pair (i, j) of labellers of every task adds 1 to N_ij and
    1{Y_it = Y_jt} to Agree_ij: the Σ_t k_t² work of N = B Bᵀ, exact integers. Two compiled kernels:
    with few workers (W² ≤ 2^24 and W² ≤ 8 × the number of pairs) the tasks are streamed in order
    into a dense count of the W(W − 1)/2 pairs i < j (one int64 cell N + 2³²·Agree per pair, int32 N alone
    without the agreements: at most 64 MB, about the size of N itself there), read out row by row; otherwise
    each row is accumulated over the worker's tasks with a marker
    (Gustavson's product B Bᵀ without forming B, O(W) scratch; a counting pass first sizes the outputs exactly).
    Rows come out with sorted indices; indices, N and Agree are int32 (12 bytes a stored entry).
    Equal to the sparse product P = Xᵀ Z of :func:`pair_counts_reference` (N = P mod K,
    Agree = P div K); the dense kernel is ~8x faster than it at 10^6 labels and 2,000 workers, and 3-9× faster
    than the row kernel at 10^6 labels and 1,000-3,000 workers (0.020 s against 0.33 s at 1,000 workers and
    5.5·10^6 pairs, 0.11 s against 0.33 s at 3,000 workers and 2.9·10^6 pairs, process time on this host).

    Parameters
    ----------
    task_indptr : numpy.ndarray
        Length T + 1: the labels of task t are entries ``task_indptr[t]:task_indptr[t+1]`` of
        ``worker_idx`` / ``class_idx`` (one label per (task, worker)).
    worker_idx, class_idx : numpy.ndarray
        Worker and class code per label, grouped by task; ``class_idx=None`` counts N only (the
        agreements returned are then zeros).
    n_workers, n_classes : int

    Returns
    -------
    (scipy.sparse.csr_matrix, numpy.ndarray)
        N as int32 W×W CSR (int32 indices, int64 row pointer) with zero diagonal and sorted indices, and the
        agreement count (int32) of every stored entry of N (aligned with ``N.data``).
    """
    w = int(n_workers)
    worker = np.asarray(worker_idx)
    agree = class_idx is not None
    cls = np.asarray(class_idx) if class_idx is not None else np.zeros(1, dtype=np.int64)
    tptr = np.asarray(task_indptr, dtype=np.int64)
    k = np.diff(tptr)
    n_pairs = float(np.dot(k, k - 1)) / 2 if k.size else 0.0
    if w * w <= _DENSE_PAIRS_MAX and w * w <= _DENSE_CELLS_PER_PAIR * n_pairs:
        acc = np.zeros(w * (w - 1) // 2, dtype=np.int64 if agree else np.int32)
        indptr, indices, n_data, a_data = _pair_count_dense(tptr, worker, cls, w, acc, agree)
        del acc
    else:
        indptr, indices, n_data, a_data = _pair_count_rows(tptr, worker, cls, w, agree)
    if indptr[-1] >= 2**31 - 1:
        indices = indices.astype(np.int64)
    n_mat = sp.csr_matrix((n_data, indices, indptr), shape=(w, w))
    n_mat.has_sorted_indices = True
    return n_mat, a_data


#: Largest W² for which :func:`pair_counts` accumulates in a dense table of the pairs (int64 N + 2³²·Agree: 64 MB).
_DENSE_PAIRS_MAX = 1 << 24
#: ... and for which W² ≤ this many times the pairs of labels (a table much larger than the pairs it counts is slower
#: to read out than the row kernel).
_DENSE_CELLS_PER_PAIR = 8


@compiled_kernel
def _pair_count_dense(
    task_indptr: np.ndarray, worker: np.ndarray, cls: np.ndarray, n_workers: int, acc: np.ndarray, agree: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_pair_count_rows` through a dense count of the W(W − 1)/2 worker pairs i < j, tasks streamed in order.

    ``acc`` (zeros, W(W − 1)/2 cells, row-major upper triangle): with ``agree`` each int64 cell holds
    N + 2³²·Agree, so a pair of labels updates one cell (one cache line where two tables took two), without it int32
    N. Read out in two passes over the triangle: row lengths (the cells of row i, and of column i), then every
    non-zero cell (i, j) written to row i after its lower part and to row j in its lower part, both in increasing
    column order (sorted rows, no mirror copy of the table).
    """
    w = n_workers
    off = np.empty(w + 1, dtype=np.int64)  # cell of (i, j), i < j: off[i] + j − i − 1
    for i in range(w + 1):
        off[i] = i * w - i * (i + 1) // 2
    one_agree = np.int64(1) << 32
    for t in range(task_indptr.size - 1):
        s, e = task_indptr[t], task_indptr[t + 1]
        for p in range(s, e):
            wp = worker[p]
            cp = cls[p] if agree else 0
            for q in range(p + 1, e):
                wq = worker[q]
                cell = off[wp] + wq - wp - 1 if wp < wq else off[wq] + wp - wq - 1
                if agree and cls[q] == cp:
                    acc[cell] += 1 + one_agree
                else:
                    acc[cell] += 1
    upper = np.zeros(w, dtype=np.int64)
    lower = np.zeros(w, dtype=np.int64)
    for i in range(w):
        for c in range(off[i], off[i + 1]):
            if acc[c] != 0:
                upper[i] += 1
                lower[i + 1 + c - off[i]] += 1
    indptr = np.zeros(w + 1, dtype=np.int64)
    for i in range(w):
        indptr[i + 1] = indptr[i] + lower[i] + upper[i]
    nnz = indptr[w]
    indices = np.empty(nnz, dtype=np.int32)
    n_out = np.empty(nnz, dtype=np.int32)
    a_out = np.zeros(nnz, dtype=np.int32)
    at_lower = indptr[:w].copy()
    at_upper = indptr[:w] + lower
    low = (np.int64(1) << 32) - 1
    for i in range(w):
        for c in range(off[i], off[i + 1]):
            v = np.int64(acc[c])
            if v != 0:
                j = i + 1 + c - off[i]
                n_v = v & low
                a_v = v >> 32 if agree else 0
                k = at_upper[i]
                indices[k] = j
                n_out[k] = n_v
                a_out[k] = a_v
                at_upper[i] = k + 1
                k = at_lower[j]
                indices[k] = i
                n_out[k] = n_v
                a_out[k] = a_v
                at_lower[j] = k + 1
    return indptr, indices, n_out, a_out


@compiled_kernel
def _pair_count_rows(
    task_indptr: np.ndarray, worker: np.ndarray, cls: np.ndarray, n_workers: int, agree: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows of N (and Agree) with sorted indices: CSR arrays indptr (int64), indices, N, Agree (int32).

    Two passes over each worker's tasks with an O(W) marker: the first counts the row lengths (the distinct
    partners), so the outputs are allocated once at their exact size (12 bytes a stored entry, never a
    growing buffer or a trimming copy); the second fills them.
    """
    n_tasks = task_indptr.size - 1
    n_lab = worker.size
    # the labels of each worker (positions in the task-grouped arrays) by a counting sort, and their task
    w_ptr = np.zeros(n_workers + 1, dtype=np.int64)
    for q in range(n_lab):
        w_ptr[worker[q] + 1] += 1
    for i in range(n_workers):
        w_ptr[i + 1] += w_ptr[i]
    fill = w_ptr[:-1].copy()
    w_lab = np.empty(n_lab, dtype=np.int64)
    task_of = np.empty(n_lab, dtype=np.int64)
    for t in range(n_tasks):
        for q in range(task_indptr[t], task_indptr[t + 1]):
            task_of[q] = t
            i = worker[q]
            w_lab[fill[i]] = q
            fill[i] += 1
    mark = np.full(n_workers, -1, dtype=np.int64)
    indptr = np.zeros(n_workers + 1, dtype=np.int64)
    for i in range(n_workers):  # pass 1: row lengths
        nt = 0
        for p in range(w_ptr[i], w_ptr[i + 1]):
            t = task_of[w_lab[p]]
            for q in range(task_indptr[t], task_indptr[t + 1]):
                j = worker[q]
                if j != i and mark[j] != i:
                    mark[j] = i
                    nt += 1
        indptr[i + 1] = indptr[i] + nt
    nnz = indptr[n_workers]
    indices = np.empty(nnz, dtype=np.int32)
    n_out = np.empty(nnz, dtype=np.int32)
    a_out = np.zeros(nnz if agree else 0, dtype=np.int32)
    mark[:] = -1
    acc_n = np.zeros(n_workers, dtype=np.int64)
    acc_a = np.zeros(n_workers, dtype=np.int64)
    touched = np.empty(n_workers, dtype=np.int64)
    for i in range(n_workers):  # pass 2: the counts
        nt = 0
        for p in range(w_ptr[i], w_ptr[i + 1]):
            q0 = w_lab[p]
            t = task_of[q0]
            ci = cls[q0] if agree else 0
            for q in range(task_indptr[t], task_indptr[t + 1]):
                j = worker[q]
                if j == i:
                    continue
                if mark[j] != i:
                    mark[j] = i
                    acc_n[j] = 0
                    acc_a[j] = 0
                    touched[nt] = j
                    nt += 1
                acc_n[j] += 1
                if agree and cls[q] == ci:
                    acc_a[j] += 1
        start = indptr[i]
        if nt * 16 >= n_workers:  # dense row: a scan of the marker is cheaper than a sort
            k = start
            for j in range(n_workers):
                if mark[j] == i:
                    indices[k] = j
                    k += 1
        else:
            srt = np.sort(touched[:nt])
            for k in range(nt):
                indices[start + k] = srt[k]
        for k in range(start, start + nt):
            j = indices[k]
            n_out[k] = acc_n[j]
            if agree:
                a_out[k] = acc_a[j]
    if not agree:
        a_out = np.zeros(nnz, dtype=np.int32)
    return indptr, indices, n_out, a_out


def pair_counts_reference(
    task_indptr: np.ndarray, worker_idx: np.ndarray, class_idx: np.ndarray, n_workers: int, n_classes: int
) -> tuple[sp.csr_matrix, np.ndarray]:
    """:func:`pair_counts` from one scipy sparse product (the reference the compiled kernel is tested against).

    docs/methods/skills.md §2.1. With X the (T·M)×W 0/1 matrix X[t·M + l, i] = 1{Y_it = l} and Z
    the (T·M)×W matrix Z[t·M + l, j] = 1 + K·1{Y_jt = l} (one entry for every class l of every label
    of j), the integer product P = Xᵀ Z has, for i ≠ j,

        P_ij = Σ_t 1{i, j both label t} (1 + K·1{Y_it = Y_jt}) = N_ij + K·Agree_ij,

    so N = P mod K and Agree = P div K for any K > max N_ij (K = T + 1). The product touches each
    co-labelling pair of each task once, the same work Σ_t k_t² as N = B Bᵀ alone, and returns N and
    the agreements on one shared sparsity pattern. Exact integer arithmetic (int64). Never a dense W×W.

    Parameters
    ----------
    task_indptr : numpy.ndarray
        Length T + 1: the labels of task t are entries ``task_indptr[t]:task_indptr[t+1]`` of
        ``worker_idx`` / ``class_idx`` (one label per (task, worker)).
    worker_idx, class_idx : numpy.ndarray
        Worker and class code per label, grouped by task.
    n_workers, n_classes : int

    Returns
    -------
    (scipy.sparse.csr_matrix, numpy.ndarray)
        N as int64 W×W CSR with zero diagonal and sorted indices, and the agreement count of every
        stored entry of N (aligned with ``N.data``).
    """
    m = int(n_classes)
    n_tasks = task_indptr.size - 1
    k = np.diff(task_indptr)
    big = np.int64(n_tasks + 1)
    idx_t = np.int32 if max(int(worker_idx.size) * m, n_workers, n_tasks * m) < 2**31 - 1 else np.int64
    # Z: row t·M + l holds every labeller of task t (labels of a task are contiguous)
    row_len = np.repeat(k, m)
    z_indptr = np.zeros(n_tasks * m + 1, dtype=np.int64)
    np.cumsum(row_len, out=z_indptr[1:])
    nz = int(z_indptr[-1])
    rows = np.repeat(np.arange(n_tasks * m, dtype=np.int64), row_len)
    src = np.arange(nz, dtype=np.int64) - z_indptr[rows] + task_indptr[rows // m]
    del row_len
    same = class_idx[src] == (rows % m)
    del rows
    z_ind = worker_idx[src].astype(idx_t)
    del src
    z = sp.csr_matrix((1 + big * same.astype(np.int64), z_ind, z_indptr.astype(idx_t)), shape=(n_tasks * m, n_workers))
    # X = the entries of Z with Y_jt = l (one per label), same row structure
    label_row = np.repeat(np.arange(n_tasks, dtype=np.int64), k) * m + class_idx
    x_indptr = np.zeros(n_tasks * m + 1, dtype=np.int64)
    np.cumsum(np.bincount(label_row, minlength=n_tasks * m), out=x_indptr[1:])
    del label_row
    x = sp.csr_matrix(
        (np.ones(worker_idx.size, dtype=np.int64), z_ind[same], x_indptr.astype(idx_t)),
        shape=(n_tasks * m, n_workers),
    )
    del same, z_ind
    xt = sp.csr_matrix(x.T)  # W × T·M, counting-sort transposition
    del x
    prod = sp.csr_matrix(xt @ z)
    del xt, z
    prod = _symmetric_sorted(prod)
    rows_p = np.repeat(np.arange(n_workers), np.diff(prod.indptr))
    off = prod.indices != rows_p
    indptr = np.zeros(n_workers + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows_p[off], minlength=n_workers), out=indptr[1:])
    del rows_p
    data = prod.data[off]
    indices = prod.indices[off]
    del prod, off
    n_mat = sp.csr_matrix((data % big, indices, indptr), shape=(n_workers, n_workers))
    n_mat.has_sorted_indices = True
    return n_mat, data // big


def co_label_counts(lm: LabelMatrix) -> sp.csr_matrix:
    """N = B Bᵀ with zero diagonal: N_ij = number of tasks labelled by both workers i and j.

    docs/methods/skills.md §1.4/§2.1. :func:`pair_counts` without the agreements on the labels grouped
    by task; float64 CSR with sorted indices.
    """
    indptr, w, _ = labels_by_task(lm)
    n, _ = pair_counts(indptr, w, None, lm.n_workers, lm.n_classes)
    return sp.csr_matrix((n.data.astype(np.float64), n.indices, n.indptr), shape=n.shape)


def pair_bound(task_sizes: np.ndarray, n_workers: int) -> int:
    """An upper bound on the stored entries of N, known before any pair is formed: min(Σ_t k_t(k_t − 1), W(W − 1)).

    Each task with k_t distinct workers adds at most k_t(k_t − 1) ordered pairs; there are W(W − 1) in all.

    Parameters
    ----------
    task_sizes : numpy.ndarray
        Distinct workers per task (k_t).
    n_workers : int
    """
    k = np.asarray(task_sizes, dtype=np.int64)
    return int(min(int(np.dot(k, k - 1)), n_workers * (n_workers - 1)))
