"""The options of the assignment job, declared once: :class:`AssignmentOptions`.

The same frozen model is the ``options=`` argument of :func:`crowdflow.assignment.fit.assign_tasks`
and :func:`crowdflow.assignment.fit.next_batch`, the ``assignment:`` section of a pipeline spec
(:mod:`crowdflow.spec`) and the Prefect parameter form, so a default or a range cannot differ between
a notebook call and a pipeline run. Every count is a whole number in ``[0, 2^53]`` (``2^53`` is the
largest count that float64 arithmetic, which the caps pass through, represents exactly); empty
(``None``) means no limit. No combination of the fields can make the fit fail, so the model has no
cross-field rule. The reasons behind each default are in docs/methods/assignment.md §6.1.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from crowdflow.contracts.options import Options

#: Largest budget or cap accepted: counts pass through float64 arrays, exact up to 2^53.
MAX_COUNT = 2**53


class AssignmentOptions(Options):
    """Pick the task-worker pairs with the highest total score within a budget and limits per worker and per task.

    Leave a limit empty for no limit; with a caps table, the per-worker or per-task limit here applies
    to the workers or tasks that the table leaves out.
    """

    budget: int | None = Field(
        None,
        ge=0,
        le=MAX_COUNT,
        description="The largest number of (task, worker) pairs to assign in total; empty means no limit.",
    )
    worker_cap: int | None = Field(
        None,
        ge=0,
        le=MAX_COUNT,
        description="The most tasks one worker gets (empty means no limit); with a worker caps table, "
        "the limit for the workers it does not list.",
    )
    task_cap: int | None = Field(
        None,
        ge=0,
        le=MAX_COUNT,
        description="The most workers one task gets (empty means no limit); with a task caps table, "
        "the limit for the tasks it does not list.",
    )
    backend: Literal["flow", "lp", "pgd"] = Field(
        "flow",
        description="The solver: 'flow' (exact and fastest), 'lp' (a general linear-programming solver, "
        "for cross-checks) or 'pgd' (the paper's iterative method, slow on large inputs).",
    )

    @field_validator("budget", "worker_cap", "task_cap", mode="before")
    @classmethod
    def _not_a_bool(cls, v: Any) -> Any:
        # pydantic reads True as 1: a budget or cap written as yes/true is a mistake, not a count
        if isinstance(v, bool):
            raise ValueError("must be a whole number or empty (no limit), not true/false")
        return v
