"""Task-worker assignment by exact projection onto a three-view cardinality constrained set.

Entry points :func:`assign_tasks` (maximum total score under a budget and caps per worker and per
task) and :func:`next_batch` (the closed loop: candidates from skills, then the same assignment),
both configured by :class:`AssignmentOptions`; the selection / projection API
(:func:`tvcs_select`, :func:`tvcs_project`, :class:`TVCSProjector`); the expected-accuracy
assignment by stochastic IHT (:func:`assign_siht`, :func:`assign_baseline`,
:func:`expected_accuracy`); candidate scores from skills (:func:`candidate_scores`); IHT / GradMP
with the projection (:func:`iht`, :func:`gradmp`).

See docs/methods/assignment.md.

The job's front door is :func:`assign` (``crowdflow.assign(candidates, budget=100)``: DataFrames in, the
tables an assignment run writes out); :func:`output_tables` gives those tables from a result.
"""

from crowdflow.assignment.accuracy import expected_accuracy, map_accuracy_exact, map_accuracy_mc
from crowdflow.assignment.backends import greedy_select
from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.assignment.door import AssignmentFit, assign, output_tables
from crowdflow.assignment.fit import assign_tasks, next_batch
from crowdflow.assignment.iht import (
    Loss,
    SparseFitResult,
    exact_recovery,
    gradmp,
    iht,
    relax_constraints,
    selection_recall,
)
from crowdflow.assignment.options import AssignmentOptions
from crowdflow.assignment.problem import CapsTableError
from crowdflow.assignment.projector import TVCSProjector, project_elements, tvcs_project, tvcs_select
from crowdflow.assignment.scores import candidate_scores
from crowdflow.assignment.siht import assign_baseline, assign_siht
from crowdflow.assignment.types import AssignmentResult, NextBatchResult, SelectResult

__all__ = [
    "AssignmentFit",
    "AssignmentOptions",
    "AssignmentResult",
    "CapsTableError",
    "Loss",
    "NextBatchResult",
    "SelectResult",
    "SparseFitResult",
    "TVCSConstraints",
    "TVCSProjector",
    "assign",
    "assign_baseline",
    "assign_siht",
    "assign_tasks",
    "candidate_scores",
    "exact_recovery",
    "expected_accuracy",
    "gradmp",
    "greedy_select",
    "iht",
    "map_accuracy_exact",
    "map_accuracy_mc",
    "next_batch",
    "output_tables",
    "project_elements",
    "relax_constraints",
    "selection_recall",
    "tvcs_project",
    "tvcs_select",
]
