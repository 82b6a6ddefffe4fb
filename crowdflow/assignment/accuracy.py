"""Expected accuracy of Bayes-weighted (MAP) voting for an assignment, exact and sampled.

Binary truth ``y_j`` with prior ``π_j``; an assigned worker answers task ``j`` correctly with
probability ``Q_ij``, log-odds ``ℓ_ij = ln(Q/(1−Q))``. The MAP vote is
``ŷ_j = 1[Σ_i (2Ŷ_ij − 1) ℓ_ij − r_j ≥ 0]`` with ``r_j = ln((1−π_j)/π_j)`` (ties → 1), and
``E_acc,j = π_j P(score_j ≥ 0 | y=1) + (1−π_j) P(score_j < 0 | y=0)``.

- :func:`map_accuracy_exact` enumerates the ``2^k`` vote patterns of each task (the test oracle);
- :func:`map_accuracy_mc` samples truths and votes (the evaluation of an assignment);
- :func:`smoothed_accuracy` is the sigmoid-smoothed objective ``Ẽ`` and its corrected stochastic
  gradient on fixed vote samples (:func:`sample_votes`), the ascent direction of stochastic IHT;
- :func:`expected_accuracy` scores an assignment table.

See docs/methods/assignment.md §5.1, §5.2 and §5.4.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.assignment.problem import _CAND_ALIASES, _float_column, _ids_as_str, _rename_aliases

_Q_CLIP = (1e-3, 1.0 - 1e-3)
# independent random streams per purpose, so that equal user seeds never correlate e.g. the
# synthetic qualities with the vote samples or the random baseline
_TAG_SYNTH, _TAG_RANDOM, _TAG_SIHT, _TAG_EVAL = 11, 12, 13, 14


def _rng(seed: int, tag: int) -> np.random.Generator:
    return np.random.default_rng([tag, int(seed)])


def _sigmoid(t: np.ndarray) -> np.ndarray:
    """``S(t) = 1/(1 + e^{−t})`` as ``½(1 + tanh(t/2))`` (no overflow for large ``|t|``); the one
    sigmoid of the package (also the logistic loss of :mod:`crowdflow.assignment.iht`)."""
    return 0.5 * (1.0 + np.tanh(0.5 * t))


def map_accuracy_exact(
    quality: np.ndarray, task_index: np.ndarray, prior: np.ndarray, max_workers: int = 12
) -> np.ndarray:
    """Exact expected accuracy of the MAP weighted vote per task (docs/methods/assignment.md §5.1; the T14 oracle).

    For task ``j`` with assigned workers of quality ``Q`` (log-odds ``ℓ``) and prior ``π_j``:
    ``score_j = Σ (2Ŷ−1)ℓ − r_j`` with ``r_j = ln((1−π_j)/π_j)``, ``ŷ = 1[score ≥ 0]`` and
    ``E_acc,j = π_j P(score ≥ 0 | y=1) + (1−π_j) P(score < 0 | y=0)``, by enumerating all
    ``2^k`` vote patterns. A task with no worker gets ``π_j`` if ``π_j ≥ ½`` else ``1 − π_j``.

    Parameters
    ----------
    quality : ndarray (q,)
        ``Q`` of the assigned (task, worker) pairs (clipped to [1e-3, 1 − 1e-3]).
    task_index : ndarray of int (q,)
        Task of each pair, in ``[0, m)`` with ``m = len(prior)``.
    prior : ndarray (m,)
        ``π_j = P(y_j = 1)``.
    max_workers : int
        Refuse tasks with more assigned workers (2^k patterns).
    """
    prior = np.asarray(prior, dtype=np.float64)
    m = prior.shape[0]
    q = np.clip(np.asarray(quality, dtype=np.float64), *_Q_CLIP)
    t = np.asarray(task_index, dtype=np.int64)
    r = np.log((1.0 - prior) / prior)
    acc = np.where(-r >= 0, prior, 1.0 - prior)
    if q.size == 0:
        return acc
    order = np.argsort(t, kind="stable")
    ts, qs = t[order], q[order]
    counts = np.bincount(ts, minlength=m)
    if counts.max() > max_workers:
        raise ValueError(f"exact accuracy enumerates 2^k patterns; a task has {counts.max()} > {max_workers} workers")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    for k in np.unique(counts[counts > 0]):
        tj = np.flatnonzero(counts == k)
        Qk = qs[starts[tj][:, None] + np.arange(k)[None, :]]  # (n_k, k)
        lk = np.log(Qk / (1.0 - Qk))
        pat = ((np.arange(2**k)[:, None] >> np.arange(k)[None, :]) & 1).astype(np.float64)  # 1 = vote "1"
        sgn = 2.0 * pat - 1.0
        score = sgn @ lk.T - r[tj][None, :]  # (2^k, n_k)
        # P(pattern | y=1) = Π Q^{vote=1} (1−Q)^{vote=0};  given y=0 the roles swap
        logq, log1q = np.log(Qk), np.log1p(-Qk)
        lp1 = pat @ logq.T + (1.0 - pat) @ log1q.T
        lp0 = pat @ log1q.T + (1.0 - pat) @ logq.T
        pi = prior[tj]
        acc[tj] = pi * np.sum(np.exp(lp1) * (score >= 0), axis=0) + (1.0 - pi) * np.sum(
            np.exp(lp0) * (score < 0), axis=0
        )
    return acc


def map_accuracy_mc(
    quality: np.ndarray,
    task_index: np.ndarray,
    prior: np.ndarray,
    samples: int = 1000,
    seed: int = 0,
    chunk: int = 256,
) -> np.ndarray:
    """Monte-Carlo expected accuracy of the MAP vote per task (docs/methods/assignment.md §5.4).

    For each of ``samples`` draws: ``y_j ~ Bern(π_j)``, each assigned worker votes correctly with
    probability ``Q``, the MAP rule of :func:`map_accuracy_exact` predicts ``ŷ_j``; returns the
    per-task hit rate.
    """
    prior = np.asarray(prior, dtype=np.float64)
    m = prior.shape[0]
    q = np.clip(np.asarray(quality, dtype=np.float64), *_Q_CLIP)
    t = np.asarray(task_index, dtype=np.int64)
    ell = np.log(q / (1.0 - q))
    r = np.log((1.0 - prior) / prior)
    rng = _rng(seed, _TAG_EVAL)
    hits = np.zeros(m)
    P = sp.csr_matrix((np.ones(t.shape[0]), (np.arange(t.shape[0]), t)), shape=(t.shape[0], m))
    done = 0
    while done < samples:
        b = min(chunk, samples - done)
        y = rng.random((b, m)) < prior[None, :]
        correct = rng.random((b, t.shape[0])) < q[None, :]
        vote1 = np.where(correct, y[:, t], ~y[:, t])
        s = (P.T @ ((2.0 * vote1 - 1.0) * ell[None, :]).T).T - r[None, :]
        yhat = s >= 0
        hits += np.sum(yhat == y, axis=0)
        done += b
    return hits / samples


def smoothed_accuracy(
    W: np.ndarray,
    Z1: np.ndarray,
    Z0: np.ndarray,
    task_index: np.ndarray,
    prior: np.ndarray,
) -> tuple[float, np.ndarray]:
    """Sampled smoothed objective ``Ẽ`` and its corrected gradient (docs/methods/assignment.md §5.2), without 1/m.

    With ``a_j(Z) = Σ_{i∈j} Z_i W_i − r_j`` and fixed vote samples ``Z¹`` (drawn given ``y=1``)
    and ``Z⁰`` (given ``y=0``), each of shape (B, p):
    ``Ẽ·m = mean_b Σ_j [π_j S(a_j(Z¹_b)) + (1−π_j) S(−a_j(Z⁰_b))]`` and
    ``g_i = mean_b [π_j S'(a_j(Z¹_b)) Z¹_bi − (1−π_j) S'(a_j(Z⁰_b)) Z⁰_bi]`` (sign erratum: the
    paper prints ``+``; ``d/dW S(−a) = −S'(a) Z``).

    Returns
    -------
    (value, gradient) with ``value = Ẽ`` (mean over tasks) and ``gradient = m·∇Ẽ``.
    """
    prior = np.asarray(prior, dtype=np.float64)
    m = prior.shape[0]
    t = np.asarray(task_index, dtype=np.int64)
    r = np.log((1.0 - prior) / prior)
    P = sp.csr_matrix((np.ones(t.shape[0]), (np.arange(t.shape[0]), t)), shape=(t.shape[0], m))
    a1 = np.asarray(P.T @ (Z1 * W[None, :]).T).T - r[None, :]
    a0 = np.asarray(P.T @ (Z0 * W[None, :]).T).T - r[None, :]
    s1, s0 = _sigmoid(a1), _sigmoid(a0)
    value = float(np.mean(np.sum(prior[None, :] * s1 + (1.0 - prior[None, :]) * (1.0 - s0), axis=1)) / m)
    d1 = (s1 * (1.0 - s1))[:, t]
    d0 = (s0 * (1.0 - s0))[:, t]
    g = np.mean(prior[t][None, :] * d1 * Z1 - (1.0 - prior[t])[None, :] * d0 * Z0, axis=0)
    return value, g


def sample_votes(quality: np.ndarray, batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``Z¹`` and ``Z⁰`` (shape (batch, p)): ``Z = (2Ŷ−1)·ℓ`` for votes drawn given ``y=1``
    and given ``y=0`` (each worker correct with probability ``Q``)."""
    q = np.clip(np.asarray(quality, dtype=np.float64), *_Q_CLIP)
    ell = np.log(q / (1.0 - q))
    c1 = rng.random((batch, q.shape[0])) < q[None, :]
    c0 = rng.random((batch, q.shape[0])) < q[None, :]
    return np.where(c1, ell, -ell), np.where(c0, -ell, ell)


def expected_accuracy(
    assignment: pd.DataFrame,
    tasks: Any = None,
    *,
    prior: float | pd.DataFrame = 0.5,
    samples: int | None = 1000,
    seed: int = 0,
) -> float:
    """Mean expected accuracy over tasks of the MAP vote for an assignment (docs/methods/assignment.md §5.1).

    Parameters
    ----------
    assignment : DataFrame
        ``task, worker, quality`` of the assigned pairs.
    tasks : sequence of task ids, optional
        Tasks to average over (default: those in ``assignment``); tasks without workers score
        ``max(π, 1−π)``.
    prior : float or DataFrame (task, prior)
    samples : int or None
        Monte-Carlo samples; ``None`` = exact enumeration (≤ 12 workers per task).
    seed : int
    """
    df = _rename_aliases(assignment, _CAND_ALIASES)
    for col in ("task", "quality"):
        if col not in df.columns:
            raise ValueError(f"assignment: missing column '{col}'")
    t_ids = _ids_as_str(df["task"], "assignment", "task")
    q = _float_column(df, "quality", "assignment")
    if np.any((q <= 0) | (q >= 1)):
        raise ValueError("assignment: 'quality' must lie in (0, 1)")
    if tasks is None:
        all_tasks = np.unique(t_ids.astype(str))
    else:
        all_tasks = np.unique(np.asarray(list(tasks), dtype=object).astype(str))
    missing = np.setdiff1d(t_ids.astype(str), all_tasks)
    if missing.size:
        raise ValueError(f"assignment has tasks not in `tasks`: {missing[:10].tolist()}")
    if all_tasks.size == 0:
        raise ValueError("expected_accuracy: no tasks")
    t_idx = np.searchsorted(all_tasks, t_ids.astype(str))
    if isinstance(prior, pd.DataFrame):
        for col in ("task", "prior"):
            if col not in prior.columns:
                raise ValueError(f"prior table: missing column '{col}'")
        pser = pd.Series(_float_column(prior, "prior", "prior table"), index=prior["task"].astype(str).to_numpy())
        if pser.index.duplicated().any():
            raise ValueError("prior table: duplicate task ids")
        pr = pser.reindex(all_tasks).fillna(0.5).to_numpy(dtype=np.float64)
    else:
        pr = np.full(all_tasks.shape[0], float(prior))
    if np.any((pr <= 0) | (pr >= 1)):
        raise ValueError("prior must lie in (0, 1)")
    if samples is None:
        return float(map_accuracy_exact(q, t_idx, pr).mean())
    return float(map_accuracy_mc(q, t_idx, pr, samples=samples, seed=seed).mean())
