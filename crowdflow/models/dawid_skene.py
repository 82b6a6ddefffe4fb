"""Dawid–Skene EM baselines: full confusion matrices and the one-coin (homogeneous) variant.

Spec skills-rank-one.md §7 ("Dawid-Skene EM", "One-coin variant"); A. P. Dawid and A. M. Skene,
"Maximum likelihood estimation of observer error-rates using the EM algorithm", JRSS C, 1979.

Full model: class prior q_l; worker i answers m on a task of true class l with probability
π_i[l, m]. One-coin model (the model of the rank-one PGD paper): π_i[l, l] = p_i and
π_i[l, m] = (1 − p_i)/(M − 1) for m ≠ l; its skill is s_i = (M p_i − 1)/(M − 1).

EM, vectorised over all labels with one sparse matrix R (rows = (worker, given class), columns
= tasks):
- E-step: log T_tl = log q_l + Σ_{i labels t} log π_i[l, Y_it] − log Z_t (T×M posteriors);
- M-step (full): π_i[l, m] ∝ Σ_t T_tl 1{Y_it = m} + α, q_l ∝ Σ_t T_tl + α;
- M-step (one-coin): p_i = (Σ_{t: i labels t} T_{t, Y_it} + α)/(n_i + 2α), q as above.
Initialisation: T = majority-vote fractions, then an M-step. Stop when the largest absolute
change of any parameter (q and π, resp. q and p) is below ``tol`` (1e-6) or after ``max_iter``
(100) iterations, with a ``RuntimeWarning`` when not converged. The trace is the observed-data
log-likelihood Σ_t log Σ_l q_l Π_i π_i[l, Y_it] at each E-step.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.labels import LabelMatrix
from crowdflow.models.majority import TieBreak
from crowdflow.models.rows import row_argmax, row_max, row_sum, softmax_rows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DawidSkeneResult:
    """Result of a Dawid–Skene EM fit.

    Attributes
    ----------
    consensus : pandas.DataFrame
        task, label, confidence (posterior of the label), n_labels.
    posteriors : numpy.ndarray
        T×M posterior class probabilities.
    workers : pandas.DataFrame
        worker, accuracy, skill, vote_weight, n_labels. accuracy = p_i (one-coin) or
        Σ_l q_l π_i[l, l] (full); skill = (M accuracy − 1)/(M − 1); vote_weight = one-coin MAP
        weight log((M−1) p_i/(1 − p_i)) (NaN for the full model, which has no scalar weight).
    confusion : numpy.ndarray
        W×M×M, confusion[i, l, m] = P(worker i answers m | true class l).
    class_prior : numpy.ndarray
        q (length M).
    log_likelihood : numpy.ndarray
        Observed-data log-likelihood at each E-step.
    iterations : int
    converged : bool
    n_ties : int
        Tasks whose top posterior was shared (broken as in ``majority.weighted_vote``).
    method : str
        ``"onecoin_ds"`` or ``"ds"``.
    """

    consensus: pd.DataFrame
    posteriors: np.ndarray
    workers: pd.DataFrame
    confusion: np.ndarray
    class_prior: np.ndarray
    log_likelihood: np.ndarray
    iterations: int
    converged: bool
    n_ties: int
    method: str


def _answer_matrix(lm: LabelMatrix) -> sp.csr_matrix:
    """R: (W·M)×T, R[i·M + m, t] = 1{Y_it = m}."""
    m = lm.n_classes
    return sp.csr_matrix(
        (np.ones(lm.n_labels), (lm.worker_idx * m + lm.class_idx, lm.task_idx)),
        shape=(lm.n_workers * m, lm.n_tasks),
    )


def _mv_init(lm: LabelMatrix) -> np.ndarray:
    counts = lm.task_class_counts().toarray()
    return cast(np.ndarray, counts / row_sum(counts)[:, None])


def _pick(post: np.ndarray, tie_break: TieBreak, seed: int) -> tuple[np.ndarray, int]:
    top = row_max(post)[:, None]
    is_top = np.isclose(post, top, rtol=1e-12, atol=1e-12)
    ties = int((row_sum(is_top) > 1).sum())
    if tie_break == "smallest":
        return row_argmax(is_top), ties
    if tie_break == "random":
        noise = np.random.default_rng(seed).random(post.shape)
        return row_argmax(np.where(is_top, noise, -1.0)), ties
    raise ValueError(f"unknown tie_break {tie_break!r}; use 'smallest' or 'random'")


def _check(lm: LabelMatrix, tol: float, max_iter: int, smoothing: float) -> None:
    if lm.n_labels == 0:
        raise ValueError("label matrix is empty")
    if lm.n_classes < 2:
        raise ValueError(f"Dawid-Skene needs at least 2 classes, got {lm.classes.tolist()}")
    if tol <= 0 or max_iter < 1:
        raise ValueError("tol must be > 0 and max_iter >= 1")
    if smoothing < 0:
        raise ValueError("smoothing must be >= 0")


def _result(
    lm: LabelMatrix,
    post: np.ndarray,
    confusion: np.ndarray,
    q: np.ndarray,
    accuracy: np.ndarray,
    vote_weight: np.ndarray,
    ll: list[float],
    it: int,
    converged: bool,
    method: str,
    tie_break: TieBreak,
    seed: int,
) -> DawidSkeneResult:
    m = lm.n_classes
    winner, ties = _pick(post, tie_break, seed)
    consensus = pd.DataFrame(
        {
            "task": lm.tasks.astype(str),
            "label": lm.classes[winner].astype(str),
            "confidence": post[np.arange(lm.n_tasks), winner].astype(np.float64),
            "n_labels": lm.labels_per_task().astype(np.int64),
        }
    )
    workers = pd.DataFrame(
        {
            "worker": lm.workers.astype(str),
            "accuracy": accuracy.astype(np.float64),
            "skill": ((m * accuracy - 1.0) / (m - 1.0)).astype(np.float64),
            "vote_weight": vote_weight.astype(np.float64),
            "n_labels": lm.labels_per_worker().astype(np.int64),
        }
    )
    if not converged:
        warnings.warn(
            f"{method} EM stopped after {it} iterations without converging (parameter change >= tol)",
            RuntimeWarning,
            stacklevel=3,
        )
    return DawidSkeneResult(
        consensus=consensus,
        posteriors=post,
        workers=workers,
        confusion=confusion,
        class_prior=q,
        log_likelihood=np.asarray(ll, dtype=np.float64),
        iterations=it,
        converged=converged,
        n_ties=ties,
        method=method,
    )


def _em(
    post: np.ndarray,
    m_step: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    e_step: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, float]],
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float], int, bool]:
    """EM loop shared by both Dawid–Skene variants: M-step from the initial posteriors, then E/M steps
    until the largest parameter change (worker parameters and class prior) is below ``tol``, and a final
    E-step from the final parameters. Returns (posteriors, worker parameters, prior, log-likelihood
    trace, iterations, converged)."""
    theta, q = m_step(post)
    ll: list[float] = []
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        post, loglik = e_step(theta, q)
        ll.append(loglik)
        theta_new, q_new = m_step(post)
        change = max(float(np.max(np.abs(theta_new - theta))), float(np.max(np.abs(q_new - q))))
        theta, q = theta_new, q_new
        if change < tol:
            converged = True
            break
    post, loglik = e_step(theta, q)  # final posteriors from the final parameters
    ll.append(loglik)
    return post, theta, q, ll, it, converged


def dawid_skene(
    lm: LabelMatrix,
    tol: float = 1e-6,
    max_iter: int = 100,
    smoothing: float = 0.01,
    tie_break: TieBreak = "random",
    seed: int = 0,
) -> DawidSkeneResult:
    """Full-confusion Dawid–Skene by EM (spec §7), initialised from majority-vote fractions.

    M-step: π_i[l, m] = (G_i[m, l] + α)/Σ_m' (G_i[m', l] + α) with G = R T (R: (W·M)×T answer
    matrix, T: T×M posteriors), q_l = (Σ_t T_tl + α)/(T + M α). E-step: log T = log q + Rᵀ log Π
    with log Π[(i, m), l] = log π_i[l, m], row-normalised. O(|labels| · M) per iteration.

    Parameters
    ----------
    lm : LabelMatrix
        De-duplicated labels.
    tol : float
        Stop when max |Δq|, |Δπ| < tol.
    max_iter : int
        EM iteration cap.
    smoothing : float
        Additive (Dirichlet) smoothing α of the counts.
    tie_break : {"random", "smallest"}
    seed : int

    Returns
    -------
    DawidSkeneResult
    """
    _check(lm, tol, max_iter, smoothing)
    m, w = lm.n_classes, lm.n_workers
    r = _answer_matrix(lm)
    rt = sp.csr_matrix(r.T)
    post = _mv_init(lm)

    def m_step(post: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g = np.asarray(r @ post).reshape(w, m, m)  # [i, given m, true l]
        counts = g.transpose(0, 2, 1) + smoothing  # [i, true l, given m]
        tot = counts.sum(axis=2, keepdims=True)
        pi = np.divide(counts, tot, out=np.full_like(counts, 1.0 / m), where=tot > 0)
        q = (post.sum(axis=0) + smoothing) / (lm.n_tasks + m * smoothing)
        return pi, q

    def e_step(pi: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, float]:
        with np.errstate(divide="ignore"):
            log_pi = np.log(pi).transpose(0, 2, 1).reshape(w * m, m)  # row (i, m), col l
            logp = np.log(q)[None, :] + np.asarray(rt @ log_pi)
        return softmax_rows(logp)

    post, pi, q, ll, it, converged = _em(post, m_step, e_step, tol, max_iter)
    accuracy = np.einsum("l,ill->i", q, pi)
    return _result(lm, post, pi, q, accuracy, np.full(w, np.nan), ll, it, converged, "ds", tie_break, seed)


def one_coin_dawid_skene(
    lm: LabelMatrix,
    tol: float = 1e-6,
    max_iter: int = 100,
    smoothing: float = 0.01,
    tie_break: TieBreak = "random",
    seed: int = 0,
) -> DawidSkeneResult:
    """One-coin (homogeneous) Dawid–Skene by EM (spec §7), initialised from majority-vote fractions.

    E-step: log T_tl = log q_l + Σ_{i labels t} log((1 − p_i)/(M − 1))
    + Σ_{i labels t} 1{Y_it = l} v_i with v_i = log((M − 1) p_i/(1 − p_i)) (the MAP weight of
    spec §2.7, so the E-step is a weighted vote plus a log prior). M-step:
    p_i = (Σ_{t: i labels t} T_{t, Y_it} + α)/(n_i + 2α), q_l = (Σ_t T_tl + α)/(T + M α).

    Parameters
    ----------
    lm : LabelMatrix
        De-duplicated labels.
    tol : float
        Stop when max |Δq|, |Δp| < tol.
    max_iter : int
    smoothing : float
        α; keeps p_i strictly inside (0, 1).
    tie_break : {"random", "smallest"}
    seed : int

    Returns
    -------
    DawidSkeneResult
    """
    _check(lm, tol, max_iter, smoothing)
    m, w = lm.n_classes, lm.n_workers
    n_i = lm.labels_per_worker().astype(np.float64)
    post = _mv_init(lm)
    eps = 1e-12

    def m_step(post: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        right = post[lm.task_idx, lm.class_idx]
        p = (np.bincount(lm.worker_idx, weights=right, minlength=w) + smoothing) / (n_i + 2 * smoothing)
        p = np.clip(p, eps, 1 - eps)
        q = (post.sum(axis=0) + smoothing) / (lm.n_tasks + m * smoothing)
        return p, q

    cell = lm.task_idx * m + lm.class_idx  # flat (task, class) index of every label

    def e_step(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, float]:
        log_wrong = np.log((1 - p) / (m - 1))
        v = np.log(p) - log_wrong
        base = np.bincount(lm.task_idx, weights=log_wrong[lm.worker_idx], minlength=lm.n_tasks)
        votes = np.bincount(cell, weights=v[lm.worker_idx], minlength=lm.n_tasks * m).reshape(lm.n_tasks, m)
        with np.errstate(divide="ignore"):
            logp = np.log(q)[None, :] + base[:, None] + votes
        return softmax_rows(logp)

    post, p, q, ll, it, converged = _em(post, m_step, e_step, tol, max_iter)
    off = (1 - p) / (m - 1)
    confusion = np.repeat(off[:, None, None], m, axis=1).repeat(m, axis=2)
    idx = np.arange(m)
    confusion[:, idx, idx] = p[:, None]
    vote = np.log((m - 1) * p / (1 - p))
    return _result(lm, post, confusion, q, p, vote, ll, it, converged, "onecoin_ds", tie_break, seed)
