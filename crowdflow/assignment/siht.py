"""Assignment that maximises the expected accuracy of Bayes-weighted voting: stochastic IHT and baselines.

:func:`assign_siht` ascends the sigmoid-smoothed expected accuracy ``Ẽ(W)`` with minibatch
corrected gradients and projects every iterate onto the TVCS set (worker loads = view 1, task caps
= view 2, budget = total), in the box mode ``W ∈ [0, 1]`` or the paper's plain mode.
:func:`assign_baseline` gives the Q-LP (max ``Σ Q_ij X_ij`` under the same caps) and a random
feasible assignment. Both are evaluated by Monte-Carlo MAP accuracy on independent samples.

See docs/methods/assignment.md §5.3.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np
import pandas as pd

from crowdflow.assignment.accuracy import (
    _Q_CLIP,
    _TAG_RANDOM,
    _TAG_SIHT,
    _rng,
    map_accuracy_mc,
    sample_votes,
    smoothed_accuracy,
)
from crowdflow.assignment.problem import _assignment_table, _build_instance, _float_column, _Instance, _loads
from crowdflow.assignment.projector import TVCSProjector
from crowdflow.assignment.types import AssignmentResult

log = logging.getLogger(__name__)


def _quality_instance(
    candidates: pd.DataFrame, budget: Any, worker_caps: Any, task_caps: Any
) -> tuple[_Instance, np.ndarray, np.ndarray]:
    inst = _build_instance(
        candidates, budget, worker_caps, task_caps, ("quality",), worker_default=None, task_default=None
    )
    q = inst.cand["quality"].to_numpy(dtype=np.float64)
    bad = (q <= 0) | (q >= 1)
    if bad.any():
        rows = np.flatnonzero(bad)[:10].tolist()
        raise ValueError(f"candidates: 'quality' must lie in (0, 1); offending rows {rows}")
    low = q < 0.5
    if low.any():
        log.warning("%d candidate pair(s) have quality < 0.5: their votes count inverted, not ignored", int(low.sum()))
    q = np.clip(q, *_Q_CLIP)
    m = inst.tasks.shape[0]
    prior = np.full(m, 0.5)
    if "prior" in inst.cand.columns:
        pr = _float_column(inst.cand, "prior", "candidates")
        if np.any((pr <= 0) | (pr >= 1)):
            raise ValueError("candidates: 'prior' must lie in (0, 1)")
        first = np.full(m, np.nan)
        first[inst.t_idx[::-1]] = pr[::-1]
        # a task's prior must be constant over its candidate rows
        if np.any(np.abs(pr - first[inst.t_idx]) > 1e-12):
            raise ValueError("candidates: 'prior' differs between rows of the same task")
        prior = np.where(np.isnan(first), 0.5, first)
    return inst, q, prior


def _accuracy_result(
    inst: _Instance,
    x: np.ndarray,
    q: np.ndarray,
    prior: np.ndarray,
    score: np.ndarray,
    *,
    method: str,
    backend: str,
    iterations: int,
    eval_samples: int,
    eval_seed: int,
    trace: dict[str, Any],
) -> AssignmentResult:
    acc = map_accuracy_mc(q[x], inst.t_idx[x], prior, samples=eval_samples, seed=eval_seed)
    objective = float(acc.mean()) if acc.size else float("nan")
    table = _assignment_table(inst, x, score, {"quality": q})
    table["rank_in_task"] = table.groupby("task", sort=False).cumcount().astype(np.int64) + 1
    wl, tl = _loads(inst, x)
    tl["expected_accuracy"] = acc
    trace = dict(trace)
    trace.update(eval_samples=eval_samples, eval_seed=eval_seed)
    return AssignmentResult(
        assignment=table,
        worker_load=wl,
        task_load=tl,
        objective=objective,
        budget=inst.budget,
        n_selected=int(x.sum()),
        dual_bound=float("nan"),
        certified=False,
        method=method,
        backend=backend,
        iterations=iterations,
        n_excluded=0,
        trace=trace,
    )


def assign_siht(
    candidates: pd.DataFrame,
    budget: int | None,
    worker_caps: pd.DataFrame | float | None = None,
    task_caps: pd.DataFrame | float | None = None,
    *,
    n_iter: int = 200,
    batch: int = 4,
    eta: float = 1.0,
    mode: Literal["box", "paper"] = "box",
    init: Literal["zero", "qlp"] = "zero",
    patience: int | None = 10,
    seed: int = 0,
    backend: str = "flow",
    eval_samples: int = 1000,
    eval_seed: int | None = None,
) -> AssignmentResult:
    """Assignment maximising the expected accuracy of Bayes-weighted voting by stochastic IHT.

    docs/methods/assignment.md §5.3 (paper Section 5.2): maximise ``Ẽ(W)``, the sigmoid-smoothed expected
    MAP accuracy of docs/methods/assignment.md §5.2, over the TVCS set (worker loads = view 1, task caps =
    view 2, budget = total)::

        for t = 1..n_iter:
            g  ← mean of ``batch`` corrected stochastic gradients (× m)   (smoothed_accuracy)
            Zt ← W + η g
            box:   c = clip(Zt, 0, 1); x = tvcs_select(Zt² − (Zt − c)²); W = c ⊙ x
            paper: x = tvcs_select(Zt²);                                   W = Zt ⊙ x
            stop early when supp(W) is unchanged for ``patience`` iterations
        X = 1[W > 0]

    Parameters
    ----------
    candidates : DataFrame
        ``task, worker, quality`` (``Q ∈ (0,1)``, clipped to [1e-3, 1−1e-3]; Q < 0.5 is
        allowed and logged), optional ``prior`` (``π_j``, constant per task; default 0.5).
    budget, worker_caps, task_caps
        As in :func:`assign_tasks`.
    n_iter, batch, eta, mode, init, patience, seed
        SIHT settings (docs/methods/assignment.md §6.2: T=200, B=4, η=1, box mode, W0 = 0; ``init="qlp"`` warm
        starts from the Q-LP baseline). ``patience=None`` always runs ``n_iter`` iterations.
    backend : str
        Projection backend (:func:`tvcs_select`).
    eval_samples, eval_seed
        Monte-Carlo evaluation of the result on samples independent of training
        (``eval_seed`` default ``seed + 1``).

    Returns
    -------
    AssignmentResult
        ``objective`` = MC expected accuracy; ``assignment.score`` = final ``W``;
        ``trace`` has ``smoothed`` (Ẽ on each batch), ``support_changes`` and ``stopped``.
    """
    if mode not in ("box", "paper"):
        raise ValueError(f"mode must be 'box' or 'paper', got {mode!r}")
    if n_iter < 1 or batch < 1:
        raise ValueError("n_iter and batch must be >= 1")
    inst, q, prior = _quality_instance(candidates, budget, worker_caps, task_caps)
    eval_seed = seed + 1 if eval_seed is None else eval_seed
    p = inst.p
    if p == 0:
        return _accuracy_result(
            inst,
            np.zeros(0, bool),
            q,
            prior,
            np.zeros(0),
            method="siht",
            backend=backend,
            iterations=0,
            eval_samples=eval_samples,
            eval_seed=eval_seed,
            trace={},
        )
    proj = TVCSProjector(inst.constraints(), backend=backend)
    rng = _rng(seed, _TAG_SIHT)
    if init == "qlp":
        W = proj.select(q).x.astype(np.float64)
    elif init == "zero":
        W = np.zeros(p)
    else:
        raise ValueError(f"init must be 'zero' or 'qlp', got {init!r}")
    supp = W > 0
    smoothed: list[float] = []
    changes: list[int] = []
    stable = 0
    stopped = "n_iter"
    it = 0
    for it in range(1, n_iter + 1):
        Z1, Z0 = sample_votes(q, batch, rng)
        val, g = smoothed_accuracy(W, Z1, Z0, inst.t_idx, prior)
        smoothed.append(val)
        Zt = W + eta * g
        if mode == "box":
            c = np.clip(Zt, 0.0, 1.0)
            x = proj.select(Zt * Zt - (Zt - c) ** 2).x
            W = np.where(x, c, 0.0)
        else:
            x = proj.select(Zt * Zt).x
            W = np.where(x, Zt, 0.0)
        new_supp = W > 0
        ch = int(np.sum(new_supp != supp))
        changes.append(ch)
        supp = new_supp
        stable = stable + 1 if ch == 0 else 0
        if patience is not None and stable >= patience:
            stopped = "support_stable"
            break
    if stopped == "n_iter" and patience is not None:
        log.warning("assign_siht: support still changing after %d iterations (last change %d)", n_iter, changes[-1])
    X = W > 0
    trace = {"smoothed": smoothed, "support_changes": changes, "stopped": stopped, "mode": mode}
    return _accuracy_result(
        inst,
        X,
        q,
        prior,
        W,
        method="siht",
        backend=proj.backend,
        iterations=it,
        eval_samples=eval_samples,
        eval_seed=eval_seed,
        trace=trace,
    )


def assign_baseline(
    candidates: pd.DataFrame,
    budget: int | None,
    worker_caps: pd.DataFrame | float | None = None,
    task_caps: pd.DataFrame | float | None = None,
    *,
    method: Literal["qlp", "random"] = "qlp",
    seed: int = 0,
    backend: str = "flow",
    eval_samples: int = 1000,
    eval_seed: int | None = None,
) -> AssignmentResult:
    """Baselines of docs/methods/assignment.md §5.3: ``"qlp"`` maximises ``Σ Q_ij X_ij`` under the same caps (Ho et al.
    2013 with the per-task cap); ``"random"`` selects ``tvcs_select(ξ)``, ``ξ ~ U(0,1)`` — a random
    feasible assignment that fills the budget. Evaluated like :func:`assign_siht`.
    """
    inst, q, prior = _quality_instance(candidates, budget, worker_caps, task_caps)
    eval_seed = seed + 1 if eval_seed is None else eval_seed
    if method == "qlp":
        w = q.copy()
    elif method == "random":
        w = _rng(seed, _TAG_RANDOM).random(inst.p)
    else:
        raise ValueError(f"method must be 'qlp' or 'random', got {method!r}")
    if inst.p == 0:
        x = np.zeros(0, bool)
        be, it = backend, 0
    else:
        res = TVCSProjector(inst.constraints(), backend=backend).select(w)
        x, be, it = res.x, res.backend, res.iterations
    return _accuracy_result(
        inst,
        x,
        q,
        prior,
        w,
        method=method,
        backend=be,
        iterations=it,
        eval_samples=eval_samples,
        eval_seed=eval_seed,
        trace={},
    )
