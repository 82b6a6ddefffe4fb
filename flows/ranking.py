"""The global-ranking job: ingest → validate → comparison-graph components → HodgeRank + outliers → export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from crowdflow.ranking.folded import pair_graph
from crowdflow.ranking.passes import keep_local
from crowdflow.spec import RankingPipeline
from flows.common import Clock, finish_run, fit_step, load_inputs, run_id_for
from flows.incremental import IncrementSession, folded_run, increment_session, refuse_erasures_on_workers
from flows.pipeline import fit_data
from tasks.artifacts import set_pipeline
from tasks.check_graph import check_comparisons
from tasks.fit import fit_ranking_task
from tasks.folded import check_pair_graph, fit_folded_task
from tasks.partitioned import copy_on_workers, fit_ranking_on_workers, list_dataset
from tasks.runners import run_scratch, runner_executor, scratch_folder


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
    folded = folded_run(spec)
    if spec.partitioned_input() is not None and not folded:
        return _partitioned_ranking(spec, run_id)
    with increment_session(spec) as session:
        if folded:
            return _ranking_folded(spec, run_id, session)
        return _ranking_inline(spec, run_id, session)


def _ranking_folded(spec: RankingPipeline, run_id: str, session: IncrementSession) -> dict[str, Any]:
    """Least squares on the increment store's fold of per-pair sums: the new files read, never the stored rows.

    Inline and on Dask alike (``runner.kind: dask``), the new files are read, validated and summed in the flow
    process: a day is one or a few files, and what the fit needs of them is O(pairs); shipping them to workers
    would add a round trip and leave the fold to gather here anyway. The fold is updated under the store's lock
    (:func:`flows.incremental.increment_session`), fitted (:func:`crowdflow.ranking.folded.fit_pairs`), the run
    exported, and the new state committed after the export (docs/how-to/incremental.md).
    """
    clock = Clock()
    inputs = load_inputs(spec, session=session)
    clock.lap("ingest_validate")
    got = session.assembled
    assert got is not None and got.fold is not None
    pairs = pair_graph(got.fold.table)
    where = got.table.source
    checks_run = check_pair_graph("ranking", spec.check_modes(), pairs[0], source=where)
    clock.lap("check_graph")
    opts = spec.ranking
    fit = fit_folded_task(got.fold.table, opts, pairs)
    clock.lap("fit")
    tables = fit.tables
    metrics: dict[str, Any] = {"n_items": len(tables["ranking"]), "n_components": checks_run.report.n_components}
    checks = {"validation": spec.checks.validation, "item_components": checks_run.report.n_components}
    return finish_run(
        spec,
        run_id,
        {"comparisons": session.folded_dataset()},
        tables,
        checks={**checks, **inputs.validation},
        metrics=metrics,
        clock=clock,
        extra={
            "method": opts.outliers,
            "fit": fit.params,
            "cache": {"enabled": False, "why": "a folded run fits on the increment store's fold every run"},
        },
        session=session,
    )


def _ranking_inline(spec: RankingPipeline, run_id: str, session: IncrementSession) -> dict[str, Any]:
    """The ranking job on comparisons the flow reads whole (assembled from the increment store when incremental)."""
    clock = Clock()
    inputs = load_inputs(spec, session=session)
    clock.lap("ingest_validate")
    cmp = inputs["comparisons"]
    # the check encodes the table into the comparison graph the fit takes (once per run); the cache key stays the
    # table's (fit_data), of which the graph is a function
    checked = check_comparisons("ranking", spec.check_modes(), cmp.df, source=cmp.source)
    graph = checked.checks.report
    clock.lap("check_graph")
    opts = spec.ranking
    fit_input = cmp.df if opts.outliers == "trimmed" else checked.graph  # the trimmed rule reads the table
    fitted, cache = fit_step(spec, fit_ranking_task, fit_data(spec, {"comparisons": cmp.df}), fit_input, opts)
    clock.lap("fit")
    tables = fitted["tables"]
    metrics: dict[str, Any] = {"n_items": len(tables["ranking"]), "n_components": graph.n_components}
    if "outliers" in tables:
        metrics["n_outliers"] = int(tables["outliers"]["is_outlier"].sum())
        metrics["outlier_share"] = metrics["n_outliers"] / max(len(cmp.df), 1)
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
        session=session,
    )


def _partitioned_ranking(spec: RankingPipeline, run_id: str) -> dict[str, Any]:
    """The ranking job on a Parquet dataset read by the Dask workers: the flow holds edge sums and θ, never the rows.

    Passes (docs/scale.md): list the files; read + validate + canonical copy on the workers; the item dictionary;
    per-pair sums → the Laplacian and divergence → θ in the flow; with ``outliers: trimmed`` the trimming passes
    (θ and σ broadcast, sums and histograms back); a last pass writes each file's flagged rows (``outliers``) or
    every row with its residual (``residuals``, ``outliers: none``) as Parquet parts.
    """
    refuse_erasures_on_workers(spec)
    clock = Clock()
    opts = spec.ranking
    set_pipeline(spec.name)
    scratch_root = scratch_folder(spec.runner.scratch_dir)
    with (
        run_scratch(scratch_root) as scratch,
        runner_executor(spec.runner) as executor,
    ):
        parts = list_dataset(spec, spec.comparisons, "comparisons")
        copied = copy_on_workers(
            parts,
            "comparisons",
            spec.comparisons,
            executor,
            str(Path(scratch) / "copies"),
            spec.checks.validation,
            keep=keep_local,
        )
        clock.lap("ingest_validate")
        connectivity = spec.checks.connectivity_for("ranking")
        rows = "residuals" if opts.outliers == "none" else "outliers"
        fit = fit_ranking_on_workers(
            copied,
            executor,
            opts,
            str(Path(scratch) / "rows"),
            allow_disconnected=connectivity == "warn",
            table=rows,
            part_run_id=run_id if spec.output.layout == "hive" else None,
        )
        clock.lap("fit")
        tables = {"ranking": fit.ranking, "components": fit.diagnostics}
        metrics: dict[str, Any] = {"n_items": len(fit.ranking), "n_components": fit.graph.n_components}
        if opts.outliers != "none":
            tables["annotators"] = fit.annotators
            metrics["n_outliers"] = fit.n_outliers
            metrics["outlier_share"] = fit.n_outliers / max(fit.n_rows, 1)
        checks = {
            "validation": "passed" if all(r.success for r in copied.reports) else "failed; the run went on",
            "validation.comparisons": f"{sum(r.success for r in copied.reports)} of {len(copied.reports)} files "
            f"passed ({copied.dataset.n_rows} rows)",
            "item_components": fit.graph.n_components,
        }
        params = {**fit.params, "sigma": fit.sigma, "threshold": fit.threshold, "passes": fit.passes}
        return finish_run(
            spec,
            run_id,
            {"comparisons": copied.dataset},
            tables,
            checks=checks,
            metrics=metrics,
            clock=clock,
            extra={
                "method": opts.outliers,
                "fit": params,
                "cache": {"enabled": False, "why": "a partitioned input is fitted on the workers every run"},
                "partitioned": {"files": copied.dataset.n_files, "passes": fit.passes},
            },
            datasets={rows: [p for p in fit.row_files if p]},
        )
