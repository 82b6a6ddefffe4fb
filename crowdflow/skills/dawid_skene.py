"""Dawid–Skene EM baselines: full confusion matrices and the one-coin (homogeneous) variant.

docs/methods/skills.md §7.2 (full and one-coin Dawid–Skene); A. P. Dawid and A. M. Skene,
"Maximum likelihood estimation of observer error-rates using the EM algorithm", JRSS C, 1979.

Full model: class prior q_l; worker i answers m on a task of true class l with probability
π_i[l, m]. One-coin model (the model of the rank-one PGD paper): π_i[l, l] = p_i and
π_i[l, m] = (1 − p_i)/(M − 1) for m ≠ l; its skill is s_i = (M p_i − 1)/(M − 1).

Diagonal prior (full model, docs/methods/skills.md §7.3): every row of every worker's confusion
matrix gets β virtual *correct* answers per true class on top of the smoothing α (pseudo-counts: the
M-step is the posterior mode under π_i[l, ·] ~ Dir(1 + α + β e_l)). β = 0 is the classic model (and
the same floating-point operations as before the prior existed); β = 1 is the library's default,
because the converged classic fit over-fits workers with few labels (a worker with n_i labels has
M(M − 1) free confusion entries).

EM, each step one pass over the labels, the whole loop compiled (numba,
``crowdflow.compiled``), so no step pays Python, numpy or scipy overhead per iteration (on
the 25k-label zheng_product set, 100 full-model iterations took 55 ms as sparse products and
take 22 ms compiled; libm's scalar exp and log are now a third of it):
- E-step: log T_tl = log q_l + Σ_{i labels t} log π_i[l, Y_it] − log Z_t (T×M posteriors);
- M-step (full): π_i[l, m] ∝ Σ_t T_tl 1{Y_it = m} + α + β 1{m = l}, q_l ∝ Σ_t T_tl + α;
- M-step (one-coin): p_i = (Σ_{t: i labels t} T_{t, Y_it} + α)/(n_i + 2α), q as above.
Initialisation: T = majority-vote fractions, then an M-step. Stop when one EM step changes no
parameter (q and π, resp. q and p) by ``tol`` (1e-6) or more, returning the parameters after that step,
or after ``max_iter`` (100) EM steps, with a ``RuntimeWarning`` when not converged. The trace is the
observed-data log-likelihood Σ_t log Σ_l q_l Π_i π_i[l, Y_it] at each E-step.

Acceleration (issue #19, the default ``acceleration="squarem"``): the EM steps are extrapolated by
SQUAREM (:mod:`crowdflow.skills.squarem`; docs/methods/skills.md §7.2) with a monotone safeguard on the
objective EM increases (log-likelihood + the log prior of the pseudo-counts): the same fixed point and
stopping rule, ``max_iter`` counting every EM step (extrapolation's included), the trace holding the
E-step values of the kept points. The plain loop :func:`_em` (``acceleration="none"``) is the reference
it is tested against (``tests/skills/test_squarem.py``). Its map :class:`_EMMap` evaluates F in one fused sweep
over the labels grouped by task (:mod:`crowdflow.skills.fused_em`, issue #36: the E-step and the M-step's sums, a
block of tasks at a time); with ``exact=True`` the same IEEE operations in the same order as the class-by-class
kernels below, so an unextrapolated step is the plain step bit for bit (``tests/skills/test_fused_em.py``); by
default with a vectorised exponential within 2.5e-16 relative, whose fits are within the bound of
docs/methods/skills.md §7.2 of the fit run to 1e-10. An earlier fused kernel
(per task its posterior, then its labels' sums, classes in a run-time loop) had been no faster than these kernels;
the blocks and the compile-time class loops are what make this one ~1.5× faster at 5 classes.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np
import pandas as pd

from crowdflow.compiled import compiled_kernel
from crowdflow.graphs import labels_by_task
from crowdflow.labels import LabelMatrix
from crowdflow.progress import IterationProgress, PassLines, ProgressFn
from crowdflow.skills.fused_em import (
    SPLIT_LABELS,
    Halves,
    confusion_in_place,
    counts_from_posteriors,
    fused_pass,
    log_lanes,
    log_prior_lanes,
    prior_from_sums,
    usable_cores,
)
from crowdflow.skills.rows import row_sum
from crowdflow.skills.squarem import squarem
from crowdflow.skills.ties import pick_winners
from crowdflow.skills.types import TieBreak

log = logging.getLogger(__name__)

#: the one-coin accuracies are kept in [ε, 1 − ε] so that every log-weight is finite
_EPS = 1e-12


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


def _mv_init(lm: LabelMatrix) -> np.ndarray:
    counts = lm.task_class_counts().toarray()
    return cast(np.ndarray, counts / row_sum(counts)[:, None])


def _gold(lm: LabelMatrix, gold: np.ndarray | None) -> np.ndarray | None:
    """``gold`` checked: one label code per task (−1: unknown), codes within the classes."""
    if gold is None:
        return None
    g = np.asarray(gold, dtype=np.int64)
    if g.shape != (lm.n_tasks,) or (g >= lm.n_classes).any() or (g < -1).any():
        raise ValueError(f"gold must hold one label code in [-1, {lm.n_classes}) per task ({lm.n_tasks} tasks)")
    return g


def _pick(post: np.ndarray, lm: LabelMatrix, tie_break: TieBreak, seed: int) -> tuple[np.ndarray, int]:
    """Arg-max posterior label of each task of ``lm``; ties by the one rule (:mod:`crowdflow.skills.ties`)."""
    return pick_winners(post, lm.tasks, lm.classes, tie_break, seed)


def _check(lm: LabelMatrix, tol: float, max_iter: int, smoothing: float, prior: float = 0.0) -> None:
    if lm.n_labels == 0:
        raise ValueError("label matrix is empty")
    if lm.n_classes < 2:
        raise ValueError(f"Dawid-Skene needs at least 2 classes, got {lm.classes.tolist()}")
    if tol <= 0 or max_iter < 1:
        raise ValueError("tol must be > 0 and max_iter >= 1")
    if smoothing < 0:
        raise ValueError("smoothing must be >= 0")
    if not prior >= 0 or not math.isfinite(prior):
        raise ValueError(f"prior must be a finite number >= 0, got {prior!r}")


def _result(
    lm: LabelMatrix,
    post: np.ndarray,
    confusion: np.ndarray,
    q: np.ndarray,
    accuracy: np.ndarray,
    vote_weight: np.ndarray,
    ll: np.ndarray,
    it: int,
    converged: bool,
    method: str,
    tie_break: TieBreak,
    seed: int,
) -> DawidSkeneResult:
    m = lm.n_classes
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


def _label_arrays(lm: LabelMatrix) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The labels grouped by task for the kernels: (indptr, task, worker, given class, row), int64.

    Labels of task t are entries ``indptr[t]:indptr[t + 1]`` in (task, worker) order
    (``graphs.labels_by_task``: no sort when ``lm`` comes from ``encode_canonical``);
    ``row = worker · M + given`` indexes the columns of the (M, W·M) log-likelihood tables.
    """
    indptr, worker, given = labels_by_task(lm)
    worker = np.ascontiguousarray(worker, dtype=np.int64)
    given = np.ascontiguousarray(given, dtype=np.int64)
    task = np.repeat(np.arange(lm.n_tasks, dtype=np.int64), np.diff(indptr))
    return indptr, task, worker, given, worker * lm.n_classes + given


#: the running product of the normalisers Z_t ∈ [1, M] is folded into its logarithm past this value
_FOLD = 1e250


@compiled_kernel
def _e_step(indptr: np.ndarray, rows: np.ndarray, log_pi_t: np.ndarray, log_q: np.ndarray, post_t: np.ndarray) -> float:
    """E-step shared by both models, class-major: ℓ_lt = log q_l + Σ_{labels k of t} log π_{i_k}[l, m_k].

    ``log_pi_t[l, i·M + m] = log π_i[l, m]``; the posteriors exp(ℓ_lt − max_l ℓ_lt)/Z_t are written
    into ``post_t`` (M×T). Returns the observed-data log-likelihood Σ_t log Σ_l exp ℓ_lt.

    One pass over the labels per class with a scalar accumulator per task (a label's rows in
    ``post_t`` would otherwise be a chain of dependent memory updates); the normalisation has no
    data-dependent branch (an arg-max branch mispredicts on half of the binary tasks) and takes
    Σ_t log Z_t as the log of a running product, folded before it can overflow (libm's scalar
    exp and log are its cost).
    """
    m, n_tasks = post_t.shape
    for c in range(m):
        lc = log_pi_t[c]
        out = post_t[c]
        for t in range(n_tasks):
            acc = 0.0
            for k in range(indptr[t], indptr[t + 1]):
                acc += lc[rows[k]]
            out[t] = log_q[c] + acc
    if m == 2:
        return _normalise_binary(post_t)
    shift, prod = 0.0, 1.0
    for t in range(n_tasks):
        top = post_t[0, t]
        for c in range(1, m):
            top = max(top, post_t[c, t])
        z = 0.0
        for c in range(m):
            e = np.exp(post_t[c, t] - top)
            post_t[c, t] = e
            z += e
        for c in range(m):
            post_t[c, t] /= z
        shift, prod = _fold(shift, prod, top, z)
    return shift + math.log(prod)


@compiled_kernel
def _normalise_binary(post_t: np.ndarray) -> float:
    """The normalisation of :func:`_e_step` for M = 2 with one exp per task and no data-dependent
    branch: with d = ℓ_1 − ℓ_0 and e = exp(−|d|), the larger class gets 1/(1 + e), the other
    e/(1 + e), and log Σ_l exp ℓ_l = max(ℓ_0, ℓ_1) + log(1 + e)."""
    shift, prod = 0.0, 1.0
    for t in range(post_t.shape[1]):
        a, b = post_t[0, t], post_t[1, t]
        top = max(a, b)
        e = np.exp(-abs(b - a)) if top > -np.inf else np.nan
        z = 1.0 + e
        hi, lo = 1.0 / z, e / z
        post_t[0, t] = hi if a >= b else lo
        post_t[1, t] = lo if a >= b else hi
        shift, prod = _fold(shift, prod, top, z)
    return shift + math.log(prod)


@compiled_kernel
def _fold(shift: float, prod: float, top: float, z: float) -> tuple[float, float]:
    """One task's term of Σ_t (top_t + log Z_t) = shift + log prod, with Z_t ∈ [1, M] multiplied into
    ``prod`` and folded into ``shift`` before the product can overflow (one log per ~250/log10 M
    tasks instead of one per task)."""
    prod *= z
    if prod > _FOLD:
        return shift + top + math.log(prod), 1.0
    return shift + top, prod


@compiled_kernel
def _class_prior(post_t: np.ndarray, alpha: float, q: np.ndarray) -> None:
    """q_l = (Σ_t T_tl + α)/(T + M α), written into ``q``."""
    m, n_tasks = post_t.shape
    for c in range(m):
        total = 0.0
        for t in range(n_tasks):
            total += post_t[c, t]
        q[c] = (total + alpha) / (n_tasks + m * alpha)


@compiled_kernel
def _confusion_counts(task: np.ndarray, rows: np.ndarray, post_t: np.ndarray, counts_t: np.ndarray) -> None:
    """G_i[l, m] = Σ_{labels (i, t, m)} T_tl into ``counts_t[l, i·M + m]`` (overwritten): the full M-step's
    sufficient statistics, a sum over tasks (so over partitions that hold whole tasks)."""
    m = post_t.shape[0]
    counts_t[:] = 0.0
    for c in range(m):
        cc = counts_t[c]
        pc = post_t[c]
        for k in range(task.size):
            cc[rows[k]] += pc[task[k]]


@compiled_kernel
def _confusion_from_counts(counts_t: np.ndarray, alpha: float, beta: float, pi: np.ndarray) -> None:
    """π_i[l, m] = (G_i[l, m] + α + β 1{m = l})/Σ_m' (G_i[l, m'] + α + β 1{m' = l}) into ``pi`` (a row
    without any mass, α = β = 0 and no label, gets the uniform row 1/M).

    β enters as one more term of the diagonal entry only, so with β = 0 every sum is the sum of the
    classic M-step plus an exact +0.0: the same bits."""
    n_workers, m, _ = pi.shape
    for i in range(n_workers):
        for c in range(m):
            tot = 0.0
            for y in range(m):
                tot += counts_t[c, i * m + y] + alpha + (beta if y == c else 0.0)
            for y in range(m):
                num = counts_t[c, i * m + y] + alpha + (beta if y == c else 0.0)
                pi[i, c, y] = num / tot if tot > 0 else 1.0 / m


@compiled_kernel
def _full_m_step(
    task: np.ndarray,
    rows: np.ndarray,
    post_t: np.ndarray,
    alpha: float,
    beta: float,
    counts_t: np.ndarray,
    pi: np.ndarray,
) -> None:
    """The full model's M-step into ``pi``: :func:`_confusion_counts` (``counts_t`` is scratch for G),
    then :func:`_confusion_from_counts`."""
    _confusion_counts(task, rows, post_t, counts_t)
    _confusion_from_counts(counts_t, alpha, beta, pi)


@compiled_kernel
def _full_log_pi(pi: np.ndarray, log_pi_t: np.ndarray) -> None:
    """log_pi_t[l, i·M + m] = log π_i[l, m]."""
    n_workers, m, _ = pi.shape
    for i in range(n_workers):
        for c in range(m):
            for y in range(m):
                log_pi_t[c, i * m + y] = np.log(pi[i, c, y])


@compiled_kernel
def _one_coin_sums(task: np.ndarray, worker: np.ndarray, given: np.ndarray, post_t: np.ndarray, p: np.ndarray) -> None:
    """Σ_{labels (i, t, m)} T_tm into ``p[i]`` (overwritten): the one-coin M-step's sufficient statistics."""
    p[:] = 0.0
    for k in range(task.size):
        p[worker[k]] += post_t[given[k], task[k]]


@compiled_kernel
def _one_coin_accuracy(n_labels: np.ndarray, alpha: float, p: np.ndarray) -> None:
    """p_i = clip((p_i + α)/(n_i + 2α), ε, 1 − ε) in place (``p`` holds the sums of :func:`_one_coin_sums`)."""
    for i in range(p.size):
        p[i] = min(max((p[i] + alpha) / (n_labels[i] + 2 * alpha), _EPS), 1 - _EPS)


@compiled_kernel
def _one_coin_from_sums(n_labels: np.ndarray, alpha: float, p: np.ndarray, pi: np.ndarray) -> None:
    """p_i = clip((p_i + α)/(n_i + 2α), ε, 1 − ε) in place (``p`` holds the sums of :func:`_one_coin_sums`),
    and the one-coin confusion π_i[l, l] = p_i, π_i[l, m] = (1 − p_i)/(M − 1) into ``pi``."""
    _one_coin_accuracy(n_labels, alpha, p)
    _one_coin_fill(p, pi)


@compiled_kernel
def _one_coin_fill(p: np.ndarray, pi: np.ndarray) -> None:
    """The one-coin confusion π_i[l, l] = p_i, π_i[l, m] = (1 − p_i)/(M − 1) into ``pi``."""
    m = pi.shape[1]
    for i in range(p.size):
        wrong = (1 - p[i]) / (m - 1)
        for c in range(m):
            for y in range(m):
                pi[i, c, y] = p[i] if c == y else wrong


@compiled_kernel
def _one_coin_m_step(
    task: np.ndarray,
    worker: np.ndarray,
    given: np.ndarray,
    post_t: np.ndarray,
    n_labels: np.ndarray,
    alpha: float,
    p: np.ndarray,
    pi: np.ndarray,
) -> None:
    """The one-coin M-step: :func:`_one_coin_sums`, then :func:`_one_coin_from_sums`."""
    _one_coin_sums(task, worker, given, post_t, p)
    _one_coin_from_sums(n_labels, alpha, p, pi)


@compiled_kernel
def _em(
    indptr: np.ndarray,
    task: np.ndarray,
    worker: np.ndarray,
    given: np.ndarray,
    rows: np.ndarray,
    post_t: np.ndarray,
    n_labels: np.ndarray,
    one_coin: bool,
    alpha: float,
    beta: float,
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, bool]:
    """EM from the posteriors ``post_t`` (M×T, updated in place): M-step, then E/M steps until
    max(|Δπ|, |Δq|) < tol or ``max_iter`` iterations, then a final E-step from the final parameters.
    Both models run through the same π (for the one-coin model max |Δπ| = max |Δp|: the
    off-diagonal entries move by |Δp|/(M − 1)); ``beta`` is the diagonal prior of the full model
    (unused by the one-coin model). Returns (π, q, log-likelihood trace, iterations, converged)."""
    m = post_t.shape[0]
    n_workers = n_labels.size
    pi, pi_new = np.empty((n_workers, m, m)), np.empty((n_workers, m, m))
    q, q_new = np.empty(m), np.empty(m)
    table = np.empty((m, n_workers * m))  # M-step counts, then E-step log π (class-major)
    p = np.empty(n_workers)
    trace = np.empty(max_iter + 1)
    it, converged = 0, False
    while True:
        if one_coin:
            _one_coin_m_step(task, worker, given, post_t, n_labels, alpha, p, pi_new)
        else:
            _full_m_step(task, rows, post_t, alpha, beta, table, pi_new)
        _class_prior(post_t, alpha, q_new)
        if it > 0:
            converged = max(np.max(np.abs(pi_new - pi)), np.max(np.abs(q_new - q))) < tol
        pi, pi_new = pi_new, pi
        q, q_new = q_new, q
        _full_log_pi(pi, table)
        trace[it] = _e_step(indptr, rows, table, np.log(q), post_t)
        if it == max_iter or converged:
            break
        it += 1
    return pi, q, trace[: it + 1], it, converged


@compiled_kernel
def _log_prior(log_pi_t: np.ndarray, log_q: np.ndarray, alpha: float, beta: float) -> float:
    """The log prior whose mode the full M-step computes (additive constants dropped):
    Σ_{i,l,m} (α + β 1{m = l}) log π_i[l, m] + α Σ_l log q_l from ``log_pi_t[l, i·M + m] = log π_i[l, m]``;
    terms of weight zero are left out (0 · log 0 counts 0)."""
    m, cols = log_pi_t.shape
    total = 0.0
    for c in range(m):
        for j in range(cols):
            wgt = alpha + (beta if j % m == c else 0.0)
            if wgt != 0.0:
                total += wgt * log_pi_t[c, j]
        if alpha != 0.0:
            total += alpha * log_q[c]
    return total


class EMParameters:
    """The flat parameter vector θ of an EM fit and the maps between it and the kernels' tables.

    θ = (π_1[0, 0], …, π_W[M−1, M−1], q_0, …, q_{M−1}) for the full model, (p_1, …, p_W, q) for the
    one-coin model. Shared by the in-memory fit (:class:`_EMMap`) and the partitioned one
    (:mod:`crowdflow.skills.partitioned`, whose E-steps run on the buckets), so both run the same EM map
    F(θ) = M-step(sums of the E-step at θ) under the same accelerator.
    """

    def __init__(self, n_workers: int, n_classes: int, one_coin: bool, alpha: float, beta: float, n_i: np.ndarray):
        self.w, self.m, self.one_coin, self.alpha, self.beta = n_workers, n_classes, one_coin, alpha, beta
        self.n_i = np.asarray(n_i, dtype=np.float64)
        self.n_pi = n_workers if one_coin else n_workers * n_classes * n_classes
        # the one-coin confusion built from p (scratch of :meth:`tables`; the full model's θ is π itself)
        self._pi = np.empty((n_workers, n_classes, n_classes) if one_coin else (0, n_classes, n_classes))

    def split(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(p or π (W×M×M), q) views of a flat θ."""
        head = theta[: self.n_pi]
        return (head if self.one_coin else head.reshape(self.w, self.m, self.m)), theta[self.n_pi :]

    def bounds(self) -> tuple[float | np.ndarray, float | np.ndarray]:
        """The box of θ an extrapolated point must stay in: probabilities in [0, 1] (two scalars for the full model,
        not two more W·M² arrays), one-coin p in [ε, 1 − ε]."""
        if not self.one_coin:
            return 0.0, 1.0
        lower, upper = np.zeros(self.n_pi + self.m), np.ones(self.n_pi + self.m)
        if self.one_coin:
            lower[: self.n_pi], upper[: self.n_pi] = _EPS, 1 - _EPS
        return lower, upper

    def confusion(self, theta: np.ndarray) -> np.ndarray:
        """π (W×M×M) of θ (the one-coin confusion built from p)."""
        pi, _ = self.split(theta)
        if not self.one_coin:
            return np.array(pi)
        out = np.empty((self.w, self.m, self.m))
        _one_coin_fill(pi, out)
        return out

    def tables(self, theta: np.ndarray, log_pi_t: np.ndarray, log_q: np.ndarray) -> float:
        """log π (class-major, ``log_pi_t[l, i·M + m]``) and log q of θ into the given arrays; returns the log
        prior whose mode the M-step computes (:func:`_log_prior`; one-coin: α Σ_i log p_i (1 − p_i) + α Σ log q)."""
        pi, q = self.split(theta)
        np.log(q, out=log_q)
        if self.one_coin:
            _one_coin_fill(pi, self._pi)
            _full_log_pi(self._pi, log_pi_t)
            return self.one_coin_prior(pi, log_q)
        _full_log_pi(pi, log_pi_t)
        return float(_log_prior(log_pi_t, log_q, self.alpha, self.beta))

    def lanes(self, theta: np.ndarray, lp: np.ndarray, log_q: np.ndarray) -> float:
        """log π label-major, ``lp[(i·M + m)·M + l] = log π_i[l, m]`` (the layout of the fused and held passes:
        :func:`crowdflow.skills.fused_em.log_lanes`, ``EMShared.tab``), and log q of θ into the given arrays; returns
        the log prior of :meth:`tables`. The values of :meth:`tables` and of its table laid out label-major, bit for
        bit (the same ``log`` of each entry; :func:`~crowdflow.skills.fused_em.log_prior_lanes` sums the prior in
        the class-major order), with no class-major W·M² table (docs/scale.md, memory laws)."""
        pi, q = self.split(theta)
        np.log(q, out=log_q)
        if self.one_coin:
            _one_coin_fill(pi, self._pi)
            log_lanes(self._pi, lp)
            return self.one_coin_prior(pi, log_q)
        log_lanes(pi, lp)
        return float(log_prior_lanes(lp, log_q, self.alpha, self.beta))

    def one_coin_prior(self, p: np.ndarray, log_q: np.ndarray) -> float:
        """The one-coin log prior α Σ_i log p_i (1 − p_i) + α Σ_l log q_l (0 when α = 0)."""
        a = self.alpha
        return float(a * (np.log(p).sum() + np.log1p(-p).sum() + log_q.sum())) if a else 0.0

    def from_sums(self, counts: np.ndarray, class_sums: np.ndarray, n_tasks: int) -> np.ndarray:
        """θ of the M-step from the E-step's sums: ``counts`` G[l, i·M + m] (full) or Σ_{labels of i} T_{t, Y_it}
        (one-coin, length W; overwritten), ``class_sums`` Σ_t T_tl."""
        theta = np.empty(self.n_pi + self.m)
        pi, q = self.split(theta)
        if self.one_coin:
            _one_coin_accuracy(self.n_i, self.alpha, counts)
            pi[:] = counts
        else:
            _confusion_from_counts(counts, self.alpha, self.beta, pi)
        q[:] = (class_sums + self.alpha) / (n_tasks + self.m * self.alpha)
        return theta

    def from_lane_sums(self, sums: np.ndarray, class_sums: np.ndarray, n_tasks: int) -> np.ndarray:
        """:meth:`from_sums` with the full model's sums label-major, ``sums[(i·M + m)·M + l] = G_i[l, m]`` (the
        layout the held passes add up): copied into θ and turned into π there
        (:func:`~crowdflow.skills.fused_em.confusion_in_place`, the operations of ``_confusion_from_counts``), so
        the same θ bit for bit without the class-major copy of the sums. One-coin sums (length W) as
        :meth:`from_sums`."""
        if self.one_coin:
            return self.from_sums(sums, class_sums, n_tasks)
        theta = np.empty(self.n_pi + self.m)
        head, q = theta[: self.n_pi], theta[self.n_pi :]
        head[:] = sums
        confusion_in_place(head, self.w, self.m, self.alpha, self.beta)
        q[:] = (class_sums + self.alpha) / (n_tasks + self.m * self.alpha)
        return theta


class _EMMap:
    """The in-memory EM map F on flat parameters (:class:`EMParameters`), the ``step`` of
    :func:`crowdflow.skills.squarem.squarem`: the E-step at θ and the M-step's sums in one fused sweep over the
    labels (:func:`crowdflow.skills.fused_em.fused_pass`, issue #36): with ``exact=True`` the same operations in the
    same order as the kernels of the plain loop :func:`_em` (so an unextrapolated step is its step bit for bit), by
    default with the vectorised exponential (within a few ulps of it). Each call returns
    (F(θ), Φ(θ), ℓ(θ)) with ℓ the observed-data log-likelihood and Φ = ℓ + the log prior of the M-step (the
    objective EM increases: Dirichlet(1 + α + β e_l) rows, or Beta(1 + α, 1 + α) accuracies, and Dirichlet(1 + α)
    q). Scratch arrays are allocated once; the full model's sums are written into F(θ)'s own array and turned into
    π there, so the map holds one W·M² table (log π) besides the iterates. From ``split_at`` labels (and never with
    ``exact``) the sweep runs in two halves (:class:`crowdflow.skills.fused_em.Halves`, one more table of the sums),
    on two threads (``threads``; by default where the process may use two cores: the same bits either way);
    :meth:`close` ends the thread.
    """

    def __init__(
        self,
        lm: LabelMatrix,
        one_coin: bool,
        alpha: float,
        beta: float,
        gold: np.ndarray | None = None,
        exact: bool = False,
        split_at: int = SPLIT_LABELS,
        threads: bool | None = None,
    ) -> None:
        self.exact = exact  # libm's exp in the sweep (the reference kernels' bits), else the vectorised one
        self.indptr, self.task, self.worker, self.given, self.rows = _label_arrays(lm)
        known = np.zeros(lm.n_tasks, dtype=bool) if gold is None else np.asarray(gold) >= 0
        self.gold_tasks = np.flatnonzero(known)
        self.gold_labels = np.asarray(gold, dtype=np.int64)[known] if gold is not None else np.empty(0, np.int64)
        # the kernel's gold: a code per task (−1: not gold), or empty when no task is gold
        self.gold = np.empty(0, np.int64)
        if gold is not None and self.gold_tasks.size:
            self.gold = np.where(known, np.asarray(gold, dtype=np.int64), -1)
        self.hits = np.empty(self.gold_tasks.size)
        self.par = EMParameters(lm.n_workers, lm.n_classes, one_coin, alpha, beta, lm.labels_per_worker())
        self.lp = np.empty(lm.n_workers * lm.n_classes * lm.n_classes)  # log π, label-major (fused_em.log_lanes)
        self.log_q = np.empty(lm.n_classes)
        self.class_sums = np.empty(lm.n_classes)
        self.post_t = np.empty((lm.n_classes, lm.n_tasks))
        self._no_post = np.empty((lm.n_classes, 0))
        self.halves: Halves | None = None
        if not exact and self.rows.size >= split_at and lm.n_tasks >= 2:
            threads = usable_cores() >= 2 if threads is None else threads
            self.halves = Halves(
                self.indptr, self.gold, lm.n_workers if one_coin else self.lp.size, lm.n_classes, threads
            )

    def close(self) -> None:
        """End the sweep's second thread, if any."""
        if self.halves is not None:
            self.halves.close()

    def _tables(self, theta: np.ndarray) -> float:
        """log π (label-major) and log q of θ into ``self.lp``, ``self.log_q``; returns the M-step's log prior, the
        value of :meth:`EMParameters.tables` bit for bit (:meth:`EMParameters.lanes`)."""
        return self.par.lanes(theta, self.lp, self.log_q)

    def _pass(self, post_t: np.ndarray, out: np.ndarray) -> float:
        """The fused E-step and M-step sums at the tables of :meth:`_tables`, F into ``out``; returns the E-step's
        log-likelihood of the answers and gold (posteriors into ``post_t`` unless it is empty)."""
        par = self.par
        _, q = par.split(out)
        sums = out[: par.n_pi]
        sweep = fused_pass if self.halves is None else self.halves.run
        ll = float(
            sweep(
                self.indptr,
                self.rows,
                self.lp,
                self.log_q,
                self.gold,
                par.one_coin,
                sums,
                self.class_sums,
                self.hits,
                post_t,
                self.exact,
            )
        )
        if self.gold_tasks.size:  # as :meth:`pin`: Σ_gold log T_{t, gold} before the pin
            ll += float(np.log(np.maximum(self.hits, 1e-300)).sum())
        if par.one_coin:
            _one_coin_accuracy(par.n_i, par.alpha, sums)
        else:
            confusion_in_place(sums, par.w, par.m, par.alpha, par.beta)
        prior_from_sums(self.class_sums, self.post_t.shape[1], par.alpha, q)
        return ll

    def m_step(self, out: np.ndarray) -> None:
        """θ from the posteriors ``self.post_t`` into ``out``."""
        par = self.par
        pi, q = par.split(out)
        if par.one_coin:
            _one_coin_sums(self.task, self.worker, self.given, self.post_t, pi)
            _one_coin_accuracy(par.n_i, par.alpha, pi)
        else:
            head = out[: par.n_pi]
            counts_from_posteriors(self.task, self.rows, self.post_t, head)
            confusion_in_place(head, par.w, par.m, par.alpha, par.beta)
        _class_prior(self.post_t, par.alpha, q)

    def __call__(self, theta: np.ndarray) -> tuple[np.ndarray, float, float]:
        prior = self._tables(theta)
        out = np.empty_like(theta)
        ll = self._pass(self._no_post, out)
        return out, ll + prior, ll

    def pin(self) -> float:
        """Gold tasks' posteriors set to their answer after an E-step; returns Σ_gold log T_{t, gold} (before the pin),
        which turns the E-step's log-likelihood into that of the answers and the gold labels, log p(Y, z_gold):
        log T_{t,g} = log p(Y_t, z_t = g) − log p(Y_t)."""
        if not self.gold_tasks.size:
            return 0.0
        hit = self.post_t[self.gold_labels, self.gold_tasks]
        self.post_t[:, self.gold_tasks] = 0.0
        self.post_t[self.gold_labels, self.gold_tasks] = 1.0
        return float(np.log(np.maximum(hit, 1e-300)).sum())

    def start(self, post: np.ndarray) -> np.ndarray:
        """θ₀: the M-step on the posteriors ``post`` (T×M, the majority-vote fractions; gold tasks pinned)."""
        theta = np.empty(self.par.n_pi + self.par.m)
        self.post_t[:] = post.T
        self.pin()
        self.m_step(theta)
        return theta

    def posteriors(self, theta: np.ndarray) -> tuple[np.ndarray, float]:
        """The final E-step at θ: (T×M posteriors, gold tasks pinned; log-likelihood of the answers and gold)."""
        self._tables(theta)
        ll = self._pass(self.post_t, np.empty_like(theta))
        return np.ascontiguousarray(self.post_t.T), ll


Acceleration = Literal["squarem", "none"]


def _fit_em(
    lm: LabelMatrix,
    one_coin: bool,
    alpha: float,
    beta: float,
    tol: float,
    max_iter: int,
    acceleration: Acceleration,
    gold: np.ndarray | None = None,
    progress: ProgressFn | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, bool]:
    """EM from the majority-vote fractions: (posteriors T×M, π, q, trace, iterations, converged).

    ``"squarem"``: :func:`crowdflow.skills.squarem.squarem` over the fused passes of :class:`_EMMap`, then a
    final E-step at the returned parameters; ``"none"``: the plain compiled loop :func:`_em` (the reference).
    ``progress`` (squarem only; the plain loop reports 1.0 at its end): the partitioned EM's reports
    (:func:`crowdflow.skills.held_em.em_fit`: fractions of the evaluations and of the parameter move, a line a pass,
    logged at DEBUG), then 1.0 after the final E-step; they read the run and change nothing in it.
    """
    if gold is not None and (gold >= 0).any() and acceleration == "none":
        raise ValueError("gold answers in the fit run with acceleration='squarem' (the plain loop is the reference)")
    if acceleration == "none":
        post_t = np.ascontiguousarray(_mv_init(lm).T)
        n_i = lm.labels_per_worker().astype(np.float64)
        pi, q, ll, it, converged = _em(*_label_arrays(lm), post_t, n_i, one_coin, alpha, beta, tol, max_iter)
        if progress is not None:
            progress(1.0)
        return np.ascontiguousarray(post_t.T), pi, q, ll, it, converged
    if acceleration != "squarem":
        raise ValueError(f"unknown acceleration {acceleration!r}; use 'squarem' or 'none'")
    em = _EMMap(lm, one_coin, alpha, beta, gold)
    tracker = IterationProgress(progress, max_iter, tol)
    step = em if progress is None else PassLines(progress, max_iter, log, logging.DEBUG).around(em)
    try:
        monitor = None if progress is None else tracker.update
        run = squarem(step, em.start(_mv_init(lm)), tol, max_iter, *em.par.bounds(), monitor=monitor)
        post, ll_end = em.posteriors(run.theta)
    finally:
        em.close()
    tracker.done()
    _, q = em.par.split(run.theta)
    trace = np.asarray([*run.trace, ll_end], dtype=np.float64)
    log.debug(
        "%s EM (SQUAREM): %d evaluations, %d extrapolations kept, %d refused",
        "one-coin" if one_coin else "full",
        run.evaluations,
        run.extrapolations,
        run.refused,
    )
    return post, em.par.confusion(run.theta), np.array(q), trace, run.evaluations, run.converged


def dawid_skene(
    lm: LabelMatrix,
    tol: float = 1e-6,
    max_iter: int = 100,
    smoothing: float = 0.01,
    tie_break: TieBreak = "random",
    seed: int = 0,
    prior: float = 1.0,
    acceleration: Acceleration = "squarem",
    gold: np.ndarray | None = None,
    progress: ProgressFn | None = None,
) -> DawidSkeneResult:
    """Full-confusion Dawid–Skene by EM (docs/methods/skills.md §7.2, §7.3), initialised from majority-vote fractions.

    M-step: π_i[l, m] = (G_i[l, m] + α + β 1{m = l})/Σ_m' (G_i[l, m'] + α + β 1{m' = l}) with
    G_i[l, m] = Σ_{t: Y_it = m} T_tl (T: T×M posteriors), q_l = (Σ_t T_tl + α)/(T + M α). E-step:
    log T_tl = log q_l + Σ_{i labels t} log π_i[l, Y_it], row-normalised. O(|labels| · M) per
    iteration, one fused pass over the labels per E+M step in a compiled loop. The pseudo-counts make this
    EM for the posterior mode under π_i[l, ·] ~ Dir(1 + α + β e_l) (β virtual correct answers per true
    class and worker) and q ~ Dir(1 + α), which increases the log posterior at every step; the
    observed-data log-likelihood in the trace need not.

    Acceleration (``"squarem"``, the default): the EM steps are extrapolated by SQUAREM
    (:mod:`crowdflow.skills.squarem`), keeping an extrapolated point only if it does not lower the log
    posterior; same fixed point, same stopping rule, far fewer passes when plain EM is slow.

    Parameters
    ----------
    lm : LabelMatrix
        De-duplicated labels.
    tol : float
        Stop when one EM step changes no parameter (entry of q or π) by ``tol`` or more (max |Δ| < tol);
        the parameters after that step are returned.
    max_iter : int
        Cap on the EM steps (E-step + M-step, one pass over the labels each), extrapolation's included.
    smoothing : float
        Additive (Dirichlet) smoothing α of the counts.
    tie_break : {"random", "smallest"}
    seed : int
    prior : float
        β ≥ 0, the diagonal pseudo-count (docs/methods/skills.md §7.3). 1 (the default, the
        ``ds_prior`` default of :class:`~crowdflow.skills.SkillsOptions`) is the library's default fit;
        0 is classic Dawid–Skene (with ``acceleration="none"``, bit for bit the fit of this function before
        the prior existed).
    acceleration : {"squarem", "none"}
        ``"none"`` runs plain EM (the reference loop): the same fixed point in more passes.
    gold : numpy.ndarray, optional
        Known answers: a label code per task, −1 where unknown. Those tasks' posteriors are pinned to their
        answer after every E-step (and in the start), so EM maximises the likelihood of the answers and the gold
        labels together, p(Y, z_gold) (docs/how-to/notebook.md; Crowd-Kit's ``fit(data, true_labels)``).
    progress : callable, optional
        ``progress(fraction)`` rising to 1.0 (once, at the end) and, to a callback with ``note``, one line per EM
        step: its number, the log-likelihood and its change (:class:`crowdflow.progress.PassLines`, as the
        partitioned EM); the fit is the same bits with or without it.

    Returns
    -------
    DawidSkeneResult
        ``log_likelihood``: the observed-data log-likelihood at each EM step's E-step whose point was kept
        (plain EM: every step), then at the returned parameters; ``iterations``: EM steps taken.
    """
    _check(lm, tol, max_iter, smoothing, prior)
    post, pi, q, ll, it, converged = _fit_em(
        lm, False, float(smoothing), float(prior), float(tol), int(max_iter), acceleration, _gold(lm, gold), progress
    )
    accuracy = np.einsum("l,ill->i", q, pi)
    return _result(lm, post, pi, q, accuracy, np.full(lm.n_workers, np.nan), ll, it, converged, "ds", tie_break, seed)


def one_coin_dawid_skene(
    lm: LabelMatrix,
    tol: float = 1e-6,
    max_iter: int = 100,
    smoothing: float = 0.01,
    tie_break: TieBreak = "random",
    seed: int = 0,
    acceleration: Acceleration = "squarem",
    gold: np.ndarray | None = None,
    progress: ProgressFn | None = None,
) -> DawidSkeneResult:
    """One-coin (homogeneous) Dawid–Skene by EM (docs/methods/skills.md §7.2), initialised from majority-vote fractions.

    E-step: log T_tl = log q_l + Σ_{i labels t} log((1 − p_i)/(M − 1))
    + Σ_{i labels t} 1{Y_it = l} v_i with v_i = log((M − 1) p_i/(1 − p_i)) (the MAP weight of
    docs/methods/skills.md §2.7, so the E-step is a weighted vote plus a log prior). M-step:
    p_i = (Σ_{t: i labels t} T_{t, Y_it} + α)/(n_i + 2α), q_l = (Σ_t T_tl + α)/(T + M α) (EM for the
    posterior mode under p_i ~ Beta(1 + α, 1 + α), q ~ Dir(1 + α)). Accelerated like :func:`dawid_skene`.

    Parameters
    ----------
    lm : LabelMatrix
        De-duplicated labels.
    tol : float
        Stop when one EM step changes no q_l or p_i by ``tol`` or more (max |Δ| < tol).
    max_iter : int
        Cap on the EM steps (passes over the labels).
    smoothing : float
        α; keeps p_i strictly inside (0, 1).
    tie_break : {"random", "smallest"}
    seed : int
    acceleration : {"squarem", "none"}
        As in :func:`dawid_skene`.
    gold : numpy.ndarray, optional
        As in :func:`dawid_skene`: gold tasks' posteriors pinned.
    progress : callable, optional
        As in :func:`dawid_skene`.

    Returns
    -------
    DawidSkeneResult
    """
    _check(lm, tol, max_iter, smoothing)
    m = lm.n_classes
    post, confusion, q, ll, it, converged = _fit_em(
        lm, True, float(smoothing), 0.0, float(tol), int(max_iter), acceleration, _gold(lm, gold), progress
    )
    p = confusion[:, 0, 0].copy()
    vote = np.log((m - 1) * p / (1 - p))
    return _result(lm, post, confusion, q, p, vote, ll, it, converged, "onecoin_ds", tie_break, seed)
