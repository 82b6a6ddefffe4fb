"""Model-fitting tasks. Each is a thin call into ``crowdflow.models``.

Fits are cached on a content fingerprint (input sha256s + options + crowdflow version) passed in by
the flow; the DataFrames are never hashed. Cached results live in Prefect's local result storage.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from prefect import get_run_logger, task

from crowdflow.graphs import WorkerGraphReport
from crowdflow.labels import LabelMatrix
from crowdflow.models.skills import SkillsResult, fit_skills
from crowdflow.spec import SkillsOptions


def fingerprint_key(context: Any, parameters: dict[str, Any]) -> str:
    """Cache key = the ``fingerprint`` parameter computed by the flow from input hashes and options."""
    return str(parameters["fingerprint"])


@task(name="fit-skills", cache_key_fn=fingerprint_key, cache_expiration=timedelta(days=7), persist_result=True)
def fit_skills_task(
    lm: LabelMatrix, graph: WorkerGraphReport, options: SkillsOptions, fingerprint: str
) -> SkillsResult:
    """Worker skills and consensus labels with the configured method (spec skills-rank-one.md).

    Unidentifiable components reach this step only when the identifiability check is ``warn``; their
    workers then get no skill (NaN, weight 0) and their tasks fall back per ``options.fallback``.
    """
    logger = get_run_logger()
    o = options
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
    )
    meta = result.metadata
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
