"""The personal-models job: ingest → validate → agent-graph checks → DJAM (or a reference) → export."""

from __future__ import annotations

from typing import Any

from prefect import flow

from crowdflow.errors import DegenerateInput
from crowdflow.personal_models import output_tables
from crowdflow.spec import PersonalModelsPipeline
from flows.common import Clock, finish_run, fit_step, load_inputs, run_id_for
from flows.pipeline import fit_data
from tasks.check_graph import check_graph
from tasks.fit import fit_personal_models_task


@flow(name="crowdflow-personal-models", log_prints=True)
def personal_models_flow(spec: PersonalModelsPipeline, run_id: str | None = None) -> dict[str, Any]:
    """One model per agent, smoothed over a weighted agent graph (``agents`` + ``edges`` inputs).

    Outputs: ``personal_models`` (agent, one column per parameter, residual, component, n_samples) and
    ``convergence`` (rounds, KKT norm, certified error bound).
    """
    run_id = run_id_for(run_id)
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
    metrics = {
        "converged": bool(result.converged),
        "iterations": int(result.iterations),
        "kkt_norm": float(result.kkt_norm),
        "error_bound": float(result.error_bound),
    }
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
