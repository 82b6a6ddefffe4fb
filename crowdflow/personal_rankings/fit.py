"""Personalized rankings: the entry point :func:`fit_personal_rankings` and its result types.

Low-rank BTL with a smoothed ∞-norm penalty (J. Dong, K. Yang, Y. Shi, "Ranking from Crowdsourced
Pairwise Comparisons via Smoothed Matrix Manifold Optimization", ShanghaiTech). User i prefers item a
over item b with probability ``f(X[i,a] − X[i,b])``, ``f(z) = 1/(1 + e^{−z/σ})`` (σ = 0.18), for an
unknown users × items score matrix X of rank r with bounded entries; the estimate minimizes

    F(X) = 𝓛(X) + λ · μ log Σ_ij exp(X_ij²/μ)   over rank-r X = L Rᵀ,   λ = r² √K ln K,  K = max(m, n),  μ = 1,

is rescaled to ``‖X̂‖_∞ = α`` and ranks every fitted item for every fitted user (rank 1 = best).

The fit encodes the table (:mod:`~crowdflow.personal_rankings.encoding`), selects a rank on held-out
data when given a grid, fits (:mod:`~crowdflow.personal_rankings.btl`: L-BFGS by default, measured as
fast or faster than the trust region at every size; ``method="rtr"`` when a certified tiny gradient
matters), balances the factors and builds the tables of :class:`PersonalRankingResult`.

Users / items without any usable comparison (declared via ``users=``/``items=``, or whose rows were all
ties or invalid-and-dropped) are **excluded** from the fit and listed in ``result.excluded`` with a
reason; they never appear in ``personal_rankings``. Items compared only by some users are still scored
for every user: those scores come from the low-rank coupling (docs/methods/personal_rankings.md §1.3).

Method, options and benchmarks: docs/methods/personal_rankings.md (model §1, algorithm §2, options §4, benchmarks §7).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import expit

from crowdflow.contracts.comparisons import rename_comparison_aliases
from crowdflow.personal_rankings.btl import fit_low_rank_btl, select_rank
from crowdflow.personal_rankings.encoding import (
    PersonalComparisons,
    encode_personal_comparisons,
)
from crowdflow.personal_rankings.manifold import balance_factors
from crowdflow.personal_rankings.metrics import rankings_from_scores
from crowdflow.personal_rankings.objective import DEFAULT_BLOCK_ENTRIES, SmoothedBTLObjective
from crowdflow.personal_rankings.options import PersonalRankingsOptions

logger = logging.getLogger(__name__)

__all__ = ["PersonalRankingDiagnostics", "PersonalRankingResult", "fit_personal_rankings"]


@dataclass(frozen=True)
class PersonalRankingDiagnostics:
    """Run facts of a personalized-ranking fit (docs/methods/personal_rankings.md §2.8).

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
        Final Riemannian gradient norm (docs/methods/personal_rankings.md §2.4).
    scale : float
        ``‖L Rᵀ‖_∞`` before the rescaling of docs/methods/personal_rankings.md §2.8 (``score = α X̂ / scale``).
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
        rescaled estimate); ``rank`` 1 = best per user, ties broken by item id (docs/methods/personal_rankings.md §2.8).
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
        df = rename_comparison_aliases(comparisons)
        u = pd.Index(self.users).get_indexer(df["annotator"].astype(str))
        a = pd.Index(self.items).get_indexer(df["item_a"].astype(str))
        b = pd.Index(self.items).get_indexer(df["item_b"].astype(str))
        ok = (u >= 0) & (a >= 0) & (b >= 0)
        out = np.full(len(df), np.nan)
        d = np.einsum("ij,ij->i", self.L[u[ok]], self.R[a[ok]] - self.R[b[ok]])
        out[ok] = expit(d / self.diagnostics.sigma)
        return out

    def diagnostics_table(self) -> pd.DataFrame:
        """One-row run-metadata table (docs/methods/personal_rankings.md §2.8)."""
        return pd.DataFrame([self.diagnostics.as_dict()])


def fit_personal_rankings(
    comparisons: pd.DataFrame | PersonalComparisons,
    options: PersonalRankingsOptions | None = None,
    *,
    users: Sequence[Any] | None = None,
    items: Sequence[Any] | None = None,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    block_entries: int = DEFAULT_BLOCK_ENTRIES,
    **overrides: Any,
) -> PersonalRankingResult:
    """Per-user rankings from pairwise comparisons by smoothed low-rank BTL (docs/methods/personal_rankings.md §2).

    Solves ``min_{rank(X)=r} 𝓛(X) + λ μ log Σ exp(X²/μ)`` on ``X = L Rᵀ`` with L-BFGS or the Riemannian
    trust region, rescales ``X̂`` to ``‖X̂‖_∞ = α`` and ranks every fitted item for every fitted user by
    decreasing score (docs/methods/personal_rankings.md §2.2, §2.5–2.6, §2.8).

    ``fit_personal_rankings(df, rank=3, method="rtr")`` and
    ``fit_personal_rankings(df, PersonalRankingsOptions(rank=3, method="rtr"))`` are the same call; a
    pipeline passes its spec's ``personal_rankings`` block as ``options``.

    Parameters
    ----------
    comparisons : pandas.DataFrame or PersonalComparisons
        Comparison table (see :func:`encode_personal_comparisons` for the accepted layouts) or an
        already encoded one.
    options : PersonalRankingsOptions, optional
        Everything that changes the fit (default: all defaults): ``rank`` (an int, or a list of ranks
        to choose from by held-out ``rank_criterion`` on a ``holdout_fraction`` split, :func:`select_rank`,
        then refit on all data), ``method``, the model constants ``sigma``, ``lambda_`` (or the rule
        ``lambda_scale · r² √K ln K`` with ``K``), ``mu``, the score scale ``alpha``, the solver controls
        ``max_iter``, ``gtol``, ``time_limit``, ``seed``, and ``on_invalid`` (the policy for invalid
        rows). Each option, its range and its default: docs/methods/personal_rankings.md §4.
    users, items : sequence, optional
        Full id universes; ids without usable comparisons are listed in ``excluded``.
    init : (numpy.ndarray, numpy.ndarray), optional
        Explicit initial factors of the final fit (overrides ``seed``), see :func:`fit_low_rank_btl`.
    block_entries : int
        Row-block size of the dense regularizer evaluation (memory only).
    **overrides
        Fields of :class:`PersonalRankingsOptions` replacing those of ``options`` (validated the same way).

    Returns
    -------
    PersonalRankingResult

    Raises
    ------
    ValueError
        Bad input table, bad rank, or no usable comparison; a ``pydantic.ValidationError`` (a
        ``ValueError``) for an option outside its range.
    """
    o = PersonalRankingsOptions.resolve(options, **overrides)
    enc = (
        comparisons
        if isinstance(comparisons, PersonalComparisons)
        else encode_personal_comparisons(comparisons, on_invalid=o.on_invalid, users=users, items=items)
    )
    pairs = enc.pairs
    selection = None
    if isinstance(o.rank, int):
        r = o.rank
    elif len(o.rank) == 1:
        r = o.rank[0]
    else:
        selection = select_rank(pairs, o.rank, o, block_entries=block_entries)
        r = int(selection.loc[selection["selected"], "rank"].iloc[0])
    out, lam = fit_low_rank_btl(pairs, r, o, init=init, block_entries=block_entries)
    L, R = balance_factors(out.L, out.R)
    m, n = pairs.m, pairs.n
    X = L @ R.T
    scale = float(np.abs(X).max())
    score = X * (o.alpha / max(scale, np.finfo(float).tiny))
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
    obj = SmoothedBTLObjective(pairs, sigma=o.sigma, lam=lam, mu=o.mu, block_entries=block_entries)
    pt = obj.evaluate(out.L, out.R, cache=False)
    diag = PersonalRankingDiagnostics(
        method=o.method,
        rank=r,
        lambda_=lam,
        sigma=float(o.sigma),
        mu=float(o.mu),
        alpha=float(o.alpha),
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
        seed=o.seed,
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
