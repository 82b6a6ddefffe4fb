"""The assignment job: ingest → validate candidates → exact TVCS selection → export."""

from __future__ import annotations

from typing import Any

from prefect import flow

from crowdflow import __version__
from crowdflow.manifest import content_key
from crowdflow.spec import PipelineSpec
from flows.common import Clock, finish_run, load_inputs, run_id_for
from tasks.fit import fit_assignment_task


@flow(name="crowdflow-assignment", log_prints=True)
def assignment_flow(spec: PipelineSpec, run_id: str | None = None) -> dict[str, Any]:
    """Next-batch task–worker assignment from scored candidates (``candidates`` input: task, worker, score).

    Outputs: ``assignment`` (task, worker, score), ``worker_load`` (worker, n_assigned, capacity, slack),
    ``task_load`` (task, n_assigned, cap, slack). Budget 0, caps 0, no positive score: an explicit empty
    assignment (the empty set is optimal), never an error.
    """
    run_id = run_id_for(run_id)
    clock = Clock()
    inputs = load_inputs(spec)
    clock.lap("ingest_validate")
    cand = inputs["candidates"]
    opts = spec.assignment
    key = content_key(cand.sha256, opts.model_dump(), __version__, "assignment")
    result = fit_assignment_task(cand.df, opts, key)
    clock.lap("fit")
    tables = {"assignment": result.assignment, "worker_load": result.worker_load, "task_load": result.task_load}
    metrics = {
        "n_assigned": int(result.n_selected),
        "objective": float(result.objective),
        "dual_bound": float(result.dual_bound),
        "certified": bool(result.certified),
        "n_excluded": int(result.n_excluded),
    }
    return finish_run(
        spec,
        run_id,
        inputs,
        tables,
        checks={"validation": spec.checks.validation},
        metrics=metrics,
        clock=clock,
        extra={"method": "tvcs", "backend": opts.backend},
    )
