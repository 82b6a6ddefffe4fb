"""Ingestion task: read one source into canonical columns (retried on transient I/O errors)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow.parquet as pq
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.errors import InputError
from crowdflow.io import LoadedTable, latest_run
from crowdflow.spec import PipelineSpec, SourceSpec
from tasks import retry_transient
from tasks.sources import read_source


@task(
    name="ingest",
    retries=2,
    retry_delay_seconds=1,
    retry_condition_fn=retry_transient,
    cache_policy=NONE,
    task_run_name="ingest-{kind}",
)
def ingest(spec: PipelineSpec, source: SourceSpec, kind: str) -> LoadedTable:
    """Read ``source`` as a ``kind`` table (labels, truth, comparisons, …): a file or a database query."""
    logger = get_run_logger()
    table = read_source(spec, source, kind)
    logger.info("ingested %s: %d rows from %s (sha256 %s)", kind, table.n_rows, table.source, table.sha256[:12])
    return table


@task(
    name="load-skills-run",
    retries=2,
    retry_delay_seconds=1,
    retry_condition_fn=retry_transient,
    cache_policy=NONE,
)
def load_skills_run(path: str) -> dict[str, Any]:
    """The newest completed skills run under ``path``: its ``skills`` and ``consensus`` tables and manifest."""
    logger = get_run_logger()
    run = latest_run(path)
    manifest = json.loads((run / "manifest.json").read_text())
    if manifest.get("job") != "skills":
        raise InputError(f"run {run.name} is a '{manifest.get('job')}' run, not a skills run", path=str(run))
    outputs = manifest.get("outputs") or {}
    # flat runs hold <table>.parquet; hive runs point at their dataset parts
    tables = {
        name: pq.ParquetFile(run / outputs.get(name, {}).get("path", f"{name}.parquet")).read().to_pandas()
        for name in ("skills", "consensus")
    }
    logger.info("using skills run %s (%d workers, %d tasks)", run, len(tables["skills"]), len(tables["consensus"]))
    return {"run_dir": str(run), "run_id": manifest.get("run_id"), **tables}
