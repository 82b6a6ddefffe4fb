"""Robust HodgeRank: global ranking from pairwise comparisons, Hodge diagnostics, outlier detection.

Spec: ``robust-hodgerank.md`` (Xu, Xiong, Cao, Huang, Yao, "Evaluating Visual Properties via Robust
HodgeRank", IJCV 2021 / arXiv:1408.3467, and its predecessor MM13). This module holds

* the data model (§1): canonical comparison tables, the sparse incidence ``X`` (m×n, rows
  ``e_i − e_j``), the weighted Laplacian ``L = XᵀWX``, connected components, grouping of identical rows;
* HodgeRank least squares (§2.1) solved per connected component on the grounded Laplacian
  (sparse LU for moderate n, Jacobi-preconditioned CG otherwise);
* the Hodge decomposition and the §2.3 inconsistency diagnostics (bi-cycles, triangular curl by sparse
  triangle enumeration, harmonic residual, undetectable rows via bridges);
* HLASSO / Huber robust ranking (§3, Algorithm 1) with the λ rules of §3.4;
* the high-level fits that return :class:`RankingResult` / :class:`RobustRankingResult` carrying the
  output tables (``ranking``, ``outliers``, ``annotators``, ``diagnostics``).

The Linearized Bregman Iterations (Algorithms 2–4) live in :mod:`crowdflow.ranking.lbi`.

Conventions: ``γ_k > 0`` when the observed value exceeds the model difference (spec §10.5); the loss is
``½ Σ w_k (y_k − x_kθ − γ_k)²`` with penalty ``λ Σ w_k |γ_k|`` so that weights behave exactly as
replication counts (spec §1.3). Scores are centred (sum zero) inside every connected component and are
never comparable across components.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse import csgraph
from scipy.sparse import linalg as spla

from crowdflow._typing import SparseMatrix
from crowdflow.labels import natural_sort

logger = logging.getLogger(__name__)

__all__ = [
    "ComparisonGraph",
    "GraphReport",
    "HodgeDecomposition",
    "Identifiability",
    "LaplacianSolver",
    "LassoFit",
    "LassoPath",
    "RankingResult",
    "RobustRankingResult",
    "ScaleEstimate",
    "assemble_robust_result",
    "build_comparison_graph",
    "canonical_comparisons",
    "center_per_component",
    "check_comparison_graph",
    "comparisons_from_winners",
    "cv_lambda",
    "cycle_basis",
    "cycle_projector",
    "enumerate_triangles",
    "fit_hlasso",
    "fit_hodgerank",
    "group_identical_rows",
    "hlasso",
    "hlasso_path",
    "hodge_decomposition",
    "hodgerank_scores",
    "huber_concomitant_scale",
    "identifiability",
    "incidence_matrix",
    "laplacian",
    "laplacian_lambda_max",
    "refit_without",
    "shrink",
    "theory_lambda",
    "undetectable_rows",
    "wdot",
]

# cycle projector: op(v, θ_prev) -> (P v, θ), see cycle_projector
CycleOp = Callable[[np.ndarray, np.ndarray | None], tuple[np.ndarray, np.ndarray]]

HUBER_M = 1.35
#: Huber's Fisher-consistent constant E[min(Z², M²)] for M = 1.35, Z ~ N(0, 1) (spec §3.4.1).
HUBER_A = 0.7126

_ALIASES = {
    # Crowd-Kit pairwise names
    "worker": "annotator",
    "left": "item_a",
    "right": "item_b",
    # spec §1.2 names
    "annotator_id": "annotator",
    "item_i": "item_a",
    "item_j": "item_b",
    "y": "outcome",
}


# ---------------------------------------------------------------------------------------------------
# §1 data model
# ---------------------------------------------------------------------------------------------------


def wdot(w: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Weighted inner product ``Σ_k w_k a_k b_k``.

    Uses ``einsum`` rather than BLAS ``dot``: on oversubscribed hosts a multi-threaded OpenBLAS level-1
    call can be ~50× slower than this single-threaded loop, and these products sit in the hot loops.
    """
    return float(np.einsum("i,i,i->", w, a, b))


def shrink(z: np.ndarray, tau: float | np.ndarray = 1.0) -> np.ndarray:
    """Soft threshold ``sign(z)·max(|z| − τ, 0)`` element-wise (spec §0).

    Computed as ``z − clip(z, −τ, τ)``, which is exactly equal in floating point and cheaper.
    """
    return cast(np.ndarray, z - np.clip(z, -tau, tau))


def _bad_rows_message(mask: np.ndarray, limit: int = 5) -> str:
    rows = np.flatnonzero(mask)
    shown = ", ".join(str(int(r)) for r in rows[:limit])
    more = f" (+{rows.size - limit} more)" if rows.size > limit else ""
    return f"{rows.size} row(s) at positions [{shown}]{more}"


def comparisons_from_winners(
    df: pd.DataFrame,
    *,
    winner: str = "winner",
    item_a: str = "item_a",
    item_b: str = "item_b",
    annotator: str = "annotator",
    tie: str = "tie",
) -> pd.DataFrame:
    """Convert winner-form comparisons to the canonical outcome form.

    Winner form is ``annotator, item_a, item_b, winner`` (``winner`` = id of the preferred item or
    ``'tie'``; this is the layout of the shared pairwise data sets and, with ``worker, left, right,
    label``, of Crowd-Kit). The canonical form (design.md §3) has ``outcome = +1`` if ``item_a`` won,
    ``−1`` if ``item_b`` won and ``0`` for a tie.

    Parameters
    ----------
    df : pandas.DataFrame
        Winner-form table. Extra columns are kept.
    winner, item_a, item_b, annotator : str
        Column names in ``df``.
    tie : str
        The tie token (compared case-insensitively).

    Returns
    -------
    pandas.DataFrame
        Columns ``annotator, item_a, item_b, outcome`` (+ the other columns of ``df``).

    Raises
    ------
    ValueError
        If a column is missing or a ``winner`` value is neither ``item_a``, ``item_b`` nor the tie token.
    """
    missing = [c for c in (item_a, item_b, winner) if c not in df.columns]
    if missing:
        raise ValueError(f"winner-form comparisons lack column(s) {missing}; have {list(df.columns)}")
    a = df[item_a].astype("string")
    b = df[item_b].astype("string")
    win = df[winner].astype("string")
    out = np.full(len(df), np.nan)
    out[(win == a).fillna(False).to_numpy(dtype=bool)] = 1.0
    out[(win == b).fillna(False).to_numpy(dtype=bool)] = -1.0
    out[(win.str.lower() == tie.lower()).fillna(False).to_numpy(dtype=bool)] = 0.0
    bad = np.isnan(out)
    if bad.any():
        raise ValueError(f"column '{winner}': {_bad_rows_message(bad)} name neither item_a, item_b nor '{tie}'")
    res = df.drop(columns=[winner]).rename(columns={item_a: "item_a", item_b: "item_b"})
    if annotator in res.columns and annotator != "annotator":
        res = res.rename(columns={annotator: "annotator"})
    res["outcome"] = out
    return res


def canonical_comparisons(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Validate a comparison table and return it in canonical form (spec §1.2, design.md §3).

    Accepted layouts: canonical ``annotator, item_a, item_b, outcome [, weight]``; winner form
    ``annotator, item_a, item_b, winner`` (see :func:`comparisons_from_winners`); Crowd-Kit
    ``worker, left, right, label`` (``label`` = winner id); spec §1.2 ``annotator_id, item_i, item_j, y``.

    Parameters
    ----------
    comparisons : pandas.DataFrame
        One row per individual judgement. ``annotator`` is optional (needed for per-annotator reports).

    Returns
    -------
    pandas.DataFrame
        Columns ``row_id`` (int64, position in the input), ``annotator`` (str or missing), ``item_a``,
        ``item_b`` (str), ``outcome`` (float64, finite; > 0 means ``item_a`` preferred), ``weight``
        (float64 > 0, default 1).

    Raises
    ------
    ValueError
        Missing columns, missing ids, self-comparisons, non-finite outcomes, non-positive or non-finite
        weights, or an empty table. Messages name the column and the offending row positions.
    """
    if not isinstance(comparisons, pd.DataFrame):
        raise ValueError(f"comparisons must be a pandas DataFrame, got {type(comparisons).__name__}")
    df = comparisons
    ren = {k: v for k, v in _ALIASES.items() if k in df.columns and v not in df.columns}
    if ren:
        df = df.rename(columns=ren)
    if "outcome" not in df.columns:
        if "winner" in df.columns:
            df = comparisons_from_winners(df)
        elif "label" in df.columns:
            df = comparisons_from_winners(df, winner="label")
    missing = [c for c in ("item_a", "item_b", "outcome") if c not in df.columns]
    if missing:
        raise ValueError(
            f"comparisons lack required column(s) {missing} (need annotator, item_a, item_b, outcome "
            f"or a 'winner' column); have {list(comparisons.columns)}"
        )
    m = len(df)
    if m == 0:
        raise ValueError("comparisons table is empty: nothing to rank")
    out = pd.DataFrame({"row_id": np.arange(m, dtype=np.int64)})
    for col in ("item_a", "item_b"):
        s = df[col]
        na = s.isna().to_numpy()
        if na.any():
            raise ValueError(f"column '{col}': {_bad_rows_message(na)} have a missing item id")
        out[col] = s.astype(str).to_numpy(dtype=object)
    same = out["item_a"].to_numpy() == out["item_b"].to_numpy()
    if same.any():
        raise ValueError(
            f"columns 'item_a'/'item_b': {_bad_rows_message(same)} compare an item with itself "
            f"(e.g. item '{out['item_a'].iloc[int(np.flatnonzero(same)[0])]}')"
        )
    y = pd.to_numeric(df["outcome"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(y)
    if bad.any():
        raise ValueError(f"column 'outcome': {_bad_rows_message(bad)} are missing, non-numeric or infinite")
    out["outcome"] = y
    if "weight" in df.columns:
        w = pd.to_numeric(df["weight"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(w) | (w <= 0)
        if bad.any():
            raise ValueError(
                f"column 'weight': {_bad_rows_message(bad)} are not finite and > 0 "
                "(weights are replication counts; drop zero-weight rows before fitting)"
            )
    else:
        w = np.ones(m)
    out["weight"] = w
    if "annotator" in df.columns:
        ann = df["annotator"]
        out["annotator"] = ann.astype(str).where(ann.notna(), None).to_numpy(dtype=object)
    else:
        out["annotator"] = np.full(m, None, dtype=object)
    return out[["row_id", "annotator", "item_a", "item_b", "outcome", "weight"]]


def incidence_matrix(i: np.ndarray, j: np.ndarray, n: int) -> sp.csr_matrix:
    """Gradient / incidence operator ``X`` (m×n CSR): row k is ``e_{i_k} − e_{j_k}`` (spec §1.3)."""
    m = int(np.asarray(i).size)
    rows = np.repeat(np.arange(m, dtype=np.int64), 2)
    cols = np.column_stack([i, j]).ravel()
    data = np.tile(np.array([1.0, -1.0]), m)
    indptr = np.arange(0, 2 * m + 1, 2, dtype=np.int64)
    del rows
    return sp.csr_matrix((data, cols.astype(np.int64), indptr), shape=(m, n))


def laplacian(X: SparseMatrix, w: np.ndarray | None = None) -> sp.csr_matrix:
    """Weighted graph Laplacian ``L = XᵀWX`` (n×n, sparse, zero row sums; spec §2.1)."""
    X = sp.csr_matrix(X)
    if w is None:
        w = np.ones(X.shape[0])
    return sp.csr_matrix(X.T @ sp.diags(np.asarray(w, dtype=float)) @ X)


def _sort_with_order(key: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``key`` (values in ``[0, bound)``) and the stable sorting permutation.

    When ``bound · m`` fits in 63 bits, the row position is packed into the low bits of the key and one
    plain ``np.sort`` (SIMD-accelerated in numpy ≥ 2) replaces the much slower ``argsort``.
    """
    m = key.size
    shift = max(int(m - 1).bit_length(), 1)
    if m and int(bound - 1).bit_length() + shift <= 62:
        packed = np.sort((key << np.int64(shift)) | np.arange(m, dtype=np.int64))
        return packed >> np.int64(shift), packed & np.int64((1 << shift) - 1)
    order = np.argsort(key, kind="stable")
    return key[order], order


def _unique_edges(
    u: np.ndarray, v: np.ndarray, w: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Distinct unordered pairs ``u < v`` in (u, v) order, each row's pair index and the summed weights."""
    m = u.size
    key = u * np.int64(n) + v
    ks, order = _sort_with_order(key, max(n * n, 1))
    new = np.ones(m, dtype=bool)
    if m:
        np.not_equal(ks[1:], ks[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    ukey = ks[starts]
    edge = np.empty(m, dtype=np.int64)
    edge[order] = np.cumsum(new, dtype=np.int64) - 1
    if m and np.all(w == 1.0):  # unit weights: the pair weight is the multiplicity
        edge_weight = np.diff(np.r_[starts, m]).astype(np.float64)
    else:
        edge_weight = np.add.reduceat(w[order], starts) if m else np.zeros(0)
    return edge, ukey // n, ukey % n, edge_weight


def _laplacian_from_edges(
    edge_u: np.ndarray, edge_v: np.ndarray, edge_weight: np.ndarray, deg: np.ndarray, n: int
) -> sp.csr_matrix:
    """CSR Laplacian ``D − A`` with sorted indices, assembled without a COO sort.

    The distinct pairs arrive sorted by (u, v): the upper triangle is already CSR-ordered, and its
    transpose (by scipy's counting-sort CSR→CSC conversion) gives the lower triangle in CSR order. Row r
    of L is [lower part of r, diagonal, upper part of r], so every entry's position is known in advance.
    """
    ne = edge_u.size
    itype = np.int32 if 2 * ne + n < np.iinfo(np.int32).max else np.int64
    cnt_up = np.bincount(edge_u, minlength=n)
    up_ptr = np.r_[0, np.cumsum(cnt_up)]
    upper = sp.csr_matrix((edge_weight, edge_v.astype(itype), up_ptr.astype(itype)), shape=(n, n))
    lower = upper.tocsc()  # column-major upper == row-major lower triangle, sorted within rows
    cnt_lo = np.diff(lower.indptr).astype(np.int64)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(cnt_lo + cnt_up + 1, out=indptr[1:])
    nnz = int(indptr[-1])
    indices = np.empty(nnz, dtype=itype)
    data = np.empty(nnz, dtype=np.float64)
    rows = np.arange(n, dtype=np.int64)
    # lower entries: row r, slots indptr[r] .. indptr[r] + cnt_lo[r] − 1
    pos_lo = np.arange(ne, dtype=np.int64) + np.repeat(indptr[:-1] - lower.indptr[:-1].astype(np.int64), cnt_lo)
    indices[pos_lo] = lower.indices
    data[pos_lo] = -lower.data
    diag = indptr[:-1] + cnt_lo
    indices[diag] = rows
    data[diag] = deg
    pos_up = np.arange(ne, dtype=np.int64) + np.repeat(diag + 1 - up_ptr[:-1], cnt_up)
    indices[pos_up] = edge_v
    data[pos_up] = -edge_weight
    L: sp.csr_matrix = sp.csr_matrix((data, indices, indptr.astype(itype)), shape=(n, n))  # type: ignore[arg-type]  # stubs lack the (data, indices, indptr) form
    L.has_sorted_indices = True
    return L


@dataclass(frozen=True)
class ComparisonGraph:
    """Canonicalised comparisons with their sparse operators (spec §1.3).

    Attributes
    ----------
    items : numpy.ndarray
        (n,) item ids (str), in the order of the internal integer ids (natural sort of the ids).
    i, j : numpy.ndarray
        (m,) int64 internal ids of the first / second item of every row.
    y, w : numpy.ndarray
        (m,) float64 outcomes (> 0: first item preferred) and weights (> 0).
    X : scipy.sparse.csr_matrix
        (m×n) incidence, row k = ``e_i − e_j`` (built on first access).
    XT : scipy.sparse.csr_matrix
        ``Xᵀ`` stored as CSR (built on first access; the LBI loops use the cheaper CSC view ``X.T``).
    L : scipy.sparse.csr_matrix
        (n×n) weighted Laplacian ``XᵀWX`` (sorted indices, int32 indices when they fit).
    component : numpy.ndarray
        (n,) component id per item, numbered by each component's smallest internal id.
    n_components : int
    edge : numpy.ndarray
        (m,) index of the row's unordered pair in ``edge_u, edge_v``.
    edge_sign : numpy.ndarray
        (m,) +1 if the row is oriented like its pair (``i < j``), else −1.
    edge_u, edge_v : numpy.ndarray
        (|E|,) endpoints of the unordered pairs, ``edge_u < edge_v``.
    edge_weight : numpy.ndarray
        (|E|,) ``w_e = Σ_{k on e} w_k``.
    row_id : numpy.ndarray
        (m,) int64 row ids (position in the input table).
    annotator : numpy.ndarray
        (m,) object annotator ids (``None`` when unknown).
    """

    items: np.ndarray
    i: np.ndarray
    j: np.ndarray
    y: np.ndarray
    w: np.ndarray
    L: sp.csr_matrix
    component: np.ndarray
    n_components: int
    edge: np.ndarray
    edge_sign: np.ndarray
    edge_u: np.ndarray
    edge_v: np.ndarray
    edge_weight: np.ndarray
    row_id: np.ndarray
    annotator: np.ndarray

    @property
    def n(self) -> int:
        """Number of items."""
        return int(self.items.size)

    @property
    def m(self) -> int:
        """Number of comparison rows."""
        return int(self.y.size)

    @property
    def n_edges(self) -> int:
        """Number of distinct compared pairs ``|E|``."""
        return int(self.edge_u.size)

    @property
    def component_sizes(self) -> np.ndarray:
        """Items per component."""
        return np.bincount(self.component, minlength=self.n_components)

    @property
    def cycle_dim(self) -> int:
        """Dimension of the cycle space ``l = m − n + c`` (spec §0)."""
        return self.m - self.n + self.n_components

    @cached_property
    def X(self) -> sp.csr_matrix:  # noqa: N802 - the spec's name
        """(m×n) incidence ``X`` (CSR), built on first access (the LS fit does not need it)."""
        return incidence_matrix(self.i, self.j, self.n)

    @cached_property
    def XT(self) -> sp.csr_matrix:  # noqa: N802 - the spec's name
        """``Xᵀ`` as CSR, built on first access."""
        return sp.csr_matrix(self.X.T)

    def gradient(self, theta: np.ndarray) -> np.ndarray:
        """``Xθ`` (length m), i.e. ``θ_i − θ_j`` per row."""
        theta = np.asarray(theta)
        if theta.ndim == 1:
            return cast(np.ndarray, theta[self.i] - theta[self.j])
        return cast(np.ndarray, self.X @ theta)

    def divergence(self, v: np.ndarray) -> np.ndarray:
        """``XᵀWv`` (length n), by two weighted ``bincount`` passes (no sparse matrix needed)."""
        v = np.asarray(v, dtype=np.float64)
        if v.ndim != 1:
            return cast(np.ndarray, self.XT @ (self.w[:, None] * v))
        wv = self.w * v
        return np.bincount(self.i, weights=wv, minlength=self.n) - np.bincount(self.j, weights=wv, minlength=self.n)

    @classmethod
    def from_arrays(
        cls,
        i: np.ndarray,
        j: np.ndarray,
        y: np.ndarray,
        w: np.ndarray | None = None,
        *,
        n: int | None = None,
        items: Sequence[str] | np.ndarray | None = None,
        row_id: np.ndarray | None = None,
        annotator: np.ndarray | None = None,
    ) -> ComparisonGraph:
        """Build the graph from integer item ids (no pandas; used by simulations and tests).

        Parameters
        ----------
        i, j : array-like of int
            First / second item of every row (``0 ≤ i, j < n``, ``i ≠ j``).
        y : array-like of float
            Outcomes.
        w : array-like of float, optional
            Positive weights (default 1).
        n : int, optional
            Number of items (default ``max(i, j) + 1`` or ``len(items)``).
        items : sequence of str, optional
            Item ids (default ``"0".."n-1"``).
        row_id, annotator : numpy.ndarray, optional
            Row metadata.
        """
        i = np.asarray(i, dtype=np.int64).ravel()
        j = np.asarray(j, dtype=np.int64).ravel()
        y = np.asarray(y, dtype=np.float64).ravel()
        m = y.size
        if i.size != m or j.size != m:
            raise ValueError(f"i, j, y must have the same length (got {i.size}, {j.size}, {m})")
        w = np.ones(m) if w is None else np.asarray(w, dtype=np.float64).ravel()
        if w.size != m:
            raise ValueError("w must have the same length as y")
        if m and (not np.all(np.isfinite(y))):
            raise ValueError("y must be finite")
        if m and (not np.all(np.isfinite(w)) or np.any(w <= 0)):
            raise ValueError("weights must be finite and > 0")
        if items is not None:
            items = np.asarray(items, dtype=object)
            n = items.size if n is None else n
        if n is None:
            n = int(max(i.max(initial=-1), j.max(initial=-1)) + 1)
        if items is None:
            items = np.array([str(k) for k in range(n)], dtype=object)
        if items.size != n:
            raise ValueError(f"items has {items.size} ids but n = {n}")
        if m and (i.min() < 0 or j.min() < 0 or i.max() >= n or j.max() >= n):
            raise ValueError("item index out of range")
        if np.any(i == j):
            raise ValueError(f"self-comparisons: {_bad_rows_message(i == j)}")
        u = np.minimum(i, j)
        v = np.maximum(i, j)
        edge, edge_u, edge_v, edge_weight = _unique_edges(u, v, w, n)
        sign = np.where(i < j, 1.0, -1.0)
        deg = np.bincount(i, weights=w, minlength=n) + np.bincount(j, weights=w, minlength=n)
        L = _laplacian_from_edges(edge_u, edge_v, edge_weight, deg, n)
        # L is symmetric, so its strongly connected components are the connected components; the
        # 'strong' traversal needs no transposed copy of the graph (the undirected one does)
        n_comp, labels = csgraph.connected_components(L, directed=True, connection="strong")
        labels = _relabel_by_min(labels.astype(np.int64), n_comp)
        if row_id is None:
            row_id = np.arange(m, dtype=np.int64)
        if annotator is None:
            annotator = np.full(m, None, dtype=object)
        return cls(
            items=items,
            i=i,
            j=j,
            y=y,
            w=w,
            L=L,
            component=labels,
            n_components=int(n_comp),
            edge=edge,
            edge_sign=sign,
            edge_u=edge_u,
            edge_v=edge_v,
            edge_weight=edge_weight,
            row_id=np.asarray(row_id),
            annotator=np.asarray(annotator, dtype=object),
        )

    def subset(self, rows: np.ndarray) -> ComparisonGraph:
        """The graph on the same items restricted to ``rows`` (bool mask or indices)."""
        rows = np.asarray(rows)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        return ComparisonGraph.from_arrays(
            self.i[rows],
            self.j[rows],
            self.y[rows],
            self.w[rows],
            n=self.n,
            items=self.items,
            row_id=self.row_id[rows],
            annotator=self.annotator[rows],
        )


def _relabel_by_min(labels: np.ndarray, n_comp: int) -> np.ndarray:
    """Renumber component labels in order of each component's smallest node id."""
    first = np.full(n_comp, labels.size, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(labels.size, dtype=np.int64))
    order = np.argsort(first, kind="stable")
    new = np.empty(n_comp, dtype=np.int64)
    new[order] = np.arange(n_comp, dtype=np.int64)
    return cast(np.ndarray, new[labels])


def build_comparison_graph(comparisons: pd.DataFrame, *, items: Sequence[Any] | None = None) -> ComparisonGraph:
    """Canonicalise a comparison table and build ``X``, ``L`` and the components (spec §1).

    Parameters
    ----------
    comparisons : pandas.DataFrame
        See :func:`canonical_comparisons` for the accepted layouts.
    items : sequence, optional
        Full item universe; listed items that are never compared become isolated (singleton)
        components (spec §1.2 "optional item table").

    Returns
    -------
    ComparisonGraph
        Internal item ids follow the natural sort of the string ids.
    """
    df = canonical_comparisons(comparisons)
    a = df["item_a"].to_numpy(dtype=object)
    b = df["item_b"].to_numpy(dtype=object)
    universe = pd.unique(np.concatenate([a, b]))
    if items is not None:
        extra = pd.Series(list(items), dtype=object)
        if extra.isna().any():
            raise ValueError("items: the item universe contains missing ids")
        universe = pd.unique(np.concatenate([universe, extra.astype(str).to_numpy(dtype=object)]))
    ids = natural_sort(np.asarray(universe, dtype=object))
    index = pd.Index(ids)
    i = index.get_indexer(a)
    j = index.get_indexer(b)
    return ComparisonGraph.from_arrays(
        i,
        j,
        df["outcome"].to_numpy(),
        df["weight"].to_numpy(),
        n=ids.size,
        items=ids,
        row_id=df["row_id"].to_numpy(),
        annotator=df["annotator"].to_numpy(dtype=object),
    )


def group_identical_rows(g: ComparisonGraph) -> tuple[ComparisonGraph, np.ndarray, np.ndarray]:
    """Merge rows with identical (pair, oriented outcome) into weighted rows (spec §1.3 grouping trick).

    Every row is first oriented along its pair (``u < v``, outcome ``s·y``); rows with identical
    ``(u, v, s·y)`` form a group whose weight is the summed weight. For LS, HLASSO and LBI the merged
    problem has exactly the θ of the expanded problem and every member of a group gets the group's γ
    (times its orientation sign).

    Returns
    -------
    grouped : ComparisonGraph
        One row per group (oriented ``u → v``); its ``row_id`` is the group index.
    group : numpy.ndarray
        (m,) group index of every original row.
    sign : numpy.ndarray
        (m,) ±1 orientation of every original row relative to its group (multiply group γ, residuals,
        z by it to get row values).
    """
    yo = g.edge_sign * g.y
    order = np.lexsort((yo, g.edge))
    e_s = g.edge[order]
    y_s = yo[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (e_s[1:] != e_s[:-1]) | (y_s[1:] != y_s[:-1])
    gid_sorted = np.cumsum(new) - 1
    group = np.empty(order.size, dtype=np.int64)
    group[order] = gid_sorted
    first = order[new]
    n_groups = int(first.size)
    wg = np.bincount(group, weights=g.w, minlength=n_groups)
    e = g.edge[first]
    grouped = ComparisonGraph.from_arrays(
        g.edge_u[e], g.edge_v[e], yo[first], wg, n=g.n, items=g.items, row_id=np.arange(n_groups)
    )
    return grouped, group, g.edge_sign.copy()


# ---------------------------------------------------------------------------------------------------
# Laplacian solves (§2.1, §9)
# ---------------------------------------------------------------------------------------------------


def center_per_component(x: np.ndarray, component: np.ndarray, n_components: int) -> np.ndarray:
    """Return a copy of ``x`` ((n,) or (n, k)) with the mean of every component subtracted (spec §2.1)."""
    x = np.array(x, dtype=float, copy=True)
    if n_components == 1:
        x -= x.mean(axis=0)
        return x
    sizes = np.maximum(np.bincount(component, minlength=n_components), 1).astype(float)
    if x.ndim == 1:
        x -= (np.bincount(component, weights=x, minlength=n_components) / sizes)[component]
        return x
    for c in range(x.shape[1]):
        x[:, c] -= (np.bincount(component, weights=x[:, c], minlength=n_components) / sizes)[component]
    return x


class LaplacianSolver:
    """Solve ``L θ = b`` for the weighted Laplacian, per connected component (spec §2.1).

    One node per component (the one of largest weighted degree) is grounded, i.e. its row and column
    are deleted; the grounded Laplacian is symmetric positive definite. It is factorised once with
    sparse LU (``method='splu'``) or solved by Jacobi-preconditioned conjugate gradients
    (``method='cg'``). The result is centred inside every component, which gives the minimum-norm
    solution ``θ = L†b`` for right-hand sides in the range of ``L`` (b is first projected onto the
    range by removing its per-component mean).

    Parameters
    ----------
    L : scipy.sparse matrix
        n×n Laplacian.
    component : numpy.ndarray
        Component id per node (0..c−1).
    n_components : int
    method : {'auto', 'splu', 'cg'}
        ``'auto'`` uses sparse LU for ``n ≤ splu_max_n`` and CG otherwise (LU of random dense-ish graphs
        fills in badly).
    rtol : float
        CG relative residual tolerance ``‖b − L_g x‖ ≤ rtol·‖b‖``.
    maxiter : int, optional
        CG iteration cap (default ``max(1000, 10·n)``); a :class:`RuntimeWarning` is issued when hit.
    splu_max_n : int
        Size threshold of the ``'auto'`` rule.

    Attributes
    ----------
    n_solves : int
        Number of solves performed.
    cg_iterations : list of int
        Iterations of recent CG solves (last 1000; empty for LU).
    """

    def __init__(
        self,
        L: SparseMatrix,
        component: np.ndarray,
        n_components: int,
        *,
        method: Literal["auto", "splu", "cg"] = "auto",
        rtol: float = 1e-11,
        maxiter: int | None = None,
        splu_max_n: int = 3000,
    ) -> None:
        L = sp.csr_matrix(L)
        n = L.shape[0]
        self.n = n
        self.component = np.asarray(component, dtype=np.int64)
        self.n_components = int(n_components)
        self.sizes = np.bincount(self.component, minlength=self.n_components).astype(float)
        deg = L.diagonal()
        order = np.lexsort((np.arange(n), -deg, self.component))
        starts = np.r_[0, np.flatnonzero(np.diff(self.component[order])) + 1]
        self.ground = order[starts]  # ground node of component c at position c
        keep = np.ones(n, dtype=bool)
        keep[self.ground] = False
        self.keep = np.flatnonzero(keep)
        Lg = L[self.keep][:, self.keep]
        if method == "auto":
            method = "splu" if self.keep.size <= splu_max_n else "cg"
        if method not in ("splu", "cg"):
            raise ValueError(f"unknown Laplacian solver method {method!r}")
        self.method = method
        self.rtol = float(rtol)
        self.maxiter = int(maxiter) if maxiter is not None else max(1000, 10 * n)
        self.n_solves = 0
        self.cg_iterations: list[int] = []
        self._lu = None
        if self.keep.size == 0:
            return
        if method == "splu":
            self._lu = spla.splu(sp.csc_matrix(Lg), permc_spec="MMD_AT_PLUS_A")
        else:
            self._Lg = sp.csr_matrix(Lg)
            self._dinv = 1.0 / self._Lg.diagonal()

    @classmethod
    def from_graph(cls, g: ComparisonGraph, **kwargs: Any) -> LaplacianSolver:
        """Solver for ``g.L`` with ``g``'s components."""
        return cls(g.L, g.component, g.n_components, **kwargs)

    def center(self, x: np.ndarray) -> np.ndarray:
        """Subtract the per-component mean (works on (n,) and (n, k) arrays)."""
        return center_per_component(x, self.component, self.n_components)

    def solve(self, b: np.ndarray, x0: np.ndarray | None = None) -> np.ndarray:
        """Return ``L†b`` (centred per component); ``x0`` warm-starts CG."""
        b = self.center(b)
        self.n_solves += 1
        out = np.zeros_like(b)
        if self.keep.size == 0:
            return out
        bg = b[self.keep]
        if self._lu is not None:
            xg = self._lu.solve(bg)
        elif b.ndim == 1:
            xg = self._cg(bg, x0)
        else:
            xg = np.column_stack([self._cg(bg[:, c], None if x0 is None else x0[:, c]) for c in range(b.shape[1])])
        out[self.keep] = xg
        return self.center(out)

    def _cg(self, bg: np.ndarray, x0: np.ndarray | None) -> np.ndarray:
        """Jacobi-preconditioned conjugate gradients on the grounded (SPD) Laplacian.

        Stopping rule: ``‖b − L_g x‖₂ ≤ rtol·‖b‖₂``; cap ``maxiter`` (RuntimeWarning). Inner products use
        ``einsum`` (see :func:`wdot`), so no multi-threaded BLAS call sits in the loop.
        """
        A, dinv = self._Lg, self._dinv
        dot: Callable[[np.ndarray, np.ndarray], float] = lambda a, b: float(np.einsum("i,i->", a, b))  # noqa: E731
        bnorm = np.sqrt(dot(bg, bg))
        if x0 is not None:
            x0 = np.asarray(x0, dtype=float)
            x = x0[self.keep] - x0[self.ground[self.component[self.keep]]]
            r = bg - A @ x
        else:
            x = np.zeros_like(bg)
            r = bg.copy()
        tol = self.rtol * bnorm
        it = 0
        rr = dot(r, r)
        if bnorm == 0.0 or np.sqrt(rr) <= tol:
            self._log_cg(0)
            return x if bnorm > 0 else np.zeros_like(bg)
        zv = dinv * r
        p = zv.copy()
        rz = dot(r, zv)
        converged = False
        for it in range(1, self.maxiter + 1):
            Ap = A @ p
            alpha = rz / dot(p, Ap)
            x += alpha * p
            r -= alpha * Ap
            rr = dot(r, r)
            if np.sqrt(rr) <= tol:
                converged = True
                break
            zv = dinv * r
            rz_new = dot(r, zv)
            p *= rz_new / rz
            p += zv
            rz = rz_new
        self._log_cg(it)
        if not converged:
            warnings.warn(
                f"Laplacian CG did not reach rtol={self.rtol:g} in {self.maxiter} iterations "
                f"(relative residual {np.sqrt(rr) / bnorm:.2e}; ill-conditioned comparison graph, small "
                "Fiedler value?)",
                RuntimeWarning,
                stacklevel=3,
            )
        return cast(np.ndarray, x)

    def _log_cg(self, it: int) -> None:
        self.cg_iterations.append(int(it))
        if len(self.cg_iterations) > 1000:
            del self.cg_iterations[:-1000]


def laplacian_lambda_max(L: SparseMatrix, *, dense_max_n: int = 1500) -> float:
    """Largest eigenvalue of the Laplacian (step-size guard of Algorithm 2, spec §4.1).

    Dense ``eigvalsh`` for ``n ≤ dense_max_n``; otherwise Lanczos (``eigsh``), falling back to the
    bound ``2·max weighted degree`` if Lanczos fails.
    """
    n = L.shape[0]
    if n == 0:
        return 0.0
    if n <= dense_max_n:
        return float(np.linalg.eigvalsh(sp.csr_matrix(L).toarray())[-1])
    try:
        # scipy-stubs finds no eigsh overload for a csr_matrix of unknown dtype
        val = spla.eigsh(sp.csr_matrix(L, dtype=float), k=1, which="LA", tol=1e-8, return_eigenvectors=False)  # type: ignore[call-overload]
        return float(val[0])
    except Exception:  # pragma: no cover - ARPACK failure is rare
        logger.warning("eigsh failed for lambda_max(L); using the 2·max degree bound")
        return float(2 * L.diagonal().max())


def hodgerank_scores(g: ComparisonGraph, solver: LaplacianSolver | None = None) -> np.ndarray:
    """HodgeRank least-squares scores ``θ̂ = L† XᵀW y``, centred per component (spec §2.1).

    ``θ̂ = argmin_{Σ_c θ = 0} ½ Σ_k w_k (θ_i − θ_j − y_k)²`` on every connected component c.
    """
    solver = solver or LaplacianSolver.from_graph(g)
    return solver.solve(g.divergence(g.y))


def _project_cycles(
    g: ComparisonGraph, solver: LaplacianSolver, v: np.ndarray, x0: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``P v = v − X L† XᵀW v`` (W-orthogonal projection onto the cycle space) and ``θ = L†XᵀWv``."""
    theta = solver.solve(g.divergence(v), x0=x0)
    return cast(np.ndarray, v - g.X @ theta), theta


# ---------------------------------------------------------------------------------------------------
# Graph checks and Hodge diagnostics (§2.2, §2.3, §5)
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphReport:
    """Result of the pre-fit graph checks (spec §5 "graph_checks").

    Attributes
    ----------
    n_items, n_rows, n_edges, n_components : int
    cycle_dim : int
        ``l = m − n + c``; 0 means no outlier is detectable.
    components : pandas.DataFrame
        ``item, component, degree`` (degree = number of rows involving the item).
    component_sizes : numpy.ndarray
    isolated_items : list of str
        Items listed in the universe but never compared.
    connected : bool
        True iff ``n_components == 1``.
    """

    n_items: int
    n_rows: int
    n_edges: int
    n_components: int
    cycle_dim: int
    components: pd.DataFrame
    component_sizes: np.ndarray
    isolated_items: list[str]
    connected: bool

    def describe(self, limit: int = 5) -> str:
        """One-paragraph human-readable summary."""
        sizes = sorted(self.component_sizes.tolist(), reverse=True)
        s = ", ".join(str(x) for x in sizes[:limit]) + (" …" if len(sizes) > limit else "")
        iso = self.isolated_items[:limit]
        return (
            f"{self.n_components} connected component(s) (sizes {s}); "
            f"{len(self.isolated_items)} isolated item(s){' e.g. ' + str(iso) if iso else ''}"
        )


def _graph_report(g: ComparisonGraph) -> GraphReport:
    degree = np.bincount(g.i, minlength=g.n) + np.bincount(g.j, minlength=g.n)
    comp = pd.DataFrame({"item": _str(g.items), "component": g.component, "degree": degree.astype(np.int64)})
    return GraphReport(
        n_items=g.n,
        n_rows=g.m,
        n_edges=g.n_edges,
        n_components=g.n_components,
        cycle_dim=g.cycle_dim,
        components=comp,
        component_sizes=g.component_sizes,
        isolated_items=[str(x) for x in g.items[degree == 0]],
        connected=g.n_components == 1,
    )


def check_comparison_graph(comparisons: pd.DataFrame, *, items: Sequence[Any] | None = None) -> GraphReport:
    """Connectivity checks of the comparison graph before any fit (spec §2.1, §5 checks 1 and 3).

    Parameters
    ----------
    comparisons : pandas.DataFrame
        Comparison table (any layout accepted by :func:`canonical_comparisons`).
    items : sequence, optional
        Full item universe (never-compared items are reported as isolated).

    Returns
    -------
    GraphReport
    """
    return _graph_report(build_comparison_graph(comparisons, items=items))


def _bridges(g: ComparisonGraph, seed: int = 12345) -> np.ndarray:
    """Boolean mask over pairs: True iff the pair (edge) is a bridge of the item graph.

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
    """Rows whose cycle-space column ``P e_k`` vanishes (spec §2.3, §5 check 4).

    ``P_kk = 1 − w_k R_e`` with ``R_e`` the effective resistance of the row's pair, and
    ``R_e ≤ 1/w_e`` with equality iff the pair is a bridge. Hence ``P_kk = 0`` exactly when the pair is a
    bridge carrying a single row. We flag the slightly larger, grouping-invariant set "bridge pair whose
    rows all have the same oriented outcome": such rows always have zero LS residual, and identical rows
    share their γ (spec §1.3), so no method can flag them. Exact (no leverage solves).

    Returns
    -------
    numpy.ndarray
        (m,) bool.
    """
    if g.m == 0:
        return np.zeros(0, dtype=bool)
    bridge = _bridges(g)
    yo = g.edge_sign * g.y
    ymin = np.full(g.n_edges, np.inf)
    ymax = np.full(g.n_edges, -np.inf)
    np.minimum.at(ymin, g.edge, yo)
    np.maximum.at(ymax, g.edge, yo)
    edge_undet = bridge & (ymin == ymax)
    return cast(np.ndarray, edge_undet[g.edge])


def enumerate_triangles(
    g: ComparisonGraph, *, max_candidates: int = 50_000_000
) -> tuple[np.ndarray, np.ndarray] | None:
    """All triangles ``a < b < c`` of the item graph with the ids of their three pairs (spec §2.2).

    For every pair (a, b) the candidates c are the larger neighbours of b; membership of (a, c) is
    tested by binary search in the sorted pair keys. Cost ``O(Σ_{(a,b)} deg⁺(b))``.

    Returns
    -------
    (tri, tri_edges) or None
        ``tri`` (|T|, 3) item ids ``a < b < c``; ``tri_edges`` (|T|, 3) pair ids of ``ab, bc, ac``.
        ``None`` if the number of candidates exceeds ``max_candidates``.
    """
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
    rep = np.repeat(np.arange(E, dtype=np.int64), cnt)
    local = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    cpos = indptr[v[rep]] + local  # position of (b, c) in the edge list
    a = u[rep]
    c = v[cpos]
    key_ac = a * np.int64(n) + c
    pos = np.searchsorted(ekey, key_ac)
    pos_c = np.minimum(pos, E - 1)
    hit = ekey[pos_c] == key_ac
    tri = np.column_stack([a[hit], v[rep[hit]], c[hit]])
    tri_edges = np.column_stack([rep[hit], cpos[hit], pos_c[hit]])
    return tri, tri_edges


@dataclass(frozen=True)
class HodgeDecomposition:
    """Row-level Hodge decomposition ``y = gradient + bicycle + curl + harmonic`` (spec §2.2).

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
        Per-component diagnostics (spec §2.3), one row per component.
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
    d1 = sp.csr_matrix((np.tile([1.0, 1.0, -1.0], T), tri_edges.ravel(), np.arange(0, 3 * T + 1, 3)), shape=(T, E))
    A = sp.csr_matrix(sp.diags(1.0 / sw) @ d1.T)  # E×T
    b = sw * rbar
    ecomp = g.component[g.edge_u]
    tcomp = g.component[g.edge_u[tri_edges[:, 0]]]
    has_tri = np.bincount(tcomp, minlength=g.n_components) > 0
    rank[~has_tri] = 0
    e_order = np.argsort(ecomp, kind="stable")
    e_starts = np.searchsorted(ecomp[e_order], np.arange(g.n_components + 1))
    big = []
    for c in np.flatnonzero(has_tri):
        eidx = e_order[e_starts[c] : e_starts[c + 1]]
        if eidx.size > dense_max_edges:
            big.append(c)
            continue
        Ac = A[eidx]
        G = (Ac @ Ac.T).toarray()
        vals, vecs = np.linalg.eigh(G)
        tol = max(vals.max(initial=0.0), 1.0) * eidx.size * 1e-12
        keep = vals > tol
        rank[c] = int(keep.sum())
        V = vecs[:, keep]
        curl[eidx] = (V @ (V.T @ b[eidx])) / sw[eidx]
    if big:
        emask = np.isin(ecomp, big)
        tmask = np.isin(tcomp, big)
        Ab = A[emask][:, tmask]
        proj = _cgls_projection(Ab, b[emask], rtol=1e-13, maxiter=max(10 * Ab.shape[1], 1000))
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
            out[c] = float(np.linalg.eigvalsh(Lc.toarray())[1])
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
    """Hodge decomposition of the comparison data and per-component diagnostics (spec §2.2–2.3).

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
    grad = g.X @ theta
    r = y - grad
    we = g.edge_weight
    ybar = np.bincount(g.edge, weights=w * s * y, minlength=g.n_edges) / np.where(we > 0, we, 1.0)
    bic = y - s * ybar[g.edge]
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
    curl = s * curl_e[g.edge]
    harm = s * harm_e[g.edge]
    rcomp = g.component[g.i]
    sq: Callable[[np.ndarray], np.ndarray] = lambda v: np.bincount(rcomp, weights=w * v * v, minlength=C)  # noqa: E731
    ynorm = sq(y)
    with np.errstate(invalid="ignore", divide="ignore"):
        den = np.where(ynorm > 0, ynorm, np.nan)
        total = sq(r) / den
        bic_sh = sq(bic) / den
        curl_sh = sq(curl) / den if curl_split else np.full(C, np.nan)
        harm_sh = sq(harm) / den if curl_split else np.full(C, np.nan)
    sizes = g.component_sizes
    n_rows = np.bincount(rcomp, minlength=C)
    n_edges = np.bincount(ecomp, minlength=C)
    cyc_dim = n_rows - sizes + 1
    # β1 = |E| − (n_c − 1) − rank(δ1) (edge-level cycle space minus curl)
    hdim = np.where(rank_d1 >= 0, n_edges - (sizes - 1) - rank_d1, np.nan).astype(float)
    absr = np.abs(r)
    order = np.argsort(rcomp, kind="stable")
    starts = np.r_[0, np.cumsum(n_rows)]
    q = np.full((C, 3), np.nan)
    maxr = np.full(C, np.nan)
    for c in np.flatnonzero(n_rows > 0):
        vals = absr[order[starts[c] : starts[c + 1]]]
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
            "weight": np.bincount(rcomp, weights=w, minlength=C),
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


# ---------------------------------------------------------------------------------------------------
# §3 HLASSO / Huber robust ranking (Algorithm 1) and λ rules (§3.4)
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LassoFit:
    """HLASSO solution at a fixed λ (spec §3.2).

    Attributes
    ----------
    lam : float
    gamma : numpy.ndarray
        (m,) ``γ̂ = shrink(y − Xθ̂, λ)``.
    theta : numpy.ndarray
        (n,) ``θ̂ = L†XᵀW(y − γ̂)`` (equal to the Huber-regression scores), centred per component.
    n_iter : int
        FISTA iterations used.
    converged : bool
        Whether the fixed-point residual ``‖γ − shrink(γ + P(y − γ), λ)‖_∞`` reached
        ``tol·max(1, ‖y‖_∞)``.
    fixed_point_residual : float
    """

    lam: float
    gamma: np.ndarray
    theta: np.ndarray
    n_iter: int
    converged: bool
    fixed_point_residual: float

    @property
    def support(self) -> np.ndarray:
        """Bool mask of flagged rows ``γ̂_k ≠ 0``."""
        return cast(np.ndarray, self.gamma != 0)


def _fista(
    y: np.ndarray,
    w: np.ndarray,
    op: Any,
    lam: float,
    gamma0: np.ndarray,
    *,
    tol: float,
    max_iter: int,
    aux0: Any = None,
) -> tuple[np.ndarray, Any, int, bool, float]:
    """FISTA with gradient-based adaptive restart for ``½‖T(y − γ)‖²_W + λΣw_k|γ_k|``.

    ``op(v, aux) -> (T v, aux)`` must be a W-self-adjoint operator with ``‖T‖_W ≤ 1`` (T = P or a
    sub-projection), so the step is 1 and the prox in the W-metric is ``shrink(·, λ)`` (spec §3.3:
    ``γ ← shrink(γ + P(y − γ), λ)``). Stopping rule: ``‖γ⁺ − u‖_∞ ≤ tol·max(1, ‖y‖_∞)`` where ``u`` is
    the extrapolated point and ``γ⁺ = shrink(u + T(y − u), λ)`` (the prox-gradient fixed-point residual).
    """
    scale = max(1.0, float(np.abs(y).max(initial=0.0)))
    gam = np.array(gamma0, dtype=float, copy=True)
    u = gam.copy()
    tk = 1.0
    aux = aux0
    res = np.inf
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        tv, aux = op(y - u, aux)
        new = shrink(u + tv, lam)
        res = float(np.abs(new - u).max(initial=0.0))
        if res <= tol * scale:
            gam = new
            converged = True
            break
        if wdot(w, u - new, new - gam) > 0.0:
            tk = 1.0
            u = new
        else:
            tn = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * tk * tk))
            u = new + ((tk - 1.0) / tn) * (new - gam)
            tk = tn
        gam = new
    return gam, aux, it, converged, res


def cycle_projector(g: ComparisonGraph, solver: LaplacianSolver, *, dense_max_entries: int = 100_000) -> CycleOp:
    """Operator ``op(v, θ_prev) -> (P v, θ)`` with ``θ = L†XᵀWv`` and ``Pv = v − Xθ`` (spec §2.2).

    For tiny problems (LU solver, ``n ≤ 400`` and ``n·m ≤ dense_max_entries``) the n×m matrix
    ``K = L†XᵀW`` is formed once (multi-right-hand-side solve) and every application is one dense
    mat-vec (cheaper only where per-call overhead dominates); otherwise each application is one
    Laplacian solve (warm-started by ``θ_prev`` for CG). Never forms P (m×m).
    """
    if solver.method == "splu" and g.n <= 400 and g.n * g.m <= dense_max_entries and g.m > 0:
        K = solver.solve(g.XT.multiply(g.w[None, :]).toarray())
        X = g.X

        def dense_op(v: np.ndarray, theta: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
            th = K @ v
            return v - X @ th, th

        return dense_op

    def op(v: np.ndarray, theta: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        return _project_cycles(g, solver, v, x0=theta)

    return op


_projector = cycle_projector


def hlasso(
    g: ComparisonGraph,
    lam: float,
    *,
    solver: LaplacianSolver | None = None,
    gamma0: np.ndarray | None = None,
    tol: float = 1e-10,
    max_iter: int = 20000,
) -> LassoFit:
    """HLASSO at a fixed λ via the split of Prop. 1 (spec §3.2–3.3, Algorithm 1 steps 1–2, 4).

    Solves (a) ``γ̂ = argmin_γ ½‖P(y − γ)‖²_W + λΣ_k w_k|γ_k|`` with ``P = I − XL†XᵀW`` applied by one
    Laplacian solve per iteration (FISTA, step 1 since ``‖P‖_W = 1``), then (b) ``θ̂ = L†XᵀW(y − γ̂)``.
    The pair equals the joint minimiser of ``½‖y − Xθ − γ‖²_W + λΣw_k|γ_k|`` and θ̂ equals Huber
    regression with threshold λ. On return ``γ̂ = shrink(y − Xθ̂, λ)`` holds to rounding.

    Parameters
    ----------
    g : ComparisonGraph
    lam : float
        λ > 0.
    solver : LaplacianSolver, optional
    gamma0 : numpy.ndarray, optional
        Warm start.
    tol, max_iter : float, int
        FISTA stopping rule (see :func:`_fista`) and cap; a RuntimeWarning is issued at the cap.

    Returns
    -------
    LassoFit
    """
    if not lam > 0:
        raise ValueError(f"lambda must be > 0, got {lam}")
    solver = solver or LaplacianSolver.from_graph(g)
    gamma0 = np.zeros(g.m) if gamma0 is None else gamma0
    gam, theta, it, conv, res = _fista(g.y, g.w, _projector(g, solver), lam, gamma0, tol=tol, max_iter=max_iter)
    if not conv:
        warnings.warn(
            f"HLASSO FISTA did not converge at lambda={lam:.4g} in {max_iter} iterations "
            f"(fixed-point residual {res:.2e})",
            RuntimeWarning,
            stacklevel=2,
        )
    # θ̂ = L†XᵀW(y − u) at the last extrapolated point; γ̂ = shrink(y − Xθ̂, λ) exactly
    if theta is None:
        theta = solver.solve(g.divergence(g.y - gam))
    gam = shrink(g.y - g.X @ theta, lam)
    return LassoFit(lam=float(lam), gamma=gam, theta=theta, n_iter=it, converged=conv, fixed_point_residual=res)


@dataclass(frozen=True)
class LassoPath:
    """HLASSO regularisation path on a decreasing λ grid (spec §3.3 step 2, §3.4 "the path itself").

    Attributes
    ----------
    lambdas : numpy.ndarray
        (G,) decreasing grid, ``lambdas[0] = λ_max = max|Py|``.
    lambda_max : float
    gammas : scipy.sparse.csc_matrix
        (m×G) γ̂ at every grid point (sparse).
    thetas : numpy.ndarray
        (G, n) θ̂ at every grid point.
    support_size, support_weight : numpy.ndarray
        (G,) number / summed weight of rows with γ ≠ 0.
    n_iter : numpy.ndarray
        (G,) FISTA iterations per grid point.
    converged : numpy.ndarray
        (G,) bool.
    entry_lambda : numpy.ndarray
        (m,) the λ at which the row enters (|r_k(λ)| = λ, linearly interpolated between the last grid
        point where it was inactive and the first where it is active); NaN if it never enters.
    entry_sign : numpy.ndarray
        (m,) sign of γ at entry (0 if never).
    order_key : numpy.ndarray
        (m,) outlyingness used for ``path_rank``: ``entry_lambda`` for rows that enter, ``|r_k(λ_min)|``
        (≤ λ_min, the λ at which they would start to enter) for the others. Larger = more outlying.
    """

    lambdas: np.ndarray
    lambda_max: float
    gammas: sp.csc_matrix
    thetas: np.ndarray
    support_size: np.ndarray
    support_weight: np.ndarray
    n_iter: np.ndarray
    converged: np.ndarray
    entry_lambda: np.ndarray
    entry_sign: np.ndarray
    order_key: np.ndarray

    @property
    def path_rank(self) -> np.ndarray:
        """1 = first row to enter the path (ties share the smaller rank)."""
        return _rank_desc(self.order_key)


def _rank_desc(key: np.ndarray) -> np.ndarray:
    return pd.Series(key).rank(method="min", ascending=False).to_numpy().astype(np.int64)


def hlasso_path(
    g: ComparisonGraph,
    *,
    lambdas: np.ndarray | None = None,
    n_lambdas: int = 100,
    lambda_min_ratio: float = 1e-2,
    solver: LaplacianSolver | None = None,
    tol: float = 1e-10,
    max_iter: int = 20000,
) -> LassoPath:
    """HLASSO path from ``λ_max = max_k |(Py)_k|`` down a geometric grid with warm starts (spec §3.3).

    The first row to enter is the one with the largest LS residual (spec §3.2). Every row's entry λ is
    the largest λ with ``γ_k ≠ 0``, refined by linear interpolation of ``|r_k(λ)| − λ`` between grid
    points (``r = y − Xθ̂_λ``; row k is active iff ``|r_k| > λ``).

    Parameters
    ----------
    g : ComparisonGraph
    lambdas : numpy.ndarray, optional
        Explicit decreasing grid (overrides ``n_lambdas`` / ``lambda_min_ratio``).
    n_lambdas : int
        Grid size.
    lambda_min_ratio : float
        ``λ_min = λ_max · ratio``.
    solver : LaplacianSolver, optional
    tol, max_iter : float, int
        Per-λ FISTA stopping rule and cap.

    Returns
    -------
    LassoPath
    """
    solver = solver or LaplacianSolver.from_graph(g)
    py, theta_ls = _project_cycles(g, solver, g.y)
    lam_max = float(np.abs(py).max(initial=0.0))
    if lam_max <= 1e-12 * max(1.0, float(np.abs(g.y).max(initial=0.0))):
        lam_max = 0.0  # data fit a global ranking exactly (to rounding): nothing can be flagged
        py = np.zeros_like(py)
    if lambdas is None:
        if lam_max <= 0:
            lambdas = np.array([0.0])
        else:
            lambdas = lam_max * np.geomspace(1.0, lambda_min_ratio, n_lambdas)
    lambdas = np.asarray(lambdas, dtype=float)
    if np.any(np.diff(lambdas) > 0):
        raise ValueError("lambdas must be decreasing")
    G = lambdas.size
    m = g.m
    gam = np.zeros(m)
    theta = theta_ls
    cols, vals, ptr = [], [], [0]
    thetas = np.zeros((G, g.n))
    s_size = np.zeros(G, dtype=np.int64)
    s_weight = np.zeros(G)
    n_it = np.zeros(G, dtype=np.int64)
    conv = np.zeros(G, dtype=bool)
    entry_idx = np.full(m, -1, dtype=np.int64)
    entry_lam = np.full(m, np.nan)
    entry_sign = np.zeros(m, dtype=np.int8)
    d_prev = np.abs(py) - lambdas[0] if G else np.zeros(m)
    lam_prev = lambdas[0] if G else 0.0
    op = _projector(g, solver)
    absr = np.abs(py)
    for k, lam in enumerate(lambdas):
        if lam <= 0:
            gam = np.zeros(m) if lam_max <= 0 else py.copy()
            theta = theta_ls
            it, ok = 0, True
        else:
            gam, theta, it, ok, res = _fista(g.y, g.w, op, lam, gam, tol=tol, max_iter=max_iter, aux0=theta)
            if not ok:
                warnings.warn(
                    f"HLASSO path: FISTA did not converge at lambda={lam:.4g} (residual {res:.2e})",
                    RuntimeWarning,
                    stacklevel=2,
                )
            r = g.y - g.X @ theta
            gam = shrink(r, lam)
            absr = np.abs(r)
        thetas[k] = theta
        nz = np.flatnonzero(gam)
        cols.append(nz)
        vals.append(gam[nz])
        ptr.append(ptr[-1] + nz.size)
        s_size[k] = nz.size
        s_weight[k] = g.w[nz].sum()
        n_it[k] = it
        conv[k] = ok
        d_cur = absr - lam
        new = (gam != 0) & (entry_idx < 0)
        if new.any():
            idx = np.flatnonzero(new)
            entry_idx[idx] = k
            entry_sign[idx] = np.sign(gam[idx]).astype(np.int8)
            if k == 0:
                entry_lam[idx] = lam
            else:
                dp = np.minimum(d_prev[idx], 0.0)
                dc = d_cur[idx]
                frac = np.where(dc - dp > 0, dp / (dp - dc), 1.0)
                entry_lam[idx] = lam_prev + (lam - lam_prev) * frac
        d_prev = d_cur
        lam_prev = lam
    gammas = sp.csc_matrix(
        (np.concatenate(vals) if vals else np.zeros(0), np.concatenate(cols) if cols else np.zeros(0, int), ptr),
        shape=(m, G),
    )
    key = np.where(entry_idx >= 0, entry_lam, absr)
    return LassoPath(
        lambdas=lambdas,
        lambda_max=lam_max,
        gammas=gammas,
        thetas=thetas,
        support_size=s_size,
        support_weight=s_weight,
        n_iter=n_it,
        converged=conv,
        entry_lambda=entry_lam,
        entry_sign=entry_sign,
        order_key=key,
    )


def _budget_fit(
    g: ComparisonGraph,
    solver: LaplacianSolver,
    path: LassoPath,
    budget: float,
    *,
    tol: float,
    max_iter: int,
) -> LassoFit:
    """Largest λ whose flagged weight reaches ``budget·Σw`` (spec §3.4.3), by bisection between grid points.

    The flagged set at that λ contains the rows that entered first, including the whole group that
    crosses the threshold (identical rows enter together), as in MM13's code.
    """
    target = budget * g.w.sum()
    hit = np.flatnonzero(path.support_weight >= target - 1e-12 * g.w.sum())
    if hit.size == 0:
        warnings.warn(
            f"budget {budget:g}: the path down to lambda={path.lambdas[-1]:.3g} flags only "
            f"{path.support_weight[-1] / g.w.sum():.3%} of the weight; using the smallest lambda",
            RuntimeWarning,
            stacklevel=3,
        )
        k = path.lambdas.size - 1
        gam_k = path.gammas[:, k].toarray().ravel()
        return hlasso(g, path.lambdas[k], solver=solver, gamma0=gam_k, tol=tol, max_iter=max_iter)
    k = int(hit[0])
    lo_fit = hlasso(
        g, path.lambdas[k], solver=solver, gamma0=path.gammas[:, k].toarray().ravel(), tol=tol, max_iter=max_iter
    )
    if k == 0:
        return lo_fit
    lo, hi = path.lambdas[k], path.lambdas[k - 1]
    for _ in range(60):
        if hi - lo <= 1e-10 * hi:
            break
        mid = 0.5 * (lo + hi)
        f = hlasso(g, mid, solver=solver, gamma0=lo_fit.gamma, tol=tol, max_iter=max_iter)
        if g.w[f.gamma != 0].sum() >= target - 1e-12 * g.w.sum():
            lo, lo_fit = mid, f
        else:
            hi = mid
    return lo_fit


@dataclass(frozen=True)
class ScaleEstimate:
    """Huber concomitant scale estimate (spec §3.4.1).

    Attributes
    ----------
    sigma : float
        σ̂.
    lam : float
        ``λ* = M·σ̂``.
    fit : LassoFit
        HLASSO at λ*.
    n_iter : int
        Outer alternations.
    converged : bool
    trace : numpy.ndarray
        σ after every alternation.
    """

    sigma: float
    lam: float
    fit: LassoFit
    n_iter: int
    converged: bool
    trace: np.ndarray


def _solve_scale(r: np.ndarray, w: np.ndarray, M: float, a: float) -> float:
    """Root σ of ``Σ w_k min(r_k²/σ², M²) = a·Σw`` (decreasing in σ); 0 if no positive root."""
    from scipy.optimize import brentq

    W = w.sum()
    r2 = r * r
    if M * M * w[r2 > 0].sum() <= a * W:
        return 0.0
    f: Callable[[float], float] = lambda s: float(np.sum(w * np.minimum(r2 / (s * s), M * M)) - a * W)  # noqa: E731
    hi = float(np.sqrt(np.sum(w * r2) / (a * W))) * 1.0001 + 1e-300
    lo = hi
    while f(lo) <= 0:
        lo *= 0.5
    return float(brentq(f, lo, hi, xtol=1e-15, rtol=1e-13, maxiter=500))


def huber_concomitant_scale(
    g: ComparisonGraph,
    *,
    M: float = HUBER_M,
    a: float = HUBER_A,
    solver: LaplacianSolver | None = None,
    sigma0: float | None = None,
    tol: float = 1e-8,
    max_iter: int = 200,
    lasso_tol: float = 1e-10,
) -> ScaleEstimate:
    """Huber's concomitant scale (Proposal 2) for choosing λ (spec §3.4.1).

    Minimises ``Σ_k w_k σ H_M((θ_i − θ_j − y_k)/σ) + a(Σw)σ`` over ``(θ, σ)`` (jointly convex,
    ``H_M = 2ρ_M``) by alternating (i) HLASSO at ``λ = Mσ`` (θ step) and (ii) the σ-stationarity equation
    ``Σ_k w_k min(r_k²/σ², M²) = a·Σw`` with the full residual ``r = y − Xθ`` (monotone 1-D root).
    Stopping rule: relative change of σ ≤ ``tol``; cap ``max_iter`` (RuntimeWarning).

    Parameters
    ----------
    M : float
        Huber constant (1.35 ≈ 95 % Gaussian efficiency).
    a : float
        0.7126 = E[min(Z², M²)] (Fisher-consistent default); ``a = 1`` is the paper-literal ``+mσ``
        version, which underestimates σ (≈ 0.68σ under Gaussian noise).
    sigma0 : float, optional
        Start (default: 1.4826·median|LS residual|).

    Returns
    -------
    ScaleEstimate
    """
    solver = solver or LaplacianSolver.from_graph(g)
    theta = hodgerank_scores(g, solver)
    r = g.y - g.X @ theta
    if sigma0 is None:
        sigma0 = 1.4826 * float(np.median(np.abs(r))) if g.m else 0.0
        if sigma0 <= 0:
            sigma0 = float(np.sqrt(np.sum(g.w * r * r) / max(g.w.sum(), 1e-300)))
    sigma = float(sigma0)
    trace = []
    gam = np.zeros(g.m)
    fit = None
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        if sigma <= 0:
            break
        fit = hlasso(g, M * sigma, solver=solver, gamma0=gam, tol=lasso_tol)
        gam = fit.gamma
        r = g.y - g.X @ fit.theta
        new = _solve_scale(r, g.w, M, a)
        trace.append(new)
        if abs(new - sigma) <= tol * max(sigma, 1e-300):
            sigma = new
            converged = True
            break
        sigma = new
    if sigma <= 0:
        warnings.warn(
            "concomitant scale collapsed to 0 (data fit a global ranking exactly); no outliers flagged",
            RuntimeWarning,
            stacklevel=2,
        )
        fit = LassoFit(0.0, np.zeros(g.m), theta, 0, True, 0.0)
        return ScaleEstimate(0.0, 0.0, fit, it, True, np.asarray(trace))
    if not converged:
        warnings.warn(f"concomitant scale did not converge in {max_iter} alternations", RuntimeWarning, stacklevel=2)
    fit = hlasso(g, M * sigma, solver=solver, gamma0=gam, tol=lasso_tol)
    return ScaleEstimate(float(sigma), float(M * sigma), fit, it, converged, np.asarray(trace))


def cycle_basis(g: ComparisonGraph, *, max_rows: int = 4000) -> np.ndarray:
    """Dense orthonormal basis ``Q`` (m×l) of the W-weighted cycle space (small m only; spec §2.2, §3.4.2).

    ``Q`` spans ``null((W^{1/2}X)ᵀ)``, so ``‖P v‖²_W = ‖Qᵀ W^{1/2} v‖²``; the rows of ``Ψ = QᵀW^{1/2}``
    are the l "projected measurements" (``U2ᵀ`` in the unweighted case).

    Raises
    ------
    ValueError
        If ``m > max_rows`` (a dense m×l basis would be too large).
    """
    from scipy.linalg import null_space

    if g.m > max_rows:
        raise ValueError(f"cycle_basis: m = {g.m} rows exceeds max_rows = {max_rows} (dense m×l basis)")
    B = (g.X.multiply(np.sqrt(g.w)[:, None])).toarray()
    return null_space(B.T)


def _cv_folds(l: int, folds: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(l)
    return [np.sort(p) for p in np.array_split(perm, folds)]


def cv_lambda(
    g: ComparisonGraph,
    lambdas: np.ndarray,
    *,
    folds: int = 5,
    seed: int = 0,
    rescale: Literal["sqrt", "linear"] = "sqrt",
    max_rows: int = 4000,
    tol: float = 1e-9,
    max_iter: int = 5000,
) -> tuple[float, pd.DataFrame]:
    """Cross-validation on random projections of the cycle space (spec §3.4.2).

    The l rows of ``Ψ = QᵀW^{1/2}`` (:func:`cycle_basis`) are split into K folds. For each fold the
    LASSO ``½‖Ψ_tr(y − γ)‖² + λ_trΣw_k|γ_k|`` is fitted along the grid ``λ_tr = λ·s`` (warm starts) and
    scored by ``‖Ψ_val(y − γ̂)‖²``. The λ of the grid with the smallest mean validation error is
    returned; it is already expressed at full-problem scale because the training grid was scaled by
    ``s = √(l_tr/l)`` (spec's choice, ``rescale='sqrt'``) or ``s = l_tr/l`` (``'linear'``: the scaling
    of ``λ_max`` itself, since ``E[Ψ_trᵀΨ_tr] = (l_tr/l)ΨᵀΨ``).

    Returns
    -------
    (lambda_star, table)
        ``table`` has columns ``lambda, cv_error, cv_se``.
    """
    Q = cycle_basis(g, max_rows=max_rows)
    l = Q.shape[1]
    if l < folds or folds < 2:
        raise ValueError(f"cv needs at least {max(folds, 2)} cycle dimensions (have l = {l})")
    sw = np.sqrt(g.w)
    errs = np.zeros((folds, lambdas.size))
    for f, val in enumerate(_cv_folds(l, folds, seed)):
        tr = np.setdiff1d(np.arange(l), val)
        Qt, Qv = Q[:, tr], Q[:, val]
        s = np.sqrt(tr.size / l) if rescale == "sqrt" else tr.size / l

        def op(v: np.ndarray, aux: Any, Qt: np.ndarray = Qt) -> tuple[np.ndarray, Any]:
            return (Qt @ (Qt.T @ (sw * v))) / sw, aux

        gam = np.zeros(g.m)
        for k, lam in enumerate(lambdas):
            gam, _, _, _, _ = _fista(g.y, g.w, op, lam * s, gam, tol=tol, max_iter=max_iter)
            errs[f, k] = float(np.sum((Qv.T @ (sw * (g.y - gam))) ** 2))
    mean = errs.mean(axis=0)
    se = errs.std(axis=0, ddof=1) / np.sqrt(folds)
    best = int(np.argmin(mean))
    return float(lambdas[best]), pd.DataFrame({"lambda": lambdas, "cv_error": mean, "cv_se": se})


def theory_lambda(sigma: float, eta: float, mu_psi: float, m: int) -> float:
    """Theory value ``λ̄ = (2σ√μ_Ψ/η)·√(log m)`` of Thm 4.1 (spec §3.4.5; simulations only)."""
    return float(2.0 * sigma * np.sqrt(mu_psi) / eta * np.sqrt(np.log(m)))


@dataclass(frozen=True)
class Identifiability:
    """Identifiability conditions of spec §5 for a hypothesised outlier set S.

    Attributes
    ----------
    c_min : float
        C1: ``λ_min(P_SS)`` (W-symmetrised P).
    irrepresentability : float
        ``max_{j∉S} Σ_{i∈S} |(P_{SᶜS}P_SS⁻¹)_{ji}|``.
    eta : float
        ``1 − irrepresentability`` (C2 holds iff η > 0).
    mu_psi : float
        ``max_{j∉S} P_jj``.
    rho : float
        C0 mutual incoherence ``max_{i,j} |H_ij|``.
    c1, c2, c0 : bool
        ``c_min > 0``; ``eta > 0``; ``rho < 1/(2s)``.
    """

    c_min: float
    irrepresentability: float
    eta: float
    mu_psi: float
    rho: float
    c1: bool
    c2: bool
    c0: bool


def identifiability(g: ComparisonGraph, support: np.ndarray, *, max_rows: int = 5000) -> Identifiability:
    """Check C0, C1, C2 (spec §5) for a hypothesised outlier set with a dense ``P`` (m ≤ ``max_rows``).

    ``H = W^{1/2}XL†XᵀW^{1/2}``, ``P = I − H`` (equal to ``U2U2ᵀ`` when unweighted).

    Parameters
    ----------
    g : ComparisonGraph
    support : numpy.ndarray
        Bool mask (m,) or row indices of S.
    """
    if g.m > max_rows:
        raise ValueError(f"identifiability: m = {g.m} exceeds max_rows = {max_rows} (dense m×m P)")
    S = np.zeros(g.m, dtype=bool)
    S[np.asarray(support)] = True
    s = int(S.sum())
    solver = LaplacianSolver.from_graph(g)
    Lp = solver.solve(np.eye(g.n))
    B = g.X.multiply(np.sqrt(g.w)[:, None]).toarray()
    H = B @ Lp @ B.T
    P = np.eye(g.m) - H
    rho = float(np.abs(H).max())
    if s == 0:
        return Identifiability(np.inf, 0.0, 1.0, float(np.diag(P).max()), rho, True, True, True)
    Pss = P[np.ix_(S, S)]
    c_min = float(np.linalg.eigvalsh(Pss)[0])
    if s == g.m:
        return Identifiability(c_min, 0.0, 1.0, 0.0, rho, c_min > 1e-12, True, rho < 1 / (2 * s))
    M = P[np.ix_(~S, S)] @ np.linalg.pinv(Pss)
    irr = float(np.abs(M).sum(axis=1).max())
    mu = float(np.diag(P)[~S].max())
    return Identifiability(c_min, irr, 1.0 - irr, mu, rho, c_min > 1e-12, irr < 1.0, rho < 1 / (2 * s))


# ---------------------------------------------------------------------------------------------------
# Result tables and high-level fits (§4.4 outputs, §8.24 table shapes)
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankingResult:
    """Plain HodgeRank (least squares) fit.

    Attributes
    ----------
    ranking : pandas.DataFrame
        ``item`` (str), ``score`` (float64, centred per component), ``rank`` (int64, 1 = best within the
        component), ``component`` (int64), ``n_comparisons`` (int64 rows involving the item).
    residuals : pandas.DataFrame
        ``row_id, annotator, item_a, item_b, outcome, weight, fitted, residual, undetectable`` with
        ``fitted = score_a − score_b`` and ``residual = outcome − fitted`` (input orientation).
    diagnostics : pandas.DataFrame
        Per-component Hodge diagnostics (see :func:`hodge_decomposition`).
    graph : GraphReport
    params : dict
    """

    ranking: pd.DataFrame
    residuals: pd.DataFrame
    diagnostics: pd.DataFrame
    graph: GraphReport
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RobustRankingResult:
    """Outlier-robust HodgeRank fit (HLASSO or LBI).

    Attributes
    ----------
    method : str
        ``'hlasso'`` or ``'lbi'``.
    ranking : pandas.DataFrame
        ``item, score, rank, component, n_comparisons``; ``score`` is the debiased score (LS refit without
        the flagged rows) if ``debias`` else the raw robust score.
    scores : pandas.DataFrame
        ``item, component, score_ls, score_robust, score_debiased`` (all centred per component).
    outliers : pandas.DataFrame
        One row per input comparison: ``row_id, annotator, item_a, item_b, outcome, weight, gamma,
        entry_time, entry_sign, path_rank, is_outlier, undetectable, residual``. ``gamma`` is in the input
        orientation (γ > 0: the observed outcome exceeds the model difference); ``entry_time`` is the LBI
        time at which γ became non-zero (HLASSO: ``1/λ_entry``), ``inf`` if never; ``path_rank`` orders
        all rows by outlyingness (1 = first to enter); ``residual = outcome − (score_a − score_b)``.
    annotators : pandas.DataFrame
        ``annotator, n_comparisons, n_outliers, outlier_rate`` (empty when annotators are unknown).
    diagnostics : pandas.DataFrame
        Per-component Hodge diagnostics of the LS fit plus ``n_outliers`` and ``outlier_weight_share``.
    trace : pandas.DataFrame
        Convergence / path trace (LBI: per iteration ``iteration, t, support_size, support_weight,
        residual_norm``; HLASSO: per grid point ``step, lambda, t, support_size, support_weight, n_iter,
        converged``).
    path : pandas.DataFrame
        γ at checkpoints, long and sparse: ``checkpoint, t, row_id, gamma`` (non-zeros only).
    graph : GraphReport
    params : dict
        Run parameters (κ, Δt, stop rule, λ*, t*, …).
    converged : bool
        False when an iteration cap was hit or the stop rule never fired.
    """

    method: str
    ranking: pd.DataFrame
    scores: pd.DataFrame
    outliers: pd.DataFrame
    annotators: pd.DataFrame
    diagnostics: pd.DataFrame
    trace: pd.DataFrame
    path: pd.DataFrame
    graph: GraphReport
    params: dict[str, Any] = field(default_factory=dict)
    converged: bool = True


def _prepare(
    comparisons: pd.DataFrame | ComparisonGraph, items: Sequence[Any] | None, allow_disconnected: bool
) -> tuple[ComparisonGraph, GraphReport]:
    g = comparisons if isinstance(comparisons, ComparisonGraph) else build_comparison_graph(comparisons, items=items)
    rep = _graph_report(g)
    if rep.n_components > 1 and not allow_disconnected:
        raise ValueError(
            "the comparison graph is not connected: "
            + rep.describe()
            + ". Scores are only comparable within a component; pass allow_disconnected=True to rank "
            "every component separately (each item then carries its component id)."
        )
    return g, rep


def _ranking_table(g: ComparisonGraph, theta: np.ndarray) -> pd.DataFrame:
    n_comp = (np.bincount(g.i, minlength=g.n) + np.bincount(g.j, minlength=g.n)).astype(np.int64)
    df = pd.DataFrame(
        {
            "item": _str(g.items),
            "score": np.asarray(theta, dtype=np.float64),
            "component": g.component.astype(np.int64),
            "n_comparisons": n_comp,
        }
    )
    key = np.round(df["score"].to_numpy(), 12)
    df["rank"] = (
        pd.Series(key)
        .groupby(df["component"].to_numpy())
        .rank(method="min", ascending=False)
        .to_numpy()
        .astype(np.int64)
    )
    df = df.sort_values(["component", "rank", "item"], kind="stable").reset_index(drop=True)
    return df[["item", "score", "rank", "component", "n_comparisons"]]


def _str(values: np.ndarray) -> pd.Series:
    """Ids as a nullable pandas string column (stable Arrow ``string`` type, missing → <NA>)."""
    return pd.Series(pd.array(np.asarray(values, dtype=object), dtype="string"))


def _annotator_table(annotator: np.ndarray, is_outlier: np.ndarray) -> pd.DataFrame:
    known = np.array([a is not None for a in annotator], dtype=bool)
    df = pd.DataFrame(
        {"annotator": np.asarray(annotator, dtype=object)[known], "o": is_outlier[known].astype(np.int64)}
    )
    agg = df.groupby("annotator", sort=True)["o"].agg(["size", "sum"]).reset_index()
    out = pd.DataFrame(
        {
            "annotator": _str(agg["annotator"].to_numpy(dtype=object)),
            "n_comparisons": agg["size"].to_numpy(dtype=np.int64),
            "n_outliers": agg["sum"].to_numpy(dtype=np.int64),
        }
    )
    out["outlier_rate"] = out["n_outliers"] / out["n_comparisons"]
    return out


def refit_without(
    g: ComparisonGraph, drop: np.ndarray, theta_ref: np.ndarray, *, solver_method: str = "auto"
) -> np.ndarray:
    """Debiased scores: LS refit on the rows not in ``drop`` ("LASSO+L2", spec §3.3 step 5).

    ``θ = θ_ref + L_keep† X_keepᵀW(y_keep − X_keepθ_ref)``, re-centred per original component. This is the
    LS fit on the kept rows; if dropping rows splits a component, the offsets between the pieces (which
    the kept rows cannot identify) are taken from ``θ_ref``.
    """
    drop = np.asarray(drop, dtype=bool)
    if not drop.any():
        return LaplacianSolver.from_graph(g, method=solver_method).solve(g.divergence(g.y))
    keep = ~drop
    if not keep.any():
        return np.asarray(theta_ref, dtype=float).copy()
    gk = g.subset(keep)
    sk = LaplacianSolver.from_graph(gk, method=solver_method)
    theta = theta_ref + sk.solve(gk.divergence(gk.y - gk.X @ theta_ref))
    return center_per_component(theta, g.component, g.n_components)


def _group_or_identity(g: ComparisonGraph, group_identical: bool) -> tuple[ComparisonGraph, np.ndarray, np.ndarray]:
    if group_identical:
        return group_identical_rows(g)
    return g, np.arange(g.m, dtype=np.int64), np.ones(g.m)


def _row_columns(g: ComparisonGraph) -> dict[str, Any]:
    """The columns that identify each comparison row in the output tables (row id, who, which pair, outcome)."""
    return {
        "row_id": g.row_id.astype(np.int64),
        "annotator": _str(g.annotator),
        "item_a": _str(g.items[g.i]),
        "item_b": _str(g.items[g.j]),
        "outcome": g.y,
        "weight": g.w,
    }


def assemble_robust_result(
    *,
    method: str,
    g: ComparisonGraph,
    rep: GraphReport,
    gf: ComparisonGraph,
    group: np.ndarray,
    sign: np.ndarray,
    theta_ls: np.ndarray,
    theta_robust: np.ndarray,
    gamma_fit: np.ndarray,
    entry_time_fit: np.ndarray,
    order_key_fit: np.ndarray,
    entry_sign_fit: np.ndarray,
    trace: pd.DataFrame,
    checkpoints: Sequence[tuple[int, float, sp.csc_matrix | np.ndarray]],
    params: dict[str, Any],
    converged: bool,
    debias: bool,
    diagnostics: bool,
    solver_method: str = "auto",
) -> RobustRankingResult:
    """Build the output tables of a robust fit from fit-level (possibly grouped) arrays.

    Shared by :func:`fit_hlasso` and :func:`crowdflow.ranking.lbi.fit_lbi`. ``checkpoints`` is a list of
    ``(checkpoint id, t, γ_fit)``; γ values are expanded to rows with the orientation signs.
    """
    flagged_fit = gamma_fit != 0
    theta_deb = refit_without(gf, flagged_fit, theta_robust, solver_method=solver_method) if debias else theta_robust
    score = theta_deb if debias else theta_robust
    gamma = sign * gamma_fit[group]
    is_out = gamma != 0
    undet = undetectable_rows(g)
    fitted = score[g.i] - score[g.j]
    outl = pd.DataFrame(
        {
            **_row_columns(g),
            "gamma": gamma,
            "entry_time": np.asarray(entry_time_fit, dtype=float)[group],
            "entry_sign": (sign * np.asarray(entry_sign_fit, dtype=float)[group]).astype(np.int8),
            "path_rank": _rank_desc(np.asarray(order_key_fit, dtype=float)[group]),
            "is_outlier": is_out,
            "undetectable": undet,
            "residual": g.y - fitted,
        }
    )
    scores = pd.DataFrame(
        {
            "item": _str(g.items),
            "component": g.component.astype(np.int64),
            "score_ls": theta_ls,
            "score_robust": theta_robust,
            "score_debiased": theta_deb,
        }
    )
    if diagnostics:
        diag = hodge_decomposition(g, theta_ls, undetectable=undet).table
    else:
        diag = pd.DataFrame({"component": np.arange(g.n_components, dtype=np.int64)})
    rcomp = g.component[g.i]
    diag["n_outliers"] = np.bincount(rcomp, weights=is_out, minlength=g.n_components).astype(np.int64)
    wc = np.bincount(rcomp, weights=g.w, minlength=g.n_components)
    with np.errstate(invalid="ignore", divide="ignore"):
        diag["outlier_weight_share"] = np.bincount(rcomp, weights=g.w * is_out, minlength=g.n_components) / wc
    frames = []
    for cid, t, gam_c in checkpoints:
        gcol = np.asarray(gam_c.toarray()).ravel() if sp.issparse(gam_c) else np.asarray(gam_c)
        grow = sign * gcol[group]
        nz = np.flatnonzero(grow)
        frames.append(
            pd.DataFrame(
                {
                    "checkpoint": np.full(nz.size, cid, dtype=np.int64),
                    "t": np.full(nz.size, float(t)),
                    "row_id": g.row_id[nz].astype(np.int64),
                    "gamma": grow[nz],
                }
            )
        )
    path = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(
            {
                "checkpoint": pd.Series(dtype=np.int64),
                "t": pd.Series(dtype=float),
                "row_id": pd.Series(dtype=np.int64),
                "gamma": pd.Series(dtype=float),
            }
        )
    )
    params = dict(params)
    params.update(
        n_items=g.n,
        n_rows=g.m,
        n_fit_rows=gf.m,
        n_components=g.n_components,
        n_outliers=int(is_out.sum()),
        outlier_weight=float(g.w[is_out].sum()),
        debias=debias,
    )
    return RobustRankingResult(
        method=method,
        ranking=_ranking_table(g, score),
        scores=scores,
        outliers=outl,
        annotators=_annotator_table(g.annotator, is_out),
        diagnostics=diag,
        trace=trace,
        path=path,
        graph=rep,
        params=params,
        converged=bool(converged),
    )


def fit_hodgerank(
    comparisons: pd.DataFrame | ComparisonGraph,
    *,
    items: Sequence[Any] | None = None,
    allow_disconnected: bool = False,
    solver: Literal["auto", "splu", "cg"] = "auto",
    diagnostics: bool = True,
) -> RankingResult:
    """HodgeRank least-squares ranking with Hodge diagnostics (spec §2).

    ``θ̂ = L†XᵀWy`` per connected component (sum zero inside each component).

    Parameters
    ----------
    comparisons : pandas.DataFrame or ComparisonGraph
        Canonical comparisons (``annotator, item_a, item_b, outcome [, weight]``) or winner form.
    items : sequence, optional
        Item universe (never-compared items become isolated components).
    allow_disconnected : bool
        If False (default) a disconnected graph raises ``ValueError`` (no global rank exists).
    solver : {'auto', 'splu', 'cg'}
        Laplacian solver (see :class:`LaplacianSolver`).
    diagnostics : bool
        Compute the per-component Hodge diagnostics table.

    Returns
    -------
    RankingResult
    """
    g, rep = _prepare(comparisons, items, allow_disconnected)
    sol = LaplacianSolver.from_graph(g, method=solver)
    theta = hodgerank_scores(g, sol)
    undet = undetectable_rows(g)
    if diagnostics:
        diag = hodge_decomposition(g, theta, solver=sol, undetectable=undet).table
    else:
        diag = pd.DataFrame({"component": np.arange(g.n_components, dtype=np.int64)})
    fitted = theta[g.i] - theta[g.j]
    res = pd.DataFrame(
        {
            **_row_columns(g),
            "fitted": fitted,
            "residual": g.y - fitted,
            "undetectable": undet,
        }
    )
    params = {"method": "ls", "solver": sol.method, "n_items": g.n, "n_rows": g.m, "n_components": g.n_components}
    return RankingResult(ranking=_ranking_table(g, theta), residuals=res, diagnostics=diag, graph=rep, params=params)


LambdaRule = Literal["budget", "concomitant", "cv", "fixed", "magnitude"]


def fit_hlasso(
    comparisons: pd.DataFrame | ComparisonGraph,
    *,
    items: Sequence[Any] | None = None,
    allow_disconnected: bool = False,
    lambda_rule: LambdaRule = "budget",
    lam: float | None = None,
    budget: float = 0.05,
    n_lambdas: int = 100,
    lambda_min_ratio: float = 1e-2,
    huber_m: float = HUBER_M,
    scale_a: float = HUBER_A,
    cv_folds: int = 5,
    cv_rescale: Literal["sqrt", "linear"] = "sqrt",
    group_identical: bool = True,
    debias: bool = True,
    seed: int = 0,
    tol: float = 1e-10,
    max_iter: int = 20000,
    solver: Literal["auto", "splu", "cg"] = "auto",
    diagnostics: bool = True,
) -> RobustRankingResult:
    """Outlier detection and robust ranking by HLASSO (spec §3, Algorithm 1).

    1. ``P = I − XL†XᵀW`` as an operator (one Laplacian solve per application);
    2. the LASSO path ``γ̂(λ) = argmin ½‖P(y − γ)‖²_W + λΣw_k|γ_k|`` from ``λ_max`` down (warm starts);
    3. λ* by ``lambda_rule``: ``'budget'`` (flag the first ``budget`` share of the weight along the path,
       including the crossing group; λ* refined by bisection), ``'concomitant'`` (Huber scale, λ* = Mσ̂),
       ``'cv'`` (random-projection CV, dense cycle basis, small m), ``'fixed'`` (``lam``) or
       ``'magnitude'`` (λ = 1 for ±1 data);
    4. outliers ``γ̂_k(λ*) ≠ 0``, robust scores ``θ̂ = L†XᵀW(y − γ̂)`` (= Huber regression);
    5. debiased scores: LS refit without the flagged rows ("LASSO+L2").

    Identical rows are merged first when ``group_identical`` (exactly equivalent, spec §1.3); the CV rule
    then works on the merged problem's cycle space. ``entry_time`` in the outlier table is ``1/λ_entry``.

    Returns
    -------
    RobustRankingResult
    """
    if not 0 < budget < 1:
        raise ValueError(f"budget must be in (0, 1), got {budget}")
    g, rep = _prepare(comparisons, items, allow_disconnected)
    gf, group, sign = _group_or_identity(g, group_identical)
    sol = LaplacianSolver.from_graph(gf, method=solver)
    theta_ls = hodgerank_scores(gf, sol)
    path = hlasso_path(
        gf, n_lambdas=n_lambdas, lambda_min_ratio=lambda_min_ratio, solver=sol, tol=tol, max_iter=max_iter
    )
    params: dict[str, Any] = {
        "method": "hlasso",
        "lambda_rule": lambda_rule,
        "lambda_max": path.lambda_max,
        "n_lambdas": int(path.lambdas.size),
        "lambda_min": float(path.lambdas[-1]),
        "solver": sol.method,
        "group_identical": group_identical,
    }
    converged = bool(path.converged.all())

    def nearest(lmb: float) -> np.ndarray:
        k = int(np.argmin(np.abs(path.lambdas - lmb)))
        return path.gammas[:, k].toarray().ravel()

    if path.lambda_max <= 0:
        fit = LassoFit(0.0, np.zeros(gf.m), theta_ls, 0, True, 0.0)
        logger.info("data are exactly consistent with a global ranking: no outliers")
    elif lambda_rule == "budget":
        fit = _budget_fit(gf, sol, path, budget, tol=tol, max_iter=max_iter)
        params["budget"] = budget
    elif lambda_rule == "concomitant":
        est = huber_concomitant_scale(gf, M=huber_m, a=scale_a, solver=sol, lasso_tol=tol)
        fit = est.fit
        converged &= est.converged
        params.update(sigma=est.sigma, huber_m=huber_m, scale_a=scale_a, scale_iterations=est.n_iter)
    elif lambda_rule == "cv":
        lam_cv, cvt = cv_lambda(gf, path.lambdas, folds=cv_folds, seed=seed, rescale=cv_rescale)
        fit = hlasso(gf, lam_cv, solver=sol, gamma0=nearest(lam_cv), tol=tol, max_iter=max_iter)
        params.update(cv_folds=cv_folds, cv_rescale=cv_rescale, cv_min_error=float(cvt["cv_error"].min()))
    elif lambda_rule in ("fixed", "magnitude"):
        lam_f = 1.0 if lambda_rule == "magnitude" else lam
        if lam_f is None or not lam_f > 0:
            raise ValueError("lambda_rule='fixed' needs lam > 0")
        fit = hlasso(gf, lam_f, solver=sol, gamma0=nearest(lam_f), tol=tol, max_iter=max_iter)
    else:
        raise ValueError(f"unknown lambda_rule {lambda_rule!r}")
    converged &= fit.converged
    params["lambda_star"] = fit.lam
    logger.info(
        "HLASSO (%s rule): lambda*=%.4g (lambda_max=%.4g), %d of %d fitted rows flagged",
        lambda_rule,
        fit.lam,
        path.lambda_max,
        int(np.count_nonzero(fit.gamma)),
        gf.m,
    )
    entry_time = np.where(np.isnan(path.entry_lambda), np.inf, _inv(np.nan_to_num(path.entry_lambda, nan=1.0)))
    trace = pd.DataFrame(
        {
            "step": np.arange(path.lambdas.size, dtype=np.int64),
            "lambda": path.lambdas,
            "t": _inv(path.lambdas),
            "support_size": path.support_size,
            "support_weight": path.support_weight,
            "n_iter": path.n_iter,
            "converged": path.converged,
        }
    )
    cps: list[tuple[int, float, sp.csc_matrix | np.ndarray]] = [
        (k, float(_inv(path.lambdas[k])), path.gammas[:, k]) for k in range(path.lambdas.size)
    ]
    cps.append((path.lambdas.size, 1.0 / fit.lam if fit.lam > 0 else np.inf, fit.gamma))
    return assemble_robust_result(
        method="hlasso",
        g=g,
        rep=rep,
        gf=gf,
        group=group,
        sign=sign,
        theta_ls=theta_ls,
        theta_robust=fit.theta,
        gamma_fit=fit.gamma,
        entry_time_fit=entry_time,
        order_key_fit=path.order_key,
        entry_sign_fit=path.entry_sign,
        trace=trace,
        checkpoints=cps,
        params=params,
        converged=converged,
        debias=debias,
        diagnostics=diagnostics,
        solver_method=solver,
    )


def _inv(x: np.ndarray | float) -> np.ndarray:
    """``1/x`` with ``1/0 = inf`` (time ↔ 1/λ, spec §4)."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(x > 0, 1.0 / np.where(x > 0, x, 1.0), np.inf)
