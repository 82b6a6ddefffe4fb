"""The entry points of the assignment jobs: the maximum-total-score assignment, and the next batch.

:func:`assign_tasks` (job ``assignment``) solves ``max Σ score_ij X_ij`` over the candidate pairs
subject to ``Σ_j X_ij ≤ capacity_i`` (each worker), ``Σ_i X_ij ≤ cap_j`` (each task) and
``Σ X_ij ≤ budget``, ``X ∈ {0,1}``, exactly (a TVCS selection with ``u = score``) and reports the
certificate. :func:`next_batch` (job ``next_batch``, the closed loop) builds the candidates from
fitted skills and consensus confidences (every open task × available worker), scores them
(:func:`crowdflow.assignment.scores.candidate_scores`) and assigns them the same way. Both take the
job's options once, as :class:`~crowdflow.assignment.options.AssignmentOptions`.

See docs/methods/assignment.md §1 (the model), §5.6 (the next batch) and §6 (the options).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.assignment.options import AssignmentOptions
from crowdflow.assignment.problem import _assignment_table, _build_instance, _check_whole_caps, _loads
from crowdflow.assignment.projector import TVCSProjector
from crowdflow.assignment.scores import candidate_scores
from crowdflow.assignment.types import AssignmentResult, NextBatchResult, SelectResult

log = logging.getLogger(__name__)


def assign_tasks(
    candidates: pd.DataFrame,
    options: AssignmentOptions | None = None,
    *,
    worker_caps: pd.DataFrame | None = None,
    task_caps: pd.DataFrame | None = None,
    **overrides: Any,
) -> AssignmentResult:
    """Maximum-total-score assignment under worker loads, task redundancy caps and a budget.

    Solves (docs/methods/assignment.md §1.2 with ``u = score``, §1.3 for the caps)::

        max Σ_{(j,i) ∈ candidates} score_ij X_ij   s.t.  Σ_j X_ij ≤ capacity_i  (worker i),
            Σ_i X_ij ≤ cap_j (task j),  Σ X_ij ≤ budget,  X ∈ {0,1}

    exactly (totally unimodular constraints, docs/methods/assignment.md §2.1) with the options'
    ``backend`` of :class:`~crowdflow.assignment.projector.TVCSProjector`.

    Parameters
    ----------
    candidates : DataFrame
        Columns ``task, worker, score`` (aliases ``task_id, worker_id, value``). Pairs must be
        unique; scores finite. Pairs with ``score ≤ 0`` are valid input but are never assigned
        (they cannot increase the objective; counted in ``n_excluded``).
    options : AssignmentOptions, optional
        ``budget`` (``None`` = unlimited, ``0`` gives an empty assignment), ``worker_cap`` and
        ``task_cap`` (one cap for every worker / task, ``None`` = unlimited; with a caps table, the
        cap of the ids it does not list) and ``backend``. Default: ``AssignmentOptions()``.
    worker_caps : DataFrame (worker, capacity), optional
        Max tasks per worker (view 1; aliases ``worker_id``, ``max_tasks``, ``worker_capacity``).
        Caps are whole numbers ≥ 0 (``inf`` = no cap); a fractional cap is refused. Without
        ``options.worker_cap`` the table must list every worker of ``candidates``.
    task_caps : DataFrame (task, cap), optional
        Max workers per task (view 2; aliases ``task_id``, ``max_workers``, ``task_cap``), same rules.
    **overrides
        Fields of :class:`AssignmentOptions` replacing those of ``options`` (validated the same way),
        e.g. ``assign_tasks(cand, budget=10, worker_cap=2)``.

    Returns
    -------
    AssignmentResult
        ``objective`` = total score; ``certified`` = optimality proved by a dual bound.

    Raises
    ------
    pydantic.ValidationError
        An option out of range (e.g. a negative budget), of the wrong type or unknown.
    crowdflow.assignment.problem.CapsTableError
        A fractional cap in a caps table (a ``ValueError`` naming the table, column and row).
    ValueError
        Missing columns, missing/duplicate ids, duplicate pairs, NaN/inf scores, negative or NaN
        caps, caps table without a row for a candidate's worker/task (and no default cap).

    Notes
    -----
    Degenerate inputs give explicit empty results (never errors): no candidates, budget 0,
    all caps 0, or all scores ≤ 0 → ``assignment`` has zero rows, ``objective = 0`` and
    ``certified = True`` (the empty set is optimal).
    """
    o = AssignmentOptions.resolve(options, **overrides)
    inst = _build_instance(
        candidates,
        o.budget,
        worker_caps if worker_caps is not None else o.worker_cap,
        task_caps if task_caps is not None else o.task_cap,
        ("score",),
        worker_default=o.worker_cap,
        task_default=o.task_cap,
    )
    score = inst.cand["score"].to_numpy(dtype=np.float64)
    n_excl = int(np.sum(score <= 0))
    if n_excl:
        log.info("assign_tasks: %d candidate(s) with score <= 0 are never assigned", n_excl)
    if inst.p == 0:
        x = np.zeros(0, bool)
        res = SelectResult(x, 0.0, 0.0, True, o.backend, 0, {"empty": True})
    else:
        res = TVCSProjector(inst.constraints(), backend=o.backend).select(score)
    wl, tl = _loads(inst, res.x)
    table = _assignment_table(inst, res.x, score, {})
    return AssignmentResult(
        assignment=table,
        worker_load=wl,
        task_load=tl,
        objective=res.objective,
        budget=inst.budget,
        n_selected=int(res.x.sum()),
        dual_bound=res.dual_bound,
        certified=res.certified,
        method="score",
        backend=res.backend,
        iterations=res.iterations,
        n_excluded=n_excl,
        trace=res.trace,
    )


def next_batch(
    open_tasks: pd.DataFrame,
    workers: pd.DataFrame,
    skills: pd.DataFrame,
    consensus: pd.DataFrame,
    options: AssignmentOptions | None = None,
    **overrides: Any,
) -> NextBatchResult:
    """The next batch of the closed loop: open tasks × available workers, scored and assigned.

    Every open task × available worker pair is a candidate. Its score is the predicted gain
    ``π(1−π)(2Q−1)·ln(Q/(1−Q))`` of :func:`~crowdflow.assignment.scores.candidate_scores` (``Q`` = the
    worker's fitted accuracy, ``π`` = the task's consensus confidence, 0.5 for a task never
    labelled). Workers without a usable skill (new, or in a component the skills fit could not
    identify) are left out and counted. The candidates are then assigned by :func:`assign_tasks`
    (docs/methods/assignment.md §5.5–§5.6).

    Parameters
    ----------
    open_tasks : DataFrame
        ``task``: the tasks to assign.
    workers : DataFrame
        ``worker`` and optionally ``capacity`` (max tasks of that worker in this batch; empty = the
        options' ``worker_cap``, or no cap when that is ``None``; whole numbers ≥ 0, ``inf`` = no cap).
    skills : DataFrame
        The skills job's ``skills`` table: ``worker`` and ``accuracy`` and/or ``skill``.
    consensus : DataFrame
        The skills job's ``consensus`` table: ``task``, ``confidence``.
    options : AssignmentOptions, optional
        Budget, caps and backend, as in :func:`assign_tasks`. Default: ``AssignmentOptions()``.
    **overrides
        Fields of :class:`AssignmentOptions` replacing those of ``options``.

    Returns
    -------
    NextBatchResult
        The scored candidates, their assignment and the number of workers left out.

    Raises
    ------
    pydantic.ValidationError
        An option out of range, of the wrong type or unknown.
    crowdflow.assignment.problem.CapsTableError
        A fractional ``capacity`` in ``workers`` (named by table, column and row).
    ValueError
        A missing column, or bad values in the skills / consensus tables.
    """
    o = AssignmentOptions.resolve(options, **overrides)
    for name, table, cols in (
        ("open_tasks", open_tasks, ("task",)),
        ("workers", workers, ("worker",)),
        ("skills", skills, ("worker",)),
        ("consensus", consensus, ("task", "confidence")),
    ):
        for col in cols:
            if col not in table.columns:
                raise ValueError(f"{name}: missing column '{col}' (columns: {list(table.columns)})")
    usable = pd.Series(False, index=skills.index)
    for col in ("skill", "accuracy"):
        if col in skills.columns:
            usable |= skills[col].notna()
    pairs = open_tasks[["task"]].merge(workers[["worker"]], how="cross")
    known = pairs["worker"].isin(skills.loc[usable, "worker"])
    n_unknown = int(workers["worker"].isin(pairs.loc[~known, "worker"]).sum())
    cand = candidate_scores(skills, consensus[["task", "confidence"]], pairs[known], missing="drop")
    caps: pd.DataFrame | None = None
    if "capacity" in workers.columns and workers["capacity"].notna().any():
        cap = pd.to_numeric(workers["capacity"], errors="coerce").to_numpy(dtype=np.float64)
        bad = np.isnan(cap) & workers["capacity"].notna().to_numpy()
        if bad.any():
            rows = (np.flatnonzero(bad) + 1)[:10].tolist()
            raise ValueError(f"workers: column 'capacity' must be numeric; data rows {rows}")
        _check_whole_caps(cap, workers["worker"].astype(str).to_numpy(dtype=object), "workers", "capacity", "worker")
        # an empty capacity means the options' worker_cap, or no cap at all (inf) when that is None
        fill = float(o.worker_cap) if o.worker_cap is not None else np.inf
        caps = pd.DataFrame({"worker": workers["worker"].astype(str), "capacity": np.where(np.isnan(cap), fill, cap)})
        caps = caps[caps["worker"].isin(cand["worker"])]
    result = assign_tasks(cand[["task", "worker", "score"]], o, worker_caps=caps)
    return NextBatchResult(candidates=cand, result=result, n_workers_without_skill=n_unknown)
