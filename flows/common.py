"""Steps every job flow shares: ingest + validate the declared inputs, then manifest + atomic export."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import get_run_logger
from prefect.runtime import flow_run

from crowdflow.contracts.errors import SpecError
from crowdflow.contracts.tables import RUNS_TABLE
from crowdflow.memory import give_back
from crowdflow.report import REPORT_FILE
from crowdflow.report.trends import flagged_share
from crowdflow.spec import JOB_OPTIONS, PipelineBase, check_name
from crowdflow.storage.fingerprints import fit_key
from crowdflow.storage.held_tables import HeldTable, released
from crowdflow.storage.increment_inputs import new_rows_source
from crowdflow.storage.io import LoadedTable
from crowdflow.storage.manifest import build_manifest, input_record, new_run_id
from crowdflow.storage.runs import run_history
from crowdflow.storage.warehouse import redact_url
from flows.heartbeat import start_beating
from flows.incremental import IncrementSession
from schemas.validation import ValidationReport
from tasks.artifacts import report_artifacts, set_pipeline
from tasks.export import export_run
from tasks.incremental import ingest_incremental
from tasks.ingest import ingest
from tasks.report import render_report_task
from tasks.validate import check_table, validate
from tasks.warehouse import load_warehouse


@dataclass
class Clock:
    """Wall time per pipeline step, recorded into the manifest."""

    timings: dict[str, float] = field(default_factory=dict)
    _t: float = field(default_factory=time.perf_counter)
    _t0: float = field(default_factory=time.perf_counter)

    def lap(self, step: str) -> None:
        """Record the step's wall time and give the memory it freed back to the system (:func:`give_back`), so the
        next step's peak does not stand on this one's freed pages (issue #36, docs/scale.md memory laws)."""
        now = time.perf_counter()
        self.timings[step] = round(now - self._t, 4)
        give_back()
        self._t = time.perf_counter()

    @property
    def total(self) -> float:
        return time.perf_counter() - self._t0


def run_id_for(run_id: str | None) -> str:
    """The given run id (validated: one safe folder name, else ``SpecError``) or a new one.

    Every job flow calls it first: it also starts the flow run's heartbeats when :func:`flows.pipeline.run_spec`
    started the run (:mod:`flows.heartbeat`; otherwise Prefect's own heartbeat thread runs).
    """
    start_beating()
    if run_id is None:
        return new_run_id(str(flow_run.id or "") or None)
    try:
        return check_name(run_id, "run id")
    except ValueError as exc:
        raise SpecError(str(exc)) from None


class Inputs(dict[str, LoadedTable]):
    """A run's validated input tables by kind, and what their validation found (for the manifest's ``checks``)."""

    def __init__(self, tables: dict[str, LoadedTable], validation: dict[str, str]) -> None:
        super().__init__(tables)
        self.validation = validation


def load_inputs(
    spec: PipelineBase,
    prepare: dict[str, Callable[[LoadedTable], LoadedTable]] | None = None,
    allowed: dict[str, dict[str, list[str]]] | None = None,
    session: IncrementSession | None = None,
) -> Inputs:
    """Ingest every declared input, apply an optional per-kind preparation, validate each table.

    Validation failures block (raise) unless ``checks.validation`` is ``warn``. The first step of every job
    flow: from here on the run's artifacts carry the pipeline's name (:func:`tasks.artifacts.artifact_key`).
    With an incremental ``session`` its input is assembled from the increment store plus the new files (only
    the new files' rows are validated, by the rules about each row); every input drops the rows of erased workers.
    """
    set_pipeline(spec.name)
    tables: dict[str, LoadedTable] = {}
    checked: dict[str, LoadedTable] = {}
    streamed: dict[str, list[ValidationReport]] = {}
    for kind, src in spec.inputs().items():
        if session is not None and session.enabled and kind == session.kind:
            per_file: list[ValidationReport] = []

            def check(df: pd.DataFrame, path: str, kind: str = kind, into: list[ValidationReport] = per_file) -> None:
                table = LoadedTable(df.reset_index(drop=True), path, "", "parquet")
                into.append(check_table(table, kind, spec.checks.validation, (allowed or {}).get(kind), False))
                del table, df
                # Great Expectations leaves each validation's context in reference cycles that hold the frame
                # (~60 MB per 10^6 rows): collected here, a first run over 100 such files stays at one file's rows
                gc.collect()

            # a folded run validates each new file as it reads it and keeps its sums, not its rows
            got = ingest_incremental(
                spec, src, kind, str(session.folder), session.state, session.backfill, session.rule,
                check if session.streams else None,
            )  # fmt: skip
            session.assembled = got
            tables[kind] = got.table
            if got.rows_read is not None:
                streamed[kind] = per_file
            else:
                where = new_rows_source(got.table.source, got.read)
                checked[kind] = LoadedTable(got.new_rows.reset_index(drop=True), where, "", "parquet")
        else:
            table = ingest(spec, src, kind)
            tables[kind] = table if session is None else session.without_erased(table, kind)
    for kind, prep in (prepare or {}).items():
        if kind in tables:
            tables[kind] = prep(tables[kind])
    found: dict[str, str] = {}
    any_failed = False
    for kind, reports in streamed.items():
        if not reports:
            found[f"validation.{kind}"] = "no new rows (every file from the increment store)"
            continue
        n_exp = sum(r.n_expectations for r in reports)
        n_failed = sum(len(r.failures) for r in reports)
        any_failed = any_failed or n_failed > 0
        found[f"validation.{kind}"] = (
            f"{n_exp - n_failed} of {n_exp} expectations passed ({sum(r.n_rows for r in reports)} rows"
            + (f"; {len(reports)} files validated one by one)" if len(reports) > 1 else ")")
        )
    for kind, table in tables.items():
        if kind in streamed:
            continue
        if kind in checked:
            if checked[kind].n_rows == 0:
                found[f"validation.{kind}"] = "no new rows (every file from the increment store)"
                continue
            table = checked[kind]
        whole = kind not in checked
        report = validate(table, kind, spec.checks.validation, (allowed or {}).get(kind), whole)
        n_failed = len(report.failures)
        any_failed = any_failed or n_failed > 0
        found[f"validation.{kind}"] = (
            f"{report.n_expectations - n_failed} of {report.n_expectations} expectations passed ({report.n_rows} rows)"
        )
    overall = "failed; the run went on (checks.validation: warn)" if any_failed else "passed"
    return Inputs(tables, {"validation": overall, **found})


def fit_step(
    spec: PipelineBase, fit_task: Any, fit_input: tuple[Any, dict[str, Any]], /, *args: Any, **kwargs: Any
) -> tuple[Any, dict[str, Any]]:
    """Run a fit task under the spec's cache settings; return its result and the manifest's ``cache`` record.

    ``fit_input`` is :func:`flows.pipeline.fit_data`: what the fit receives and the other settings it reads. The
    key (:func:`crowdflow.storage.fingerprints.fit_key`) hashes those, the job's options, where the fit runs (runner
    kind and address) and the code's identity. With ``cache.enabled: false`` the fit is computed anew (and
    refreshes the cache). An answer from the cache is logged with the flow run that computed it.
    """
    data, settings = fit_input
    options = getattr(spec, JOB_OPTIONS[spec.job])
    key = fit_key(spec.job, data, options, (spec.runner.kind, spec.runner.address), **settings)
    task = fit_task.with_options(
        cache_expiration=timedelta(days=spec.cache.expiration_days), refresh_cache=not spec.cache.enabled
    )
    fitted = task(*args, fingerprint=key, **kwargs)
    here = str(flow_run.id) if flow_run.id else None
    hit = fitted.flow_run_id is not None and fitted.flow_run_id != here
    record = {
        "enabled": spec.cache.enabled,
        "key": key,
        "hit": hit,
        "computed_in_flow_run": fitted.flow_run_id,
        "computed_at": fitted.computed_at,
    }
    if hit:
        get_run_logger().info(
            "fit answered from cache (computed in flow run %s at %s); cache.enabled: false recomputes it",
            fitted.flow_run_id,
            fitted.computed_at,
        )
    return fitted.result, record


def finish_run(
    spec: PipelineBase,
    run_id: str,
    inputs: Mapping[str, Any],
    tables: Mapping[str, pd.DataFrame | HeldTable],
    *,
    checks: dict[str, Any],
    metrics: dict[str, Any],
    clock: Clock,
    extra: dict[str, Any] | None = None,
    datasets: dict[str, list[str]] | None = None,
    session: IncrementSession | None = None,
) -> dict[str, Any]:
    """Build the manifest, render report.html, export all tables and the report atomically, log the run.

    ``datasets`` are tables the workers wrote as Parquet parts (a partitioned run): moved into the run folder by
    the export, never loaded here. A :class:`~crowdflow.storage.held_tables.HeldTable` in ``tables`` is a table a
    Dask worker holds: the report is rendered there and the worker writes it for the export (then it is released).
    Returns the flow's summary: ``run_id``, ``run_dir`` and ``metrics``.
    """
    with released(tables):  # a table a Dask worker holds is freed however the run ends
        if isinstance(inputs, Inputs):  # what validation found; the flows' "validation" entry may hold the setting
            checks = {**checks, **inputs.validation}
        in_memory = {k: v for k, v in tables.items() if isinstance(v, pd.DataFrame)}
        share = flagged_share(
            spec.job, in_memory, metrics
        )  # one number per run for the report's trends (and runs table)
        if share is not None:
            metrics = {**metrics, "flagged_share": share}
        manifest = build_manifest(
            run_id=run_id,
            pipeline=spec.name,
            job=spec.job,
            spec=spec.model_dump(mode="json"),
            inputs=[
                input_record(
                    kind,
                    t.source if t.query or "://" in t.source else str(Path(t.source).resolve()),
                    t.sha256,
                    t.n_rows,
                    t.format,
                    t.query,
                )
                for kind, t in inputs.items()
            ],
            checks=checks,
            metrics=metrics,
            timings=dict(clock.timings),
            flow_run_id=str(flow_run.id) if flow_run.id else None,
            extra={
                "check_settings": spec.check_settings(),
                **(extra or {}),
                **({"incremental": session.record()} if session is not None else {}),
            },
        )
        history = run_history(spec.output_dir() / spec.name) if spec.output.report else []
        outcome = render_report_task(manifest, tables, spec.output.report, history)
        clock.lap("report")
        manifest["report"] = outcome.record
        manifest["timings"]["report"] = clock.timings["report"]
        files = {REPORT_FILE: outcome.report.html.encode("utf-8")} if outcome.report is not None else None
        wh = spec.output.warehouse
        if wh is not None:  # the target, recorded before the load (which runs after the export); never a password
            manifest["warehouse"] = {
                "connection": redact_url(wh.connection),
                "mode": wh.mode,
                "schema": wh.db_schema,
                "tables": {
                    name: f"{wh.db_schema}.{wh.prefix}{name}" if wh.db_schema else wh.prefix + name
                    for name in [*tables, *(datasets or {}), RUNS_TABLE]
                },
            }
        run_dir = export_run(
            str(spec.output_dir()), spec.name, run_id, tables, manifest, spec.output.layout, files, datasets
        )
        if session is not None:  # after the export: a run that fails leaves the store as it was
            session.commit(run_id)
        if outcome.report is not None:
            report_artifacts(outcome.report, Path(run_dir) / REPORT_FILE, spec.output_dir())
        if wh is not None:
            load_warehouse(run_dir, run_id, wh, spec.base_dir)
        get_run_logger().info("run %s completed in %.2f s → %s", run_id, clock.total, Path(run_dir).resolve())
        return {"run_id": run_id, "run_dir": run_dir, "metrics": metrics}
