"""Run identifiers and the run manifest (what ran, on what, with which versions, how long)."""

from __future__ import annotations

import hashlib
import json
import math
import platform
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import numpy as np
import pyarrow as pa

from crowdflow.contracts.tables import RUNS_SCHEMA
from crowdflow.storage.secrets import redact

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


def _timestamp(value: Any) -> datetime | None:
    try:
        when = datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when


def _number(value: Any, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return kind(value)


def runs_row(manifest: Mapping[str, Any]) -> pa.Table:
    """The ``runs`` table row of a completed run (:data:`crowdflow.contracts.tables.RUNS_SCHEMA`), built from its
    manifest.

    The warehouse load appends it next to the run's output tables, so accuracy, counts and timings across runs
    are one query away instead of one ``manifest.json`` per run.
    """
    metrics = dict(manifest.get("metrics") or {})
    timings = dict(manifest.get("timings") or {})
    inputs = [
        {k: v for k, v in (i or {}).items() if k in ("name", "sha256", "rows", "path", "connection", "format")}
        for i in manifest.get("inputs") or []
    ]
    pairs = sorted(f"{i.get('name')}:{i.get('sha256')}" for i in inputs)
    cache = manifest.get("cache") or {}

    def text(value: Any) -> str:
        return json.dumps(json_safe(value), sort_keys=True, default=str)

    row = {
        "run_id": manifest.get("run_id"),
        "pipeline": manifest.get("pipeline"),
        "job": manifest.get("job"),
        "method": None if manifest.get("method") is None else str(manifest.get("method")),
        "status": manifest.get("status"),
        "flow_run_id": manifest.get("flow_run_id"),
        "started_at": _timestamp(manifest.get("started_at")),
        "finished_at": _timestamp(manifest.get("finished_at")),
        "seconds": float(sum(v for v in timings.values() if _number(v, float) is not None)),
        "cache_hit": cache.get("hit") if isinstance(cache.get("hit"), bool) else None,
        "accuracy": _number(metrics.get("accuracy"), float),
        "error": _number(metrics.get("error"), float),
        "n_gold": _number(metrics.get("n_gold"), int),
        "metrics": text(metrics),
        "timings": text(timings),
        "checks": text(manifest.get("checks") or {}),
        "inputs": text(inputs),
        "inputs_sha256": hashlib.sha256("\n".join(pairs).encode()).hexdigest(),
        "crowdflow_version": (manifest.get("versions") or {}).get("crowdflow"),
    }
    return pa.Table.from_pylist([row], schema=RUNS_SCHEMA)
