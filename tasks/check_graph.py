"""Graph-connectivity / identifiability checks before any fit."""

from __future__ import annotations

import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.errors import GraphCheckFailed
from crowdflow.graphs import (
    AgentGraphReport,
    ComparisonGraphReport,
    WorkerGraphReport,
    agent_graph_problems,
    agent_graph_report,
    comparison_graph_report,
    describe_failures,
    worker_graph_report,
)
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


@task(name="check-comparison-graph", cache_policy=NONE)
def check_comparison_graph(
    comparisons: pd.DataFrame, mode: str, aggregate: bool, source: str = ""
) -> ComparisonGraphReport:
    """Components of the comparison graph.

    ``aggregate=False`` (global ranking): scores are comparable only within a component of the item
    graph; more than one component blocks when ``mode`` is ``block``, else every item gets its
    component id. ``aggregate=True`` (personal rankings): the annotator–item graph must be connected.
    """
    logger = get_run_logger()
    report = comparison_graph_report(comparisons)
    comps = report.components
    body = (
        f"# Comparison graph\n\n{len(report.items)} items in {len(comps)} component(s); "
        f"annotator–item graph: {report.n_user_item_components} component(s).\n\n"
        + frame_to_markdown(comps.sort_values("n_items", ascending=False))
    )
    markdown("comparison-graph", body, "connectivity of the comparison graph")
    n_parts = report.n_user_item_components if aggregate else len(comps)
    if n_parts > 1:
        what = "annotator–item graph" if aggregate else "item comparison graph"
        listing = "\n".join(
            f"component {r.component}: {r.n_items} items, {r.n_comparisons} comparisons: [{r.items}]"
            for r in comps.head(10).itertuples(index=False)
        )
        text = f"the {what} has {n_parts} connected components; scores are not comparable across them:\n{listing}"
        if mode == "block":
            where = f"{source}: " if source else ""
            raise GraphCheckFailed(where + text, check="connectivity")
        logger.warning("%s", text)
    return report


@task(name="check-agent-graph", cache_policy=NONE)
def check_agent_graph(agents: pd.DataFrame, edges: pd.DataFrame, mode: str, source: str = "") -> AgentGraphReport:
    """Agent graph: weights positive and symmetric, endpoints known (always blocking), connected (per ``mode``)."""
    logger = get_run_logger()
    report = agent_graph_report(edges, agents["agent"].astype(str).unique())
    problems = agent_graph_problems(report, require_connected=mode == "block")
    body = (
        f"# Agent graph\n\n{report.n_agents} agents, {report.n_components} component(s); "
        f"{len(report.agents_without_edges)} agents without edges.\n\n"
        + ("\n".join(f"- {p}" for p in problems) or "weights positive and symmetric")
    )
    markdown("agent-graph", body, "checks on the agent similarity graph")
    if problems:
        where = f"{source}: " if source else ""
        raise GraphCheckFailed(where + "; ".join(problems), check="agent_graph")
    if report.n_components > 1:
        logger.warning("the agent graph has %d components; each is fitted on its own", report.n_components)
    return report
