"""The skills/consensus job: ingest → validate → check worker graph → fit → export.

Nothing is written unless every blocking step passes; the export is one atomic step at the end.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from crowdflow import __version__
from crowdflow.labels import deduplicate, encode_labels
from crowdflow.manifest import content_key, new_run_id, started_at, versions
from crowdflow.metrics import gold_metrics
from crowdflow.spec import PipelineSpec
from tasks.check_graph import check_worker_graph, components_frame
from tasks.export import export_run
from tasks.fit import fit_consensus
from tasks.ingest import ingest
from tasks.validate import validate


@flow(name="crowdflow-skills", log_prints=True)
def skills_flow(spec: PipelineSpec, run_id: str | None = None) -> dict[str, Any]:
    """Consensus labels (and worker skills) from a labels table, per the pipeline spec.

    Parameters
    ----------
    spec : PipelineSpec
        Inputs, options, check modes and output folder.
    run_id : str, optional
        Defaults to ``<UTC timestamp>-<flow run id>``.

    Returns
    -------
    dict
        ``run_dir``, ``run_id`` and ``metrics`` of the completed run.
    """
    logger = get_run_logger()
    run_id = run_id or new_run_id(str(flow_run.id or "") or None)
    t0, timings = time.perf_counter(), {}

    def lap(step: str, since: float) -> float:
        now = time.perf_counter()
        timings[step] = round(now - since, 4)
        return now

    t = t0
    labels = ingest(spec, spec.labels, "labels")
    truth = ingest(spec, spec.truth, "truth") if spec.truth else None
    t = lap("ingest", t)

    opts = spec.skills
    labels_df, n_dropped = labels.df, 0
    if opts.duplicates != "error":
        labels_df, n_dropped = deduplicate(labels.df, opts.duplicates)
    allowed = {"label": opts.classes} if opts.classes else None
    validate(replace(labels, df=labels_df), "labels", spec.checks.validation, allowed)
    if truth is not None:
        validate(truth, "truth", spec.checks.validation)
    t = lap("validate", t)

    lm = encode_labels(labels_df.dropna(subset=["task", "worker", "label"]), opts.classes)
    graph = check_worker_graph(lm, spec.checks.identifiability, spec.checks.isolated_workers, labels.source)
    t = lap("check_graph", t)

    key = content_key(labels.sha256, opts.model_dump(), __version__, "consensus")
    result = fit_consensus(lm, opts, key)
    t = lap("fit", t)

    metrics: dict[str, Any] = {"n_ties": result.n_ties, "n_duplicates_dropped": n_dropped}
    if truth is not None:
        metrics.update(gold_metrics(result.consensus, truth.df).as_dict())
        logger.info("accuracy on %d gold tasks: %.4f (error %.4f)", metrics["n_gold"], metrics["accuracy"], metrics["error"])

    inputs = [
        {"name": name, "path": str(Path(tbl.source).resolve()), "sha256": tbl.sha256, "rows": tbl.n_rows, "format": tbl.format}
        for name, tbl in (("labels", labels), ("truth", truth))
        if tbl is not None
    ]
    manifest = {
        "run_id": run_id,
        "pipeline": spec.name,
        "job": spec.job,
        "method": opts.method,
        "started_at": started_at(),
        "flow_run_id": str(flow_run.id) if flow_run.id else None,
        "spec": spec.model_dump(mode="json"),
        "inputs": inputs,
        "checks": {
            "validation": "passed",
            "worker_components": int(len(graph.components)),
            "bipartite_components": int((graph.components["status"] == "bipartite_component").sum()),
            "isolated_workers": int((graph.components["status"] == "isolated").sum()),
        },
        "metrics": metrics,
        "versions": versions(),
        "timings": timings,
    }
    tables = {"consensus": result.consensus, "workers": graph.workers, "components": components_frame(graph)}
    run_dir = export_run(str(spec.output_dir()), spec.name, run_id, tables, manifest)
    lap("export", t)
    logger.info("run %s completed in %.2f s → %s", run_id, time.perf_counter() - t0, run_dir)
    return {"run_id": run_id, "run_dir": run_dir, "metrics": metrics}
