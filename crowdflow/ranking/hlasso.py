"""Huber-LASSO (HLASSO): outliers as a sparse γ at a fixed λ and along a decreasing λ path.

``(θ̂, γ̂) = argmin ½‖y − Xθ − γ‖²_W + λΣ_k w_k|γ_k|`` equals Huber regression with threshold λ and
splits (Prop. 1) into a LASSO on the cycle space, ``γ̂ = argmin ½‖P(y − γ)‖²_W + λΣ w_k|γ_k|``, solved by
FISTA with step 1 and adaptive restart (one Laplacian solve per iteration), and the LS fit
``θ̂ = L†XᵀW(y − γ̂)``. :func:`hlasso_path` follows λ down a geometric grid from ``λ_max = max|Py|`` with
warm starts and records the λ at which every row enters; :func:`_budget_fit` finds the largest λ whose
flagged weight reaches a budget.

See docs/methods/ranking.md §3.1–3.3 (model, split, Algorithm 1) and §3.4.3 (budget rule).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import scipy.sparse as sp

from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.least_squares import LaplacianSolver, _project_cycles, cycle_projector
from crowdflow.ranking.numerics import shrink, wdot
from crowdflow.ranking.options import HLASSO_MAX_ITER
from crowdflow.ranking.types import _rank_desc

__all__ = ["LassoFit", "LassoPath", "hlasso", "hlasso_path"]


@dataclass(frozen=True)
class LassoFit:
    """HLASSO solution at a fixed λ (docs/methods/ranking.md §3.2).

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
    sub-projection), so the step is 1 and the prox in the W-metric is ``shrink(·, λ)`` (docs/methods/ranking.md §3.3:
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


def hlasso(
    g: ComparisonGraph,
    lam: float,
    *,
    solver: LaplacianSolver | None = None,
    gamma0: np.ndarray | None = None,
    tol: float = 1e-10,
    max_iter: int = HLASSO_MAX_ITER,
) -> LassoFit:
    """HLASSO at a fixed λ via the split of Prop. 1 (docs/methods/ranking.md §3.2–3.3, Algorithm 1 steps 1–2, 4).

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
    gam, theta, it, conv, res = _fista(g.y, g.w, cycle_projector(g, solver), lam, gamma0, tol=tol, max_iter=max_iter)
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
    """HLASSO regularisation path on a decreasing λ grid (docs/methods/ranking.md §3.3 step 2).

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


def hlasso_path(
    g: ComparisonGraph,
    *,
    lambdas: np.ndarray | None = None,
    n_lambdas: int = 100,
    lambda_min_ratio: float = 1e-2,
    solver: LaplacianSolver | None = None,
    tol: float = 1e-10,
    max_iter: int = HLASSO_MAX_ITER,
) -> LassoPath:
    """HLASSO path from ``λ_max = max_k |(Py)_k|`` down a geometric grid, warm-started (docs/methods/ranking.md §3.3).

    The first row to enter is the one with the largest LS residual (docs/methods/ranking.md §3.2). Every row's
    entry λ is the largest λ with ``γ_k ≠ 0``, refined by linear interpolation of ``|r_k(λ)| − λ`` between grid
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
    op = cycle_projector(g, solver)
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
    """Largest λ whose flagged weight reaches ``budget·Σw`` (docs/methods/ranking.md §3.4.3), by bisection.

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
