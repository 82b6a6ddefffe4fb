"""Run any pipeline spec by composing the per-job flows; ``check_spec`` validates without running."""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from crowdflow.contracts.errors import SpecError
from crowdflow.labels import LabelMatrix, answered
from crowdflow.spec import NextBatchPipeline, PipelineBase, SkillsPipeline, check_name

# job → the module and name of its flow (imported when a run needs it: validate stays free of Prefect)
JOB_FLOWS: dict[str, tuple[str, str]] = {
    "skills": ("flows.skills", "skills_flow"),
    "ranking": ("flows.ranking", "ranking_flow"),
    "personal_rankings": ("flows.personal_rankings", "personal_rankings_flow"),
    "personal_models": ("flows.personal_models", "personal_models_flow"),
    "assignment": ("flows.assignment", "assignment_flow"),
    "next_batch": ("flows.next_batch", "next_batch_flow"),
}


# What each optional extra must make importable for a run to start (report is optional: without matplotlib the page
# shows the figures' numbers; the warehouse drivers are checked per connection URL by crowdflow.storage.warehouse).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "report": (),
    "dask": ("distributed",),
    "warehouse": ("sqlglot",),
    "crowdkit": ("crowdkit",),
}


def check_installed(spec: PipelineBase) -> None:
    """Refuse (``SpecError``, exit 2) a run whose spec uses an extra this environment lacks, before any step runs.

    Before, a ``runner.kind: dask`` deployment on a worker installed with ``[report]`` only ran its ingest and
    validation and then failed as an "unexpected error" ("needs dask.distributed").
    """
    for extra, why in spec.extras().items():
        missing = [m for m in EXTRA_MODULES.get(extra, ()) if importlib.util.find_spec(m) is None]
        if missing:
            raise SpecError(
                f"{why} needs the '{extra}' extra ({', '.join(missing)} is not installed in this environment): "
                + (
                    f"pip install 'crowdflow[{extra}]'"
                    if extra == "crowdkit"
                    else f"pip install 'crowdflow[deploy]' (every deployment's needs) or 'crowdflow[{extra}]'"
                )
            )


def run_spec(spec: PipelineBase, run_id: str | None = None, *, in_this_flow: bool = False) -> dict[str, Any]:
    """Run the flow of ``spec.job`` and return its summary (``run_id``, ``run_dir``, ``metrics``).

    ``in_this_flow=True`` (the deployment entry point :func:`flows.deploy.run_pipeline`) runs the job's steps
    inside the calling flow run instead of as a subflow, so the run a deployment shows holds the task graph,
    the artifacts and the logs of the pipeline run.
    """
    check_locations(spec)
    check_installed(spec)
    check_partitioned(spec)
    if run_id is not None:
        try:
            check_name(run_id, "run id")
        except ValueError as exc:
            raise SpecError(str(exc)) from None
    module, name = JOB_FLOWS[spec.job]
    job_flow = getattr(importlib.import_module(module), name)
    if in_this_flow:
        summary: dict[str, Any] = job_flow.fn(spec, run_id)
        return summary
    from flows.heartbeat import own_heartbeats

    with own_heartbeats():  # the flow run's heartbeats stop with its work, not up to 1 s later (flows.heartbeat)
        summary = job_flow(spec, run_id)
    return summary


def check_partitioned(spec: PipelineBase) -> None:
    """Refuse (``SpecError``) what a run whose input the Dask workers read cannot do, before any step runs.

    A ranking's outlier search must be one that runs in passes (``trimmed`` or ``none``), personal models must be
    ``djam_blocked``. (Its row outputs, written by the workers as parts, go to either layout: a folder of parts in
    the run folder, or in the table's hive partition.)
    """
    kind = spec.partitioned_input()
    if kind is None:
        return
    skills_method = str(getattr(getattr(spec, "skills", None), "method", ""))
    if skills_method.startswith("crowdkit:"):
        raise SpecError(
            f"skills.method {skills_method} hands every label to crowd-kit in one process, which a run whose Dask "
            "workers read the labels never has: read the labels into the flow (runner.kind inline, or a single "
            "file) or choose a method that runs in passes (ds, onecoin_ds, pgd, mv; docs/scale.md)"
        )
    method = getattr(getattr(spec, "personal_models", None), "method", None)
    if method not in (None, "djam_blocked"):
        raise SpecError(
            f"personal_models.method {method} holds every agent's data in one process, which a run whose Dask workers "
            "read the agents never has: set personal_models.method: djam_blocked (blocks of the agent graph, each "
            "built and run on a worker; docs/scale.md)"
        )
    outliers = getattr(getattr(spec, "ranking", None), "outliers", None)
    if outliers in ("lbi", "hlasso"):
        raise SpecError(
            f"ranking.outliers {outliers} follows a path over every comparison in one process, which a run whose "
            "Dask workers read the comparisons never has: set ranking.outliers: trimmed (one trimmed least-squares "
            "fit and an adaptive threshold, in passes over the files) or none (docs/scale.md)"
        )


def check_locations(spec: PipelineBase) -> None:
    """Inputs and outputs never overlap, so a run can never overwrite, list or clean up its inputs.

    Refused: the output folder is an input file's folder, is an input Parquet folder or lies inside
    one (the dataset would pick up run files), is an input file; an input lies inside the output
    folder (results and data are kept apart). An output folder next to the inputs (a sibling or a
    sub-folder of a file's folder, e.g. ``./crowdflow-out`` beside ``labels.csv``) is fine.
    """
    out = Path(os.path.realpath(spec.output_dir()))  # realpath, not resolve(): a link loop is the reader's error
    for src in spec.inputs().values():
        if src.is_query or src.is_url:  # a remote URL never holds the local output folder
            continue
        p = Path(os.path.realpath(spec.path_of(src)))  # a file:// URL is its local path, a link its target
        folder = p if p.is_dir() else p.parent
        if out in (folder, p) or (p.is_dir() and p in out.parents):
            raise SpecError(f"output dir {out} is the input folder of {p}; choose another output.dir")
        if out in p.parents:
            raise SpecError(
                f"input {p} is inside the output dir {out}; keep inputs out of the output folder "
                "(move the input or choose another output.dir)"
            )


@dataclass
class Prepared:
    """A spec's inputs read, prepared and checked as a run does it, up to the fit (what ``validate`` does).

    Attributes
    ----------
    frames : dict
        Input kind → the validated table (after the skills job's duplicate policy).
    sources : dict
        Input kind → where it came from (for messages).
    lm : LabelMatrix or None
        The encoded labels (skills).
    skills_run : dict or None
        The skills run a next batch reads (its ``skills`` and ``consensus`` tables).
    lines : list of str
        What ``crowdflow validate`` prints.
    """

    frames: dict[str, pd.DataFrame]
    sources: dict[str, str]
    lm: LabelMatrix | None = None
    skills_run: dict[str, Any] | None = None
    lines: list[str] = field(default_factory=list)


def prepare(spec: PipelineBase, *, validate: bool = True) -> Prepared:
    """Read, validate and graph-check the spec's inputs as a run would, without Prefect and without writing.

    The same steps as the job's flow up to the fit, through the same functions: the readers
    (:func:`tasks.sources.read_source`), the skills job's duplicate policy, the table contracts' suites
    (:func:`schemas.validation.validate_frame`), the encoding and the graph checks
    (:func:`crowdflow.checks.graph_checks`). Blocking failures raise as they would in the run.
    ``validate=False`` skips the Great Expectations suites (they block, never change a row): the prepared
    fit input is the same (a test that only needs the fit's input uses it).
    """
    from crowdflow.checks import graph_checks
    from crowdflow.contracts.tables import INPUTS
    from crowdflow.labels import deduplicate, encode_labels
    from crowdflow.storage.run_store import read_skills_run
    from schemas.validation import require_valid, validate_frame
    from tasks.sources import read_source

    check_locations(spec)
    check_installed(spec)
    check_partitioned(spec)
    out = Prepared(frames={}, sources={}, lines=[f"spec {spec.name}: ok (job {spec.job})"])
    worker_graph = None
    for kind, src in spec.inputs().items():
        if kind == spec.partitioned_input():
            if isinstance(spec, SkillsPipeline):
                worker_graph = _prepare_partitioned(spec, src, out, validate)
            else:
                _prepare_dataset(spec, kind, src, out, validate)
            continue
        t = read_source(spec, src, kind)
        df = t.df
        skills = spec.skills if isinstance(spec, SkillsPipeline) else None
        if kind == "labels" and skills is not None and skills.duplicates != "error":
            df, dropped = deduplicate(df, skills.duplicates)
            out.lines.append(f"dropped {dropped} duplicate (task, worker) rows")
        allowed = {"label": skills.classes} if kind == "labels" and skills is not None and skills.classes else None
        out.frames[kind], out.sources[kind] = df, t.source
        if not validate:
            continue
        report = validate_frame(df, INPUTS[kind], t.source, allowed)
        if spec.checks.validation == "block":
            require_valid(report)
        out.lines.append(
            report.message()
            if not report.success
            else f"{kind} {t.source}: {report.n_rows} rows, {report.n_expectations} expectations passed"
        )
    if isinstance(spec, SkillsPipeline) and worker_graph is None:
        out.lm = encode_labels(answered(out.frames["labels"]), spec.skills.classes)
    if isinstance(spec, NextBatchPipeline):
        out.skills_run = read_skills_run(spec.skills_run_path(), spec.max_skills_run_age_hours)
        out.lines.append(f"skills run {out.skills_run['run_dir']}: completed")
    checks = graph_checks(spec.job, out.frames, spec.check_modes(), worker_graph or out.lm)
    if checks is not None:
        checks.raise_if_blocking(out.sources["edges" if spec.job == "personal_models" else next(iter(out.sources))])
        out.lines += [f"warning: {w}" for w in checks.warnings]
        out.lines.append("graph checks: " + ", ".join(f"{k} {v}" for k, v in checks.results.items()))
        out.lines.append(checks.summary)
    return out


def _prepare_partitioned(spec: SkillsPipeline, src: Any, out: Prepared, validate: bool) -> Any:
    """``validate`` of a labels dataset the Dask workers would read: the run's passes 1 and 2 in this process, file
    by file (memory: one file or one bucket), into a temporary folder; returns the worker graph for the checks."""
    import functools
    import tempfile

    from crowdflow.skills.partitioned import dictionaries, encode_buckets, read_and_split
    from crowdflow.storage.datasets import list_partitions
    from schemas.validation import require_all_valid, validate_loaded
    from tasks.sources import storage_options_of

    def one_by_one(fn: Any, items: list[Any]) -> list[Any]:
        return [fn(x) for x in items]

    parts = list_partitions(spec.location_of(src), storage_options_of(src, "labels"))
    allowed = {"label": spec.skills.classes} if spec.skills.classes else None
    check = functools.partial(validate_loaded, kind="labels", allowed=allowed) if validate else None
    with tempfile.TemporaryDirectory(prefix="crowdflow-validate-") as tmp:
        split = functools.partial(
            read_and_split, folder=tmp, n_buckets=max(2, len(parts)), columns=src.columns or None, check=check
        )
        results = one_by_one(split, parts)
        reports = [r[1] for r in results if r[1] is not None]
        if reports and spec.checks.validation == "block":
            require_all_valid(reports, parts[0].dataset)
        workers, classes = dictionaries([r[0] for r in results], spec.skills.classes)
        buckets = sorted(str(p) for p in Path(tmp).glob("bucket-*"))
        enc = encode_buckets(buckets, one_by_one, workers, classes, spec.skills.duplicates, [p.name for p in parts])
    n_rows = sum(r[0].n_rows for r in results)
    failed = sum(not r.success for r in reports)
    out.sources["labels"] = parts[0].dataset
    out.lines.append(
        f"labels {parts[0].dataset}: {n_rows} rows in {len(parts)} Parquet files (read by the Dask workers at run time)"
        + (f", {failed} files failed validation" if failed else ", every file passed validation" if reports else "")
    )
    if enc.n_dropped:
        out.lines.append(f"dropped {enc.n_dropped} duplicate (task, worker) rows")
    return enc.report


def _prepare_dataset(spec: PipelineBase, kind: str, src: Any, out: Prepared, validate: bool) -> None:
    """``validate`` of a comparisons or agents dataset the Dask workers would read: each file read and validated in
    turn (one file in memory); the graph checks get what the run's checks see: the distinct compared pairs, or the
    agent ids."""
    from crowdflow.contracts.tables import INPUTS
    from crowdflow.storage.datasets import list_partitions, read_partition
    from schemas.validation import require_all_valid, validate_loaded
    from tasks.sources import storage_options_of

    parts = list_partitions(spec.location_of(src), storage_options_of(src, kind))
    reports, pieces, n_rows = [], [], 0
    for part in parts:
        loaded = read_partition(part, INPUTS[kind], src.columns or None)
        if validate:
            reports.append(validate_loaded(loaded, kind=kind))
        n_rows += len(loaded.df)
        if kind == "comparisons":  # the item graph: its edges are the compared pairs
            pieces.append(loaded.df[["item_a", "item_b"]].astype(str).drop_duplicates())
        else:
            pieces.append(pd.DataFrame({"agent": loaded.df["agent"].astype(str).unique()}))
        del loaded
    if reports and spec.checks.validation == "block":
        require_all_valid(reports, parts[0].dataset)
    frame = pd.concat(pieces, ignore_index=True).drop_duplicates(ignore_index=True)
    if kind == "comparisons":
        frame["annotator"] = ""  # the item graph's check reads no annotator
    out.frames[kind], out.sources[kind] = frame, parts[0].dataset
    failed = sum(not r.success for r in reports)
    verdict = f", {failed} files failed validation" if failed else ", every file passed validation" if reports else ""
    out.lines.append(
        f"{kind} {parts[0].dataset}: {n_rows} rows in {len(parts)} Parquet files (read by the Dask workers at run "
        f"time){verdict}"
    )


def check_spec(spec: PipelineBase) -> list[str]:
    """The lines ``crowdflow validate`` prints: :func:`prepare`'s report (raises as the run would)."""
    return prepare(spec).lines


def fit_data(
    spec: PipelineBase,
    frames: dict[str, pd.DataFrame],
    lm: LabelMatrix | None = None,
    skills_run: dict[str, Any] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """What the job's fit receives (hashed into its cache key) and the other settings it reads.

    One definition for the flows (:func:`flows.common.fit_step`) and for the tests that show every spec field
    reaches the key or cannot change the fit.
    """
    job = spec.job
    if job == "skills":
        gold_in_fit = isinstance(spec, SkillsPipeline) and spec.skills.gold_in_fit and "truth" in frames
        data = (lm, frames["truth"]) if gold_in_fit else lm  # gold in the fit: the known answers too
        # an upgraded crowd-kit is another fit: its version is part of a Crowd-Kit method's key
        if isinstance(spec, SkillsPipeline) and spec.skills.method.startswith("crowdkit:"):
            from crowdflow.skills.crowdkit_adapter import crowdkit_version

            return data, {"crowd_kit": crowdkit_version()}
        return data, {}
    if job in ("ranking", "personal_rankings"):
        return frames["comparisons"], {}
    if job == "personal_models":
        return (frames["agents"], frames["edges"]), {"allow_disconnected": spec.checks.connectivity_for(job) == "warn"}
    if job == "assignment":
        return (frames["candidates"], frames.get("worker_caps"), frames.get("task_caps")), {}  # caps: optional
    assert skills_run is not None
    return (frames["open_tasks"], frames["workers"], skills_run["skills"], skills_run["consensus"]), {}
