"""The graph-check tasks: the library's checks (:mod:`crowdflow.checks`), their artifacts, the block/warn verdict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.checks import CheckMode, GraphChecks, graph_checks
from crowdflow.comparison_graphs import comparison_graph_report_from_codes
from crowdflow.graphs import WorkerGraphReport
from crowdflow.labels import LabelMatrix
from crowdflow.ranking import ComparisonGraph, build_comparison_graph
from tasks.artifacts import frame_to_markdown, markdown, table


@task(name="check-graph", cache_policy=NONE, task_run_name="check-graph-{job}")
def check_graph(
    job: str,
    modes: Mapping[str, CheckMode],
    tables: Mapping[str, pd.DataFrame] | None = None,
    lm: LabelMatrix | WorkerGraphReport | None = None,
    source: str = "",
) -> GraphChecks:
    """Run ``job``'s graph checks, publish what they found, log warnings, raise on a blocking failure.

    Blocking failures raise :class:`~crowdflow.contracts.errors.GraphCheckFailed` naming ``source`` and every failing
    component; ``crowdflow validate`` reaches the same verdict through the same library function.
    """
    checks = graph_checks(job, tables or {}, modes, lm)
    if checks is None:
        raise ValueError(f"job {job!r} has no graph checks")
    return _publish_and_decide(job, checks, source)


@dataclass(frozen=True)
class CheckedComparisons:
    """The ranking's graph checks and the comparison graph they were computed on (what the fit then takes).

    Attributes
    ----------
    checks : GraphChecks
        The connectivity check of the item comparison graph.
    graph : crowdflow.ranking.ComparisonGraph
        The comparisons encoded once (:func:`crowdflow.ranking.build_comparison_graph`): item codes, Laplacian,
        components. ``fit_ranking(graph)`` fits exactly what ``fit_ranking(table)`` fits.
    """

    checks: GraphChecks
    graph: ComparisonGraph


@task(name="check-graph", cache_policy=NONE, task_run_name="check-graph-{job}")
def check_comparisons(
    job: str, modes: Mapping[str, CheckMode], comparisons: pd.DataFrame, source: str = ""
) -> CheckedComparisons:
    """The ranking's graph check on the comparison graph its fit uses: the table is encoded once per run.

    Builds the fit's :class:`~crowdflow.ranking.ComparisonGraph`, computes the check's report from its codes
    (:func:`crowdflow.comparison_graphs.comparison_graph_report_from_codes`: the report ``crowdflow validate``
    computes from the table), then publishes and decides as :func:`check_graph` does: a blocking failure raises
    :class:`~crowdflow.contracts.errors.GraphCheckFailed` before any fit.
    """
    graph = build_comparison_graph(comparisons)
    annotators, _ = pd.factorize(graph.annotator)  # -1 where a row names no annotator
    report = comparison_graph_report_from_codes(graph.i, graph.j, graph.items, annotators, component=graph.component)
    checks = graph_checks(job, {}, modes, comparisons_report=report)
    if checks is None:
        raise ValueError(f"job {job!r} has no graph checks")
    return CheckedComparisons(_publish_and_decide(job, checks, source), graph)


def _publish_and_decide(job: str, checks: GraphChecks, source: str) -> GraphChecks:
    """Publish the checks as artifacts (summary, components table), log warnings, raise on a blocking failure."""
    logger = get_run_logger()
    comps = getattr(checks.report, "components", None)
    body = [f"# {checks.kind.capitalize()}\n", checks.summary + "\n"]
    body += [f"- **{o.name}** ({o.policy}): {'passed' if o.passed else 'FAILED'}" for o in checks.outcomes]
    body += [f"\n```\n{p}\n```" for o in checks.outcomes for p in o.problems]
    if isinstance(comps, pd.DataFrame):
        size = "n_workers" if "n_workers" in comps.columns else "n_items" if "n_items" in comps.columns else None
        shown = comps.sort_values(size, ascending=False) if size else comps
        body.append("\n" + frame_to_markdown(shown))
        table(f"{job}-components", shown, f"components of the {checks.kind}")
    markdown(f"{job}-graph", "\n".join(body), f"pre-fit checks of the {checks.kind}")
    for text in checks.warnings:
        logger.warning("%s", text)
    checks.raise_if_blocking(source)
    logger.info("%s; checks: %s", checks.summary, checks.results)
    return checks
