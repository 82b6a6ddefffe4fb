"""The centralised optimum Θ* of J, the reference DJAM is checked against.

Quadratic losses: one sparse SPD solve ``(L ⊗ I_p + blkdiag(A_i)) vec(Θ) = vec(e_i)``. Huber and
logistic: Newton on J with Armijo backtracking (gradient ``LΘ + [∇f_i]``, Hessian
``L ⊗ I_p + blkdiag(∇²f_i)``; Huber's generalised Hessian counts inliers only).
See docs/methods/personal_models.md §4.1.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve

from crowdflow.personal_models.helpers import EPS
from crowdflow.personal_models.problem import PersonalProblem
from crowdflow.personal_models.result import PersonalModelsResult, make_result, trace_row

log = logging.getLogger(__name__)


def _block_diag(blocks: np.ndarray) -> sp.csr_matrix:
    n, p, _ = blocks.shape
    return sp.bsr_matrix((blocks, np.arange(n), np.arange(n + 1)), shape=(n * p, n * p)).tocsr()


def centralized(
    problem: PersonalProblem,
    *,
    tol: float = 1e-13,
    max_iter: int = 100,
    theta0: np.ndarray | None = None,
) -> PersonalModelsResult:
    """The exact minimiser Θ* of J (docs/methods/personal_models.md §4.1).

    - quadratic: one sparse SPD solve ``(L ⊗ I_p + blkdiag(A_i)) vec(Θ) = vec(e_i)`` (row-major, θ_i is
      block i);
    - huber / logistic: Newton on J with Armijo backtracking; gradient ``LΘ + [∇f_i]``, Hessian
      ``L ⊗ I_p + blkdiag(∇²f_i)`` (Huber: generalised Hessian, c on inliers, 0 on outliers). Stops
      when ``‖∇J‖_∞ ≤ tol·max(1, ‖Θ‖_∞)`` (default 1e-13) or after ``max_iter`` steps (warning).

    Parameters
    ----------
    problem : PersonalProblem
    tol : float
    max_iter : int
    theta0 : numpy.ndarray, optional
        Newton start (default zeros).

    Returns
    -------
    PersonalModelsResult
        ``method="centralized"``, ``iterations`` = Newton steps (1 for quadratic).
    """
    t0 = time.perf_counter()
    g = problem.graph
    n, p = problem.n, problem.p
    lap = sp.kron(g.laplacian(), sp.identity(p), format="csr")
    L = problem.losses
    trace: list[dict[str, Any]] = []
    if problem.loss == "quadratic":
        H = (lap + _block_diag(L.A)).tocsc()
        theta = np.asarray(spsolve(H, L.e.ravel())).reshape(n, p)
        kn = float(np.abs(problem.kkt(theta)).max())
        trace.append(trace_row(problem, 1, theta, None, None))
        converged = True
        iters = 1
    else:
        theta = np.zeros((n, p)) if theta0 is None else np.array(theta0, dtype=np.float64).reshape(n, p)
        idx = np.arange(n)
        converged = False
        iters = 0
        Jx = problem.objective(theta)
        for iters in range(1, max_iter + 1):
            grad = (L.grad(idx, theta) + g.laplacian() @ theta).ravel()
            if np.abs(grad).max() <= tol * max(1.0, float(np.abs(theta).max())):
                converged = True
                iters -= 1
                break
            H = (lap + _block_diag(L.hess(theta))).tocsc()
            step = -np.asarray(spsolve(H, grad))
            slope = float(grad @ step)
            t = 1.0
            accepted = False
            for _ in range(60):
                cand = theta + t * step.reshape(n, p)
                Jc = problem.objective(cand)
                if Jc <= Jx + 1e-4 * t * slope + 8 * EPS * abs(Jx):
                    accepted = True
                    break
                t *= 0.5
            if not accepted:
                log.debug("centralized Newton: line search stalled at iteration %d", iters)
                break
            theta, Jx = cand, Jc
            trace.append(trace_row(problem, iters, theta, None, None))
        else:
            iters = max_iter
        if not converged:
            grad = L.grad(idx, theta) + g.laplacian() @ theta
            gi = float(np.abs(grad).max())
            # round-off floor: accept if within 1e3 ε of the scale of the terms
            converged = gi <= max(tol, 1e3 * EPS) * max(1.0, float(np.abs(theta).max()))
            if not converged:
                warnings.warn(
                    f"centralized Newton stopped after {iters} iterations with ‖∇J‖_∞ = {gi:.3g} > tol",
                    RuntimeWarning,
                    stacklevel=2,
                )
        kn = float(np.abs(problem.kkt(theta)).max())
    log.info("centralized %s: %d iteration(s), max KKT %.3g", problem.loss, iters, kn)
    return make_result(
        problem,
        theta,
        "centralized",
        iters,
        converged,
        trace,
        {"wall_time_s": time.perf_counter() - t0, "tol": tol},
    )
