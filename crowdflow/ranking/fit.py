"""Entry points of the ranking job: HodgeRank least squares, HLASSO and LBI fits that return the output tables.

* :func:`fit_hodgerank`: ``θ̂ = L†XᵀWy`` per connected component with the Hodge diagnostics;
* :func:`fit_hlasso`: Algorithm 1 — the HLASSO path, λ* by a rule, robust and debiased scores;
* :func:`fit_lbi`: Algorithms 2–4 — one LBI run gives the path and the early-stopped fit;
* :func:`fit_robust_hodgerank`: the dispatch between the two robust methods.

Identical rows are merged first (exact), the fit runs on the merged problem and the tables are expanded
back to the input rows. This module imports the algorithm modules; none of them imports it back.

See docs/methods/ranking.md §2–§4 and §7.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.ranking.cv import cv_lambda, cv_stop_time
from crowdflow.ranking.graph import ComparisonGraph, _graph_report, build_comparison_graph, group_identical_rows
from crowdflow.ranking.hlasso import LassoFit, _budget_fit, hlasso, hlasso_path
from crowdflow.ranking.hodge import hodge_decomposition, undetectable_rows
from crowdflow.ranking.lbi import lbi_alg2, lbi_alg3, sync_lbi
from crowdflow.ranking.lbi_path import StopRule
from crowdflow.ranking.least_squares import LaplacianSolver, hodgerank_scores
from crowdflow.ranking.scale import HUBER_A, HUBER_M, huber_concomitant_scale
from crowdflow.ranking.tables import _ranking_table, _row_columns, assemble_robust_result
from crowdflow.ranking.types import GraphReport, RankingResult, RobustRankingResult

logger = logging.getLogger(__name__)

__all__ = ["LambdaRule", "fit_hlasso", "fit_hodgerank", "fit_lbi", "fit_robust_hodgerank"]


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


def _group_or_identity(g: ComparisonGraph, group_identical: bool) -> tuple[ComparisonGraph, np.ndarray, np.ndarray]:
    if group_identical:
        return group_identical_rows(g)
    return g, np.arange(g.m, dtype=np.int64), np.ones(g.m)


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


def fit_lbi(
    comparisons: pd.DataFrame | ComparisonGraph,
    *,
    items: Sequence[Any] | None = None,
    allow_disconnected: bool = False,
    algorithm: Literal[2, 3, 4] = 3,
    kappa: float = 100.0,
    dt: float | None = None,
    stop_rule: StopRule = "budget",
    budget: float = 0.05,
    t_stop: float | None = None,
    sigma: float | None = None,
    t_max: float | None = None,
    max_iter: int | None = None,
    theta0: Literal["ls", "zero"] = "ls",
    n_workers: int = 2,
    group_identical: bool = True,
    debias: bool = True,
    cv_folds: int = 5,
    cv_rescale: Literal["sqrt", "linear"] = "sqrt",
    seed: int = 0,
    solver: Literal["auto", "splu", "cg"] = "auto",
    diagnostics: bool = True,
    checkpoint_every: int | None = None,
) -> RobustRankingResult:
    """Outlier detection and robust ranking by LBI (spec §4), returning the output tables.

    Parameters
    ----------
    comparisons : pandas.DataFrame or ComparisonGraph
    items, allow_disconnected : see :func:`crowdflow.ranking.hodge.fit_hodgerank`.
    algorithm : {2, 3, 4}
        Algorithm 2 (gradient θ-steps), 3 (exact θ; default: Δt = 1/κ whatever the degrees) or 4
        (Sync-LBI, ``n_workers`` threads).
    kappa, dt : float
        κ (default 100) and Δt (default 1/κ for Alg. 3, ``1/((λ_max(L)+1)κ)`` for Alg. 2/4).
    stop_rule : {'budget', 'time', 'discrepancy', 'cv', 'none'}
        Early-stopping rule (module docstring). ``'discrepancy'`` uses ``sigma`` or, if None, the Huber
        concomitant scale estimate. ``'cv'`` needs ``t_max`` (the CV horizon).
    budget, t_stop, sigma : float
        Rule parameters.
    t_max : float, optional
        Extend the path to this time (entry times for more rows).
    max_iter : int, optional
        Iteration cap (default 100 000 for Alg. 3, 200 000 otherwise).
    theta0 : {'ls', 'zero'}
        Initial θ for Alg. 2/4.
    group_identical : bool
        Merge identical rows first (exactly equivalent; spec §1.3).
    debias : bool
        Report LS-refit scores without the flagged rows as ``score``.

    Returns
    -------
    RobustRankingResult
    """
    g, rep = _prepare(comparisons, items, allow_disconnected)
    gf, group, sign = _group_or_identity(g, group_identical)
    sol = LaplacianSolver.from_graph(gf, method=solver)
    theta_ls = hodgerank_scores(gf, sol)
    params: dict[str, Any] = {
        "method": "lbi",
        "algorithm": int(algorithm),
        "kappa": float(kappa),
        "stop_rule": stop_rule,
        "solver": sol.method,
        "group_identical": group_identical,
    }
    if stop_rule == "discrepancy" and sigma is None:
        est = huber_concomitant_scale(gf, M=HUBER_M, a=HUBER_A, solver=sol)
        sigma = est.sigma
        params["sigma_source"] = "huber_concomitant"
    if stop_rule == "cv":
        if t_max is None:
            raise ValueError("stop_rule='cv' needs t_max (the cross-validation horizon)")
        dt_cv = dt if (dt is not None and algorithm == 3) else 1.0 / kappa
        t_stop, _ = cv_stop_time(gf, kappa=kappa, dt=dt_cv, t_max=t_max, folds=cv_folds, seed=seed, rescale=cv_rescale)
        params.update(cv_folds=cv_folds, cv_rescale=cv_rescale)
    common: dict[str, Any] = {
        "kappa": kappa,
        "dt": dt,
        "stop_rule": stop_rule,
        "budget": budget,
        "t_stop": t_stop,
        "sigma": sigma,
        "t_max": t_max,
        "checkpoint_every": checkpoint_every,
    }
    if algorithm == 3:
        path = lbi_alg3(gf, solver=sol, max_iter=max_iter or 100_000, **common)
    elif algorithm == 2:
        path = lbi_alg2(gf, solver=sol, theta0=theta0, max_iter=max_iter or 200_000, **common)
    elif algorithm == 4:
        path = sync_lbi(gf, solver=sol, theta0=theta0, n_workers=n_workers, max_iter=max_iter or 200_000, **common)
        params["n_workers"] = n_workers
    else:
        raise ValueError(f"algorithm must be 2, 3 or 4, got {algorithm!r}")
    params.update(
        dt=path.dt,
        h=path.h,
        budget=budget,
        t_stop=path.stop_time,
        stop_iter=path.stop_iter,
        n_iter=path.n_iter,
        stop_fired=path.stop_fired,
        sigma=sigma,
        t_max=t_max,
    )
    theta_rob = path.theta
    if algorithm == 3:
        theta_rob = sol.solve(gf.divergence(gf.y - path.gamma))
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
        int(np.count_nonzero(path.gamma)),
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
        gamma_fit=path.gamma,
        entry_time_fit=path.entry_time,
        order_key_fit=path.order_key,
        entry_sign_fit=path.entry_sign,
        trace=path.trace,
        checkpoints=cps,
        params=params,
        converged=path.stop_fired,
        debias=debias,
        diagnostics=diagnostics,
        solver_method=solver,
    )


def fit_robust_hodgerank(
    comparisons: pd.DataFrame | ComparisonGraph, *, method: Literal["lbi", "hlasso"] = "lbi", **kwargs: Any
) -> RobustRankingResult:
    """Dispatch to :func:`crowdflow.ranking.lbi.fit_lbi` (default) or :func:`fit_hlasso`."""
    if method == "hlasso":
        return fit_hlasso(comparisons, **kwargs)
    if method == "lbi":
        return fit_lbi(comparisons, **kwargs)
    raise ValueError(f"unknown robust ranking method {method!r} (use 'lbi' or 'hlasso')")
