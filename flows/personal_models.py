"""The personal-models job: ingest → validate → agent-graph checks → DJAM (or a reference) → export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from prefect import flow

from crowdflow.contracts.errors import DegenerateInput
from crowdflow.personal_models import output_tables
from crowdflow.spec import PersonalModelsPipeline
from flows.common import Clock, finish_run, fit_step, load_inputs, run_id_for
from flows.pipeline import fit_data
from tasks.artifacts import set_pipeline
from tasks.check_graph import check_graph
from tasks.fit import fit_personal_models_task
from tasks.ingest import ingest
from tasks.partitioned import copy_on_workers, fit_personal_models_on_workers, list_dataset, scan_agents_on_workers
from tasks.runners import run_scratch, runner_executor, scratch_folder
from tasks.validate import validate


@flow(name="crowdflow-personal-models", log_prints=True)
def personal_models_flow(spec: PersonalModelsPipeline, run_id: str | None = None) -> dict[str, Any]:
    """One model per agent, smoothed over a weighted agent graph (``agents`` + ``edges`` inputs).

    Outputs: ``personal_models`` (agent, one column per parameter, residual, component, n_samples) and
    ``convergence`` (rounds, KKT norm, certified error bound).
    """
    run_id = run_id_for(run_id)
    if spec.partitioned_input() is not None:
        return _partitioned_personal_models(spec, run_id)
    clock = Clock()
    inputs = load_inputs(spec)
    clock.lap("ingest_validate")
    agents, edges = inputs["agents"], inputs["edges"]
    tables = {"agents": agents.df, "edges": edges.df}
    checked = check_graph("personal_models", spec.check_modes(), tables, source=edges.source)
    report = checked.report
    clock.lap("check_graph")
    opts = spec.personal_models
    fit_input = fit_data(spec, {"agents": agents.df, "edges": edges.df})
    try:
        result, cache = fit_step(
            spec,
            fit_personal_models_task,
            fit_input,
            agents.df,
            edges.df,
            opts,
            fit_input[1]["allow_disconnected"],
            runner=spec.runner,
        )
    except DegenerateInput as exc:  # the data admit no fit: say which file, exit 2
        raise DegenerateInput(f"{agents.source}: {exc}", exc.reason) from None
    clock.lap("fit")
    outputs = output_tables(result)  # the same tables as crowdflow.personal_models(agents, edges)
    metrics = _metrics(result)
    checks = {"validation": spec.checks.validation, "agent_components": report.n_components}
    return finish_run(
        spec,
        run_id,
        inputs,
        outputs,
        checks=checks,
        metrics=metrics,
        clock=clock,
        extra={"method": opts.method, "loss": opts.loss, "cache": cache},
    )


def _metrics(result: Any) -> dict[str, Any]:
    return {
        "converged": bool(result.converged),
        "iterations": int(result.iterations),
        "kkt_norm": float(result.kkt_norm),
        "error_bound": float(result.error_bound),
    }


def _partitioned_personal_models(spec: PersonalModelsPipeline, run_id: str) -> dict[str, Any]:
    """The job on an agents dataset read by the Dask workers: the flow holds the graph and the models, no sample.

    Passes (docs/scale.md): list the files; read + validate + canonical copy on the workers; the agent ids; the
    agent-graph checks on the edges (read here: the graph is the flow's); blocked DJAM whose blocks read their
    samples and build their losses on the workers (crowdflow/personal_models/partitioned.py).
    """
    clock = Clock()
    opts = spec.personal_models
    set_pipeline(spec.name)
    edges = ingest(spec, spec.edges, "edges")
    edges_report = validate(edges, "edges", spec.checks.validation, None)
    scratch_root = scratch_folder(spec.runner.scratch_dir)
    with (
        run_scratch(scratch_root) as scratch,
        runner_executor(spec.runner) as executor,
    ):
        parts = list_dataset(spec, spec.agents, "agents")
        copied = copy_on_workers(
            parts, "agents", spec.agents, executor, str(Path(scratch) / "copies"), spec.checks.validation
        )
        clock.lap("ingest_validate")
        source = copied.dataset.source
        try:
            scanned = scan_agents_on_workers(copied.copies, executor, opts)
            tables = {"agents": pd.DataFrame({"agent": scanned[0]}), "edges": edges.df}
            checked = check_graph("personal_models", spec.check_modes(), tables, source=edges.source)
            clock.lap("check_graph")
            allow = spec.checks.connectivity_for("personal_models") == "warn"
            result = fit_personal_models_on_workers(
                copied.copies, executor, edges.df, opts, str(Path(scratch) / "blocks"), scanned, allow
            )
        except DegenerateInput as exc:  # the data admit no fit: say which dataset, exit 2
            raise DegenerateInput(f"{source}: {exc}", exc.reason) from None
        clock.lap("fit")
    checks: dict[str, Any] = {
        "validation": "passed"
        if all(r.success for r in copied.reports) and edges_report.success
        else "failed; the run went on",
        "validation.agents": f"{sum(r.success for r in copied.reports)} of {len(copied.reports)} files passed "
        f"({copied.dataset.n_rows} rows)",
        "validation.edges": f"{edges_report.n_expectations - len(edges_report.failures)} of "
        f"{edges_report.n_expectations} expectations passed ({edges_report.n_rows} rows)",
        "agent_components": checked.report.n_components,
    }
    meta = result.metadata
    return finish_run(
        spec,
        run_id,
        {"agents": copied.dataset, "edges": edges},
        output_tables(result),
        checks=checks,
        metrics=_metrics(result),
        clock=clock,
        extra={
            "method": opts.method,
            "loss": opts.loss,
            "cache": {"enabled": False, "why": "a partitioned input is fitted on the workers every run"},
            "partitioned": {
                "files": copied.dataset.n_files,
                "blocks": meta["n_blocks"],
                "boundary_agents": meta["boundary_agents"],
                "passes": meta["passes"],
            },
        },
    )
