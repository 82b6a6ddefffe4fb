"""The closed loop: latest skills run + open tasks + available workers → the next batch's assignment."""

from __future__ import annotations

from typing import Any

from prefect import flow

from crowdflow.assignment import output_tables
from crowdflow.spec import NextBatchPipeline
from flows.common import Clock, finish_run, fit_step, load_inputs, run_id_for
from flows.pipeline import fit_data
from tasks.fit import fit_next_batch_task
from tasks.ingest import load_skills_run


@flow(name="crowdflow-next-batch", log_prints=True)
def next_batch_flow(spec: NextBatchPipeline, run_id: str | None = None) -> dict[str, Any]:
    """Assign open tasks to available workers using the newest completed skills run.

    Inputs: ``open_tasks`` (task), ``workers`` (worker[, capacity]) and ``skills_run`` (a skills pipeline
    output folder). Scheduled after the skills deployment, each run turns fresh skills and consensus
    confidences into the next batch: uncertain tasks go to skilled workers, within the budget and caps.
    Outputs: ``assignment``, ``worker_load``, ``task_load``, ``candidates``.
    """
    run_id = run_id_for(run_id)
    clock = Clock()
    inputs = load_inputs(spec)
    skills_run = load_skills_run(spec.skills_run_path(), spec.max_skills_run_age_hours)
    clock.lap("ingest_validate")
    opts = spec.assignment
    frames = {k: inputs[k].df for k in ("open_tasks", "workers")}
    fit_input = fit_data(spec, frames, skills_run=skills_run)
    out, cache = fit_step(spec, fit_next_batch_task, fit_input, *fit_input[0], opts)
    clock.lap("fit")
    result = out.result
    tables = output_tables(out)
    metrics = {
        "n_assigned": int(result.n_selected),
        "objective": float(result.objective),
        "certified": bool(result.certified),
        "n_candidates": len(out.candidates),
        "n_workers_without_skill": int(out.n_workers_without_skill),
    }
    return finish_run(
        spec,
        run_id,
        inputs,
        tables,
        checks={"validation": spec.checks.validation},
        metrics=metrics,
        clock=clock,
        extra={
            "method": "tvcs",
            "skills_run": {
                "run_id": skills_run["run_id"],
                "path": skills_run["run_dir"],
                "age_hours": skills_run["age_hours"],
            },
            "cache": cache,
        },
    )
