"""The plain least-squares baseline of a ranking run: HodgeRank on every comparison, no outlier rule.

The run report puts it beside the robust ranking (docs/methods/ranking.md §2.1): one sparse solve per
connected component of the comparison graph, on the rows the run wrote (its ``outliers`` or ``residuals`` table),
so the report never refits the robust method.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.linalg import splu
from scipy.stats import kendalltau

__all__ = ["BaselineComparison", "compare_with_least_squares", "least_squares_scores"]


def least_squares_scores(ranking: pd.DataFrame, rows: pd.DataFrame) -> pd.Series:
    """Plain weighted least-squares (HodgeRank) scores of the ranked items from every comparison row.

    ``θ̂ = argmin_{Σ_c θ = 0} Σ_k w_k (θ_a − θ_b − y_k)²`` in every component ``c`` of ``ranking``: the grounded
    weighted Laplacian ``L θ = Xᵀ W y`` solved by one sparse LU factorisation per component, then centred.

    Parameters
    ----------
    ranking : DataFrame
        ``item, component`` (the run's ranking table).
    rows : DataFrame
        ``item_a, item_b, outcome`` (optional ``weight``): every comparison row, flagged or not.

    Returns
    -------
    Series
        The score of each item (index: item as text); NaN for an item whose component the rows leave
        disconnected or that has no row.
    """
    items = ranking["item"].astype(str).to_numpy()
    comp = ranking["component"].to_numpy(dtype=np.int64)
    out = pd.Series(np.nan, index=items, dtype=float)
    pos = {it: k for k, it in enumerate(items)}
    a = np.array([pos.get(x, -1) for x in rows["item_a"].astype(str)], dtype=np.int64)
    b = np.array([pos.get(x, -1) for x in rows["item_b"].astype(str)], dtype=np.int64)
    y = pd.to_numeric(rows["outcome"], errors="coerce").to_numpy(dtype=float)
    w = pd.to_numeric(rows["weight"], errors="coerce").to_numpy(dtype=float) if "weight" in rows else np.ones(len(y))
    ok = (a >= 0) & (b >= 0) & (a != b) & np.isfinite(y) & np.isfinite(w) & (w > 0)
    a, b, y, w = a[ok], b[ok], y[ok], w[ok]
    for c in np.unique(comp):
        members = np.flatnonzero(comp == c)
        n = len(members)
        if n < 2:
            out.iloc[members] = 0.0
            continue
        local = np.full(len(items), -1, dtype=np.int64)
        local[members] = np.arange(n)
        sel = (local[a] >= 0) & (local[b] >= 0)
        ia, ib, ws, ys = local[a[sel]], local[b[sel]], w[sel], y[sel]
        lap = sp.csc_matrix(
            (np.concatenate([ws, ws, -ws, -ws]), (np.concatenate([ia, ib, ia, ib]), np.concatenate([ia, ib, ib, ia]))),
            shape=(n, n),
        )
        rhs = np.bincount(ia, weights=ws * ys, minlength=n) - np.bincount(ib, weights=ws * ys, minlength=n)
        try:
            lu = splu(lap[1:, 1:].tocsc())
        except RuntimeError:  # the rows leave the component disconnected: no baseline there
            continue
        theta = np.zeros(n)
        theta[1:] = lu.solve(rhs[1:])
        out.iloc[members] = theta - theta.mean()
    return out


@dataclass(frozen=True)
class BaselineComparison:
    """The robust ranking beside the plain least-squares ranking, on the largest component.

    Attributes
    ----------
    table : DataFrame
        ``item, score, ls_score, rank, ls_rank`` (largest component, robust order).
    tau : float
        Kendall τ-b between the two score vectors.
    k : int
        The size of the top list compared.
    top_overlap : int
        Items in both top-k lists.
    n_rows, n_flagged : int
        Comparison rows, and rows the robust fit flagged (``is_outlier``).
    component : int
        The component compared.
    """

    table: pd.DataFrame
    tau: float
    k: int
    top_overlap: int
    n_rows: int
    n_flagged: int
    component: int


def compare_with_least_squares(ranking: pd.DataFrame, rows: pd.DataFrame) -> BaselineComparison | None:
    """Kendall τ and the top-k overlap of the robust ranking against plain least squares (None: nothing to compare).

    ``k = min(10, ⌊n/2⌋)`` items of the largest component (at least 1).
    """
    if ranking is None or ranking.empty or rows is None or rows.empty or "outcome" not in rows:
        return None
    ls = least_squares_scores(ranking, rows)
    main = int(ranking["component"].value_counts().index[0])
    comp = ranking[ranking["component"] == main][["item", "score"]].copy()
    comp["item"] = comp["item"].astype(str)
    comp["ls_score"] = ls.reindex(comp["item"]).to_numpy()
    comp = comp[comp["ls_score"].notna()]
    if len(comp) < 2:
        return None
    comp = comp.sort_values("score", ascending=False, kind="stable").reset_index(drop=True)
    comp["rank"] = comp["score"].rank(method="min", ascending=False).astype(int)
    comp["ls_rank"] = comp["ls_score"].rank(method="min", ascending=False).astype(int)
    tau = float(kendalltau(comp["score"], comp["ls_score"]).statistic)
    k = max(1, min(10, len(comp) // 2))
    top = set(comp.nlargest(k, "score")["item"])
    ls_top = set(comp.nlargest(k, "ls_score")["item"])
    flagged = int(rows["is_outlier"].astype(bool).sum()) if "is_outlier" in rows else 0
    return BaselineComparison(comp, tau, k, len(top & ls_top), len(rows), flagged, main)
