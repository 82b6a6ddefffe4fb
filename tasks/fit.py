"""Model-fitting tasks. Each is a thin call into ``crowdflow.models``.

The fit is cached on a content fingerprint (input sha256s + options + crowdflow version) passed in by
the flow; the DataFrames are never hashed. Cached results live in Prefect's local result storage.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from prefect import get_run_logger, task

from crowdflow.labels import LabelMatrix
from crowdflow.models.majority import ConsensusResult, majority_vote
from crowdflow.spec import SkillsOptions


def _fingerprint_key(context: Any, parameters: dict[str, Any]) -> str:
    return str(parameters["fingerprint"])


@task(
    name="fit-consensus",
    cache_key_fn=_fingerprint_key,
    cache_expiration=timedelta(days=7),
    persist_result=True,
)
def fit_consensus(lm: LabelMatrix, options: SkillsOptions, fingerprint: str) -> ConsensusResult:
    """Consensus labels (and, for skill models, worker skills) with the configured method."""
    logger = get_run_logger()
    if options.method != "mv":
        raise NotImplementedError(
            f"method '{options.method}' is not available yet; use method: mv (skills models: issue #3)"
        )
    result = majority_vote(lm, tie_break=options.tie_break, seed=options.seed)
    logger.info(
        "majority vote on %d tasks (%d labels): %d ties broken by %s",
        lm.n_tasks,
        lm.n_labels,
        result.n_ties,
        options.tie_break,
    )
    return result
