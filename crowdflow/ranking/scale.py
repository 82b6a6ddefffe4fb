"""Noise scale and outlier thresholds: the adaptive rule (default), Huber's concomitant scale, theory λ.

**Adaptive rule** (:func:`adaptive_lambda`, docs/methods/ranking.md §3.4.2). The HLASSO at λ flags row k
iff its Huber residual exceeds λ, so λ is a rejection point in outcome units; robust regression puts it
at a number of noise levels, ``λ* = t*·σ̂``:

* σ̂ (:func:`trimmed_scale`): iteratively trimmed least squares with a degrees-of-freedom correction,
  ``S = {|r_k| > 2.5σ}``, ``θ = LS(rows ∉ S)``, ``σ² = Σ_{∉S} w r² / (ψ·(W_in − p_in))`` with
  ``ψ = E[Z² | |Z| ≤ 2.5] = 0.9107`` and ``p_in = n − c_in`` (the score differences the kept rows
  identify), from two starts; the fixed point with the smaller capped objective is kept;
* graded outcomes, t* (:func:`bh_threshold`): Benjamini–Hochberg at ``q`` on ``p_k = 2Φ̄(|r_k|/σ̂)``,
  floored at ``t_min`` (2.576: at most 1 % of clean rows beyond it); on clean data t* is the Bonferroni
  point ``Φ̄⁻¹(q/2W)`` and nothing is flagged with probability about 1 − q;
* ±1 outcomes, with or without ties (:mod:`crowdflow.ranking.laws`): the Gaussian tail says nothing
  about bounded residuals; the rows flagged are those whose outcome is improbable under the
  Bradley–Terry (Rao–Kupper with ties) law fitted robustly, BH at q on the law's p-values
  (:func:`adaptive_lambda`). :func:`upset_gap_cut`, the former ±1 rule (an upset curve in the fitted
  gap), remains for the partitioned fit (:mod:`crowdflow.ranking.partitioned`).

**Huber's concomitant scale** (:func:`huber_concomitant_scale`, option ``lambda_rule: concomitant``):
minimises ``Σ_k w_k σ H_M((θ_i − θ_j − y_k)/σ) + a(Σw)σ`` over ``(θ, σ)`` (jointly convex) by alternating
HLASSO at ``λ = Mσ`` with the 1-D root of ``Σ_k w_k min(r_k²/σ², M²) = a·Σw``. ``M = 1.35``;
``a = E[min(Z², M²)] = 0.7126`` makes σ̂ consistent under Gaussian noise. It has no degrees-of-freedom
correction and its λ* = 1.35σ̂ flags about 18 % of a clean data set (docs/methods/ranking.md §3.4.1).
:func:`theory_lambda` is the λ̄ of the support-recovery theorem (simulations only: it needs σ and the
identifiability constants).

See docs/methods/ranking.md §3.4.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import ndtr, ndtri

from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.hlasso import LassoFit, hlasso
from crowdflow.ranking.laws import LawFlags, OutcomeLaw, law_flags, outcome_law
from crowdflow.ranking.least_squares import LaplacianSolver, hodgerank_scores, ls_on_rows
from crowdflow.ranking.options import FDR_Q, HUBER_A, HUBER_M, T_MIN

__all__ = [
    "AdaptiveLambda",
    "ScaleEstimate",
    "TrimmedScale",
    "adaptive_lambda",
    "bh_threshold",
    "huber_concomitant_scale",
    "is_plus_minus_one",
    "law_gamma",
    "theory_lambda",
    "trimmed_scale",
    "upset_gap_cut",
]

#: Trimming point of :func:`trimmed_scale`, in noise levels.
TRIM_K = 2.5
#: Share of the weight the least-trimmed-squares start keeps.
LTS_KEEP = 0.6
#: The least-trimmed-squares start is tried only when the mean leverage ``(n − c)/Σw`` is at most this.
LTS_MAX_LEVERAGE = 0.15
#: A second-start fixed point that trims more than this share of the weight is discarded.
MAX_TRIM = 0.45
#: Refits of the trimming iteration factorise by sparse LU only up to this many items (CG above).
TRIM_SPLU_MAX_N = 500


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


# ---------------------------------------------------------------------------------------------------
# The adaptive rule (docs/methods/ranking.md §3.4.2)
# ---------------------------------------------------------------------------------------------------


def _truncated_variance(k: float) -> float:
    """``ψ(k) = E[Z² | |Z| ≤ k]`` for Z ~ N(0, 1): ``1 − 2kφ(k)/(2Φ(k) − 1)``."""
    phi = math.exp(-0.5 * k * k) / math.sqrt(2.0 * math.pi)
    return 1.0 - 2.0 * k * phi / (2.0 * float(ndtr(k)) - 1.0)


def _weighted_quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    """Lower weighted q-quantile (weights as replication counts: the quantile of the expanded sample)."""
    if x.size == 0:
        return 0.0
    o = np.argsort(x, kind="stable")
    cw = np.cumsum(w[o])
    k = int(np.searchsorted(cw, q * cw[-1], side="left"))
    return float(x[o][min(k, x.size - 1)])


@dataclass(frozen=True)
class TrimmedScale:
    """The noise level σ̂ of :func:`trimmed_scale` and the trimmed least-squares fit it comes from.

    Attributes
    ----------
    sigma : float
        σ̂ (0 when the data fit a ranking exactly).
    theta : numpy.ndarray
        (n,) least-squares scores on the kept rows.
    resid : numpy.ndarray
        (m,) ``y − Xθ`` for every row (trimmed rows included).
    trimmed : numpy.ndarray
        (m,) bool, rows beyond ``k·σ̂`` (left out of the last refit).
    start : {'ls', 'lts'}
        The start whose fixed point was kept.
    n_iter : int
        Trimming steps of the kept start.
    converged : bool
    """

    sigma: float
    theta: np.ndarray
    resid: np.ndarray
    trimmed: np.ndarray
    start: Literal["ls", "lts"]
    n_iter: int
    converged: bool


def _refit(g: ComparisonGraph, keep: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, int]:
    """LS on the rows ``keep`` and ``p_in = n − c_keep`` (the score differences those rows identify)."""
    th, c_keep = ls_on_rows(g, keep, theta, method="auto", splu_max_n=TRIM_SPLU_MAX_N, rtol=1e-9)
    return th, g.n - c_keep


def _trim_iterate(
    g: ComparisonGraph, theta: np.ndarray, sigma: float, k: float, max_iter: int, tol: float
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, int, bool]:
    """The trimming map from ``(θ, σ)`` to its fixed point: (σ, θ, r, trimmed, steps, converged)."""
    psi = _truncated_variance(k)
    r = g.y - g.gradient(theta)
    trimmed = np.zeros(g.m, dtype=bool)
    it = 0
    for it in range(1, max_iter + 1):
        new_trim = np.abs(r) > k * sigma
        keep = ~new_trim
        theta, p_in = _refit(g, keep, theta)
        r = g.y - g.gradient(theta)
        dof = float(g.w[keep].sum()) - p_in
        new = math.sqrt(float(np.sum(g.w[keep] * r[keep] ** 2)) / (psi * dof)) if dof > 0 else 0.0
        same = bool(np.array_equal(new_trim, trimmed))
        trimmed = new_trim
        if new <= 0:
            return 0.0, theta, r, trimmed, it, True
        done = same and abs(new - sigma) <= tol * sigma
        sigma = new
        if done:
            return sigma, theta, r, trimmed, it, True
    return sigma, theta, r, trimmed, it, False


def _capped_objective(r: np.ndarray, w: np.ndarray, sigma: float, k: float, dof: float) -> float:
    """``J(θ, σ) = ½Σ w min(r²/σ², k²) + dof·log σ``, the capped Gaussian likelihood both fixed points minimise."""
    if sigma <= 0:
        return math.inf
    return 0.5 * float(np.sum(w * np.minimum((r / sigma) ** 2, k * k))) + dof * math.log(sigma)


def trimmed_scale(
    g: ComparisonGraph,
    *,
    solver: LaplacianSolver | None = None,
    k: float = TRIM_K,
    lts_keep: float = LTS_KEEP,
    lts_max_leverage: float = LTS_MAX_LEVERAGE,
    max_trim: float = MAX_TRIM,
    max_iter: int = 50,
    tol: float = 1e-3,
) -> TrimmedScale:
    """Noise level σ̂ by iteratively trimmed least squares from two starts (docs/methods/ranking.md §3.4.2).

    The trimming map, from a start ``(θ, σ)``::

        S = {k : |r_k| > k·σ},   θ = LS on the rows ∉ S,   r = y − Xθ,
        σ² = Σ_{∉S} w r² / (ψ(k)·(W_in − p_in)),   ψ(k) = E[Z² | |Z| ≤ k],   p_in = n − c_in,

    repeated until S repeats and σ moves by at most ``tol`` (relative). ``W_in − p_in`` is the expected
    ``Σ_in w r²/σ²`` of a least-squares fit on the kept rows, so σ̂ estimates the noise level in every
    design, sparse ones included (without it σ̂ is about 0.55σ at 4 rows per item); rows beyond kσ have
    no influence. The map can have two fixed points:

    * start ``'ls'``: the LS fit and ``σ₀ = 1.4826·med_w|r| / √(1 − h̄)``, ``h̄ = (n − c)/Σw``. Right on
      clean and moderately contaminated data; with many one-sided outliers (25 % of 5σ, all against
      the true order) the LS scores are compressed and the iteration settles near 2σ;
    * start ``'lts'`` (only when ``h̄ ≤ lts_max_leverage``, about 13 rows per item or more): least
      trimmed squares, concentration steps keeping the ``lts_keep`` share of the weight with the
      smallest |r|, ``σ₀² = Σ_H w r² / (ψ(z)(W_H − p_H))`` with ``z = Φ̄⁻¹((1 − lts_keep)/2)``. On sparse
      graphs the trimmed fit overfits its rows and this start would settle low, hence the guard.

    A second-start fixed point that trims more than ``max_trim`` of the weight is discarded; of the
    others the one with the smaller ``J = ½Σ w min(r²/σ², k²) + (W − p)·log σ`` is kept. Weights count
    as replications. Refits use :func:`~crowdflow.ranking.least_squares.ls_on_rows` (CG above 500 items:
    a fresh LU at every step would cost seconds on well-connected graphs).

    Parameters
    ----------
    g : ComparisonGraph
    solver : LaplacianSolver, optional
        Solver of ``g`` for the first LS fit.
    k : float
        Trimming point in noise levels.
    lts_keep, lts_max_leverage, max_trim : float
        The second start (see above).
    max_iter : int
        Trimming steps per start.
    tol : float
        Relative change of σ at which the iteration stops.

    Returns
    -------
    TrimmedScale
    """
    solver = solver or LaplacianSolver.from_graph(g)
    theta_ls = hodgerank_scores(g, solver)
    r = g.y - g.gradient(theta_ls)
    W = float(g.w.sum())
    p_full = g.n - g.n_components
    rms = math.sqrt(float(np.sum(g.w * r * r)) / max(W, 1e-300))
    if rms <= 1e-12 * max(1.0, float(np.abs(g.y).max(initial=0.0))) or W - p_full <= 0:
        return TrimmedScale(0.0, theta_ls, r, np.zeros(g.m, dtype=bool), "ls", 0, True)
    hbar = min(p_full / W, 0.95)
    s0 = 1.4826 * _weighted_quantile(np.abs(r), g.w, 0.5) / math.sqrt(1.0 - hbar)
    starts: list[tuple[Literal["ls", "lts"], np.ndarray, float]] = [("ls", theta_ls, s0 if s0 > 0 else rms)]
    if hbar <= lts_max_leverage:
        theta, rr, held, p_in = theta_ls, r, np.ones(g.m, dtype=bool), p_full
        for _ in range(20):
            new_held = np.abs(rr) <= _weighted_quantile(np.abs(rr), g.w, lts_keep)
            if np.array_equal(new_held, held):
                break
            held = new_held
            theta, p_in = _refit(g, held, theta)
            rr = g.y - g.gradient(theta)
        z = float(-ndtri((1.0 - lts_keep) / 2.0))
        dof = float(g.w[held].sum()) - p_in
        if dof > 0:
            s_lts = math.sqrt(float(np.sum(g.w[held] * rr[held] ** 2)) / (_truncated_variance(z) * dof))
            if s_lts > 0:
                starts.append(("lts", theta, s_lts))
    best: tuple[float, TrimmedScale] | None = None
    for name, th0, sig0 in starts:
        sig, th, res, trim, it, conv = _trim_iterate(g, th0, sig0, k, max_iter, tol)
        if name == "lts" and (sig <= 0 or float(g.w[trim].sum()) > max_trim * W):
            continue
        J = _capped_objective(res, g.w, sig, k, W - p_full)
        if best is None or best[0] > J:
            best = (J, TrimmedScale(float(sig), th, res, trim, name, it, conv))
    assert best is not None  # the 'ls' start always competes
    return best[1]


def bh_threshold(z: np.ndarray, w: np.ndarray, *, q: float = FDR_Q, t_min: float = T_MIN) -> float:
    """Benjamini–Hochberg cut on standardised residuals, as a threshold on ``|z|`` (docs/methods/ranking.md §3.4.2).

    ``p_k = 2Φ̄(|z_k|)``; rows sorted by |z| descending with cumulative weight ``C_(i)`` (weights count as
    replications, ``W = Σw``); the largest prefix with ``p_(i) ≤ q·C_(i)/W`` is rejected and t* is the
    smallest rejected |z|. When nothing is rejected, t* is the Bonferroni point ``Φ̄⁻¹(q/2W)``. The
    result is at least ``t_min``.
    """
    W = float(w.sum())
    a = np.abs(np.asarray(z, dtype=float))
    o = np.argsort(-a, kind="stable")
    p = 2.0 * ndtr(-a[o])
    ok = np.flatnonzero(p <= q * np.cumsum(w[o]) / max(W, 1e-300))
    t = float(a[o][ok[-1]]) if ok.size else float(-ndtri(min(q / (2.0 * max(W, 1.0)), 0.5)))
    return max(t, t_min)


def is_plus_minus_one(y: np.ndarray) -> bool:
    """True when the outcomes take the values ``{−a, +a}`` for one ``a > 0`` (and possibly 0, a tie)."""
    a = np.unique(np.abs(np.asarray(y, dtype=float)))
    return bool(np.count_nonzero(a > 0) == 1)


def upset_gap_cut(
    gap: np.ndarray, upset: np.ndarray, w: np.ndarray, *, q: float = FDR_Q, gap_scale: float | None = None
) -> tuple[float, float, float]:
    """Smallest fitted gap at which ±1 upsets are flagged, by an upset curve (docs/methods/ranking.md §3.4.2).

    Clean ±1 comparisons contradict the fitted order with a probability that falls to 0 as the fitted
    gap ``g = |θ̂_i − θ̂_j|`` grows; a planted flip or a careless answer contradicts it whatever g. With
    ``F(g) = 1/(1 + e^{βg})`` (g rescaled by its 90th percentile)::

        P(upset | g) = ε + (1 − ε)·F(g),    lfdr(g) = (1 − ε)F(g) / P(upset | g),

    (ε, β) maximise the weighted Bernoulli likelihood of the upset indicators (L-BFGS-B from a few
    starts). Upsets are flagged from the largest gap down while their weighted mean lfdr stays ≤ q.

    Parameters
    ----------
    gap : numpy.ndarray
        Fitted gaps of the non-tie rows.
    upset : numpy.ndarray
        Bool, the row contradicts the fitted order.
    w : numpy.ndarray
        Weights.
    q : float
        Target false discovery rate.
    gap_scale : float, optional
        The rescaling of the gaps (default: their unweighted 90th percentile); given when ``gap, upset, w``
        are aggregated per pair (:mod:`crowdflow.ranking.partitioned`) and the percentile is over rows.

    Returns
    -------
    tuple of float
        ``(gap_cut, eps, beta)``; ``gap_cut`` is ``inf`` when nothing is flagged.
    """
    from scipy.optimize import minimize

    gap = np.asarray(gap, dtype=float)
    upset = np.asarray(upset, dtype=bool)
    if not upset.any():
        return math.inf, 0.0, math.inf
    scale = float(np.quantile(gap, 0.9)) if gap_scale is None else float(gap_scale)
    gs = gap / max(scale, 1e-12)

    def curve(p: np.ndarray) -> tuple[float, np.ndarray]:
        eps = 1.0 / (1.0 + math.exp(-float(p[0])))
        return eps, 0.5 * (1.0 - np.tanh(0.5 * math.exp(float(p[1])) * gs))

    def nll(p: np.ndarray) -> float:
        eps, F = curve(p)
        pu = np.clip(eps + (1.0 - eps) * F, 1e-12, 1.0 - 1e-12)
        return -float(np.sum(w * np.where(upset, np.log(pu), np.log1p(-pu))))

    fits = [
        minimize(nll, np.array([e0, b0]), method="L-BFGS-B", bounds=[(-15.0, 0.0), (-5.0, 8.0)])
        for e0 in (-6.0, -3.0, -1.5)
        for b0 in (0.0, 1.5, 3.0)
    ]
    best = min(fits, key=lambda f: float(f.fun))
    eps, F = curve(best.x)
    lfdr = (1.0 - eps) * F / np.maximum(eps + (1.0 - eps) * F, 1e-300)
    idx = np.flatnonzero(upset)
    o = idx[np.argsort(-gap[idx], kind="stable")]
    running = np.cumsum(w[o] * lfdr[o]) / np.cumsum(w[o])
    ok = np.flatnonzero(running <= q)
    cut = float(gap[o][ok[-1]]) if ok.size else math.inf
    return cut, eps, math.exp(float(best.x[1]))


@dataclass(frozen=True)
class AdaptiveLambda:
    """λ* of the adaptive rule (docs/methods/ranking.md §3.4.2).

    Attributes
    ----------
    lam : float
        ``λ*`` in outcome units; ``inf`` when nothing is to be flagged (σ̂ = 0, or no row improbable under
        the law).
    sigma : float
        σ̂ of :func:`trimmed_scale`.
    t : float
        ``λ*/σ̂``, the threshold in noise levels.
    outcome : {'graded', 'binary', 'ties'}
        The outcome's law (:func:`crowdflow.ranking.laws.outcome_law`).
    scale : TrimmedScale
    law : LawFlags or None
        ±1 outcomes (with or without ties): the law-based flags; the fit flags exactly these rows
        (:func:`law_gamma`) and λ* only sets where the regularisation path stops.
    """

    lam: float
    sigma: float
    t: float
    outcome: OutcomeLaw
    scale: TrimmedScale
    law: LawFlags | None = None

    @property
    def t_stop(self) -> float:
        """LBI stop time ``1/λ*`` (0 when nothing is to be flagged)."""
        return 1.0 / self.lam if 0 < self.lam < math.inf else 0.0


def law_gamma(g: ComparisonGraph, flags: np.ndarray, theta_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scores and γ of a fit that flags exactly ``flags``: LS on the other rows, ``γ_k = y_k − (θ_i − θ_j)`` on them.

    The outcome-law rule (±1 outcomes) decides the flags itself; its robust scores are the least-squares
    fit without them (:func:`~crowdflow.ranking.least_squares.ls_on_rows`, offsets between pieces the
    kept rows no longer connect from ``theta_ref``).
    """
    theta, _ = ls_on_rows(g, ~flags, theta_ref)
    r = g.y - g.gradient(theta)
    gamma = np.where(flags, np.where(r == 0, 1e-12, r), 0.0)
    return theta, gamma


def adaptive_lambda(
    g: ComparisonGraph,
    *,
    solver: LaplacianSolver | None = None,
    q: float = FDR_Q,
    t_min: float = T_MIN,
    rows: ComparisonGraph | None = None,
    binary_rule: str = "upset_gap",
) -> AdaptiveLambda:
    """``λ* = t*·σ̂`` of the adaptive rule (``lambda_rule: adaptive``, docs/methods/ranking.md §3.4.2).

    The outcome's law is read from the data (:func:`crowdflow.ranking.laws.outcome_law`):

    * graded: σ̂ from :func:`trimmed_scale`, t* from :func:`bh_threshold` on the residuals of its trimmed
      fit (Gaussian residuals);
    * ±a outcomes (``'binary'``: Bradley–Terry) or ±a and ties (``'ties'``: Rao–Kupper): the rows whose
      outcome is improbable under the law fitted robustly (:func:`crowdflow.ranking.laws.law_flags`, BH at
      ``q`` on the law's p-values, floored at ``2Φ̄(t_min)``). The fit flags exactly these rows; λ* is the
      smallest trimmed-LS residual among them (where the regularisation path stops, for its trace).

    Parameters
    ----------
    g : ComparisonGraph
    solver : LaplacianSolver, optional
    q : float
        Target false discovery rate (option ``fdr_q``).
    t_min : float
        Floor of t* (graded) and its p-value ``2Φ̄(t_min)`` (±1 outcomes); option ``t_min``.
    rows : ComparisonGraph, optional
        ±1 outcomes: the rows with their annotators when ``g`` has identical rows merged (the law's fit
        estimates a reversal share per annotator); default ``g``.
    binary_rule : {'upset_gap', 'law'}
        ±1 outcomes (option ``binary_rule``): ``'upset_gap'`` (the default) flags upsets from the largest fitted
        gap down while their mean local false discovery rate stays ≤ q (:func:`upset_gap_cut`); ``'law'`` the
        rows improbable under the Bradley–Terry / Rao–Kupper law (above), after a test that reversals are present.
        The law rule is more precise and flags nothing on the benchmark's clean draws (a held-out test that
        reversals are present), but its recall is far below the oracle's on sparse ±1 graphs and below
        ``upset_gap``'s on well-connected ones, and it meets the oracle target on fewer families
        (benchmarks/results/ranking_outliers.md), so it is not the default.

    Returns
    -------
    AdaptiveLambda
    """
    sc = trimmed_scale(g, solver=solver)
    law = outcome_law(g.y)
    if law != "graded" and binary_rule == "upset_gap":
        a = float(np.abs(g.y).max())
        delta = g.gradient(sc.theta) / a
        played = g.y != 0
        upset = played & (g.y * delta < 0)
        cut, _, _ = upset_gap_cut(np.abs(delta[played]), upset[played], g.w[played], q=q)
        # HLASSO flags |r| > λ and a contradiction at gap g has |r| = a(1 + g): flag the gaps ≥ g*
        lam = a * (1.0 + cut) * (1.0 - 1e-9) if math.isfinite(cut) else math.inf
        t = lam / sc.sigma if sc.sigma > 0 else math.inf
        return AdaptiveLambda(float(lam), sc.sigma, float(t), law, sc)
    if law != "graded":
        lf = law_flags(g if rows is None else rows, q=q, t_min=t_min, target=g)
        lam = float(np.abs(sc.resid[lf.flags]).min()) * (1.0 - 1e-9) if lf.flags.any() else math.inf
        t = lam / sc.sigma if sc.sigma > 0 else math.inf
        return AdaptiveLambda(lam, sc.sigma, float(t), law, sc, lf)
    if sc.sigma <= 0:
        return AdaptiveLambda(math.inf, 0.0, math.inf, "graded", sc)
    t = bh_threshold(sc.resid / sc.sigma, g.w, q=q, t_min=t_min)
    return AdaptiveLambda(float(t * sc.sigma), sc.sigma, float(t), "graded", sc)
