"""Entry points of the ranking job: one dispatching fit and the three methods, each returning its tables.

* :func:`fit_ranking`: the job's entry point — reads :class:`~crowdflow.ranking.options.RankingOptions`
  and runs the method ``outliers`` names; its result's ``tables`` are the job's output tables;
* :func:`fit_hodgerank`: ``θ̂ = L†XᵀWy`` per connected component with the Hodge diagnostics;
* :func:`fit_hlasso`: Algorithm 1 — the HLASSO path, λ* by a rule, robust and debiased scores;
* :func:`fit_lbi`: Algorithms 2–4 — one LBI run gives the path and the early-stopped fit.

All four take ``options=`` (a :class:`RankingOptions`, default: all defaults) and keyword overrides of
its fields; the item universe ``items`` is the only other argument. Identical rows are merged first
(exact), the fit runs on the merged problem and the tables are expanded back to the input rows. This
module imports the algorithm modules; none of them imports it back.

See docs/methods/ranking.md §2–§4 (methods), §6 (options) and §7 (tables).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.contracts.errors import DegenerateInput
from crowdflow.ranking.graph import ComparisonGraph, _graph_report, build_comparison_graph, group_identical_rows
from crowdflow.ranking.hlasso import LassoFit, _budget_fit, hlasso, hlasso_path
from crowdflow.ranking.hodge import hodge_decomposition, undetectable_rows
from crowdflow.ranking.lbi import lbi
from crowdflow.ranking.least_squares import LaplacianSolver, hodgerank_scores
from crowdflow.ranking.options import RankingOptions
from crowdflow.ranking.rows import fitted_and_residual
from crowdflow.ranking.scale import AdaptiveLambda, adaptive_lambda, huber_concomitant_scale, law_gamma
from crowdflow.ranking.tables import _ranking_table, _row_columns, assemble_robust_result
from crowdflow.ranking.trimmed import TrimmedRankingResult, fit_trimmed_tables
from crowdflow.ranking.types import GraphReport, RankingResult, RobustRankingResult

logger = logging.getLogger(__name__)

__all__ = ["fit_hlasso", "fit_hodgerank", "fit_lbi", "fit_ranking"]


def _prepare(
    comparisons: pd.DataFrame | ComparisonGraph, items: Sequence[Any] | None, allow_disconnected: bool
) -> tuple[ComparisonGraph, GraphReport]:
    g = comparisons if isinstance(comparisons, ComparisonGraph) else build_comparison_graph(comparisons, items=items)
    rep = _graph_report(g)
    if rep.n_components > 1 and not allow_disconnected:
        raise DegenerateInput(
            "the comparison graph is not connected: "
            + rep.describe()
            + ". Scores are only comparable within a component; set the option allow_disconnected (the "
            "default) to rank every component separately (each item then carries its component id).",
            reason="disconnected",
        )
    return g, rep


def _group_or_identity(g: ComparisonGraph, group_identical: bool) -> tuple[ComparisonGraph, np.ndarray, np.ndarray]:
    if group_identical:
        return group_identical_rows(g)
    return g, np.arange(g.m, dtype=np.int64), np.ones(g.m)


def fit_ranking(
    comparisons: pd.DataFrame | ComparisonGraph,
    options: RankingOptions | None = None,
    *,
    items: Sequence[Any] | None = None,
    **overrides: Any,
) -> RankingResult | RobustRankingResult | TrimmedRankingResult:
    """Global ranking with the outlier search the options name (the ranking job's entry point).

    ``outliers='lbi'`` runs :func:`fit_lbi`, ``'hlasso'`` :func:`fit_hlasso`, ``'trimmed'`` the trimmed rule of a
    partitioned run (:mod:`crowdflow.ranking.trimmed`) and ``'none'`` :func:`fit_hodgerank`, all with the same
    options.

    Parameters
    ----------
    comparisons : pandas.DataFrame or ComparisonGraph
        One row per judgement, in any layout :func:`~crowdflow.contracts.comparisons.canonical_comparisons`
        accepts, or a prepared graph.
    options : RankingOptions, optional
        The job's options (default: all defaults, the same as a pipeline spec without a ``ranking:`` section).
    items : sequence, optional
        Item universe (never-compared items become isolated components).
    **overrides
        Fields of :class:`RankingOptions` that replace those of ``options`` (validated the same way).

    Returns
    -------
    RankingResult, RobustRankingResult or TrimmedRankingResult
        ``tables`` holds the job's output tables (docs/methods/ranking.md §7), ``params`` the run's
        parameters.

    Raises
    ------
    pydantic.ValidationError
        An unknown option, a value out of range or a combination the fit cannot run.
    ValueError
        Comparisons that cannot be read (:func:`~crowdflow.contracts.comparisons.canonical_comparisons`);
        :class:`~crowdflow.contracts.errors.DegenerateInput` for data the chosen options cannot fit.
    """
    o = RankingOptions.resolve(options, **overrides)
    if o.outliers == "none":
        return fit_hodgerank(comparisons, o, items=items)
    if o.outliers == "trimmed":
        if isinstance(comparisons, ComparisonGraph):
            raise ValueError("outliers='trimmed' fits a comparisons table, not a prepared graph")
        return fit_trimmed_tables(comparisons, o, items=items)
    if o.outliers == "hlasso":
        return fit_hlasso(comparisons, o, items=items)
    return fit_lbi(comparisons, o, items=items)


def fit_hodgerank(
    comparisons: pd.DataFrame | ComparisonGraph,
    options: RankingOptions | None = None,
    *,
    items: Sequence[Any] | None = None,
    **overrides: Any,
) -> RankingResult:
    """HodgeRank least-squares ranking with Hodge diagnostics (docs/methods/ranking.md §2).

    ``θ̂ = L†XᵀWy`` per connected component (sum zero inside each component). Uses the options
    ``allow_disconnected``, ``solver`` and ``diagnostics``.

    Parameters
    ----------
    comparisons : pandas.DataFrame or ComparisonGraph
        Canonical comparisons (``annotator, item_a, item_b, outcome [, weight]``) or winner form.
    options : RankingOptions, optional
        Default: all defaults.
    items : sequence, optional
        Item universe (never-compared items become isolated components).
    **overrides
        Fields of :class:`RankingOptions`.

    Returns
    -------
    RankingResult

    Raises
    ------
    DegenerateInput
        A disconnected graph with ``allow_disconnected=False`` (no global rank exists).
    """
    o = RankingOptions.resolve(options, **overrides)
    g, rep = _prepare(comparisons, items, o.allow_disconnected)
    sol = LaplacianSolver.from_graph(g, method=o.solver)
    theta = hodgerank_scores(g, sol)
    undet = undetectable_rows(g)
    if o.diagnostics:
        diag = hodge_decomposition(g, theta, solver=sol, undetectable=undet).table
    else:
        diag = pd.DataFrame({"component": np.arange(g.n_components, dtype=np.int64)})
    fitted, residual = fitted_and_residual(theta, g.i, g.j, g.y)  # θ_i − θ_j and y − (θ_i − θ_j) in one pass
    # copy=False: fresh arrays (outcome and weight copied) are not stacked into 2-D blocks (0.2 s per column at 10^7)
    res = pd.DataFrame(
        {
            **_row_columns(g, comparisons if isinstance(comparisons, pd.DataFrame) else None),
            "fitted": fitted,
            "residual": residual,
            "undetectable": undet,
        },
        copy=False,
    )
    params = {"method": "ls", "solver": sol.method, "n_items": g.n, "n_rows": g.m, "n_components": g.n_components}
    return RankingResult(ranking=_ranking_table(g, theta), residuals=res, diagnostics=diag, graph=rep, params=params)


def fit_hlasso(
    comparisons: pd.DataFrame | ComparisonGraph,
    options: RankingOptions | None = None,
    *,
    items: Sequence[Any] | None = None,
    **overrides: Any,
) -> RobustRankingResult:
    """Outlier detection and robust ranking by HLASSO (docs/methods/ranking.md §3, Algorithm 1).

    1. ``P = I − XL†XᵀW`` as an operator (one Laplacian solve per application);
    2. the LASSO path ``γ̂(λ) = argmin ½‖P(y − γ)‖²_W + λΣw_k|γ_k|`` from ``λ_max`` down (warm starts);
    3. λ* by ``lambda_rule``: ``'adaptive'`` (the default: λ* = t*·σ̂ with the trimmed noise level and a
       Benjamini–Hochberg cut, or the upset-curve cut for ±1 outcomes, docs/methods/ranking.md §3.4.2),
       ``'budget'`` (flag the first ``budget`` share of the weight along the path, including the crossing
       group; λ* refined by bisection), ``'concomitant'`` (Huber scale, λ* = Mσ̂), ``'fixed'`` (``lam``) or
       ``'magnitude'`` (λ = 1 for ±1 data);
    4. outliers ``γ̂_k(λ*) ≠ 0``, robust scores ``θ̂ = L†XᵀW(y − γ̂)`` (= Huber regression);
    5. debiased scores: LS refit without the flagged rows ("LASSO+L2").

    Identical rows are merged first when ``group_identical`` (exactly equivalent, docs/methods/ranking.md §1.3).
    ``entry_time`` in the outlier table is ``1/λ_entry``.
    The method is HLASSO whatever ``outliers`` says (:func:`fit_ranking` dispatches on it).

    Parameters
    ----------
    comparisons : pandas.DataFrame or ComparisonGraph
    options : RankingOptions, optional
        Default: all defaults. Uses ``lambda_rule``, ``fdr_q``, ``t_min``, ``lam``, ``budget``,
        ``n_lambdas``, ``lambda_min_ratio``, ``huber_m``, ``scale_a``, ``tol``, ``max_iter`` and the common
        fields.
    items : sequence, optional
        Item universe.
    **overrides
        Fields of :class:`RankingOptions`.

    Returns
    -------
    RobustRankingResult
    """
    o = RankingOptions.resolve(options, **overrides)
    tol, max_iter, lambda_rule = o.tol, o.hlasso_max_iter(), o.lambda_rule
    _warn_unused_budget(o, lambda_rule)
    g, rep = _prepare(comparisons, items, o.allow_disconnected)
    gf, group, sign = _group_or_identity(g, o.group_identical)
    sol = LaplacianSolver.from_graph(gf, method=o.solver)
    theta_ls = hodgerank_scores(gf, sol)
    path = hlasso_path(
        gf, n_lambdas=o.n_lambdas, lambda_min_ratio=o.lambda_min_ratio, solver=sol, tol=tol, max_iter=max_iter
    )
    params: dict[str, Any] = {
        "method": "hlasso",
        "lambda_rule": lambda_rule,
        "lambda_max": path.lambda_max,
        "n_lambdas": int(path.lambdas.size),
        "lambda_min": float(path.lambdas[-1]),
        "solver": sol.method,
        "group_identical": o.group_identical,
    }
    converged = bool(path.converged.all())

    def nearest(lmb: float) -> np.ndarray:
        k = int(np.argmin(np.abs(path.lambdas - lmb)))
        return path.gammas[:, k].toarray().ravel()

    if path.lambda_max <= 0:
        fit = LassoFit(0.0, np.zeros(gf.m), theta_ls, 0, True, 0.0)
        logger.info("data are exactly consistent with a global ranking: no outliers")
    elif lambda_rule == "adaptive":
        ad = adaptive_lambda(gf, solver=sol, q=o.fdr_q, t_min=o.t_min, rows=g, binary_rule=o.binary_rule)
        params.update(_adaptive_params(ad, o))
        if ad.law is not None:  # ±1 outcomes: the law's flags, scores LS without them
            th_law, gam_law = law_gamma(gf, ad.law.flags, theta_ls)
            fit = LassoFit(ad.lam, gam_law, th_law, 0, True, 0.0)
        elif ad.lam < path.lambda_max:
            fit = hlasso(gf, ad.lam, solver=sol, gamma0=nearest(ad.lam), tol=tol, max_iter=max_iter)
        else:  # nothing to flag (HLASSO at λ ≥ λ_max is the least-squares fit)
            fit = LassoFit(path.lambda_max, np.zeros(gf.m), theta_ls, 0, True, 0.0)
    elif lambda_rule == "budget":
        fit = _budget_fit(gf, sol, path, o.budget, tol=tol, max_iter=max_iter)
        params["budget"] = o.budget
    elif lambda_rule == "concomitant":
        est = huber_concomitant_scale(gf, M=o.huber_m, a=o.scale_a, solver=sol, tol=tol)
        fit = est.fit
        converged &= est.converged
        params.update(sigma=est.sigma, huber_m=o.huber_m, scale_a=o.scale_a, scale_iterations=est.n_iter)
    else:  # 'fixed' (lam is set: checked by RankingOptions) or 'magnitude'
        lam_f = 1.0 if lambda_rule == "magnitude" else o.lam
        assert lam_f is not None  # RankingOptions requires lam with lambda_rule='fixed'
        fit = hlasso(gf, lam_f, solver=sol, gamma0=nearest(lam_f), tol=tol, max_iter=max_iter)
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
        debias=o.debias,
        diagnostics=o.diagnostics,
        solver_method=o.solver,
    )


def _warn_unused_budget(o: RankingOptions, rule: str) -> None:
    """Log a warning when ``budget`` was set but the rule in force does not read it (it was the default rule)."""
    if "budget" in o.model_fields_set and rule != "budget":
        logger.warning(
            "budget=%g is ignored: the outlier rule is %r (the default is the adaptive rule since crowdflow "
            "issue #20); set lambda_rule / stop_rule to 'budget' to flag a fixed share",
            o.budget,
            rule,
        )


def _adaptive_params(ad: AdaptiveLambda, o: RankingOptions) -> dict[str, Any]:
    """The run parameters of the adaptive rule (an infinite λ*, nothing to flag, is recorded as None)."""
    fin = math.isfinite(ad.lam)
    out: dict[str, Any] = {
        "sigma": ad.sigma,
        "t": ad.t if fin and math.isfinite(ad.t) else None,
        "adaptive_lambda": ad.lam if fin else None,
        "scale_start": ad.scale.start,
        "outcome_kind": ad.outcome,
        "fdr_q": o.fdr_q,
        "t_min": o.t_min,
    }
    if ad.law is not None:  # the ±1 law's fit (docs/methods/ranking.md §3.4.2)
        out.update(
            law_link=ad.law.fit.link,
            law_tie_threshold=ad.law.fit.tau,
            law_reversed_share=ad.law.eps,
            law_flagged=int(ad.law.flags.sum()),
        )
    return out


def _inv(x: np.ndarray | float) -> np.ndarray:
    """``1/x`` with ``1/0 = inf`` (time ↔ 1/λ, docs/methods/ranking.md §4)."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(x > 0, 1.0 / np.where(x > 0, x, 1.0), np.inf)


def fit_lbi(
    comparisons: pd.DataFrame | ComparisonGraph,
    options: RankingOptions | None = None,
    *,
    items: Sequence[Any] | None = None,
    **overrides: Any,
) -> RobustRankingResult:
    """Outlier detection and robust ranking by LBI (docs/methods/ranking.md §4), returning the output tables.

    The method is LBI whatever ``outliers`` says (:func:`fit_ranking` dispatches on it).

    Parameters
    ----------
    comparisons : pandas.DataFrame or ComparisonGraph
    options : RankingOptions, optional
        Default: all defaults. Uses ``algorithm`` (2: gradient θ-steps; 3: exact θ, Δt = 1/κ whatever the
        degrees; 4: Sync-LBI on ``n_workers`` threads), ``kappa`` and ``dt`` (default 1/κ for Alg. 3,
        ``1/((λ_max(L)+1)κ)`` for Alg. 2/4), ``stop_rule`` (default ``'adaptive'``: the time 1/λ* of the
        adaptive rule with ``fdr_q`` and ``t_min``) with ``budget``, ``t_stop``, ``sigma`` (or, if empty,
        the Huber concomitant scale estimate with ``huber_m``, ``scale_a``) and ``t_max`` (the path is
        extended to it), ``max_iter``, ``theta0``, ``checkpoint_every`` and the common fields.
    items : sequence, optional
        Item universe.
    **overrides
        Fields of :class:`RankingOptions`.

    Returns
    -------
    RobustRankingResult
    """
    o = RankingOptions.resolve(options, **overrides)
    algorithm, kappa, dt, stop_rule, sigma, t_stop = o.algorithm, o.kappa, o.dt, o.stop_rule, o.sigma, o.t_stop
    _warn_unused_budget(o, stop_rule)
    g, rep = _prepare(comparisons, items, o.allow_disconnected)
    gf, group, sign = _group_or_identity(g, o.group_identical)
    sol = LaplacianSolver.from_graph(gf, method=o.solver)
    theta_ls = hodgerank_scores(gf, sol)
    params: dict[str, Any] = {
        "method": "lbi",
        "algorithm": int(algorithm),
        "kappa": float(kappa),
        "stop_rule": stop_rule,
        "solver": sol.method,
        "group_identical": o.group_identical,
    }
    if stop_rule == "discrepancy" and sigma is None:
        est = huber_concomitant_scale(gf, M=o.huber_m, a=o.scale_a, solver=sol, tol=o.tol)
        sigma = est.sigma
        params["sigma_source"] = "huber_concomitant"
    lbi_rule = stop_rule
    ad: AdaptiveLambda | None = None
    if stop_rule == "adaptive":
        ad = adaptive_lambda(gf, solver=sol, q=o.fdr_q, t_min=o.t_min, rows=g, binary_rule=o.binary_rule)
        t_stop, lbi_rule = ad.t_stop, "time"
        params.update(_adaptive_params(ad, o))
    per_algorithm: dict[str, Any] = {} if algorithm == 3 else {"theta0": o.theta0}
    if algorithm == 4:
        per_algorithm["n_workers"] = o.n_workers
        params["n_workers"] = o.n_workers
    path = lbi(
        gf,
        algorithm=algorithm,
        solver=sol,
        max_iter=o.lbi_max_iter(),
        kappa=kappa,
        dt=dt,
        stop_rule=lbi_rule,
        budget=o.budget,
        t_stop=t_stop,
        sigma=sigma,
        t_max=o.t_max,
        checkpoint_every=o.checkpoint_every,
        **per_algorithm,
    )
    params.update(
        dt=path.dt,
        h=path.h,
        budget=o.budget,
        t_stop=path.stop_time,
        stop_iter=path.stop_iter,
        n_iter=path.n_iter,
        stop_fired=path.stop_fired,
        sigma=sigma if stop_rule != "adaptive" else params["sigma"],
        t_max=o.t_max,
    )
    theta_rob, gamma_fit = path.theta, path.gamma
    if algorithm == 3:
        theta_rob = sol.solve(gf.divergence(gf.y - path.gamma))
    if ad is not None and ad.law is not None:  # ±1 outcomes: the law's flags, scores LS without them
        theta_rob, gamma_fit = law_gamma(gf, ad.law.flags, theta_ls)
    logger.info(
        "LBI (algorithm %s, kappa=%g, dt=%.3g): stop rule %r at t=%.4g (iteration %d, fired=%s); "
        "%d of %d fitted rows flagged",
        algorithm,
        kappa,
        path.dt,
        stop_rule,
        path.stop_time,
        path.stop_iter,
        path.stop_fired,
        int(np.count_nonzero(gamma_fit)),
        gf.m,
    )
    cps = [(i, k * path.dt, path.checkpoint_gammas[:, i]) for i, k in enumerate(path.checkpoint_iters)]
    return assemble_robust_result(
        method="lbi",
        g=g,
        rep=rep,
        gf=gf,
        group=group,
        sign=sign,
        theta_ls=theta_ls,
        theta_robust=theta_rob,
        gamma_fit=gamma_fit,
        entry_time_fit=path.entry_time,
        order_key_fit=path.order_key,
        entry_sign_fit=path.entry_sign,
        trace=path.trace,
        checkpoints=cps,
        params=params,
        converged=path.stop_fired,
        debias=o.debias,
        diagnostics=o.diagnostics,
        solver_method=o.solver,
    )
