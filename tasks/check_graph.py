"""Graph-connectivity / identifiability checks before any fit."""

from __future__ import annotations

import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.errors import GraphCheckFailed
from crowdflow.graphs import WorkerGraphReport, describe_failures, worker_graph_report
from crowdflow.labels import LabelMatrix
from tasks.artifacts import frame_to_markdown, markdown, table


@task(name="check-worker-graph", cache_policy=NONE)
def check_worker_graph(
    lm: LabelMatrix, identifiability: str = "block", isolated: str = "warn", source: str = ""
) -> WorkerGraphReport:
    """Components of the worker interaction graph; bipartite components / isolated workers per policy.

    Blocking checks raise :class:`GraphCheckFailed` naming every failing component and its workers.
    """
    logger = get_run_logger()
    report = worker_graph_report(lm)
    comps = report.components
    n_bip = int((comps["status"] == "bipartite_component").sum())
    n_iso = int((comps["status"] == "isolated").sum())
    ok_workers = int((report.workers["status"] == "ok").sum())
    body = (
        f"# Worker interaction graph\n\n{lm.n_workers} workers, {lm.n_tasks} tasks, {lm.n_labels} labels; "
        f"{len(comps)} components: {len(comps) - n_bip - n_iso} ok, {n_bip} bipartite, {n_iso} isolated workers. "
        f"{ok_workers}/{lm.n_workers} workers in identifiable components.\n\n"
        + frame_to_markdown(comps.sort_values("n_workers", ascending=False))
    )
    markdown("worker-graph", body, "identifiability of worker skills (non-bipartite components)")
    table("worker-components", comps.sort_values("n_workers", ascending=False), "components of the worker graph")
    problems = []
    if n_bip:
        msg = describe_failures(report, ("bipartite_component",))
        text = f"{n_bip} bipartite component(s) in the worker graph (skills not identifiable):\n{msg}"
        if identifiability == "block":
            problems.append(text)
        else:
            logger.warning("%s", text)
    if n_iso:
        iso = report.workers.loc[report.workers["status"] == "isolated", "worker"].head(20).tolist()
        text = f"{n_iso} isolated worker(s) share no task with anyone: {iso}"
        if isolated == "block":
            problems.append(text)
        else:
            logger.warning("%s", text)
    if problems:
        where = f"{source}: " if source else ""
        raise GraphCheckFailed(where + "\n".join(problems), check="identifiability")
    logger.info("worker graph: %d components, %d bipartite, %d isolated", len(comps), n_bip, n_iso)
    return report


def components_frame(report: WorkerGraphReport) -> pd.DataFrame:
    """The per-component diagnostics table exported with the run."""
    return report.components.reset_index(drop=True)
