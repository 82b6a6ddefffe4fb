"""Personalized rankings: low-rank BTL with a smoothed ∞-norm penalty, fitted on the fixed-rank manifold.

Spec: ``personal-rankings-manifold.md`` (J. Dong, K. Yang, Y. Shi, "Ranking from Crowdsourced Pairwise
Comparisons via Smoothed Matrix Manifold Optimization", ShanghaiTech).

Model (spec §1.2): user i prefers item a over item b with probability ``f(X[i,a] − X[i,b])``,
``f(z) = 1/(1 + e^{−z/σ})`` (σ = 0.18), for an unknown users × items score matrix ``X`` of rank ``r``
with bounded entries. Estimator (spec §2.3, problem 𝒫):

    minimize over rank-r X = L Rᵀ:   F(X) = 𝓛(X) + λ · μ log Σ_ij exp(X_ij²/μ),
    𝓛(X) = Σ_{(i,a,b,y)} log(1 + exp(−y (X[i,a] − X[i,b]) / σ)),   λ = r² √K ln K,  K = max(m, n),  μ = 1.

Solvers (the numerics live in :mod:`crowdflow.personal_rankings.solvers`):

* ``method="lbfgs"`` (default): L-BFGS on the factors ``(L, R)`` (spec §2.10.1), started from the
  norm-balanced factors. Measured (``benchmarks/personal_rankings.py``, 1 BLAS thread) as fast or faster
  than the trust region at every size: r=10, d=5: 0.30 s vs 0.40 s at K=200, 1.3 s vs 2.3 s at K=400,
  5.3 s vs 16.9 s at K=1000; K=200, r=15, d=15: 2.0 s vs 2.0 s (gap ≤ 1e-6 at 0.89 s vs 0.95 s). Both
  reach the same objective (≤ 1e-11 relative) and the same error;
* ``method="rtr"``: Riemannian trust region with truncated CG on the two-factor quotient geometry
  (spec §2.5–2.6, the paper's PRTRS); it reaches ``‖grad‖ < 1e-6`` with quadratic final convergence,
  so prefer it when a certified tiny gradient matters.

Public entry point: :func:`fit_personal_rankings` → :class:`PersonalRankingResult`. Also here: the
input encoding (:func:`encode_personal_comparisons`), held-out rank selection (:func:`select_rank`), the
convex nuclear-norm baselines (:func:`fit_convex_baseline` via cvxpy, :func:`fit_convex_spg` in numpy,
spec §4.2/§6), a single global BTL baseline (:func:`fit_global_btl`), the synthetic generator of spec
§4.1 (:func:`synthetic_personal_comparisons`) and the metrics of spec §3.2.

Users / items without any usable comparison (declared via ``users=``/``items=``, or whose rows were all
ties or invalid-and-dropped) are **excluded** from the fit and listed in ``result.excluded`` with a
reason; they never appear in ``personal_rankings``. Items compared only by some users are still scored
for every user: those scores come from the low-rank coupling (spec §1.3).
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import expit

from crowdflow.errors import DegenerateInput
from crowdflow.labels import natural_sort
from crowdflow.personal_rankings.solvers import (
    DEFAULT_BLOCK_ENTRIES,
    PairData,
    SmoothedBTLObjective,
    SolverOutput,
    balance_factors,
    lbfgs_factors,
    paper_init,
    paper_lambda,
    riemannian_trust_region,
)

logger = logging.getLogger(__name__)

__all__ = [
    "ConvexBaselineResult",
    "GlobalBTLResult",
    "PairData",
    "PersonalComparisons",
    "PersonalRankingDiagnostics",
    "PersonalRankingResult",
    "SmoothedBTLObjective",
    "SyntheticPersonalComparisons",
    "borda_scores",
    "encode_personal_comparisons",
    "fit_convex_baseline",
    "fit_convex_spg",
    "fit_global_btl",
    "fit_low_rank_btl",
    "fit_personal_rankings",
    "mean_kendall_tau",
    "paper_init",
    "paper_lambda",
    "rankings_from_scores",
    "relative_error",
    "select_rank",
    "split_holdout",
    "synthetic_personal_comparisons",
]

Method = Literal["lbfgs", "rtr"]
InvalidPolicy = Literal["raise", "drop"]

DEFAULT_SIGMA = 0.18

_ALIASES = {
    # spec §1.1 names
    "user": "annotator",
    "item_i": "item_a",
    "item_j": "item_b",
    # Crowd-Kit pairwise names (worker, left, right, label = winner id)
    "worker": "annotator",
    "left": "item_a",
    "right": "item_b",
    "annotator_id": "annotator",
}


def _rows_message(mask: np.ndarray, limit: int = 5) -> str:
    rows = np.flatnonzero(mask)
    shown = ", ".join(str(int(r)) for r in rows[:limit])
    more = f" (+{rows.size - limit} more)" if rows.size > limit else ""
    return f"{rows.size} row(s) at positions [{shown}]{more}"


# ---------------------------------------------------------------------------------------------------
# §1.1 encoding
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PersonalComparisons:
    """Comparisons encoded for the low-rank BTL fit (spec §1.1).

    Attributes
    ----------
    users, items : numpy.ndarray
        String ids of the fitted users / items; position = dense id (sorted by id, numerically when
        every id is a number).
    pairs : PairData
        Comparisons aggregated per (user, unordered item pair).
    n_rows : int
        Rows in the input table.
    n_used : int
        Rows used (after dropping ties and, with ``on_invalid="drop"``, invalid rows).
    n_ties : int
        Tied rows dropped (ties are not part of the model).
    n_invalid : int
        Invalid rows dropped (0 with ``on_invalid="raise"``).
    invalid : pandas.DataFrame
        ``row, reason`` of every dropped invalid row.
    excluded : pandas.DataFrame
        ``kind`` (``user``/``item``), ``id``, ``reason``: entities that appear in the input (or were
        declared) but have no usable comparison, hence are not fitted.
    """

    users: np.ndarray
    items: np.ndarray
    pairs: PairData
    n_rows: int
    n_used: int
    n_ties: int
    n_invalid: int
    invalid: pd.DataFrame
    excluded: pd.DataFrame

    @property
    def m(self) -> int:
        return int(self.users.size)

    @property
    def n(self) -> int:
        return int(self.items.size)


def _id_series(df: pd.DataFrame, col: str) -> tuple[pd.Series, np.ndarray]:
    s = df[col]
    na = s.isna().to_numpy()
    out = s.astype(str).where(~na, None)
    return out, na


def encode_personal_comparisons(
    comparisons: pd.DataFrame,
    *,
    on_invalid: InvalidPolicy = "raise",
    users: Sequence[Any] | None = None,
    items: Sequence[Any] | None = None,
) -> PersonalComparisons:
    """Validate a comparison table and encode it as dense triples (spec §1.1, design.md §3).

    Accepted layouts (column aliases are renamed when the canonical name is absent):

    * canonical ``annotator, item_a, item_b, outcome [, weight]`` — ``outcome > 0`` means ``item_a``
      preferred, ``< 0`` ``item_b``, ``0`` a tie; graded outcomes are reduced to their sign;
    * spec §1.1 ``user, item_i, item_j, winner`` and winner form ``annotator, item_a, item_b, winner``
      (``winner`` = id of the preferred item or ``'tie'``);
    * Crowd-Kit ``worker, left, right, label`` (``label`` = winner id).

    Each used row becomes ``(user, winner, loser)`` with weight ``weight`` (default 1); repeated rows
    are independent draws and add up (spec §1.1).

    Parameters
    ----------
    comparisons : pandas.DataFrame
        One row per judgement.
    on_invalid : {"raise", "drop"}
        Invalid rows — missing ids, ``item_a == item_b``, a winner that is neither item, a missing or
        non-finite outcome, a weight that is not finite and > 0 — raise ``ValueError`` (default) or are
        dropped, counted and logged (spec §1.1 "reject row / fail the batch, configurable").
    users, items : sequence, optional
        The full universe of ids. Declared ids without usable comparisons are reported in
        ``excluded`` (reason ``"no comparisons in the input"``).

    Returns
    -------
    PersonalComparisons

    Raises
    ------
    ValueError
        Missing columns, invalid rows (with ``on_invalid="raise"``), or no usable comparison at all.
    """
    if not isinstance(comparisons, pd.DataFrame):
        raise ValueError(f"comparisons must be a pandas DataFrame, got {type(comparisons).__name__}")
    if on_invalid not in ("raise", "drop"):
        raise ValueError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
    df = comparisons
    ren = {k: v for k, v in _ALIASES.items() if k in df.columns and v not in df.columns}
    if ren:
        df = df.rename(columns=ren)
    if "outcome" not in df.columns and "winner" not in df.columns and "label" in df.columns:
        df = df.rename(columns={"label": "winner"})
    need = ["annotator", "item_a", "item_b"]
    missing = [c for c in need if c not in df.columns]
    if missing or ("outcome" not in df.columns and "winner" not in df.columns):
        raise ValueError(
            f"comparisons lack required column(s) {missing + ([] if ('outcome' in df.columns or 'winner' in df.columns) else ['outcome or winner'])}"  # noqa: E501
            f" (need annotator, item_a, item_b and outcome or winner); have {list(comparisons.columns)}"
        )
    n_rows = len(df)
    if n_rows == 0:
        raise ValueError("comparisons table is empty: nothing to fit")
    ann, ann_na = _id_series(df, "annotator")
    ia, ia_na = _id_series(df, "item_a")
    ib, ib_na = _id_series(df, "item_b")
    reasons: list[tuple[np.ndarray, str, str]] = [
        (ann_na, "annotator", "missing annotator id"),
        (ia_na, "item_a", "missing item id"),
        (ib_na, "item_b", "missing item id"),
    ]
    same = (~ia_na) & (~ib_na) & (ia.to_numpy(dtype=object) == ib.to_numpy(dtype=object))
    reasons.append((same, "item_a/item_b", "item compared with itself"))
    if "outcome" in df.columns:
        y = pd.to_numeric(df["outcome"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad_y = ~np.isfinite(y)
        reasons.append((bad_y, "outcome", "missing, non-numeric or infinite outcome"))
        y = np.where(bad_y, 0.0, y)
    else:
        win = df["winner"]
        win_na = win.isna().to_numpy()
        w = win.astype(str).to_numpy(dtype=object)
        y = np.full(n_rows, np.nan)
        y[(w == ia.to_numpy(dtype=object)) & ~win_na] = 1.0
        y[(w == ib.to_numpy(dtype=object)) & ~win_na] = -1.0
        tie = np.char.lower(w.astype(str)) == "tie"
        y[tie & ~win_na & np.isnan(y)] = 0.0
        bad_y = np.isnan(y) & ~ia_na & ~ib_na
        reasons.append((bad_y | win_na, "winner", "winner is neither item_a, item_b nor 'tie'"))
        y = np.where(np.isnan(y), 0.0, y)
    if "weight" in df.columns:
        wt = pd.to_numeric(df["weight"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad_w = ~np.isfinite(wt) | (wt <= 0)
        reasons.append((bad_w, "weight", "weight not finite and > 0"))
    else:
        wt = np.ones(n_rows)
    invalid = np.zeros(n_rows, dtype=bool)
    reason = np.full(n_rows, "", dtype=object)
    for mask, col, why in reasons:
        new = mask & ~invalid
        reason[new] = why
        invalid |= mask
        if mask.any() and on_invalid == "raise":
            raise ValueError(f"column '{col}': {_rows_message(mask)}: {why}")
    n_invalid = int(invalid.sum())
    if n_invalid:
        logger.warning(
            "dropped %d invalid comparison row(s): %s", n_invalid, pd.Series(reason[invalid]).value_counts().to_dict()
        )
    tie_rows = (~invalid) & (y == 0)
    n_ties = int(tie_rows.sum())
    if n_ties:
        logger.info("dropped %d tied comparison row(s) (ties are not part of the BTL model)", n_ties)
    used = ~invalid & ~tie_rows
    n_used = int(used.sum())

    ann_a = ann.to_numpy(dtype=object)
    ia_a = ia.to_numpy(dtype=object)
    ib_a = ib.to_numpy(dtype=object)
    fit_users = natural_sort(cast(np.ndarray, pd.unique(ann_a[used]))) if n_used else np.array([], dtype=object)
    fit_items = (
        natural_sort(cast(np.ndarray, pd.unique(np.r_[ia_a[used], ib_a[used]])))
        if n_used
        else np.array([], dtype=object)
    )

    # entities seen or declared but not fitted, with the reason
    def _excluded(
        kind: str, seen: pd.Series, seen_tie: pd.Series, declared: Sequence[Any] | None, fitted: np.ndarray
    ) -> pd.DataFrame:
        universe = set(seen.index)
        if declared is not None:
            universe |= {str(v) for v in declared}
        rows = []
        fit_set = set(fitted)
        for e in universe - fit_set:
            n_seen = int(seen.get(e, 0))
            n_tie = int(seen_tie.get(e, 0))
            if n_seen == 0:
                why = "no comparisons in the input"
            elif n_tie == n_seen:
                why = "only tied comparisons"
            elif n_tie == 0:
                why = "only invalid rows (dropped)"
            else:
                why = "only tied or invalid rows"
            rows.append((kind, e, why))
        return pd.DataFrame(rows, columns=["kind", "id", "reason"])

    ok_u = ~ann_na
    seen_u = pd.Series(ann_a[ok_u]).value_counts()
    seen_u_tie = pd.Series(ann_a[ok_u & tie_rows]).value_counts()
    it_all = np.r_[ia_a[~ia_na], ib_a[~ib_na]]
    it_tie = np.r_[ia_a[tie_rows & ~ia_na], ib_a[tie_rows & ~ib_na]]
    seen_i = pd.Series(it_all).value_counts()
    seen_i_tie = pd.Series(it_tie).value_counts()
    excluded = pd.concat(
        [
            _excluded("user", seen_u, seen_u_tie, users, fit_users),
            _excluded("item", seen_i, seen_i_tie, items, fit_items),
        ],
        ignore_index=True,
    )
    if len(excluded):
        excluded = excluded.sort_values(["kind", "id"], kind="stable").reset_index(drop=True)
        logger.warning("%d user(s)/item(s) have no usable comparison and are excluded from the fit", len(excluded))
    if n_used == 0:
        raise DegenerateInput(
            f"no usable comparison: {n_rows} row(s), {n_ties} tie(s), {n_invalid} invalid row(s); "
            "personal rankings need comparisons with a winner",
            "no_usable_comparison",
        )
    if fit_items.size < 2:
        raise DegenerateInput("need at least two compared items", "too_few_items")
    uix = pd.Index(fit_users).get_indexer(ann_a[used])
    aix = pd.Index(fit_items).get_indexer(ia_a[used])
    bix = pd.Index(fit_items).get_indexer(ib_a[used])
    yy = y[used]
    win_ix = np.where(yy > 0, aix, bix)
    los_ix = np.where(yy > 0, bix, aix)
    pairs = PairData.from_triples(fit_users.size, fit_items.size, uix, win_ix, los_ix, wt[used])
    inv_df = pd.DataFrame({"row": np.flatnonzero(invalid).astype(np.int64), "reason": reason[invalid]})
    return PersonalComparisons(
        users=np.asarray(fit_users, dtype=object),
        items=np.asarray(fit_items, dtype=object),
        pairs=pairs,
        n_rows=n_rows,
        n_used=n_used,
        n_ties=n_ties,
        n_invalid=n_invalid,
        invalid=inv_df,
        excluded=excluded,
    )


# ---------------------------------------------------------------------------------------------------
# §3 rankings and metrics
# ---------------------------------------------------------------------------------------------------


def rankings_from_scores(X: np.ndarray) -> np.ndarray:
    """Per-row ranks of a score matrix, 1 = best (spec §3.1).

    Parameters
    ----------
    X : numpy.ndarray
        m×n scores (higher = preferred).

    Returns
    -------
    numpy.ndarray
        int64 m×n ranks; ties are broken by item position (= sorted item id), lower first.
    """
    order = np.argsort(-X, axis=1, kind="stable")
    ranks = np.empty(X.shape, dtype=np.int64)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(1, X.shape[1] + 1), X.shape), axis=1)
    return ranks


def borda_scores(X: np.ndarray, sigma: float = DEFAULT_SIGMA, block_entries: int = 1 << 22) -> np.ndarray:
    """Borda-type scores ``τ_j^{(i)} = (1/n) Σ_k f(X[i,j] − X[i,k])`` (spec §3.1).

    The probability that user i prefers item j over a uniformly random item; its order within a row
    equals the order of ``X[i]`` (f is increasing). O(m n²), computed in row blocks.

    Parameters
    ----------
    X : numpy.ndarray
        m×n scores.
    sigma : float
        Logistic scale.
    block_entries : int
        Max entries of an intermediate m_b×n×n block.

    Returns
    -------
    numpy.ndarray
        m×n Borda scores in (0, 1).
    """
    m, n = X.shape
    out = np.empty((m, n))
    rb = max(1, block_entries // max(1, n * n))
    for i0 in range(0, m, rb):
        Xb = X[i0 : i0 + rb]
        out[i0 : i0 + rb] = expit((Xb[:, :, None] - Xb[:, None, :]) / sigma).mean(axis=2)
    return out


def relative_error(X_hat: np.ndarray, X_star: np.ndarray, *, rescale: bool = True, center: bool = False) -> float:
    """Relative squared error ``‖X̂ − X*‖_F² / ‖X*‖_F²`` (spec §3.2).

    Parameters
    ----------
    X_hat, X_star : numpy.ndarray
        Estimate and truth (same shape).
    rescale : bool
        Scale both to ``‖·‖_∞ = 1`` first (the paper's metric).
    center : bool
        Remove row means of both first (offset-free variant, spec §1.3, §3.2).

    Returns
    -------
    float
    """
    A = np.asarray(X_hat, dtype=float)
    B = np.asarray(X_star, dtype=float)
    if A.shape != B.shape:
        raise ValueError(f"shape mismatch {A.shape} vs {B.shape}")
    if center:
        A = A - A.mean(axis=1, keepdims=True)
        B = B - B.mean(axis=1, keepdims=True)
    if rescale:
        A = A / max(np.abs(A).max(), np.finfo(float).tiny)
        B = B / max(np.abs(B).max(), np.finfo(float).tiny)
    return float(np.sum((A - B) ** 2) / np.sum(B**2))


def mean_kendall_tau(X_hat: np.ndarray, X_star: np.ndarray, block_entries: int = 1 << 23) -> float:
    """Mean over users of Kendall's τ-a between rows of ``X̂`` and ``X*`` (spec §3.2, ours).

    ``τ_i = Σ_{j<k} sign(X̂_ij − X̂_ik) sign(X*_ij − X*_ik) / (n(n−1)/2)``, vectorised over pairs in
    blocks of users.

    Parameters
    ----------
    X_hat, X_star : numpy.ndarray
        m×n matrices.
    block_entries : int
        Max entries of an intermediate users×pairs block.

    Returns
    -------
    float
    """
    m: int
    n: int
    m, n = X_hat.shape
    j, k = np.triu_indices(n, 1)
    npairs: int = j.size
    rb = max(1, block_entries // max(1, npairs))
    total = 0.0
    for i0 in range(0, m, rb):
        A = X_hat[i0 : i0 + rb]
        B = X_star[i0 : i0 + rb]
        total += float(np.sum(np.sign(A[:, j] - A[:, k]) * np.sign(B[:, j] - B[:, k])))
    return total / (m * npairs)


# ---------------------------------------------------------------------------------------------------
# result
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PersonalRankingDiagnostics:
    """Run facts of a personalized-ranking fit (spec §2.8, §8 test 21 metadata row).

    Attributes
    ----------
    method : str
        ``"lbfgs"`` or ``"rtr"``.
    rank : int
        Rank r used.
    lambda_, sigma, mu, alpha : float
        Regularization weight, logistic scale, log-sum-exp smoothing, ∞-norm target of the rescaling.
    n_users, n_items : int
        Fitted users / items (m, n).
    n_comparisons : float
        Total weight of the comparisons used (= number of used rows when unweighted).
    n_pairs : int
        Distinct (user, unordered item pair) groups.
    n_ties_dropped, n_invalid_dropped, n_excluded : int
        Rows dropped as ties / invalid, and users+items excluded for lack of comparisons.
    iterations : int
        Outer solver iterations.
    converged : bool
        Stopping rule met (not a cap).
    stop_reason : str
        Why the solver stopped.
    objective, loss, regularizer : float
        Final ``F``, ``𝓛`` and ``μ log Σ exp(X²/μ)`` (``F = 𝓛 + λ·regularizer``).
    grad_norm : float
        Final Riemannian gradient norm (spec §2.5).
    scale : float
        ``‖L Rᵀ‖_∞`` before the rescaling of spec §2.8 (``score = α X̂ / scale``).
    time_s : float
        Solver wall time in seconds.
    seed : int or None
        Seed of the initialization.
    """

    method: str
    rank: int
    lambda_: float
    sigma: float
    mu: float
    alpha: float
    n_users: int
    n_items: int
    n_comparisons: float
    n_pairs: int
    n_ties_dropped: int
    n_invalid_dropped: int
    n_excluded: int
    iterations: int
    converged: bool
    stop_reason: str
    objective: float
    loss: float
    regularizer: float
    grad_norm: float
    scale: float
    time_s: float
    seed: int | None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class PersonalRankingResult:
    """Output of :func:`fit_personal_rankings`.

    Attributes
    ----------
    personal_rankings : pandas.DataFrame
        ``user, item, score, rank`` for every fitted user × fitted item. ``score = α X̂ / ‖X̂‖_∞`` (the
        rescaled estimate of spec §2.8); ``rank`` 1 = best per user, ties broken by item id.
    user_factors : pandas.DataFrame
        ``user, f0 … f{r−1}``: balanced factor ``L = U Σ^{1/2}`` of the unscaled ``X̂ = L Rᵀ = U Σ Vᵀ``.
    item_factors : pandas.DataFrame
        ``item, f0 … f{r−1}``: ``R = V Σ^{1/2}``.
    diagnostics : PersonalRankingDiagnostics
        Convergence and run facts.
    trace : pandas.DataFrame
        Per-iteration convergence trace (``iteration, objective, grad_norm, time_s`` + solver columns).
    excluded : pandas.DataFrame
        ``kind, id, reason``: users/items not fitted (no usable comparison); never silently ranked.
    rank_selection : pandas.DataFrame or None
        Held-out table of :func:`select_rank` when a rank grid was given.
    users, items : numpy.ndarray
        Fitted ids in dense-id order.
    L, R : numpy.ndarray
        The balanced factors as arrays.
    """

    personal_rankings: pd.DataFrame
    user_factors: pd.DataFrame
    item_factors: pd.DataFrame
    diagnostics: PersonalRankingDiagnostics
    trace: pd.DataFrame
    excluded: pd.DataFrame
    rank_selection: pd.DataFrame | None
    users: np.ndarray
    items: np.ndarray
    L: np.ndarray = field(repr=False)
    R: np.ndarray = field(repr=False)

    def score_matrix(self, rescaled: bool = True) -> np.ndarray:
        """Dense ``X̂`` (m×n, users × items in ``users``/``items`` order); rescaled to ``‖·‖_∞ = α``."""
        X: np.ndarray = self.L @ self.R.T
        if rescaled:
            X *= self.diagnostics.alpha / max(self.diagnostics.scale, np.finfo(float).tiny)
        return X

    def predict_proba(self, comparisons: pd.DataFrame) -> np.ndarray:
        """Model probability that ``item_a`` is preferred, ``f(X̂[u,a] − X̂[u,b])`` with the unscaled X̂.

        Parameters
        ----------
        comparisons : pandas.DataFrame
            Columns ``annotator`` (or ``user``/``worker``), ``item_a``, ``item_b`` (or aliases).

        Returns
        -------
        numpy.ndarray
            One probability per row; NaN where the user or an item was not fitted.
        """
        df = comparisons.rename(
            columns={k: v for k, v in _ALIASES.items() if k in comparisons.columns and v not in comparisons.columns}
        )
        u = pd.Index(self.users).get_indexer(df["annotator"].astype(str))
        a = pd.Index(self.items).get_indexer(df["item_a"].astype(str))
        b = pd.Index(self.items).get_indexer(df["item_b"].astype(str))
        ok = (u >= 0) & (a >= 0) & (b >= 0)
        out = np.full(len(df), np.nan)
        d = np.einsum("ij,ij->i", self.L[u[ok]], self.R[a[ok]] - self.R[b[ok]])
        out[ok] = expit(d / self.diagnostics.sigma)
        return out

    def diagnostics_table(self) -> pd.DataFrame:
        """One-row run-metadata table (spec §8 test 21)."""
        return pd.DataFrame([self.diagnostics.as_dict()])


# ---------------------------------------------------------------------------------------------------
# §2 fitting
# ---------------------------------------------------------------------------------------------------


def fit_low_rank_btl(
    pairs: PairData,
    rank: int,
    *,
    method: Method = "lbfgs",
    sigma: float = DEFAULT_SIGMA,
    lambda_: float | None = None,
    lambda_scale: float = 1.0,
    K: int | None = None,
    mu: float = 1.0,
    max_iter: int | None = None,
    gtol: float = 1e-6,
    seed: int | None = 0,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    block_entries: int = DEFAULT_BLOCK_ENTRIES,
    time_limit: float | None = None,
    solver_options: dict[str, Any] | None = None,
    warn: bool = True,
) -> tuple[SolverOutput, float]:
    """Minimize the smoothed objective 𝒫 (spec §2.3) over rank-``rank`` factors.

    Parameters
    ----------
    pairs : PairData
        Encoded comparisons.
    rank : int
        Target rank r, ``1 ≤ r ≤ min(m, n)``.
    method : {"lbfgs", "rtr"}
        L-BFGS on the factors (default; spec §2.10.1) or the Riemannian trust region (spec §2.6).
    sigma : float
        Logistic scale σ.
    lambda_ : float, optional
        Regularization weight; default ``lambda_scale · r² √K ln K`` (spec §2.3).
    lambda_scale : float
        Multiplier of the paper's λ (ignored when ``lambda_`` is given).
    K : int, optional
        Size parameter of the λ rule; default ``max(m, n)``.
    mu : float
        Log-sum-exp smoothing μ (spec §2.3; 1 in the paper).
    max_iter : int, optional
        Iteration cap; default 2000 (L-BFGS) / 500 (RTR, paper).
    gtol : float
        Gradient tolerance (RTR: Riemannian norm, absolute; L-BFGS: scipy's max-abs projected gradient).
    seed : int, optional
        Seed of the paper's initialization (spec §2.7).
    init : (numpy.ndarray, numpy.ndarray), optional
        Explicit initial factors (overrides ``seed``).
    block_entries : int
        Row-block size of the dense regularizer evaluation (spec §5).
    time_limit : float, optional
        Wall-clock cap in seconds.
    solver_options : dict, optional
        Extra keyword arguments of :func:`~crowdflow.personal_rankings.solvers.riemannian_trust_region` /
        :func:`~crowdflow.personal_rankings.solvers.lbfgs_factors`.
    warn : bool
        Emit a ``RuntimeWarning`` when the solver stops without converging.

    Returns
    -------
    (SolverOutput, float)
        Solver output and the λ used.
    """
    m, n = pairs.m, pairs.n
    rank = int(rank)
    if rank < 1:
        raise ValueError(f"rank must be between 1 and min(users, items) = {min(m, n)}, got {rank}")
    if rank > min(m, n):
        raise DegenerateInput(
            f"rank must be between 1 and min(users, items) = {min(m, n)}, got {rank}: the comparisons have "
            f"{m} user(s) and {n} item(s) with usable comparisons; choose a rank <= {min(m, n)}",
            "rank_too_large",
        )
    if method not in ("lbfgs", "rtr"):
        raise ValueError(f"method must be 'lbfgs' or 'rtr', got {method!r}")
    lam = float(lambda_) if lambda_ is not None else lambda_scale * paper_lambda(m, n, rank, K)
    obj = SmoothedBTLObjective(pairs, sigma=sigma, lam=lam, mu=mu, block_entries=block_entries)
    if init is None:
        L0, R0 = paper_init(m, n, rank, seed=0 if seed is None else seed)
    else:
        L0, R0 = (np.array(init[0], dtype=float), np.array(init[1], dtype=float))
        if L0.shape != (m, rank) or R0.shape != (n, rank):
            raise ValueError(f"init shapes must be ({m}, {rank}) and ({n}, {rank}); got {L0.shape}, {R0.shape}")
    opts = dict(solver_options or {})
    if method == "lbfgs":
        out = lbfgs_factors(obj, L0, R0, max_iter=max_iter or 2000, gtol=gtol, time_limit=time_limit, **opts)
    else:
        out = riemannian_trust_region(obj, L0, R0, max_iter=max_iter or 500, gtol=gtol, time_limit=time_limit, **opts)
    logger.info(
        "%s: %d iterations, F=%.10g, |grad|=%.3e, %s (%.2fs)",
        method,
        out.iterations,
        out.objective,
        out.grad_norm,
        out.stop_reason,
        out.time_s,
    )
    if not out.converged and warn:
        msg = f"personal rankings ({method}) did not converge: {out.stop_reason}; |grad|={out.grad_norm:.3e}"
        logger.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
    return out, lam


def split_holdout(pairs: PairData, fraction: float = 0.2, seed: int = 0) -> tuple[PairData, PairData]:
    """Random held-out split of (user, pair) groups that keeps every user and item in training.

    Held-out groups whose user or one of whose items would have no training comparison are returned
    to the training set (one vectorised pass).

    Parameters
    ----------
    pairs : PairData
        All comparisons.
    fraction : float
        Target held-out fraction of pair groups, in (0, 1).
    seed : int
        Randomness.

    Returns
    -------
    (PairData, PairData)
        Training and held-out parts (same m, n).
    """
    if not 0 < fraction < 1:
        raise ValueError(f"holdout fraction must be in (0, 1), got {fraction}")
    rng = np.random.default_rng(seed)
    hold = rng.random(pairs.n_pairs) < fraction
    tr = ~hold
    cu = np.bincount(pairs.user[tr], minlength=pairs.m)
    ci = np.bincount(np.r_[pairs.a[tr], pairs.b[tr]], minlength=pairs.n)
    back = hold & ((cu[pairs.user] == 0) | (ci[pairs.a] == 0) | (ci[pairs.b] == 0))
    hold &= ~back
    return pairs.subset(~hold), pairs.subset(hold)


def _heldout_metrics(L: np.ndarray, R: np.ndarray, test: PairData, sigma: float) -> tuple[float, float]:
    d = np.einsum("ij,ij->i", L[test.user], R[test.a] - R[test.b]) / sigma
    wt = test.w_pos + test.w_neg
    nll = float(
        (np.einsum("i,i->", test.w_pos, np.logaddexp(0.0, -d)) + np.einsum("i,i->", test.w_neg, np.logaddexp(0.0, d)))
        / wt.sum()
    )
    correct = np.where(d > 0, test.w_pos, np.where(d < 0, test.w_neg, 0.5 * wt))
    return nll, float(correct.sum() / wt.sum())


def select_rank(
    pairs: PairData,
    ranks: Sequence[int],
    *,
    holdout_fraction: float = 0.2,
    seed: int = 0,
    criterion: Literal["nll", "accuracy"] = "nll",
    **fit_kwargs: Any,
) -> pd.DataFrame:
    """Held-out choice of the rank among a small grid.

    Fits on a training split (:func:`split_holdout`) for every rank (λ follows its own rule for each r)
    and scores the held-out comparisons by mean negative log-likelihood and winner accuracy.

    Parameters
    ----------
    pairs : PairData
        All comparisons.
    ranks : sequence of int
        Candidate ranks.
    holdout_fraction : float
        Held-out fraction of (user, pair) groups.
    seed : int
        Split and initialization seed.
    criterion : {"nll", "accuracy"}
        Smallest held-out NLL (default) or largest held-out accuracy (ties → smaller rank). With the
        fixed σ = 0.18 the fitted probabilities can be over-confident, and NLL then favours small ranks
        even where accuracy prefers larger ones (seen on Zappos).
    **fit_kwargs
        Passed to :func:`fit_low_rank_btl`.

    Returns
    -------
    pandas.DataFrame
        ``rank, lambda_, heldout_nll, heldout_accuracy, n_heldout, converged, selected`` (one row per
        rank; ``selected`` marks the chosen rank).
    """
    if criterion not in ("nll", "accuracy"):
        raise ValueError(f"criterion must be 'nll' or 'accuracy', got {criterion!r}")
    ranks = sorted({int(r) for r in ranks})
    if not ranks:
        raise ValueError("ranks must not be empty")
    train, test = split_holdout(pairs, holdout_fraction, seed)
    if test.n_pairs == 0:
        raise DegenerateInput(
            "held-out split is empty (too few comparisons per user/item for rank selection); give one rank",
            "holdout_empty",
        )
    sigma = fit_kwargs.get("sigma", DEFAULT_SIGMA)
    rows = []
    for r in ranks:
        if r > min(pairs.m, pairs.n):
            continue
        out, lam = fit_low_rank_btl(train, r, seed=seed, **fit_kwargs)
        nll, acc = _heldout_metrics(out.L, out.R, test, sigma)
        rows.append(
            {
                "rank": r,
                "lambda_": lam,
                "heldout_nll": nll,
                "heldout_accuracy": acc,
                "n_heldout": float(test.total_weight),
                "converged": out.converged,
            }
        )
    if not rows:
        raise DegenerateInput(
            f"no candidate rank <= min(users, items) = {min(pairs.m, pairs.n)}; choose smaller ranks", "rank_too_large"
        )
    tab = pd.DataFrame(rows)
    key = tab["heldout_nll"].to_numpy() if criterion == "nll" else -tab["heldout_accuracy"].to_numpy()
    tab["selected"] = np.arange(len(tab)) == int(np.argmin(key))  # first minimum = smallest rank
    logger.info("rank selection:\n%s", tab.to_string(index=False))
    return tab


def fit_personal_rankings(
    comparisons: pd.DataFrame | PersonalComparisons,
    rank: int | Sequence[int] = 5,
    *,
    method: Method = "lbfgs",
    sigma: float = DEFAULT_SIGMA,
    lambda_: float | None = None,
    lambda_scale: float = 1.0,
    K: int | None = None,
    mu: float = 1.0,
    alpha: float = 1.0,
    max_iter: int | None = None,
    gtol: float = 1e-6,
    seed: int | None = 0,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    on_invalid: InvalidPolicy = "raise",
    users: Sequence[Any] | None = None,
    items: Sequence[Any] | None = None,
    holdout_fraction: float = 0.2,
    rank_criterion: Literal["nll", "accuracy"] = "nll",
    block_entries: int = DEFAULT_BLOCK_ENTRIES,
    time_limit: float | None = None,
    solver_options: dict[str, Any] | None = None,
) -> PersonalRankingResult:
    """Per-user rankings from pairwise comparisons by smoothed low-rank BTL (spec §2, §3.1).

    Solves ``min_{rank(X)=r} 𝓛(X) + λ μ log Σ exp(X²/μ)`` on ``X = L Rᵀ`` (spec §2.3) with L-BFGS or the
    Riemannian trust region, rescales ``X̂`` to ``‖X̂‖_∞ = α`` (spec §2.8) and ranks every fitted item
    for every fitted user by decreasing score (spec §3.1).

    Parameters
    ----------
    comparisons : pandas.DataFrame or PersonalComparisons
        Comparison table (see :func:`encode_personal_comparisons` for the accepted layouts) or an
        already encoded one.
    rank : int or sequence of int
        Target rank r. A sequence of several ranks selects one by held-out NLL (:func:`select_rank`)
        and refits on all data with it.
    method : {"lbfgs", "rtr"}
        Solver (default L-BFGS, measured faster; see the module docstring).
    sigma, lambda_, lambda_scale, K, mu :
        Model constants (spec §2.3): σ = 0.18, λ = ``lambda_scale · r² √K ln K`` with
        ``K = max(m, n)`` unless ``lambda_`` is given, μ = 1.
    alpha : float
        ∞-norm of the exported scores (spec §2.8).
    max_iter, gtol, seed, init, block_entries, time_limit, solver_options :
        Solver controls, see :func:`fit_low_rank_btl`.
    on_invalid : {"raise", "drop"}
        Policy for invalid rows.
    users, items : sequence, optional
        Full id universes; ids without usable comparisons are listed in ``excluded``.
    holdout_fraction, rank_criterion :
        Held-out fraction and criterion for rank selection (:func:`select_rank`).

    Returns
    -------
    PersonalRankingResult

    Raises
    ------
    ValueError
        Bad input table, bad rank, or no usable comparison.
    """
    if alpha <= 0 or not np.isfinite(alpha):
        raise ValueError(f"alpha must be > 0, got {alpha}")
    enc = (
        comparisons
        if isinstance(comparisons, PersonalComparisons)
        else encode_personal_comparisons(comparisons, on_invalid=on_invalid, users=users, items=items)
    )
    pairs = enc.pairs
    fit_kw: dict[str, Any] = {
        "method": method,
        "sigma": sigma,
        "lambda_": lambda_,
        "lambda_scale": lambda_scale,
        "K": K,
        "mu": mu,
        "max_iter": max_iter,
        "gtol": gtol,
        "block_entries": block_entries,
        "time_limit": time_limit,
        "solver_options": solver_options,
    }
    selection = None
    if isinstance(rank, (int, np.integer)):
        r = int(rank)
    else:
        grid = [int(x) for x in rank]
        if len(grid) == 1:
            r = grid[0]
        else:
            selection = select_rank(
                pairs,
                grid,
                holdout_fraction=holdout_fraction,
                seed=0 if seed is None else seed,
                criterion=rank_criterion,
                **fit_kw,
            )
            r = int(selection.loc[selection["selected"], "rank"].iloc[0])
    out, lam = fit_low_rank_btl(pairs, r, seed=seed, init=init, **fit_kw)
    L, R = balance_factors(out.L, out.R)
    m, n = pairs.m, pairs.n
    X = L @ R.T
    scale = float(np.abs(X).max())
    score = X * (alpha / max(scale, np.finfo(float).tiny))
    ranks = rankings_from_scores(score)
    table = pd.DataFrame(
        {
            "user": np.repeat(enc.users, n),
            "item": np.tile(enc.items, m),
            "score": score.ravel(),
            "rank": ranks.ravel(),
        }
    )
    cols = [f"f{k}" for k in range(r)]
    uf = pd.DataFrame(L, columns=cols)
    uf.insert(0, "user", enc.users)
    itf = pd.DataFrame(R, columns=cols)
    itf.insert(0, "item", enc.items)
    obj = SmoothedBTLObjective(pairs, sigma=sigma, lam=lam, mu=mu, block_entries=block_entries)
    pt = obj.evaluate(out.L, out.R, cache=False)
    diag = PersonalRankingDiagnostics(
        method=method,
        rank=r,
        lambda_=lam,
        sigma=float(sigma),
        mu=float(mu),
        alpha=float(alpha),
        n_users=m,
        n_items=n,
        n_comparisons=pairs.total_weight,
        n_pairs=pairs.n_pairs,
        n_ties_dropped=enc.n_ties,
        n_invalid_dropped=enc.n_invalid,
        n_excluded=len(enc.excluded),
        iterations=out.iterations,
        converged=out.converged,
        stop_reason=out.stop_reason,
        objective=out.objective,
        loss=pt.loss,
        regularizer=pt.reg,
        grad_norm=out.grad_norm,
        scale=scale,
        time_s=out.time_s,
        seed=seed,
    )
    return PersonalRankingResult(
        personal_rankings=table,
        user_factors=uf,
        item_factors=itf,
        diagnostics=diag,
        trace=out.trace,
        excluded=enc.excluded,
        rank_selection=selection,
        users=enc.users,
        items=enc.items,
        L=L,
        R=R,
    )


# ---------------------------------------------------------------------------------------------------
# baselines (spec §4.2, §6)
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvexBaselineResult:
    """Nuclear-norm constrained MLE ``min 𝓛(X) s.t. ‖X‖_* ≤ α sqrt(r m n)`` (spec §4.2 SPG, §6).

    Attributes
    ----------
    X : numpy.ndarray
        Solution (unscaled).
    X_rescaled : numpy.ndarray
        ``α X / ‖X‖_∞`` (spec §7.10).
    objective : float
        ``𝓛(X)``.
    radius : float
        Nuclear-norm radius ``α sqrt(r m n)``.
    status : str
        Solver status.
    solver : str
        ``"SCS"``, ``"CLARABEL"`` (cvxpy) or ``"spg"`` (numpy).
    iterations : int
        Iterations (SPG; cvxpy: solver-reported or -1).
    time_s : float
        Wall time including problem construction.
    """

    X: np.ndarray
    X_rescaled: np.ndarray
    objective: float
    radius: float
    status: str
    solver: str
    iterations: int
    time_s: float


def _nll_dense(pairs: PairData, X: np.ndarray, sigma: float) -> float:
    d = (X[pairs.user, pairs.a] - X[pairs.user, pairs.b]) / sigma
    return float(
        np.einsum("i,i->", pairs.w_pos, np.logaddexp(0.0, -d)) + np.einsum("i,i->", pairs.w_neg, np.logaddexp(0.0, d))
    )


def fit_convex_baseline(
    pairs: PairData,
    rank: int,
    *,
    alpha: float = 1.0,
    sigma: float = DEFAULT_SIGMA,
    solver: str = "SCS",
    box: bool = False,
    radius: float | None = None,
    solver_kwargs: dict[str, Any] | None = None,
) -> ConvexBaselineResult:
    """Convex relaxation via cvxpy (spec §6): ``min Σ w·logistic(∓Δ/σ)  s.t. ‖X‖_* ≤ α sqrt(r m n)``.

    Small sizes only (the nuclear norm becomes an (m+n)×(m+n) PSD block plus one exponential cone per
    pair; practical for about m, n ≤ 100).

    Parameters
    ----------
    pairs : PairData
        Comparisons.
    rank : int
        r of the radius rule.
    alpha : float
        ∞-norm bound α (also the rescaling target).
    sigma : float
        Logistic scale.
    solver : str
        cvxpy solver (``"SCS"`` or ``"CLARABEL"``).
    box : bool
        Add the Davenport-style box ``|X| ≤ α``.
    radius : float, optional
        Override the nuclear-norm radius.
    solver_kwargs : dict, optional
        Passed to ``Problem.solve``.

    Returns
    -------
    ConvexBaselineResult
    """
    import cvxpy as cp

    t0 = time.perf_counter()
    m, n, P = pairs.m, pairs.n, pairs.n_pairs
    tau = float(alpha * np.sqrt(rank * m * n)) if radius is None else float(radius)
    rows = np.r_[np.arange(P), np.arange(P)]
    cols = np.r_[pairs.user * n + pairs.a, pairs.user * n + pairs.b]
    A = sp.csr_matrix((np.r_[np.ones(P), -np.ones(P)], (rows, cols)), shape=(P, m * n))
    X = cp.Variable((m, n))
    delta = A @ cp.vec(X, order="C")
    terms = []
    if np.any(pairs.w_pos > 0):
        terms.append(pairs.w_pos @ cp.logistic(-delta / sigma))
    if np.any(pairs.w_neg > 0):
        terms.append(pairs.w_neg @ cp.logistic(delta / sigma))
    cons = [cp.normNuc(X) <= tau]
    if box:
        cons.append(cp.abs(X) <= alpha)
    prob = cp.Problem(cp.Minimize(sum(terms)), cons)
    prob.solve(solver=solver, **(solver_kwargs or {}))
    if X.value is None:
        raise RuntimeError(f"cvxpy/{solver} returned no solution (status {prob.status})")
    Xv = np.asarray(X.value)
    its = -1
    with contextlib.suppress(AttributeError, TypeError):
        its = int(prob.solver_stats.num_iters or -1)
    return ConvexBaselineResult(
        X=Xv,
        X_rescaled=alpha * Xv / max(np.abs(Xv).max(), np.finfo(float).tiny),
        objective=_nll_dense(pairs, Xv, sigma),
        radius=tau,
        status=str(prob.status),
        solver=solver,
        iterations=its,
        time_s=time.perf_counter() - t0,
    )


def _project_nuclear_ball(Y: np.ndarray, tau: float) -> tuple[np.ndarray, float]:
    U, s, Vt = np.linalg.svd(Y, full_matrices=False)
    if s.sum() <= tau:
        return Y, float(s.sum())
    # Euclidean projection of s (≥ 0, sorted decreasingly) onto {x ≥ 0, Σx ≤ τ}
    cs = np.cumsum(s)
    k = np.arange(1, s.size + 1)
    cond = s - (cs - tau) / k > 0
    j = int(np.flatnonzero(cond)[-1])
    theta = (cs[j] - tau) / (j + 1)
    sp_ = np.maximum(s - theta, 0.0)
    keep = sp_ > 0
    return (U[:, keep] * sp_[keep]) @ Vt[keep], float(sp_.sum())


def fit_convex_spg(
    pairs: PairData,
    rank: int,
    *,
    alpha: float = 1.0,
    sigma: float = DEFAULT_SIGMA,
    radius: float | None = None,
    max_iter: int = 500,
    tol: float = 1e-7,
    memory: int = 10,
    time_limit: float | None = None,
) -> ConvexBaselineResult:
    """Numpy substitute of the SPG baseline (spec §4.2): projected gradient on the nuclear ball.

    ``min 𝓛(X) s.t. ‖X‖_* ≤ τ = α sqrt(r m n)`` with Barzilai–Borwein steps, projection by SVD +
    projection of the singular values onto the ℓ1 ball, and a nonmonotone (GLL, memory 10) Armijo
    backtracking. Stopping rule: ``‖X_{k+1} − X_k‖_F ≤ tol · max(1, ‖X_k‖_F)`` or relative objective change
    ≤ ``tol``; cap ``max_iter`` (warning when hit). One SVD of an m×n matrix per iteration.

    Parameters
    ----------
    pairs : PairData
        Comparisons.
    rank : int
        r of the radius rule.
    alpha, sigma, radius :
        As in :func:`fit_convex_baseline`.
    max_iter, tol, memory :
        Iteration cap, tolerance and nonmonotone memory.
    time_limit : float, optional
        Wall-clock cap in seconds.

    Returns
    -------
    ConvexBaselineResult
    """
    t0 = time.perf_counter()
    m, n = pairs.m, pairs.n
    tau = float(alpha * np.sqrt(rank * m * n)) if radius is None else float(radius)
    fa = pairs.user * n + pairs.a
    fb = pairs.user * n + pairs.b

    def fg(X: np.ndarray) -> tuple[float, np.ndarray]:
        xf = X.ravel()
        z = (xf[fa] - xf[fb]) / sigma
        f = float(
            np.einsum("i,i->", pairs.w_pos, np.logaddexp(0.0, -z))
            + np.einsum("i,i->", pairs.w_neg, np.logaddexp(0.0, z))
        )
        c = (pairs.w_neg * expit(z) - pairs.w_pos * expit(-z)) / sigma
        g = np.bincount(fa, weights=c, minlength=m * n) - np.bincount(fb, weights=c, minlength=m * n)
        return f, g.reshape(m, n)

    X = np.zeros((m, n))
    f, g = fg(X)
    hist = [f]
    step = 1.0 / max(float(np.linalg.norm(g)), 1e-12)
    status = "max_iter"
    k = 0
    for k in range(1, max_iter + 1):
        Xp, _ = _project_nuclear_ball(X - step * g, tau)
        D = Xp - X
        gd = float(np.einsum("ij,ij->", g, D))
        fmax = max(hist[-memory:])
        beta = 1.0
        while True:
            Xn = X + beta * D
            fn, gn = fg(Xn)
            if fn <= fmax + 1e-4 * beta * gd or beta < 1e-10:
                break
            beta *= 0.5
        S = Xn - X
        Yd = gn - g
        sy = float(np.einsum("ij,ij->", S, Yd))
        ss = float(np.einsum("ij,ij->", S, S))
        step = ss / sy if sy > 0 else 1e3 * step
        step = float(np.clip(step, 1e-10, 1e10))
        done = np.sqrt(ss) <= tol * max(1.0, float(np.linalg.norm(X))) or abs(f - fn) <= tol * max(1.0, abs(f))
        X, f, g = Xn, fn, gn
        hist.append(f)
        if done:
            status = "converged"
            break
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            status = "time_limit"
            break
    if status != "converged":
        warnings.warn(f"convex SPG baseline stopped without converging ({status})", RuntimeWarning, stacklevel=2)
    return ConvexBaselineResult(
        X=X,
        X_rescaled=alpha * X / max(np.abs(X).max(), np.finfo(float).tiny),
        objective=f,
        radius=tau,
        status=status,
        solver="spg",
        iterations=k,
        time_s=time.perf_counter() - t0,
    )


@dataclass(frozen=True)
class GlobalBTLResult:
    """A single BTL score vector shared by all users (baseline for the personal model).

    Attributes
    ----------
    items : numpy.ndarray
        Item ids.
    scores : numpy.ndarray
        θ (centred), ``P(a ≻ b) = f(θ_a − θ_b)``.
    objective : float
        Final penalized NLL.
    converged : bool
        scipy's success flag.
    sigma : float
        Logistic scale of the link.
    """

    items: np.ndarray
    scores: np.ndarray
    objective: float
    converged: bool
    sigma: float = DEFAULT_SIGMA

    def predict_proba(self, comparisons: pd.DataFrame) -> np.ndarray:
        """Probability that ``item_a`` is preferred (NaN for unknown items)."""
        df = comparisons.rename(
            columns={k: v for k, v in _ALIASES.items() if k in comparisons.columns and v not in comparisons.columns}
        )
        a = pd.Index(self.items).get_indexer(df["item_a"].astype(str))
        b = pd.Index(self.items).get_indexer(df["item_b"].astype(str))
        ok = (a >= 0) & (b >= 0)
        out = np.full(len(df), np.nan)
        out[ok] = expit((self.scores[a[ok]] - self.scores[b[ok]]) / self.sigma)
        return out


def fit_global_btl(
    pairs: PairData, items: np.ndarray, *, sigma: float = DEFAULT_SIGMA, ridge: float = 1e-3
) -> GlobalBTLResult:
    """Global BTL: ``min_θ Σ_t w·ℓ(±(θ_a − θ_b)) + (ridge/2)‖θ‖²`` pooling all users (L-BFGS).

    Parameters
    ----------
    pairs : PairData
        Comparisons (users are ignored).
    items : numpy.ndarray
        Item ids aligned with the dense item ids of ``pairs``.
    sigma : float
        Logistic scale (same link as the personal model).
    ridge : float
        Small ℓ2 penalty (makes the optimum unique and finite).

    Returns
    -------
    GlobalBTLResult
    """
    n = pairs.n
    a, b, wp, wn = pairs.a, pairs.b, pairs.w_pos, pairs.w_neg

    def fg(th: np.ndarray) -> tuple[float, np.ndarray]:
        z = (th[a] - th[b]) / sigma
        f = float(np.einsum("i,i->", wp, np.logaddexp(0.0, -z)) + np.einsum("i,i->", wn, np.logaddexp(0.0, z)))
        f += 0.5 * ridge * float(np.einsum("i,i->", th, th))
        c = (wn * expit(z) - wp * expit(-z)) / sigma
        g = np.bincount(a, weights=c, minlength=n) - np.bincount(b, weights=c, minlength=n) + ridge * th
        return f, g

    res = minimize(fg, np.zeros(n), jac=True, method="L-BFGS-B", options={"maxiter": 1000, "gtol": 1e-9})
    th = res.x - res.x.mean()
    return GlobalBTLResult(
        items=np.asarray(items, dtype=object),
        scores=th,
        objective=float(res.fun),
        converged=bool(res.success),
        sigma=float(sigma),
    )


# ---------------------------------------------------------------------------------------------------
# §4.1 synthetic generator
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticPersonalComparisons:
    """Synthetic comparisons with ground truth (spec §4.1).

    Attributes
    ----------
    comparisons : pandas.DataFrame
        ``annotator, item_a, item_b, outcome`` (±1), one row per comparison.
    X_star : numpy.ndarray
        True score matrix (‖X*‖_∞ = 1), rows = ``users``, columns = ``items``.
    users, items : numpy.ndarray
        Zero-padded string ids (sorted-id order = index order).
    rank, d : float
        Rank and rescaled sample size.
    sigma : float
        Logistic scale used.
    """

    comparisons: pd.DataFrame
    X_star: np.ndarray
    users: np.ndarray
    items: np.ndarray
    rank: int
    d: float
    sigma: float


def synthetic_personal_comparisons(
    K: int,
    rank: int,
    d: float,
    *,
    sigma: float = DEFAULT_SIGMA,
    seed: int = 0,
    n_items: int | None = None,
    n_comparisons: int | None = None,
) -> SyntheticPersonalComparisons:
    """The paper's synthetic protocol (spec §4.1).

    ``U, V ~ Uniform[−0.5, 0.5]^{K×r}``, ``X* = U Vᵀ / ‖U Vᵀ‖_∞``; ``N = round(d r K ln K)`` comparisons,
    each with a uniform user and a uniform ordered pair of distinct items (with replacement);
    ``outcome = +1`` with probability ``f(X*[i,a] − X*[i,b])``, else −1.

    Parameters
    ----------
    K : int
        Number of users (and items unless ``n_items`` is given).
    rank : int
        True rank r.
    d : float
        Rescaled sample size.
    sigma : float
        Logistic scale.
    seed : int
        Randomness.
    n_items : int, optional
        Items n if different from K (K is then the number of users; N uses ``max(K, n)``).
    n_comparisons : int, optional
        Override N.

    Returns
    -------
    SyntheticPersonalComparisons
    """
    m = int(K)
    n = int(n_items) if n_items is not None else m
    if m < 1 or n < 2 or rank < 1:
        raise ValueError("need K >= 1 users, >= 2 items and rank >= 1")
    rng = np.random.default_rng(seed)
    U = rng.uniform(-0.5, 0.5, (m, rank))
    V = rng.uniform(-0.5, 0.5, (n, rank))
    X = U @ V.T
    X /= np.abs(X).max()
    kk = max(m, n)
    N = round(d * rank * kk * np.log(kk)) if n_comparisons is None else int(n_comparisons)
    u = rng.integers(0, m, N)
    a = rng.integers(0, n, N)
    b = (a + rng.integers(1, n, N)) % n
    p = expit((X[u, a] - X[u, b]) / sigma)
    y = np.where(rng.random(N) < p, 1, -1)
    wu = len(str(m - 1))
    wi = len(str(n - 1))
    users = np.array([f"u{i:0{wu}d}" for i in range(m)], dtype=object)
    items = np.array([f"i{j:0{wi}d}" for j in range(n)], dtype=object)
    df = pd.DataFrame({"annotator": users[u], "item_a": items[a], "item_b": items[b], "outcome": y.astype(np.int64)})
    return SyntheticPersonalComparisons(comparisons=df, X_star=X, users=users, items=items, rank=rank, d=d, sigma=sigma)
