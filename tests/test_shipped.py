"""Every shipped spec and deployment runs for real, and every consumer reads its outputs back (issue #33, item 1).

Validating a spec is not running it: the DuckDB example failed its first load for as long as its tests only
validated it. The specs are listed from the files (``deployments/specs/*.yaml`` and the bundled
``crowdflow/data/*.yaml``), so a new spec cannot be skipped; every deployment of ``deployments/prefect.yaml`` must
be one of them (by its inline spec or its ``spec_path``). Each runs to completion against the services it names
(embedded Prefect, DuckDB, a Dask LocalCluster), with only its output folder and database file moved to a
temporary folder, in schedule order (the closed loop reads the skills run). Its outputs are then read back by every
consumer that exists: ``read_run``, ``latest_run``, the next batch's skills reader, the report file, the warehouse
tables and the ``runs`` trend query.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
import yaml

import crowdflow as cf
from crowdflow.spec import load_spec
from crowdflow.storage.run_store import read_skills_run
from crowdflow.storage.warehouse import duckdb_path

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

ROOT = Path(__file__).resolve().parents[1]
SPEC_FILES = sorted((ROOT / "deployments" / "specs").glob("*.yaml")) + sorted(
    (ROOT / "crowdflow" / "data").glob("*.yaml")
)


def _order(paths: list[Path]) -> list[Path]:
    """Producers before consumers: a next-batch spec reads a skills run, so skills specs go first."""
    return sorted(paths, key=lambda p: (load_spec(p).job == "next_batch", p.name))


def test_the_list_of_shipped_specs_is_complete() -> None:
    """Every deployment is one of the listed spec files, so running the files runs every deployment."""
    assert len(SPEC_FILES) >= 9
    files = {p.stem: yaml.safe_load(p.read_text()) for p in SPEC_FILES}
    deployments = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())["deployments"]
    for dep in deployments:
        params = dep["parameters"]
        if "spec_path" in params:
            assert (ROOT / params["spec_path"]).resolve() in {p.resolve() for p in SPEC_FILES}, dep["name"]
            continue
        inline = {k: v for k, v in params["spec"].items() if k != "base_dir"}
        assert files.get(dep["name"]) == inline, f"deployment {dep['name']} is not a shipped spec file verbatim"


@pytest.fixture(scope="module")
def shipped_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Run every shipped spec once (outputs in one temporary folder); spec file name → its run facts."""
    from flows.deploy import run_pipeline

    out = tmp_path_factory.mktemp("shipped-out")
    runs: dict[str, dict[str, Any]] = {}
    skills_pipelines: dict[str, Path] = {}
    for path in _order(SPEC_FILES):
        spec = load_spec(path)
        output = spec.output.model_copy(update={"dir": str(out)})
        database: Path | None = None
        if spec.output.warehouse is not None:
            assert spec.output.warehouse.connection.startswith("duckdb:"), "a shipped spec names a server database"
            database = out / f"{path.stem}-{Path(duckdb_path(spec.output.warehouse.connection)).name}"
            output = output.model_copy(
                update={"warehouse": spec.output.warehouse.model_copy(update={"connection": f"duckdb:///{database}"})}
            )
        update: dict[str, Any] = {"output": output}
        if spec.job == "next_batch":
            # the closed loop reads the skills run its spec names, here from the same temporary output folder
            named = Path(spec.skills_run).name
            assert named in skills_pipelines, f"{path.name} reads {named!r}, which no shipped skills spec writes"
            update["skills_run"] = str(out / named)
        summary = run_pipeline(spec.model_copy(update=update))
        runs[path.name] = {"spec": spec, "summary": summary, "out": out, "database": database}
        if spec.job == "skills":
            skills_pipelines[spec.name] = path
    return runs


@pytest.mark.parametrize("spec_file", [p.name for p in SPEC_FILES])
def test_shipped_spec_runs_and_reads_back(shipped_runs: dict[str, dict[str, Any]], spec_file: str) -> None:
    facts = shipped_runs[spec_file]
    spec, summary, out = facts["spec"], facts["summary"], facts["out"]
    run_dir = Path(summary["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["job"] == spec.job

    # read_run and latest_run: every table the manifest lists, with rows where the manifest says so
    run = cf.read_run(run_dir)
    listed = {n: i for n, i in manifest["outputs"].items() if isinstance(i, dict) and "rows" in i}
    assert set(run.tables) == set(listed) and run.tables
    for name, info in listed.items():
        assert len(run.tables[name]) == info["rows"], name
    main = {"skills": "consensus", "ranking": "ranking", "next_batch": "assignment", "assignment": "assignment"}
    if spec.job in main:
        assert len(run.tables[main[spec.job]]) > 0
    newest = cf.latest_run(out, spec.name)
    assert newest.path == run.path
    for name, df in run.tables.items():
        pd.testing.assert_frame_equal(newest.tables[name], df)

    # the closed loop assigns the next batch from the skills run it reads (deployments/specs/next-batch.yaml)
    if spec_file == "next-batch.yaml":
        assert manifest["metrics"]["n_assigned"] == 40 and manifest["metrics"]["n_workers_without_skill"] == 1

    # the report is a file of the run that opens
    if spec.output.report:
        report = run_dir / "report.html"
        assert report.is_file() and "<html" in report.read_text()[:2000].lower()

    # the next batch's reader takes every skills run, whatever its runner and layout
    if spec.job == "skills":
        skills_run = read_skills_run(out / spec.name)
        assert Path(skills_run["run_dir"]) == run_dir
        pd.testing.assert_frame_equal(
            skills_run["consensus"].reset_index(drop=True), run.tables["consensus"].reset_index(drop=True)
        )

    # the warehouse holds the run's rows, and the runs trend query sees it
    if facts["database"] is not None:
        schema = spec.output.warehouse.db_schema or "main"
        prefix = spec.output.warehouse.prefix
        con = duckdb.connect(str(facts["database"]), read_only=True)
        try:
            catalog = con.execute("SELECT current_database()").fetchall()[0][0]
            space = f'"{catalog}"."{schema}"'
            for name, df in run.tables.items():
                n = con.execute(
                    f'SELECT count(*) FROM {space}."{prefix}{name}" WHERE run_id = ?', [summary["run_id"]]
                ).fetchall()[0][0]
                assert n == len(df), name
            trend = con.execute(
                f'SELECT run_id, accuracy FROM {space}."{prefix}runs" WHERE pipeline = ? ORDER BY started_at',
                [spec.name],
            ).fetchall()
            assert [r[0] for r in trend] == [summary["run_id"]]
        finally:
            con.close()
