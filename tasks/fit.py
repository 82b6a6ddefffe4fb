"""Model-fitting tasks: each reads its inputs, calls one library entry point, logs, returns.

Fits are cached on the key the flow computes (:func:`crowdflow.storage.fingerprints.fit_key`: what the fit receives,
its options, where it runs, the code's identity), passed in as ``fingerprint``; Prefect never hashes the
DataFrames itself; results are persisted with :data:`tasks.results.FIT_RESULTS` (a pickle on one base64 line).
Each task returns a :class:`Fitted`: the result and the flow run that computed it, so a
result answered from the cache is told apart from a fresh one (:func:`flows.common.fit_step`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, ParamSpec, TypeVar

import pandas as pd
from prefect import Task, get_run_logger, task
from prefect.runtime import flow_run

from crowdflow.assignment import AssignmentOptions, AssignmentResult, NextBatchResult, assign_tasks, next_batch
from crowdflow.graphs import WorkerGraphReport
from crowdflow.labels import LabelMatrix
from crowdflow.personal_models import PersonalModelsOptions, PersonalModelsResult, fit_personal_models
from crowdflow.personal_rankings import PersonalRankingResult, PersonalRankingsOptions, fit_personal_rankings
from crowdflow.ranking import ComparisonGraph, RankingOptions, fit_ranking, output_tables
from crowdflow.skills import SkillsOptions, SkillsResult, fit_skills
from crowdflow.skills.gold import cross_fit
from crowdflow.spec import RunnerSpec
from tasks.progress import fit_progress
from tasks.results import FIT_RESULTS, SKILLS_FIT_RESULTS, FitResultSerializer
from tasks.runners import dask_executor, scratch_folder

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Fitted(Generic[T]):
    """A fit's result and where it was computed (a cached result keeps the run that computed it)."""

    result: T
    flow_run_id: str | None
    computed_at: str


def _fitted(result: T) -> Fitted[T]:
    run = str(flow_run.id) if flow_run.id else None
    return Fitted(result, run, datetime.now(UTC).isoformat(timespec="seconds"))


def fingerprint_key(context: Any, parameters: dict[str, Any]) -> str:
    """Cache key = the ``fingerprint`` parameter computed by the flow from input hashes and options."""
    return str(parameters["fingerprint"])


def fit_task(name: str, serializer: FitResultSerializer = FIT_RESULTS) -> Callable[[Callable[P, R]], Task[P, R]]:
    """The decorator of every fit task: one cache policy for all jobs. The key is the flow's fingerprint of the
    inputs and options (:func:`fingerprint_key`), kept 7 days, and the result is persisted by ``serializer``
    (:data:`tasks.results.FIT_RESULTS`; the skills fit's compresses a large result)."""
    return task(
        name=name,
        cache_key_fn=fingerprint_key,
        cache_expiration=timedelta(days=7),
        persist_result=True,
        result_serializer=serializer,
    )


@fit_task("fit-skills", SKILLS_FIT_RESULTS)
def fit_skills_task(
    lm: LabelMatrix,
    graph: WorkerGraphReport,
    options: SkillsOptions,
    fingerprint: str,
    runner: RunnerSpec | None = None,
    truth: pd.DataFrame | None = None,
) -> Fitted[SkillsResult]:
    """Worker skills and consensus labels with the configured method (docs/methods/skills.md).

    With ``options.gold_in_fit`` and ``truth``, the known answers enter the fit and the gold tasks' labels are
    cross-fitted for scoring (:func:`crowdflow.skills.gold.cross_fit`: ``gold_folds`` extra fits).

    Unidentifiable components reach this step only when the identifiability check is ``warn``; their
    workers then get no skill (NaN, weight 0) and their tasks fall back per ``options.fallback``.
    With a Dask ``runner`` the library sums the co-label statistics over Parquet partitions on the
    cluster (``executor=``); the result is the same. Progress of the PGD iterations and of the Dawid–Skene EM
    (``ds``, ``onecoin_ds``, and every fit of ``auto`` and of the gold cross-fit as one job) goes to a progress
    artifact and the CLI's listeners, the EM's pass lines to this task's log (:func:`tasks.progress.fit_progress`).
    """
    logger = get_run_logger()
    o = options
    with contextlib.ExitStack() as stack:
        executor, n_partitions, scratch_dir = None, 1, None
        if runner is not None and runner.kind == "dask":
            scratch_dir = scratch_folder(runner.scratch_dir)  # created if missing
            executor = stack.enter_context(
                dask_executor(
                    runner.address, runner.n_workers, runner.processes, runner.worker_timeout, runner.memory_limit
                )
            )
            n_partitions = runner.partitions or 2 * runner.n_workers
        progress = stack.enter_context(fit_progress("fit-skills-progress", f"skills fit ({o.method})"))
        kwargs: dict[str, Any] = {
            "graph_report": graph,
            "executor": executor,
            "n_partitions": n_partitions,
            "scratch_dir": scratch_dir,
            "progress": progress,
        }
        if o.gold_in_fit and truth is not None:
            result = cross_fit(lm, o, truth, **kwargs)
            logger.info("%s: gold answers in the fit; accuracy %s", o.method, result.metadata["accuracy_scoring"])
        else:
            result = fit_skills(lm, o, **kwargs)
    meta = result.metadata
    if "moments_partitions" in meta and runner is not None:
        logger.info(
            "co-label statistics summed over %d Parquet partitions on Dask (%s)",
            meta["moments_partitions"],
            runner.address or f"local cluster, {runner.n_workers} workers",
        )
    if o.method == "pgd":
        logger.info(
            "PGD (%s): %s after %d iterations, loss %.6g; %.1f%% of workers identified",
            o.solver,
            "converged" if meta.get("converged") else "NOT converged",
            meta.get("iterations", 0),
            meta.get("final_loss", float("nan")),
            100 * meta.get("frac_workers_identified", 0.0),
        )
    logger.info("%s on %d tasks / %d labels: %d ties", o.method, lm.n_tasks, lm.n_labels, meta.get("n_ties", 0))
    return _fitted(result)


@fit_task("fit-personal-rankings")
def fit_personal_rankings_task(
    comparisons: pd.DataFrame, options: PersonalRankingsOptions, fingerprint: str
) -> Fitted[PersonalRankingResult]:
    """Low-rank BTL per-user scores (docs/methods/personal_rankings.md)."""
    logger = get_run_logger()
    result = fit_personal_rankings(comparisons, options=options)
    d = result.diagnostics
    logger.info(
        "%s rank %d on %d users x %d items (%d comparisons): %s after %d iterations, objective %.6g",
        d.method,
        d.rank,
        d.n_users,
        d.n_items,
        d.n_pairs,
        "converged" if d.converged else "NOT converged",
        d.iterations,
        d.objective,
    )
    if len(result.excluded):
        logger.warning("%d users/items without usable comparisons are not ranked", len(result.excluded))
    return _fitted(result)


@fit_task("fit-personal-models")
def fit_personal_models_task(
    agents: pd.DataFrame,
    edges: pd.DataFrame,
    options: PersonalModelsOptions,
    allow_disconnected: bool,
    fingerprint: str,
    runner: RunnerSpec | None = None,
) -> Fitted[PersonalModelsResult]:
    """Personal models coupled over the agent graph (docs/methods/personal_models.md).

    Blocks of ``djam_blocked`` run as Dask tasks with ``executor: dask`` or a Dask ``runner`` (the
    runner's cluster settings win). Progress of the rounds goes to a progress artifact.
    """
    logger = get_run_logger()
    o = options
    if o.parallel_blocks and (o.executor == "dask" or (runner is not None and runner.kind == "dask")):
        if runner is not None and runner.kind == "dask":
            address, n_workers, processes = runner.address, runner.n_workers, runner.processes
            timeout = runner.worker_timeout
        else:
            address, n_workers, processes, timeout = o.dask_address, 2, True, 60.0
        with dask_executor(address, n_workers, processes, timeout) as run_on_dask:
            logger.info("running %d DJAM blocks as Dask tasks (%s)", o.n_blocks, address or "local cluster")
            return _fitted(_fit_personal_models(agents, edges, o, allow_disconnected, run_on_dask, logger))
    return _fitted(_fit_personal_models(agents, edges, o, allow_disconnected, None, logger))


def _fit_personal_models(
    agents: pd.DataFrame,
    edges: pd.DataFrame,
    o: PersonalModelsOptions,
    allow_disconnected: bool,
    block_executor: Any,
    logger: Any,
) -> PersonalModelsResult:
    with fit_progress("fit-personal-models-progress", f"personal models ({o.method})") as progress:
        result = fit_personal_models(
            agents,
            edges,
            o,
            allow_disconnected=allow_disconnected,
            block_executor=block_executor,
            progress=progress,
        )
    logger.info(
        "%s (%s loss): %s after %d rounds, KKT %.3g, certified relative error <= %.3g",
        o.method,
        o.loss,
        "converged" if result.converged else "NOT converged",
        result.iterations,
        result.kkt_norm,
        result.error_bound,
    )
    return result


@fit_task("fit-ranking")
def fit_ranking_task(
    comparisons: pd.DataFrame | ComparisonGraph, options: RankingOptions, fingerprint: str
) -> Fitted[dict[str, Any]]:
    """HodgeRank scores per component, with LBI / HLASSO outlier detection (docs/methods/ranking.md).

    Returns the output tables of :func:`crowdflow.ranking.fit_ranking` (``ranking``, ``components`` and
    ``outliers``, ``annotators``, ``path`` or ``residuals``) and its ``params``. Components are ranked
    separately unless the options say otherwise; the flow's graph check has applied ``checks.connectivity``.
    ``comparisons`` is the table or the comparison graph the check built from it (the same fit, the table
    encoded once); the cache key (``fingerprint``) is over the table either way.
    """
    logger = get_run_logger()
    result = fit_ranking(comparisons, options)
    logger.info(result.summary)
    return _fitted({"tables": output_tables(result), "params": dict(result.params)})


@fit_task("fit-assignment")
def fit_assignment_task(
    candidates: pd.DataFrame,
    options: AssignmentOptions,
    fingerprint: str,
    worker_caps: pd.DataFrame | None = None,
    task_caps: pd.DataFrame | None = None,
) -> Fitted[AssignmentResult]:
    """Exact max-score assignment under budget, per-worker and per-task caps (library: ``assign_tasks``).

    Caps tables (``worker_caps``: worker, capacity; ``task_caps``: task, cap) give per-entity caps;
    the scalar ``worker_cap`` / ``task_cap`` options are then the default for ids the tables omit.
    """
    logger = get_run_logger()
    o = options
    result = assign_tasks(candidates, o, worker_caps=worker_caps, task_caps=task_caps)
    logger.info(
        "assigned %d pairs (budget %s, worker cap %s, task cap %s): objective %.6g, %s",
        result.n_selected,
        o.budget,
        "table" if worker_caps is not None else o.worker_cap,
        "table" if task_caps is not None else o.task_cap,
        result.objective,
        "certified optimal" if result.certified else "not certified",
    )
    return _fitted(result)


@fit_task("fit-next-batch")
def fit_next_batch_task(
    open_tasks: pd.DataFrame,
    workers: pd.DataFrame,
    skills: pd.DataFrame,
    consensus: pd.DataFrame,
    options: AssignmentOptions,
    fingerprint: str,
) -> Fitted[NextBatchResult]:
    """Candidates from fitted skills × task uncertainty, then the exact capped assignment (library: ``next_batch``)."""
    logger = get_run_logger()
    out = next_batch(open_tasks, workers, skills, consensus, options)
    logger.info(
        "next batch: %d pairs from %d candidates (%d workers without a usable skill left out), objective %.6g",
        out.result.n_selected,
        len(out.candidates),
        out.n_workers_without_skill,
        out.result.objective,
    )
    return _fitted(out)
