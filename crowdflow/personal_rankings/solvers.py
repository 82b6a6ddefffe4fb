"""Solvers of the smoothed low-rank BTL problem on the factors: Riemannian trust region and L-BFGS.

* :func:`riemannian_trust_region`: RTR with a truncated-CG (Steihaug–Toint) inner solver on the
  two-factor quotient geometry (the paper's PRTRS); stops when ``‖grad‖_x < gtol``;
* :func:`lbfgs_factors`: L-BFGS on ``z = [vec L; vec R]`` through :func:`scipy.optimize.minimize`,
  restarted from the rebalanced point until the Riemannian gradient test holds.

Both return a :class:`SolverOutput` with the final factors, the objective, the Riemannian gradient
norm (the same quantity for both), the stop reason and a per-iteration trace. Everything is
numpy/scipy; nothing loops over comparisons in Python.

Algorithms and stopping rules: docs/methods/personal_rankings.md §2.5–2.6.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from crowdflow.personal_rankings.manifold import TwoFactorGeometry, rebalance_norms, retract, riemannian_grad_norm
from crowdflow.personal_rankings.objective import PointEval, SmoothedBTLObjective
from crowdflow.personal_rankings.types import DEFAULT_GTOL, DEFAULT_MAX_ITER, Tangent

logger = logging.getLogger(__name__)

__all__ = ["SolverOutput", "lbfgs_factors", "riemannian_trust_region"]


@dataclass(frozen=True)
class SolverOutput:
    """What a solver returns.

    Attributes
    ----------
    L, R : numpy.ndarray
        Final factors.
    objective : float
        Final ``F``.
    grad_norm : float
        Final Riemannian gradient norm ``‖grad‖_x``, the same quantity for every solver
        (docs/methods/personal_rankings.md §2.4).
    iterations : int
        Outer iterations.
    converged : bool
        Whether the stopping rule (not the iteration/time cap) ended the run.
    stop_reason : str
        Human-readable reason.
    trace : pandas.DataFrame
        One row per iteration (``iteration, objective, grad_norm, time_s`` + solver-specific columns).
    n_evals, n_hvps : int
        Objective/gradient evaluations and Hessian-vector products.
    time_s : float
        Wall time.
    """

    L: np.ndarray
    R: np.ndarray
    objective: float
    grad_norm: float
    iterations: int
    converged: bool
    stop_reason: str
    trace: pd.DataFrame
    n_evals: int
    n_hvps: int
    time_s: float


def _tcg(
    obj: SmoothedBTLObjective,
    geo: TwoFactorGeometry,
    pt: PointEval,
    grad: Tangent,
    radius: float,
    max_inner: int,
    kappa: float,
    theta: float,
) -> tuple[Tangent, Tangent, str, int]:
    """Steihaug–Toint truncated CG (no preconditioner) for the trust-region subproblem.

    See docs/methods/personal_rankings.md §2.5.
    """
    egrad = (pt.egrad_L, pt.egrad_R)

    def hess(v: Tangent) -> Tangent:
        return geo.rhess(egrad, obj.ehess(pt, v[0], v[1]), grad, v)

    etaL = np.zeros_like(grad[0])
    etaR = np.zeros_like(grad[1])
    HetaL = np.zeros_like(grad[0])
    HetaR = np.zeros_like(grad[1])
    rL, rR = grad
    rr = geo.inner((rL, rR), (rL, rR))
    r0 = np.sqrt(rr)
    dL, dR = -rL, -rR
    e_e, e_d, d_d = 0.0, 0.0, rr
    stop = "MAX_INNER"
    j = 0
    for j in range(1, max_inner + 1):
        HdL, HdR = hess((dL, dR))
        c = geo.inner((dL, dR), (HdL, HdR))
        gamma = rr / c if c > 0 else 0.0
        e_e_new = e_e + 2.0 * gamma * e_d + gamma**2 * d_d
        if c <= 0 or e_e_new >= radius**2:
            tau = (-e_d + np.sqrt(max(e_d**2 + d_d * (radius**2 - e_e), 0.0))) / d_d
            return (
                (etaL + tau * dL, etaR + tau * dR),
                (HetaL + tau * HdL, HetaR + tau * HdR),
                "NEG_CURV" if c <= 0 else "HIT_BOUNDARY",
                j,
            )
        etaL = etaL + gamma * dL
        etaR = etaR + gamma * dR
        HetaL = HetaL + gamma * HdL
        HetaR = HetaR + gamma * HdR
        e_e = e_e_new
        rL, rR = geo.proj((rL + gamma * HdL, rR + gamma * HdR))
        rr_old = rr
        rr = geo.inner((rL, rR), (rL, rR))
        if np.sqrt(rr) <= r0 * min(r0**theta, kappa):
            stop = "TARGET_REACHED"
            break
        beta = rr / rr_old
        dL, dR = geo.proj((-rL + beta * dL, -rR + beta * dR))
        e_d = beta * (e_d + gamma * d_d)
        d_d = rr + beta**2 * d_d
    return (etaL, etaR), (HetaL, HetaR), stop, j


def riemannian_trust_region(
    obj: SmoothedBTLObjective,
    L0: np.ndarray,
    R0: np.ndarray,
    *,
    max_iter: int = DEFAULT_MAX_ITER["rtr"],
    gtol: float = DEFAULT_GTOL,
    delta_bar: float | None = None,
    delta0: float | None = None,
    rho_prime: float = 0.1,
    kappa: float = 0.1,
    theta: float = 1.0,
    max_inner: int | None = None,
    rebalance: bool = True,
    time_limit: float | None = None,
) -> SolverOutput:
    """Riemannian trust-region method with truncated CG on the two-factor quotient.

    The paper's solver (docs/methods/personal_rankings.md §2.5).

    Stopping rule: ``‖grad‖_x < gtol`` (absolute; paper 1e-6) → converged. Caps: ``max_iter`` outer
    iterations (paper 500), optional ``time_limit`` seconds, and a collapsed radius
    (``Δ < 1e-12 Δ̄``, i.e. no further decrease is attainable in floating point) — all reported as not
    converged.

    Parameters
    ----------
    obj : SmoothedBTLObjective
        The objective.
    L0, R0 : numpy.ndarray
        Initial factors.
    max_iter : int
        Maximal outer iterations.
    gtol : float
        Gradient-norm tolerance (metric norm of docs/methods/personal_rankings.md §2.4).
    delta_bar, delta0 : float, optional
        Maximal and initial radius; defaults ``10 r`` and ``Δ̄/8`` (Manopt).
    rho_prime : float
        Acceptance threshold ρ′.
    kappa, theta : float
        tCG stopping parameters (``‖r‖ ≤ ‖r0‖ min(‖r0‖^θ, κ)``).
    max_inner : int, optional
        tCG iteration cap; default ``min((m+n−r) r, 200)``.
    rebalance : bool
        Apply the norm-balancing step after each retraction.
    time_limit : float, optional
        Wall-clock cap in seconds.

    Returns
    -------
    SolverOutput
    """
    t_start = time.perf_counter()
    m, r = L0.shape
    n = R0.shape[0]
    dim = (m + n - r) * r
    if delta_bar is None:
        delta_bar = 10.0 * r
    if delta0 is None:
        delta0 = delta_bar / 8.0
    if max_inner is None:
        max_inner = min(dim, 200)
    evals0, hvps0 = obj.n_evals, obj.n_hvps
    L, R = L0.copy(), R0.copy()
    pt = obj.evaluate(L, R)
    geo = TwoFactorGeometry(L, R)
    grad = geo.rgrad(pt.egrad_L, pt.egrad_R)
    gnorm = geo.norm(grad)
    radius = delta0
    eps = np.finfo(float).eps
    rows: list[dict[str, Any]] = [
        {
            "iteration": 0,
            "objective": pt.f,
            "grad_norm": gnorm,
            "radius": radius,
            "rho": np.nan,
            "inner_iterations": 0,
            "tcg_stop": "",
            "accepted": True,
            "time_s": time.perf_counter() - t_start,
        }
    ]
    converged = False
    reason = f"reached max_iter={max_iter}"
    it = 0
    for it in range(1, max_iter + 1):
        if gnorm < gtol:
            converged = True
            reason = f"gradient norm {gnorm:.3e} < gtol {gtol:g}"
            it -= 1
            break
        if time_limit is not None and time.perf_counter() - t_start > time_limit:
            reason = f"time limit {time_limit:g}s reached"
            it -= 1
            break
        eta, Heta, why, n_inner = _tcg(obj, geo, pt, grad, radius, max_inner, kappa, theta)
        Lc, Rc = retract(L, R, eta, rebalance)
        ptc = obj.evaluate(Lc, Rc)
        try:
            geoc: TwoFactorGeometry | None = TwoFactorGeometry(Lc, Rc)
        except np.linalg.LinAlgError:  # candidate lost rank: treat as a failed step
            geoc = None
        reg = 1e3 * eps * max(1.0, abs(pt.f))
        num = pt.f - ptc.f + reg
        den = -geo.inner(grad, eta) - 0.5 * geo.inner(eta, Heta) + reg
        rho = num / den if den != 0 else -np.inf
        ok = np.isfinite(ptc.f) and geoc is not None
        if den < 0 or rho < 0.25 or not ok:
            radius /= 4.0
        elif rho > 0.75 and why in ("NEG_CURV", "HIT_BOUNDARY"):
            radius = min(2.0 * radius, delta_bar)
        accepted = bool(den >= 0 and rho > rho_prime and ok)
        if accepted:
            L, R, pt = Lc, Rc, ptc
            geo = geoc  # type: ignore[assignment]
            grad = geo.rgrad(pt.egrad_L, pt.egrad_R)
            gnorm = geo.norm(grad)
        rows.append(
            {
                "iteration": it,
                "objective": pt.f,
                "grad_norm": gnorm,
                "radius": radius,
                "rho": float(rho),
                "inner_iterations": n_inner,
                "tcg_stop": why,
                "accepted": accepted,
                "time_s": time.perf_counter() - t_start,
            }
        )
        logger.debug(
            "RTR it %d f=%.10g |grad|=%.3e radius=%.3g rho=%.3g inner=%d %s", it, pt.f, gnorm, radius, rho, n_inner, why
        )
        if radius < 1e-12 * delta_bar:
            reason = "trust radius collapsed (no attainable decrease)"
            break
    else:
        if gnorm < gtol:
            converged = True
            reason = f"gradient norm {gnorm:.3e} < gtol {gtol:g}"
    return SolverOutput(
        L=L,
        R=R,
        objective=pt.f,
        grad_norm=gnorm,
        iterations=it,
        converged=converged,
        stop_reason=reason,
        trace=pd.DataFrame(rows),
        n_evals=obj.n_evals - evals0,
        n_hvps=obj.n_hvps - hvps0,
        time_s=time.perf_counter() - t_start,
    )


def lbfgs_factors(
    obj: SmoothedBTLObjective,
    L0: np.ndarray,
    R0: np.ndarray,
    *,
    max_iter: int = DEFAULT_MAX_ITER["lbfgs"],
    gtol: float = DEFAULT_GTOL,
    grad_rtol: float = 1e-5,
    ftol: float = 1e-12,
    maxcor: int = 20,
    max_restarts: int = 3,
    time_limit: float | None = None,
) -> SolverOutput:
    """L-BFGS on ``z = [vec L; vec R]`` with value ``F(L Rᵀ)`` and gradient ``[vec(G R); vec(Gᵀ L)]``
    (docs/methods/personal_rankings.md §2.6, via ``scipy.optimize.minimize(method="L-BFGS-B")``).

    The start is rebalanced to ``‖L‖_F = ‖R‖_F`` (same ``X0``; equalises the curvature of the two blocks
    when m ≠ n, without it L-BFGS stalls far from the optimum on e.g. 6000 users × 5 items).

    Stopping rule: each scipy run ends by its own tests (max-abs gradient ≤ ``gtol`` or relative
    objective reduction ≤ ``ftol``). The run counts as converged when the Riemannian gradient norm
    (docs/methods/personal_rankings.md §2.4) satisfies ``‖grad‖_x ≤ max(gtol, grad_rtol·‖grad(x0)‖_x)``;
    otherwise L-BFGS is restarted from the rebalanced current point (fresh curvature memory), at most
    ``max_restarts`` times. Caps: ``max_iter`` iterations in total, ``20 max_iter`` evaluations per run,
    optional ``time_limit`` — all reported as not converged.

    Parameters
    ----------
    obj : SmoothedBTLObjective
        The objective.
    L0, R0 : numpy.ndarray
        Initial factors.
    max_iter, gtol, ftol, maxcor :
        scipy L-BFGS-B options (``maxiter``, ``gtol``, ``ftol``, ``maxcor``); ``gtol`` is also the absolute
        Riemannian-gradient tolerance.
    grad_rtol : float
        Relative Riemannian-gradient tolerance.
    max_restarts : int
        Restarts allowed when scipy stops before the gradient test holds.
    time_limit : float, optional
        Wall-clock cap in seconds (checked once per iteration).

    Returns
    -------
    SolverOutput
    """
    t_start = time.perf_counter()
    m, r = L0.shape
    n = R0.shape[0]
    evals0, hvps0 = obj.n_evals, obj.n_hvps
    last: dict[str, Any] = {}

    def split(z: np.ndarray) -> Tangent:
        return z[: m * r].reshape(m, r), z[m * r :].reshape(n, r)

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        L, R = split(z)
        pt = obj.evaluate(L, R, cache=False)
        last["z"] = z.copy()
        last["pt"] = pt
        return pt.f, np.concatenate([pt.egrad_L.ravel(), pt.egrad_R.ravel()])

    def rgnorm(pt: PointEval) -> float:
        return riemannian_grad_norm(pt.L.T @ pt.L, pt.R.T @ pt.R, pt.egrad_L, pt.egrad_R)

    rows: list[dict[str, Any]] = []
    timed_out = False

    def callback(intermediate_result: Any) -> None:
        nonlocal timed_out
        z = intermediate_result.x
        pt = last.get("pt")
        if pt is None or not np.array_equal(cast(Any, last.get("z")), z):
            fun(z)
            pt = last["pt"]
        rows.append(
            {
                "iteration": len(rows),
                "objective": pt.f,
                "grad_norm": rgnorm(pt),
                "run": run,
                "time_s": time.perf_counter() - t_start,
            }
        )
        if time_limit is not None and time.perf_counter() - t_start > time_limit:
            timed_out = True
            raise StopIteration

    L, R = rebalance_norms(np.array(L0, dtype=float), np.array(R0, dtype=float))
    z = np.concatenate([L.ravel(), R.ravel()])
    f0, _ = fun(z)
    g0 = rgnorm(last["pt"])
    rows.append({"iteration": 0, "objective": f0, "grad_norm": g0, "run": 0, "time_s": time.perf_counter() - t_start})
    target = max(gtol, grad_rtol * g0)
    total_it = 0
    converged = False
    msg = ""
    run = 0
    gnorm = g0
    for run in range(max_restarts + 1):
        if g0 <= target:
            converged, msg = True, "initial point already stationary"
            break
        res = minimize(
            fun,
            z,
            jac=True,
            method="L-BFGS-B",
            callback=callback,
            options={
                "maxiter": max_iter - total_it,
                "maxfun": 20 * max_iter,
                "gtol": gtol,
                "ftol": ftol,
                "maxcor": maxcor,
            },
        )
        total_it += int(res.nit)
        L, R = split(np.asarray(res.x, dtype=float).copy())
        pt = obj.evaluate(L, R, cache=False)
        gnorm = rgnorm(pt)
        msg = str(res.message)
        if timed_out:
            msg = f"time limit {time_limit:g}s reached"
            break
        if gnorm <= target:
            converged = bool(res.success)
            break
        if not res.success or total_it >= max_iter:
            break
        logger.info("L-BFGS stopped (%s) with |grad|=%.3e > %.3e: restart %d", msg, gnorm, target, run + 1)
        L, R = rebalance_norms(L, R)
        z = np.concatenate([L.ravel(), R.ravel()])
    else:
        msg = f"{msg}; |grad| {gnorm:.3e} > {target:.3e} after {max_restarts} restarts"
    for k, row in enumerate(rows):
        row["iteration"] = k
    if converged:
        msg = f"{msg}; |grad| {gnorm:.3e} <= {target:.3e}"
    pt = obj.evaluate(L, R, cache=False)
    return SolverOutput(
        L=L,
        R=R,
        objective=pt.f,
        grad_norm=gnorm,
        iterations=total_it,
        converged=converged,
        stop_reason=msg,
        trace=pd.DataFrame(rows),
        n_evals=obj.n_evals - evals0,
        n_hvps=obj.n_hvps - hvps0,
        time_s=time.perf_counter() - t_start,
    )
