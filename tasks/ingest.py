"""Ingestion task: read one source into canonical columns (retried on transient I/O errors)."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.spec import PipelineBase, SourceSpec
from crowdflow.storage.io import LoadedTable
from crowdflow.storage.run_store import read_skills_run
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
def ingest(spec: PipelineBase, source: SourceSpec, kind: str) -> LoadedTable:
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
def load_skills_run(path: str, max_age_hours: float | None = None) -> dict[str, Any]:
    """The newest completed skills run under ``path`` (:func:`crowdflow.storage.run_store.read_skills_run`), refused
    when it
    finished more than ``max_age_hours`` ago."""
    run = read_skills_run(path, max_age_hours)
    age = run["age_hours"]
    get_run_logger().info(
        "using skills run %s (%d workers, %d tasks), finished %s ago",
        run["run_dir"],
        len(run["skills"]),
        len(run["consensus"]),
        "?" if age is None else f"{age:.2f} h",
    )
    return run
