"""Thin tasks of a folded ranking run (``ranking.incremental`` with ``outliers: none``): check and fit the fold."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.checks import CheckMode, GraphChecks, graph_checks
from crowdflow.comparison_graphs import comparison_graph_report_from_codes
from crowdflow.ranking import ComparisonGraph
from crowdflow.ranking.folded import FoldedFit, fit_pairs
from crowdflow.ranking.options import RankingOptions
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
