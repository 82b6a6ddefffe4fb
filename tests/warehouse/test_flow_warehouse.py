"""Warehouse specs end to end through the real flow: inputs queried from DuckDB / PostgreSQL, outputs in
Parquet (hive or flat) and loaded into the database (issue #8, items 3-5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.dataset as pads
import pytest
import sqlalchemy as sa
import yaml
from prefect import flow

from crowdflow.contracts.errors import SpecError
from crowdflow.spec import WarehouseSpec, parse_spec
from flows.cli import main
from flows.pipeline import run_spec
from tasks.ingest import load_skills_run
from tasks.sources import resolve_password

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

CONSENSUS_COLS = ["task", "label", "confidence", "n_labels", "fallback"]


def _rte(rte_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """RTE labels and gold with integer task ids and a batch column (odd tasks: 1, even: 2)."""
    labels = pd.read_csv(rte_dir / "labels.csv", dtype={"worker": str, "label": str})
    truth = pd.read_csv(rte_dir / "truth.csv", dtype={"label": str})
    for df in (labels, truth):
        df["batch"] = 2 - df["task"] % 2
    return labels, truth


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df[CONSENSUS_COLS].sort_values("task").reset_index(drop=True)


def _manifest(out: Path, pipeline: str, run_id: str | None = None) -> tuple[Path, dict]:  # type: ignore[type-arg]
    paths = sorted((out / pipeline).glob(f"{run_id or '*'}/manifest.json"))
    assert paths, f"no manifest under {out / pipeline}"
    return paths[-1], json.loads(paths[-1].read_text())


def test_duckdb_sourced_spec_hive_parquet_and_duckdb_tables(tmp_path: Path, rte_dir: Path) -> None:
    labels, truth = _rte(rte_dir)
    (tmp_path / "db").mkdir()
    con = duckdb.connect(str(tmp_path / "db" / "in.duckdb"))
    con.register("labels_df", labels)
    con.register("truth_df", truth)
    con.execute("CREATE TABLE labels AS SELECT * FROM labels_df")
    con.execute("CREATE TABLE truth AS SELECT * FROM truth_df")
    con.close()
    spec = {
        "name": "rte-duck",
        "job": "skills",
        "labels": {
            "sql": "SELECT task, worker, label FROM labels WHERE batch = $batch",
            "params": {"batch": 1},
            "connection": "duckdb:///db/in.duckdb",
        },
        "truth": {
            "sql": "SELECT task, label FROM truth WHERE batch = $batch",
            "params": {"batch": 1},
            "connection": "duckdb:///db/in.duckdb",
        },
        "skills": {"method": "mv"},
        "output": {
            "dir": "out",
            "layout": "hive",
            "warehouse": {"connection": "duckdb:///wh/warehouse.duckdb", "mode": "append", "schema": "crowd"},
        },
    }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    assert main(["validate", str(spec_path)]) == 0
    assert main(["run", str(spec_path)]) == 0

    out = tmp_path / "out"
    man_path, man = _manifest(out, "rte-duck")
    run_id = man["run_id"]
    n_labels, n_tasks = int((labels["batch"] == 1).sum()), int(labels.loc[labels["batch"] == 1, "task"].nunique())
    lab = man["inputs"][0]
    assert lab["name"] == "labels" and lab["connection"] == "duckdb:///db/in.duckdb" and lab["format"] == "duckdb"
    assert lab["sql"].endswith("$batch") and lab["params"] == {"batch": 1} and lab["rows"] == n_labels
    assert len(lab["sha256"]) == 64 and "path" not in lab
    assert man["metrics"]["n_gold"] == int((truth["batch"] == 1).sum())  # the bound param filtered both queries
    assert man["layout"] == "hive" and man["warehouse"]["tables"]["consensus"] == "crowd.consensus"

    # hive datasets: one part per table, read back by pyarrow and DuckDB with the partition keys
    date = f"{run_id[0:4]}-{run_id[4:6]}-{run_id[6:8]}"
    part = out / "consensus" / "pipeline=rte-duck" / f"run_date={date}" / f"part-{run_id}.parquet"
    assert (man_path.parent / man["outputs"]["consensus"]["path"]).resolve() == part.resolve()
    # the run report (in the run folder) links every table to its hive part
    links = re.findall(r'href="([^"]+\.parquet)"', (man_path.parent / "report.html").read_text())
    assert links and all((man_path.parent / href).resolve().is_file() for href in links)
    assert any(Path(href).name == part.name and "pipeline=rte-duck" in href for href in links)
    ds = pads.dataset(str(out / "consensus"), format="parquet", partitioning="hive").to_table().to_pandas()
    assert len(ds) == n_tasks and set(ds["pipeline"]) == {"rte-duck"} and set(ds["run_id"]) == {run_id}
    glob = str(out / "consensus" / "**" / "*.parquet")
    con = duckdb.connect()
    hive_rows = con.execute(
        "SELECT count(*), min(pipeline), CAST(min(run_date) AS VARCHAR) FROM read_parquet(?, hive_partitioning=true)",
        [glob],
    ).fetchone()
    parquet = con.execute(
        "SELECT * EXCLUDE (pipeline, run_date) FROM read_parquet(?, hive_partitioning=true)", [glob]
    ).df()
    con.close()
    assert hive_rows == (n_tasks, "rte-duck", date)

    # the same rows in the database, with the run id
    wh = duckdb.connect(str(tmp_path / "wh" / "warehouse.duckdb"), read_only=True)
    db = wh.execute("SELECT * FROM crowd.consensus").df()
    n_skills = wh.execute("SELECT count(*) FROM crowd.skills").fetchone()
    # the runs table: one row per run, loaded with the outputs (issue #25 item 6)
    runs = wh.execute(
        "SELECT run_id, pipeline, job, status, accuracy, n_gold, cache_hit, inputs_sha256,"
        " json_extract(metrics, '$.n_gold')::INT AS n_gold_json, json_extract(timings, '$.fit') IS NOT NULL AS timed"
        " FROM crowd.runs"
    ).df()
    wh.close()
    assert runs.to_dict("records") == [
        {
            "run_id": run_id,
            "pipeline": "rte-duck",
            "job": "skills",
            "status": "completed",
            "accuracy": pytest.approx(man["metrics"]["accuracy"]),
            "n_gold": man["metrics"]["n_gold"],
            "cache_hit": False,
            "inputs_sha256": runs["inputs_sha256"][0],
            "n_gold_json": man["metrics"]["n_gold"],
            "timed": True,
        }
    ]
    assert man["warehouse"]["tables"]["runs"] == "crowd.runs" and len(runs["inputs_sha256"][0]) == 64
    assert len(db) == n_tasks and set(db["run_id"]) == {run_id}
    pd.testing.assert_frame_equal(_sorted(db), _sorted(parquet), check_dtype=False)
    assert n_skills == (man["outputs"]["skills"]["rows"],)

    # the closed loop reads a hive run through its manifest (what next_batch's skills_run does)
    loaded = flow(name="read-hive-skills-run")(lambda path: load_skills_run(path))(str(out / "rte-duck"))
    assert loaded["run_id"] == run_id and len(loaded["skills"]) == man["outputs"]["skills"]["rows"]
    pd.testing.assert_frame_equal(_sorted(loaded["consensus"]), _sorted(parquet), check_dtype=False)


def test_postgresql_sourced_spec_append_replace_and_no_password_in_outputs(
    pg_server, tmp_path: Path, rte_dir: Path
) -> None:  # type: ignore[no-untyped-def]
    from prefect.blocks.system import Secret

    labels, truth = _rte(rte_dir)
    url = sa.engine.make_url(pg_server.url).set(drivername="postgresql+psycopg", password=pg_server.password)
    engine = sa.create_engine(url)
    labels.rename(columns={"task": "item_id", "worker": "annotator", "label": "answer"}).to_sql(
        "rte_labels", engine, index=False, if_exists="replace"
    )
    truth.to_sql("rte_truth", engine, index=False, if_exists="replace")
    source = {
        "sql": "SELECT item_id, annotator, answer FROM rte_labels WHERE batch = :batch",
        "params": {"batch": 2},
        "connection": pg_server.url,
        "password_env": pg_server.password_env,
        "columns": {"task": "item_id", "worker": "annotator", "label": "answer"},
    }
    truth_src = {
        "sql": "SELECT task, label FROM rte_truth WHERE batch = :batch",
        "params": {"batch": 2},
        "connection": pg_server.url,
        "password_env": pg_server.password_env,
    }
    warehouse = {"connection": pg_server.url, "password_env": pg_server.password_env, "schema": "flow_out"}
    data = {
        "name": "rte-pg",
        "labels": source,
        "truth": truth_src,
        "skills": {"method": "mv"},
        "output": {"dir": str(tmp_path / "out"), "warehouse": {**warehouse, "mode": "append"}},
    }
    spec_path = tmp_path / "pg.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    assert main(["run", str(spec_path)]) == 0
    _, first = _manifest(tmp_path / "out", "rte-pg")
    spec = parse_spec(data, base_dir=tmp_path)
    second = run_spec(spec, run_id="29991231T000000Z-second00")

    n_tasks = int(labels.loc[labels["batch"] == 2, "task"].nunique())
    with engine.connect() as c:
        counts = dict(c.execute(sa.text("SELECT run_id, count(*) FROM flow_out.consensus GROUP BY run_id")).all())
        db = pd.read_sql(
            sa.text("SELECT * FROM flow_out.consensus WHERE run_id = :r"), c, params={"r": second["run_id"]}
        )
    assert counts == {first["run_id"]: n_tasks, second["run_id"]: n_tasks}
    parquet = pd.read_parquet(Path(second["run_dir"]) / "consensus.parquet")
    pd.testing.assert_frame_equal(_sorted(db), _sorted(parquet), check_dtype=False)
    assert first["inputs"][0]["connection"] == pg_server.url and first["inputs"][0]["params"] == {"batch": 2}
    assert first["metrics"]["n_gold"] == int((truth["batch"] == 2).sum())

    # replace, with the password from a Prefect Secret block this time: only the latest run stays
    Secret(value=pg_server.password).save("crowdflow-test-pg", overwrite=True)
    by_secret = {"password_secret": "crowdflow-test-pg"}
    with pytest.raises(SpecError, match=r"Prefect Secret block 'no-such-block' .* not found"):
        resolve_password(WarehouseSpec(connection=pg_server.url, password_secret="no-such-block"), "output.warehouse")
    replace = parse_spec(
        {
            **data,
            "labels": {k: v for k, v in source.items() if k != "password_env"} | by_secret,
            "output": {
                "dir": str(tmp_path / "out"),
                "warehouse": {"connection": pg_server.url, "schema": "flow_out", "mode": "replace", **by_secret},
            },
        },
        base_dir=tmp_path,
    )
    third = run_spec(replace, run_id="29991231T000001Z-third000")
    with engine.connect() as c:
        runs = c.execute(sa.text("SELECT run_id, count(*) FROM flow_out.consensus GROUP BY run_id")).all()
        n_skills = c.execute(sa.text("SELECT count(*) FROM flow_out.skills")).scalar()
    engine.dispose()
    assert [tuple(r) for r in runs] == [(third["run_id"], n_tasks)]
    assert n_skills == json.loads((Path(third["run_dir"]) / "manifest.json").read_text())["outputs"]["skills"]["rows"]
    # the runs table keeps every run's row whatever the mode (replace replaced the outputs only); same inputs
    with engine.connect() as c:
        log = c.execute(
            sa.text("SELECT run_id, status, accuracy, inputs_sha256, started_at FROM flow_out.runs ORDER BY run_id")
        ).all()
        trend = c.execute(sa.text("SELECT (metrics::jsonb->>'accuracy')::float FROM flow_out.runs")).scalars().all()
    engine.dispose()
    assert [r[0] for r in log] == sorted([first["run_id"], second["run_id"], third["run_id"]])
    assert {r[1] for r in log} == {"completed"} and len({r[3] for r in log}) == 1  # the same query results
    assert all(r[2] == pytest.approx(first["metrics"]["accuracy"]) for r in log) and len(trend) == 3
    assert all(r[4] is not None and r[4].tzinfo is not None for r in log)

    # the password is nowhere in what the runs wrote
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert len(written) == 21  # 3 runs x (5 tables: 3 + gold_workers, gold_confusion; report.html; manifest)
    assert all(pg_server.password.encode() not in p.read_bytes() for p in written)
