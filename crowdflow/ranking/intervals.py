"""Standard errors and intervals of least-squares scores: the weighted Laplacian's pseudo-inverse, per component.

For the comparisons a fit kept, the weighted least-squares score of a component has covariance σ̂² L⁺, where L is
the component's weighted comparison Laplacian (docs/methods/ranking.md §2); the interval of an item is
score ± z·σ̂·√(L⁺)_ii. Used by the run report's interval figure; usable on any ranking output table.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from crowdflow.contracts.missing import explain_missing

__all__ = ["score_intervals"]


def score_intervals(
    ranking: pd.DataFrame, rows: pd.DataFrame | None, items: list[str] | None = None, z: float = 1.96
) -> pd.DataFrame:
    """Normal-theory least-squares standard errors and intervals of the (centred) item scores.

    For the comparisons kept in the fit (``is_outlier`` False when that column exists), with weights
    ``w`` and residuals ``r = outcome − (score_a − score_b)``, the weighted least-squares score of a
    component with ``n`` items has covariance ``σ̂² L⁺``, where ``L = Σ w (e_a − e_b)(e_a − e_b)ᵀ`` is
    the weighted graph Laplacian of the component and ``σ̂² = Σ w r² / (m − n + 1)``. The interval is
    ``score ± z·σ̂·√(L⁺)_ii``. It assumes independent, equal-variance noise and ignores the uncertainty of
    the outlier selection, so it is a lower bound on the real uncertainty of a robust fit.

    ``(L⁺)_ii`` is computed from one sparse LU factorisation of the grounded Laplacian per component:
    ``x = L⁺ e_i`` solves ``L x = e_i − 1/n`` with ``Σ x = 0``.

    Parameters
    ----------
    ranking : DataFrame
        ``item, score, component``.
    rows : DataFrame or None
        Comparison rows with ``item_a, item_b, residual`` (optional ``weight``, ``is_outlier``): the
        ``outliers`` or ``residuals`` table of a ranking run. None gives NaN intervals.
    items : list of str, optional
        Only these items (default: all).
    z : float
        Normal quantile (1.96: 95 %).

    Returns
    -------
    DataFrame
        ``item, score, component, se, lower, upper, sigma, dof``.
    """
    r = ranking if items is None else ranking[ranking["item"].astype(str).isin(items)]
    res = r[["item", "score", "component"]].copy()
    res["item"] = res["item"].astype(str)
    res["se"] = np.nan
    res["sigma"] = np.nan
    res["dof"] = 0
    cols = ["se", "sigma", "lower", "upper"]
    if rows is None or rows.empty or "residual" not in rows:
        res["lower"] = np.nan
        res["upper"] = np.nan
        return explain_missing(res.reset_index(drop=True), cols, "no residuals to estimate the noise from")
    keep = ~rows["is_outlier"].to_numpy(dtype=bool) if "is_outlier" in rows else np.ones(len(rows), bool)
    kept = rows[keep]
    comp_of = dict(zip(ranking["item"].astype(str), ranking["component"].astype(int), strict=True))
    a = kept["item_a"].astype(str).to_numpy()
    b = kept["item_b"].astype(str).to_numpy()
    w = kept["weight"].to_numpy(dtype=float) if "weight" in kept else np.ones(len(kept))
    resid = kept["residual"].to_numpy(dtype=float)
    row_comp = np.array([comp_of.get(x, -1) for x in a], dtype=np.int64)
    why: dict[object, str] = {}
    for comp, idx in res.groupby("component").groups.items():
        members = ranking.loc[ranking["component"] == comp, "item"].astype(str).to_numpy()
        n = len(members)
        sel = row_comp == comp
        m = int(sel.sum())
        dof = m - n + 1
        if n < 2 or dof <= 0:
            why[comp] = "single-item component" if n < 2 else "no cycle in the kept comparisons (no residual dof)"
            continue
        pos = {it: k for k, it in enumerate(members)}
        ia = np.array([pos[x] for x in a[sel]])
        ib = np.array([pos[x] for x in b[sel]])
        ws = w[sel]
        sigma2 = float(np.sum(ws * resid[sel] ** 2) / dof)
        rows_idx = np.concatenate([ia, ib, ia, ib])
        cols_idx = np.concatenate([ia, ib, ib, ia])
        vals = np.concatenate([ws, ws, -ws, -ws])
        L = sp.csc_matrix((vals, (rows_idx, cols_idx)), shape=(n, n))
        grounded = L[1:, 1:].tocsc()
        try:
            lu = splu(grounded)
        except RuntimeError:  # singular: the kept rows leave the component disconnected
            why[comp] = "the kept comparisons leave the component disconnected"
            continue
        wanted = res.loc[idx, "item"].to_numpy()
        rhs = np.full((n, len(wanted)), -1.0 / n)
        for j, it in enumerate(wanted):
            rhs[pos[it], j] += 1.0
        sol = np.zeros((n, len(wanted)))
        sol[1:] = lu.solve(rhs[1:])
        sol -= sol.mean(axis=0, keepdims=True)
        diag = np.array([sol[pos[it], j] for j, it in enumerate(wanted)])
        res.loc[idx, "se"] = np.sqrt(sigma2 * np.maximum(diag, 0.0))
        res.loc[idx, "sigma"] = math.sqrt(sigma2)
        res.loc[idx, "dof"] = dof
    res["lower"] = res["score"] - z * res["se"]
    res["upper"] = res["score"] + z * res["se"]
    res = res.reset_index(drop=True)
    res_comp = res["component"].to_numpy()
    for c, reason in why.items():
        explain_missing(res, cols, reason, where=res_comp == c)
    return res
