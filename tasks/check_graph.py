"""The graph-check task: the library's checks (:mod:`crowdflow.checks`), their artifacts, the block/warn verdict."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.checks import CheckMode, GraphChecks, graph_checks
from crowdflow.graphs import WorkerGraphReport
from crowdflow.labels import LabelMatrix
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

    Blocking failures raise :class:`~crowdflow.errors.GraphCheckFailed` naming ``source`` and every failing
    component; ``crowdflow validate`` reaches the same verdict through the same library function.
    """
    logger = get_run_logger()
    checks = graph_checks(job, tables or {}, modes, lm)
    if checks is None:
        raise ValueError(f"job {job!r} has no graph checks")
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
