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
base 2; the normalised T is the same).

Passes (issue #36): the answers are grouped by task once (a counting sort), and each iteration is one pass over
them that reads ln π of the current parameters per answer (the evidence e_t, which serves both the bound of the
current iteration and the next E-step: the bound's cross term Σ_t T_t · e_t is summed in the same pass), one
vectorised exponential over the T × M table, and a second pass that normalises each task, adds its clipped entropy
term (one logarithm per task: ln T = e + ln q − top − ln z) and scatters T_t into the next M-step's counts. The
bound of iteration k is thus finished in pass k + 1, which also computes iteration k + 1's E-step; the last
iteration (``n_iter``) skips it. No sparse matrix, no per-iteration allocation beyond the tables.

All arrays are dense codes: tasks 0..T−1, workers 0..W−1, labels 0..M−1 (the caller's order; ties go to the
lower code under :func:`numpy.argmax`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    """The answers grouped by task: task t's answers are ``col[start[t]:start[t + 1]]`` (in data order), each the row
    code i·M + m of worker i answering m. Every sum over answers of the EM is one pass over this list: the E-step's
    Σ_{i labels t} ln π_i[Y_it, ·] reads a row of the ln π table per answer, the M-step's counts
    Σ_{answers m of i} T_t add task t's posterior into row i·M + m (the incidence products A · ln π and Aᵀ · T)."""

    start: np.ndarray  # int64, T + 1 offsets
    col: np.ndarray  # int64, row code w·M + m per answer, grouped by task
    per_task: np.ndarray  # answers per task, float64

    @staticmethod
    def of(task: np.ndarray, worker: np.ndarray, label: np.ndarray, n_tasks: int, n_workers: int, m: int) -> _Answers:
        t = np.asarray(task, dtype=np.int64)
        count = np.bincount(t, minlength=n_tasks)
        start = np.zeros(n_tasks + 1, dtype=np.int64)
        np.cumsum(count, out=start[1:])
        col = _group_by_task(t, np.asarray(worker, dtype=np.int64) * m + label, start)
        return _Answers(start, col, count.astype(np.float64))


@compiled_kernel
def _group_by_task(task: np.ndarray, code: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``code`` reordered so each task's entries are contiguous (a stable counting sort by ``task``)."""
    fill = start[:-1].copy()
    out = np.empty(code.size, dtype=np.int64)
    for k in range(task.size):
        t = task[k]
        out[fill[t]] = code[k]
        fill[t] += 1
    return out


@compiled_kernel
def _scatter(start: np.ndarray, col: np.ndarray, post: np.ndarray, counts: np.ndarray) -> None:
    """counts[i·M + m] = Σ_{answers m of i} T_t (Aᵀ · T), into ``counts`` ((W·M) × M, zeroed here)."""
    n_tasks, m = post.shape
    counts[:] = 0.0
    for t in range(n_tasks):
        for k in range(start[t], start[t + 1]):
            r = col[k]
            for c in range(m):
                counts[r, c] += post[t, c]


@compiled_kernel
def _evidence(
    start: np.ndarray, col: np.ndarray, log_table: np.ndarray, log_q: np.ndarray, post: np.ndarray, shifted: np.ndarray
) -> float:
    """One pass over the answers, task by task, with ln π of the current parameters (``log_table``, (W·M) × M):
    the evidence e_t = Σ_{i labels t} ln π_i[Y_it, ·], the bound's cross term Σ_t Σ_l T_tl e_tl of the current
    posteriors ``post`` (returned), and the next E-step's log-terms a_t = e_t + ln q − max_l (e_tl + ln q_l) into
    ``shifted`` (``log_q`` = ln max(q, 1e-10); −∞ everywhere gives NaN, as numpy's arithmetic does)."""
    n_tasks, m = post.shape
    ev = np.empty(m)
    cross = 0.0
    for t in range(n_tasks):
        lo, hi = start[t], start[t + 1]
        for c in range(m):
            ev[c] = 0.0
        for k in range(lo, hi):
            r = col[k]
            for c in range(m):
                ev[c] += log_table[r, c]
        top = ev[0] + log_q[0]
        for c in range(m):
            cross += post[t, c] * ev[c]
            top = max(top, ev[c] + log_q[c])
        for c in range(m):
            shifted[t, c] = ev[c] + log_q[c] - top
    return cross


@compiled_kernel
def _normalise_and_count(
    start: np.ndarray,
    col: np.ndarray,
    shifted: np.ndarray,
    post: np.ndarray,
    gold: np.ndarray,
    counts: np.ndarray,
    sums: np.ndarray,
) -> float:
    """The E-step's end and the M-step's sums, task by task: ``post`` holds exp(a_t) on entry and T_t = exp(a_t)/z_t
    on return (a gold task pinned to its answer); the clipped entropy term Σ_t Σ_l T̃ ln T̃ with T̃ = max(T, 1e-10)
    is returned (ln T = a − ln z: one logarithm per task); ``counts`` gets Aᵀ · T ((W·M) × M), ``sums[0]`` Σ_t T_t
    and ``sums[1]`` Σ_t n_t T_t."""
    n_tasks, m = post.shape
    floor = 1e-10 * np.log(1e-10)
    ent = 0.0
    counts[:] = 0.0
    sums[:] = 0.0
    for t in range(n_tasks):
        lo, hi = start[t], start[t + 1]
        g = gold[t]
        if g >= 0:
            for c in range(m):
                post[t, c] = 0.0
            post[t, g] = 1.0
            ent += (m - 1) * floor
        else:
            z = 0.0
            for c in range(m):
                z += post[t, c]
            log_z = np.log(z)
            for c in range(m):
                p = post[t, c] / z
                post[t, c] = p
                if p > 1e-10:
                    ent += p * (shifted[t, c] - log_z)
                else:
                    ent += floor
        n = hi - lo
        for c in range(m):
            sums[0, c] += post[t, c]
            sums[1, c] += n * post[t, c]
        for k in range(lo, hi):
            r = col[k]
            for c in range(m):
                counts[r, c] += post[t, c]
    return ent


def _em_pass(
    ans: _Answers,
    log_table: np.ndarray,
    log_q: np.ndarray,
    post: np.ndarray,
    gold: np.ndarray,
    advance: bool,
    out: np.ndarray,
    counts: np.ndarray,
    sums: np.ndarray,
    shifted: np.ndarray,
) -> tuple[float, float]:
    """One EM pass with the current parameters (ln π as ``log_table``, ``log_q``) and posteriors ``post``: returns the
    bound's cross term Σ_t Σ_l T_tl e_tl and, with ``advance``, the next posteriors T' ∝ exp(e + ln q) (normalised by
    each task's largest term first; gold pinned) into ``out``, their clipped entropy term (returned second), their
    counts Aᵀ · T' and sums (:func:`_normalise_and_count`). The exponentials are one vectorised numpy call between the
    two compiled passes over the answers (``shifted``: scratch, T × M)."""
    cross = _evidence(ans.start, ans.col, log_table, log_q, post, shifted)
    if not advance:
        return cross, 0.0
    np.exp(shifted, out=out)
    return cross, _normalise_and_count(ans.start, ans.col, shifted, out, gold, counts, sums)


def _log_table(errors: np.ndarray) -> np.ndarray:
    """ln π as a (W·M) × M table. The rows of pairs no answer uses are 0 (−∞ in ln) and never read: a sparse product
    visits only the stored answers. An answer whose row is 0 (an assigned table without that row) gives −∞, as
    Crowd-Kit's join gives a missing value."""
    w, m, _ = errors.shape
    with np.errstate(divide="ignore"):
        table: np.ndarray = np.log(errors).reshape(w * m, m)
    return table


def _full_m_step(
    counts: np.ndarray,
    pairs: np.ndarray,
    smoothing: float,
    prior: float,
    initial: np.ndarray | None,
    strategy: str | None,
) -> np.ndarray:
    """π from the counts Aᵀ · T ((W·M) × M): smoothed, clipped, each column normalised over the worker's rows."""
    n_workers, m = pairs.shape
    counts = counts.reshape(n_workers, m, m).copy()
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


def _one_coin_m_step(counts: np.ndarray, n_i: np.ndarray, m: int, smoothing: float) -> tuple[np.ndarray, np.ndarray]:
    """p_i = (Σ_{answers of i} T_{t, Y} + α)/(n_i + 2α), the diagonal of the counts Aᵀ · T; π_i from p_i."""
    hit = counts.reshape(n_i.size, m, m)[:, np.arange(m), np.arange(m)].sum(axis=1)
    skills = (hit + smoothing) / (n_i + 2 * smoothing)
    errors = np.repeat(((1.0 - skills) / (m - 1))[:, None, None], m, axis=1).repeat(m, axis=2)
    errors[:, np.arange(m), np.arange(m)] = skills[:, None]
    return np.clip(errors, EPS, 1.0 - EPS), skills


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
    n_i = np.bincount(worker, minlength=n_workers).astype(np.float64)
    gold_codes = np.full(n_tasks, -1, dtype=np.int64) if gold is None else np.asarray(gold, dtype=np.int64)
    post = _pin(majority_shares(task, label, n_tasks, m), gold_codes)
    q = post.mean(axis=0)
    counts = np.empty((n_workers * m, m))
    _scatter(ans.start, ans.col, post, counts)
    skills = np.full(n_workers, np.nan)
    if one_coin:
        errors, skills = _one_coin_m_step(counts, n_i, m, smoothing)
        data_pairs = pairs
    else:
        data_pairs, first_pairs = pairs, pairs
        if initial is not None and strategy is not None:
            assert initial_pairs is not None
            first_pairs = initial_pairs if strategy == "assign" else pairs | initial_pairs
        errors = _full_m_step(counts, first_pairs, smoothing, prior, initial, strategy)
        pairs = first_pairs
    history: list[float] = []
    if n_iter <= 0:
        return ClassicEMResult(post, q, errors, pairs, skills, history)
    # pass 0: the first E-step (from π⁰) and its counts; then pass k gives iteration k's bound and the next E-step
    nxt, shifted, sums = np.empty_like(post), np.empty_like(post), np.zeros((2, m))
    _, ent = _em_pass(ans, _log_table(errors), _log_q(q), post, gold_codes, True, nxt, counts, sums, shifted)
    loss = -np.inf
    for it in range(1, n_iter + 1):
        post, nxt = nxt, post
        q = sums[0] / n_tasks
        nsum, ent_now = sums[1].copy(), ent
        if one_coin:
            errors, skills = _one_coin_m_step(counts, n_i, m, smoothing)
        else:
            errors = _full_m_step(counts, data_pairs, smoothing, prior, None, None)
            pairs = data_pairs
        log_q = _log_q(q)
        advance = it < n_iter
        cross, ent = _em_pass(ans, _log_table(errors), log_q, post, gold_codes, advance, nxt, counts, sums, shifted)
        new = (cross + float(nsum @ log_q) - ent_now) / task.size
        history.append(new)
        if new - loss < tol:
            break
        loss = new
    return ClassicEMResult(post, q, errors, pairs, skills, history)


def _log_q(q: np.ndarray) -> np.ndarray:
    return np.asarray(np.log(np.maximum(q, EPS)), dtype=np.float64)
