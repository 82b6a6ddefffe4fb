"""Completed runs as Python objects: ``crowdflow.read_run(path)`` and ``crowdflow.latest_run(out_dir, pipeline)``.

A run folder ``<out>/<pipeline>/<run_id>/`` holds ``manifest.json`` (written last, ``status: completed``) and
the run's tables, either as ``<table>.parquet`` beside it (``layout: flat``) or as parts of hive-partitioned
datasets that the manifest's ``outputs`` point to (``layout: hive``). :func:`read_run` reads the manifest and
every table it lists, whatever the layout, and refuses anything that is not a completed run: a staging folder
(``.<run_id>.partial``) of an unfinished or killed export, a manifest without ``status: completed``, a table the
manifest lists that is not on disk (a hive part not yet published).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from crowdflow.contracts.errors import InputError
from crowdflow.contracts.names import check_name
from crowdflow.storage.run_store import latest_run as _latest_run_dir
from crowdflow.storage.run_store import read_output_table, run_order, table_parts

log = logging.getLogger(__name__)

__all__ = ["Run", "latest_run", "read_run"]


@dataclass(frozen=True)
class Run:
    """A completed run: its folder, its manifest and its tables.

    Attributes
    ----------
    path : pathlib.Path
        The run folder ``<out>/<pipeline>/<run_id>``.
    manifest : dict
        ``manifest.json`` (run id, pipeline, job, spec, inputs, checks, metrics, versions, timings, outputs).
    tables : dict
        Table name → DataFrame, every table the manifest's ``outputs`` list (for a hive run without the
        ``run_id`` column the dataset parts carry, so both layouts give the same tables).
    """

    path: Path
    manifest: dict[str, Any]
    tables: dict[str, pd.DataFrame]

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id", self.path.name))

    @property
    def pipeline(self) -> str | None:
        value = self.manifest.get("pipeline")
        return None if value is None else str(value)

    @property
    def job(self) -> str | None:
        value = self.manifest.get("job")
        return None if value is None else str(value)

    @property
    def metrics(self) -> dict[str, Any]:
        """The run's metrics (accuracy on gold labels, ties, outliers, … by job)."""
        return dict(self.manifest.get("metrics") or {})

    @property
    def increments(self) -> dict[str, Any]:
        """What the pipeline's increment store holds now (``incremental: true`` runs, ``crowdflow forget``):
        its format, version, files per input kind and erasures (counts, never ids); ``version`` 0 when empty.
        The state this run started from is ``manifest["incremental"]["state_from"]``."""
        from crowdflow.storage.increments import STATE_DIR, read_state

        return read_state(self.path.parent / STATE_DIR).record()

    def __getitem__(self, name: str) -> pd.DataFrame:
        """``run["consensus"]``: one table; ``KeyError`` naming the tables the run has."""
        try:
            return self.tables[name]
        except KeyError:
            raise KeyError(f"run {self.run_id} has no table {name!r}; it has {sorted(self.tables)}") from None


def read_run(path: str | os.PathLike[str]) -> Run:
    """The manifest and the tables of the completed run in folder ``path``.

    Parameters
    ----------
    path : str or PathLike
        A run folder, ``<out>/<pipeline>/<run_id>`` (for the newest run of a pipeline use :func:`latest_run`).

    Returns
    -------
    Run

    Raises
    ------
    InputError
        ``path`` is not a completed run: no such folder, a staging folder of an unfinished export, no
        ``manifest.json`` (a pipeline folder: use :func:`latest_run`), a manifest that is not valid JSON or not
        ``status: completed``, or a listed table missing on disk.
    """
    run = Path(path)
    if not run.is_dir():
        raise InputError("no run folder here", path=str(run))
    if run.name.startswith(".") or run.name.endswith(".partial"):
        raise InputError("a staging folder of an unfinished or interrupted export, not a completed run", path=str(run))
    manifest_path = run / "manifest.json"
    if not manifest_path.is_file():
        has_runs = any((d / "manifest.json").is_file() for d in run.iterdir() if d.is_dir())
        hint = "; this is a pipeline folder: use crowdflow.latest_run(out_dir, pipeline)" if has_runs else ""
        raise InputError(f"no manifest.json: not a run folder{hint}", path=str(run))
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the manifest: {exc}", path=str(manifest_path)) from None
    if not isinstance(manifest, dict) or manifest.get("status") != "completed":
        status = manifest.get("status") if isinstance(manifest, dict) else None
        raise InputError(f"the run is not completed (manifest status {status!r})", path=str(run))
    layout = str(manifest.get("layout") or "flat")
    outputs = manifest.get("outputs") or {}
    tables: dict[str, pd.DataFrame] = {}
    for name, info in outputs.items() if isinstance(outputs, Mapping) else ():
        if not isinstance(info, Mapping) or "rows" not in info:  # a file such as report.html, not a table
            continue
        tables[name] = read_output_table(run, name, info, layout).to_pandas()
    log.info("read run %s (%d tables)", run, len(tables))
    return Run(path=run, manifest=manifest, tables=tables)


def latest_run(out_dir: str | os.PathLike[str], pipeline: str) -> Run:
    """The newest completed run of ``pipeline`` under the output folder ``out_dir`` (:func:`read_run` of it).

    Run ids start with their UTC start time, so the newest is the last completed run folder of
    ``<out_dir>/<pipeline>``; staging folders and runs whose manifest is not completed are skipped.

    Raises
    ------
    InputError
        An invalid pipeline name, or no completed run of that pipeline.
    """
    try:
        check_name(pipeline, "pipeline name")
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return read_run(_latest_run_dir(Path(out_dir) / pipeline))


# (history key, output table, column): who took part in a run, for the report's churn (joined / left since before)
MEMBERS = (("workers", "skills", "worker"), ("annotators", "annotators", "annotator"), ("items", "ranking", "item"))


def run_history(pipeline_dir: str | os.PathLike[str], limit: int = 30) -> list[dict[str, Any]]:
    """The manifests of the newest completed runs under ``<out>/<pipeline>``, oldest first (the report's trends).

    Each record is the run's manifest plus who took part (each read as one column, see ``MEMBERS``): ``workers``
    (the ``skills`` table's workers), ``annotators`` and ``items`` (a ranking run's ``annotators`` and ``ranking``
    tables), so the report can count who joined or left between runs. Folders that are
    staging folders, unreadable or not completed are skipped; a missing folder is an empty history.
    """
    p = Path(pipeline_dir)
    if not p.is_dir():
        return []
    out: list[dict[str, Any]] = []
    for run in sorted((d for d in p.iterdir() if d.is_dir() and not d.name.startswith(".")), key=run_order)[::-1]:
        try:
            manifest = json.loads((run / "manifest.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(manifest, dict) or manifest.get("status") != "completed":
            continue
        for key, table, column in MEMBERS:  # one column only, from the file or parts the run format names
            info = (manifest.get("outputs") or {}).get(table) or {}
            if info:
                with contextlib.suppress(OSError, ValueError, KeyError, pa.ArrowException, InputError):
                    manifest[key] = [
                        w
                        for part in table_parts(run, table, info)
                        for w in pq.read_table(part, columns=[column]).column(0).to_pylist()
                    ]
        out.append(manifest)
        if len(out) >= limit:
            break
    return out[::-1]
