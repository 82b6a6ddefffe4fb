"""Dawid–Skene and one-coin EM with Crowd-Kit 1.4.2's schedule: the estimators' fit (``crowdflow.DawidSkene``).

The pipeline's :func:`crowdflow.skills.dawid_skene` runs the same model to the same fixed point, faster
(compiled passes, SQUAREM) and with its own stopping rule. This module is the schedule a Crowd-Kit user's numbers
depend on, step for step (docs/methods/skills.md §7.2; Dawid and Skene 1979):

1. start: T⁰ = majority-vote shares (gold tasks pinned to their answer), q⁰ = mean_t T⁰, π⁰ = M(T⁰) with the
   initial error counts (``assign``: π⁰ is the given table; ``addition``: added to the counts);
2. each of at most ``n_iter`` iterations: E-step T = E(q, π) (gold pinned), q = mean_t T, π = M(T), then the
   evidence lower bound per answer L = [Σ_rows Σ_l T_tl (log π_i[l, Y] + log q_l) + H(T)]/n; stop when
   L − L_previous < ``tol`` (the first iteration never stops: L_previous = −∞).

Full M-step: G_i[m, l] = Σ_{answers m of i} T_tl (+ α, + β on m = l: crowdflow's smoothing and diagonal
prior, both 0 by default), clipped below at 1e-10, each column normalised over the labels m worker i gave
(the rows that exist for i). One-coin M-step: p_i = mean over i's answers of T_{t, Y} (α: (Σ + α)/(n_i + 2α)),
π_i[m, l] = p_i if m = l else (1 − p_i)/(M − 1), clipped to [1e-10, 1 − 1e-10]. E-step:
log T_tl ∝ log max(q_l, 1e-10) + Σ_{i labels t} log π_i[Y_it, l], normalised per task (Crowd-Kit writes it in
base 2; the normalised T is the same). Every sum over answers is a product with the sparse task × (worker, label)
incidence matrix (one pass over its non-zeros), and ln π's product serves both the bound and the next E-step.

All arrays are dense codes: tasks 0..T−1, workers 0..W−1, labels 0..M−1 (the caller's order; ties go to the
lower code under :func:`numpy.argmax`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from crowdflow.compiled import compiled_kernel

EPS = 1e-10

__all__ = ["ClassicEMResult", "classic_em", "majority_shares"]


@dataclass(frozen=True)
class ClassicEMResult:
    """The fit: posteriors ``post`` (T×M), class prior ``q`` (M), error tables ``errors`` (W×M×M, [i, observed m,
    true l]; one-coin: the same layout), ``pairs`` (W×M bool: the rows of the error table, labels m worker i gave
    or that an initial table listed), ``skills`` (W, one-coin accuracy; NaN for the full model), and the bound
    per answer at each iteration (``loss_history``)."""

    post: np.ndarray
    q: np.ndarray
    errors: np.ndarray
    pairs: np.ndarray
    skills: np.ndarray
    loss_history: list[float]


def majority_shares(task: np.ndarray, label: np.ndarray, n_tasks: int, n_classes: int) -> np.ndarray:
    """Each task's vote shares (T×M), every answer counted once."""
    codes = np.asarray(task, dtype=np.int64) * n_classes + label
    counts = np.bincount(codes, minlength=n_tasks * n_classes).reshape(n_tasks, n_classes).astype(np.float64)
    return np.asarray(counts / counts.sum(axis=1, keepdims=True), dtype=np.float64)


def _pin(post: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Gold tasks' rows set to their answer (one-hot); ``gold`` = label code per task, −1 for none."""
    known = gold >= 0
    if known.any():
        post[known] = 0.0
        post[np.flatnonzero(known), gold[known]] = 1.0
    return post


@dataclass(frozen=True)
class _Answers:
    """The answers as one sparse incidence matrix ``A`` (T × W·M, ``A[t, i·M + m]`` = how often worker i answered m
    on task t) and its transpose: every sum over answers of the EM is a product with one of them (the E-step's
    Σ_{i labels t} log π_i[Y_it, ·] = A · log π, the M-step's counts Σ_{answers m of i} T_t = Aᵀ · T), one pass
    over the non-zeros each, instead of a scatter per answer."""

    a: sparse.csr_matrix
    at: sparse.csr_matrix
    per_task: np.ndarray  # answers per task (Σ_j A[t, j])

    @staticmethod
    def of(task: np.ndarray, worker: np.ndarray, label: np.ndarray, n_tasks: int, n_workers: int, m: int) -> _Answers:
        pair = np.asarray(worker, dtype=np.int64) * m + label
        a = sparse.csr_matrix(
            (np.ones(task.size), (np.asarray(task, dtype=np.int64), pair)), shape=(n_tasks, n_workers * m)
        )  # a repeated (task, worker, label) answer is summed: it counts twice, as in Crowd-Kit
        return _Answers(a, a.T.tocsr(), np.bincount(task, minlength=n_tasks).astype(np.float64))


def _log_table(errors: np.ndarray) -> np.ndarray:
    """ln π as a (W·M) × M table. The rows of pairs no answer uses are 0 (−∞ in ln) and never read: a sparse product
    visits only the stored answers. An answer whose row is 0 (an assigned table without that row) gives −∞, as
    Crowd-Kit's join gives a missing value."""
    w, m, _ = errors.shape
    with np.errstate(divide="ignore"):
        table: np.ndarray = np.log(errors).reshape(w * m, m)
    return table


def _full_m_step(
    ans: _Answers,
    post: np.ndarray,
    pairs: np.ndarray,
    smoothing: float,
    prior: float,
    initial: np.ndarray | None,
    strategy: str | None,
) -> np.ndarray:
    n_workers, m = pairs.shape
    counts = np.asarray(ans.at @ post).reshape(n_workers, m, m)
    if initial is not None and strategy == "assign":
        counts = initial.copy()
    else:
        if initial is not None and strategy == "addition":
            counts += initial
        counts += smoothing
        if prior:
            counts[:, np.arange(m), np.arange(m)] += prior
    counts = np.where(pairs[:, :, None], np.maximum(counts, EPS), 0.0)
    return np.asarray(counts / counts.sum(axis=1, keepdims=True), dtype=np.float64)


def _one_coin_m_step(
    task: np.ndarray,
    worker: np.ndarray,
    label: np.ndarray,
    post: np.ndarray,
    n_workers: int,
    m: int,
    smoothing: float,
) -> tuple[np.ndarray, np.ndarray]:
    hit = post[task, label]
    n_i = np.bincount(worker, minlength=n_workers).astype(np.float64)
    skills = (np.bincount(worker, weights=hit, minlength=n_workers) + smoothing) / (n_i + 2 * smoothing)
    errors = np.repeat(((1.0 - skills) / (m - 1))[:, None, None], m, axis=1).repeat(m, axis=2)
    errors[:, np.arange(m), np.arange(m)] = skills[:, None]
    return np.clip(errors, EPS, 1.0 - EPS), skills


@compiled_kernel
def _e_step_into(evidence: np.ndarray, log_q: np.ndarray, post: np.ndarray) -> None:
    """T_t ∝ exp(evidence_t + ln q) per task into ``post``, normalised by the task's largest term first (one pass
    over the T × M table; IEEE semantics as numpy's: a task whose every term is −∞ gets NaN)."""
    n_tasks, m = post.shape
    for t in range(n_tasks):
        top = evidence[t, 0] + log_q[0]
        for c in range(1, m):
            top = max(top, evidence[t, c] + log_q[c])
        z = 0.0
        for c in range(m):
            e = np.exp(evidence[t, c] + log_q[c] - top)
            post[t, c] = e
            z += e
        for c in range(m):
            post[t, c] /= z


def _e_step(evidence: np.ndarray, q: np.ndarray) -> np.ndarray:
    """T ∝ q · Π π_i[Y_it, ·] per task, from ``evidence`` = A · ln π (T × M), normalised per task."""
    post = np.empty_like(evidence)
    _e_step_into(evidence, np.log(np.maximum(q, EPS)), post)
    return post


@compiled_kernel
def _bound_sum(evidence: np.ndarray, post: np.ndarray, per_task: np.ndarray, log_q: np.ndarray) -> float:
    """Σ_t Σ_l T_tl (evidence_tl + n_t ln q_l) − Σ_t Σ_l T̃_tl ln T̃_tl with T̃ = max(T, 1e-10), in one pass."""
    n_tasks, m = post.shape
    total = 0.0
    for t in range(n_tasks):
        for c in range(m):
            p = post[t, c]
            clipped = max(p, 1e-10)
            total += p * (evidence[t, c] + per_task[t] * log_q[c]) - clipped * np.log(clipped)
    return total


def _bound(ans: _Answers, evidence: np.ndarray, post: np.ndarray, q: np.ndarray) -> float:
    """Evidence lower bound (natural log): E_T[log p(Y, z)] + H(T), posteriors clipped at 1e-10 in the entropy;
    ``evidence`` = A · ln π of the same π, so Σ_answers Σ_l T_tl ln π_i[Y, l] = Σ_t Σ_l T_tl evidence_tl."""
    return float(_bound_sum(evidence, post, ans.per_task, np.log(np.maximum(q, EPS))))


def classic_em(
    task: np.ndarray,
    worker: np.ndarray,
    label: np.ndarray,
    n_tasks: int,
    n_workers: int,
    n_classes: int,
    *,
    one_coin: bool = False,
    n_iter: int = 100,
    tol: float = 1e-5,
    gold: np.ndarray | None = None,
    initial: np.ndarray | None = None,
    initial_pairs: np.ndarray | None = None,
    strategy: str | None = None,
    smoothing: float = 0.0,
    prior: float = 0.0,
) -> ClassicEMResult:
    """Fit Dawid–Skene (or one-coin) by EM with Crowd-Kit's schedule (module docstring).

    Parameters
    ----------
    task, worker, label : numpy.ndarray
        One entry per answer (codes; a repeated pair counts twice, as in Crowd-Kit).
    n_tasks, n_workers, n_classes : int
    one_coin : bool
        One accuracy per worker instead of a confusion matrix.
    n_iter : int
        Most iterations (0: the start, T⁰ and the first M-step).
    tol : float
        Stop once the bound per answer rises by less than ``tol`` (any float; 0 runs until it stops rising).
    gold : numpy.ndarray, optional
        Label code per task, −1 where unknown: those tasks' posteriors are pinned at every step.
    initial, initial_pairs, strategy
        Initial error table (W×M×M, [worker, observed, true]; counts, or probabilities with ``"assign"``), the
        (worker, observed label) rows it lists, and ``"assign"`` or ``"addition"`` (full model only; first M-step).
    smoothing, prior : float
        Pseudo-counts α on every count and β on the diagonal (0: Crowd-Kit's model).

    Returns
    -------
    ClassicEMResult
    """
    m = n_classes
    ans = _Answers.of(task, worker, label, n_tasks, n_workers, m)
    pairs = np.zeros((n_workers, m), dtype=bool)
    pairs[worker, label] = True
    gold_codes = np.full(n_tasks, -1, dtype=np.int64) if gold is None else np.asarray(gold, dtype=np.int64)
    post = _pin(majority_shares(task, label, n_tasks, m), gold_codes)
    q = post.mean(axis=0)
    skills = np.full(n_workers, np.nan)
    if one_coin:
        errors, skills = _one_coin_m_step(task, worker, label, post, n_workers, m, smoothing)
    else:
        first_pairs = pairs
        if initial is not None and strategy is not None:
            assert initial_pairs is not None
            first_pairs = initial_pairs if strategy == "assign" else pairs | initial_pairs
        errors = _full_m_step(ans, post, first_pairs, smoothing, prior, initial, strategy)
        pairs = first_pairs
    history: list[float] = []
    loss = -np.inf
    evidence = np.asarray(ans.a @ _log_table(errors))
    for _ in range(n_iter):
        post = _pin(_e_step(evidence, q), gold_codes)
        q = post.mean(axis=0)
        if one_coin:
            errors, skills = _one_coin_m_step(task, worker, label, post, n_workers, m, smoothing)
        else:
            pairs = np.zeros((n_workers, m), dtype=bool)
            pairs[worker, label] = True
            errors = _full_m_step(ans, post, pairs, smoothing, prior, None, None)
        evidence = np.asarray(ans.a @ _log_table(errors))  # the bound's and the next E-step's
        new = _bound(ans, evidence, post, q) / task.size
        history.append(new)
        if new - loss < tol:
            break
        loss = new
    return ClassicEMResult(post, q, errors, pairs, skills, history)
