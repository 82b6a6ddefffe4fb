"""Run identifiers and the run manifest (what ran, on what, with which versions, how long)."""

from __future__ import annotations

import math
import platform
import uuid
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import numpy as np

from crowdflow.secrets import redact

_PACKAGES = ("crowdflow", "prefect", "pandas", "numpy", "scipy", "pyarrow", "great-expectations", "cvxpy", "pydantic")


def new_run_id(suffix: str | None = None) -> str:
    """``YYYYMMDDTHHMMSSZ-xxxxxxxx``: sortable by start time, unique by the suffix (flow run id or random)."""
    now = datetime.now(UTC)
    tail = (suffix or uuid.uuid4().hex)[:8]
    return f"{now:%Y%m%dT%H%M%SZ}-{tail}"


def versions() -> dict[str, str]:
    """Installed versions of the stack (``missing`` when a package is absent)."""
    out = {"python": platform.python_version()}
    for pkg in _PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "missing"
    return out


def started_at() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def json_safe(value: Any) -> Any:
    """A copy of ``value`` that strict JSON can hold: NaN / ±inf floats become ``None`` (null).

    ``json.dumps`` writes NaN as the bare token ``NaN``, which jq, JavaScript and most JSON parsers
    reject; a manifest states "not defined" as null instead (e.g. the step size of a majority vote).
    """
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def input_record(
    name: str, source: str, sha256: str, rows: int, fmt: str, query: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One entry of the manifest's ``inputs`` list.

    A file is recorded by its path; a query by its connection URL (password already redacted by the
    reader; :func:`redact` again), ``sql`` and ``params``; both with the content fingerprint ``sha256``,
    rows and format.
    """
    if query is None:
        return {"name": name, "path": redact(source), "sha256": sha256, "rows": rows, "format": fmt}
    return {
        "name": name,
        "connection": redact(source),
        "sql": redact(query["sql"]),
        "params": redact(query["params"]),
        "sha256": sha256,
        "rows": rows,
        "format": fmt,
    }


def build_manifest(
    *,
    run_id: str,
    pipeline: str,
    job: str,
    spec: dict[str, Any],
    inputs: list[dict[str, Any]],
    checks: dict[str, Any],
    metrics: dict[str, Any],
    timings: dict[str, float],
    flow_run_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run manifest minus ``outputs`` and ``status`` (added by the atomic writer).

    Everything recorded passes through :func:`redact`: passwords in URL-like strings (connection
    strings of sources, scheduler addresses) and values of secret-looking environment variables
    never reach the manifest.
    """
    manifest: dict[str, Any] = {
        "run_id": run_id,
        "pipeline": pipeline,
        "job": job,
        "started_at": started_at(),
        "flow_run_id": flow_run_id,
        "spec": spec,
        "inputs": inputs,
        "checks": checks,
        "metrics": metrics,
        "versions": versions(),
        "timings": timings,
    }
    manifest.update(extra or {})
    safe: dict[str, Any] = redact(manifest)
    return safe
