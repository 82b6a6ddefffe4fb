"""Export task: all tables of a run + manifest, written atomically into ``<out>/<pipeline>/<run_id>/``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.contracts.tables import OUTPUTS
from crowdflow.storage.held_tables import HeldTable
from crowdflow.storage.run_store import write_run
from tasks import retry_transient
from tasks.artifacts import markdown


@task(name="export", retries=1, retry_delay_seconds=1, retry_condition_fn=retry_transient, cache_policy=NONE)
def export_run(
    out_dir: str,
    pipeline: str,
    run_id: str,
    tables: Mapping[str, pd.DataFrame | HeldTable],
    manifest: dict[str, Any],
    layout: Literal["flat", "hive"] = "flat",
    extra_files: dict[str, bytes] | None = None,
    datasets: dict[str, list[str]] | None = None,
) -> str:
    """Write the run (flat run folder or hive-partitioned datasets; ``extra_files`` such as report.html;
    ``datasets``: tables already written as parts by the workers; manifest last); returns the run directory.

    Nothing is left behind on failure.
    """
    logger = get_run_logger()
    schemas = OUTPUTS.get(str(manifest.get("job")), {})
    written = write_run(
        out_dir,
        pipeline,
        run_id,
        tables,
        manifest,
        schemas=schemas,
        extra_files=extra_files,
        layout=layout,
        datasets=datasets,
    )
    lines = [f"# Run `{run_id}` exported\n", f"Folder: `{written.path}`\n", "| output | rows | file |", "|---|---|---|"]
    for name, info in written.outputs.items():
        lines.append(f"| {name} | {info.get('rows', '')} | `{(Path(written.path) / info['path']).resolve()}` |")
    metrics = manifest.get("metrics") or {}
    if metrics:
        lines.append(
            "\n**Metrics vs gold:** "
            + ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in metrics.items())
        )
    markdown("run-outputs", "\n".join(lines), "exported Parquet tables and manifest")
    logger.info("exported run to %s", written.path)
    return str(written.path)
