"""Huber's concomitant scale: the noise level σ̂ that sets ``λ* = M·σ̂``, and the theory value of λ.

Minimises ``Σ_k w_k σ H_M((θ_i − θ_j − y_k)/σ) + a(Σw)σ`` over ``(θ, σ)`` (jointly convex) by alternating
HLASSO at ``λ = Mσ`` with the 1-D root of ``Σ_k w_k min(r_k²/σ², M²) = a·Σw``. ``M = 1.35``;
``a = E[min(Z², M²)] = 0.7126`` makes σ̂ consistent under Gaussian noise (``a = 1`` is the paper's
literal choice and underestimates σ). :func:`theory_lambda` is the λ̄ of the support-recovery theorem
(simulations only: it needs σ and the identifiability constants).

See docs/methods/ranking.md §3.4.1 (concomitant scale) and §3.4.5 (theory λ).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.hlasso import LassoFit, hlasso
from crowdflow.ranking.least_squares import LaplacianSolver, hodgerank_scores
from crowdflow.ranking.options import HUBER_A, HUBER_M

__all__ = ["ScaleEstimate", "huber_concomitant_scale", "theory_lambda"]


@dataclass(frozen=True)
class ScaleEstimate:
    """Huber concomitant scale estimate (docs/methods/ranking.md §3.4.1).

    Attributes
    ----------
    sigma : float
        σ̂.
    lam : float
        ``λ* = M·σ̂``.
    fit : LassoFit
        HLASSO at λ*.
    n_iter : int
        Outer alternations.
    converged : bool
    trace : numpy.ndarray
        σ after every alternation.
    """

    sigma: float
    lam: float
    fit: LassoFit
    n_iter: int
    converged: bool
    trace: np.ndarray


def _solve_scale(r: np.ndarray, w: np.ndarray, M: float, a: float) -> float:
    """Root σ of ``Σ w_k min(r_k²/σ², M²) = a·Σw`` (decreasing in σ); 0 if no positive root."""
    from scipy.optimize import brentq

    W = w.sum()
    r2 = r * r
    if M * M * w[r2 > 0].sum() <= a * W:
        return 0.0
    f: Callable[[float], float] = lambda s: float(np.sum(w * np.minimum(r2 / (s * s), M * M)) - a * W)  # noqa: E731
    hi = float(np.sqrt(np.sum(w * r2) / (a * W))) * 1.0001 + 1e-300
    lo = hi
    while f(lo) <= 0:
        lo *= 0.5
    return float(brentq(f, lo, hi, xtol=1e-15, rtol=1e-13, maxiter=500))


def huber_concomitant_scale(
    g: ComparisonGraph,
    *,
    M: float = HUBER_M,
    a: float = HUBER_A,
    solver: LaplacianSolver | None = None,
    sigma0: float | None = None,
    scale_tol: float = 1e-8,
    scale_max_iter: int = 200,
    tol: float = 1e-10,
) -> ScaleEstimate:
    """Huber's concomitant scale (Proposal 2) for choosing λ (docs/methods/ranking.md §3.4.1).

    Minimises ``Σ_k w_k σ H_M((θ_i − θ_j − y_k)/σ) + a(Σw)σ`` over ``(θ, σ)`` (jointly convex,
    ``H_M = 2ρ_M``) by alternating (i) HLASSO at ``λ = Mσ`` (θ step) and (ii) the σ-stationarity equation
    ``Σ_k w_k min(r_k²/σ², M²) = a·Σw`` with the full residual ``r = y − Xθ`` (monotone 1-D root).
    Stopping rule: relative change of σ ≤ ``scale_tol``; cap ``scale_max_iter`` (RuntimeWarning).

    Parameters
    ----------
    M : float
        Huber constant (1.35 ≈ 95 % Gaussian efficiency).
    a : float
        0.7126 = E[min(Z², M²)] (Fisher-consistent default); ``a = 1`` is the paper-literal ``+mσ``
        version, which underestimates σ (≈ 0.68σ under Gaussian noise).
    sigma0 : float, optional
        Start (default: 1.4826·median|LS residual|).
    scale_tol, scale_max_iter : float, int
        Stopping rule and cap of the (θ, σ) alternation.
    tol : float
        Stopping rule of every HLASSO solve (the ``tol`` of :class:`~crowdflow.ranking.options.RankingOptions`).

    Returns
    -------
    ScaleEstimate
    """
    solver = solver or LaplacianSolver.from_graph(g)
    theta = hodgerank_scores(g, solver)
    r = g.y - g.X @ theta
    if sigma0 is None:
        sigma0 = 1.4826 * float(np.median(np.abs(r))) if g.m else 0.0
        if sigma0 <= 0:
            sigma0 = float(np.sqrt(np.sum(g.w * r * r) / max(g.w.sum(), 1e-300)))
    sigma = float(sigma0)
    trace = []
    gam = np.zeros(g.m)
    fit = None
    converged = False
    it = 0
    for it in range(1, scale_max_iter + 1):
        if sigma <= 0:
            break
        fit = hlasso(g, M * sigma, solver=solver, gamma0=gam, tol=tol)
        gam = fit.gamma
        r = g.y - g.X @ fit.theta
        new = _solve_scale(r, g.w, M, a)
        trace.append(new)
        if abs(new - sigma) <= scale_tol * max(sigma, 1e-300):
            sigma = new
            converged = True
            break
        sigma = new
    if sigma <= 0:
        warnings.warn(
            "concomitant scale collapsed to 0 (data fit a global ranking exactly); no outliers flagged",
            RuntimeWarning,
            stacklevel=2,
        )
        fit = LassoFit(0.0, np.zeros(g.m), theta, 0, True, 0.0)
        return ScaleEstimate(0.0, 0.0, fit, it, True, np.asarray(trace))
    if not converged:
        warnings.warn(
            f"concomitant scale did not converge in {scale_max_iter} alternations", RuntimeWarning, stacklevel=2
        )
    fit = hlasso(g, M * sigma, solver=solver, gamma0=gam, tol=tol)
    return ScaleEstimate(float(sigma), float(M * sigma), fit, it, converged, np.asarray(trace))


def theory_lambda(sigma: float, eta: float, mu_psi: float, m: int) -> float:
    """Theory value ``λ̄ = (2σ√μ_Ψ/η)·√(log m)`` of Thm 4.1 (docs/methods/ranking.md §3.4.5; simulations only)."""
    return float(2.0 * sigma * np.sqrt(mu_psi) / eta * np.sqrt(np.log(m)))
