"""Thin Prefect tasks over the crowdflow library: ingest, validate, check_graph, fit, export.

Caching: Prefect cannot hash DataFrames, so every task that receives one declares its cache policy
explicitly. I/O and check tasks use ``NONE`` (they must see the current files); the fit task caches on
a content fingerprint (input sha256s + options + crowdflow version) computed by the flow.
"""

from typing import Any

from crowdflow.contracts.errors import is_transient


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """``retry_condition_fn``: retry transient faults only (:func:`crowdflow.contracts.errors.is_transient`).

    A connection refused or reset, a timeout or an I/O error is retried; bad input, a ``ValueError`` or
    ``TypeError``, ``MemoryError``, a full or read-only disk never are (a retry cannot fix them).
    """
    exc = getattr(state, "data", None)
    return isinstance(exc, BaseException) and is_transient(exc)
