"""Seeded synthetic instances of the assignment job (the paper's experiments), with their ground truth.

- :func:`synthetic_assignment`: the crowdsourcing instance of the paper's Section 5.2 (qualities
  ``Q ~ U[q_range]``, caps from a ratio ``ρ``, budget ``⌊0.8·min(n·max_tasks, m·max_workers)⌋``);
- :func:`synthetic_tvcs`: the sparse regression / classification instance of Section 5.1 on a
  ``side × side`` grid (rows = view 1, columns = view 2), truth ``w̄ = P_Ω(v)``;
- :func:`grid_views`: the row and column groups of a square grid.

See docs/methods/assignment.md §4.4 and §5.7.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from crowdflow.assignment import TVCSConstraints, TVCSProjector

# random stream tag of the crowdsourcing generator: crowdflow.assignment.accuracy keeps the other
# tags of the job (random baseline 12, SIHT 13, evaluation 14), so equal seeds never correlate them
_TAG_SYNTH = 11


def synthetic_assignment(
    n_workers: int,
    n_tasks: int,
    rho: float,
    seed: int = 0,
    q_range: tuple[float, float] = (0.5, 0.9),
    budget_fraction: float = 0.8,
) -> tuple[pd.DataFrame, int, int, int]:
    """Synthetic crowdsourcing instance of the paper's Section 5.2 (docs/methods/assignment.md §5.7).

    ``Q ~ U[q_range]`` i.i.d. for every worker × task pair, priors 0.5,
    ``max_tasks = ⌊ρ m⌋`` per worker, ``max_workers = ⌊ρ n⌋`` per task and
    ``budget = ⌊0.8·min(n·max_tasks, m·max_workers)⌋``.

    Returns
    -------
    (candidates, worker_cap, task_cap, budget)
        ``candidates`` has columns ``task, worker, quality, prior``; ids ``t0000…``/``w000…``.
    """
    rng = np.random.default_rng([_TAG_SYNTH, int(seed)])
    Q = rng.uniform(q_range[0], q_range[1], size=(n_workers, n_tasks))
    wi, tj = np.meshgrid(np.arange(n_workers), np.arange(n_tasks), indexing="ij")
    wpad, tpad = len(str(max(n_workers - 1, 0))), len(str(max(n_tasks - 1, 0)))
    cand = pd.DataFrame(
        {
            "task": pd.Series([f"t{j:0{tpad}d}" for j in tj.ravel()], dtype=object),
            "worker": pd.Series([f"w{i:0{wpad}d}" for i in wi.ravel()], dtype=object),
            "quality": Q.ravel(),
            "prior": 0.5,
        }
    )
    wcap = math.floor(rho * n_tasks)
    tcap = math.floor(rho * n_workers)
    budget = math.floor(budget_fraction * min(n_workers * wcap, n_tasks * tcap))
    return cand, wcap, tcap, budget


@dataclass(frozen=True)
class SyntheticTVCS:
    """Synthetic instance of the paper's Section 5.1: ``X`` (n × p), ``y``, truth ``w_true``, constraints.

    ``X_test, y_test`` is an independent test set (classification error, n_test = 1000 [C]); see
    docs/methods/assignment.md §4.4.
    """

    X: np.ndarray
    y: np.ndarray
    w_true: np.ndarray
    constraints: TVCSConstraints
    X_test: np.ndarray
    y_test: np.ndarray
    task: str


def grid_views(side: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column group index of every entry of a ``side × side`` matrix (row-major)."""
    r, c = np.divmod(np.arange(side * side), side)
    return r.astype(np.int64), c.astype(np.int64)


def synthetic_tvcs(
    n: int,
    *,
    side: int = 20,
    task: Literal["regression", "classification"] = "regression",
    noise: float = 0.01,
    n_test: int = 1000,
    seed: int = 0,
) -> SyntheticTVCS:
    """The paper's Section 5.1 (docs/methods/assignment.md §4.4).

    ``w`` is a ``side × side`` matrix (p = side²), view 1 = rows, view 2 = columns; every row/column
    cap ~ U{1..side}; total = ⌊0.8·min(Σ row caps, Σ col caps)⌋; ``w̄ = P_Ω(v)`` for ``v ~ N(0, I)``
    (support values are the N(0,1) entries of ``v``); features i.i.d. N(0,1); regression
    ``y = ⟨X_i, w̄⟩ + N(0, noise²)``, classification ``y = sign⟨X_i, w̄⟩``.
    """
    if task not in ("regression", "classification"):
        raise ValueError(f"task must be 'regression' or 'classification', got {task!r}")
    rng = np.random.default_rng([51, int(seed)])
    p = side * side
    rows, cols = grid_views(side)
    c1 = rng.integers(1, side + 1, size=side)
    c2 = rng.integers(1, side + 1, size=side)
    total = math.floor(0.8 * min(int(c1.sum()), int(c2.sum())))
    cons = TVCSConstraints.build(p, rows, cols, c1, c2, total)
    v = rng.standard_normal(p)
    w_true = TVCSProjector(cons).project(v)
    X = rng.standard_normal((n, p))
    Xt = rng.standard_normal((n_test, p))
    if task == "regression":
        y = X @ w_true + noise * rng.standard_normal(n)
        yt = Xt @ w_true + noise * rng.standard_normal(n_test)
    else:
        y = np.where(X @ w_true >= 0, 1.0, -1.0)
        yt = np.where(Xt @ w_true >= 0, 1.0, -1.0)
    return SyntheticTVCS(X, y, w_true, cons, Xt, yt, task)


#: score laws of :func:`candidate_family` (docs/methods/assignment.md §8.3)
SCORE_LAWS: tuple[str, ...] = ("rank1", "rank1+0.01", "rank1+0.05", "rank1+0.2", "pareto", "ties", "uniform")


@dataclass(frozen=True)
class CandidateDraw:
    """One seeded assignment instance of the benchmark family (docs/methods/assignment.md §8.3).

    ``worker[i]``, ``task[i]`` and ``score[i]`` describe candidate ``i``; ``worker_caps`` and
    ``task_caps`` hold one cap per worker and per task; ``budget`` is ``None`` when it does not bind
    (no limit). ``name`` is ``law-lists-caps-budget-size``.
    """

    name: str
    law: str
    lists: str
    caps: str
    budget_mode: str
    worker: np.ndarray
    task: np.ndarray
    score: np.ndarray
    worker_caps: np.ndarray
    task_caps: np.ndarray
    budget: int | None

    @property
    def p(self) -> int:
        return int(self.score.shape[0])

    def constraints(self) -> TVCSConstraints:
        """The selection structure: view 1 = workers, view 2 = tasks, total = the budget."""
        return TVCSConstraints.build(self.p, self.worker, self.task, self.worker_caps, self.task_caps, self.budget)

    def candidates(self) -> pd.DataFrame:
        """The ``assign_tasks`` candidates table (``task, worker, score``; ids ``t…``/``w…``)."""
        return pd.DataFrame(
            {
                "task": pd.Series(self.task).map("t{}".format).astype(object),
                "worker": pd.Series(self.worker).map("w{}".format).astype(object),
                "score": self.score,
            }
        )


def candidate_draw(
    size: int,
    law: str = "rank1+0.05",
    lists: Literal["sparse", "dense"] = "sparse",
    caps: Literal["tight", "loose"] = "tight",
    budget: Literal["binding", "free"] = "binding",
    seed: int = 0,
    list_length: int = 20,
) -> CandidateDraw:
    """One instance of about ``size`` candidates (docs/methods/assignment.md §8.3).

    - lists: ``sparse`` = every task lists ``list_length`` workers drawn without replacement from
      ``max(list_length, size/200)`` workers; ``dense`` = every worker × every task on a grid of
      ``≈ √size/2.5`` workers;
    - law: worker skill ``U[0.5, 1]`` × task uncertainty ``U[0, 1]`` (``rank1``), plus
      ``σ·U[0, 1]`` (``rank1+σ``); Pareto ``α = 1.2`` (``pareto``); integers 1–4 (``ties``);
      ``U[0, 1]`` (``uniform``);
    - caps: task cap = ``0.15`` (tight) or ``0.5`` (loose) of the list length; worker cap = ``0.75``
      (tight) or ``2`` (loose) times a worker's fair share ``n_tasks·task_cap/n_workers``;
    - budget: ``binding`` = ⅛ of the candidates (the issue #19 reproducer), ``free`` = no limit.
    """
    if law not in SCORE_LAWS:
        raise ValueError(f"unknown law {law!r}; expected one of {SCORE_LAWS}")
    rng = np.random.default_rng([61, int(size), SCORE_LAWS.index(law), int(seed), lists == "dense", caps == "tight"])
    if lists == "sparse":
        d = int(list_length)
        n_t = max(1, size // d)
        n_w = max(d, size // 200)
        # d distinct workers per task: the first d of a random permutation key per row, drawn in blocks
        task = np.repeat(np.arange(n_t, dtype=np.int64), d)
        worker = np.empty(n_t * d, np.int64)
        for lo in range(0, n_t, 4096):
            hi = min(n_t, lo + 4096)
            keys = rng.random((hi - lo, n_w))
            worker[lo * d : hi * d] = np.argpartition(keys, d - 1, axis=1)[:, :d].ravel()
        per_task = d
    else:
        n_w = max(2, round(math.sqrt(size) / 2.5))
        n_t = max(1, size // n_w)
        worker, task = (a.ravel().astype(np.int64) for a in np.meshgrid(np.arange(n_w), np.arange(n_t), indexing="ij"))
        per_task = n_w
    p = worker.shape[0]
    if law.startswith("rank1"):
        skill = rng.uniform(0.5, 1.0, n_w)
        unc = rng.uniform(0.0, 1.0, n_t)
        score = skill[worker] * unc[task]
        if "+" in law:
            score = score + float(law.split("+")[1]) * rng.uniform(0.0, 1.0, p)
    elif law == "pareto":
        score = rng.pareto(1.2, p) + 1e-3
    elif law == "ties":
        score = rng.integers(1, 5, p).astype(np.float64)
    else:
        score = rng.uniform(0.0, 1.0, p)
    task_cap = max(1, math.floor((0.15 if caps == "tight" else 0.5) * per_task))
    fair = n_t * task_cap / n_w
    worker_cap = max(1, math.floor((0.75 if caps == "tight" else 2.0) * fair))
    tot = p // 8 if budget == "binding" else None
    name = f"{law}-{lists}-{caps}-{budget}-{p:.0e}".replace("e+0", "e")
    return CandidateDraw(
        name,
        law,
        lists,
        caps,
        budget,
        worker,
        task,
        score,
        np.full(n_w, worker_cap, np.int64),
        np.full(n_t, task_cap, np.int64),
        tot,
    )


def candidate_family(size: int, seed: int = 0) -> list[CandidateDraw]:
    """The benchmark family at one size: every score law × sparse and dense lists (14 draws).

    Caps and budget rotate over the four (tight/loose, binding/free) combinations: every law meets
    both kinds of caps and of budget (its two draws are (tight, binding) + (loose, free) or
    (tight, free) + (loose, binding)), and every combination appears with both list shapes
    (docs/methods/assignment.md §8.3).
    """
    combos: list[tuple[Literal["tight", "loose"], Literal["binding", "free"]]] = [
        ("tight", "binding"),
        ("loose", "free"),
        ("tight", "free"),
        ("loose", "binding"),
    ]
    out = []
    for i, law in enumerate(SCORE_LAWS):
        for j, lists in enumerate(("sparse", "dense")):
            caps, budget = combos[2 * (i % 2) + (j + i // 2) % 2]
            out.append(candidate_draw(size, law, lists, caps, budget, seed))  # type: ignore[arg-type]
    return out
