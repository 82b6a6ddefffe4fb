"""Model-fitting tasks. Each is a thin call into ``crowdflow.models``.

Fits are cached on a content fingerprint (input sha256s + options + crowdflow version) passed in by
the flow; the DataFrames are never hashed. Cached results live in Prefect's local result storage.
"""

from __future__ import annotations

import functools
import tempfile
from datetime import timedelta
from typing import Any

import pandas as pd
from prefect import get_run_logger, task

from crowdflow.graphs import WorkerGraphReport
from crowdflow.labels import LabelMatrix
from crowdflow.models.btl import PersonalRankingResult, fit_personal_rankings
from crowdflow.models.hodgerank import fit_hlasso, fit_hodgerank
from crowdflow.models.lbi import fit_lbi
from crowdflow.models.skills import (
    LabelMoments,
    SkillsResult,
    fit_skills,
    moments_from_partitions,
    partition_pair_counts,
    write_label_partitions,
)
from crowdflow.models.tvcs import AssignmentResult, assign_tasks, candidate_scores, caps_with_default
from crowdflow.personal_models import PersonalModelsOptions, PersonalModelsResult, fit_personal_models
from crowdflow.spec import (
    AssignmentOptions,
    PersonalRankingsOptions,
    RankingOptions,
    RunnerSpec,
    SkillsOptions,
)
from tasks.progress import fit_progress
from tasks.runners import dask_executor


def fingerprint_key(context: Any, parameters: dict[str, Any]) -> str:
    """Cache key = the ``fingerprint`` parameter computed by the flow from input hashes and options."""
    return str(parameters["fingerprint"])


@task(name="fit-skills", cache_key_fn=fingerprint_key, cache_expiration=timedelta(days=7), persist_result=True)
def fit_skills_task(
    lm: LabelMatrix,
    graph: WorkerGraphReport,
    options: SkillsOptions,
    fingerprint: str,
    runner: RunnerSpec | None = None,
) -> SkillsResult:
    """Worker skills and consensus labels with the configured method (spec skills-rank-one.md).

    Unidentifiable components reach this step only when the identifiability check is ``warn``; their
    workers then get no skill (NaN, weight 0) and their tasks fall back per ``options.fallback``.
    With a Dask ``runner`` the co-label statistics are summed over Parquet partitions on the cluster
    (:func:`skills_moments_on_dask`); the result is the same. Progress of the PGD iterations goes to
    a progress artifact.
    """
    logger = get_run_logger()
    o = options
    moments, n_parts = None, 0
    if runner is not None and runner.kind == "dask":
        moments, n_parts = skills_moments_on_dask(lm, o.min_pair_count, runner)
        logger.info(
            "co-label statistics summed over %d Parquet partitions on Dask (%s)",
            n_parts,
            runner.address or f"local cluster, {runner.n_workers} workers",
        )
    with fit_progress("fit-skills-progress", f"skills fit ({o.method})") as progress:
        result = fit_skills(
            lm,
            o.method,
            weighting=o.weighting,
            tau=o.tau,
            x0=o.x0,
            eta=o.eta,
            tol=o.tol,
            max_iter=o.max_iter,
            solver=o.solver,
            sign_mode=o.sign_mode,
            identifiability_policy="flag",
            fallback=o.fallback,
            tie_break=o.tie_break,
            seed=o.seed,
            min_pair_count=o.min_pair_count,
            spectral=o.spectral,
            graph_report=graph,
            moments=moments,
            progress=progress,
        )
    meta = result.metadata
    if n_parts:
        meta["moments_partitions"] = n_parts
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
    return result


def skills_moments_on_dask(lm: LabelMatrix, min_pair_count: int, runner: RunnerSpec) -> tuple[LabelMoments, int]:
    """N, agreements and C^ of ``lm`` summed over whole-task Parquet partitions, one Dask task per file.

    The partition files (encoded labels, ``crowdflow.models.skills.write_label_partitions``) go to a
    temporary folder under ``runner.scratch_dir``; the workers receive their paths, never DataFrames,
    and send back one packed sparse count matrix each. Integer sums: equal to the in-process statistics.
    """
    n_parts = runner.partitions or 2 * runner.n_workers
    with tempfile.TemporaryDirectory(prefix="crowdflow-parts-", dir=runner.scratch_dir) as tmp:
        paths = write_label_partitions(lm, tmp, n_parts)
        count = functools.partial(partition_pair_counts, n_workers=lm.n_workers, n_classes=lm.n_classes)
        with dask_executor(runner.address, runner.n_workers, processes=runner.processes) as run_map:
            parts = run_map(count, paths)
    return moments_from_partitions(parts, lm.n_classes, min_pair_count), len(paths)


@task(
    name="fit-personal-rankings", cache_key_fn=fingerprint_key, cache_expiration=timedelta(days=7), persist_result=True
)
def fit_personal_rankings_task(
    comparisons: pd.DataFrame, options: PersonalRankingsOptions, fingerprint: str
) -> PersonalRankingResult:
    """Low-rank BTL per-user scores (spec personal-rankings-manifold.md)."""
    logger = get_run_logger()
    o = options
    result = fit_personal_rankings(
        comparisons,
        rank=o.rank,
        method=o.method,
        sigma=o.sigma,
        lambda_=o.lambda_,
        holdout_fraction=o.holdout_fraction,
        on_invalid=o.on_invalid,
        max_iter=o.max_iter,
        seed=o.seed,
    )
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
    return result


@task(name="fit-personal-models", cache_key_fn=fingerprint_key, cache_expiration=timedelta(days=7), persist_result=True)
def fit_personal_models_task(
    agents: pd.DataFrame,
    edges: pd.DataFrame,
    options: PersonalModelsOptions,
    allow_disconnected: bool,
    fingerprint: str,
    runner: RunnerSpec | None = None,
) -> PersonalModelsResult:
    """Personal models coupled over the agent graph (docs/methods/personal_models.md).

    Blocks of ``djam_blocked`` run as Dask tasks with ``executor: dask`` or a Dask ``runner`` (the
    runner's cluster settings win). Progress of the rounds goes to a progress artifact.
    """
    logger = get_run_logger()
    o = options
    if o.parallel_blocks and (o.executor == "dask" or (runner is not None and runner.kind == "dask")):
        if runner is not None and runner.kind == "dask":
            address, n_workers, processes = runner.address, runner.n_workers, runner.processes
        else:
            address, n_workers, processes = o.dask_address, 2, True
        with dask_executor(address, n_workers, processes=processes) as run_on_dask:
            logger.info("running %d DJAM blocks as Dask tasks (%s)", o.n_blocks, address or "local cluster")
            return _fit_personal_models(agents, edges, o, allow_disconnected, run_on_dask, logger)
    return _fit_personal_models(agents, edges, o, allow_disconnected, None, logger)


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


@task(name="fit-ranking", cache_key_fn=fingerprint_key, cache_expiration=timedelta(days=7), persist_result=True)
def fit_ranking_task(comparisons: pd.DataFrame, options: RankingOptions, fingerprint: str) -> dict[str, Any]:
    """HodgeRank scores per component, with LBI / HLASSO outlier detection (spec robust-hodgerank.md).

    Returns the output tables (``ranking``, ``outliers``, ``annotators``, ``components``, ``path``) and ``params``.
    """
    logger = get_run_logger()
    o = options
    if o.outliers == "none":
        base = fit_hodgerank(comparisons, allow_disconnected=True)
        tables = {"ranking": base.ranking, "components": base.diagnostics, "residuals": base.residuals}
        logger.info("HodgeRank least squares on %d items", len(base.ranking))
        return {"tables": tables, "params": {"method": "hodgerank"}}
    if o.outliers == "lbi":
        res = fit_lbi(
            comparisons,
            allow_disconnected=True,
            algorithm=o.algorithm,
            kappa=o.kappa,
            stop_rule=o.stop_rule,
            budget=o.budget,
            n_workers=o.n_workers,
            seed=o.seed,
        )
    else:
        res = fit_hlasso(comparisons, allow_disconnected=True, lambda_rule=o.lambda_rule, budget=o.budget, seed=o.seed)
    n_out = int(res.outliers["is_outlier"].sum())
    logger.info("%s: %d of %d comparisons flagged as outliers", o.outliers.upper(), n_out, len(res.outliers))
    tables = {
        "ranking": res.ranking,
        "outliers": res.outliers,
        "annotators": res.annotators,
        "components": res.diagnostics,
        "path": res.path,
    }
    return {"tables": tables, "params": dict(res.params)}


@task(name="fit-assignment", cache_key_fn=fingerprint_key, cache_expiration=timedelta(days=7), persist_result=True)
def fit_assignment_task(
    candidates: pd.DataFrame,
    options: AssignmentOptions,
    fingerprint: str,
    worker_caps: pd.DataFrame | None = None,
    task_caps: pd.DataFrame | None = None,
) -> AssignmentResult:
    """Exact max-score assignment under budget, per-worker and per-task caps (spec assignment-tvcs.md).

    Caps tables (``worker_caps``: worker, capacity; ``task_caps``: task, cap) give per-entity caps;
    the scalar ``worker_cap`` / ``task_cap`` options are then the default for ids the tables omit.
    """
    logger = get_run_logger()
    o = options
    wcaps = caps_with_default(worker_caps, candidates["worker"], "worker", "capacity", o.worker_cap)
    tcaps = caps_with_default(task_caps, candidates["task"], "task", "cap", o.task_cap)
    result = assign_tasks(candidates, o.budget, wcaps, tcaps, backend=o.backend)
    logger.info(
        "assigned %d pairs (budget %s, worker cap %s, task cap %s): objective %.6g, %s",
        result.n_selected,
        o.budget,
        "table" if worker_caps is not None else o.worker_cap,
        "table" if task_caps is not None else o.task_cap,
        result.objective,
        "certified optimal" if result.certified else "not certified",
    )
    return result


@task(name="fit-next-batch", cache_key_fn=fingerprint_key, cache_expiration=timedelta(days=7), persist_result=True)
def fit_next_batch_task(
    open_tasks: pd.DataFrame,
    workers: pd.DataFrame,
    skills: pd.DataFrame,
    consensus: pd.DataFrame,
    options: AssignmentOptions,
    fingerprint: str,
) -> dict[str, Any]:
    """Candidates from fitted skills × task uncertainty, then the exact capped assignment (spec §4).

    Every open task × available worker pair is a candidate; its score is the predicted gain
    π(1−π)(2Q−1)·log(Q/(1−Q)) of :func:`crowdflow.models.tvcs.candidate_scores` (Q = the worker's fitted
    accuracy, π = the task's consensus confidence, 0.5 for a task never labelled). Workers without a
    usable skill (new, or in an unidentifiable component) are left out and counted.
    """
    logger = get_run_logger()
    pairs = open_tasks[["task"]].merge(workers[["worker"]], how="cross")
    known = pairs["worker"].isin(skills.loc[skills["skill"].notna() | skills["accuracy"].notna(), "worker"])
    n_unknown = int(workers["worker"].isin(pairs.loc[~known, "worker"]).sum())
    cand = candidate_scores(skills, consensus[["task", "confidence"]], pairs[known], missing="drop")
    caps: Any = options.worker_cap
    if "capacity" in workers.columns and workers["capacity"].notna().any():
        caps = workers.loc[workers["worker"].isin(cand["worker"]), ["worker", "capacity"]].copy()
        caps["capacity"] = caps["capacity"].fillna(options.worker_cap if options.worker_cap is not None else 1e18)
    result = assign_tasks(
        cand[["task", "worker", "score"]], options.budget, caps, options.task_cap, backend=options.backend
    )
    logger.info(
        "next batch: %d pairs from %d candidates (%d workers without a usable skill left out), objective %.6g",
        result.n_selected,
        len(cand),
        n_unknown,
        result.objective,
    )
    return {"candidates": cand, "result": result, "n_workers_without_skill": n_unknown}
