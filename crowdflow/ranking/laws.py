"""The outcome's own law for the adaptive outlier rule: ±1 and ±1-with-ties outcomes (docs/methods/ranking.md §3.4.2).

Graded outcomes keep the Gaussian residual rule of :mod:`crowdflow.ranking.scale`. Outcomes that take
the values ``{−a, +a}`` (*binary*) or ``{−a, 0, +a}`` with some ties (*ties*) are not Gaussian residuals
about a score difference; they are draws from a paired-comparison law, here the symmetric cumulative-link
model with scores s and ``δ_k = s_i − s_j``::

    P(y = +a) = F(δ − τ),   P(y = −a) = F(−δ − τ),   P(y = 0) = 1 − F(δ − τ) − F(−δ − τ),

with ``F`` the logistic cdf (Bradley–Terry for binary outcomes, Rao–Kupper with ties; the default) or the
normal cdf (Thurstone–Mosteller, Glenn–David with ties) and ``τ ≥ 0`` the tie threshold (``τ = 0`` for
binary outcomes). Which law applies is read from the outcomes (:func:`outcome_law`). The logistic link is
kept for Thurstone data too: choosing the link by likelihood picked the normal link on Bradley–Terry
data (the ML fit's scale inflation on a few tens of rows per item outweighs the tail difference), and
the normal link's thin tails turn natural upsets into false flags; the logistic tails err the other way.

A row's p-value is the probability, under the fitted law, of an outcome no more probable than the one
observed, ``p_k = Σ_{y: P(y) ≤ P(y_obs)} P(y)`` (for binary outcomes ``σ(−|δ|)`` on an upset, 1 otherwise).
The rule (:func:`law_flags`) first asks whether reversals are there at all, on held-out rows
(:func:`heldout_reversal_test`), then fits the scores robustly, by maximum likelihood of the law contaminated by
reversals (a share ε of answers reversed whatever the gap; EM with Fisher-scoring M-steps and a ridge
``ρ‖s‖²/2`` that keeps separable data finite), and flags the Benjamini–Hochberg set at ``q`` among the
rows with ``p ≤ p_max = 2Φ̄(t_min)`` (the graded rule's floor as a p-value: at most 1 % of clean rows). The
oracle of the benchmark applies the same cut (:func:`bh_reject`) to the p-values of the true law.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import cg, spsolve
from scipy.special import expit, log_expit, log_ndtr, ndtr

from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.options import FDR_Q, T_MIN

__all__ = [
    "HeldOutTest",
    "LawFit",
    "LawFlags",
    "OutcomeLaw",
    "ReversalMixture",
    "annotator_gated_fit",
    "bayes_fdr_flags",
    "bh_reject",
    "fit_law",
    "heldout_reversal_test",
    "law_flags",
    "law_probabilities",
    "law_pvalues",
    "null_scale",
    "outcome_law",
    "reversal_lr",
    "reversal_mixture",
    "reversal_test",
    "simulate_law",
]

OutcomeLaw = Literal["graded", "binary", "ties"]
Link = Literal["logit", "probit"]

#: Ridge on the scores, per unit of mean row weight (keeps separable data finite; negligible otherwise).
RIDGE = 1e-2
#: Fisher-scoring steps per M-step of :func:`reversal_mixture`.
M_STEPS = 1
#: Range of the tie threshold τ.
TAU_MIN, TAU_MAX = 1e-6, 10.0
#: Pseudo-rows of the overall reversal share in each annotator's share (:func:`reversal_mixture`).
ANNOTATOR_PRIOR_ROWS = 10.0
#: Level of the test that reversals are present at all (step 0 of :func:`law_flags`): on 42 clean ±1 draws
#: (sparse and dense, benchmarks/results/ranking_outliers.md) the held-out test's smallest p-value was 0.0135.
PRESENCE_ALPHA = 0.01
#: Folds of the held-out presence test (:func:`heldout_reversal_test`).
HELDOUT_FOLDS = 5
#: Fisher-scoring refits solve by sparse LU up to this many items, by Jacobi-preconditioned CG above.
SPSOLVE_MAX_N = 2000


def outcome_law(y: np.ndarray) -> OutcomeLaw:
    """The law the outcomes call for: ``'binary'`` (values ±a), ``'ties'`` (±a and 0, some 0) or ``'graded'``."""
    a = np.abs(np.asarray(y, dtype=float))
    nz = np.unique(a[a > 0])
    if nz.size != 1:
        return "graded"
    return "ties" if bool((a == 0).any()) else "binary"


def _cdf(x: np.ndarray, link: Link) -> np.ndarray:
    return np.asarray(expit(x) if link == "logit" else ndtr(x))


def _logcdf(x: np.ndarray, link: Link) -> np.ndarray:
    return log_expit(x) if link == "logit" else log_ndtr(x)


def law_probabilities(delta: np.ndarray, tau: float, link: Link) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(P(y = +a), P(y = 0), P(y = −a))`` of the symmetric cumulative-link law at ``δ`` (module docstring)."""
    pw = _cdf(delta - tau, link)
    pl = _cdf(-delta - tau, link)
    pt = np.exp(_log_tie(delta, tau, link)) if tau > 0 else np.zeros_like(pw)
    return pw, pt, pl


def law_pvalues(y: np.ndarray, delta: np.ndarray, tau: float, link: Link) -> np.ndarray:
    """``p_k = Σ_{y: P(y) ≤ P(y_obs)} P(y)``: the probability of an outcome no more probable than the observed one.

    ``y`` is the sign of the outcome (+1, 0, −1); ``delta`` the score difference ``s_i − s_j`` in the link's units.
    """
    probs = np.stack(law_probabilities(delta, tau, link))  # rows: win, tie, loss
    obs = np.where(y > 0, 0, np.where(y < 0, 2, 1))
    p_obs = probs[obs, np.arange(y.size)]
    p = np.sum(np.where(probs <= p_obs * (1.0 + 1e-12), probs, 0.0), axis=0)
    return np.asarray(np.clip(p, 0.0, 1.0))


def bh_reject(p: np.ndarray, w: np.ndarray, *, q: float = FDR_Q, p_max: float | None = None) -> np.ndarray:
    """Benjamini–Hochberg rejections at ``q`` with weights as replications, restricted to ``p ≤ p_max``.

    Rows sorted by p ascending with cumulative weight ``C_(i)`` (``W = Σw``); the largest prefix with
    ``p_(i) ≤ q·C_(i)/W`` gives ``p*`` and every row with ``p ≤ min(p*, p_max)`` is rejected.
    ``p_max`` defaults to ``2Φ̄(t_min)`` (0.01), the graded rule's floor.
    """
    p = np.asarray(p, dtype=float)
    if p_max is None:
        p_max = float(2.0 * ndtr(-T_MIN))
    W = float(np.sum(w))
    if p.size == 0 or W <= 0:
        return np.zeros(p.size, dtype=bool)
    o = np.argsort(p, kind="stable")
    ok = np.flatnonzero(p[o] <= q * np.cumsum(w[o]) / W)
    if not ok.size:
        return np.zeros(p.size, dtype=bool)
    return np.asarray(p <= min(float(p[o][ok[-1]]), p_max))


@dataclass(frozen=True)
class LawFit:
    """A penalised maximum-likelihood fit of the comparison law on a set of rows.

    Attributes
    ----------
    s : numpy.ndarray
        (n,) scores in the link's units.
    tau : float
        Tie threshold (0 for binary outcomes).
    link : {'logit', 'probit'}
    loglik : numpy.ndarray
        (m,) log-likelihood of every row (fitted rows and the others).
    n_iter : int
        Fisher-scoring steps.
    """

    s: np.ndarray
    tau: float
    link: Link
    loglik: np.ndarray
    n_iter: int


def _logpdf(x: np.ndarray, link: Link) -> np.ndarray:
    if link == "logit":
        return np.asarray(log_expit(x) + log_expit(-x))
    return np.asarray(-0.5 * x * x - 0.5 * math.log(2.0 * math.pi))


def _log_tie(delta: np.ndarray, tau: float, link: Link) -> np.ndarray:
    """``log P(y = 0) = log(F(τ − |δ|) − F(−τ − |δ|))`` without cancellation far in the tails."""
    u = np.abs(delta)
    hi, lo = _logcdf(tau - u, link), _logcdf(-tau - u, link)
    return np.asarray(hi + np.log1p(-np.exp(np.minimum(lo - hi, -1e-300))))


def _row_loglik(z: np.ndarray, delta: np.ndarray, tau: float, link: Link) -> np.ndarray:
    """Log-likelihood per row, ``z`` the outcome sign."""
    out = np.where(z > 0, _logcdf(delta - tau, link), _logcdf(-delta - tau, link))
    if tau > 0:
        out = np.where(z == 0, _log_tie(delta, tau, link), out)
    return out


def _score_and_info(z: np.ndarray, delta: np.ndarray, tau: float, link: Link) -> tuple[np.ndarray, np.ndarray]:
    """``∂ℓ/∂δ`` and the expected information ``Σ_y (∂P_y/∂δ)²/P_y`` per row (in log space: exact in the tails)."""
    a, b = delta - tau, -delta - tau
    lfa, lfb = _logpdf(a, link), _logpdf(b, link)
    lFa, lFb = _logcdf(a, link), _logcdf(b, link)
    ga, gb = np.exp(lfa - lFa), np.exp(lfb - lFb)  # hazard-type ratios f/F
    info = np.exp(2.0 * lfa - lFa) + np.exp(2.0 * lfb - lFb)
    grad = np.where(z > 0, ga, -gb)
    if tau > 0:
        lpt = _log_tie(delta, tau, link)
        ha, hb = np.exp(lfa - 0.5 * lpt), np.exp(lfb - 0.5 * lpt)
        info = info + (hb - ha) ** 2
        grad = np.where(z == 0, np.exp(lfb - lpt) - np.exp(lfa - lpt), grad)
    return grad, info


def _solve(g: ComparisonGraph, h: np.ndarray, rhs: np.ndarray, rho: float) -> np.ndarray:
    """``(Xᵀ diag(h) X + ρI)⁻¹ rhs``."""
    A = sp.csr_matrix(g.X.T @ sp.diags(h) @ g.X + rho * sp.eye(g.n))
    if g.n <= SPSOLVE_MAX_N:
        return np.asarray(spsolve(A.tocsc(), rhs))
    d = A.diagonal()
    M = sp.diags(1.0 / d)
    x, _ = cg(A, rhs, M=M, rtol=1e-10, maxiter=2000)
    return np.asarray(x)


def _tau_step(loglik: Callable[[float], float], tau: float, h: float = 1e-4) -> float:
    """One safeguarded Newton step on τ ∈ [TAU_MIN, TAU_MAX] (numerical derivatives, halved until ℓ rises)."""
    tau = min(max(tau, TAU_MIN + h), TAU_MAX - h)
    f0, fp, fm = loglik(tau), loglik(tau + h), loglik(tau - h)
    g1, g2 = (fp - fm) / (2.0 * h), (fp - 2.0 * f0 + fm) / (h * h)
    step = -g1 / g2 if g2 < 0 else math.copysign(0.1, g1)
    for _ in range(30):
        new = min(max(tau + step, TAU_MIN), TAU_MAX)
        if loglik(new) >= f0:
            return new
        step *= 0.5
    return tau


def fit_law(
    g: ComparisonGraph,
    wk: np.ndarray,
    *,
    law: OutcomeLaw,
    link: Link,
    s0: np.ndarray | None = None,
    tau0: float = 0.5,
    max_iter: int = 100,
    tol: float = 1e-8,
    wrev: np.ndarray | None = None,
    ridge: float = RIDGE,
) -> LawFit:
    """Penalised ML fit of the law with row weights ``wk`` (Fisher scoring on s, a 1-D search on τ; module docstring).

    Maximises ``Σ_k [wk_k ℓ(y_k | δ_k, τ) + wrev_k ℓ(−y_k | δ_k, τ)] − ρ‖s‖²/2`` with ``δ = s_i − s_j``
    and ``ρ = ridge·mean(w)`` (``wk = 0``: a row left out; ``wrev``, default 0: the weight of the row's
    reversed outcome, the M-step of :func:`reversal_mixture`). Steps on s are
    Fisher-scoring steps (the expected information is a weighted Laplacian) halved until the objective
    rises; τ (ties only) takes one safeguarded Newton step on ``[10⁻⁶, 10]`` after every step.
    """
    z = np.sign(g.y)
    wr = np.zeros(g.m) if wrev is None else np.asarray(wrev, dtype=float)
    rho = ridge * float(np.mean(g.w)) if g.m else ridge
    s = np.zeros(g.n) if s0 is None else np.asarray(s0, dtype=float).copy()
    tau = float(tau0) if law == "ties" else 0.0

    def loglik(d: np.ndarray, tau_: float) -> float:
        out = float(np.sum(wk * _row_loglik(z, d, tau_, link)))
        if wrev is not None:
            out += float(np.sum(wr * _row_loglik(-z, d, tau_, link)))
        return out

    def objective(s_: np.ndarray, tau_: float) -> float:
        return loglik(g.gradient(s_), tau_) - 0.5 * rho * float(s_ @ s_)

    f = objective(s, tau)
    it = 0
    for it in range(1, max_iter + 1):
        d = g.gradient(s)
        gr, info = _score_and_info(z, d, tau, link)
        v = wk * gr
        if wrev is not None:
            v = v + wr * _score_and_info(-z, d, tau, link)[0]
        rhs = np.bincount(g.i, v, g.n) - np.bincount(g.j, v, g.n) - rho * s
        step = _solve(g, (wk + wr) * info, rhs, rho)
        lam = 1.0
        while True:
            s_new = s + lam * step
            f_new = objective(s_new, tau)
            if f_new >= f - 1e-12 * abs(f) or lam < 1e-6:
                break
            lam *= 0.5
        if law == "ties":
            d_new = g.gradient(s_new)
            tau = _tau_step(lambda t: loglik(d_new, t), tau)
            f_new = objective(s_new, tau)
        done = abs(f_new - f) <= tol * max(1.0, abs(f))
        s, f = s_new, f_new
        if done:
            break
    return LawFit(s, tau, link, _row_loglik(z, g.gradient(s), tau, link), it)


@dataclass(frozen=True)
class LawFlags:
    """The flags of the law-based rule (:func:`law_flags`).

    Attributes
    ----------
    flags : numpy.ndarray
        (m,) bool, rows whose outcome is improbable under the fitted law (BH at q, p ≤ p_max).
    pvalues : numpy.ndarray
        (m,) p-values under the final fit.
    law : {'binary', 'ties'}
    fit : LawFit
        The clean component of the contaminated fit.
    eps : float
        ε̂, the estimated share of reversed answers (first fit, every row).
    """

    flags: np.ndarray
    pvalues: np.ndarray
    law: OutcomeLaw
    fit: LawFit
    eps: float


@dataclass(frozen=True)
class ReversalMixture:
    """The reversal-contaminated fit with its per-row reversal shares (:func:`reversal_mixture`).

    Attributes
    ----------
    fit : LawFit
        The clean component (its ``loglik`` is the clean law's).
    eps : float
        ε̂, the overall share of reversed answers.
    loglik : float
        Mixture log-likelihood ``Σ w log P(y | δ)``.
    eps_row : numpy.ndarray
        (m,) the reversal share of each row's annotator (ε̂ for every row with one shared share).
    """

    fit: LawFit
    eps: float
    loglik: float
    eps_row: np.ndarray

    def reversal_posterior(self, g: ComparisonGraph) -> np.ndarray:
        """``1 − r_k``: the posterior probability that row k of ``g`` was reversed (the E-step at the fit)."""
        z = np.sign(g.y)
        d = g.gradient(self.fit.s)
        a_ = np.log1p(-self.eps_row) + _row_loglik(z, d, self.fit.tau, self.fit.link)
        b_ = np.log(self.eps_row) + _row_loglik(-z, d, self.fit.tau, self.fit.link)
        return np.asarray(np.exp(b_ - np.logaddexp(a_, b_)))


def reversal_mixture(
    g: ComparisonGraph,
    *,
    law: OutcomeLaw,
    link: Link,
    by_annotator: bool = True,
    prior_rows: float = ANNOTATOR_PRIOR_ROWS,
    eps0: float = 0.05,
    max_iter: int = 100,
    tol: float = 1e-6,
    keep: np.ndarray | None = None,
    start: LawFit | None = None,
    ridge: float = RIDGE,
) -> ReversalMixture:
    """ML fit of the reversal-contaminated law by EM (the robust start of :func:`law_flags`).

    ``P(y | δ) = (1 − ε)·P_law(y | δ) + ε·P_law(−y | δ)``: a share ε of the answers is reversed whatever
    the gap (a careless or flipping annotator, a swapped pair). E-step: ``r_k = (1 − ε)P_law(y_k)/P(y_k)``,
    the posterior that row k was not reversed; M-step: ``M_STEPS`` Fisher-scoring steps of :func:`fit_law` with
    weights ``w·r`` on the outcomes and ``w·(1 − r)`` on the reversed outcomes, ``ε = Σw(1 − r)/Σw``. A
    plain ML fit flattens the scores under reversals among far-apart pairs (10 % of them shrink the
    scores about threefold), which hides the reversals; the mixture does not.

    Returns the clean component's fit, ε̂, the mixture log-likelihood ``Σ w log P(y | δ)`` and each row's
    reversal share (:class:`ReversalMixture`).
    """
    z = np.sign(g.y)
    w = g.w if keep is None else np.where(keep, g.w, 0.0)
    fit = start if start is not None else fit_law(g, w, law=law, link=link, ridge=ridge)
    eps = eps0
    W = float(w.sum())
    codes: np.ndarray | None = None
    if by_annotator and g.has_annotator:
        _, codes = np.unique(g.annotator.astype(str), return_inverse=True)
        w_a = np.bincount(codes, w, minlength=int(codes.max(initial=0)) + 1)
    eps_row = np.full(g.m, eps)
    prev = -math.inf
    ll = -math.inf
    for _ in range(max_iter):
        d = g.gradient(fit.s)
        l_obs, l_rev = fit.loglik, _row_loglik(-z, d, fit.tau, link)
        a_, b_ = np.log1p(-eps_row) + l_obs, np.log(eps_row) + l_rev
        lmix = np.logaddexp(a_, b_)
        ll = float(np.sum(w * lmix))
        if abs(ll - prev) <= tol * max(1.0, abs(ll)):
            break
        prev = ll
        r = np.exp(a_ - lmix)
        eps = float(min(max(np.sum(w * (1.0 - r)) / W, 1e-6), 0.45))
        if codes is None:
            eps_row = np.full(g.m, eps)
        else:  # per annotator, shrunk towards the overall share by prior_rows pseudo-rows
            e_a = (np.bincount(codes, w * (1.0 - r)) + prior_rows * eps) / (w_a + prior_rows)
            eps_row = np.clip(e_a[codes], 1e-6, 1.0 - 1e-6)
        fit = fit_law(
            g,
            w * r,
            law=law,
            link=link,
            s0=fit.s,
            tau0=max(fit.tau, 0.05),
            max_iter=M_STEPS,
            wrev=w * (1.0 - r),
            ridge=ridge,
        )
    return ReversalMixture(fit, eps, ll, eps_row)


def law_flags(
    g: ComparisonGraph,
    *,
    q: float = FDR_Q,
    t_min: float = T_MIN,
    link: Link = "logit",
    target: ComparisonGraph | None = None,
    presence_alpha: float | None = PRESENCE_ALPHA,
    presence: Literal["heldout", "bootstrap"] = "heldout",
    ridge: float = RIDGE,
) -> LawFlags:
    """Rows whose outcome is improbable under the comparison law fitted robustly to the data (module docstring).

    0. Reversals present at all? The held-out calibration test (:func:`heldout_reversal_test`, level
       ``presence_alpha``; ``presence='bootstrap'``: the scale-calibrated parametric bootstrap of
       :func:`reversal_test`); when it does not reject, nothing is flagged. On sparse clean graphs the
       mixture is not identified and fits the ML fit's over-confident scores (8 rows an item: 6–9 % of clean
       rows flagged without this step); the bootstrap read a clean Thurstone-with-ties band draw of 1,000
       items as reversals (17.8 % of its rows flagged), the held-out test does not.

    1. Scores from the reversal-contaminated fit (:func:`reversal_mixture`), with one reversal share per
       annotator when the BIC prefers it to one shared share, else the shared share
       (:func:`annotator_gated_fit`);
    2. a row's p-value is that of its outcome under the clean law at those scores (:func:`law_pvalues`);
       the flags are the Benjamini–Hochberg set at ``q`` among the rows with ``p ≤ 2Φ̄(t_min)``
       (:func:`bh_reject`);

    No trimmed refit follows: without the flagged rows the EM can settle on its other fixed point (a
    small ε and compressed scores that absorb the remaining reversals; on 20 items and 1,500 Thurstone rows
    with 10 % reversals it then flagged nothing).

    The p-value of a row depends on its pair and outcome only, so the flags of identical rows agree and
    the rule can be fitted on the rows with their annotators and applied to their merged form
    (``target``).

    Parameters
    ----------
    g : ComparisonGraph
        Outcomes ±a, or ±a and 0 (:func:`outcome_law` is not ``'graded'``), with annotators when known.
    q : float
        Target false discovery rate (option ``fdr_q``).
    t_min : float
        The graded rule's floor; rows with ``p > 2Φ̄(t_min)`` are never flagged.
    link : {'logit', 'probit'}
        ``'logit'``: Bradley–Terry (binary) or Rao–Kupper (ties), the default; ``'probit'``: Thurstone.
    target : ComparisonGraph, optional
        The graph (same items, e.g. identical rows merged) whose rows are flagged; default ``g``.
    presence_alpha : float or None
        Level of the presence test (step 0, default 0.01); ``None`` skips it.
    presence : {'heldout', 'bootstrap'}
        The presence test: :func:`heldout_reversal_test` (the default) or :func:`reversal_test`.
    ridge : float
        Ridge of the flagging fit (step 1), per unit of mean row weight.

    Returns
    -------
    LawFlags
        Flags and p-values of the rows of ``target``.
    """
    law = outcome_law(g.y)
    if law == "graded":
        raise ValueError("law_flags needs ±1 outcomes (with or without ties); graded outcomes use the Gaussian rule")
    p_max = float(2.0 * ndtr(-t_min))
    tg = g if target is None else target
    if presence_alpha is not None:
        if presence == "heldout":
            p_mix = heldout_reversal_test(g, law=law, link=link).p
            null = fit_law(g, g.w, law=law, link=link)
        else:
            p_mix, _, null, _ = reversal_test(g, law=law, link=link, alpha=presence_alpha)
        if p_mix > presence_alpha:  # no evidence of reversals: flag nothing, keep the plain fit
            p = law_pvalues(np.sign(tg.y), tg.gradient(null.s), null.tau, link)
            return LawFlags(np.zeros(tg.m, dtype=bool), p, law, null, 0.0)
    fit, eps, _ = annotator_gated_fit(g, law=law, link=link, ridge=ridge)
    p = law_pvalues(np.sign(tg.y), tg.gradient(fit.s), fit.tau, link)
    return LawFlags(bh_reject(p, tg.w, q=q, p_max=p_max), p, law, fit, eps)


def simulate_law(g: ComparisonGraph, s: np.ndarray, tau: float, link: Link, rng: np.random.Generator) -> np.ndarray:
    """Outcomes ``±a`` / 0 drawn from the law at scores ``s`` on the rows of ``g`` (``a`` = ``max|y|``)."""
    pw, pt, _ = law_probabilities(g.gradient(s), tau, link)
    a = float(np.abs(g.y).max()) if g.m else 1.0
    u = rng.random(g.m)
    return np.asarray(np.where(u < pw, a, np.where(u < pw + pt, 0.0, -a)))


def reversal_lr(g: ComparisonGraph, *, law: OutcomeLaw, link: Link) -> tuple[float, LawFit, ReversalMixture]:
    """``T = 2(ℓ_mix − ℓ_0)``: the likelihood ratio of one shared reversal share against none, with both fits."""
    null = fit_law(g, g.w, law=law, link=link)
    mix = reversal_mixture(g, law=law, link=link, by_annotator=False, start=null)
    return 2.0 * (mix.loglik - float(np.sum(g.w * null.loglik))), null, mix


def null_scale(
    g: ComparisonGraph, null: LawFit, *, law: OutcomeLaw, link: Link, rng: np.random.Generator, rounds: int = 3
) -> float:
    """The factor ``c`` by which the plain fit inflates the scores: data simulated at ``c·ŝ`` refit to sd(ŝ).

    Maximum likelihood on a few rows per item spreads the scores (by 2.4× on a band design of 1,000 items
    with 8 rows an item and σ = 1), so data simulated from ``ŝ`` are more decided than the data were;
    ``c ← c·sd(ŝ)/sd(ŝ_b)`` over ``rounds`` simulate-and-refit rounds matches the refitted spread.
    """
    sd = float(np.std(null.s))
    c = 1.0
    if sd <= 0:
        return c
    for _ in range(rounds):
        gb = replace(g, y=simulate_law(g, c * null.s, null.tau, link, rng))
        sd_b = float(np.std(fit_law(gb, gb.w, law=law, link=link, tau0=max(null.tau, 0.05)).s))
        if sd_b <= 0:
            break
        c *= sd / sd_b
    return c


def reversal_test(
    g: ComparisonGraph,
    *,
    law: OutcomeLaw,
    link: Link,
    alpha: float,
    seed: int = 0,
    calibrate_scale: bool = True,
) -> tuple[float, float, LawFit, ReversalMixture]:
    """Parametric-bootstrap test that reversals are present at all (docs/methods/ranking.md §3.4.2).

    ``T = 2(ℓ_mix − ℓ_0)`` (:func:`reversal_lr`) is compared with its law under the fitted no-reversal model
    on the same design: ``B = ⌈1/α⌉ − 1`` outcome vectors drawn from the plain fit (same pairs, weights and
    annotators; scores shrunk by :func:`null_scale` when ``calibrate_scale``), each refitted both ways. The
    Monte Carlo p-value is ``(1 + #{T_b ≥ T})/(B + 1)``; the draws stop at the first ``T_b ≥ T`` (the
    p-value then exceeds α whatever the rest give, Besag & Clifford 1991), so data without reversals
    usually cost a few refits. No early rejection: on sparse clean graphs the first few
    ``T_b`` can all sit well below T with a small spread while a later one passes it (a rule "reject when
    T > mean + 6 sd of 4 draws" flagged rows on 2 of 3 such draws).

    Returns
    -------
    tuple
        ``(p, T, null fit, shared-share mixture)``; ``p ≤ α`` means reversals are present.
    """
    t_obs, null, mix = reversal_lr(g, law=law, link=link)
    B = max(1, math.ceil(1.0 / alpha) - 1)
    if not t_obs > 0:
        return 1.0, t_obs, null, mix
    rng = np.random.default_rng(seed)
    c = null_scale(g, null, law=law, link=link, rng=rng) if calibrate_scale else 1.0
    for b in range(B):
        gb = replace(g, y=simulate_law(g, c * null.s, null.tau, link, rng))
        if outcome_law(gb.y) != law:
            continue
        t_b, _, _ = reversal_lr(gb, law=law, link=link)
        if t_b >= t_obs:
            return (2.0 + b) / (B + 1.0), t_obs, null, mix
    return 1.0 / (B + 1.0), t_obs, null, mix


@dataclass(frozen=True)
class HeldOutTest:
    """The held-out calibration test that reversals are present (:func:`heldout_reversal_test`).

    Attributes
    ----------
    p : float
        ``Φ̄(√LR)``, the p-value of ``LR`` under ``½χ²₀ + ½χ²₁`` (ε = 0 is on the boundary).
    lr : float
        ``2(ℓ_1 − ℓ_0)`` on the held-out rows: calibration with a reversal share against without.
    eps : float
        The held-out reversal share of the alternative.
    beta : float
        The held-out temperature of the null calibration (1: the fitted scores are calibrated).
    """

    p: float
    lr: float
    eps: float
    beta: float


def _calibration_nll(
    z: np.ndarray, w: np.ndarray, dm: np.ndarray, law: OutcomeLaw, link: Link, tau: float, with_eps: bool
) -> tuple[float, np.ndarray]:
    """Minimum of ``−Σ w log P`` over the calibration ``P(y) = (1 − ε)P_law(y | βδ̃, τ') + εP_law(−y | βδ̃, τ')``.

    Parameters ``(log β, log τ' [ties], logit 2ε [with_eps])``, by Nelder–Mead from several starts of ε.
    """
    from scipy.optimize import minimize

    ties = law == "ties"

    def nll(x: np.ndarray) -> float:
        d = math.exp(x[0]) * dm
        t = math.exp(x[1]) if ties else 0.0
        lo = _row_loglik(z, d, t, link)
        if not with_eps:
            return -float(np.sum(w * lo))
        e = 0.5 * float(expit(x[-1]))  # ε < 1/2: beyond it the law would be reversed
        lr_ = _row_loglik(-z, d, t, link)
        return -float(np.sum(w * np.logaddexp(math.log1p(-e) + lo, math.log(max(e, 1e-300)) + lr_)))

    base = [0.0, math.log(max(tau, 0.05))] if ties else [0.0]
    starts = [np.array([*base, e0]) for e0 in (-6.0, -3.0, -1.5)] if with_eps else [np.array(base)]
    best: tuple[float, np.ndarray] | None = None
    for x0 in starts:
        r = minimize(nll, x0, method="Nelder-Mead", options={"maxiter": 4000, "xatol": 1e-6, "fatol": 1e-8})
        if best is None or float(r.fun) < best[0]:
            best = (float(r.fun), np.asarray(r.x))
    assert best is not None
    return best


def heldout_reversal_test(
    g: ComparisonGraph,
    *,
    law: OutcomeLaw,
    link: Link,
    folds: int = HELDOUT_FOLDS,
    seed: int = 0,
) -> HeldOutTest:
    """Are reversals present? A test on held-out rows: do confident predictions fail at a rate that does not fade?

    The rows are dealt at random to ``folds`` folds; each fold's rows are predicted by the reversal mixture
    (one shared share, :func:`reversal_mixture`) fitted on the other folds, at the moderated gap
    ``δ̃_k = δ̂_k/√(1 + κv_k)`` (the Laplace posterior predictive; ``κ = π/8`` for the logistic link, 1 for
    the probit; ``v_k = 1/H_i + 1/H_j`` with ``H`` the diagonal of the training fit's information plus the
    ridge). On the held-out rows two calibrations are fitted by maximum likelihood: the law at ``βδ̃`` (a
    temperature β, and τ' with ties) and the same with a reversal share ε,
    ``(1 − ε)P(y | βδ̃) + εP(−y | βδ̃)``. Reversals among far-apart pairs leave upsets at a rate ≈ ε however
    confident the prediction; without them the upset rate fades like the law's tail. ``LR = 2(ℓ_1 − ℓ_0)``
    is referred to ``½χ²₀ + ½χ²₁``.

    Why not the likelihood ratio on all rows: on a sparse graph each item's score is fitted from a few rows,
    and a reversal share lets the mixture over-fit them, so the in-sample ratio is large on clean data (a
    clean Thurstone-with-ties band draw of 1,000 items, 8 rows an item: 1,077 nats with the logistic law,
    1,181 with the generating probit law, 1,013–1,122 on data redrawn from the true scores). A parametric
    bootstrap from the fitted scores does not reproduce it (560–850 nats; those scores are rougher along the
    graph than the true ones). Held out, the over-fitted scores only predict badly; the temperature β absorbs
    that, and the moderation absorbs the uneven precision of items with few rows (without it, a clean Zipf
    draw gave LR = 8.6).
    """
    z = np.sign(g.y)
    w = g.w
    kappa = math.pi / 8.0 if link == "logit" else 1.0
    rho = RIDGE * float(np.mean(w)) if g.m else RIDGE
    fold = np.random.default_rng(seed).permutation(g.m) % max(2, folds)
    dm = np.zeros(g.m)
    taus = []
    for k in range(max(2, folds)):
        keep, out = fold != k, fold == k
        mix = reversal_mixture(g, law=law, link=link, by_annotator=False, keep=keep)
        d = g.gradient(mix.fit.s)
        _, info = _score_and_info(z, d, mix.fit.tau, link)
        wi = np.where(keep, w, 0.0) * info
        h = np.bincount(g.i, wi, g.n) + np.bincount(g.j, wi, g.n) + rho
        v = 1.0 / h[g.i] + 1.0 / h[g.j]
        dm[out] = (d / np.sqrt(1.0 + kappa * v))[out]
        taus.append(mix.fit.tau)
    tau = float(np.mean(taus))
    f0, x0 = _calibration_nll(z, w, dm, law, link, tau, with_eps=False)
    f1, x1 = _calibration_nll(z, w, dm, law, link, tau, with_eps=True)
    lr = max(0.0, 2.0 * (f0 - f1))
    return HeldOutTest(float(ndtr(-math.sqrt(lr))), lr, 0.5 * float(expit(x1[-1])), math.exp(float(x0[0])))


def bayes_fdr_flags(post: np.ndarray, w: np.ndarray, *, q: float) -> np.ndarray:
    """The largest set of rows, by posterior reversal probability, whose mean posterior of no reversal is ≤ q.

    Rows sorted by ``post`` descending; the set is the longest prefix with ``Σ w(1 − post)/Σ w ≤ q`` (the
    Bayesian false discovery rate of Müller, Parmigiani & Rice 2006 / Efron's local fdr averaged).
    """
    if post.size == 0:
        return np.zeros(0, dtype=bool)
    o = np.argsort(-post, kind="stable")
    fdr = np.cumsum(w[o] * (1.0 - post[o])) / np.cumsum(w[o])
    ok = np.flatnonzero(fdr <= q)
    out = np.zeros(post.size, dtype=bool)
    if ok.size:
        out[o[: ok[-1] + 1]] = True
    return out


def annotator_gated_fit(
    g: ComparisonGraph, *, law: OutcomeLaw, link: Link, ridge: float = RIDGE
) -> tuple[LawFit, float, bool]:
    """The reversal mixture with per-annotator shares only where the data call for them (a BIC gate).

    Fits the mixture with one shared share ``ε`` (log-likelihood ``ℓ_1``) and with a share per annotator
    shrunk towards it (``ℓ_A``, :func:`reversal_mixture`); keeps the per-annotator fit when
    ``2(ℓ_A − ℓ_1) > (A − 1)·log W`` (``A`` annotators, ``W = Σw``), the Bayesian information criterion
    counting one parameter per extra share. Without the gate the per-annotator shares over-fit weak data:
    on a clean band design of 1,000 items an annotator whose few rows hold two natural upsets gets a large
    share, and the scores bend to it (15 % of clean rows flagged; 0 % with the gate).

    Returns
    -------
    tuple
        The clean component's fit, ε̂ and whether the per-annotator shares were kept.
    """
    shared = reversal_mixture(g, law=law, link=link, by_annotator=False, ridge=ridge)
    if not g.has_annotator:
        return shared.fit, shared.eps, False
    n_ann = int(np.unique(g.annotator.astype(str)).size)
    if n_ann < 2:
        return shared.fit, shared.eps, False
    per = reversal_mixture(g, law=law, link=link, by_annotator=True, start=shared.fit, ridge=ridge)
    W = float(np.sum(g.w))
    if 2.0 * (per.loglik - shared.loglik) > (n_ann - 1) * math.log(max(W, 2.0)):
        return per.fit, per.eps, True
    return shared.fit, shared.eps, False
