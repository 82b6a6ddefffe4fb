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
