"""Thin Prefect tasks over the crowdflow library: ingest, validate, check_graph, fit, export.

Caching: Prefect cannot hash DataFrames, so every task that receives one declares its cache policy
explicitly. I/O and check tasks use ``NONE`` (they must see the current files); the fit task caches on
a content fingerprint (input sha256s + options + crowdflow version) computed by the flow.
"""

from typing import Any

from crowdflow.errors import CrowdflowError


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """``retry_condition_fn``: retry I/O failures, never bad input (a retry cannot fix a wrong column)."""
    exc = getattr(state, "data", None)
    return not isinstance(exc, (CrowdflowError, ValueError))
