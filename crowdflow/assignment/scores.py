"""Candidate (task, worker) scores from fitted worker skills and task confidences.

The score of a pair is the first-order gain in the smoothed expected accuracy when the worker is
added to the task, ``π_j(1−π_j)·(2Q_ij − 1)·ln(Q_ij/(1 − Q_ij))``: predicted worker
informativeness times task uncertainty. Maximising the total score with
:func:`crowdflow.assignment.fit.assign_tasks` is one linearised step of stochastic IHT; it is how
the next batch of the closed loop is chosen.

See docs/methods/assignment.md §5.5.
"""

from __future__ import annotations

import logging
from typing import Literal

import numpy as np
import pandas as pd

from crowdflow.assignment.accuracy import _Q_CLIP
from crowdflow.assignment.problem import _ids_as_str

log = logging.getLogger(__name__)


def candidate_scores(
    skills: pd.DataFrame,
    consensus: pd.DataFrame | None = None,
    pairs: pd.DataFrame | None = None,
    *,
    missing: Literal["error", "drop"] = "error",
    max_pairs: int = 20_000_000,
) -> pd.DataFrame:
    """Candidate (task, worker) scores for :func:`assign_tasks` from skills and task confidence.

    Model (docs/methods/assignment.md §5.1, §5.5): worker ``i`` answers task ``j`` correctly with
    probability ``Q_ij = accuracy_i`` (skills column ``accuracy``; else binary one-coin skill
    ``s_i ∈ [−1,1]`` → ``Q = (1 + s)/2``, the one-coin model of docs/methods/skills.md), clipped to
    [1e-3, 1 − 1e-3]. The current consensus label of task ``j`` is right with prior
    ``π_j = confidence_j`` (0.5 when the task has no consensus row). The score is the first-order
    gain of the smoothed expected accuracy ``Ẽ`` (docs/methods/assignment.md §5.2) when worker ``i`` is added
    to task ``j`` from the empty assignment, i.e. the expectation of the corrected gradient at
    ``W = 0``::

        E[∂Ẽ/∂W_ij]·m = π_j(1−π_j)·(2Q_ij − 1)·ln(Q_ij / (1 − Q_ij))

    (``S'(−r_j) = π_j(1−π_j)`` and ``E[Z¹] = −E[Z⁰] = (2Q−1)ℓ``): predicted worker informativeness
    ``(2Q−1)ℓ ≥ 0`` (a Q < ½ worker is informative once inverted) times task uncertainty
    ``π(1−π)``. Maximising the total score with :func:`assign_tasks` is one linearised SIHT
    step; :func:`assign_siht` optimises the full objective.

    Parameters
    ----------
    skills : DataFrame
        ``worker`` and ``accuracy`` (preferred) or ``skill``.
    consensus : DataFrame, optional
        ``task, confidence`` (confidence ∈ [0, 1]).
    pairs : DataFrame, optional
        Eligible ``task, worker`` pairs; default = every skills worker × every consensus task.
    missing : {"error", "drop"}
        Pairs whose worker has no usable accuracy/skill (absent or NaN, e.g. a flagged
        component): raise ``ValueError`` (default) or drop them (logged).
    max_pairs : int
        Guard on the size of the default cross product.

    Returns
    -------
    DataFrame
        ``task, worker, score, quality, prior`` (one row per eligible pair, sorted by task, worker).
    """
    if "worker" not in skills.columns:
        raise ValueError(f"skills: missing column 'worker' (columns: {list(skills.columns)})")
    sk_workers = _ids_as_str(skills["worker"], "skills", "worker").astype(str)
    if pd.Index(sk_workers).duplicated().any():
        raise ValueError("skills: duplicate worker ids")
    if "accuracy" in skills.columns:
        acc = pd.to_numeric(skills["accuracy"], errors="coerce").to_numpy(dtype=np.float64)
    elif "skill" in skills.columns:
        acc = (1.0 + pd.to_numeric(skills["skill"], errors="coerce").to_numpy(dtype=np.float64)) / 2.0
    else:
        raise ValueError("skills: need an 'accuracy' or a 'skill' column")
    finite = np.isfinite(acc)
    if np.any(finite & ((acc < 0) | (acc > 1))):
        raise ValueError("skills: accuracy outside [0, 1] (or skill outside [-1, 1])")
    if consensus is not None:
        for col in ("task", "confidence"):
            if col not in consensus.columns:
                raise ValueError(f"consensus: missing column '{col}'")
        c_tasks = _ids_as_str(consensus["task"], "consensus", "task").astype(str)
        if pd.Index(c_tasks).duplicated().any():
            raise ValueError("consensus: duplicate task ids")
        conf = pd.to_numeric(consensus["confidence"], errors="coerce").to_numpy(dtype=np.float64)
        if np.any(~np.isfinite(conf)) or np.any((conf < 0) | (conf > 1)):
            raise ValueError("consensus: 'confidence' must be finite and in [0, 1]")
    else:
        c_tasks, conf = np.array([], dtype=str), np.array([])
    if pairs is None:
        if consensus is None:
            raise ValueError("candidate_scores: give `pairs` or a `consensus` table listing the tasks")
        n = sk_workers.shape[0] * c_tasks.shape[0]
        if n > max_pairs:
            raise ValueError(f"cross product of {n} pairs exceeds max_pairs={max_pairs}; pass `pairs`")
        pt = np.repeat(c_tasks, sk_workers.shape[0])
        pw = np.tile(sk_workers, c_tasks.shape[0])
    else:
        for col in ("task", "worker"):
            if col not in pairs.columns:
                raise ValueError(f"pairs: missing column '{col}'")
        pt = _ids_as_str(pairs["task"], "pairs", "task").astype(str)
        pw = _ids_as_str(pairs["worker"], "pairs", "worker").astype(str)
        d = pd.DataFrame({"t": pt, "w": pw}).duplicated(keep=False)
        if d.any():
            raise ValueError(f"pairs: duplicate (task, worker) pairs, e.g. {list(zip(pt[d], pw[d], strict=True))[:10]}")
    smap = pd.Series(acc, index=sk_workers)
    q = smap.reindex(pw).to_numpy(dtype=np.float64)
    bad = ~np.isfinite(q)
    if bad.any():
        bad_workers = sorted(set(pw[bad].tolist()))
        if missing == "error":
            raise ValueError(
                f"candidate_scores: {len(bad_workers)} worker(s) without a usable accuracy/skill, "
                f"e.g. {bad_workers[:10]} (use missing='drop' to skip them)"
            )
        log.warning(
            "candidate_scores: dropping %d pair(s) of %d worker(s) without accuracy", int(bad.sum()), len(bad_workers)
        )
        pt, pw, q = pt[~bad], pw[~bad], q[~bad]
    q = np.clip(q, *_Q_CLIP)
    if np.any(q < 0.5):
        log.warning("candidate_scores: %d pair(s) with accuracy < 0.5 (votes count inverted)", int(np.sum(q < 0.5)))
    cmap = pd.Series(conf, index=c_tasks)
    prior = cmap.reindex(pt).to_numpy(dtype=np.float64)
    prior = np.where(np.isfinite(prior), prior, 0.5)
    prior_c = np.clip(prior, *_Q_CLIP)
    ell = np.log(q / (1.0 - q))
    score = prior_c * (1.0 - prior_c) * (2.0 * q - 1.0) * ell
    out = pd.DataFrame(
        {
            "task": pd.Series(pt, dtype=object),
            "worker": pd.Series(pw, dtype=object),
            "score": score,
            "quality": q,
            "prior": prior_c,
        }
    )
    return out.sort_values(["task", "worker"], kind="stable").reset_index(drop=True)
