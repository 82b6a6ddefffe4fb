"""The skills/consensus job: ingest → validate → check worker graph → fit → export.

Nothing is written unless every blocking step passes; the export is one atomic step at the end.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from prefect import flow, get_run_logger

from crowdflow.io import LoadedTable
from crowdflow.labels import deduplicate, encode_labels
from crowdflow.metrics import review_skills
from crowdflow.skills import output_metrics, output_tables
from crowdflow.spec import SkillsPipeline
from flows.common import Clock, finish_run, fit_step, load_inputs, run_id_for
from flows.pipeline import fit_data
from tasks.check_graph import check_graph
from tasks.fit import fit_skills_task

_FIT_KEYS = (
    "fit_status",
    "method",
    "solver",
    "iterations",
    "converged",
    "final_loss",
    "eta",
    "tau",
    "weighting",
    "n_classes",
    "classes",
    "moments_partitions",
)


@flow(name="crowdflow-skills", log_prints=True)
def skills_flow(spec: SkillsPipeline, run_id: str | None = None) -> dict[str, Any]:
    """Consensus labels (and worker skills) from a labels table, per the pipeline spec.

    Parameters
    ----------
    spec : SkillsPipeline
        Inputs (``labels``, optional ``truth``), ``skills`` options, check modes and output folder.
    run_id : str, optional
        Defaults to ``<UTC timestamp>-<flow run id>``.

    Returns
    -------
    dict
        ``run_dir``, ``run_id`` and ``metrics`` of the completed run.
    """
    logger = get_run_logger()
    run_id = run_id_for(run_id)
    clock = Clock()
    opts = spec.skills
    dropped = {"n": 0}

    def dedupe(table: LoadedTable) -> LoadedTable:
        if opts.duplicates == "error":
            return table
        df, dropped["n"] = deduplicate(table.df, opts.duplicates)
        return replace(table, df=df)

    allowed = {"labels": {"label": opts.classes}} if opts.classes else None
    inputs = load_inputs(spec, prepare={"labels": dedupe}, allowed=allowed)
    clock.lap("ingest_validate")
    labels, truth = inputs["labels"], inputs.get("truth")

    lm = encode_labels(labels.df.dropna(subset=["task", "worker", "label"]), opts.classes)
    checked = check_graph("skills", spec.check_modes(), lm=lm, source=labels.source)
    graph = checked.report
    clock.lap("check_graph")

    result, cache = fit_step(spec, fit_skills_task, fit_data(spec, {}, lm), lm, graph, opts, runner=spec.runner)
    clock.lap("fit")

    meta = result.metadata
    metrics = output_metrics(result, truth.df if truth is not None else None, dropped["n"], list(lm.classes))
    if truth is not None:
        if metrics["n_gold_label_unknown"]:
            known = ", ".join(map(str, lm.classes[:10]))
            logger.warning(
                "%d of %d gold tasks have a gold label that is none of the fitted classes [%s]: they can never be "
                "counted right (is the gold spelled differently from the labels?) — %s",
                metrics["n_gold_label_unknown"],
                metrics["n_gold"],
                known,
                truth.source,
            )
        logger.info(
            "accuracy on %d gold tasks: %.4f (error %.4f)", metrics["n_gold"], metrics["accuracy"], metrics["error"]
        )
    comps = graph.components
    checks = {
        "validation": "passed" if spec.checks.validation == "block" else "warn",
        "worker_components": len(comps),
        "bipartite_components": int((comps["status"] == "bipartite_component").sum()),
        "isolated_workers": int((comps["status"] == "isolated").sum()),
    }
    # what people act on: gold-measured worker accuracy and confusion (with truth), changes against majority vote
    review = review_skills(labels.df, result.consensus, None if truth is None else truth.df)
    metrics.update(review.metrics)
    tables = output_tables(result, graph, review)  # the same tables as crowdflow.skills(labels, truth)
    fit = {k: v for k, v in meta.items() if k in _FIT_KEYS}
    return finish_run(
        spec,
        run_id,
        inputs,
        tables,
        checks=checks,
        metrics=metrics,
        clock=clock,
        extra={"method": opts.method, "fit": fit, "cache": cache, "review": review.record},
    )
