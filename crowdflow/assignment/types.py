"""Result types of the package: a selection, an assignment and a next batch.

:class:`SelectResult` (one TVCS selection), :class:`AssignmentResult` (an assignment with its load
tables) and :class:`NextBatchResult` (the closed loop's candidates and their assignment).

Plain frozen dataclasses shared by the selection backends, the public projector and the assignment
entry points, so that none of those modules needs to import another for its result type.
See docs/methods/assignment.md §1.4 (output tables) and §2.2 (the certificate a result carries).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class SelectResult:
    """Result of :func:`tvcs_select`.

    Attributes
    ----------
    x : ndarray of bool, shape (p,)
        Selected elements (feasible; never an element with ``u_i ≤ 0``).
    objective : float
        ``⟨u, x⟩``.
    dual_bound : float
        Upper bound on the optimum from a dual-feasible point (weak duality, docs/methods/assignment.md §2.2).
    certified : bool
        ``dual_bound − objective ≤ 1e-9·max(1, |dual_bound|)``, i.e. ``x`` is provably optimal.
    backend : str
        Backend that produced ``x`` (``"pgd->lp"`` when PGD fell back to the LP).
    iterations : int
        Flow: min-cost-flow solves (column-generation rounds, plus the full network if it was
        solved; 0 for the closed form); LP: simplex/IPM iterations; PGD: gradient steps.
    trace : dict
        Backend-specific convergence trace (flow: solver statistics and column-generation rounds;
        PGD: gap history).
    """

    x: np.ndarray
    objective: float
    dual_bound: float
    certified: bool
    backend: str
    iterations: int
    trace: dict[str, Any] = field(default_factory=dict)

    @property
    def gap(self) -> float:
        return self.dual_bound - self.objective


@dataclass(frozen=True)
class AssignmentResult:
    """Task–worker assignment (docs/methods/assignment.md §1.4; docs/reference/outputs.md).

    Attributes
    ----------
    assignment : DataFrame
        One row per selected pair: ``task, worker, score`` (plus ``quality`` and ``rank_in_task``
        for the expected-accuracy methods), sorted by task then descending score.
    worker_load : DataFrame
        ``worker, n_assigned, capacity, slack`` for every worker (capacity ``<NA>`` = unlimited).
    task_load : DataFrame
        ``task, n_assigned, cap, slack`` for every task (cap ``<NA>`` = unlimited).
    objective : float
        ``"score"``: total score of the assignment. Expected-accuracy methods: Monte-Carlo
        expected accuracy of the MAP vote on independent samples (docs/methods/assignment.md §5.4).
    budget : int or None
        Global cap used (``None`` = unlimited).
    n_selected : int
    dual_bound : float
        ``"score"``: certified upper bound on the best total score (NaN for heuristics).
    certified : bool
        ``"score"``: the assignment is provably optimal. Heuristics: False.
    method : str
        ``"score" | "siht" | "qlp" | "random"``.
    backend : str
        Projection backend.
    iterations : int
    n_excluded : int
        Candidates that can never be selected because their weight is ≤ 0 (e.g. negative score).
    trace : dict
        Convergence facts (SIHT: smoothed objective per iteration, support changes).
    """

    assignment: pd.DataFrame
    worker_load: pd.DataFrame
    task_load: pd.DataFrame
    objective: float
    budget: int | None
    n_selected: int
    dual_bound: float
    certified: bool
    method: str
    backend: str
    iterations: int
    n_excluded: int
    trace: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NextBatchResult:
    """Result of :func:`crowdflow.assignment.fit.next_batch`.

    Attributes
    ----------
    candidates : DataFrame
        ``task, worker, score, quality, prior``: every open task × available worker pair whose worker
        has a usable skill, scored by :func:`crowdflow.assignment.scores.candidate_scores`.
    result : AssignmentResult
        The maximum-total-score assignment of those candidates under the budget and caps.
    n_workers_without_skill : int
        Available workers left out because they have no usable skill (new, or in a component the
        skills fit could not identify).
    """

    candidates: pd.DataFrame
    result: AssignmentResult
    n_workers_without_skill: int
