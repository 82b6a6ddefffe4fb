"""The entry point of the assignment job: the maximum-total-score assignment under caps and a budget.

:func:`assign_tasks` solves ``max Σ score_ij X_ij`` over the candidate pairs subject to
``Σ_j X_ij ≤ capacity_i`` (each worker), ``Σ_i X_ij ≤ cap_j`` (each task) and ``Σ X_ij ≤ budget``,
``X ∈ {0,1}``, exactly (a TVCS selection with ``u = score``) and reports the certificate.

See docs/methods/assignment.md §1 (the model) and §5.6 (the pipeline's next batch).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from crowdflow.assignment.problem import _assignment_table, _build_instance, _loads
from crowdflow.assignment.projector import TVCSProjector
from crowdflow.assignment.types import AssignmentResult, SelectResult

log = logging.getLogger(__name__)


def assign_tasks(
    candidates: pd.DataFrame,
    budget: int | None,
    worker_caps: pd.DataFrame | float | None = None,
    task_caps: pd.DataFrame | float | None = None,
    *,
    backend: str = "flow",
) -> AssignmentResult:
    """Maximum-total-score assignment under worker loads, task redundancy caps and a budget.

    Solves (spec §1.2 with ``u = score``, §4.1 constraints)::

        max Σ_{(j,i) ∈ candidates} score_ij X_ij   s.t.  Σ_j X_ij ≤ capacity_i  (worker i),
            Σ_i X_ij ≤ cap_j (task j),  Σ X_ij ≤ budget,  X ∈ {0,1}

    exactly (TU constraint matrix, spec §2.1) with the chosen ``backend`` of :func:`tvcs_select`.

    Parameters
    ----------
    candidates : DataFrame
        Columns ``task, worker, score`` (aliases ``task_id, worker_id, value``). Pairs must be
        unique; scores finite. Pairs with ``score ≤ 0`` are valid input but are never assigned
        (they cannot increase the objective; counted in ``n_excluded``).
    budget : int or None
        Global number of assignments (``None`` = unlimited). ``0`` gives an empty assignment.
    worker_caps : DataFrame (worker, capacity), number or None
        Max tasks per worker (view 1). A table must list every worker of ``candidates``; reals
        are floored; ``None`` = unlimited.
    task_caps : DataFrame (task, cap), number or None
        Max workers per task (view 2), same rules.
    backend : {"flow", "lp", "pgd", "brute"}

    Returns
    -------
    AssignmentResult
        ``objective`` = total score; ``certified`` = optimality proved by a dual bound.

    Raises
    ------
    ValueError
        Missing columns, missing/duplicate ids, duplicate pairs, NaN/inf scores, negative or NaN
        caps/budget, caps table without a row for a candidate's worker/task.

    Notes
    -----
    Degenerate inputs give explicit empty results (never errors): no candidates, budget 0,
    all caps 0, or all scores ≤ 0 → ``assignment`` has zero rows, ``objective = 0`` and
    ``certified = True`` (the empty set is optimal).
    """
    inst = _build_instance(candidates, budget, worker_caps, task_caps, ("score",))
    score = inst.cand["score"].to_numpy(dtype=np.float64)
    n_excl = int(np.sum(score <= 0))
    if n_excl:
        log.info("assign_tasks: %d candidate(s) with score <= 0 are never assigned", n_excl)
    if inst.p == 0:
        x = np.zeros(0, bool)
        res = SelectResult(x, 0.0, 0.0, True, backend, 0, {"empty": True})
    else:
        res = TVCSProjector(inst.constraints(), backend=backend).select(score)
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
