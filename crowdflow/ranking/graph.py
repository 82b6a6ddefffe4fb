"""The comparison graph: item ids, the sparse incidence ``X`` and Laplacian ``L``, components, grouping.

Rows ``k = (i, j, y_k, w_k)`` become the incidence ``X`` (m×n, row k = ``e_i − e_j``) and the weighted
Laplacian ``L = XᵀWX``; the connected components of the item graph are found once, numbered by their
smallest item. :class:`ComparisonGraph` carries these operators plus the distinct compared pairs
(``edge_u < edge_v``) with their summed weights. :func:`group_identical_rows` merges rows with the same
pair and oriented outcome into one weighted row, which leaves θ and the per-row γ of every method
unchanged (weights behave as replication counts). :func:`check_comparison_graph` reports the
components before any fit.

See docs/methods/ranking.md §1.3 (operators, weights, grouping) and §5.1 (graph checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse import csgraph

from crowdflow._typing import SparseMatrix
from crowdflow.contracts.comparisons import (
    canonical_comparisons,
    comparison_layout,
    describe_positions,
    missing_ids_error,
    outcomes_and_weights,
    self_comparison_error,
)
from crowdflow.labels import natural_order
from crowdflow.ranking.encoding import encode_ids, encode_pair_ids
from crowdflow.ranking.pairs import laplacian_csr, pair_table
from crowdflow.ranking.rows import divergence, row_summary
from crowdflow.ranking.types import GraphReport, _str

__all__ = [
    "ComparisonGraph",
    "build_comparison_graph",
    "check_comparison_graph",
    "group_identical_rows",
    "incidence_matrix",
    "laplacian",
]


def incidence_matrix(i: np.ndarray, j: np.ndarray, n: int) -> sp.csr_matrix:
    """Gradient / incidence operator ``X`` (m×n CSR): row k is ``e_{i_k} − e_{j_k}`` (docs/methods/ranking.md §1.3)."""
    m = int(np.asarray(i).size)
    rows = np.repeat(np.arange(m, dtype=np.int64), 2)
    cols = np.column_stack([i, j]).ravel()
    data = np.tile(np.array([1.0, -1.0]), m)
    indptr = np.arange(0, 2 * m + 1, 2, dtype=np.int64)
    del rows
    return sp.csr_matrix((data, cols.astype(np.int64), indptr), shape=(m, n))


def laplacian(X: SparseMatrix, w: np.ndarray | None = None) -> sp.csr_matrix:
    """Weighted graph Laplacian ``L = XᵀWX`` (n×n, sparse, zero row sums; docs/methods/ranking.md §2.1)."""
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
    """Distinct unordered pairs ``u < v`` in (u, v) order, each row's pair index and the summed weights.

    The sort-based reference of :func:`crowdflow.ranking.pairs.pair_table`.
    """
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
    """CSR Laplacian ``D − A`` with sorted indices, assembled without a COO sort (the reference of
    :func:`crowdflow.ranking.pairs.laplacian_csr`).

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
    """Canonicalised comparisons with their sparse operators (docs/methods/ranking.md §1.3).

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
    has_annotator : bool
        False when the graph was built without annotators (``annotator`` is all ``None``): the output tables then
        need not read m Python objects to find that out.
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
    has_annotator: bool = True

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
        """Dimension of the cycle space ``l = m − n + c`` (docs/methods/ranking.md §1.1)."""
        return self.m - self.n + self.n_components

    @cached_property
    def X(self) -> sp.csr_matrix:  # noqa: N802 - the paper's name
        """(m×n) incidence ``X`` (CSR), built on first access (the LS fit does not need it)."""
        return incidence_matrix(self.i, self.j, self.n)

    @cached_property
    def XT(self) -> sp.csr_matrix:  # noqa: N802 - the paper's name
        """``Xᵀ`` as CSR, built on first access."""
        return sp.csr_matrix(self.X.T)

    def gradient(self, theta: np.ndarray) -> np.ndarray:
        """``Xθ`` (length m), i.e. ``θ_i − θ_j`` per row."""
        theta = np.asarray(theta)
        if theta.ndim == 1:
            return cast(np.ndarray, theta[self.i] - theta[self.j])
        return cast(np.ndarray, self.X @ theta)

    def divergence(self, v: np.ndarray) -> np.ndarray:
        """``XᵀWv`` (length n): ``bincount(i, w·v) − bincount(j, w·v)`` (no sparse matrix needed)."""
        v = np.asarray(v, dtype=np.float64)
        if v.ndim != 1:
            return cast(np.ndarray, self.XT @ (self.w[:, None] * v))
        # one compiled pass; the same sums in the same order as bincount(i, w·v) − bincount(j, w·v)
        return divergence(self.i, self.j, self.w, v, self.n)

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
        if items is not None:
            items = np.asarray(items, dtype=object)
            n = items.size if n is None else n
        if n is None:
            n = int(max(i.max(initial=-1), j.max(initial=-1)) + 1)
        if items is None:
            items = np.array([str(k) for k in range(n)], dtype=object)
        if items.size != n:
            raise ValueError(f"items has {items.size} ids but n = {n}")
        # one compiled pass checks the rows and gives the orientation and degrees (crowdflow.ranking.rows); only
        # when a row is bad do the checks below run, to name the problem
        ok, sign, deg = row_summary(i, j, y, w, n)
        if not ok:
            _check_rows(i, j, y, w, n)
        # compiled passes (crowdflow.ranking.pairs); _unique_edges and _laplacian_from_edges are their references
        edge, edge_u, edge_v, edge_weight = pair_table(i, j, w, n)
        L = laplacian_csr(edge_u, edge_v, edge_weight, deg, n)
        # L is symmetric, so its strongly connected components are the connected components; the
        # 'strong' traversal needs no transposed copy of the graph (the undirected one does)
        n_comp, labels = csgraph.connected_components(L, directed=True, connection="strong")
        labels = _relabel_by_min(labels.astype(np.int64), n_comp)
        if row_id is None:
            row_id = np.arange(m, dtype=np.int64)
        has_annotator = annotator is not None
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
            has_annotator=has_annotator,
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


def _check_rows(i: np.ndarray, j: np.ndarray, y: np.ndarray, w: np.ndarray, n: int) -> None:
    """Raise the error of the first problem of the rows (the reference checks of :func:`rows.row_summary`)."""
    m = y.size
    if m and (not np.all(np.isfinite(y))):
        raise ValueError("y must be finite")
    if m and (not np.all(np.isfinite(w)) or np.any(w <= 0)):
        raise ValueError("weights must be finite and > 0")
    if m and (i.min() < 0 or j.min() < 0 or i.max() >= n or j.max() >= n):
        raise ValueError("item index out of range")
    if np.any(i == j):
        raise ValueError(f"self-comparisons: {describe_positions(i == j)}")
    raise AssertionError("row_summary found a bad row that the reference checks accept")  # pragma: no cover


def _relabel_by_min(labels: np.ndarray, n_comp: int) -> np.ndarray:
    """Renumber component labels in order of each component's smallest node id."""
    first = np.full(n_comp, labels.size, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(labels.size, dtype=np.int64))
    order = np.argsort(first, kind="stable")
    new = np.empty(n_comp, dtype=np.int64)
    new[order] = np.arange(n_comp, dtype=np.int64)
    return cast(np.ndarray, new[labels])


def build_comparison_graph(comparisons: pd.DataFrame, *, items: Sequence[Any] | None = None) -> ComparisonGraph:
    """Canonicalise a comparison table and build ``X``, ``L`` and the components (docs/methods/ranking.md §1).

    Parameters
    ----------
    comparisons : pandas.DataFrame
        See :func:`canonical_comparisons` for the accepted layouts.
    items : sequence, optional
        Full item universe; listed items that are never compared become isolated (singleton)
        components (docs/methods/ranking.md §1.2).

    Returns
    -------
    ComparisonGraph
        Internal item ids follow the natural sort of the string ids.
    """
    df = comparison_layout(comparisons)
    # one hash pass per id column straight to integer codes (crowdflow.ranking.encoding), the distinct ids
    # alone written as text and natural-sorted: no Python object or text copy per row
    codes_a, codes_b, universe = encode_pair_ids(df["item_a"], df["item_b"])
    for col, codes in (("item_a", codes_a), ("item_b", codes_b)):
        if codes.min(initial=0) < 0:
            raise missing_ids_error(col, codes < 0)
    i, j, ids = _natural_codes(codes_a, codes_b, universe, items)
    same = i == j
    if same.any():
        raise self_comparison_error(same, ids[i[int(np.flatnonzero(same)[0])]])
    y, w = outcomes_and_weights(df)
    m = y.size
    if "annotator" in df.columns:
        ann_codes, ann_text = encode_ids(df["annotator"])
        ann_table = np.empty(ann_text.size + 1, dtype=object)  # the last slot (code -1: missing) stays None
        ann_table[:-1] = ann_text
        annotator: np.ndarray | None = ann_table[ann_codes]
    else:
        annotator = None  # from_arrays fills None and records that there are no annotators
    return ComparisonGraph.from_arrays(
        i, j, y, w, n=ids.size, items=ids, row_id=np.arange(m, dtype=np.int64), annotator=annotator
    )


def _natural_codes(
    codes_a: np.ndarray, codes_b: np.ndarray, universe: np.ndarray, items: Sequence[Any] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes into ``universe`` (+ the extra ``items``) → internal ids in the natural order of the ids, and the ids."""
    if items is not None:
        extra = pd.Series(list(items), dtype=object)
        if extra.isna().any():
            raise ValueError("items: the item universe contains missing ids")
        known = set(universe.tolist())
        more = [x for x in pd.unique(extra.astype(str).to_numpy(dtype=object)) if x not in known]
        universe = np.concatenate([universe, np.asarray(more, dtype=object)])
    order = natural_order(universe)
    position = np.empty(universe.size, dtype=np.int64)
    position[order] = np.arange(universe.size, dtype=np.int64)
    # in place (the codes are the caller's own fresh arrays, all in range: 'clip' only skips numpy's buffering)
    i = np.take(position, codes_a, out=codes_a, mode="clip")
    j = np.take(position, codes_b, out=codes_b, mode="clip")
    return i, j, universe[order]


def _build_comparison_graph_reference(
    comparisons: pd.DataFrame, *, items: Sequence[Any] | None = None
) -> ComparisonGraph:
    """:func:`build_comparison_graph` by definition: canonical text columns, one ``pandas.factorize`` of the text.

    The reference the id encoding of :func:`build_comparison_graph` is tested against.
    """
    df = canonical_comparisons(comparisons)
    m = len(df)
    codes, uniques = pd.factorize(pd.concat([df["item_a"], df["item_b"]], ignore_index=True))
    codes = np.asarray(codes, dtype=np.int64)
    i, j, ids = _natural_codes(codes[:m], codes[m:], np.asarray(uniques, dtype=object), items)
    ann_codes, ann_uniques = pd.factorize(df["annotator"])
    ann_table = np.empty(len(ann_uniques) + 1, dtype=object)
    ann_table[:-1] = np.asarray(ann_uniques, dtype=object)
    return ComparisonGraph.from_arrays(
        i,
        j,
        df["outcome"].to_numpy(),
        df["weight"].to_numpy(),
        n=ids.size,
        items=ids,
        row_id=df["row_id"].to_numpy(),
        annotator=ann_table[ann_codes],
    )


def group_identical_rows(g: ComparisonGraph) -> tuple[ComparisonGraph, np.ndarray, np.ndarray]:
    """Merge rows with identical (pair, oriented outcome) into weighted rows (docs/methods/ranking.md §1.3).

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
    """Connectivity checks of the comparison graph before any fit (docs/methods/ranking.md §2.1, §5.1).

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
