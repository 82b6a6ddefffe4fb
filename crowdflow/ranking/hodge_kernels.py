"""Compiled kernels of the Hodge diagnostics: bridges, per-pair outcome range, triangles, the curl projection.

Each kernel computes what a simpler reference in :mod:`crowdflow.ranking.hodge` computes, in one compiled pass
instead of many array passes (tests compare them over a generated family of graphs):

* :func:`laplacian_bridges` — the pairs whose removal disconnects their component, by Tarjan's low-link rule on
  an iterative depth-first search over the rows of the Laplacian, which already is the adjacency (one stored entry
  per pair and side), so none is built (exact; the reference ``_bridges`` draws random 64-bit labels and errs with
  probability ≤ 2⁻⁶⁴ per pair);
* :func:`pair_outcome_range` — ``min`` and ``max`` of the oriented outcomes ``s_k y_k`` on every pair;
* :func:`triangles` — all triangles ``a < b < c`` with their pair ids, in ``(a, b, c)`` order: for every item
  ``a`` its larger neighbours are marked with the pair id ``(a, c)``, then every pair ``(b, c)`` with ``b`` a
  larger neighbour of ``a`` is a triangle when ``c`` is marked (the same ``O(Σ_{(a,b)} deg⁺(b))`` candidates as
  the reference ``enumerate_triangles``, each tested in O(1) instead of by binary search);
* :func:`cgls_curl` — CGLS for the curl projection on the triangle list itself (``A = W_E^{-1/2}δ1ᵀ``: three
  entries per triangle), the same iteration and stopping rule as the reference ``_cgls_projection`` on the
  sparse matrix.

See docs/methods/ranking.md §2.2–§2.3.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from crowdflow.compiled import compiled_kernel

__all__ = ["cgls_curl", "laplacian_bridges", "pair_outcome_range", "triangles"]


@compiled_kernel
def _lower_count(indptr: np.ndarray, indices: np.ndarray, row: int, col: int) -> int:
    """Entries of CSR row ``row`` (sorted columns) whose column is below ``col``: a binary search."""
    lo = indptr[row]
    hi = indptr[row + 1]
    start = lo
    while lo < hi:
        mid = (lo + hi) // 2
        if indices[mid] < col:
            lo = mid + 1
        else:
            hi = mid
    return int(lo - start)


@compiled_kernel
def _laplacian_bridges(indptr: np.ndarray, indices: np.ndarray, n_edges: int) -> np.ndarray:
    n = indptr.size - 1
    # the pairs (u, v), u < v, in (u, v) order are the entries right of the diagonal, row by row
    up0 = np.empty(n, dtype=np.int64)  # position of row x's first entry with a column above x
    first_edge = np.zeros(n + 1, dtype=np.int64)
    for x in range(n):
        lower = _lower_count(indptr, indices, x, x)
        p = indptr[x] + lower
        if p < indptr[x + 1] and indices[p] == x:
            p += 1
        up0[x] = p
        first_edge[x + 1] = first_edge[x] + indptr[x + 1] - p
    disc = np.full(n, -1, dtype=np.int64)
    low = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    nxt = indptr[:-1].astype(np.int64)
    stack = np.empty(n, dtype=np.int64)
    bridge = np.zeros(n_edges, dtype=np.bool_)
    clock = 0
    for root in range(n):
        if disc[root] >= 0:
            continue
        top = 0
        stack[0] = root
        disc[root] = clock
        low[root] = clock
        clock += 1
        while top >= 0:
            x = stack[top]
            p = nxt[x]
            if p < indptr[x + 1]:
                nxt[x] = p + 1
                y = indices[p]
                if y == x or y == parent[x]:  # the diagonal; the tree pair (a simple graph has one)
                    continue
                if disc[y] < 0:
                    parent[y] = x
                    disc[y] = clock
                    low[y] = clock
                    clock += 1
                    top += 1
                    stack[top] = y
                elif disc[y] < low[x]:
                    low[x] = disc[y]
            else:
                top -= 1
                if top >= 0:
                    par = stack[top]
                    if low[x] < low[par]:
                        low[par] = low[x]
                    if low[x] > disc[par]:
                        u, v = min(par, x), max(par, x)
                        bridge[first_edge[u] + _lower_count(indptr, indices, u, v) - (up0[u] - indptr[u])] = True
    return bridge


def laplacian_bridges(L: sp.csr_matrix, n_edges: int) -> np.ndarray:
    """(|E|,) bool: True iff pair ``e`` is a bridge of the item graph, read off its Laplacian ``L`` (CSR, sorted
    columns, one stored entry per compared pair and side) by Tarjan's search on ``L``'s rows, so no adjacency is built
    (at 10^7 pairs that build was half the cost). Pair ``e`` is the ``e``-th entry right of the diagonal in row
    order, i.e. the pairs in ``(u, v)`` order."""
    return _laplacian_bridges(np.asarray(L.indptr, dtype=np.int64), L.indices, int(n_edges))


@compiled_kernel
def _range(edge: np.ndarray, yo: np.ndarray, ymin: np.ndarray, ymax: np.ndarray) -> None:
    for k in range(edge.size):
        e = edge[k]
        if yo[k] < ymin[e]:
            ymin[e] = yo[k]
        if yo[k] > ymax[e]:
            ymax[e] = yo[k]


def pair_outcome_range(edge: np.ndarray, yo: np.ndarray, n_edges: int) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest oriented outcome ``yo`` of the rows of every pair (``+inf`` / ``−inf`` for none)."""
    ymin = np.full(n_edges, np.inf)
    ymax = np.full(n_edges, -np.inf)
    _range(edge, yo, ymin, ymax)
    return ymin, ymax


@compiled_kernel
def _triangles(indptr: np.ndarray, edge_v: np.ndarray, tri: np.ndarray, tri_e: np.ndarray, fill: bool) -> int:
    n = indptr.size - 1
    mark = np.full(n, -1, dtype=np.int64)
    t = 0
    for a in range(n):
        for p in range(indptr[a], indptr[a + 1]):
            mark[edge_v[p]] = p
        for p in range(indptr[a], indptr[a + 1]):
            b = edge_v[p]
            for q in range(indptr[b], indptr[b + 1]):
                c = edge_v[q]
                r = mark[c]
                if r >= 0:
                    if fill:
                        tri[t, 0] = a
                        tri[t, 1] = b
                        tri[t, 2] = c
                        tri_e[t, 0] = p
                        tri_e[t, 1] = q
                        tri_e[t, 2] = r
                    t += 1
        for p in range(indptr[a], indptr[a + 1]):
            mark[edge_v[p]] = -1
    return t


def triangles(n: int, edge_u: np.ndarray, edge_v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All triangles ``a < b < c`` of the item graph and their pair ids ``(ab, bc, ac)``, in ``(a, b, c)`` order.

    Parameters
    ----------
    n : int
    edge_u, edge_v : numpy.ndarray
        Pairs ``u < v`` sorted by ``(u, v)``.

    Returns
    -------
    tri, tri_edges : numpy.ndarray
        (|T|, 3) int64 items and pair ids.
    """
    edge_u = np.asarray(edge_u, dtype=np.int64)
    edge_v = np.asarray(edge_v, dtype=np.int64)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(edge_u, minlength=n), out=indptr[1:])
    empty = np.zeros((0, 3), dtype=np.int64)
    count = _triangles(indptr, edge_v, empty, empty, False)
    tri = np.empty((count, 3), dtype=np.int64)
    tri_e = np.empty((count, 3), dtype=np.int64)
    _triangles(indptr, edge_v, tri, tri_e, True)
    return tri, tri_e


@compiled_kernel
def _cgls(tri_e: np.ndarray, isw: np.ndarray, b: np.ndarray, rtol: float, maxiter: int) -> tuple[np.ndarray, int, bool]:
    E = b.size
    T = tri_e.shape[0]
    # column scaling c_t = (Σ_{e∈t} 1/w_e)^{-1/2}: unit columns (Jacobi on AᵀA), the same range(A)
    scale = np.empty(T)
    for t in range(T):
        a0, a1, a2 = isw[tri_e[t, 0]], isw[tri_e[t, 1]], isw[tri_e[t, 2]]
        scale[t] = 1.0 / np.sqrt(a0 * a0 + a1 * a1 + a2 * a2)
    r = b.copy()
    proj = np.zeros(E)
    s = np.empty(T)
    p = np.zeros(T)
    q = np.empty(E)
    rs = r * isw
    gam = 0.0
    for t in range(T):
        v = scale[t] * (rs[tri_e[t, 0]] + rs[tri_e[t, 1]] - rs[tri_e[t, 2]])
        s[t] = v
        gam += v * v
    if gam == 0.0:
        return proj, 0, True
    tol = rtol * np.sqrt(gam)
    beta = 0.0
    for it in range(1, maxiter + 1):
        q[:] = 0.0
        for t in range(T):  # p = s + βp and q = A p in one pass
            v = s[t] + beta * p[t]
            p[t] = v
            v *= scale[t]
            q[tri_e[t, 0]] += v
            q[tri_e[t, 1]] += v
            q[tri_e[t, 2]] -= v
        qq = 0.0
        for e in range(E):
            q[e] *= isw[e]
            qq += q[e] * q[e]
        alpha = gam / qq
        for e in range(E):
            proj[e] += alpha * q[e]
            r[e] -= alpha * q[e]
            rs[e] = r[e] * isw[e]
        gnew = 0.0
        for t in range(T):
            v = scale[t] * (rs[tri_e[t, 0]] + rs[tri_e[t, 1]] - rs[tri_e[t, 2]])
            s[t] = v
            gnew += v * v
        if np.sqrt(gnew) <= tol:
            return proj, it, True
        beta = gnew / gam
        gam = gnew
    return proj, maxiter, False


def cgls_curl(
    tri_edges: np.ndarray, edge_weight: np.ndarray, b: np.ndarray, *, rtol: float, maxiter: int
) -> tuple[np.ndarray, bool]:
    """Projection of ``b`` onto ``range(A)``, ``A = W_E^{-1/2}δ1ᵀ`` (E×T), by CGLS on the triangle list.

    ``δ1`` has the row ``[+1, +1, −1]`` at the pairs ``(ab, bc, ac)`` of every triangle. The columns are first scaled
    to unit norm (``A' = AC``, ``C = diag(AᵀA)^{-1/2}``: Jacobi preconditioning, the same range); CG on
    ``A'ᵀA'u = A'ᵀb`` from ``u = 0``, stopped when ``‖A'ᵀr‖ ≤ rtol·‖A'ᵀb‖`` (``r = b − A'u``) or after ``maxiter``
    iterations.

    Returns
    -------
    proj : numpy.ndarray
        (E,) ``Au = b − r``.
    converged : bool
    """
    isw = 1.0 / np.sqrt(np.asarray(edge_weight, dtype=np.float64))
    tri = np.asarray(tri_edges, dtype=np.int32 if b.size < np.iinfo(np.int32).max else np.int64)  # less traffic
    proj, _, ok = _cgls(tri, isw, np.asarray(b, dtype=np.float64), rtol, maxiter)
    return proj, bool(ok)


@compiled_kernel
def _row_parts(
    y: np.ndarray,
    w: np.ndarray,
    s: np.ndarray,
    edge: np.ndarray,
    grad: np.ndarray,
    ybar: np.ndarray,
    curl_e: np.ndarray,
    harm_e: np.ndarray,
    comp: np.ndarray,
    sums: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    m = y.size
    r = np.empty(m)
    bic = np.empty(m)
    curl = np.empty(m)
    harm = np.empty(m)
    for k in range(m):
        e = edge[k]
        c = comp[k]
        rk = y[k] - grad[k]
        bk = y[k] - s[k] * ybar[e]
        ck = s[k] * curl_e[e]
        hk = s[k] * harm_e[e]
        r[k] = rk
        bic[k] = bk
        curl[k] = ck
        harm[k] = hk
        wk = w[k]
        sums[c, 0] += wk * y[k] * y[k]
        sums[c, 1] += wk * rk * rk
        sums[c, 2] += wk * bk * bk
        sums[c, 3] += wk * ck * ck
        sums[c, 4] += wk * hk * hk
        sums[c, 5] += wk
        sums[c, 6] += 1.0
    return r, bic, curl, harm


def row_parts(
    y: np.ndarray,
    w: np.ndarray,
    s: np.ndarray,
    edge: np.ndarray,
    grad: np.ndarray,
    ybar: np.ndarray,
    curl_e: np.ndarray,
    harm_e: np.ndarray,
    comp: np.ndarray,
    n_components: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row-level Hodge parts and their weighted squares per component, in one pass over the rows.

    ``r = y − grad``, ``bic = y − s·Ȳ_e``, ``curl = s·f_curl,e``, ``harm = s·f_harm,e`` for every row k on pair e;
    ``sums[c]`` = ``Σ w·v²`` over the rows of component c for v = y, r, bic, curl, harm, then ``Σ w`` and the row
    count (sums in row order, as ``numpy.bincount`` adds them).

    Returns
    -------
    r, bic, curl, harm : numpy.ndarray
        (m,) parts.
    sums : numpy.ndarray
        (C, 7).
    """
    sums = np.zeros((n_components, 7))
    r, bic, curl, harm = _row_parts(y, w, s, edge, grad, ybar, curl_e, harm_e, comp, sums)
    return r, bic, curl, harm, sums
