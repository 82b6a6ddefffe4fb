"""The Hodge decomposition of comparison data and the inconsistency diagnostics reported per component.

With LS scores θ̂ the data split W-orthogonally as ``y = Xθ̂ + r``; the residual splits into the
within-pair disagreement (bi-cycles ``y_k − s_kȲ_e``) and the edge-level residual ``R̄ = Ȳ − δ0θ̂``,
which splits into the triangular curl ``W_E⁻¹δ1ᵀ(δ1W_E⁻¹δ1ᵀ)†δ1Ȳ`` (triangles enumerated sparsely) and the
harmonic remainder (global cycles). :func:`hodge_decomposition` returns the parts and the per-component
table (shares of each part, triangle counts, TSR, Fiedler value, residual quantiles, undetectable rows).
:func:`undetectable_rows` finds the rows no method can flag (a bridge pair whose rows agree), exactly,
from the bridges of the item graph.

See docs/methods/ranking.md §2.2 (decomposition), §2.3 (diagnostics) and §5.1 (undetectable rows).
"""

from __future__ import annotations

import itertools
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse import csgraph
from scipy.sparse import linalg as spla

from crowdflow._typing import SparseMatrix
from crowdflow.contracts.missing import explain_missing
from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.hodge_kernels import cgls_curl, laplacian_bridges, pair_outcome_range, row_parts, triangles
from crowdflow.ranking.least_squares import LaplacianSolver, hodgerank_scores

logger = logging.getLogger(__name__)

__all__ = [
    "HodgeDecomposition",
    "enumerate_triangles",
    "explain_diagnostics",
    "hodge_decomposition",
    "undetectable_rows",
]


def _bridges(g: ComparisonGraph, seed: int = 12345) -> np.ndarray:
    """Boolean mask over pairs: True iff the pair (edge) is a bridge of the item graph (the reference of
    :func:`crowdflow.ranking.hodge_kernels.laplacian_bridges`).

    A spanning forest is grown by BFS from one root per component. Every non-tree edge gets a random
    64-bit label XOR-ed into both endpoints; the XOR of a subtree is 0 iff no non-tree edge leaves it,
    i.e. iff the tree edge above it is a bridge (false "bridge" with probability ≤ 2⁻⁶⁴ per edge).
    Subtree XORs are accumulated level by level (vectorised per BFS depth).
    """
    n, E = g.n, g.n_edges
    if E == 0:
        return np.zeros(0, dtype=bool)
    # super root n connected to one root per component
    roots = np.full(g.n_components, n, dtype=np.int64)
    np.minimum.at(roots, g.component, np.arange(n, dtype=np.int64))
    rows = np.r_[g.edge_u, g.edge_v, np.full(roots.size, n), roots]
    cols = np.r_[g.edge_v, g.edge_u, roots, np.full(roots.size, n)]
    A = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n + 1, n + 1))
    _, pred = csgraph.breadth_first_order(A, n, directed=False, return_predecessors=True)
    parent = pred[:n].astype(np.int64)
    # tree edges (parent[x], x) for every x whose parent is not the super root
    child = np.arange(n, dtype=np.int64)
    has_tree_edge = (parent >= 0) & (parent != n)
    tree_children = child[has_tree_edge]
    tu = np.minimum(parent[has_tree_edge], tree_children)
    tv = np.maximum(parent[has_tree_edge], tree_children)
    ekey = g.edge_u * np.int64(n) + g.edge_v
    tree_eid = np.searchsorted(ekey, tu * np.int64(n) + tv)
    is_tree = np.zeros(E, dtype=bool)
    is_tree[tree_eid] = True
    edge_of_child = np.full(n, -1, dtype=np.int64)
    edge_of_child[tree_children] = tree_eid
    rng = np.random.default_rng(seed)
    lab = rng.integers(1, np.iinfo(np.int64).max, size=E, dtype=np.int64).astype(np.uint64)
    acc = np.zeros(n, dtype=np.uint64)
    nt = ~is_tree
    np.bitwise_xor.at(acc, g.edge_u[nt], lab[nt])
    np.bitwise_xor.at(acc, g.edge_v[nt], lab[nt])
    # BFS levels from the roots, then fold subtree XORs bottom-up one level at a time
    children_of = sp.csr_matrix((np.ones(tree_children.size), (parent[has_tree_edge], tree_children)), shape=(n, n))
    levels: list[np.ndarray] = []
    frontier: np.ndarray = roots
    while frontier.size:
        levels.append(frontier)
        frontier = children_of[frontier].indices
    for nodes in reversed(levels[1:]):
        np.bitwise_xor.at(acc, parent[nodes], acc[nodes])
    bridge = np.zeros(E, dtype=bool)
    bridge[edge_of_child[tree_children]] = acc[tree_children] == 0
    return bridge


def undetectable_rows(g: ComparisonGraph) -> np.ndarray:
    """Rows whose cycle-space column ``P e_k`` vanishes (docs/methods/ranking.md §2.3, §5.1).

    ``P_kk = 1 − w_k R_e`` with ``R_e`` the effective resistance of the row's pair, and
    ``R_e ≤ 1/w_e`` with equality iff the pair is a bridge. Hence ``P_kk = 0`` exactly when the pair is a
    bridge carrying a single row. We flag the slightly larger, grouping-invariant set "bridge pair whose
    rows all have the same oriented outcome": such rows always have zero LS residual, and identical rows
    share their γ (docs/methods/ranking.md §1.3), so no method can flag them. Exact (no leverage solves).

    Returns
    -------
    numpy.ndarray
        (m,) bool.
    """
    if g.m == 0:
        return np.zeros(0, dtype=bool)
    # exact (Tarjan on the Laplacian's rows); the randomised _bridges is its reference
    bridge = laplacian_bridges(g.L, g.n_edges)
    if not bridge.any():  # no bridge, no undetectable row: the rows need not be read
        return np.zeros(g.m, dtype=bool)
    ymin, ymax = pair_outcome_range(g.edge, g.edge_sign * g.y, g.n_edges)
    edge_undet = bridge & (ymin == ymax)
    return cast(np.ndarray, edge_undet[g.edge])


#: candidate pairs examined at once by the reference triangle enumeration
_TRIANGLE_CHUNK = 4_000_000


def _triangle_candidates(g: ComparisonGraph) -> int:
    """``Σ_{(a,b)} deg⁺(b)``: the candidate triples both triangle enumerations examine."""
    deg_plus = np.bincount(g.edge_u, minlength=g.n)
    return int(deg_plus[g.edge_v].sum())


def enumerate_triangles(
    g: ComparisonGraph, *, max_candidates: int = 50_000_000
) -> tuple[np.ndarray, np.ndarray] | None:
    """All triangles ``a < b < c`` of the item graph with the ids of their three pairs (docs/methods/ranking.md §2.2).

    For every pair (a, b) the candidates c are the larger neighbours of b; (a, c) is looked up among the marked
    larger neighbours of a (compiled, :func:`crowdflow.ranking.hodge_kernels.triangles`). Cost
    ``O(Σ_{(a,b)} deg⁺(b))``.

    Returns
    -------
    (tri, tri_edges) or None
        ``tri`` (|T|, 3) item ids ``a < b < c``; ``tri_edges`` (|T|, 3) pair ids of ``ab, bc, ac``, in ``(a, b, c)``
        order. ``None`` if the number of candidates exceeds ``max_candidates``.
    """
    if _triangle_candidates(g) > max_candidates:
        return None
    return triangles(g.n, g.edge_u, g.edge_v)


def _enumerate_triangles_reference(
    g: ComparisonGraph, *, max_candidates: int = 50_000_000
) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`enumerate_triangles` by binary search of (a, c) in the sorted pair keys, in numpy chunks (reference)."""
    n, u, v = g.n, g.edge_u, g.edge_v
    E = u.size
    if E == 0:
        return np.zeros((0, 3), np.int64), np.zeros((0, 3), np.int64)
    # edges sorted by key u*n+v already (np.unique); CSR of the upper adjacency
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, u + 1, 1)
    indptr = np.cumsum(indptr)
    deg_plus = np.diff(indptr)
    cnt = deg_plus[v]
    total = int(cnt.sum())
    if total > max_candidates:
        return None
    ekey = u * np.int64(n) + v
    # candidates in chunks of about _TRIANGLE_CHUNK pairs (b, c): memory ~10 arrays of a chunk, not of all
    # candidates (5·10^7 candidates at once took ~2 GB of transient memory)
    ends = np.cumsum(cnt)
    cuts = np.searchsorted(ends, np.arange(_TRIANGLE_CHUNK, total, _TRIANGLE_CHUNK), side="right")
    bounds = np.unique(np.concatenate([[0], cuts, [E]]))
    tris, edges = [], []
    for lo, hi in itertools.pairwise(bounds):
        cnt_k = cnt[lo:hi]
        m = int(cnt_k.sum())
        if m == 0:
            continue
        rep = np.repeat(np.arange(lo, hi, dtype=np.int64), cnt_k)
        local = np.arange(m, dtype=np.int64) - np.repeat(np.cumsum(cnt_k) - cnt_k, cnt_k)
        cpos = indptr[v[rep]] + local  # position of (b, c) in the edge list
        a = u[rep]
        c = v[cpos]
        key_ac = a * np.int64(n) + c
        pos_c = np.minimum(np.searchsorted(ekey, key_ac), E - 1)
        hit = ekey[pos_c] == key_ac
        tris.append(np.column_stack([a[hit], v[rep[hit]], c[hit]]))
        edges.append(np.column_stack([rep[hit], cpos[hit], pos_c[hit]]))
    if not tris:
        return np.zeros((0, 3), np.int64), np.zeros((0, 3), np.int64)
    return np.concatenate(tris), np.concatenate(edges)


@dataclass(frozen=True)
class HodgeDecomposition:
    """Row-level Hodge decomposition ``y = gradient + bicycle + curl + harmonic`` (docs/methods/ranking.md §2.2).

    All parts are reported in the orientation of the input rows; they are pairwise orthogonal in the
    W-weighted inner product ``⟨a, b⟩_W = Σ_k w_k a_k b_k``.

    Attributes
    ----------
    theta : numpy.ndarray
        LS scores used for the gradient part.
    gradient, residual, bicycle, curl, harmonic : numpy.ndarray
        (m,) parts; ``residual = y − Xθ = bicycle + curl + harmonic``. ``curl`` and ``harmonic`` are NaN
        when the triangle cap was exceeded (curl split skipped).
    edge_flow : numpy.ndarray
        (|E|,) aggregated ``Ȳ_e`` oriented ``u → v``.
    n_triangles : int
    curl_split : bool
        Whether curl / harmonic were computed.
    table : pandas.DataFrame
        Per-component diagnostics (docs/methods/ranking.md §2.3), one row per component.
    """

    theta: np.ndarray
    gradient: np.ndarray
    residual: np.ndarray
    bicycle: np.ndarray
    curl: np.ndarray
    harmonic: np.ndarray
    edge_flow: np.ndarray
    n_triangles: int
    curl_split: bool
    table: pd.DataFrame


def _curl_projection(
    g: ComparisonGraph, rbar: np.ndarray, tri_edges: np.ndarray, dense_max_edges: int
) -> tuple[np.ndarray, np.ndarray]:
    """``f_curl = W_E⁻¹δ1ᵀ(δ1W_E⁻¹δ1ᵀ)†δ1 R̄`` and ``rank(δ1)`` per component (−1 if not computed).

    The W_E-orthogonal projection of R̄ onto ``range(W_E⁻¹δ1ᵀ)`` is computed as the least-squares
    problem ``min_u ‖W_E^{1/2}R̄ − W_E^{-1/2}δ1ᵀu‖`` (normal equations ``δ1W_E⁻¹δ1ᵀu = δ1R̄``):
    dense eigen-decomposition of ``A Aᵀ`` per component when it has ≤ ``dense_max_edges`` pairs (this also
    gives ``rank(δ1)``), CGLS otherwise.
    """
    E, T = g.n_edges, tri_edges.shape[0]
    sw = np.sqrt(g.edge_weight)
    curl = np.zeros(E)
    rank = np.full(g.n_components, -1, dtype=np.int64)
    if T == 0:
        rank[:] = 0
        return curl, rank
    b = sw * rbar
    ecomp = g.component[g.edge_u]
    tcomp = g.component[g.edge_u[tri_edges[:, 0]]]
    has_tri = np.bincount(tcomp, minlength=g.n_components) > 0
    rank[~has_tri] = 0
    e_order = np.argsort(ecomp, kind="stable")
    e_starts = np.searchsorted(ecomp[e_order], np.arange(g.n_components + 1))
    big = []
    A: sp.csr_matrix | None = None
    for c in np.flatnonzero(has_tri):
        eidx = e_order[e_starts[c] : e_starts[c + 1]]
        if eidx.size > dense_max_edges:
            big.append(c)
            continue
        if A is None:
            d1 = sp.csr_matrix(
                (np.tile([1.0, 1.0, -1.0], T), tri_edges.ravel(), np.arange(0, 3 * T + 1, 3)), shape=(T, E)
            )
            A = sp.csr_matrix(sp.diags(1.0 / sw) @ d1.T)  # E×T
        Ac = A[eidx]
        G = (Ac @ Ac.T).toarray()
        vals, vecs = np.linalg.eigh(G)
        tol = max(vals.max(initial=0.0), 1.0) * eidx.size * 1e-12
        keep = vals > tol
        rank[c] = int(keep.sum())
        V = vecs[:, keep]
        curl[eidx] = (V @ (V.T @ b[eidx])) / sw[eidx]
    if big:  # CGLS on the triangle list (compiled); _cgls_projection on the sparse matrix is its reference
        emask = np.isin(ecomp, big)
        tmask = np.isin(tcomp, big)
        local = np.cumsum(emask) - 1
        tri_b = local[tri_edges[tmask]]
        maxiter = max(10 * tri_b.shape[0], 1000)
        proj, converged = cgls_curl(tri_b, g.edge_weight[emask], b[emask], rtol=1e-13, maxiter=maxiter)
        if not converged:
            warnings.warn(
                f"CGLS (curl projection) did not converge in {maxiter} iterations", RuntimeWarning, stacklevel=3
            )
        curl[emask] = proj / sw[emask]
    return curl, rank


def _cgls_projection(A: SparseMatrix, b: np.ndarray, *, rtol: float, maxiter: int) -> np.ndarray:
    """Orthogonal projection of ``b`` onto ``range(A)`` by CGLS (CG on ``AᵀAu = Aᵀb``, from u = 0).

    Stopping rule: ``‖Aᵀr‖ ≤ rtol·‖Aᵀb‖`` with ``r = b − Au``; cap ``maxiter`` (RuntimeWarning). Returns
    ``Au = b − r``. Inner products by ``einsum`` (no multi-threaded BLAS in the loop).
    """
    dot: Callable[[np.ndarray, np.ndarray], float] = lambda a, c: float(np.einsum("i,i->", a, c))  # noqa: E731
    AT = sp.csr_matrix(A.T)
    A = sp.csr_matrix(A)
    r = b.copy()
    s = AT @ r
    p = s.copy()
    gam = dot(s, s)
    tol = rtol * np.sqrt(gam)
    if gam == 0.0:
        return np.zeros_like(b)
    u_proj = np.zeros_like(b)
    for _ in range(maxiter):
        q = A @ p
        alpha = gam / dot(q, q)
        u_proj += alpha * q
        r -= alpha * q
        s = AT @ r
        gnew = dot(s, s)
        if np.sqrt(gnew) <= tol:
            return u_proj
        p *= gnew / gam
        p += s
        gam = gnew
    warnings.warn(f"CGLS (curl projection) did not converge in {maxiter} iterations", RuntimeWarning, stacklevel=3)
    return u_proj


def _fiedler_values(g: ComparisonGraph, dense_max_n: int = 1500) -> np.ndarray:
    """Second-smallest Laplacian eigenvalue per component (NaN for singletons / when not computed)."""
    out = np.full(g.n_components, np.nan)
    sizes = g.component_sizes
    order = np.argsort(g.component, kind="stable")
    starts = np.r_[0, np.cumsum(sizes)]
    for c in np.flatnonzero(sizes >= 2):
        idx = order[starts[c] : starts[c + 1]]
        Lc = g.L[idx][:, idx]
        if idx.size <= dense_max_n:
            # the one eigenvalue wanted (LAPACK's MRRR on the tridiagonal form), not the whole spectrum
            out[c] = float(sla.eigh(Lc.toarray(), eigvals_only=True, subset_by_index=[1, 1], check_finite=False)[0])
            continue
        rng = np.random.default_rng(0)
        X0 = rng.standard_normal((idx.size, 1))
        Y = np.ones((idx.size, 1))
        dinv = 1.0 / Lc.diagonal()
        M = spla.LinearOperator(Lc.shape, matvec=lambda x: dinv * np.ravel(x), dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            vals, _ = spla.lobpcg(Lc, X0, M=M, Y=Y, largest=False, tol=1e-8, maxiter=500)
        out[c] = float(vals[0])
    return out


def explain_diagnostics(
    table: pd.DataFrame, fiedler: bool, all_ties: np.ndarray, enumerated: bool, curl_split: bool
) -> pd.DataFrame:
    """The ``missing_reason`` of every NaN of a per-component diagnostics table (one rule for every fit that writes it).

    ``all_ties``: per component, every outcome is 0 (``Σ w·y² = 0``); ``enumerated``: the triangles were enumerated;
    ``curl_split``: the curl/harmonic split was computed. Components without rows (``n_rows == 0``) are explained
    first.
    """
    no_rows = table["n_rows"].to_numpy() == 0
    explain_missing(table, list(table.columns), "no comparison rows in this component", where=no_rows)
    explain_missing(
        table,
        ["fiedler_value"],
        "Fiedler values not computed (fiedler off)" if not fiedler else "single-item component (no Fiedler value)",
    )
    shares = ["total_inconsistency", "bicycle_share", "curl_share", "harmonic_share"]
    explain_missing(table, shares, "every outcome in the component is 0 (all ties), so no share of it", where=all_ties)
    tri_cols = ["n_triangles", "n_cyclic_triangles", "tsr", "curl_share", "harmonic_share", "harmonic_dim"]
    if not enumerated:
        explain_missing(table, tri_cols, "triangles not enumerated (more candidates than max_triangle_candidates)")
    elif not curl_split:
        explain_missing(table, tri_cols[3:], "curl/harmonic split skipped (more triangles than max_triangles)")
    explain_missing(table, ["tsr"], "no triangle whose three pairs all have a non-tied mean outcome")
    explain_missing(table, ["harmonic_dim"], "harmonic dimension computed for dense-solver components only")
    return table


def hodge_decomposition(
    g: ComparisonGraph,
    theta: np.ndarray | None = None,
    *,
    solver: LaplacianSolver | None = None,
    max_triangles: int = 5_000_000,
    max_triangle_candidates: int = 50_000_000,
    dense_max_edges: int = 1500,
    fiedler: bool = True,
    undetectable: np.ndarray | None = None,
) -> HodgeDecomposition:
    """Hodge decomposition of the comparison data and per-component diagnostics (docs/methods/ranking.md §2.2–2.3).

    ``y = Xθ̂ ⊕ r`` with ``r = Py``; ``r`` splits into the within-pair disagreement (bi-cycles)
    ``y_k − s_kȲ_e``, and the edge-level residual ``R̄ = Ȳ − δ0θ̂`` into the triangular curl
    ``f_curl = W_E⁻¹δ1ᵀ(δ1W_E⁻¹δ1ᵀ)†δ1Ȳ`` and the harmonic remainder ``R̄ − f_curl``.

    Parameters
    ----------
    g : ComparisonGraph
    theta : numpy.ndarray, optional
        LS scores (computed if omitted).
    solver : LaplacianSolver, optional
    max_triangles : int
        Above this many triangles the curl/harmonic split is skipped (counts are still reported).
    max_triangle_candidates : int
        Above this enumeration size triangles are not enumerated at all (triangle metrics NaN).
    dense_max_edges : int
        Components with at most this many pairs use a dense eigen-solver for the curl projection (and
        report ``harmonic_dim = β1``); larger ones use CGLS and report ``harmonic_dim`` as NaN.
    fiedler : bool
        Compute the Fiedler value of every component.
    undetectable : numpy.ndarray, optional
        Precomputed :func:`undetectable_rows` mask.

    Returns
    -------
    HodgeDecomposition
        ``table`` columns: component, n_items, n_rows, n_edges, weight, cycle_dim, fiedler_value,
        total_inconsistency, bicycle_share, curl_share, harmonic_share, n_triangles, n_cyclic_triangles,
        tsr, harmonic_dim, max_abs_residual, residual_q50, residual_q90, residual_q99, n_undetectable.
    """
    if theta is None:
        theta = hodgerank_scores(g, solver)
    y, w, s = g.y, g.w, g.edge_sign
    grad = g.gradient(theta)
    we = g.edge_weight
    ybar = np.bincount(g.edge, weights=w * s * y, minlength=g.n_edges) / np.where(we > 0, we, 1.0)
    rbar = ybar - (theta[g.edge_u] - theta[g.edge_v])
    tri = enumerate_triangles(g, max_candidates=max_triangle_candidates)
    C = g.n_components
    ecomp = g.component[g.edge_u]
    n_tri = np.full(C, np.nan)
    n_cyc = np.full(C, np.nan)
    tsr = np.full(C, np.nan)
    curl_e = np.full(g.n_edges, np.nan)
    rank_d1 = np.full(C, -1, dtype=np.int64)
    curl_split = False
    T = -1
    if tri is not None:
        tri_v, tri_e = tri
        T = tri_v.shape[0]
        tcomp = g.component[tri_v[:, 0]] if T else np.zeros(0, np.int64)
        n_tri = np.bincount(tcomp, minlength=C).astype(float)
        s1 = np.sign(ybar[tri_e[:, 0]])
        s2 = np.sign(ybar[tri_e[:, 1]])
        s3 = np.sign(-ybar[tri_e[:, 2]])
        applicable = (s1 != 0) & (s2 != 0) & (s3 != 0)
        cyclic = applicable & (s1 == s2) & (s2 == s3)
        n_cyc = np.bincount(tcomp, weights=cyclic, minlength=C)
        n_app = np.bincount(tcomp, weights=applicable, minlength=C)
        with np.errstate(invalid="ignore", divide="ignore"):
            tsr = np.where(n_app > 0, (n_app - n_cyc) / np.where(n_app > 0, n_app, 1), np.nan)
        if max_triangles >= T:
            curl_e, rank_d1 = _curl_projection(g, rbar, tri_e, dense_max_edges)
            curl_split = True
        else:
            logger.info("%d triangles exceed max_triangles=%d: curl/harmonic split skipped", T, max_triangles)
    harm_e = rbar - curl_e
    rcomp = g.component[g.i]
    # one compiled pass: r = y − Xθ, bic = y − sȲ_e, curl, harmonic per row and Σ w·v² per component
    r, bic, curl, harm, sums = row_parts(y, w, s, g.edge, grad, ybar, curl_e, harm_e, rcomp, C)
    ynorm = sums[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        den = np.where(ynorm > 0, ynorm, np.nan)
        total = sums[:, 1] / den
        bic_sh = sums[:, 2] / den
        curl_sh = sums[:, 3] / den if curl_split else np.full(C, np.nan)
        harm_sh = sums[:, 4] / den if curl_split else np.full(C, np.nan)
    sizes = g.component_sizes
    n_rows = sums[:, 6].astype(np.int64)
    n_edges = np.bincount(ecomp, minlength=C)
    cyc_dim = n_rows - sizes + 1
    # β1 = |E| − (n_c − 1) − rank(δ1) (edge-level cycle space minus curl)
    hdim = np.where(rank_d1 >= 0, n_edges - (sizes - 1) - rank_d1, np.nan).astype(float)
    absr = np.abs(r)
    order = np.argsort(rcomp, kind="stable") if C > 1 else None  # one component: its rows are all the rows
    starts = np.r_[0, np.cumsum(n_rows)]
    q = np.full((C, 3), np.nan)
    maxr = np.full(C, np.nan)
    for c in np.flatnonzero(n_rows > 0):
        vals = absr if order is None else absr[order[starts[c] : starts[c + 1]]]
        maxr[c] = vals.max()
        q[c] = np.quantile(vals, [0.5, 0.9, 0.99])
    if undetectable is None:
        undetectable = undetectable_rows(g)
    fied = _fiedler_values(g) if fiedler else np.full(C, np.nan)
    table = pd.DataFrame(
        {
            "component": np.arange(C, dtype=np.int64),
            "n_items": sizes.astype(np.int64),
            "n_rows": n_rows.astype(np.int64),
            "n_edges": n_edges.astype(np.int64),
            "weight": sums[:, 5],
            "cycle_dim": cyc_dim.astype(np.int64),
            "fiedler_value": fied,
            "total_inconsistency": total,
            "bicycle_share": bic_sh,
            "curl_share": curl_sh,
            "harmonic_share": harm_sh,
            "n_triangles": n_tri,
            "n_cyclic_triangles": n_cyc,
            "tsr": tsr,
            "harmonic_dim": hdim,
            "max_abs_residual": maxr,
            "residual_q50": q[:, 0],
            "residual_q90": q[:, 1],
            "residual_q99": q[:, 2],
            "n_undetectable": np.bincount(rcomp, weights=undetectable, minlength=C).astype(np.int64),
        }
    )
    explain_diagnostics(table, fiedler, ynorm == 0, tri is not None, curl_split)
    return HodgeDecomposition(
        theta=theta,
        gradient=grad,
        residual=r,
        bicycle=bic,
        curl=curl,
        harmonic=harm,
        edge_flow=ybar,
        n_triangles=int(T),
        curl_split=curl_split,
        table=table,
    )
