"""Seeded synthetic label generators with ground truth (tests, demos, benchmarks).

docs/methods/skills.md §1.1–1.2 (one-coin model), §5 (the paper's experiments) and §6 (acceptance
tests): truth uniform over M classes; worker i is right with probability p_i = ((M−1) s_i + 1)/M
(binary: (1 + s_i)/2) and otherwise answers one of the M − 1 wrong classes uniformly.

Assignments (who labels which task) are given as two aligned integer arrays (worker, task):
- :func:`clique_assignment`: every worker labels every task (paper Table 1, Fig. 1 G1);
- :func:`edge_assignment`: each task labelled by the two endpoints of one edge, edges used
  round-robin (Fig. 1 G2/G3 reading of docs/methods/skills.md §5.1) — with :func:`ring_edges`,
  :func:`star_triangle_edges`, :func:`grid_edges`, :func:`random_graph_edges`;
- :func:`random_assignment`: k distinct workers per task, optionally with unequal sampling weights.

Moment matrices with injected noise (no labels behind them): :func:`rank_one_moments` (Figs. 4–5)
and :func:`star_triangle_injected` (Table 2, with separate evaluation labels).

Beyond the one-coin model (docs/methods/skills.md §5.8): :func:`crowd_labels` draws a crowd of a
:class:`CrowdConfig` (full confusion matrices, spammers, adversaries, 2–5 classes, skewed class
priors, Zipf worker activity) and :func:`crowd_family` a seeded family of such crowds, on which the
default of ``fit_skills`` was chosen and is tested (§7.3).

Ids: workers ``w0000…``, tasks ``t0000000…`` (zero-padded, so sorted-id order = generation order);
labels are the class indices ``"0" … "M−1"`` unless ``classes`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

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
    """Task t is labelled by both endpoints of edge t mod |E| (round-robin, docs/methods/skills.md §5.1 reading)."""
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
    """Draw one-coin labels for a given assignment (docs/methods/skills.md §1.1–1.2).

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
    """C_ij = s_i s_j + Δ_ij on the edges, Δ symmetric with Δ_ij ~ noise · U[−1/2, 1/2] (docs/methods/skills.md §5.7).

    Returns a symmetric CSR matrix with zero diagonal (the paper's Figs. 4–5 / AT-O1–O2 setting).
    """
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    s = np.asarray(skills, dtype=np.float64)
    rng = np.random.default_rng(seed)
    delta = noise * (rng.random(len(e)) - 0.5)
    vals = s[e[:, 0]] * s[e[:, 1]] + delta
    return adjacency(e, s.size, vals)


def beta_skills(alpha: float, beta: float, n_workers: int, seed: int = 0) -> np.ndarray:
    """s_i = 2 Beta(α, β) − 1 (docs/methods/skills.md §5.2 reading of Table 1)."""
    return 2.0 * np.random.default_rng(seed).beta(alpha, beta, size=n_workers) - 1.0


@dataclass(frozen=True)
class InjectedNoiseInstance:
    """A moment matrix with injected noise plus evaluation labels drawn from the same skills.

    Attributes
    ----------
    data : SyntheticLabels
        Evaluation labels, their truth and the true skills (worker i = ``data.workers[i]``).
    c_hat : scipy.sparse.csr_matrix
        C_ij = s_i s_j + ξ_ij on the edges of ``support`` (symmetric, zero diagonal, same
        canonical sparsity pattern as ``support``, so the two ``data`` arrays are aligned).
    support : scipy.sparse.csr_matrix
        Unit weight on every edge of the interaction graph.
    edges : numpy.ndarray
        The undirected edge list (|E| × 2).
    """

    data: SyntheticLabels
    c_hat: sp.csr_matrix
    support: sp.csr_matrix
    edges: np.ndarray


def star_triangle_injected(
    n_workers: int,
    seed: int = 0,
    *,
    n_tasks: int = 3000,
    per_task: int = 12,
    half_width: float = 0.2,
    skills: np.ndarray | None = None,
) -> InjectedNoiseInstance:
    """Paper Table 2 (docs/methods/skills.md §5.3): star plus one triangle, noise injected into C.

    Graph: :func:`star_triangle_edges` (hub 0, leaves 1…W−1, leaf–leaf edge (1, 2)). Moments:
    C_ij = s_i s_j + ξ_ij on the edges, ξ_ij ~ U[−h, h] i.i.d. per undirected edge (one draw for
    C_ij = C_ji), h = ``half_width`` (paper: 0.2), via :func:`rank_one_moments`.

    Our reading of what the paper leaves open (docs/methods/skills.md §5.3; chosen by simulation, see
    ``benchmarks/results/skills.md``):

    - skills: the evenly spaced grid over [−0.3, 0.8] of docs/methods/skills.md §5.1, listed from the top,
      s = linspace(0.8, −0.3, W), so the hub (worker 0) is the most skilled worker and workers 1, 2,
      which close the triangle, the next two. (Listed from the bottom, the hub would have s = −0.3 and
      every leaf estimate s_j ≈ C_0j/s_0 would carry noise up to ±0.2/0.3.)
    - evaluation labels (not stated in the paper): ``n_tasks`` tasks, each labelled by ``per_task``
      distinct uniformly random workers (:func:`random_assignment`), one-coin binary labels
      (:func:`one_coin_labels`). With 12 labels per task the Bayes error (MAP vote with the true
      skills) is 0.052–0.061 for W = 21…91 (50 runs), the paper's level (0.0425–0.0634); it stays roughly
      constant in W because the number of labels per task does not grow with W.

    The labels are independent of ``c_hat``: the skills are to be fitted from ``c_hat`` on
    ``support`` and then used to vote on the labels. Under this reading PGD (library defaults) is
    +0.016 to +0.018 above the Bayes error, not within the issue's 0.01 (paper: ≤ +0.0044).

    Parameters
    ----------
    n_workers : int
        W ≥ 3.
    seed : int
        One seed for the noise, the assignment and the labels (independent streams).
    n_tasks : int
        Evaluation tasks T.
    per_task : int
        Distinct workers per evaluation task (≤ W).
    half_width : float
        h in ξ ~ U[−h, h].
    skills : numpy.ndarray, optional
        Override the grid (length W; worker 0 is the hub).

    Returns
    -------
    InjectedNoiseInstance
    """
    if n_workers < 3:
        raise ValueError(f"a star plus a triangle needs n_workers >= 3, got {n_workers}")
    s = np.linspace(0.8, -0.3, n_workers) if skills is None else np.asarray(skills, dtype=np.float64)
    if s.shape != (n_workers,):
        raise ValueError(f"skills must have length n_workers={n_workers}, got shape {s.shape}")
    noise_seed, assign_seed, label_seed = (int(v) for v in np.random.SeedSequence(seed).generate_state(3))
    edges = star_triangle_edges(n_workers)
    c_hat = rank_one_moments(edges, s, noise=2.0 * half_width, seed=noise_seed)
    support = adjacency(edges, n_workers)
    wi, ti = random_assignment(n_workers, n_tasks, per_task, seed=assign_seed)
    data = one_coin_labels(s, wi, ti, 2, seed=label_seed, n_tasks=n_tasks)
    return InjectedNoiseInstance(data=data, c_hat=c_hat, support=support, edges=edges)


# --------------------------------------------------------------------------------------------
# Dawid–Skene crowds: full confusion matrices, spammers, adversaries (docs/methods/skills.md §5.8)
# --------------------------------------------------------------------------------------------
WorkerKind = Literal["onecoin", "confusion"]

#: codes of :attr:`CrowdLabels.kind`
GOOD, SPAMMER, ADVERSARY = 0, 1, 2


@dataclass(frozen=True)
class CrowdConfig:
    """One crowd of the Dawid–Skene family (:func:`crowd_labels`, docs/methods/skills.md §5.8).

    Attributes
    ----------
    n_classes : int
        M ≥ 2.
    n_tasks : int
        T.
    per_task : int
        Distinct workers per task (capped at ``n_workers``).
    n_workers : int
        W.
    good : {"onecoin", "confusion"}
        The honest workers: ``onecoin`` are right with one probability a_i ~ U[1/M + 0.1, 0.95] and
        otherwise uniform; ``confusion`` have a per-class accuracy a_il ~ U[max(1/M, 0.35), 0.98] and
        put the rest on the wrong classes by Dir(1/2) weights (structured, asymmetric errors).
    spammers : float
        Share of workers whose answer ignores the truth (uniform, or a Dir(0.3) favourite-label law).
    adversaries : float
        Share of workers who apply a fixed derangement of the classes with probability a ~ U[0.6, 0.9].
    prior : {"uniform", "skewed"}
        Class prior: uniform, or q_l ∝ 0.35^l + 0.02.
    activity : {"uniform", "zipf"}
        Who labels a task: uniformly, or with weight ∝ 1/(i + 1)^1.1 (a few very active workers, a long
        tail of workers with a handful of labels).
    seed : int
    """

    n_classes: int
    n_tasks: int
    per_task: int
    n_workers: int
    good: WorkerKind
    spammers: float
    adversaries: float
    prior: Literal["uniform", "skewed"]
    activity: Literal["uniform", "zipf"]
    seed: int

    @property
    def name(self) -> str:
        """Short id, e.g. ``M3-T1000-r5-W50-confusion-s0.2-a0-skewed-zipf-#7``."""
        return (
            f"M{self.n_classes}-T{self.n_tasks}-r{self.per_task}-W{self.n_workers}-{self.good}"
            f"-s{self.spammers:g}-a{self.adversaries:g}-{self.prior}-{self.activity}-#{self.seed}"
        )

    @property
    def n_labels(self) -> int:
        return self.n_tasks * min(self.per_task, self.n_workers)


@dataclass(frozen=True)
class CrowdLabels:
    """Labels of a :class:`CrowdConfig` with everything that generated them.

    Attributes
    ----------
    labels : pandas.DataFrame
        task, worker, label (strings), one row per (task, worker).
    truth : pandas.DataFrame
        task, label (every task).
    confusion : numpy.ndarray
        W×M×M, confusion[i, l, m] = P(worker i answers m | true class l).
    class_prior : numpy.ndarray
        q (length M).
    kind : numpy.ndarray
        Per worker: :data:`GOOD`, :data:`SPAMMER` or :data:`ADVERSARY`.
    workers : numpy.ndarray
        Worker ids (sorted order = index order; a worker may have no label).
    classes : list of str
        ``"0" … "M−1"``.
    """

    labels: pd.DataFrame
    truth: pd.DataFrame
    confusion: np.ndarray
    class_prior: np.ndarray
    kind: np.ndarray
    workers: np.ndarray
    classes: list[str]


def crowd_class_prior(config: CrowdConfig) -> np.ndarray:
    """q of the configuration (uniform, or ∝ 0.35^l + 0.02)."""
    m = config.n_classes
    if config.prior == "uniform":
        return np.full(m, 1.0 / m)
    v = 0.35 ** np.arange(m) + 0.02
    return np.asarray(v / v.sum())


def crowd_confusions(config: CrowdConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Confusion matrices (W×M×M) and kinds of the workers of ``config`` (see :class:`CrowdConfig`)."""
    m, w = config.n_classes, config.n_workers
    good = 1.0 - config.spammers - config.adversaries
    if good < 0:
        raise ValueError("spammers + adversaries must be <= 1")
    kind = rng.choice(3, size=w, p=[good, config.spammers, config.adversaries])
    pi = np.empty((w, m, m))
    for i in range(w):
        if kind[i] == GOOD and config.good == "onecoin":
            a = rng.uniform(1.0 / m + 0.1, 0.95)
            pi[i] = (1.0 - a) / (m - 1)
            np.fill_diagonal(pi[i], a)
        elif kind[i] == GOOD:
            for true in range(m):
                a = rng.uniform(max(1.0 / m, 0.35), 0.98)
                wrong = rng.dirichlet(np.full(m - 1, 0.5)) * (1.0 - a)
                pi[i, true] = np.insert(wrong, true, a)
        elif kind[i] == SPAMMER:
            row = np.full(m, 1.0 / m) if rng.random() < 0.5 else rng.dirichlet(np.full(m, 0.3))
            pi[i] = row[None, :]
        else:
            target = np.roll(np.arange(m), rng.integers(1, m))  # a derangement: never the true class
            a = rng.uniform(0.6, 0.9)
            pi[i] = (1.0 - a) / (m - 1)
            pi[i, np.arange(m), target] = a
    return pi, kind


def crowd_labels(config: CrowdConfig, *, chunk_cells: int = 2_000_000) -> CrowdLabels:
    """Draw the labels of one :class:`CrowdConfig` (seeded by ``config.seed``).

    Truth g_t ~ q; each task gets ``per_task`` distinct workers drawn without replacement with
    probability ∝ activity (Gumbel top-k, ``chunk_cells`` Gumbel draws at a time); worker i answers m
    with probability confusion[i, g_t, m].
    """
    rng = np.random.default_rng(config.seed)
    m, t, w = config.n_classes, config.n_tasks, config.n_workers
    r = min(config.per_task, w)
    q = crowd_class_prior(config)
    truth = rng.choice(m, size=t, p=q)
    pi, kind = crowd_confusions(config, rng)
    act = np.ones(w) if config.activity == "uniform" else 1.0 / np.arange(1, w + 1) ** 1.1
    log_act = np.log(act / act.sum())
    rows = max(1, chunk_cells // w)
    picks = []
    for start in range(0, t, rows):
        keys = log_act[None, :] + rng.gumbel(size=(min(rows, t - start), w))
        picks.append(np.argpartition(-keys, r - 1, axis=1)[:, :r])
    worker = np.vstack(picks).ravel()
    task = np.repeat(np.arange(t), r)
    cum = np.cumsum(pi[worker, truth[task]], axis=1)
    answer = np.minimum((rng.random(task.size)[:, None] > cum).sum(axis=1), m - 1)
    names = np.array([str(c) for c in range(m)], dtype=object)
    wids, tids = worker_ids(w), task_ids(t)
    labels = pd.DataFrame({"task": tids[task], "worker": wids[worker], "label": names[answer]})
    truth_df = pd.DataFrame({"task": tids, "label": names[truth]})
    return CrowdLabels(
        labels=labels, truth=truth_df, confusion=pi, class_prior=q, kind=kind, workers=wids, classes=names.tolist()
    )


def crowd_family(
    n: int = 40, seed: int = 2024, *, max_labels: int = 100_000, corners: bool = True
) -> list[CrowdConfig]:
    """A seeded family of crowds (docs/methods/skills.md §5.8): ``n`` random configurations plus, with
    ``corners``, eight fixed corner cases.

    Random draws: M ∈ {2, 3, 4, 5}; labels per task r ∈ {2, 3, 5, 10}; T ∈ {200, 1000, 3000, 10000},
    halved until T·r ≤ ``max_labels``; W ∈ {15, 50, 200, 800} (at least r + 1); honest workers
    one-coin or confusion; spammer share ∈ {0, 0.2, 0.4}; adversary share 0, 0, 0.1 or 0.2; uniform or
    skewed classes; uniform or Zipf activity; seeds 1000, 1001, …. Corners: a tiny crowd (30 tasks), a
    dense one (20 workers, 10 per task, 10^5 labels), a very sparse one (5000 workers, Zipf activity,
    10^5 labels), two labels per task, half spammers, 30 % adversaries, skewed and sparse
    (gal_adultcontent2-like), binary biased workers. The family of seed 2024 is the design family of
    the default's choice, seed 7 the confirmation family drawn after it (§7.3).
    """
    rng = np.random.default_rng(seed)
    out: list[CrowdConfig] = []
    for k in range(n):
        m = int(rng.choice([2, 3, 4, 5]))
        r = int(rng.choice([2, 3, 5, 10]))
        t = int(rng.choice([200, 1000, 3000, 10000]))
        while t * r > max_labels and t > 1:
            t //= 2
        w = max(int(rng.choice([15, 50, 200, 800])), r + 1)
        good = cast(WorkerKind, str(rng.choice(["onecoin", "confusion"])))
        spam = float(rng.choice([0, 0.2, 0.4]))
        adv = float(rng.choice([0, 0, 0.1, 0.2]))
        prior = cast(Literal["uniform", "skewed"], str(rng.choice(["uniform", "skewed"])))
        activity = cast(Literal["uniform", "zipf"], str(rng.choice(["uniform", "zipf"])))
        out.append(CrowdConfig(m, t, r, w, good, spam, adv, prior, activity, 1000 + k))
    if corners:
        out += [
            CrowdConfig(2, 30, 3, 10, "onecoin", 0.0, 0.0, "uniform", "uniform", 1),
            CrowdConfig(2, 10_000, 10, 20, "onecoin", 0.0, 0.0, "uniform", "uniform", 2),
            CrowdConfig(3, 20_000, 5, 5000, "confusion", 0.2, 0.0, "skewed", "zipf", 3),
            CrowdConfig(2, 2000, 2, 40, "onecoin", 0.0, 0.0, "uniform", "uniform", 4),
            CrowdConfig(5, 2000, 5, 50, "confusion", 0.5, 0.0, "skewed", "uniform", 5),
            CrowdConfig(2, 2000, 5, 50, "onecoin", 0.0, 0.3, "uniform", "uniform", 6),
            CrowdConfig(4, 1000, 3, 300, "confusion", 0.0, 0.0, "skewed", "zipf", 7),
            CrowdConfig(2, 1000, 5, 30, "confusion", 0.0, 0.0, "skewed", "uniform", 8),
        ]
    return out
