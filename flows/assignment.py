"""The assignment job: ingest → validate candidates → exact TVCS selection → export."""

from __future__ import annotations

from typing import Any

from prefect import flow

from crowdflow.assignment import output_tables
from crowdflow.contracts.errors import InputError
from crowdflow.spec import AssignmentPipeline
from crowdflow.storage.io import LoadedTable
from flows.common import Clock, finish_run, fit_step, load_inputs, run_id_for
from flows.pipeline import fit_data
from tasks.fit import fit_assignment_task


def _require_cap_rows(caps: LoadedTable, cand: LoadedTable, col: str, option: str) -> None:
    """Without a scalar default every candidate's worker (task) needs a row in the caps table."""
    missing = sorted(set(cand.df[col].astype(str)) - set(caps.df[col].astype(str)))
    if missing:
        raise InputError(
            f"no row for {len(missing)} {col}(s) of {cand.source}, e.g. {missing[:5]}; add them or set "
            f"assignment.{option.replace('-', '_')} (--{option}) as the default for ids the table omits",
            path=caps.source,
            column=col,
        )


@flow(name="crowdflow-assignment", log_prints=True)
def assignment_flow(spec: AssignmentPipeline, run_id: str | None = None) -> dict[str, Any]:
    """Next-batch task–worker assignment from scored candidates (``candidates`` input: task, worker, score).

    Optional inputs ``worker_caps`` (worker, capacity) and ``task_caps`` (task, cap) set per-entity caps;
    the scalar ``assignment.worker_cap`` / ``task_cap`` options are then the default for ids they omit.

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
    caps = {k: inputs[k] for k in ("worker_caps", "task_caps") if k in inputs}
    for kind, col, default in (("worker_caps", "worker", opts.worker_cap), ("task_caps", "task", opts.task_cap)):
        if kind in caps and default is None:
            _require_cap_rows(caps[kind], cand, col, kind[:-1].replace("_", "-"))
    worker_caps = caps["worker_caps"].df if "worker_caps" in caps else None
    task_caps = caps["task_caps"].df if "task_caps" in caps else None
    frames = {kind: t.df for kind, t in inputs.items()}
    result, cache = fit_step(
        spec,
        fit_assignment_task,
        fit_data(spec, frames),
        cand.df,
        opts,
        worker_caps=worker_caps,
        task_caps=task_caps,
    )
    clock.lap("fit")
    tables = output_tables(result)  # the same tables as crowdflow.assign(candidates)
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
        extra={"method": "tvcs", "backend": opts.backend, "cache": cache},
    )
