"""Warehouse task: load a completed run's output tables into DuckDB or PostgreSQL (after the export)."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.contracts.tables import RUNS_TABLE
from crowdflow.spec import WarehouseSpec
from crowdflow.storage.manifest import runs_row
from crowdflow.storage.run_store import read_output_table
from crowdflow.storage.warehouse import load_tables, redact_url
from tasks import retry_transient
from tasks.artifacts import markdown
from tasks.sources import resolve_password


@task(
    name="load-warehouse",
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=retry_transient,
    cache_policy=NONE,
)
def load_warehouse(run_dir: str, run_id: str, warehouse: WarehouseSpec, base_dir: str) -> dict[str, str]:
    """Load the exported Parquet tables of a completed run into the warehouse (one transaction).

    Runs after the atomic export, from the files the export wrote, so the database holds exactly the
    Parquet content (plus ``run_id``), and the run's row of the ``runs`` table (pipeline, status, metrics,
    timings, input hashes, cache hit: :func:`crowdflow.storage.manifest.runs_row`), always appended, in the same
    transaction. Returns table → qualified database table.
    """
    logger = get_run_logger()
    run = Path(run_dir)
    manifest = json.loads((run / "manifest.json").read_text())
    layout = str(manifest.get("layout") or "flat")
    tables = {  # the run's tables (entries with a row count); other outputs such as report.html are not loaded
        name: read_output_table(run, name, info, layout) for name, info in manifest["outputs"].items() if "rows" in info
    }
    tables[RUNS_TABLE] = runs_row(manifest)
    password = resolve_password(warehouse, "output.warehouse")
    loaded = load_tables(
        warehouse.connection,
        tables,
        run_id,
        mode=warehouse.mode,
        schema=warehouse.db_schema,
        prefix=warehouse.prefix,
        password=password,
        base_dir=base_dir,
        always_append=(RUNS_TABLE,),
    )
    where = redact_url(warehouse.connection)
    lines = [f"# Run `{run_id}` loaded into `{where}` ({warehouse.mode})\n", "| table | rows | database table |"]
    lines.append("|---|---|---|")
    lines += [f"| {n} | {tables[n].num_rows} | `{t}` |" for n, t in loaded.items()]
    markdown("warehouse-load", "\n".join(lines), "output tables loaded into the warehouse")
    logger.info("loaded %d tables of run %s into %s (%s)", len(loaded), run_id, where, warehouse.mode)
    return loaded
