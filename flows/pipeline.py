"""Run any pipeline spec by composing the per-job flows; ``check_spec`` validates without running."""

from __future__ import annotations

from typing import Any

from crowdflow.errors import SpecError
from crowdflow.spec import PipelineSpec, check_name


def run_spec(spec: PipelineSpec, run_id: str | None = None) -> dict[str, Any]:
    """Run the flow of ``spec.job`` and return its summary (``run_id``, ``run_dir``, ``metrics``)."""
    check_locations(spec)
    if run_id is not None:
        try:
            check_name(run_id, "run id")
        except ValueError as exc:
            raise SpecError(str(exc)) from None
    if spec.job == "skills":
        from flows.skills import skills_flow

        return skills_flow(spec, run_id)
    if spec.job == "ranking":
        from flows.ranking import ranking_flow

        return ranking_flow(spec, run_id)
    if spec.job == "personal_rankings":
        from flows.personal_rankings import personal_rankings_flow

        return personal_rankings_flow(spec, run_id)
    if spec.job == "personal_models":
        from flows.personal_models import personal_models_flow

        return personal_models_flow(spec, run_id)
    if spec.job == "assignment":
        from flows.assignment import assignment_flow

        return assignment_flow(spec, run_id)
    if spec.job == "next_batch":
        from flows.next_batch import next_batch_flow

        return next_batch_flow(spec, run_id)
    raise SpecError(f"job '{spec.job}' has no flow")


def check_locations(spec: PipelineSpec) -> None:
    """Inputs and outputs never overlap, so a run can never overwrite, list or clean up its inputs.

    Refused: the output folder is an input file's folder, is an input Parquet folder or lies inside
    one (the dataset would pick up run files), is an input file; an input lies inside the output
    folder (results and data are kept apart). An output folder next to the inputs (a sibling or a
    sub-folder of a file's folder, e.g. ``./crowdflow-out`` beside ``labels.csv``) is fine.
    """
    out = spec.output_dir().resolve()
    for src in spec.inputs().values():
        if src.is_query:
            continue
        p = spec.path_of(src).resolve()
        folder = p if p.is_dir() else p.parent
        if out in (folder, p) or (p.is_dir() and p in out.parents):
            raise SpecError(f"output dir {out} is the input folder of {p}; choose another output.dir")
        if out in p.parents:
            raise SpecError(
                f"input {p} is inside the output dir {out}; keep inputs out of the output folder "
                "(move the input or choose another output.dir)"
            )


def check_spec(spec: PipelineSpec) -> list[str]:
    """Read, validate and graph-check the spec's inputs without Prefect; raise on blocking failures.

    Returns the report lines printed by ``crowdflow validate``.
    """
    from crowdflow.graphs import worker_graph_report
    from crowdflow.labels import deduplicate, encode_labels
    from crowdflow.tables import INPUTS
    from schemas.validation import require_valid, validate_frame
    from tasks.sources import read_source

    check_locations(spec)
    lines = [f"spec {spec.name}: ok (job {spec.job})"]
    if spec.job != "skills" or spec.labels is None:
        tables = {}
        for kind, src in spec.inputs().items():
            t = read_source(spec, src, kind)
            rep = validate_frame(t.df, INPUTS[kind], t.source)
            if spec.checks.validation == "block":
                require_valid(rep)
            lines.append(f"{kind} {t.source}: {rep.n_rows} rows, " + ("passed" if rep.success else "FAILED"))
            tables[kind] = t
        lines += _graph_lines(spec, tables)
        return lines
    labels = read_source(spec, spec.labels, "labels")
    df = labels.df
    if spec.skills.duplicates != "error":
        df, dropped = deduplicate(df, spec.skills.duplicates)
        lines.append(f"dropped {dropped} duplicate (task, worker) rows")
    allowed = {"label": spec.skills.classes} if spec.skills.classes else None
    report = validate_frame(df, INPUTS["labels"], labels.source, allowed)
    if spec.checks.validation == "block":
        require_valid(report)
    lines.append(
        report.message()
        if not report.success
        else f"labels {labels.source}: {report.n_rows} rows, {report.n_expectations} expectations passed"
    )
    if spec.truth is not None:
        truth = read_source(spec, spec.truth, "truth")
        tr = validate_frame(truth.df, INPUTS["truth"], truth.source)
        if spec.checks.validation == "block":
            require_valid(tr)
        lines.append(f"truth {truth.source}: {tr.n_rows} rows, " + ("passed" if tr.success else "FAILED"))
    graph = worker_graph_report(encode_labels(df.dropna(subset=["task", "worker", "label"]), spec.skills.classes))
    counts = graph.components["status"].value_counts().to_dict()
    lines.append(f"worker graph: {len(graph.components)} components {counts}")
    return lines


def _graph_lines(spec: PipelineSpec, tables: dict[str, Any]) -> list[str]:
    """The job's graph checks, as a run would do them (blocking ones raise ``GraphCheckFailed``)."""
    from crowdflow.errors import GraphCheckFailed
    from crowdflow.graphs import agent_graph_problems, agent_graph_report, comparison_graph_report

    mode = spec.checks.connectivity_for(spec.job)
    if spec.job in ("ranking", "personal_rankings"):
        cmp = tables["comparisons"]
        rep = comparison_graph_report(cmp.df)
        parts = rep.n_user_item_components if spec.job == "personal_rankings" else rep.n_components
        what = "annotator–item graph" if spec.job == "personal_rankings" else "item comparison graph"
        if parts > 1 and mode == "block":
            raise GraphCheckFailed(f"{cmp.source}: the {what} has {parts} connected components", "connectivity")
        return [f"{what}: {parts} component(s)"]
    if spec.job == "personal_models":
        agents, edges = tables["agents"], tables["edges"]
        agent_rep = agent_graph_report(edges.df, agents.df["agent"].astype(str).unique())
        problems = agent_graph_problems(agent_rep, require_connected=mode == "block")
        if problems:
            raise GraphCheckFailed(f"{edges.source}: " + "; ".join(problems), "agent_graph")
        return [f"agent graph: {agent_rep.n_agents} agents, {agent_rep.n_components} component(s)"]
    return []
