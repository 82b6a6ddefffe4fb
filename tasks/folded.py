"""Thin tasks of folded runs: ranking (``outliers: none``: check and fit the pair fold) and skills (``method: mv``:
the vote and the worker fold)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.checks import CheckMode, GraphChecks, graph_checks
from crowdflow.comparison_graphs import comparison_graph_report_from_codes
from crowdflow.contracts.errors import InputError
from crowdflow.ranking import ComparisonGraph
from crowdflow.ranking.folded import FoldedFit, fit_pairs
from crowdflow.ranking.options import RankingOptions
from crowdflow.skills.folded import FoldedRun, fold_in_store
from crowdflow.skills.options import SkillsOptions
from crowdflow.storage.increment_inputs import Assembled
from crowdflow.storage.increments import State
from tasks.check_graph import _publish_and_decide


@task(name="check-graph", cache_policy=NONE, task_run_name="check-graph-{job}-folded")
def check_pair_graph(job: str, modes: Mapping[str, CheckMode], graph: ComparisonGraph, source: str = "") -> GraphChecks:
    """The ranking's graph checks on the fold's per-pair graph: the same items, pairs and components as the rows'.

    The published report counts pairs, not rows, and no annotators (the fold keeps none); the verdict
    (``checks.connectivity``) is the rows' verdict, as the components are.
    """
    report = comparison_graph_report_from_codes(
        graph.i, graph.j, graph.items, np.full(graph.m, -1, dtype=np.int64), component=graph.component
    )
    checks = graph_checks(job, {}, modes, comparisons_report=report)
    if checks is None:
        raise ValueError(f"job {job!r} has no graph checks")
    return _publish_and_decide(job, checks, source)


@task(name="fit-ranking-folded", cache_policy=NONE)
def fit_folded_task(
    fold: pd.DataFrame, options: RankingOptions, graph: tuple[ComparisonGraph, np.ndarray]
) -> FoldedFit:
    """HodgeRank least squares on the folded pair sums (:func:`crowdflow.ranking.folded.fit_pairs`)."""
    fit = fit_pairs(fold, options, graph)
    get_run_logger().info(
        "HodgeRank least squares on the fold: %d items, %d pairs, %d rows", fit.params["n_items"],
        fit.params["n_pairs"], fit.params["n_rows"],
    )  # fmt: skip
    return fit


@task(name="fit-skills-folded", cache_policy=NONE)
def fit_skills_folded_task(
    folder: str, state: State, assembled: Assembled, options: SkillsOptions, gold_tasks: list[str] | None = None
) -> FoldedRun:
    """Majority vote on the folded label counts and the worker fold (:func:`crowdflow.skills.folded.fold_in_store`);
    a repeated (task, worker) pair across the files is an input error naming it. A fold kept in parts gives no
    whole consensus table: the run publishes the parts (``run.parts``)."""
    try:
        run = fold_in_store(folder, state, assembled, options, gold_tasks, whole_consensus=False)
    except ValueError as exc:
        raise InputError(str(exc), path=assembled.table.source) from None
    a = run.account
    get_run_logger().info(
        "majority vote on the fold: %d tasks, %d workers; worker fold %s, %d old tasks re-read (%d stored rows read, "
        "%d scanned in %d files)", len(run.fit.result.consensus) if run.parts is None else run.parts.n_tasks,
        len(run.fit.result.skills), a["how"],
        a["tasks_reread"], a["stored_rows_read"], a["stored_rows_scanned"], a["stored_files_scanned"],
    )  # fmt: skip
    parts = a.get("parts")
    if parts:
        get_run_logger().info(
            "label fold in %d parts: %d read, %d rewritten, %d reused (%d of %d tasks written)", parts["total"],
            parts["read"], parts["rewritten"], parts["reused"], parts["tasks_written"], parts["tasks_total"],
        )  # fmt: skip
    return run
