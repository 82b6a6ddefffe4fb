"""From skills to labels: the box around each skill, the sign of each component, the MAP vote.

- box: skill i is kept in ±(1 − τ/√n_i), n_i = labels of worker i; with M > 2 classes the lower bound is
  max(−1/(M − 1), ·) (docs/methods/skills.md §2.3);
- signs: (s, g) and (−s, −g) explain the labels equally well; each component is turned so that its
  skills sum to a positive number, or (``bfs``) signs of C^ are propagated along a spanning tree
  (docs/methods/skills.md §2.4);
- vote: task t gets argmax_l Σ_i v_i 1{Y_it = l} with the log-odds weights
  v_i = log((1 + (M − 1) s_i)/(1 − s_i)) and the softmax of those scores as posterior; tasks without an
  identified labeller fall back to majority vote or to zero weights (docs/methods/skills.md §2.7, §3.3);
- the prediction error against gold labels (docs/methods/skills.md §5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra, minimum_spanning_tree

from crowdflow._typing import SparseMatrix
from crowdflow.labels import LabelMatrix
from crowdflow.metrics import gold_metrics
from crowdflow.skills.majority import weighted_vote
from crowdflow.skills.rows import row_max, row_sum, softmax_rows
from crowdflow.skills.types import Fallback, SignMode, TieBreak

_LOG_ODDS_MARGIN = 1e-9  # docs/methods/skills.md §2.7: clip s to [lo + 1e-9, hi − 1e-9] before the log


def skill_box(n_labels: np.ndarray, n_classes: int, tau: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Per-worker box, read as in docs/methods/skills.md §2.3.

    hi_i = 1 − τ/√n_i, lo_i = −hi_i (binary) or max(−1/(M−1), −hi_i) (multiclass), n_i = labels of
    worker i. If τ/√n_i ≥ 1 the box is empty and lo_i = hi_i = 0 (status ``too_few_labels``).
    """
    n = np.asarray(n_labels, dtype=np.float64)
    if tau < 0:
        raise ValueError("tau must be >= 0")
    with np.errstate(divide="ignore"):
        hi = 1.0 - tau / np.sqrt(n)
    hi = np.where(np.isfinite(hi), hi, 0.0)
    hi = np.maximum(hi, 0.0)
    lo = -hi
    if n_classes > 2:
        lo = np.maximum(lo, -1.0 / (n_classes - 1))
    return lo, hi


def resolve_signs(
    x: np.ndarray,
    component_labels: np.ndarray,
    mode: SignMode = "sum_rule",
    c_hat: SparseMatrix | None = None,
    active: np.ndarray | None = None,
    confidence: SparseMatrix | None = None,
) -> np.ndarray:
    """Fix the global sign of each connected component (docs/methods/skills.md §2.4).

    ``sum_rule`` (S1): flip x_K when Σ_{i∈K} x_i < 0. ``bfs`` (S2): x holds |s|; root each
    component at its smallest node with sign +1, give each BFS child the sign
    sign(parent) · sign(C^_parent,child) (a zero C^ counts as +), then apply the sum rule.
    The BFS runs on a spanning tree of maximal ``confidence`` (default |C^|; :func:`fit_skills`
    passes x_i x_j √w_ij), so signs travel along the most reliable pairs — with noise any
    spanning tree can propagate a wrong sign; a random BFS tree does so often (docs/methods/skills.md §2.4).

    Parameters
    ----------
    x : numpy.ndarray
    component_labels : numpy.ndarray
        Component id per coordinate (e.g. ``Components.labels`` of the fitted graph).
    mode : {"sum_rule", "bfs"}
    c_hat : scipy.sparse matrix, optional
        Needed for ``bfs``; its nonzero pattern defines the BFS graph.
    active : numpy.ndarray of bool, optional
        Coordinates to consider (others are returned unchanged).
    """
    x = np.asarray(x, dtype=np.float64).copy()
    lab = np.asarray(component_labels)
    act = np.ones(x.size, dtype=bool) if active is None else np.asarray(active, dtype=bool)
    if mode == "bfs":
        if c_hat is None:
            raise ValueError("sign mode 'bfs' needs c_hat")
        c = sp.csr_matrix(c_hat)
        cc = c.tocoo()
        if confidence is None:
            vals = np.abs(cc.data)
        else:
            vals = np.abs(np.asarray(sp.csr_matrix(confidence)[cc.row, cc.col]).ravel())
        # maximum-confidence spanning forest: MST on a decreasing transform (cost >= 1 on every edge)
        top = float(vals.max()) if vals.size else 0.0
        cost = sp.csr_matrix((1.0 + top - vals, (cc.row, cc.col)), shape=c.shape)
        tree = minimum_spanning_tree(cost)
        nz: Any = tree  # scipy-stubs leave sparse `!=` as object.__ne__ (bool); at runtime it is elementwise
        pattern = sp.csr_matrix(((nz != 0) + (nz.T != 0)).astype(np.float64))
        ncomp = int(lab.max()) + 1 if lab.size else 0
        roots = np.full(ncomp, x.size, dtype=np.int64)
        idx = np.flatnonzero(act)
        np.minimum.at(roots, lab[idx], idx)
        roots = roots[roots < x.size]
        dist, pred, _ = dijkstra(
            pattern, directed=False, indices=roots, unweighted=True, return_predecessors=True, min_only=True
        )
        sign = np.ones(x.size)
        reach = np.isfinite(dist) & act
        depth = np.where(reach, dist, -1).astype(np.int64)
        for d in range(1, int(depth.max()) + 1 if depth.size else 1):
            nodes = np.flatnonzero(depth == d)
            parents = pred[nodes]
            cs = np.asarray(c[parents, nodes]).ravel()
            sign[nodes] = sign[parents] * np.where(cs < 0, -1.0, 1.0)
        x = np.where(act, np.abs(x) * sign, x)
    elif mode != "sum_rule":
        raise ValueError(f"unknown sign mode {mode!r}; use 'sum_rule' or 'bfs'")
    idx = np.flatnonzero(act)
    if idx.size:
        ncomp = int(lab[idx].max()) + 1
        sums = np.bincount(lab[idx], weights=x[idx], minlength=ncomp)
        flip = sums[lab[idx]] < 0
        x[idx[flip]] = -x[idx[flip]]
    return x


def vote_weights(
    skills: np.ndarray,
    n_classes: int,
    lower: np.ndarray | None = None,
    upper: np.ndarray | None = None,
) -> np.ndarray:
    """Log-odds MAP weights v_i = log((1 + (M−1) s_i)/(1 − s_i)) (docs/methods/skills.md §2.7).

    Binary: log((1+s)/(1−s)). s is clipped to [lo + 1e-9, hi − 1e-9] (default box
    [−1/(M−1), 1]); NaN skills (unidentified workers) get weight 0.
    """
    s = np.asarray(skills, dtype=np.float64)
    m = n_classes
    lo = np.full(s.shape, -1.0 / (m - 1)) if lower is None else np.asarray(lower, dtype=np.float64)
    hi = np.ones(s.shape) if upper is None else np.asarray(upper, dtype=np.float64)
    lo = np.maximum(lo, -1.0 / (m - 1))
    hi = np.minimum(hi, 1.0)
    sc = np.clip(s, lo + _LOG_ODDS_MARGIN, hi - _LOG_ODDS_MARGIN)
    sc = np.where(hi - lo <= 2 * _LOG_ODDS_MARGIN, 0.0, sc)  # empty box → s = 0 → weight 0
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.log1p((m - 1) * sc) - np.log1p(-sc)
    return np.where(np.isfinite(s), v, 0.0)


@dataclass(frozen=True)
class ConsensusOutput:
    """MAP consensus (docs/methods/skills.md §2.7).

    Attributes
    ----------
    consensus : pandas.DataFrame
        task, label, confidence, n_labels, fallback.
    scores : numpy.ndarray
        T×M scores Σ_i v_i 1{Y_it = l} (the binary score of docs/methods/skills.md §2.7 = column 1 − column 0).
    posterior : numpy.ndarray
        T×M softmax of the scores.
    n_ties : int
        Tasks decided by the weighted vote whose top score was shared.
    n_fallback : int
        Tasks with no identified labeller.
    """

    consensus: pd.DataFrame
    scores: np.ndarray
    posterior: np.ndarray
    n_ties: int
    n_fallback: int


def weighted_consensus(
    lm: LabelMatrix,
    weights: np.ndarray,
    identified: np.ndarray | None = None,
    fallback: Fallback = "mv",
    tie_break: TieBreak = "random",
    seed: int = 0,
) -> ConsensusOutput:
    """Plug-in MAP label per task with posterior confidence (docs/methods/skills.md §2.7, §3.3).

    score_t(l) = Σ_{i labels t} v_i 1{Y_it = l}; label = argmax_l (ties by
    ``majority.weighted_vote``); posterior = softmax_l score_t(l) (binary: 1/(1 + e^{−score})),
    confidence = posterior of the chosen label. A task none of whose labellers is identified is a
    fallback task (``fallback = True``): with ``fallback="mv"`` it gets the plain majority vote and
    confidence = winning vote share; with ``"zero"`` all its weights are 0, so its label is the
    tie-break among the classes and its confidence 1/M. Identified labellers always keep their
    log-odds weights.

    Parameters
    ----------
    lm : LabelMatrix
    weights : numpy.ndarray
        v_i per worker (0 for unidentified workers).
    identified : numpy.ndarray of bool, optional
        Workers whose skill was estimated (default: all).
    fallback : {"mv", "zero"}
    tie_break : {"random", "smallest"}
    seed : int
    """
    if fallback not in ("mv", "zero"):
        raise ValueError(f"unknown fallback {fallback!r}; use 'zero' or 'mv'")
    v = np.asarray(weights, dtype=np.float64)
    ident = np.ones(lm.n_workers, dtype=bool) if identified is None else np.asarray(identified, dtype=bool)
    v = np.where(ident, v, 0.0)
    winner, scores, _ = weighted_vote(lm, v, tie_break, seed)
    post, _ = softmax_rows(scores)
    top = row_max(scores)[:, None]
    n_ident = np.bincount(lm.task_idx, weights=ident[lm.worker_idx].astype(np.float64), minlength=lm.n_tasks)
    is_fb = n_ident == 0
    is_top = np.isclose(scores, top, rtol=1e-12, atol=1e-12)
    n_ties = int(((row_sum(is_top) > 1) & ~is_fb).sum())
    tasks_range = np.arange(lm.n_tasks)
    confidence = post[tasks_range, winner]
    n_labels = lm.labels_per_task()
    if fallback == "mv" and is_fb.any():
        mv_winner, mv_scores, _ = weighted_vote(lm, None, tie_break, seed)
        winner = np.where(is_fb, mv_winner, winner)
        share = mv_scores[tasks_range, mv_winner] / np.maximum(n_labels, 1)
        confidence = np.where(is_fb, share, confidence)
    table = pd.DataFrame(
        {
            "task": lm.tasks,
            "label": lm.classes[winner],
            "confidence": confidence.astype(np.float64),
            "n_labels": n_labels.astype(np.int64),
            "fallback": is_fb,
        }
    )
    return ConsensusOutput(consensus=table, scores=scores, posterior=post, n_ties=n_ties, n_fallback=int(is_fb.sum()))


def prediction_error(consensus: pd.DataFrame, truth: pd.DataFrame) -> float:
    """PE = (1/T) Σ_t 1{ĝ_t ≠ g_t} over tasks that have both a prediction and a gold label (docs/methods/skills.md §5).

    Parameters
    ----------
    consensus : pandas.DataFrame
        Columns task, label.
    truth : pandas.DataFrame
        Columns task, label (compared as strings).
    """
    m = gold_metrics(consensus, truth.drop_duplicates("task"))
    if m.n_gold == 0:
        raise ValueError("no task has both a prediction and a gold label")
    return m.error
