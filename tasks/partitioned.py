"""Tasks of a partitioned run: the input is read, validated and reduced by the Dask workers, file by file.

The flow lists the dataset (:func:`crowdflow.storage.datasets.list_partitions`) and holds only what the library's passes
return (distinct ids, validation reports, per-worker statistics; W×W pair counts for pgd only); each pass is one
Prefect task, so the run page shows the passes and their timings (docs/scale.md).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.contracts.tables import INPUTS, OUTPUTS
from crowdflow.executors import MapFn, fold, hold, holds, on_held, release
from crowdflow.personal_models import PersonalModelsOptions, PersonalModelsResult
from crowdflow.personal_models.partitioned import fit_personal_models_partitioned, scan_agents
from crowdflow.ranking import RankingOptions
from crowdflow.ranking.partitioned import PartitionedRankingResult, fit_ranking_partitioned
from crowdflow.skills import SkillsOptions
from crowdflow.skills.fit import needs_pairs
from crowdflow.skills.partitioned import (
    EncodedBuckets,
    IdUnion,
    PartitionedSkills,
    encode_buckets,
    fit_buckets,
    read_and_keep_all,
    read_and_split,
    release_pieces,
)
from crowdflow.spec import PipelineBase, SourceSpec
from crowdflow.storage.datasets import (
    CopiedPartition,
    Partition,
    dataset_fingerprint,
    list_partitions,
    read_check_copy,
    read_copy,
)
from crowdflow.storage.run_store import write_final_part
from schemas.validation import ValidationReport, combined_message, require_all_valid, validate_loaded
from tasks.artifacts import markdown
from tasks.progress import fit_progress
from tasks.sources import storage_options_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetInput:
    """What the manifest records of an input the workers read: where, its fingerprint, rows, files.

    Duck-types :class:`crowdflow.storage.io.LoadedTable` for :func:`flows.common.finish_run` (``source``, ``sha256``,
    ``n_rows``, ``format``, ``query``).
    """

    source: str
    sha256: str
    n_rows: int
    n_files: int
    format: str = "parquet-dataset"
    query: dict[str, Any] | None = None


@dataclass(frozen=True)
class SplitLabels:
    """The labels split into task buckets on the workers, with what validation found."""

    buckets: list[str]
    workers: Any
    classes: Any
    files: list[str]
    dataset: DatasetInput
    reports: list[ValidationReport]
    n_dropped_null: int
    pieces: dict[str, list[Any]] | None = None


@task(name="list-dataset", cache_policy=NONE, task_run_name="list-{kind}")
def list_dataset(spec: PipelineBase, source: SourceSpec, kind: str) -> list[Partition]:
    """The dataset's Parquet files (names and sizes; no row is read)."""
    parts = list_partitions(spec.location_of(source), storage_options_of(source, kind))
    get_run_logger().info(
        "%s: %d Parquet files, %.1f MB, read by the Dask workers",
        parts[0].dataset,
        len(parts),
        sum(p.n_bytes for p in parts) / 1e6,
    )
    return parts


@task(name="read-validate-split", cache_policy=NONE, task_run_name="read-validate-split-{kind}")
def split_on_workers(
    parts: list[Partition],
    kind: str,
    source: SourceSpec,
    executor: MapFn,
    folder: str,
    n_buckets: int,
    mode: str,
    classes: list[str] | None,
) -> SplitLabels:
    """Pass 1 on the workers: read each file, run its table contract and Great Expectations suite, split it by task.

    Every file's failures are merged into one message naming the file and its rows; with ``checks.validation:
    block`` they stop the run before anything is fitted or written.
    """
    logger = get_run_logger()
    allowed = {"label": classes} if classes else None
    check = functools.partial(validate_loaded, kind=kind, allowed=allowed)
    columns = dict(source.columns) or None
    pieces: dict[str, list[Any]] | None = None
    if holds(executor):  # one read: each file's bucket pieces stay in the memory of the worker that read it
        union, found, pieces = read_and_keep_all(executor, parts, folder, n_buckets, columns, check)
        buckets = sorted(pieces)
    else:
        split = functools.partial(read_and_split, folder=folder, n_buckets=n_buckets, columns=columns, check=check)
        # each file's distinct ids are folded into one running union as its result arrives (never one list per file)
        union, found = fold(executor, split, parts, _add_split, (IdUnion(), {}))
        buckets = sorted(str(p) for p in Path(folder).glob("bucket-*"))
    reports: list[ValidationReport] = [found[p.index] for p in parts]
    try:
        _report_validation(kind, parts, reports, mode)
        workers, cls = union.finish(classes)
    except BaseException:
        release_pieces(executor, pieces)
        raise
    n_rows = union.n_rows
    digests = [union.digests[p.index] for p in parts]
    logger.info(
        "%d rows in %d files → %d task buckets%s; %d workers, %d classes",
        n_rows,
        len(parts),
        len(buckets),
        " held in the workers' memory" if pieces is not None else "",
        len(workers),
        cls.size,
    )
    return SplitLabels(
        buckets=buckets,
        workers=workers,
        classes=cls,
        files=[p.name for p in parts],
        dataset=DatasetInput(parts[0].dataset, dataset_fingerprint(parts, digests), n_rows, len(parts)),
        reports=reports,
        n_dropped_null=union.n_dropped_null,
        pieces=pieces,
    )


@task(name="encode-buckets", cache_policy=NONE)
def encode_on_workers(split: SplitLabels, executor: MapFn, options: SkillsOptions) -> EncodedBuckets:
    """Pass 2 on the workers: codes written once per bucket; the flow merges their per-worker sums (parity forests,
    strengths), or for pgd sums their worker-pair counts (docs/scale.md, memory laws)."""
    pairs = needs_pairs(options)
    enc = encode_buckets(
        split.buckets,
        executor,
        split.workers,
        split.classes,
        options.duplicates,
        split.files,
        pairs=pairs,
        pieces=split.pieces,
    )
    get_run_logger().info(
        "encoded %d labels of %d tasks in %d buckets (%d duplicates dropped; %s)",
        enc.n_labels,
        enc.n_tasks,
        len(enc.buckets),
        enc.n_dropped,
        "worker pairs summed for " + options.method if pairs else "no worker pair formed",
    )
    return enc


@task(name="fit-skills-partitioned", cache_policy=NONE)
def fit_on_workers(
    enc: EncodedBuckets,
    executor: MapFn,
    options: SkillsOptions,
    out_folder: str,
    truth: pd.DataFrame | None,
    hold_tables: str | None = None,
) -> PartitionedSkills:
    """The fit on the statistics in the flow, its passes (EM iterations, the consensus) on the workers.

    Progress (PGD iterations here; the EM's from the Dask worker that runs it) goes to the fit's progress artifact
    and the CLI's listeners, the EM's pass lines to this task's log (:func:`tasks.progress.fit_progress`).
    ``hold_tables``: the run's scratch folder, where a Dask worker that builds and holds the skills table writes it
    for the export (:func:`crowdflow.skills.partitioned.fit_buckets`)."""
    logger = get_run_logger()
    with fit_progress("fit-skills-progress", f"skills fit ({options.method}, partitioned)") as progress:
        fit = fit_buckets(enc, executor, options, out_folder, truth=truth, progress=progress, hold_tables=hold_tables)
    meta = fit.result.metadata
    logger.info(
        "%s on %d tasks / %d labels in %d buckets: %d passes over the buckets, %s",
        options.method,
        enc.n_tasks,
        enc.n_labels,
        len(enc.buckets),
        fit.passes,
        meta.get("fit_status"),
    )
    return fit


@dataclass(frozen=True)
class CopiedInput:
    """An input the workers read, validated and copied in canonical columns (for jobs that read it again).

    ``kept`` (with ``keep`` and an executor that holds): handles of each file's record held where it was read,
    with the rows the job keeps in memory (``CopiedPartition.kept``), and ``summaries`` what ``keep`` returned of
    them; the job's fit takes and releases the handles.
    """

    copies: list[str]
    dataset: DatasetInput
    reports: list[ValidationReport]
    kept: list[Any] | None = None
    summaries: list[Any] | None = None


@task(name="read-validate-copy", cache_policy=NONE, task_run_name="read-validate-copy-{kind}")
def copy_on_workers(
    parts: list[Partition],
    kind: str,
    source: SourceSpec,
    executor: MapFn,
    folder: str,
    mode: str,
    keep: Callable[[Any], tuple[Any, Any]] | None = None,
) -> CopiedInput:
    """Pass 1 on the workers: each file read, its contract and Great Expectations suite run, a canonical copy written.

    With ``keep`` and an executor that holds (Dask), the same read also keeps what ``keep`` takes of the canonical
    rows in the worker's memory (``read_check_copy(encode=keep)``), so the fit need not read the copies again.
    Failures are merged into one message naming each file and its rows; ``checks.validation: block`` stops the run
    here, before any fit.
    """
    logger = get_run_logger()
    check = functools.partial(validate_loaded, kind=kind)
    held = keep is not None and holds(executor)
    copy = functools.partial(
        read_check_copy,
        schema=INPUTS[kind],
        folder=folder,
        columns=dict(source.columns) or None,
        check=check,
        encode=keep if held else None,
    )
    handles: list[Any] | None = None
    if held:
        handles = hold(executor, copy, parts)
        done: list[CopiedPartition] = executor(on_held(CopiedPartition.light), handles)
    else:
        done = executor(copy, parts)
    reports: list[ValidationReport] = [c.found for c in done]
    try:
        _report_validation(kind, parts, reports, mode)
    except BaseException:
        if handles is not None:
            release(executor, handles)
        raise
    n_rows = sum(c.n_rows for c in done)
    logger.info(
        "%d rows in %d files validated and copied in canonical columns%s",
        n_rows,
        len(parts),
        "; their rows kept in the workers' memory for the fit" if held else "",
    )
    digest = dataset_fingerprint(parts, [c.sha256 for c in done])
    return CopiedInput(
        copies=[c.path for c in done],
        dataset=DatasetInput(parts[0].dataset, digest, n_rows, len(parts)),
        reports=reports,
        kept=handles,
        summaries=[c.summary for c in done] if held else None,
    )


def _add_split(acc: tuple[IdUnion, dict[int, Any]], result: tuple[Any, Any]) -> tuple[IdUnion, dict[int, Any]]:
    """Fold one file's split result: its ids into the union, its validation report kept by file index."""
    union, found = acc
    union.add(result[0])
    found[result[0].partition] = result[1]
    return union, found


def _report_validation(kind: str, parts: list[Partition], reports: list[ValidationReport], mode: str) -> None:
    """The validation artifact of a dataset read by the workers; raise (``block``) or warn on failures."""
    failed = [r for r in reports if not r.success]
    body = f"# Validation of `{kind}` on the workers\n\n{len(parts)} files, {len(failed)} failed.\n"
    if failed:
        body += "\n```\n" + combined_message(reports, parts[0].dataset) + "\n```\n"
    markdown(f"validation-{kind}", body, f"Great Expectations results for {kind}, file by file")
    if failed and mode == "block":
        require_all_valid(reports, parts[0].dataset)
    if failed:
        get_run_logger().warning("%s", combined_message(reports, parts[0].dataset))


@task(name="fit-ranking-partitioned", cache_policy=NONE)
def fit_ranking_on_workers(
    copied: CopiedInput,
    executor: MapFn,
    options: RankingOptions,
    out_dir: str,
    allow_disconnected: bool,
    table: str,
    part_run_id: str | None,
) -> PartitionedRankingResult:
    """HodgeRank (and the trimmed outlier rule) in passes over the held rows (or the copies); the row table
    (``table``: residuals or outliers) written by the workers in its final form for the run (``part_run_id``: the
    run id for the hive layout, None for flat), which the export then moves (:func:`write_final_part`)."""
    o = options.model_copy(update={"allow_disconnected": allow_disconnected and options.allow_disconnected})
    copies = copied.copies
    write = functools.partial(write_final_part, name=table, schema=OUTPUTS["ranking"].get(table), run_id=part_run_id)
    fit = fit_ranking_partitioned(
        copies, read_copy, executor, o, out_dir, held=copied.kept, scans=copied.summaries, write_part=write
    )
    get_run_logger().info(
        "%s on %d items from %d comparisons in %d files: %d passes, %d outliers",
        options.outliers,
        len(fit.ranking),
        fit.n_rows,
        len(copies),
        fit.passes,
        fit.n_outliers,
    )
    return fit


def loss_args(options: PersonalModelsOptions) -> dict[str, Any]:
    """The options that build each agent's loss (:func:`crowdflow.personal_models.problem.build_losses`)."""
    o = options
    return {
        "loss": o.loss,
        "reg": o.reg,
        "prior_mean": o.prior_mean,
        "huber_c": o.huber_c,
        "huber_kappa": o.huber_kappa,
        "feature_cols": o.features,
    }


@task(name="scan-agents", cache_policy=NONE)
def scan_agents_on_workers(copies: list[str], executor: MapFn, options: PersonalModelsOptions) -> tuple[Any, Any]:
    """Pass 2 on the workers: each file's agent ids and model parameters; the flow keeps their union (n ids)."""
    ids, names = scan_agents(copies, read_copy, executor, loss_args(options))
    get_run_logger().info("%d agents in %d files; parameters %s", len(ids), len(copies), list(names))
    return ids, names


@task(name="fit-personal-models-partitioned", cache_policy=NONE)
def fit_personal_models_on_workers(
    copies: list[str],
    executor: MapFn,
    edges: pd.DataFrame,
    options: PersonalModelsOptions,
    folder: str,
    scanned: tuple[Any, Any],
    allow_disconnected: bool,
) -> PersonalModelsResult:
    """Blocked DJAM with each block's samples read and its losses built on a worker; the flow holds the models."""
    o = options
    with fit_progress("fit-personal-models-progress", "personal models (djam_blocked, partitioned)") as progress:
        result = fit_personal_models_partitioned(
            copies,
            read_copy,
            edges,
            executor,
            folder,
            loss_args=loss_args(o),
            scanned=scanned,
            allow_disconnected=allow_disconnected,
            n_blocks=o.n_blocks,
            seed=o.seed,
            tol=o.tol,
            max_rounds=o.max_rounds,
            engine=o.engine,
            progress=progress,
        )
    meta = result.metadata
    get_run_logger().info(
        "djam_blocked on %d agents in %d blocks (%d boundary agents): %s after %d sweeps, %d passes, bound %.3g",
        meta["n"],
        meta["n_blocks"],
        meta["boundary_agents"],
        "converged" if result.converged else "NOT converged",
        meta["sweeps"],
        meta["passes"],
        result.error_bound,
    )
    return result
