"""Ingestion task: read one source into canonical columns (retried on transient I/O errors)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.io import LoadedTable, read_table
from crowdflow.spec import PipelineSpec, SourceSpec
from schemas.tables import INPUTS
from tasks import retry_transient


@task(
    name="ingest",
    retries=2,
    retry_delay_seconds=1,
    retry_condition_fn=retry_transient,
    cache_policy=NONE,
    task_run_name="ingest-{kind}",
)
def ingest(spec: PipelineSpec, source: SourceSpec, kind: str) -> LoadedTable:
    """Read ``source`` as a ``kind`` table (labels, truth, comparisons, …)."""
    logger = get_run_logger()
    table = read_table(spec.path_of(source), INPUTS[kind], source.columns, source.format)
    logger.info("ingested %s: %d rows from %s (sha256 %s)", kind, table.n_rows, table.source, table.sha256[:12])
    return table
