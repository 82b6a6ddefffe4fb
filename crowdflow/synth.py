"""Seeded synthetic label generators with ground truth (tests, demos, benchmarks).

Spec skills-rank-one.md §1.1–1.2 (one-coin model), §5 (the paper's experiments) and §6 (acceptance
tests): truth uniform over M classes; worker i is right with probability p_i = ((M−1) s_i + 1)/M
(binary: (1 + s_i)/2) and otherwise answers one of the M − 1 wrong classes uniformly.

Assignments (who labels which task) are given as two aligned integer arrays (worker, task):
- :func:`clique_assignment`: every worker labels every task (paper Table 1, Fig. 1 G1);
- :func:`edge_assignment`: each task labelled by the two endpoints of one edge, edges used
  round-robin (Fig. 1 G2/G3 reading of spec §5.1) — with :func:`ring_edges`,
  :func:`star_triangle_edges`, :func:`grid_edges`, :func:`random_graph_edges`;
- :func:`random_assignment`: k distinct workers per task, optionally with unequal sampling weights.

Ids: workers ``w0000…``, tasks ``t0000000…`` (zero-padded, so sorted-id order = generation order);
labels are the class indices ``"0" … "M−1"`` unless ``classes`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp


@dataclass(frozen=True)
class SyntheticLabels:
    """A synthetic label set with its ground truth.

    Attributes
    ----------
    labels : pandas.DataFrame
        task, worker, label (strings), one row per (task, worker).
    truth : pandas.DataFrame
        task, label (every task).
    skills : numpy.ndarray
        True s_i, aligned with ``workers``.
    workers : numpy.ndarray
        Worker ids (sorted order = index order).
    classes : list of str
        The M labels.
    """

    labels: pd.DataFrame
    truth: pd.DataFrame
    skills: np.ndarray
    workers: np.ndarray
    classes: list[str]

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def accuracy(self) -> np.ndarray:
        """p_i = ((M−1) s_i + 1)/M."""
        m = self.n_classes
        return ((m - 1) * self.skills + 1) / m


def worker_ids(n: int) -> np.ndarray:
    """Zero-padded worker ids ``w0000``, … (sorted order = index order)."""
    width = max(4, len(str(max(n - 1, 0))))
    return np.array([f"w{i:0{width}d}" for i in range(n)], dtype=object)


def task_ids(n: int) -> np.ndarray:
    """Zero-padded task ids ``t0000000``, …"""
    width = max(7, len(str(max(n - 1, 0))))
    return np.char.add("t", np.char.zfill(np.arange(n).astype(str), width)).astype(object)


# --------------------------------------------------------------------------------------------
# Graphs and assignments
# --------------------------------------------------------------------------------------------
def ring_edges(n: int) -> np.ndarray:
    """Cycle C_n: edges (i, i+1 mod n). Odd n ⇒ non-bipartite."""
    i = np.arange(n)
    return np.column_stack([i, (i + 1) % n])


def path_edges(n: int) -> np.ndarray:
    """Path P_n (bipartite)."""
    i = np.arange(n - 1)
    return np.column_stack([i, i + 1])


def star_edges(n: int) -> np.ndarray:
    """Star: hub 0 joined to leaves 1..n−1 (bipartite)."""
    return np.column_stack([np.zeros(n - 1, dtype=np.int64), np.arange(1, n)])


def star_triangle_edges(n: int) -> np.ndarray:
    """Star (hub 0, leaves 1..n−1) plus the leaf–leaf edge (1, 2): one odd triangle (Fig. 2 G2)."""
    return np.vstack([star_edges(n), [[1, 2]]])


def complete_edges(n: int) -> np.ndarray:
    """K_n."""
    i, j = np.triu_indices(n, k=1)
    return np.column_stack([i, j])


def grid_edges(rows: int, cols: int, extra: list[tuple[int, int]] | None = None) -> np.ndarray:
    """rows×cols grid graph (node r·cols + c), bipartite, plus optional extra edges."""
    idx = np.arange(rows * cols).reshape(rows, cols)
    h = np.column_stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()])
    v = np.column_stack([idx[:-1, :].ravel(), idx[1:, :].ravel()])
    e = np.vstack([h, v])
    if extra:
        e = np.vstack([e, np.asarray(extra, dtype=np.int64)])
    return e


def random_graph_edges(n: int, p: float, seed: int = 0) -> np.ndarray:
    """Erdős–Rényi G(n, p) edge list (i < j)."""
    rng = np.random.default_rng(seed)
    i, j = np.triu_indices(n, k=1)
    keep = rng.random(i.size) < p
    return np.column_stack([i[keep], j[keep]])


def adjacency(edges: np.ndarray, n: int, weights: np.ndarray | None = None) -> sp.csr_matrix:
    """Symmetric n×n CSR adjacency of an undirected edge list."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    w = np.ones(len(e)) if weights is None else np.asarray(weights, dtype=np.float64)
    rows = np.concatenate([e[:, 0], e[:, 1]])
    cols = np.concatenate([e[:, 1], e[:, 0]])
    a = sp.csr_matrix((np.concatenate([w, w]), (rows, cols)), shape=(n, n))
    a.sum_duplicates()
    a.sort_indices()
    return a


def clique_assignment(n_workers: int, n_tasks: int) -> tuple[np.ndarray, np.ndarray]:
    """Every worker labels every task."""
    w, t = np.meshgrid(np.arange(n_workers), np.arange(n_tasks), indexing="ij")
    return w.ravel(), t.ravel()


def edge_assignment(edges: np.ndarray, n_tasks: int) -> tuple[np.ndarray, np.ndarray]:
    """Task t is labelled by both endpoints of edge t mod |E| (round-robin, spec §5.1 reading)."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    t = np.arange(n_tasks)
    pick = e[t % len(e)]
    return np.concatenate([pick[:, 0], pick[:, 1]]), np.concatenate([t, t])


def random_assignment(
    n_workers: int,
    n_tasks: int,
    per_task: int,
    seed: int = 0,
    worker_weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``per_task`` distinct workers per task.

    Uniform: a uniformly random ``per_task``-subset per task. With ``worker_weights``: workers are
    drawn i.i.d. with probability ∝ weight and tasks whose draw repeats a worker are redrawn
    (rejection), i.e. the weighted draw conditioned on distinctness. Vectorised over tasks.
    """
    if per_task > n_workers:
        raise ValueError(f"per_task={per_task} exceeds n_workers={n_workers}")
    rng = np.random.default_rng(seed)
    p = None
    if worker_weights is not None:
        p = np.asarray(worker_weights, dtype=np.float64)
        p = p / p.sum()
    out = np.empty((n_tasks, per_task), dtype=np.int64)
    todo = np.arange(n_tasks)
    while todo.size:
        draw = rng.choice(n_workers, size=(todo.size, per_task), p=p)
        srt = np.sort(draw, axis=1)
        ok = np.all(srt[:, 1:] != srt[:, :-1], axis=1) if per_task > 1 else np.ones(todo.size, bool)
        out[todo[ok]] = draw[ok]
        todo = todo[~ok]
    return out.ravel(), np.repeat(np.arange(n_tasks), per_task)


# --------------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------------
def one_coin_labels(
    skills: np.ndarray,
    worker_idx: np.ndarray,
    task_idx: np.ndarray,
    n_classes: int = 2,
    seed: int = 0,
    n_tasks: int | None = None,
    classes: list[str] | None = None,
) -> SyntheticLabels:
    """Draw one-coin labels for a given assignment (spec §1.1–1.2).

    Truth g_t uniform on the M classes; Y_it = g_t with probability p_i = ((M−1) s_i + 1)/M, else
    uniform over the other M − 1 classes.

    Parameters
    ----------
    skills : numpy.ndarray
        s_i ∈ [−1/(M−1), 1] per worker.
    worker_idx, task_idx : numpy.ndarray
        The assignment (distinct pairs).
    n_classes : int
        M ≥ 2.
    seed : int
    n_tasks : int, optional
        Number of tasks (default max task_idx + 1); tasks without labels still get a truth.
    classes : list of str, optional
        Label names (default ``"0" … "M−1"``).
    """
    s = np.asarray(skills, dtype=np.float64)
    m = int(n_classes)
    if m < 2:
        raise ValueError("n_classes must be >= 2")
    if np.any(s < -1.0 / (m - 1) - 1e-12) or np.any(s > 1 + 1e-12):
        raise ValueError(f"skills must lie in [-1/(M-1), 1] = [{-1.0 / (m - 1):.3g}, 1]")
    wi = np.asarray(worker_idx, dtype=np.int64)
    ti = np.asarray(task_idx, dtype=np.int64)
    nt = int(ti.max()) + 1 if n_tasks is None else int(n_tasks)
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, m, size=nt)
    p = ((m - 1) * s + 1) / m
    right = rng.random(wi.size) < p[wi]
    wrong = (truth[ti] + 1 + rng.integers(0, m - 1, size=wi.size)) % m
    y = np.where(right, truth[ti], wrong)
    names = np.asarray([str(i) for i in range(m)] if classes is None else [str(c) for c in classes], dtype=object)
    if names.size != m:
        raise ValueError(f"classes has {names.size} names for {m} classes")
    wids, tids = worker_ids(s.size), task_ids(nt)
    labels = pd.DataFrame({"task": tids[ti], "worker": wids[wi], "label": names[y]})
    truth_df = pd.DataFrame({"task": tids, "label": names[truth]})
    return SyntheticLabels(labels=labels, truth=truth_df, skills=s, workers=wids, classes=names.tolist())


def rank_one_moments(edges: np.ndarray, skills: np.ndarray, noise: float = 0.0, seed: int = 0) -> sp.csr_matrix:
    """C_ij = s_i s_j + Δ_ij on the edges, Δ symmetric with Δ_ij ~ noise · U[−1/2, 1/2] (spec §5.7).

    Returns a symmetric CSR matrix with zero diagonal (the paper's Figs. 4–5 / AT-O1–O2 setting).
    """
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    s = np.asarray(skills, dtype=np.float64)
    rng = np.random.default_rng(seed)
    delta = noise * (rng.random(len(e)) - 0.5)
    vals = s[e[:, 0]] * s[e[:, 1]] + delta
    return adjacency(e, s.size, vals)


def beta_skills(alpha: float, beta: float, n_workers: int, seed: int = 0) -> np.ndarray:
    """s_i = 2 Beta(α, β) − 1 (spec §5.2 reading of Table 1)."""
    return 2.0 * np.random.default_rng(seed).beta(alpha, beta, size=n_workers) - 1.0
