"""EBCC: enhanced Bayesian classifier combination, by mean-field variational inference.

Yuan Li, Benjamin I. P. Rubinstein and Trevor Cohn, "Exploiting Worker Correlation for Label Aggregation in
Crowdsourcing", ICML 2019 (PMLR 97:3886-3895). docs/methods/skills.md §7.5.

Model (K classes, M subtypes per class, W workers, T tasks)::

    τ ~ Dir(α)                      class shares            α_k: the majority-vote class counts (the
                                                            authors' "empirical prior"), or a constant
    π_k ~ Dir(a_π/M, ..., a_π/M)    subtype shares of class k
    v_jkm ~ Dir(β_k)                worker j's answer distribution on a task of class k, subtype m;
                                    β_kl = a_v if l = k else b_v (a prior that favours the right answer)
    z_t ~ Cat(τ),  g_t | z_t ~ Cat(π_{z_t}),  y_tj | z_t, g_t ~ Cat(v_{j z_t g_t})

Two workers' answers on a task are independent given (z_t, g_t) but correlated given z_t alone: the subtypes
are clusters of tasks on which the workers err together. M = 1 is Bayesian Dawid–Skene (Kim & Ghahramani's
IBCC).

Mean-field posterior q(τ) q(π) q(v) Π_t q(z_t, g_t) with Dirichlet factors and φ_tkm = q(z_t = k, g_t = m).
Coordinate ascent (CAVI), each step the exact optimum of its factor given the others, so the evidence lower
bound (ELBO) never decreases:

- ν_k = α_k + Σ_{t,m} φ_tkm;  η_km = a_π/M + Σ_t φ_tkm;  μ_jkml = β_kl + Σ_{t: y_tj = l} φ_tkm;
- log φ_tkm = E log τ_k + E log π_km + Σ_{j labels t} E log v_{jkm y_tj} − log Z_t, with
  E log x_i = ψ(a_i) − ψ(Σ a) under Dir(a).

The sums over labels are two sparse products with the (worker, answer) × task incidence matrix S: the
counts μ − β are S φ and the per-task log-likelihoods are Sᵀ E log v (no Python loop over labels).

ELBO, at the factors after a full sweep (the φ just computed from the globals)::

    L = Σ_t log Z_t + Σ_{Dirichlet factors q = Dir(b), prior Dir(a)} [ln B(b) − ln B(a) + Σ_i (a_i − b_i) E_q log x_i]

with ln B(a) = Σ ln Γ(a_i) − ln Γ(Σ a_i) (the data and entropy terms of φ fold into log Z_t when φ is the
softmax of its log-weights).

Initialisation (as the authors): φ_tkm = MV share of class k on task t times a Dirichlet(1, ..., 1) draw over m.
Stopping rule: after sweep i ≥ 2, stop when |L_i − L_{i−1}| ≤ tol·|L_i|; after ``max_iter`` sweeps the fit
stops unconverged (``converged=False``, a ``RuntimeWarning``). The bound has many local optima (the
subtypes are a mixture), so the fit runs ``restarts`` initialisations, restart r drawing from
``numpy.random.default_rng([seed, r])``, and keeps the one with the largest final ELBO (the authors run 40
random seeds and keep the best ELBO). Same inputs and seed, same result.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.special import digamma, gammaln, logsumexp

from crowdflow.labels import LabelMatrix
from crowdflow.skills.dawid_skene import _mv_init, _pick
from crowdflow.skills.types import TieBreak

if TYPE_CHECKING:
    from crowdflow.skills.options import SkillsOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EBCCResult:
    """Result of an EBCC fit (:func:`ebcc`).

    Attributes
    ----------
    consensus : pandas.DataFrame
        task, label, confidence (posterior of the label), n_labels.
    posteriors : numpy.ndarray
        T×K, q(z_t = k) = Σ_m φ_tkm.
    workers : pandas.DataFrame
        worker, accuracy, skill, vote_weight (NaN: EBCC votes with its confusion tables), n_labels;
        accuracy = Σ_k E[τ_k] confusion[j, k, k], skill = (K accuracy − 1)/(K − 1).
    confusion : numpy.ndarray
        W×K×K, confusion[j, k, l] = Σ_m E[π_km] E[v_jkml], worker j's posterior-mean answer distribution on a
        task of class k (subtypes mixed).
    class_prior : numpy.ndarray
        E[τ] (length K).
    subtype_weights : numpy.ndarray
        K×M, E[π_km].
    elbo : numpy.ndarray
        ELBO after each sweep of the kept restart (non-decreasing up to rounding).
    restart_elbos : numpy.ndarray
        Final ELBO of every restart; the kept one is the largest.
    iterations : int
        Sweeps of the kept restart.
    converged : bool
        Whether the kept restart met the stopping rule before ``max_iter``.
    n_ties : int
        Tasks whose top posterior was shared.
    method : str
        ``"ebcc"``.
    """

    consensus: pd.DataFrame
    posteriors: np.ndarray
    workers: pd.DataFrame
    confusion: np.ndarray
    class_prior: np.ndarray
    subtype_weights: np.ndarray
    elbo: np.ndarray
    restart_elbos: np.ndarray
    iterations: int
    converged: bool
    n_ties: int
    method: str = "ebcc"


@dataclass(frozen=True)
class _Run:
    phi: np.ndarray
    nu: np.ndarray
    eta: np.ndarray
    mu: np.ndarray
    elbo: np.ndarray
    converged: bool


def _log_beta(a: np.ndarray) -> np.ndarray:
    """ln B(a) over the last axis: Σ ln Γ(a_i) − ln Γ(Σ a_i)."""
    return np.asarray(gammaln(a).sum(axis=-1) - gammaln(a.sum(axis=-1)))


def _e_log(a: np.ndarray) -> np.ndarray:
    """E log x under Dir(a), over the last axis."""
    return np.asarray(digamma(a) - digamma(a.sum(axis=-1, keepdims=True)))


def _dirichlet_term(post: np.ndarray, prior: np.ndarray, e_log: np.ndarray) -> float:
    """E_q[log p(x)] − E_q[log q(x)] summed over Dirichlet factors q = Dir(post), p = Dir(prior)."""
    prior = np.broadcast_to(prior, post.shape)
    return float((_log_beta(post) - _log_beta(prior)).sum() + ((prior - post) * e_log).sum())


def _check(
    lm: LabelMatrix, n_subtypes: int, priors: tuple[float, ...], tol: float, max_iter: int, restarts: int
) -> None:
    if lm.n_labels == 0:
        raise ValueError("label matrix is empty")
    if lm.n_classes < 2:
        raise ValueError(
            f"EBCC needs at least 2 classes, got {lm.classes.tolist()} (declare the label set with classes=[...])"
        )
    if n_subtypes < 1 or restarts < 1 or max_iter < 1:
        raise ValueError("n_subtypes, restarts and max_iter must be >= 1")
    if not all(np.isfinite(p) and p > 0 for p in priors):
        raise ValueError(f"EBCC's Dirichlet parameters must be finite and > 0, got {priors}")
    if not tol > 0:
        raise ValueError("tol must be > 0")


def _incidence(lm: LabelMatrix) -> sp.csr_matrix:
    """S, (W·K)×T: S[j·K + l, t] = 1 when worker j answered l on task t."""
    k = lm.n_classes
    rows = lm.worker_idx.astype(np.int64) * k + lm.class_idx
    data = np.ones(lm.n_labels)
    return sp.csr_matrix((data, (rows, lm.task_idx)), shape=(lm.n_workers * k, lm.n_tasks))


def _run(
    s: sp.csr_matrix,
    s_t: sp.csr_matrix,
    phi: np.ndarray,
    alpha: np.ndarray,
    a_pi: float,
    beta: np.ndarray,
    n_workers: int,
    tol: float,
    max_iter: int,
) -> _Run:
    """CAVI sweeps from φ (T×K×M) until the relative ELBO change is ≤ tol or ``max_iter`` sweeps."""
    t, k, m = phi.shape
    pi_prior = np.full(m, a_pi / m)
    mu_prior = beta[None, :, None, :]  # (1, K, 1, L)
    trace: list[float] = []
    converged = False
    for it in range(max_iter):
        # global factors from φ
        nu = alpha + phi.sum(axis=(0, 2))
        eta = pi_prior + phi.sum(axis=0)
        counts = np.asarray(s @ phi.reshape(t, k * m)).reshape(n_workers, k, k, m)  # (j, l, k, m)
        mu = mu_prior + counts.transpose(0, 2, 3, 1)  # (j, k, m, l)
        e_tau, e_pi, e_v = _e_log(nu), _e_log(eta), _e_log(mu)
        # local factor φ from the globals
        ll = np.asarray(s_t @ e_v.transpose(0, 3, 1, 2).reshape(n_workers * k, k * m)).reshape(t, k, m)
        logits = ll + e_tau[None, :, None] + e_pi[None, :, :]
        log_z = logsumexp(logits.reshape(t, k * m), axis=1)
        phi = np.exp(logits - log_z[:, None, None])
        elbo = (
            float(log_z.sum())
            + _dirichlet_term(nu, alpha, e_tau)
            + _dirichlet_term(eta, pi_prior, e_pi)
            + _dirichlet_term(mu, np.broadcast_to(mu_prior, mu.shape), e_v)
        )
        trace.append(elbo)
        if it >= 1 and abs(elbo - trace[-2]) <= tol * abs(elbo):
            converged = True
            break
    return _Run(phi, nu, eta, mu, np.asarray(trace), converged)


def ebcc(
    lm: LabelMatrix,
    *,
    n_subtypes: int = 10,
    subtype_prior: float = 0.1,
    class_prior: float | None = None,
    diag_prior: float = 4.0,
    off_diag_prior: float = 1.0,
    tol: float = 1e-6,
    max_iter: int = 500,
    restarts: int = 5,
    tie_break: TieBreak = "random",
    seed: int = 0,
) -> EBCCResult:
    """Fit EBCC by mean-field variational inference (module docstring; docs/methods/skills.md §7.5).

    Parameters
    ----------
    lm : LabelMatrix
        Encoded labels (one answer per task and worker).
    n_subtypes : int
        M, subtypes per class (authors: 10). M = 1 is Bayesian Dawid–Skene.
    subtype_prior : float
        a_π: the subtype shares of a class are Dir(a_π/M, ..., a_π/M) (authors: 0.1, a sparse mixture).
    class_prior : float, optional
        α_k of the class shares; ``None`` (the authors' default) uses the majority-vote class counts.
    diag_prior, off_diag_prior : float
        a_v and b_v: the Dirichlet prior of every answer distribution v_jkm puts a_v on the right answer k
        and b_v on each other answer (authors: 4 and 1).
    tol : float
        Stop once the ELBO changes by at most ``tol`` times its magnitude in one sweep.
    max_iter : int
        Most sweeps per restart (authors: 500); a restart that needs more is not converged.
    restarts : int
        Random initialisations; the one with the largest final ELBO is kept.
    tie_break : {"random", "smallest"}
        How a task whose top posteriors tie is decided.
    seed : int
        Seeds the initialisations (restart r: ``default_rng([seed, r])``) and the random tie-break.

    Returns
    -------
    EBCCResult

    Raises
    ------
    ValueError
        No labels, fewer than 2 classes, a non-positive prior or a bad count.

    Warns
    -----
    RuntimeWarning
        When the kept restart stopped at ``max_iter`` without meeting the stopping rule.
    """
    _check(lm, n_subtypes, (subtype_prior, diag_prior, off_diag_prior, class_prior or 1.0), tol, max_iter, restarts)
    k, m, w = lm.n_classes, n_subtypes, lm.n_workers
    s = _incidence(lm)
    s_t = s.T.tocsr()
    z0 = _mv_init(lm)
    alpha = z0.sum(axis=0) if class_prior is None else np.full(k, float(class_prior))
    alpha = np.maximum(alpha, 1e-12)  # a class nobody chose keeps a positive (tiny) prior
    beta = np.full((k, k), float(off_diag_prior))
    np.fill_diagonal(beta, float(diag_prior))
    best: _Run | None = None
    finals = np.empty(restarts)
    for r in range(restarts):
        rng = np.random.default_rng([seed, r])
        phi0 = rng.dirichlet(np.ones(m), size=(lm.n_tasks, k)) * z0[:, :, None]
        run = _run(s, s_t, phi0, alpha, subtype_prior, beta, w, tol, max_iter)
        finals[r] = run.elbo[-1]
        if best is None or finals[r] > best.elbo[-1]:
            best = run
    assert best is not None
    post = best.phi.sum(axis=2)
    e_tau = best.nu / best.nu.sum()
    e_pi = best.eta / best.eta.sum(axis=1, keepdims=True)
    e_v = best.mu / best.mu.sum(axis=-1, keepdims=True)
    confusion = np.einsum("km,jkml->jkl", e_pi, e_v)
    accuracy = np.einsum("k,jkk->j", e_tau, confusion)
    winner, ties = _pick(post, lm, tie_break, seed)
    consensus = pd.DataFrame(
        {
            "task": lm.tasks,
            "label": lm.classes[winner],
            "confidence": post[np.arange(lm.n_tasks), winner].astype(np.float64),
            "n_labels": lm.labels_per_task().astype(np.int64),
        }
    )
    workers = pd.DataFrame(
        {
            "worker": lm.workers,
            "accuracy": accuracy,
            "skill": (k * accuracy - 1.0) / (k - 1.0),
            "vote_weight": np.full(w, np.nan),
            "n_labels": lm.labels_per_worker().astype(np.int64),
        }
    )
    iterations = int(best.elbo.size)
    if not best.converged:
        warnings.warn(
            f"EBCC stopped after {iterations} sweeps without converging (relative ELBO change > tol={tol:g}); "
            "raise ebcc_max_iter or tol",
            RuntimeWarning,
            stacklevel=2,
        )
    log.debug("EBCC: %d restarts, final ELBOs %s, kept %.6g", restarts, finals, best.elbo[-1])
    return EBCCResult(
        consensus=consensus,
        posteriors=post,
        workers=workers,
        confusion=confusion,
        class_prior=e_tau,
        subtype_weights=e_pi,
        elbo=best.elbo,
        restart_elbos=finals,
        iterations=iterations,
        converged=best.converged,
        n_ties=ties,
    )


def ebcc_metadata(o: SkillsOptions, res: EBCCResult) -> dict[str, Any]:
    """The skills metadata of an EBCC fit: its options, its convergence and the ELBOs of its restarts."""
    return {
        "ebcc_subtypes": int(o.ebcc_subtypes),
        "ebcc_subtype_prior": float(o.ebcc_subtype_prior),
        "ebcc_class_prior": float("nan") if o.ebcc_class_prior is None else float(o.ebcc_class_prior),
        "ebcc_diag_prior": float(o.ebcc_diag_prior),
        "ebcc_off_diag_prior": float(o.ebcc_off_diag_prior),
        "ebcc_tol": float(o.ebcc_tol),
        "ebcc_max_iter": int(o.ebcc_max_iter),
        "ebcc_restarts": int(o.ebcc_restarts),
        "ebcc_restart_elbos": ",".join(f"{e:.10g}" for e in res.restart_elbos),
        "iterations": res.iterations,
        "converged": res.converged,
        "final_loss": float(-res.elbo[-1]),
        "elbo": float(res.elbo[-1]),
        "n_ties": res.n_ties,
        "fit_status": "converged" if res.converged else "not_converged",
    }
