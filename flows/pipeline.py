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
    """Read, validate and graph-check the spec's inputs as a run would, without Prefect and without writing.

    The same steps as the job's flow up to the fit, through the same functions: the readers
    (:func:`tasks.sources.read_source`), the skills job's duplicate policy, the table contracts' suites
    (:func:`schemas.validation.validate_frame`) and the graph checks (:func:`crowdflow.checks.graph_checks`).
    Blocking failures raise as they would in the run. Returns the report lines ``crowdflow validate`` prints.
    """
    from crowdflow.checks import graph_checks
    from crowdflow.labels import deduplicate, encode_labels
    from crowdflow.tables import INPUTS
    from schemas.validation import require_valid, validate_frame
    from tasks.sources import read_source

    check_locations(spec)
    lines = [f"spec {spec.name}: ok (job {spec.job})"]
    tables = {}
    for kind, src in spec.inputs().items():
        t = read_source(spec, src, kind)
        df = t.df
        if kind == "labels" and spec.skills.duplicates != "error":
            df, dropped = deduplicate(df, spec.skills.duplicates)
            lines.append(f"dropped {dropped} duplicate (task, worker) rows")
        allowed = {"label": spec.skills.classes} if kind == "labels" and spec.skills.classes else None
        report = validate_frame(df, INPUTS[kind], t.source, allowed)
        if spec.checks.validation == "block":
            require_valid(report)
        lines.append(
            report.message()
            if not report.success
            else f"{kind} {t.source}: {report.n_rows} rows, {report.n_expectations} expectations passed"
        )
        tables[kind] = (df, t.source)
    frames = {kind: df for kind, (df, _) in tables.items()}
    lm = None
    if spec.job == "skills":
        lm = encode_labels(frames["labels"].dropna(subset=["task", "worker", "label"]), spec.skills.classes)
    checks = graph_checks(spec.job, frames, spec.checks.modes(spec.job), lm)
    if checks is not None:
        source = tables["edges" if spec.job == "personal_models" else next(iter(tables))][1]
        checks.raise_if_blocking(source)
        lines.append(f"{checks.summary}; " + ", ".join(f"{k} {v}" for k, v in checks.results.items()))
        lines += [f"warning: {w}" for w in checks.warnings]
    return lines
