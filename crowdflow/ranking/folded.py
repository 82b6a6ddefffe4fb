"""HodgeRank least squares and its Hodge diagnostics from folded per-pair sums (``ranking.incremental``, #38).

A folded run (:mod:`crowdflow.ranking.increments`) holds, per distinct unordered pair ``e = {lo, hi}`` (``lo`` first
in text order), the row count ``n_e``, ``W_e = Σ w``, ``S_e = Σ w·y`` and ``Q_e = Σ w·y²`` with every outcome
oriented ``lo → hi``. This module fits and describes the comparisons from those sums alone
(docs/methods/ranking.md §2.5):

- **Scores.** ``θ̂ = L†b`` with ``L = Σ_e W_e (e_lo − e_hi)(e_lo − e_hi)ᵀ`` and ``b = Σ_e S_e (e_lo − e_hi)``: the
  normal equations of the rows. ``b`` is summed from ``S_e`` directly (never ``W_e·(S_e/W_e)``, which is one
  rounding off), so with integer outcomes and weights ``L`` and ``b`` hold the same numbers as a fit over the rows
  and the same solver returns the same bits. The ``ranking`` table (``n_comparisons`` counted in rows) is then a
  full run's, bit for bit.
- **Per-pair residuals** (``pair_residuals``, O(pairs), replacing the O(rows) ``residuals`` of a full run):
  ``fitted_e = θ_lo − θ_hi`` and ``rss_e = Σ_k w_k (y_k − fitted_e)² = W_e (Ȳ_e − fitted_e)² + B_e`` with the
  within-pair (bi-cycle) part ``B_e = Q_e − S_e²/W_e`` (0 for a pair of one row); every row's residual is
  ``y_k − fitted_e``.
- **Diagnostics** (``components``): the Hodge decomposition of the per-pair graph (one row per pair, outcome
  ``Ȳ_e = S_e/W_e``, weight ``W_e``) has the same gradient, curl and harmonic flows as the rows' (they are functions
  of ``Ȳ`` and ``W``); the row sums a full run reports are restored from the sums: ``n_rows = Σ n_e``,
  ``Σ w·y² = Σ Q_e``, ``Σ w·r² = Σ rss_e``, the bi-cycle norm ``Σ B_e``, the curl norm ``Σ W_e curl_e²``. Integer
  columns and the triangle counts are exact; the shares agree to rounding (~1e-12 relative; another summation
  order). The row quantiles of ``|r|`` (``max_abs_residual``, ``residual_q50/q90/q99``) are not functions of the
  sums: they are NaN with a ``missing_reason``. ``n_undetectable`` counts the rows of bridge pairs whose rows all
  have one outcome (``Q_e·W_e = S_e²``: exact for integer sums, to 1e-12 relative otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.contracts.errors import DegenerateInput
from crowdflow.contracts.missing import MISSING_REASON, explain_missing
from crowdflow.labels import natural_order
from crowdflow.ranking.graph import ComparisonGraph, _graph_report
from crowdflow.ranking.hodge import explain_diagnostics, hodge_decomposition
from crowdflow.ranking.hodge_kernels import laplacian_bridges
from crowdflow.ranking.least_squares import LaplacianSolver
from crowdflow.ranking.options import RankingOptions
from crowdflow.ranking.rows import divergence
from crowdflow.ranking.tables import _ranking_table
from crowdflow.ranking.types import GraphReport

__all__ = ["ROW_QUANTILES", "FoldedFit", "fit_pairs", "pair_graph"]

#: the diagnostics columns a folded run cannot reproduce (quantiles of per-row residuals)
ROW_QUANTILES = ("max_abs_residual", "residual_q50", "residual_q90", "residual_q99")
_NOT_FOLDED = "per-row residual quantiles need the rows and a folded run keeps per-pair sums (see pair_residuals)"
#: relative tolerance of "every row of the pair has one outcome" when the sums are not integers
_SAME_OUTCOME_RTOL = 1e-12


@dataclass(frozen=True)
class FoldedFit:
    """A least-squares fit on folded pair sums (:func:`fit_pairs`).

    Attributes
    ----------
    ranking : pandas.DataFrame
        ``item, score, rank, component, n_comparisons`` (a full run's table).
    components : pandas.DataFrame
        Per-component Hodge diagnostics restored from the sums (module docstring); empty of diagnostics columns when
        ``diagnostics`` is off, as a full run's.
    pair_residuals : pandas.DataFrame
        ``lo, hi, component, n, w, s, q, fitted, rss`` per pair.
    graph : GraphReport
    params : dict
    """

    ranking: pd.DataFrame
    components: pd.DataFrame
    pair_residuals: pd.DataFrame
    graph: GraphReport
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """The folded run's output tables: ``ranking``, ``components``, ``pair_residuals``."""
        return {"ranking": self.ranking, "components": self.components, "pair_residuals": self.pair_residuals}


def pair_graph(table: pd.DataFrame) -> tuple[ComparisonGraph, np.ndarray]:
    """The per-pair :class:`ComparisonGraph` of a fold (rows = pairs, ``Ȳ_e = S_e/W_e``, weight ``W_e``) and each
    item's row count; items in natural order, as a graph over the rows numbers them."""
    lo = table["lo"].astype(str).to_numpy(dtype=object)
    hi = table["hi"].astype(str).to_numpy(dtype=object)
    distinct = np.unique(np.concatenate([lo, hi]).astype(str)).astype(object)
    items = distinct[natural_order(distinct)].astype(str).astype(object)
    code = pd.Index(items.astype(str))
    i, j = code.get_indexer(lo.astype(str)), code.get_indexer(hi.astype(str))
    w = table["w"].to_numpy(dtype=np.float64)
    y = table["s"].to_numpy(dtype=np.float64) / w
    n = table["n"].to_numpy(dtype=np.int64)
    n_comp = np.bincount(i, weights=n, minlength=items.size) + np.bincount(j, weights=n, minlength=items.size)
    return ComparisonGraph.from_arrays(i, j, y, w, n=items.size, items=items), n_comp.astype(np.int64)


def fit_pairs(
    table: pd.DataFrame,
    options: RankingOptions | None = None,
    graph: tuple[ComparisonGraph, np.ndarray] | None = None,
) -> FoldedFit:
    """HodgeRank least squares (``outliers: none``) and its diagnostics on folded pair sums (module docstring).

    Parameters
    ----------
    table : pandas.DataFrame
        ``lo, hi, n, w, s, q`` per pair (:data:`crowdflow.ranking.increments.PAIR_COLUMNS`).
    options : RankingOptions, optional
        Uses ``allow_disconnected``, ``solver`` and ``diagnostics``.
    graph : tuple, optional
        :func:`pair_graph` of ``table`` when the caller built it already (the flow's graph check).

    Raises
    ------
    DegenerateInput
        No pair at all, or a disconnected graph with ``allow_disconnected=False``.
    """
    o = RankingOptions.resolve(options)
    if len(table) == 0:
        raise DegenerateInput("no comparison rows: every file of the input is empty", reason="empty")
    g, n_comp = graph if graph is not None else pair_graph(table)
    rep = _graph_report(g)
    if rep.n_components > 1 and not o.allow_disconnected:
        raise DegenerateInput(
            "the comparison graph is not connected: " + rep.describe() + ". Scores are only comparable within a "
            "component; set the option allow_disconnected (the default) to rank every component separately.",
            reason="disconnected",
        )
    n, w, s, q = (table[c].to_numpy(dtype=np.int64 if c == "n" else np.float64) for c in ("n", "w", "s", "q"))
    sol = LaplacianSolver.from_graph(g, method=o.solver)
    theta = sol.solve(divergence(g.i, g.j, np.ones(g.m), s, g.n))  # Σ S_e per item: exact for integer sums
    fitted = theta[g.i] - theta[g.j]
    bic = np.where(n > 1, np.maximum(q - s * s / w, 0.0), 0.0)  # within-pair part of the residual sum of squares
    rss = w * (g.y - fitted) ** 2 + bic
    comp = g.component[g.i]
    pairs = table.reset_index(drop=True).assign(component=comp.astype(np.int64), fitted=fitted, rss=rss)
    pairs = pairs[["lo", "hi", "component", "n", "w", "s", "q", "fitted", "rss"]]
    components = _diagnostics(g, theta, sol, n, w, s, q, bic, rss) if o.diagnostics else _bare(g)
    params = {
        "method": "ls",
        "solver": sol.method,
        "n_items": g.n,
        "n_rows": int(n.sum()),
        "n_pairs": g.m,
        "n_components": g.n_components,
        "folded": True,
    }
    return FoldedFit(_ranking_table(g, theta, n_comp), components, pairs, rep, params)


def _bare(g: ComparisonGraph) -> pd.DataFrame:
    return pd.DataFrame({"component": np.arange(g.n_components, dtype=np.int64)})


def _same_outcome(n: np.ndarray, w: np.ndarray, s: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per pair: every row has the same oriented outcome (weighted variance 0, ``Q·W = S²``)."""
    qw, ss = q * w, s * s
    exact = np.all(np.abs(qw) < 2.0**53) and np.all(qw == np.rint(qw)) and np.all(ss == np.rint(ss))
    same = qw == ss if exact else np.abs(qw - ss) <= _SAME_OUTCOME_RTOL * np.maximum(np.abs(qw), np.abs(ss))
    return np.asarray((n == 1) | same, dtype=bool)


def _diagnostics(
    g: ComparisonGraph,
    theta: np.ndarray,
    sol: LaplacianSolver,
    n: np.ndarray,
    w: np.ndarray,
    s: np.ndarray,
    q: np.ndarray,
    bic: np.ndarray,
    rss: np.ndarray,
) -> pd.DataFrame:
    """The per-component diagnostics of a full run, from the per-pair graph and the sums (module docstring)."""
    bridge = laplacian_bridges(g.L, g.n_edges)[g.edge] if g.m else np.zeros(0, dtype=bool)
    undet = bridge & _same_outcome(n, w, s, q)
    hd = hodge_decomposition(g, theta, solver=sol, undetectable=undet)
    t = hd.table.drop(columns=[MISSING_REASON]).copy()
    C, comp = g.n_components, g.component[g.i]

    def per_comp(v: np.ndarray) -> np.ndarray:
        return np.bincount(comp, weights=v, minlength=C)

    n_rows = per_comp(n.astype(np.float64)).astype(np.int64)
    ynorm = per_comp(q)
    with np.errstate(invalid="ignore", divide="ignore"):
        den = np.where(ynorm > 0, ynorm, np.nan)
        t["total_inconsistency"] = per_comp(rss) / den
        t["bicycle_share"] = per_comp(bic) / den
        if hd.curl_split:
            t["curl_share"] = per_comp(w * hd.curl**2) / den
            t["harmonic_share"] = per_comp(w * hd.harmonic**2) / den
    t["n_rows"] = n_rows
    t["weight"] = per_comp(w)
    t["cycle_dim"] = (n_rows - t["n_items"].to_numpy() + 1).astype(np.int64)
    for c in ROW_QUANTILES:
        t[c] = np.nan
    t["n_undetectable"] = per_comp(np.where(undet, n, 0).astype(np.float64)).astype(np.int64)
    explain_diagnostics(t, True, ynorm == 0, hd.n_triangles >= 0, hd.curl_split)
    explain_missing(t, list(ROW_QUANTILES), _NOT_FOLDED)
    return t
