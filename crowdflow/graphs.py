"""Interaction graphs and the identifiability checks run before any fit.

- Worker interaction graph (labels): workers i, j are adjacent iff they labelled a common task
  (N = B Bᵀ with the diagonal zeroed). Single-coin skills are identifiable on a component iff it is
  not bipartite (docs/methods/skills.md §3.1–3.2); an isolated worker has no partner at all.
- Comparison graph (pairwise data): global scores are comparable only within a connected
  component (docs/methods/ranking.md §5.1); :func:`item_components` here, the check's report in
  :mod:`crowdflow.comparison_graphs`.
- Agent graph (personal models): must be connected with positive, symmetric weights
  (docs/methods/personal_models.md §3.2).

Everything is sparse (``scipy.sparse.csgraph``); components and bipartiteness come from one BFS per
component (:func:`graph_structure`): a component is bipartite iff no edge joins two nodes of the same
BFS level, and such an edge closes an odd cycle (the skills diagnostics report one as a witness).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, connected_components

from crowdflow._typing import SparseMatrix
from crowdflow.compiled import compiled_kernel
from crowdflow.labels import LabelMatrix, task_major_order

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Components:
    """Connected components of an undirected graph, with bipartiteness.

    Attributes
    ----------
    labels : numpy.ndarray
        Component id per node, numbered 0.. in order of each component's smallest node id.
    n_components : int
    bipartite : numpy.ndarray
        bool per component: True iff the component has no odd cycle (isolated nodes count as bipartite).
    colour : numpy.ndarray
        0/1 per node: a proper 2-colouring inside bipartite components (meaningless elsewhere).
    sizes : numpy.ndarray
        Nodes per component.
    """

    labels: np.ndarray
    n_components: int
    bipartite: np.ndarray
    colour: np.ndarray
    sizes: np.ndarray


def _symmetric_pattern(adj: SparseMatrix) -> sp.csr_matrix:
    a = sp.csr_matrix(adj, copy=True)
    a.setdiag(0)
    a.eliminate_zeros()
    # scipy-stubs leave sparse `!=` as object.__ne__ (bool); at runtime it is elementwise
    nz: Any = a
    a = ((nz != 0) + (nz.T != 0)).astype(np.int8)
    return sp.csr_matrix(a)


def without_diagonal(m: SparseMatrix) -> sp.csr_matrix:
    """A canonical CSR copy of ``m`` without its diagonal (an O(nnz) mask; ``setdiag`` would re-sort)."""
    m = sp.csr_matrix(m, copy=True)
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    m.data[m.indices == rows] = 0
    m.eliminate_zeros()
    m.sum_duplicates()
    m.sort_indices()
    return m


@dataclass(frozen=True)
class GraphStructure:
    """Components, bipartiteness and a BFS forest of an undirected graph (docs/methods/skills.md §3.2).

    Attributes
    ----------
    graph : Components
        Components numbered by their smallest member; ``colour`` = BFS depth mod 2 inside bipartite
        components (a proper 2-colouring), 0 in the others.
    depth : numpy.ndarray
        BFS level of each node from its component's root (the smallest node of the component).
    pred : numpy.ndarray
        BFS parent of each node (−1 for roots).
    odd_edge : numpy.ndarray
        (n_components, 2): per non-bipartite component the lexicographically smallest edge (u, v),
        u < v, joining two nodes of the same level (−1 for bipartite components).
    """

    graph: Components
    depth: np.ndarray
    pred: np.ndarray
    odd_edge: np.ndarray


def graph_structure(adj: SparseMatrix, symmetric: bool = False) -> GraphStructure:
    """Components, bipartiteness and odd-cycle edges from one BFS per component (docs/methods/skills.md §3.2).

    One compiled pass, O(n + |E|) (:func:`_bfs_forest`): a BFS from the smallest node of every
    component, neighbours taken in stored (sorted) order, which numbers the components by their
    smallest node and gives levels and BFS parents; a component is non-bipartite iff some edge joins
    two nodes of the same level (BFS layers alternate colours, so such an edge closes an odd cycle,
    and conversely a 2-colouring by level parity is proper when no such edge exists). The same
    forest as scipy's ``connected_components`` + ``breadth_first_order`` from a super-root
    (:func:`graph_structure_reference`, kept as the reference it is tested against), ~10x faster
    at 3.6·10^6 stored entries.

    Parameters
    ----------
    adj : scipy.sparse matrix
        n×n; any nonzero off-diagonal entry is an edge.
    symmetric : bool
        Set when ``adj`` is already a symmetric CSR with zero diagonal and sorted indices (e.g. N
        from :func:`label_moments`), to skip the symmetrisation.
    """
    a = _symmetric_adjacency(adj, symmetric)
    n = a.shape[0]
    if n == 0:
        return _empty_structure()
    comp, depth, pred, n_comp, odd_edge = _bfs_forest(a.indptr, a.indices, n)
    sizes = np.bincount(comp, minlength=n_comp)
    odd = odd_edge[:, 0] >= 0
    colour = np.where(odd[comp], 0, depth % 2).astype(np.int8)
    g = Components(labels=comp, n_components=int(n_comp), bipartite=~odd, colour=colour, sizes=sizes)
    return GraphStructure(graph=g, depth=depth, pred=pred, odd_edge=odd_edge)


def _symmetric_adjacency(adj: SparseMatrix, symmetric: bool) -> sp.csr_matrix:
    if symmetric:
        return sp.csr_matrix(adj)
    a = without_diagonal(adj)
    nz: Any = a  # scipy-stubs leave sparse `!=` as object.__ne__ (bool); at runtime it is elementwise
    a = sp.csr_matrix(((nz != 0) + (nz.T != 0)).astype(np.float64))
    a.sort_indices()
    return a


def _empty_structure() -> GraphStructure:
    empty = np.zeros(0, dtype=np.int64)
    g = Components(labels=empty, n_components=0, bipartite=np.zeros(0, bool), colour=empty.astype(np.int8), sizes=empty)
    return GraphStructure(graph=g, depth=empty, pred=empty, odd_edge=np.zeros((0, 2), dtype=np.int64))


@compiled_kernel
def _bfs_forest(
    indptr: np.ndarray, indices: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]:
    """One BFS per component from its smallest node, neighbours in stored order (scipy's BFS order).

    Returns component (numbered by smallest node), depth, BFS parent (−1 at roots), the number of
    components and, per component, the first stored edge (u, v), u < v, joining two nodes of one level.
    """
    comp = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    pred = np.full(n, -1, dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)
    n_comp = 0
    for r in range(n):
        if comp[r] >= 0:
            continue
        comp[r] = n_comp
        head, tail = 0, 1
        queue[0] = r
        while head < tail:
            u = queue[head]
            head += 1
            for p in range(indptr[u], indptr[u + 1]):
                v = indices[p]
                if comp[v] < 0:
                    comp[v] = n_comp
                    depth[v] = depth[u] + 1
                    pred[v] = u
                    queue[tail] = v
                    tail += 1
        n_comp += 1
    odd_edge = np.full((n_comp, 2), -1, dtype=np.int64)
    for u in range(n):
        c = comp[u]
        if odd_edge[c, 0] >= 0:
            continue
        for p in range(indptr[u], indptr[u + 1]):
            v = indices[p]
            if u < v and depth[u] == depth[v]:
                odd_edge[c, 0] = u
                odd_edge[c, 1] = v
                break
    return comp, depth, pred, n_comp, odd_edge


def graph_structure_reference(adj: SparseMatrix, symmetric: bool = False) -> GraphStructure:
    """:func:`graph_structure` by scipy's ``connected_components`` and ``breadth_first_order`` (the reference
    the compiled BFS is tested against)."""
    a = _symmetric_adjacency(adj, symmetric)
    n = a.shape[0]
    if n == 0:
        return _empty_structure()
    pattern = sp.csr_matrix((np.ones(a.nnz), a.indices, a.indptr), shape=a.shape)
    n_comp, raw = connected_components(pattern, directed=True, connection="strong")
    _, first = np.unique(raw, return_index=True)  # smallest node of each raw component
    rank = np.argsort(first, kind="stable")
    remap = np.empty(n_comp, dtype=np.int64)
    remap[rank] = np.arange(n_comp)
    comp = remap[raw]
    roots = first[rank]  # roots[c] = smallest node of component c
    sizes = np.bincount(comp, minlength=n_comp)
    # BFS from a super-root (node n) whose children are the component roots
    indptr = np.concatenate([pattern.indptr, [pattern.indptr[-1] + n_comp]])
    indices = np.concatenate([pattern.indices, roots]).astype(pattern.indices.dtype, copy=False)
    sup = sp.csr_matrix((np.ones(indices.size), indices, indptr), shape=(n + 1, n + 1))
    order, pred_all = breadth_first_order(sup, n, directed=True, return_predecessors=True)
    pos = np.empty(n + 1, dtype=np.int64)
    pos[order] = np.arange(n + 1)
    parent_pos = pos[pred_all[order[1:]]]  # non-decreasing
    level_of_pos = np.empty(n + 1, dtype=np.int64)
    level_of_pos[0] = 0
    end, level = 1, 0  # level `level` occupies positions [previous end, end)
    while end < n + 1:
        nxt = 1 + int(np.searchsorted(parent_pos, end, side="left"))
        level += 1
        level_of_pos[end:nxt] = level
        end = nxt
    depth = level_of_pos[pos[:n]] - 1
    pred = pred_all[:n].astype(np.int64)
    pred[pred == n] = -1
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(pattern.indptr))
    cols = pattern.indices.astype(np.int64)
    same = (depth[rows] == depth[cols]) & (rows < cols)
    su, sv = rows[same], cols[same]
    odd = np.zeros(n_comp, dtype=bool)
    odd[comp[su]] = True
    odd_edge = np.full((n_comp, 2), -1, dtype=np.int64)
    if su.size:  # CSR order = (u, v) lexicographic: the first hit per component is the smallest
        cs, first_hit = np.unique(comp[su], return_index=True)
        odd_edge[cs, 0] = su[first_hit]
        odd_edge[cs, 1] = sv[first_hit]
    colour = np.where(odd[comp], 0, depth % 2).astype(np.int8)
    g = Components(labels=comp, n_components=int(n_comp), bipartite=~odd, colour=colour, sizes=sizes)
    return GraphStructure(graph=g, depth=depth, pred=pred, odd_edge=odd_edge)


def components(adj: SparseMatrix) -> Components:
    """Connected components and bipartiteness of the undirected graph with adjacency ``adj``.

    The components of :func:`graph_structure` (one BFS per component; a component is bipartite iff no
    edge joins two nodes of the same BFS level); ``colour`` is the level parity inside bipartite
    components and 0 elsewhere. O(n + |E|).

    Parameters
    ----------
    adj : scipy.sparse matrix
        n×n; any nonzero off-diagonal entry is an edge (made symmetric; self-loops ignored).

    Returns
    -------
    Components
    """
    return graph_structure(adj).graph


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
    into a dense upper-triangular W×W count (int32, at most 64 MB, the size of N itself there), read
    out row by row; otherwise each row is accumulated over the worker's tasks with a marker
    (Gustavson's product B Bᵀ without forming B, O(W) scratch). Rows come out with sorted indices.
    Equal to the sparse product P = Xᵀ Z of :func:`pair_counts_reference` (N = P mod K,
    Agree = P div K); the dense kernel is ~8x faster than it at 10^6 labels and 2,000 workers (the
    row kernel is as fast, bound by the same random reads).

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
        N as int64 W×W CSR with zero diagonal and sorted indices, and the agreement count of every
        stored entry of N (aligned with ``N.data``).
    """
    w = int(n_workers)
    worker = np.asarray(worker_idx)
    agree = class_idx is not None
    cls = np.asarray(class_idx) if class_idx is not None else np.zeros(1, dtype=np.int64)
    tptr = np.asarray(task_indptr, dtype=np.int64)
    k = np.diff(tptr)
    n_pairs = float(np.dot(k, k - 1)) / 2 if k.size else 0.0
    if w * w <= _DENSE_PAIRS_MAX and w * w <= 8 * n_pairs:
        indptr, indices, n_data, a_data = _pair_count_dense(tptr, worker, cls, w, agree)
    else:
        indptr, indices, n_data, a_data = _pair_count_rows(tptr, worker, cls, w, agree)
    if indptr[-1] >= 2**31 - 1:
        indices = indices.astype(np.int64)
    n_mat = sp.csr_matrix((n_data, indices, indptr), shape=(w, w))
    n_mat.has_sorted_indices = True
    return n_mat, a_data


#: Largest W² for which :func:`pair_counts` accumulates in a dense W×W table (int32: 64 MB).
_DENSE_PAIRS_MAX = 1 << 24


@compiled_kernel
def _pair_count_dense(
    task_indptr: np.ndarray, worker: np.ndarray, cls: np.ndarray, n_workers: int, agree: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_pair_count_rows` through a dense upper-triangular W×W count, tasks streamed in order."""
    w = n_workers
    acc = np.zeros(w * w, dtype=np.int32)
    acc_a = np.zeros(w * w if agree else 1, dtype=np.int32)
    for t in range(task_indptr.size - 1):
        s, e = task_indptr[t], task_indptr[t + 1]
        for p in range(s, e):
            wp = worker[p]
            for q in range(p + 1, e):
                wq = worker[q]
                cell = wp * w + wq if wp < wq else wq * w + wp
                acc[cell] += 1
                if agree and cls[p] == cls[q]:
                    acc_a[cell] += 1
    tile = 64  # mirror the upper triangle tile by tile (cache-friendly), then read rows in order
    for bi in range(0, w, tile):
        for bj in range(bi, w, tile):
            for i in range(bi, min(bi + tile, w)):
                for j in range(max(bj, i + 1), min(bj + tile, w)):
                    acc[j * w + i] = acc[i * w + j]
                    if agree:
                        acc_a[j * w + i] = acc_a[i * w + j]
    indptr = np.zeros(w + 1, dtype=np.int64)
    for i in range(w):
        cnt = 0
        for j in range(i * w, (i + 1) * w):
            if acc[j] != 0:
                cnt += 1
        indptr[i + 1] = indptr[i] + cnt - (1 if acc[i * w + i] != 0 else 0)
    nnz = indptr[w]
    indices = np.empty(nnz, dtype=np.int32)
    n_out = np.empty(nnz, dtype=np.int64)
    a_out = np.zeros(nnz, dtype=np.int64)
    for i in range(w):
        k = indptr[i]
        base = i * w
        for j in range(w):
            v = acc[base + j]
            if v != 0 and j != i:
                indices[k] = j
                n_out[k] = v
                if agree:
                    a_out[k] = acc_a[base + j]
                k += 1
    return indptr, indices, n_out, a_out


@compiled_kernel
def _pair_count_rows(
    task_indptr: np.ndarray, worker: np.ndarray, cls: np.ndarray, n_workers: int, agree: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows of N (and Agree) with sorted indices: CSR arrays indptr, indices (int32), N, Agree (int64)."""
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
    acc_n = np.zeros(n_workers, dtype=np.int64)
    acc_a = np.zeros(n_workers, dtype=np.int64)
    touched = np.empty(n_workers, dtype=np.int64)
    indptr = np.zeros(n_workers + 1, dtype=np.int64)
    cap = max(16, min(4 * n_lab + n_workers, n_workers * (n_workers - 1)))
    indices = np.empty(cap, dtype=np.int32)
    n_out = np.empty(cap, dtype=np.int64)
    a_out = np.zeros(cap if agree else 1, dtype=np.int64)
    nnz = 0
    for i in range(n_workers):
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
        if nnz + nt > cap:
            cap = max(2 * cap, nnz + nt)
            indices2 = np.empty(cap, dtype=np.int32)
            indices2[:nnz] = indices[:nnz]
            indices = indices2
            n2 = np.empty(cap, dtype=np.int64)
            n2[:nnz] = n_out[:nnz]
            n_out = n2
            if agree:
                a2 = np.zeros(cap, dtype=np.int64)
                a2[:nnz] = a_out[:nnz]
                a_out = a2
        if nt * 16 >= n_workers:  # dense row: a scan of the marker is cheaper than a sort
            k = nnz
            for j in range(n_workers):
                if mark[j] == i:
                    indices[k] = j
                    k += 1
        else:
            srt = np.sort(touched[:nt])
            for k in range(nt):
                indices[nnz + k] = srt[k]
        for k in range(nnz, nnz + nt):
            j = indices[k]
            n_out[k] = acc_n[j]
            if agree:
                a_out[k] = acc_a[j]
        nnz += nt
        indptr[i + 1] = nnz
    if not agree:
        a_out = np.zeros(nnz, dtype=np.int64)
    return indptr, indices[:nnz].copy(), n_out[:nnz].copy(), a_out[:nnz].copy()


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


@dataclass(frozen=True)
class WorkerGraphReport:
    """Identifiability of the worker interaction graph.

    Attributes
    ----------
    workers : pandas.DataFrame
        worker, component, n_labels, n_partners, status (``ok`` | ``bipartite_component`` |
        ``isolated``).
    components : pandas.DataFrame
        component, n_workers, n_edges, n_labels, bipartite, colour_sizes, status, workers (first 20 ids).
    co_labels : scipy.sparse.csr_matrix or None
        N (see :func:`co_label_counts`), returned so fits do not rebuild it; None when the report was
        built without pairs (:mod:`crowdflow.worker_parity`).
    graph : Components
    """

    workers: pd.DataFrame
    components: pd.DataFrame
    co_labels: sp.csr_matrix | None
    graph: Components

    @property
    def failing(self) -> pd.DataFrame:
        """Components whose status is not ``ok``."""
        return self.components[self.components["status"] != "ok"]


def worker_graph_report(lm: LabelMatrix, max_listed: int = 20) -> WorkerGraphReport:
    """Components, bipartiteness and isolated workers of the worker interaction graph.

    docs/methods/skills.md §3.2: a component is ``ok`` iff it contains an odd cycle; a bipartite
    component (a single edge, a tree, an even cycle…) does not identify its skills; a worker with no
    co-labeller is ``isolated``.

    Parameters
    ----------
    lm : LabelMatrix
    max_listed : int
        How many worker ids to list per component.
    """
    return worker_graph_from_counts(co_label_counts(lm), lm.labels_per_worker(), lm.workers, max_listed)


def worker_graph_from_counts(
    n: sp.csr_matrix, n_labels: np.ndarray, worker_ids: np.ndarray, max_listed: int = 20
) -> WorkerGraphReport:
    """:func:`worker_graph_report` from N (symmetric CSR, zero diagonal), the labels per worker and the worker ids.

    The form a partitioned run uses: N is a sum over partitions that hold whole tasks, so no process holds the
    labels (docs/scale.md).
    """
    g = graph_structure(n, symmetric=True).graph  # N is symmetric with zero diagonal: no symmetrisation
    return worker_graph_from_components(g, np.diff(n.indptr), n_labels, worker_ids, max_listed, co_labels=n)


def worker_graph_from_components(
    g: Components,
    n_partners: np.ndarray,
    n_labels: np.ndarray,
    worker_ids: np.ndarray,
    max_listed: int = 20,
    co_labels: sp.csr_matrix | None = None,
) -> WorkerGraphReport:
    """The report's tables from the worker graph's components and each worker's number of distinct partners.

    One place for the tables whether the components come from N (:func:`worker_graph_from_counts`) or from
    the parity union-find over the labels that never forms a pair (:mod:`crowdflow.worker_parity`).
    """
    comp_status = np.where(g.bipartite, "bipartite_component", "ok").astype(object)
    comp_status[(g.sizes == 1)] = "isolated"
    worker_status = comp_status[g.labels]
    workers = pd.DataFrame(
        {
            "worker": worker_ids.astype(str),
            "component": g.labels,
            "n_labels": n_labels.astype(np.int64),
            "n_partners": n_partners.astype(np.int64),
            "status": worker_status.astype(str),
        }
    )
    edges_per_comp = np.bincount(g.labels, weights=n_partners, minlength=g.n_components) / 2
    labels_per_comp = np.bincount(g.labels, weights=n_labels, minlength=g.n_components)
    colour1 = np.bincount(g.labels, weights=g.colour, minlength=g.n_components).astype(np.int64)
    order = np.argsort(g.labels, kind="stable")
    starts = np.searchsorted(g.labels[order], np.arange(g.n_components))
    listed = [
        worker_ids[order[s : s + min(int(sz), max_listed)]].astype(str).tolist()
        for s, sz in zip(starts, g.sizes, strict=True)
    ]
    colour_sizes = [
        f"{int(sz - c1)}/{int(c1)}" if bip else "" for sz, c1, bip in zip(g.sizes, colour1, g.bipartite, strict=True)
    ]
    comps = pd.DataFrame(
        {
            "component": np.arange(g.n_components, dtype=np.int64),
            "n_workers": g.sizes.astype(np.int64),
            "n_edges": edges_per_comp.astype(np.int64),
            "n_labels": labels_per_comp.astype(np.int64),
            "bipartite": g.bipartite,
            "colour_sizes": colour_sizes,
            "status": comp_status.astype(str),
            "workers": [",".join(w) for w in listed],
        }
    )
    return WorkerGraphReport(workers=workers, components=comps, co_labels=co_labels, graph=g)


def describe_failures(
    report: WorkerGraphReport,
    statuses: tuple[str, ...] = ("bipartite_component", "isolated"),
    limit: int = 10,
) -> str:
    """One human-readable line per failing component (id, status, size, colour classes, workers).

    Parameters
    ----------
    report : WorkerGraphReport
    statuses : tuple of str
        Which component statuses to describe.
    limit : int
        At most this many lines, then a count of the rest.
    """
    lines = []
    failing = report.components[report.components["status"].isin(statuses)]
    row: Any  # itertuples rows: namedtuples of the report's columns
    for row in failing.head(limit).itertuples(index=False):
        more = row.n_workers - len(row.workers.split(",")) if row.workers else 0
        extra = f" (+{more} more)" if more > 0 else ""
        colours = f", colour classes {row.colour_sizes}" if row.status == "bipartite_component" else ""
        lines.append(
            f"component {row.component}: {row.status}, {row.n_workers} workers{colours}, "
            f"{row.n_labels} labels: [{row.workers}]{extra}"
        )
    if len(failing) > limit:
        lines.append(f"... and {len(failing) - limit} more failing components")
    return "\n".join(lines)


def item_components(item_a: np.ndarray, item_b: np.ndarray, n_items: int) -> Components:
    """Components of the comparison graph: items adjacent iff compared at least once.

    Parameters
    ----------
    item_a, item_b : numpy.ndarray
        Dense item codes of each comparison.
    n_items : int
    """
    data = np.ones(item_a.size, dtype=np.int8)
    adj = sp.csr_matrix((data, (item_a, item_b)), shape=(n_items, n_items))
    return components(adj)


@dataclass(frozen=True)
class AgentGraphReport:
    """Checks on the agent similarity graph (personal models).

    Attributes
    ----------
    n_agents, n_components : int
    nonpositive_weights : pandas.DataFrame
        Edge rows (source, target, weight) with weight <= 0 or not finite.
    asymmetric : pandas.DataFrame
        source, target, weight, reverse_weight where both directions are given with different weights.
    agents_without_edges : list of str
    unknown_agents : list of str
        Edge endpoints missing from the agents table.
    """

    n_agents: int
    n_components: int
    nonpositive_weights: pd.DataFrame
    asymmetric: pd.DataFrame
    agents_without_edges: list[str]
    unknown_agents: list[str]

    @property
    def ok(self) -> bool:
        return (
            self.n_components == 1
            and self.nonpositive_weights.empty
            and self.asymmetric.empty
            and not self.unknown_agents
        )


def agent_graph_report(edges: pd.DataFrame, agents: list[str] | np.ndarray) -> AgentGraphReport:
    """Connectivity, positivity and symmetry of an undirected weighted agent graph.

    An edge given in both directions must carry the same weight; an edge given once is read as
    undirected.

    Parameters
    ----------
    edges : pandas.DataFrame
        Columns ``source, target, weight``.
    agents : array-like of str
        All agent ids.
    """
    agents_arr = np.asarray(sorted({str(a) for a in agents}), dtype=object)
    src = edges["source"].astype(str).to_numpy()
    dst = edges["target"].astype(str).to_numpy()
    w = pd.to_numeric(edges["weight"], errors="coerce").to_numpy(dtype=np.float64)
    bad_w = ~np.isfinite(w) | (w <= 0)
    nonpos = edges.loc[bad_w, ["source", "target", "weight"]]
    known = set(agents_arr.tolist())
    unknown = sorted((set(src.tolist()) | set(dst.tolist())) - known)
    e = pd.DataFrame({"source": src, "target": dst, "weight": w})
    rev = e.rename(columns={"source": "target", "target": "source", "weight": "reverse_weight"})
    both = e.merge(rev, on=["source", "target"], how="inner")
    asym = both[~np.isclose(both["weight"], both["reverse_weight"], rtol=1e-12, atol=0)]
    asym = asym[asym["source"] < asym["target"]].reset_index(drop=True)
    index = pd.Index(agents_arr)
    idx = index.get_indexer(src)
    jdx = index.get_indexer(dst)
    ok = (idx >= 0) & (jdx >= 0) & (idx != jdx)
    n = agents_arr.size
    adj = sp.csr_matrix((np.ones(int(ok.sum())), (idx[ok], jdx[ok])), shape=(n, n))
    g = components(adj)
    deg = np.diff(_symmetric_pattern(adj).indptr)
    return AgentGraphReport(
        n_agents=int(n),
        n_components=int(g.n_components),
        nonpositive_weights=nonpos.reset_index(drop=True),
        asymmetric=asym,
        agents_without_edges=agents_arr[deg == 0].astype(str).tolist(),
        unknown_agents=unknown,
    )


def agent_graph_problems(report: AgentGraphReport, require_connected: bool = True) -> list[str]:
    """Human-readable blocking problems of an agent graph (empty list: the graph is usable).

    Non-positive or non-finite weights, asymmetric weights and unknown endpoints are always problems;
    more than one connected component is one when ``require_connected``.
    """
    problems = []
    if not report.nonpositive_weights.empty:
        problems.append(f"{len(report.nonpositive_weights)} edges with weight <= 0 or not finite")
    if not report.asymmetric.empty:
        pairs = ", ".join(f"({r.source},{r.target})" for r in report.asymmetric.head(5).itertuples(index=False))
        problems.append(f"{len(report.asymmetric)} edges given in both directions with different weights: {pairs}")
    if report.unknown_agents:
        problems.append(f"edges name agents missing from the agents table: {report.unknown_agents[:10]}")
    if require_connected and report.n_components > 1:
        problems.append(
            f"the agent graph has {report.n_components} connected components "
            f"(agents without edges: {report.agents_without_edges[:10]})"
        )
    return problems
