"""Compiled passes that turn comparison rows into the graph's distinct pairs and its Laplacian.

Rows ``(i_k, j_k, w_k)`` give the unordered pairs ``u = min(i, j) < v = max(i, j)``. :func:`pair_table` numbers
the distinct pairs in ``(u, v)`` order and sums their weights ``w_e = Σ_{k on e} w_k`` without sorting the rows:

* few items (``n² ≤`` :data:`DENSE_PAIR_MAX_CELLS` and not much larger than the row count): the weights are
  accumulated in a dense ``n × n`` table indexed by ``u·n + v``, whose non-zero cells, read in index order, are
  the pairs in ``(u, v)`` order;
* otherwise the rows' keys ``u·n + v``, each packed with its row position, are put in order by a least-significant-
  digit radix sort (11-bit digits, stable), so equal pairs are adjacent, in row order, and numbered in key order
  (a per-bucket ``argsort`` after a counting sort on ``u`` took 1.6 s at 10^7 rows and 10^5 items, the radix sort
  0.7 s); when key and position do not fit in 63 bits, the rows are bucketed by ``u`` and each bucket is sorted by
  ``v`` (stable).

:func:`laplacian_csr` writes the CSR Laplacian ``D − A`` in one pass over the ordered pairs (no COO sort), and
:func:`drop_nodes` deletes rows and columns of a CSR matrix (the grounded Laplacian of the solver) in one pass.
The references are the sort-based ``_unique_edges`` and ``_laplacian_from_edges`` of
:mod:`crowdflow.ranking.graph` and scipy's fancy indexing; tests compare them (docs/methods/ranking.md §1.3).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from crowdflow.compiled import compiled_kernel

__all__ = ["DENSE_PAIR_MAX_CELLS", "drop_nodes", "laplacian_csr", "pair_table"]

#: The dense pair table is used up to this many cells (8 bytes each) ...
DENSE_PAIR_MAX_CELLS = 1 << 24
#: ... and when it has at most this many cells per row (plus 2^20), so its memory stays of the order of the rows'.
DENSE_PAIR_CELLS_PER_ROW = 8


@compiled_kernel
def _dense_sums(i: np.ndarray, j: np.ndarray, w: np.ndarray, n: int, table: np.ndarray) -> None:
    """``table[u·n + v] += w_k`` over the rows, ``u < v`` the row's items (in row order)."""
    for k in range(i.size):
        a, b = i[k], j[k]
        if a < b:
            table[a * n + b] += w[k]
        else:
            table[b * n + a] += w[k]


@compiled_kernel
def _dense_edges(i: np.ndarray, j: np.ndarray, n: int, eid: np.ndarray, edge: np.ndarray) -> None:
    """``edge[k] = eid[u·n + v]``: each row's pair index."""
    for k in range(i.size):
        a, b = i[k], j[k]
        edge[k] = eid[a * n + b] if a < b else eid[b * n + a]


@compiled_kernel
def _bucket_pairs(
    i: np.ndarray, j: np.ndarray, w: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pairs by a counting sort on ``u`` and a stable sort on ``v`` inside every ``u`` bucket (rows in row order)."""
    m = i.size
    ptr = np.zeros(n + 1, dtype=np.int64)
    for k in range(m):
        ptr[min(i[k], j[k]) + 1] += 1
    for a in range(n):
        ptr[a + 1] += ptr[a]
    fill = ptr[:-1].copy()
    vs = np.empty(m, dtype=np.int64)
    rows = np.empty(m, dtype=np.int64)
    for k in range(m):
        a = min(i[k], j[k])
        p = fill[a]
        vs[p] = max(i[k], j[k])
        rows[p] = k
        fill[a] = p + 1
    edge = np.empty(m, dtype=np.int64)
    eu = np.empty(m, dtype=np.int64)
    ev = np.empty(m, dtype=np.int64)
    ew = np.empty(m, dtype=np.float64)
    ne = 0
    for a in range(n):
        lo, hi = ptr[a], ptr[a + 1]
        if hi == lo:
            continue
        order = np.argsort(vs[lo:hi], kind="mergesort")
        prev = -1
        for t in order:
            b = vs[lo + t]
            r = rows[lo + t]
            if b != prev:
                eu[ne] = a
                ev[ne] = b
                ew[ne] = 0.0
                ne += 1
                prev = b
            ew[ne - 1] += w[r]
            edge[r] = ne - 1
    return edge, eu[:ne].copy(), ev[:ne].copy(), ew[:ne].copy()


#: digit width of the radix sort of :func:`_radix_pairs` (2,048 buckets: the counts stay in L1)
RADIX_BITS = 11


@compiled_kernel
def _radix_pairs(
    i: np.ndarray, j: np.ndarray, w: np.ndarray, n: int, unit: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pairs by a stable LSD radix sort of ``(u·n + v) << s | row`` (``s`` bits hold the row; the caller checks that
    the packed value fits in 63 bits). ``unit``: every weight is 1, so a pair's weight is its row count."""
    m = i.size
    shift = 1
    while (np.int64(1) << shift) < m:
        shift += 1
    key_bits = 1
    while (np.int64(1) << key_bits) < n * n:
        key_bits += 1
    n_pass = (key_bits + RADIX_BITS - 1) // RADIX_BITS
    n_buckets = 1 << RADIX_BITS
    dmask = np.int64(n_buckets - 1)
    rmask = (np.int64(1) << shift) - 1
    a = np.empty(m, dtype=np.int64)
    count = np.zeros((n_pass, n_buckets + 1), dtype=np.int64)
    for k in range(m):
        key = min(i[k], j[k]) * np.int64(n) + max(i[k], j[k])
        a[k] = (key << shift) | k
        for q in range(n_pass):
            count[q, ((key >> (q * RADIX_BITS)) & dmask) + 1] += 1
    b = np.empty(m, dtype=np.int64)
    for q in range(n_pass):
        at = count[q]
        for d in range(n_buckets):
            at[d + 1] += at[d]
        s = shift + q * RADIX_BITS
        for t in range(m):
            x = a[t]
            d = (x >> s) & dmask
            p = at[d]
            b[p] = x
            at[d] = p + 1
        a, b = b, a
    edge = np.empty(m, dtype=np.int64)
    eu = b  # reused: the sort's spare buffer ...
    ev = a  # ... and the sorted keys themselves (pair ne − 1 ≤ t is written after row t is read)
    ew = np.empty(m, dtype=np.float64)
    ne = 0
    prev = np.int64(-1)
    for t in range(m):
        x = a[t]
        key = x >> shift
        r = x & rmask
        if key != prev:
            eu[ne] = key // n
            ev[ne] = key % n
            ew[ne] = 0.0
            ne += 1
            prev = key
        ew[ne - 1] += 1.0 if unit else w[r]
        edge[r] = ne - 1
    if 2 * ne < m:  # few distinct pairs: do not keep the row-sized buffers alive
        return edge, eu[:ne].copy(), ev[:ne].copy(), ew[:ne].copy()
    return edge, eu[:ne], ev[:ne], ew[:ne]


def pair_table(
    i: np.ndarray, j: np.ndarray, w: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Distinct unordered pairs of the rows, in ``(u, v)`` order, with each row's pair and the summed weights.

    Parameters
    ----------
    i, j : numpy.ndarray
        (m,) int64 items of every row, ``0 ≤ i, j < n``, ``i ≠ j``.
    w : numpy.ndarray
        (m,) float64 weights.
    n : int
        Number of items.

    Returns
    -------
    edge : numpy.ndarray
        (m,) int64 index of every row's pair.
    edge_u, edge_v : numpy.ndarray
        (|E|,) int64 endpoints ``u < v``, sorted by ``(u, v)``.
    edge_weight : numpy.ndarray
        (|E|,) ``w_e = Σ_{k on e} w_k`` (summed in row order).
    """
    m = i.size
    cells = n * n
    if cells <= min(DENSE_PAIR_MAX_CELLS, DENSE_PAIR_CELLS_PER_ROW * m + (1 << 20)):
        table = np.zeros(cells, dtype=np.float64)
        _dense_sums(i, j, w, n, table)
        keys = np.flatnonzero(table)
        edge_weight = table[keys]
        eid = table.view(np.int64)  # reused: only the cells of the pairs are read back
        eid[keys] = np.arange(keys.size, dtype=np.int64)
        edge = np.empty(m, dtype=np.int64)
        _dense_edges(i, j, n, eid, edge)
        return edge, keys // n, keys % n, edge_weight
    if m and (max(n * n - 1, 1).bit_length() + max(m - 1, 1).bit_length() <= 63):
        return _radix_pairs(i, j, w, n, bool(np.all(w == 1.0)))
    return _bucket_pairs(i, j, w, n)


@compiled_kernel
def _fill_laplacian(
    edge_u: np.ndarray,
    edge_v: np.ndarray,
    edge_weight: np.ndarray,
    deg: np.ndarray,
    indptr: np.ndarray,
    cnt_lo: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
) -> None:
    """Row r of ``L`` is [its pairs (u, r), u < r; the diagonal; its pairs (r, v), v > r], each part column-sorted."""
    n = deg.size
    lo = indptr[:-1].copy()
    up = np.empty(n, dtype=np.int64)
    for r in range(n):
        d = indptr[r] + cnt_lo[r]
        indices[d] = r
        data[d] = deg[r]
        up[r] = d + 1
    for e in range(edge_u.size):  # pairs in (u, v) order: both parts are filled in increasing column order
        u, v = edge_u[e], edge_v[e]
        p = up[u]
        indices[p] = v
        data[p] = -edge_weight[e]
        up[u] = p + 1
        q = lo[v]
        indices[q] = u
        data[q] = -edge_weight[e]
        lo[v] = q + 1


def laplacian_csr(
    edge_u: np.ndarray, edge_v: np.ndarray, edge_weight: np.ndarray, deg: np.ndarray, n: int
) -> sp.csr_matrix:
    """CSR Laplacian ``D − A`` (``A_uv = A_vu = w_e``, diagonal ``deg``), sorted indices, from pairs in (u, v) order.

    Index arrays are int32 when ``2|E| + n`` fits, as in the reference ``_laplacian_from_edges``.
    """
    ne = edge_u.size
    itype = np.int32 if 2 * ne + n < np.iinfo(np.int32).max else np.int64
    cnt_lo = np.bincount(edge_v, minlength=n).astype(np.int64)
    cnt_up = np.bincount(edge_u, minlength=n).astype(np.int64)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(cnt_lo + cnt_up + 1, out=indptr[1:])
    nnz = int(indptr[-1])
    indices = np.empty(nnz, dtype=itype)
    data = np.empty(nnz, dtype=np.float64)
    _fill_laplacian(edge_u, edge_v, edge_weight, np.asarray(deg, dtype=np.float64), indptr, cnt_lo, indices, data)
    L: sp.csr_matrix = sp.csr_matrix((data, indices, indptr.astype(itype)), shape=(n, n))  # type: ignore[arg-type]  # stubs lack the (data, indices, indptr) form
    L.has_sorted_indices = True
    return L


@compiled_kernel
def _drop_fill(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    keep: np.ndarray,
    new_id: np.ndarray,
    out_ptr: np.ndarray,
    out_idx: np.ndarray,
    out_data: np.ndarray,
) -> None:
    """Copy the entries of the kept rows whose column is kept, columns renumbered by ``new_id``."""
    q = 0
    for t in range(keep.size):
        r = keep[t]
        for p in range(indptr[r], indptr[r + 1]):
            c = new_id[indices[p]]
            if c >= 0:
                out_idx[q] = c
                out_data[q] = data[p]
                q += 1
        out_ptr[t + 1] = q


def drop_nodes(A: sp.csr_matrix, keep: np.ndarray) -> sp.csr_matrix:
    """``A[keep][:, keep]`` for a CSR matrix with sorted indices and increasing ``keep``, in one pass.

    Parameters
    ----------
    A : scipy.sparse.csr_matrix
        Square, sorted indices.
    keep : numpy.ndarray
        Increasing int64 row/column indices to keep.
    """
    n = A.shape[0]
    new_id = np.full(n, -1, dtype=np.int64)
    new_id[keep] = np.arange(keep.size, dtype=np.int64)
    nnz = int(A.nnz)
    itype = np.int32 if nnz < np.iinfo(np.int32).max else np.int64
    out_ptr = np.zeros(keep.size + 1, dtype=itype)
    out_idx = np.empty(nnz, dtype=itype)
    out_data = np.empty(nnz, dtype=np.float64)
    _drop_fill(
        A.indptr.astype(np.int64, copy=False),
        A.indices,
        np.asarray(A.data, dtype=np.float64),
        np.asarray(keep, dtype=np.int64),
        new_id,
        out_ptr,
        out_idx,
        out_data,
    )
    q = int(out_ptr[-1])
    parts = (out_data[:q], out_idx[:q], out_ptr)
    B: sp.csr_matrix = sp.csr_matrix(parts, shape=(keep.size, keep.size))  # type: ignore[arg-type]  # stubs lack the (data, indices, indptr) form
    B.has_sorted_indices = True
    return B
