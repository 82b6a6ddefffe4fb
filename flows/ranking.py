"""The global-ranking job: ingest → validate → comparison-graph components → HodgeRank + outliers → export."""

from __future__ import annotations

from typing import Any

from prefect import flow

from crowdflow.spec import RankingPipeline
from flows.common import Clock, finish_run, fit_step, load_inputs, run_id_for
from flows.pipeline import fit_data
from tasks.check_graph import check_graph
from tasks.fit import fit_ranking_task


@flow(name="crowdflow-ranking", log_prints=True)
def ranking_flow(spec: RankingPipeline, run_id: str | None = None) -> dict[str, Any]:
    """Robust global scores from pairwise comparisons (``comparisons`` input).

    Scores are computed per connected component of the comparison graph and are never compared across
    components (each item carries its ``component``); with ``checks.connectivity: block`` a disconnected
    graph stops the run instead. Outputs: ``ranking`` (item, score, rank, component, n_comparisons),
    ``outliers`` (row_id, annotator, item_a, item_b, outcome, gamma, entry_time, is_outlier, …),
    ``annotators`` (per-annotator outlier rate), ``components`` (Hodge diagnostics) and ``path``.
    """
    run_id = run_id_for(run_id)
    clock = Clock()
    inputs = load_inputs(spec)
    clock.lap("ingest_validate")
    cmp = inputs["comparisons"]
    checked = check_graph("ranking", spec.check_modes(), {"comparisons": cmp.df}, source=cmp.source)
    graph = checked.report
    clock.lap("check_graph")
    opts = spec.ranking
    fitted, cache = fit_step(spec, fit_ranking_task, fit_data(spec, {"comparisons": cmp.df}), cmp.df, opts)
    clock.lap("fit")
    tables = fitted["tables"]
    metrics: dict[str, Any] = {"n_items": len(tables["ranking"]), "n_components": graph.n_components}
    if "outliers" in tables:
        metrics["n_outliers"] = int(tables["outliers"]["is_outlier"].sum())
        metrics["outlier_share"] = metrics["n_outliers"] / max(len(tables["outliers"]), 1)
    checks = {"validation": spec.checks.validation, "item_components": graph.n_components}
    return finish_run(
        spec,
        run_id,
        inputs,
        tables,
        checks=checks,
        metrics=metrics,
        clock=clock,
        extra={"method": opts.outliers, "fit": fitted["params"], "cache": cache},
    )
