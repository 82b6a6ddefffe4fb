"""The personal-rankings job: ingest → validate → annotator–item connectivity → low-rank BTL → export."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prefect import flow

from crowdflow.contracts.errors import DegenerateInput
from crowdflow.personal_rankings import output_tables
from crowdflow.spec import PersonalRankingsPipeline
from flows.common import Clock, finish_run, fit_step, load_inputs, run_id_for
from flows.pipeline import fit_data
from tasks.check_graph import check_graph
from tasks.fit import fit_personal_rankings_task


@flow(name="crowdflow-personal-rankings", log_prints=True)
def personal_rankings_flow(spec: PersonalRankingsPipeline, run_id: str | None = None) -> dict[str, Any]:
    """Per-user item scores and ranks from pairwise comparisons (``comparisons`` input).

    Outputs: ``personal_rankings`` (user, item, score, rank; rank 1 = best per user), ``user_factors``,
    ``item_factors`` (the rank-r factors L, R with X = L Rᵀ), ``excluded`` (users/items without usable
    comparisons: listed, never ranked) and a one-row ``fit`` table.
    """
    run_id = run_id_for(run_id)
    clock = Clock()
    inputs = load_inputs(spec)
    clock.lap("ingest_validate")
    cmp = inputs["comparisons"]
    checked = check_graph("personal_rankings", spec.check_modes(), {"comparisons": cmp.df}, source=cmp.source)
    graph = checked.report
    clock.lap("check_graph")
    opts = spec.personal_rankings
    try:
        result, cache = fit_step(
            spec, fit_personal_rankings_task, fit_data(spec, {"comparisons": cmp.df}), cmp.df, opts
        )
    except DegenerateInput as exc:  # the data admit no fit: say which file, exit 2
        raise DegenerateInput(f"{cmp.source}: {exc}", exc.reason) from None
    clock.lap("fit")
    diag = asdict(result.diagnostics)
    tables = output_tables(result)  # the same tables as crowdflow.personal_rankings(comparisons)
    checks = {"validation": spec.checks.validation, "annotator_item_components": graph.n_user_item_components}
    metrics = {k: diag[k] for k in ("rank", "n_users", "n_items", "n_pairs", "n_excluded", "objective")}
    return finish_run(
        spec,
        run_id,
        inputs,
        tables,
        checks=checks,
        metrics=metrics,
        clock=clock,
        extra={"method": opts.method, "fit": diag, "cache": cache},
    )
