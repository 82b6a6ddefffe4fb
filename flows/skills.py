"""The skills/consensus job: ingest → validate → check worker graph → fit → export.

Nothing is written unless every blocking step passes; the export is one atomic step at the end.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from crowdflow.contracts.errors import SpecError
from crowdflow.labels import answered, deduplicate, encode_labels
from crowdflow.metrics import SkillsReview, review_skills
from crowdflow.skills import majority_vote, output_metrics, output_tables
from crowdflow.skills.folded_parts import link_consensus
from crowdflow.spec import SkillsPipeline
from crowdflow.storage.io import LoadedTable
from flows.common import Clock, finish_run, fit_step, load_inputs, run_id_for
from flows.incremental import IncrementSession, folded_run, increment_session, refuse_erasures_on_workers
from flows.pipeline import fit_data
from tasks.artifacts import set_pipeline
from tasks.check_graph import check_graph
from tasks.fit import fit_skills_task
from tasks.folded import fit_skills_folded_task
from tasks.ingest import ingest
from tasks.partitioned import encode_on_workers, fit_on_workers, list_dataset, split_on_workers
from tasks.runners import run_scratch, runner_executor, scratch_folder
from tasks.validate import validate

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
    "crowdkit_method",
    "crowdkit_params",
    "crowdkit_version",
    "auto_choice",
    "auto",
    "auto_gold",
    "gold_fold_choices",
    "gold_in_fit",
    "gold_folds",
    "n_gold_in_fit",
    "accuracy_scoring",
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
    run_id = run_id_for(run_id)
    if spec.skills.gold_in_fit and spec.truth is None:  # before any step
        raise SpecError("skills.gold_in_fit uses the known answers: give them as the truth input (task, label)")
    folded = folded_run(spec)
    if spec.partitioned_input() is not None and not folded:
        if spec.skills.gold_in_fit:  # before any step
            raise SpecError(
                "skills.gold_in_fit runs on labels the flow reads whole; this spec reads them partition by partition "
                "on Dask (a Parquet folder or URL with runner.kind: dask): drop gold_in_fit or give a file"
            )
        return _partitioned_skills(spec, run_id)
    with increment_session(spec) as session:
        if folded:
            return _skills_folded(spec, run_id, session)
        return _skills_inline(spec, run_id, session)


def _skills_folded(spec: SkillsPipeline, run_id: str, session: IncrementSession) -> dict[str, Any]:
    """Majority vote on the increment store's label fold and worker fold: the new files read, and of the stored
    rows only those of the old tasks whose contribution moves (:mod:`crowdflow.skills.folded`).

    Inline and on Dask alike (``runner.kind: dask``), the new files are read, validated and summed in the flow
    process: a day is one or a few files, and what the vote needs of them is its per-task counts; the few stored
    rows re-read are filtered by task from the files whose sums list those tasks. The state (label fold, worker
    fold) is committed after the export, inside the store's lock (docs/how-to/incremental.md).
    """
    clock = Clock()
    opts = spec.skills
    allowed = {"labels": {"label": opts.classes}} if opts.classes else None
    inputs = load_inputs(spec, allowed=allowed, session=session)
    clock.lap("ingest_validate")
    got = session.assembled
    assert got is not None and got.fold is not None
    truth = inputs.get("truth")
    gold = None if truth is None else truth.df["task"].dropna().astype(str).unique().tolist()
    run = fit_skills_folded_task(str(session.folder), session.state, got, opts, gold)
    clock.lap("fit")
    result = run.fit.result
    checked = check_graph("skills", spec.check_modes(), lm=run.fit.report, source=got.table.source)
    clock.lap("check_graph")
    session.more_folds, session.fold_detail = run.records, {"workers": run.account}
    classes = result.metadata["classes"]
    cons = result.consensus
    metrics = output_metrics(result, None if truth is None else truth.df, 0, classes, None if truth is None else cons)
    if truth is not None:
        _log_gold(metrics, classes, truth.source)
    if truth is None:  # majority vote changes no task against majority vote (what review_skills finds in O(rows))
        n_tasks = len(cons) if run.parts is None else run.parts.n_tasks
        review = SkillsReview({}, {"n_changed_vs_majority": 0},
                              {"n_changed_vs_majority": 0, "n_tasks": n_tasks, "changed_vs_majority": []})  # fmt: skip
    else:  # the gold tables from the rows of the gold tasks (stored ones re-read: counted in stored_rows_read)
        assert run.gold_rows is not None  # asked for with the gold tasks
        review = review_skills(run.gold_rows, cons, truth.df)
    metrics.update(review.metrics)
    comps = checked.report.components
    checks = {
        "validation": "passed" if spec.checks.validation == "block" else "warn",
        "worker_components": len(comps),
        "bipartite_components": int((comps["status"] == "bipartite_component").sum()),
        "isolated_workers": int((comps["status"] == "isolated").sum()),
    }
    tables = output_tables(result, checked.report, review)
    datasets = None
    if run.parts is not None:  # the consensus in parts: the touched ones new, the others hard links of the store's
        tables.pop("consensus")
        datasets = {"consensus": link_consensus(session.folder, run.parts, session.folder / f".publish-{run_id}")}
        if run.parts.n_tasks:
            metrics["flagged_share"] = float(metrics.get("n_changed_vs_majority", 0)) / run.parts.n_tasks
    fit = {k: v for k, v in result.metadata.items() if k in _FIT_KEYS or k == "folded"}
    try:
        return finish_run(
            spec,
            run_id,
            {"labels": session.folded_dataset(), **({"truth": truth} if truth is not None else {})},
            tables,
            checks={**checks, **inputs.validation},
            metrics=metrics,
            clock=clock,
            extra={
                "method": opts.method,
                "fit": fit,
                "cache": {"enabled": False, "why": "a folded run votes on the increment store's fold every run"},
                "review": review.record,
            },
            session=session,
            datasets=datasets,
        )
    finally:
        if datasets is not None:  # the links a failed export left (a moved one is in the run folder now)
            shutil.rmtree(session.folder / f".publish-{run_id}", ignore_errors=True)


def _skills_inline(spec: SkillsPipeline, run_id: str, session: IncrementSession) -> dict[str, Any]:
    """The skills job on labels the flow reads whole (assembled from the increment store when incremental)."""
    clock = Clock()
    opts = spec.skills
    dropped = {"n": 0}

    def dedupe(table: LoadedTable) -> LoadedTable:
        if opts.duplicates == "error":
            return table
        df, dropped["n"] = deduplicate(table.df, opts.duplicates)
        return replace(table, df=df)

    allowed = {"labels": {"label": opts.classes}} if opts.classes else None
    inputs = load_inputs(spec, prepare={"labels": dedupe}, allowed=allowed, session=session)
    clock.lap("ingest_validate")
    labels, truth = inputs["labels"], inputs.get("truth")

    lm = encode_labels(answered(labels.df), opts.classes)
    checked = check_graph("skills", spec.check_modes(), lm=lm, source=labels.source)
    graph = checked.report
    clock.lap("check_graph")

    gold = truth.df if truth is not None and opts.gold_in_fit else None  # known answers in the fit (and its key)
    result, cache = fit_step(
        spec, fit_skills_task, fit_data(spec, {} if gold is None else {"truth": gold}, lm), lm, graph, opts,
        runner=spec.runner, truth=gold,
    )  # fmt: skip
    clock.lap("fit")

    meta = result.metadata
    # the baseline beside the method's accuracy in the report: majority vote on the same labels (closed form, cheap)
    baseline = majority_vote(lm, opts.tie_break, opts.seed).consensus if truth is not None else None
    metrics = output_metrics(result, truth.df if truth is not None else None, dropped["n"], list(lm.classes), baseline)
    if truth is not None:
        _log_gold(metrics, lm.classes, truth.source)
    comps = graph.components
    checks = {
        "validation": "passed" if spec.checks.validation == "block" else "warn",
        "worker_components": len(comps),
        "bipartite_components": int((comps["status"] == "bipartite_component").sum()),
        "isolated_workers": int((comps["status"] == "isolated").sum()),
    }
    # what people act on: gold-measured worker accuracy and confusion (with truth), changes against majority vote
    # the vote counts from the fit's codes (the same answered rows, one bincount: 0.3 s of a 10^6-label run as text)
    review = review_skills(labels.df, result.consensus, None if truth is None else truth.df, coded=lm)
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
        session=session,
    )


def _log_gold(metrics: dict[str, Any], classes: Any, source: str) -> None:
    logger = get_run_logger()
    if metrics["n_gold_label_unknown"]:
        logger.warning(
            "%d of %d gold tasks have a gold label that is none of the fitted classes [%s]: they can never be "
            "counted right (is the gold spelled differently from the labels?) — %s",
            metrics["n_gold_label_unknown"],
            metrics["n_gold"],
            ", ".join(map(str, classes[:10])),
            source,
        )
    logger.info(
        "accuracy on %d gold tasks: %.4f (error %.4f)", metrics["n_gold"], metrics["accuracy"], metrics["error"]
    )


def _partitioned_skills(spec: SkillsPipeline, run_id: str) -> dict[str, Any]:
    """The skills job on a Parquet dataset read by the Dask workers: the flow holds statistics, never the labels.

    Passes (docs/scale.md): list the files; read + validate + split by task on the workers; encode the buckets
    and merge their per-worker statistics (W×W pair counts for pgd only); the worker-graph check on them; the fit
    (its passes on the workers) writing the consensus as Parquet parts; the export moves the parts into the run
    folder with the other tables.
    """
    refuse_erasures_on_workers(spec)
    clock = Clock()
    opts = spec.skills
    set_pipeline(spec.name)
    truth_table = ingest(spec, spec.truth, "truth") if spec.truth is not None else None
    truth_report = validate(truth_table, "truth", spec.checks.validation, None) if truth_table is not None else None
    scratch_root = scratch_folder(spec.runner.scratch_dir)
    with (
        run_scratch(scratch_root) as scratch,
        runner_executor(spec.runner) as executor,
    ):
        parts = list_dataset(spec, spec.labels, "labels")
        n_buckets = spec.runner.partitions or max(2 * spec.runner.n_workers, len(parts))
        split = split_on_workers(
            parts,
            "labels",
            spec.labels,
            executor,
            str(Path(scratch) / "buckets"),
            n_buckets,
            spec.checks.validation,
            opts.classes,
        )
        clock.lap("ingest_validate")
        enc = encode_on_workers(split, executor, opts)
        checked = check_graph("skills", spec.check_modes(), lm=enc.report, source=split.dataset.source)
        clock.lap("check_graph")
        fit = fit_on_workers(
            enc,
            executor,
            opts,
            str(Path(scratch) / "consensus"),
            truth_table.df if truth_table is not None else None,
            hold_tables=str(scratch),  # the skills table stays on a Dask worker: the flow never holds its rows
        )
        clock.lap("fit")
        result = fit.result
        metrics: dict[str, Any] = {
            "n_ties": result.metadata.get("n_ties", 0),
            "n_fallback_tasks": result.metadata.get("n_fallback_tasks", 0),
            "n_duplicates_dropped": enc.n_dropped,
            "frac_workers_identified": result.metadata.get("frac_workers_identified"),
            **fit.gold,
            **fit.review.metrics,
        }
        if truth_table is not None:
            _log_gold(metrics, enc.classes, truth_table.source)
        comps = checked.report.components
        checks = {
            "validation": "passed" if all(r.success for r in split.reports) else "failed; the run went on",
            "validation.labels": f"{sum(r.success for r in split.reports)} of {len(split.reports)} files passed "
            f"({split.dataset.n_rows} rows)",
            "worker_components": len(comps),
            "bipartite_components": int((comps["status"] == "bipartite_component").sum()),
            "isolated_workers": int((comps["status"] == "isolated").sum()),
        }
        if truth_report is not None:
            passed = truth_report.n_expectations - len(truth_report.failures)
            checks["validation.truth"] = f"{passed} of {truth_report.n_expectations} expectations passed"
        tables: dict[str, Any] = {
            k: v for k, v in output_tables(result, enc.report, fit.review).items() if k != "consensus"
        }
        if fit.held_skills is not None:  # in its place in the tables' order (the report's and the export's)
            tables["skills"] = fit.held_skills
        inputs: dict[str, Any] = {"labels": split.dataset}
        if truth_table is not None:
            inputs["truth"] = truth_table
        fit_meta = {k: v for k, v in result.metadata.items() if k in _FIT_KEYS or k == "partitions"}
        return finish_run(
            spec,
            run_id,
            inputs,
            tables,
            checks=checks,
            metrics=metrics,
            clock=clock,
            extra={
                "method": opts.method,
                "fit": fit_meta,
                "review": fit.review.record,
                "cache": {"enabled": False, "why": "a partitioned input is fitted on the workers every run"},
                "partitioned": {
                    "files": split.dataset.n_files,
                    "buckets": len(enc.buckets),
                    "passes": fit.passes,
                    **({"timing": fit.timing} if fit.timing else {}),
                },
            },
            datasets={"consensus": fit.consensus_parts},
        )
