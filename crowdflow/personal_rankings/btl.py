"""Low-rank BTL fit at one rank, the paper's λ and initialization, and held-out rank selection.

:func:`fit_low_rank_btl` minimizes ``F(X) = 𝓛(X) + λ μ log Σ exp(X²/μ)`` over rank-r factors with
L-BFGS (default) or the Riemannian trust region, from the initialization of :func:`paper_init`
(i.i.d. normal factors scaled so that ``‖L0 R0ᵀ‖_∞ = 0.95``) with ``λ = r² √K ln K``
(:func:`paper_lambda`, ``K = max(m, n)``). :func:`select_rank` picks a rank from a small grid by the
held-out negative log-likelihood (or accuracy) on a split from :func:`split_holdout` that keeps
every user and item in training.

Method and choices: docs/methods/personal_rankings.md §2.2, §2.5–2.7 and §2.9.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.contracts.errors import DegenerateInput
from crowdflow.personal_rankings.objective import DEFAULT_BLOCK_ENTRIES, SmoothedBTLObjective, pair_nll
from crowdflow.personal_rankings.options import PersonalRankingsOptions
from crowdflow.personal_rankings.solvers import SolverOutput, lbfgs_factors, riemannian_trust_region
from crowdflow.personal_rankings.types import DEFAULT_MAX_ITER, PairData, Tangent

logger = logging.getLogger(__name__)

__all__ = ["fit_low_rank_btl", "paper_init", "paper_lambda", "select_rank", "split_holdout"]


def paper_lambda(m: int, n: int, rank: int, K: int | None = None) -> float:
    """The paper's regularization weight ``λ = r² √K ln K`` (docs/methods/personal_rankings.md §2.2, §8).

    Parameters
    ----------
    m, n : int
        Numbers of users and items.
    rank : int
        Target rank ``r``.
    K : int, optional
        Size parameter; default ``max(m, n)`` (our reading for ``m ≠ n``, docs/methods/personal_rankings.md §8).

    Returns
    -------
    float
        ``r² · sqrt(K) · ln K`` (0 when K = 1).
    """
    k = float(max(m, n) if K is None else K)
    if k < 1:
        raise ValueError(f"K must be >= 1, got {K}")
    return float(float(rank) ** 2 * np.sqrt(k) * np.log(k))


def paper_init(m: int, n: int, rank: int, seed: int | np.random.Generator = 0, target: float = 0.95) -> Tangent:
    """Initial factors: i.i.d. N(0,1) entries scaled so that ``‖L0 R0ᵀ‖_∞ = target``.

    The paper's start, shared by every solver (docs/methods/personal_rankings.md §2.7).

    Parameters
    ----------
    m, n, rank : int
        Shapes ``L0 ∈ R^{m×r}``, ``R0 ∈ R^{n×r}``.
    seed : int or numpy.random.Generator
        Randomness.
    target : float
        ``‖X0‖_∞`` after scaling (0.95 in the paper).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``(L0, R0)``.
    """
    rng = np.random.default_rng(seed)
    L0 = rng.standard_normal((m, rank))
    R0 = rng.standard_normal((n, rank))
    mx = float(np.abs(L0 @ R0.T).max()) if m * n <= DEFAULT_BLOCK_ENTRIES else _blocked_absmax(L0, R0)
    c = np.sqrt(target / mx)
    return L0 * c, R0 * c


def _blocked_absmax(L: np.ndarray, R: np.ndarray, block_entries: int = DEFAULT_BLOCK_ENTRIES) -> float:
    rb = max(1, block_entries // max(1, R.shape[0]))
    out = 0.0
    for i0 in range(0, L.shape[0], rb):
        out = max(out, float(np.abs(L[i0 : i0 + rb] @ R.T).max()))
    return out


def fit_low_rank_btl(
    pairs: PairData,
    rank: int,
    options: PersonalRankingsOptions | None = None,
    *,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    block_entries: int = DEFAULT_BLOCK_ENTRIES,
    solver_options: dict[str, Any] | None = None,
    warn: bool = True,
    **overrides: Any,
) -> tuple[SolverOutput, float]:
    """Minimize the smoothed objective (docs/methods/personal_rankings.md §2.2) over rank-``rank`` factors.

    Parameters
    ----------
    pairs : PairData
        Encoded comparisons.
    rank : int
        Target rank r, ``1 ≤ r ≤ min(m, n)`` (``options.rank`` is not read: a rank grid is resolved by
        :func:`select_rank` first).
    options : PersonalRankingsOptions, optional
        The model and solver settings used here: ``method`` (L-BFGS on the factors or the Riemannian
        trust region), ``sigma``, the λ rule (``lambda_``, or ``lambda_scale · r² √K ln K`` with ``K``),
        ``mu``, ``max_iter`` (default 2000 for L-BFGS, 500 for RTR), ``gtol`` (RTR: Riemannian norm,
        absolute; L-BFGS: scipy's max-abs projected gradient), ``seed`` of the paper's initialization
        and ``time_limit``. Default: all defaults. See docs/methods/personal_rankings.md §2.2 and §2.5–2.7.
    init : (numpy.ndarray, numpy.ndarray), optional
        Explicit initial factors (overrides ``seed``).
    block_entries : int
        Row-block size of the dense regularizer evaluation (memory only; docs/methods/personal_rankings.md §2.10).
    solver_options : dict, optional
        Expert keyword arguments of :func:`~crowdflow.personal_rankings.solvers.riemannian_trust_region` /
        :func:`~crowdflow.personal_rankings.solvers.lbfgs_factors` (trust-region radii, tCG and L-BFGS
        memory settings).
    warn : bool
        Emit a ``RuntimeWarning`` when the solver stops without converging.
    **overrides
        Fields of :class:`PersonalRankingsOptions` replacing those of ``options`` (validated the same way).

    Returns
    -------
    (SolverOutput, float)
        Solver output and the λ used.
    """
    o = PersonalRankingsOptions.resolve(options, **overrides)
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
    method = o.method
    lam = float(o.lambda_) if o.lambda_ is not None else o.lambda_scale * paper_lambda(m, n, rank, o.K)
    obj = SmoothedBTLObjective(pairs, sigma=o.sigma, lam=lam, mu=o.mu, block_entries=block_entries)
    if init is None:
        L0, R0 = paper_init(m, n, rank, seed=o.seed)
    else:
        L0, R0 = (np.array(init[0], dtype=float), np.array(init[1], dtype=float))
        if L0.shape != (m, rank) or R0.shape != (n, rank):
            raise ValueError(f"init shapes must be ({m}, {rank}) and ({n}, {rank}); got {L0.shape}, {R0.shape}")
    opts = dict(solver_options or {})
    max_iter = o.max_iter or DEFAULT_MAX_ITER[method]
    if method == "lbfgs":
        out = lbfgs_factors(obj, L0, R0, max_iter=max_iter, gtol=o.gtol, time_limit=o.time_limit, **opts)
    else:
        out = riemannian_trust_region(obj, L0, R0, max_iter=max_iter, gtol=o.gtol, time_limit=o.time_limit, **opts)
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


def split_holdout(pairs: PairData, fraction: float, seed: int) -> tuple[PairData, PairData]:
    """Random held-out split of (user, pair) groups that keeps every user and item in training.

    Held-out groups whose user or one of whose items would have no training comparison are returned
    to the training set (one vectorised pass).

    Parameters
    ----------
    pairs : PairData
        All comparisons.
    fraction : float
        Target held-out fraction of pair groups, in (0, 1) (the fit passes ``options.holdout_fraction``).
    seed : int
        Randomness (the fit passes ``options.seed``).

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
    nll = float(pair_nll(d, test.w_pos, test.w_neg) / wt.sum())
    correct = np.where(d > 0, test.w_pos, np.where(d < 0, test.w_neg, 0.5 * wt))
    return nll, float(correct.sum() / wt.sum())


def select_rank(
    pairs: PairData,
    ranks: Sequence[int],
    options: PersonalRankingsOptions | None = None,
    *,
    block_entries: int = DEFAULT_BLOCK_ENTRIES,
    solver_options: dict[str, Any] | None = None,
    **overrides: Any,
) -> pd.DataFrame:
    """Held-out choice of the rank among a small grid.

    Fits on a training split (:func:`split_holdout`) for every rank (λ follows its own rule for each r)
    and scores the held-out comparisons by mean negative log-likelihood and winner accuracy.

    Parameters
    ----------
    pairs : PairData
        All comparisons.
    ranks : sequence of int
        Candidate ranks (``options.rank`` is not read).
    options : PersonalRankingsOptions, optional
        ``holdout_fraction`` (held-out fraction of (user, pair) groups), ``seed`` (split and
        initialization), ``rank_criterion``: smallest held-out NLL (default) or largest held-out accuracy
        (ties → smaller rank; with the fixed σ = 0.18 the fitted probabilities can be over-confident, and
        NLL then favours small ranks even where accuracy prefers larger ones, seen on Zappos), and the
        model and solver settings of each fit (:func:`fit_low_rank_btl`).
    block_entries, solver_options :
        Passed to :func:`fit_low_rank_btl`.
    **overrides
        Fields of :class:`PersonalRankingsOptions` replacing those of ``options``.

    Returns
    -------
    pandas.DataFrame
        ``rank, lambda_, heldout_nll, heldout_accuracy, n_heldout, converged, selected`` (one row per
        rank; ``selected`` marks the chosen rank).
    """
    o = PersonalRankingsOptions.resolve(options, **overrides)
    ranks = sorted({int(r) for r in ranks})
    if not ranks:
        raise ValueError("ranks must not be empty")
    train, test = split_holdout(pairs, o.holdout_fraction, o.seed)
    if test.n_pairs == 0:
        raise DegenerateInput(
            "held-out split is empty (too few comparisons per user/item for rank selection); give one rank",
            "holdout_empty",
        )
    rows = []
    for r in ranks:
        if r > min(pairs.m, pairs.n):
            continue
        out, lam = fit_low_rank_btl(train, r, o, block_entries=block_entries, solver_options=solver_options)
        nll, acc = _heldout_metrics(out.L, out.R, test, o.sigma)
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
    key = tab["heldout_nll"].to_numpy() if o.rank_criterion == "nll" else -tab["heldout_accuracy"].to_numpy()
    tab["selected"] = np.arange(len(tab)) == int(np.argmin(key))  # first minimum = smallest rank
    logger.info("rank selection:\n%s", tab.to_string(index=False))
    return tab
