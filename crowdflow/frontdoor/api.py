"""The Python front door: one call per job, Crowd-Kit–style estimators, and completed runs.

``import crowdflow as cf`` gives all of it:

- **Jobs** — DataFrames in, the tables a pipeline run writes out (same columns, same types), after the same
  checks (column mapping with Crowd-Kit's names accepted, the table contracts, the graph checks, with a
  ``checks=`` policy that blocks by default) and with the job's options (``options=`` or keyword overrides,
  validated by the options model):
  ``cf.skills(labels, truth=None, method=...)``, ``cf.rank(comparisons, outliers=...)``,
  ``cf.personal_rankings(comparisons, rank=...)``, ``cf.personal_models(agents, edges, ...)``,
  ``cf.assign(candidates, worker_caps=None, task_caps=None, budget=...)``. Each returns a frozen result with
  ``.tables`` and the job's natural attributes (``.consensus``, ``.skills``, ``.ranking``, …).
- **Estimators** (:mod:`crowdflow.frontdoor.estimators`) — ``MajorityVote``, ``DawidSkene``, ``OneCoinDawidSkene``,
  ``RankOneSkills`` with ``fit``, ``fit_predict``, ``fit_predict_proba`` and Crowd-Kit's fitted attributes.
- **Runs** (:mod:`crowdflow.storage.runs`) — ``cf.read_run(path)`` and ``cf.latest_run(out_dir, pipeline)``: the
manifest
  and tables of a completed run, refusing an incomplete one.

Errors are the library's: :class:`~crowdflow.contracts.errors.InputError`,
:class:`~crowdflow.contracts.errors.ValidationFailed`,
:class:`~crowdflow.contracts.errors.GraphCheckFailed`, :class:`~crowdflow.contracts.errors.DegenerateInput`, and
pydantic's
``ValidationError`` for an option.
"""

from __future__ import annotations

from crowdflow.assignment.door import AssignmentFit, assign
from crowdflow.frontdoor.estimators import DawidSkene, MajorityVote, OneCoinDawidSkene, RankOneSkills
from crowdflow.frontdoor.increment_rules import forget
from crowdflow.personal_models.door import PersonalModelsFit, personal_models
from crowdflow.personal_rankings.door import PersonalRankingsFit, personal_rankings
from crowdflow.ranking.door import RankingFit, rank
from crowdflow.skills.door import SkillsFit, skills
from crowdflow.storage.runs import Run, latest_run, read_run

__all__ = [
    "AssignmentFit",
    "DawidSkene",
    "MajorityVote",
    "OneCoinDawidSkene",
    "PersonalModelsFit",
    "PersonalRankingsFit",
    "RankOneSkills",
    "RankingFit",
    "Run",
    "SkillsFit",
    "assign",
    "forget",
    "latest_run",
    "personal_models",
    "personal_rankings",
    "rank",
    "read_run",
    "skills",
]
