"""Baselines the personal model is checked against: the convex nuclear-norm MLE and a global BTL.

* :func:`fit_convex_baseline` (cvxpy) and :func:`fit_convex_spg` (numpy projected gradient with
  Barzilai–Borwein steps and a nonmonotone line search) solve the convex relaxation
  ``min 𝓛(X) s.t. ‖X‖_* ≤ α sqrt(r m n)`` of the paper's comparison (its SPG baseline);
* :func:`fit_global_btl`: one BTL score vector shared by every user (ridge-penalised, L-BFGS).

Baselines and what they showed: docs/methods/personal_rankings.md §5.2–5.3 and §7.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import expit

from crowdflow.contracts.comparisons import rename_comparison_aliases
from crowdflow.personal_rankings.objective import pair_nll, pair_nll_slope
from crowdflow.personal_rankings.types import DEFAULT_ALPHA, DEFAULT_SIGMA, PairData

__all__ = ["ConvexBaselineResult", "GlobalBTLResult", "fit_convex_baseline", "fit_convex_spg", "fit_global_btl"]


@dataclass(frozen=True)
class ConvexBaselineResult:
    """Nuclear-norm constrained MLE ``min 𝓛(X) s.t. ‖X‖_* ≤ α sqrt(r m n)`` (docs/methods/personal_rankings.md §5.2).

    Attributes
    ----------
    X : numpy.ndarray
        Solution (unscaled).
    X_rescaled : numpy.ndarray
        ``α X / ‖X‖_∞`` (docs/methods/personal_rankings.md §8, item 6).
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
    return pair_nll((X[pairs.user, pairs.a] - X[pairs.user, pairs.b]) / sigma, pairs.w_pos, pairs.w_neg)


def _rescaled(X: np.ndarray, alpha: float) -> np.ndarray:
    """``α X / ‖X‖_∞`` (the rescaling applied to every method before the error is computed)."""
    out: np.ndarray = alpha * X / max(np.abs(X).max(), np.finfo(float).tiny)
    return out


def fit_convex_baseline(
    pairs: PairData,
    rank: int,
    *,
    alpha: float = DEFAULT_ALPHA,
    sigma: float = DEFAULT_SIGMA,
    solver: str = "SCS",
    box: bool = False,
    radius: float | None = None,
    solver_kwargs: dict[str, Any] | None = None,
) -> ConvexBaselineResult:
    """Convex relaxation via cvxpy: ``min Σ w·logistic(∓Δ/σ)  s.t. ‖X‖_* ≤ α sqrt(r m n)``.

    The paper's convex competitor (docs/methods/personal_rankings.md §5.2).

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
        X_rescaled=_rescaled(Xv, alpha),
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
    alpha: float = DEFAULT_ALPHA,
    sigma: float = DEFAULT_SIGMA,
    radius: float | None = None,
    max_iter: int = 500,
    tol: float = 1e-7,
    memory: int = 10,
    time_limit: float | None = None,
) -> ConvexBaselineResult:
    """Numpy substitute of the SPG baseline: projected gradient on the nuclear ball.

    The paper's convex competitor (docs/methods/personal_rankings.md §5.2). Solves
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
        f = pair_nll(z, pairs.w_pos, pairs.w_neg)
        c = pair_nll_slope(z, pairs.w_pos, pairs.w_neg, sigma)
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
        X_rescaled=_rescaled(X, alpha),
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
        df = rename_comparison_aliases(comparisons)
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
        f = pair_nll(z, wp, wn)
        f += 0.5 * ridge * float(np.einsum("i,i->", th, th))
        c = pair_nll_slope(z, wp, wn, sigma)
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
