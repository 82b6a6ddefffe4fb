"""The assignment job's front door: a candidates DataFrame (and caps tables) in, the tables a run writes out.

:func:`output_tables` is the output tables of an assignment or a next batch (the flows and the front door
use it); :func:`assign` is the assignment job in one call, ``crowdflow.assign(candidates, budget=100)``: the
file reader's column rules, the table contracts and :func:`~crowdflow.assignment.assign_tasks`, as a pipeline
runs them (docs/methods/assignment.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from crowdflow.assignment.fit import assign_tasks
from crowdflow.assignment.options import AssignmentOptions
from crowdflow.assignment.types import AssignmentResult, NextBatchResult
from crowdflow.checks import Checks, check_modes
from crowdflow.contracts.errors import InputError
from crowdflow.storage.frames import Columns, columns_for, input_errors, read_input, written_tables

__all__ = ["AssignmentFit", "assign", "output_tables"]


def output_tables(result: AssignmentResult | NextBatchResult) -> dict[str, pd.DataFrame]:
    """The output tables of an assignment: ``assignment`` (task, worker, score), ``worker_load`` and
    ``task_load``; a next batch adds its scored ``candidates``."""
    res = result.result if isinstance(result, NextBatchResult) else result
    tables = {"assignment": res.assignment, "worker_load": res.worker_load, "task_load": res.task_load}
    if isinstance(result, NextBatchResult):
        tables["candidates"] = result.candidates
    return tables


@dataclass(frozen=True)
class AssignmentFit:
    """What ``crowdflow.assign(candidates)`` returns: the run's tables and the solution.

    Attributes
    ----------
    tables : dict
        ``assignment``, ``worker_load``, ``task_load``.
    result : AssignmentResult
        The solution (objective, dual bound, ``certified`` optimality, backend).
    options : AssignmentOptions
    """

    tables: dict[str, pd.DataFrame]
    result: AssignmentResult
    options: AssignmentOptions

    @property
    def assignment(self) -> pd.DataFrame:
        """The selected pairs: ``task, worker, score``."""
        return self.tables["assignment"]

    @property
    def worker_load(self) -> pd.DataFrame:
        """Per worker: ``n_assigned, capacity, slack``."""
        return self.tables["worker_load"]

    @property
    def task_load(self) -> pd.DataFrame:
        """Per task: ``n_assigned, cap, slack``."""
        return self.tables["task_load"]


def _require_rows(caps: pd.DataFrame, cand: pd.DataFrame, col: str, kind: str, source: str) -> None:
    """Without a scalar default every candidate's worker (task) needs a row in the caps table."""
    missing = sorted(set(cand[col].astype(str)) - set(caps[col].astype(str)))
    if missing:
        option = kind[:-1]
        raise InputError(
            f"no row for {len(missing)} {col}(s) of the candidates, e.g. {missing[:5]}; add them or set "
            f"{option} as the default for ids the table omits",
            path=source,
            column=col,
        )


def assign(
    candidates: pd.DataFrame,
    worker_caps: pd.DataFrame | None = None,
    task_caps: pd.DataFrame | None = None,
    *,
    options: AssignmentOptions | None = None,
    checks: Checks = None,
    columns: Columns = None,
    **overrides: Any,
) -> AssignmentFit:
    """The maximum-total-score assignment of tasks to workers under a budget and caps (exact, certified).

    Parameters
    ----------
    candidates : pandas.DataFrame
        ``task, worker, score``: the pairs that may be assigned.
    worker_caps : pandas.DataFrame, optional
        ``worker, capacity``: the most tasks each worker gets (``worker_cap`` is then the default for workers it
        omits).
    task_caps : pandas.DataFrame, optional
        ``task, cap``: the most workers each task gets (``task_cap`` the default for tasks it omits).
    options : AssignmentOptions, optional
        ``budget``, ``worker_cap``, ``task_cap``, ``backend`` (the ``assignment:`` section of a spec).
    checks : {"block", "warn"} or mapping, optional
        Policy of ``validation`` (block by default).
    columns : mapping, optional
        Per table: ``{"candidates": {...}, "worker_caps": {...}, "task_caps": {...}}`` (or the candidates
        mapping alone).
    **overrides
        Fields of :class:`~crowdflow.assignment.AssignmentOptions` (``budget=100``, ``worker_cap=5``, …).

    Returns
    -------
    AssignmentFit
        ``.assignment``, ``.worker_load``, ``.task_load``, ``.tables``.

    Raises
    ------
    pydantic.ValidationError
        An unknown option or a value outside its range.
    crowdflow.contracts.errors.InputError
        A missing column, a fractional cap, a caps table without a row for a candidate's id and no default.
    crowdflow.contracts.errors.ValidationFailed
        A broken table contract (repeated pairs, non-finite scores, negative caps …).

    Examples
    --------
    >>> import pandas as pd
    >>> import crowdflow as cf
    >>> cand = pd.DataFrame({"task": ["t1", "t1", "t2"], "worker": ["a", "b", "a"], "score": [0.9, 0.5, 0.8]})
    >>> cf.assign(cand, worker_cap=1, task_cap=1).assignment[["task", "worker", "score"]].to_dict("records")
    [{'task': 't1', 'worker': 'b', 'score': 0.5}, {'task': 't2', 'worker': 'a', 'score': 0.8}]
    """
    o = AssignmentOptions.resolve(options, **overrides)
    modes = check_modes("assignment", checks)
    mode = modes["validation"]
    cand = read_input(candidates, "candidates", columns_for("candidates", columns, "candidates"), validation=mode)
    caps: dict[str, pd.DataFrame | None] = {"worker_caps": None, "task_caps": None}
    for kind, table, col, default in (
        ("worker_caps", worker_caps, "worker", o.worker_cap),
        ("task_caps", task_caps, "task", o.task_cap),
    ):
        if table is None:
            continue
        loaded = read_input(table, kind, columns_for(kind, columns, "candidates"), validation=mode)
        if default is None:
            _require_rows(loaded.df, cand.df, col, kind, loaded.source)
        caps[kind] = loaded.df
    with input_errors(cand.source):
        result = assign_tasks(cand.df, o, worker_caps=caps["worker_caps"], task_caps=caps["task_caps"])
    return AssignmentFit(written_tables("assignment", output_tables(result)), result, o)
