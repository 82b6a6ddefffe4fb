"""Warehouse I/O in the library: URL checks, bound-parameter queries, transactional loads, hive datasets.

DuckDB runs in process; the PostgreSQL tests use the session's real server (``pg_server``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pytest
import sqlalchemy as sa

from crowdflow.contracts.errors import InputError, SpecError, WarehouseError
from crowdflow.contracts.tables import INPUTS, OUTPUTS
from crowdflow.spec import parse_spec
from crowdflow.storage.io import read_query
from crowdflow.storage.run_store import write_run
from crowdflow.storage.warehouse import check_connection_url, load_tables, redact_url, table_fingerprint

SECRET = "s3cr3t-Pa55"


def _labels_frame(rte_dir: Path) -> pd.DataFrame:
    """RTE labels with a batch column (odd task ids: batch 1, even: batch 2) and integer task ids."""
    df = pd.read_csv(rte_dir / "labels.csv", dtype=str)
    df["task"] = df["task"].astype(int)
    df["batch"] = 2 - df["task"] % 2
    return df


@pytest.fixture
def rte_duckdb(tmp_path: Path, rte_dir: Path) -> Path:
    path = tmp_path / "in.duckdb"
    labels = _labels_frame(rte_dir)
    con = duckdb.connect(str(path))
    con.register("labels_df", labels)
    con.execute("CREATE TABLE labels AS SELECT * FROM labels_df")
    con.close()
    return path


# --- connection URLs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://alice:{SECRET}@db.example:5432/warehouse",
        f"postgresql+psycopg://alice:{SECRET}@db.example/warehouse",
        f"postgresql://alice@db.example/warehouse?sslmode=require&password={SECRET}",
    ],
)
def test_inline_password_rejected_and_never_echoed(url: str) -> None:
    with pytest.raises(SpecError, match="contains a password") as exc:
        check_connection_url(url)
    assert SECRET not in str(exc.value) and "password_env" in str(exc.value)
    assert SECRET not in redact_url(url) and "***" in redact_url(url)


def test_connection_kinds_and_unknown_scheme() -> None:
    assert check_connection_url("duckdb:///warehouse.duckdb") == "duckdb"
    assert check_connection_url("postgresql://alice@localhost:5432/db") == "postgresql"
    assert check_connection_url("postgres://alice@localhost/db") == "postgresql"
    with pytest.raises(SpecError, match="unsupported scheme 'mysql'"):
        check_connection_url("mysql://alice@localhost/db")


def test_spec_rejects_inline_password_with_the_key(tmp_path: Path) -> None:
    data = {
        "name": "x",
        "labels": {"sql": "SELECT * FROM labels", "connection": f"postgresql://alice:{SECRET}@h/db"},
    }
    with pytest.raises(SpecError, match=r"labels\.connection: .*contains a password") as exc:
        parse_spec(data, base_dir=tmp_path)
    assert SECRET not in str(exc.value)
    data = {
        "name": "x",
        "labels": {"path": "l.csv"},
        "output": {"warehouse": {"connection": f"duckdb:///w.duckdb?password={SECRET}"}},
    }
    with pytest.raises(SpecError, match=r"output\.warehouse\.connection") as exc:
        parse_spec(data, base_dir=tmp_path)
    assert SECRET not in str(exc.value)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"path": "l.csv", "sql": "SELECT 1", "connection": "duckdb:///x.duckdb"}, "exactly one of path"),
        ({}, "exactly one of path"),
        ({"sql": "SELECT 1"}, "needs a connection"),
        ({"path": "l.csv", "params": {"a": 1}}, "only apply to a sql source"),
        ({"path": "l.csv", "password_env": "PW"}, "only apply to a sql source"),
        ({"sql": "SELECT 1", "connection": "postgresql://a@h/db", "params": [1]}, "named params"),
        (
            {"sql": "SELECT 1", "connection": "postgresql://a@h/db", "password_env": "A", "password_secret": "b"},
            "not both",
        ),
        ({"sql": "SELECT 1", "connection": "postgresql://a@h/db", "password_env": "not a name"}, "password_env"),
    ],
)
def test_source_shapes(tmp_path: Path, source: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({"name": "x", "labels": source}, base_dir=tmp_path)


def test_file_sources_unchanged(tmp_path: Path) -> None:
    spec = parse_spec({"name": "x", "labels": {"path": "l.csv", "columns": {"task": "item"}}}, base_dir=tmp_path)
    assert spec.labels is not None and not spec.labels.is_query and spec.path_of(spec.labels) == tmp_path / "l.csv"
    assert spec.output.layout == "flat" and spec.output.warehouse is None


def test_warehouse_spec_schema_alias(tmp_path: Path) -> None:
    spec = parse_spec(
        {
            "name": "x",
            "labels": {"path": "l.csv"},
            "output": {
                "layout": "hive",
                "warehouse": {"connection": "duckdb:///w.duckdb", "schema": "crowd", "mode": "replace"},
            },
        },
        base_dir=tmp_path,
    )
    wh = spec.output.warehouse
    assert wh is not None and wh.db_schema == "crowd" and wh.mode == "replace" and wh.prefix == ""
    again = parse_spec(spec.model_dump(mode="json"))  # the flow-parameter round trip
    assert again.output.warehouse == wh
    with pytest.raises(SpecError, match="share the folder of the 'consensus' dataset"):
        parse_spec({"name": "consensus", "labels": {"path": "l.csv"}, "output": {"layout": "hive"}})
    with pytest.raises(SpecError, match="schema"):
        parse_spec(
            {
                "name": "x",
                "labels": {"path": "l.csv"},
                "output": {"warehouse": {"connection": "duckdb:///w", "schema": "a;b"}},
            }
        )


# --- DuckDB sources ------------------------------------------------------------------------------------


def test_duckdb_named_param_selects_the_subset(rte_duckdb: Path, rte_dir: Path) -> None:
    url = f"duckdb:///{rte_duckdb.name}"
    full = _labels_frame(rte_dir)
    t = read_query(
        url, "SELECT * FROM labels WHERE batch = $batch", INPUTS["labels"], {"batch": 1}, base_dir=rte_duckdb.parent
    )
    assert t.n_rows == int((full["batch"] == 1).sum()) and 0 < t.n_rows < len(full)
    assert set(t.df["task"]) == {str(x) for x in full.loc[full["batch"] == 1, "task"]}  # ids become strings
    assert list(t.df.columns) == ["task", "worker", "label"]
    assert (
        t.format == "duckdb"
        and t.source == url
        and t.query == {"sql": "SELECT * FROM labels WHERE batch = $batch", "params": {"batch": 1}}
    )
    # positional parameters, and an absolute duckdb:////path
    t2 = read_query(f"duckdb:///{rte_duckdb}", "SELECT * FROM labels WHERE batch = ?", INPUTS["labels"], [2])
    assert t.n_rows + t2.n_rows == len(full) and t.sha256 != t2.sha256 and len(t.sha256) == 64


def test_duckdb_param_is_bound_not_formatted(rte_duckdb: Path) -> None:
    """An injection attempt is a value that matches nothing: no rows, and the table is still there."""
    url = f"duckdb:///{rte_duckdb}"
    with pytest.raises(InputError, match="returned no rows"):
        read_query(url, "SELECT * FROM labels WHERE worker = $w", INPUTS["labels"], {"w": "x'; DROP TABLE labels; --"})
    assert read_query(url, "SELECT * FROM labels", INPUTS["labels"]).n_rows == 8000


def test_duckdb_query_errors(rte_duckdb: Path, tmp_path: Path) -> None:
    url = f"duckdb:///{rte_duckdb}"
    with pytest.raises(WarehouseError, match=r"query failed.*nope"):
        read_query(url, "SELECT * FROM nope", INPUTS["labels"])
    with pytest.raises(WarehouseError, match="not found"):
        read_query(f"duckdb:///{tmp_path / 'missing.duckdb'}", "SELECT 1", INPUTS["labels"])
    assert not (tmp_path / "missing.duckdb").exists()  # reading never creates a database
    with pytest.raises(InputError, match=r"missing required column 'label'"):
        read_query(url, "SELECT task, worker FROM labels", INPUTS["labels"])
    t = read_query(
        url,
        "SELECT task AS item, worker, label AS answer FROM labels",
        INPUTS["labels"],
        columns={"task": "item", "label": "answer"},
    )
    assert t.n_rows == 8000 and t.renamed == {"item": "task", "answer": "label"}


def test_fingerprint_ignores_chunking_and_metadata() -> None:
    t = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    chunked = pa.concat_tables([t.slice(0, 1), t.slice(1)]).replace_schema_metadata({"k": "v"})
    assert table_fingerprint(t) == table_fingerprint(chunked)
    assert table_fingerprint(t) != table_fingerprint(t.slice(1))


# --- loads ---------------------------------------------------------------------------------------------


def _out_tables() -> dict[str, pa.Table]:
    return {
        "consensus": pa.table({"task": ["1", "2"], "label": ["0", "1"], "confidence": [0.5, float("nan")]}),
        "skills": pa.table({"worker": ["w"], "skill": [0.25], "n_labels": pa.array([3], pa.int64())}),
    }


def _duck_rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_duckdb_append_is_idempotent_per_run_and_replace_keeps_latest(tmp_path: Path) -> None:
    db = tmp_path / "w" / "out.duckdb"
    url = f"duckdb:///{db}"
    tables = _out_tables()
    assert load_tables(url, tables, "r1", mode="append", schema="crowd", prefix="cf_") == {
        "consensus": "crowd.cf_consensus",
        "skills": "crowd.cf_skills",
    }
    load_tables(url, tables, "r2", mode="append", schema="crowd", prefix="cf_")
    load_tables(url, tables, "r2", mode="append", schema="crowd", prefix="cf_")  # rerun of r2: no duplicates
    rows = _duck_rows(db, "SELECT run_id, count(*) FROM crowd.cf_consensus GROUP BY run_id ORDER BY run_id")
    assert rows == [("r1", 2), ("r2", 2)]
    load_tables(url, tables, "r3", mode="replace", schema="crowd", prefix="cf_")
    assert _duck_rows(db, "SELECT DISTINCT run_id FROM crowd.cf_skills") == [("r3",)]
    got = _duck_rows(db, "SELECT task, label, confidence FROM crowd.cf_consensus ORDER BY task")
    assert got[0] == ("1", "0", 0.5) and got[1][2] != got[1][2]  # NaN stays NaN


@pytest.mark.parametrize(
    ("db_name", "schema", "prefix"),
    [
        ("crowdflow", "crowdflow", ""),  # the shipped example's collision: file name == schema (issue #33)
        ("consensus", None, ""),  # file name == a table name, default schema
        ("crowd", "crowd", "cf_"),
        ("main", "main", ""),  # the default schema's name as the file name
        ("my-db.v2", "crowdflow", ""),  # a catalog name that is not a plain SQL identifier
        ("skills", "skills", ""),
    ],
)
def test_duckdb_load_whatever_the_database_file_is_named(
    tmp_path: Path, db_name: str, schema: str | None, prefix: str
) -> None:
    """Names are qualified by the database's catalog: a schema or table named like the file is never ambiguous."""
    db = tmp_path / f"{db_name}.duckdb"
    url = f"duckdb:///{db}"
    names = load_tables(url, _out_tables(), "r1", mode="append", schema=schema, prefix=prefix)
    load_tables(url, _out_tables(), "r2", mode="append", schema=schema, prefix=prefix)
    con = duckdb.connect(str(db))
    try:
        catalog = con.execute("SELECT current_database()").fetchone()[0]
        space = f'"{catalog}"."{schema or "main"}"'
        for name, qualified in names.items():
            assert qualified.endswith(f"{prefix}{name}")
            rows = con.execute(
                f'SELECT run_id, count(*) FROM {space}."{prefix}{name}" GROUP BY 1 ORDER BY 1'
            ).fetchall()
            assert [r[0] for r in rows] == ["r1", "r2"] and rows[0][1] == rows[1][1] > 0
    finally:
        con.close()


def test_the_runs_table_is_appended_whatever_the_mode(tmp_path: Path) -> None:
    """``runs`` (one row per run, crowdflow.storage.manifest.runs_row) keeps every run when the outputs are replaced."""
    from crowdflow.contracts.tables import RUNS_SCHEMA
    from crowdflow.storage.manifest import runs_row

    db = tmp_path / "w.duckdb"
    url = f"duckdb:///{db}"
    for i, mode in enumerate(["append", "replace", "replace", "replace"]):
        run_id = f"r{min(i, 2)}"  # the last load reruns r2: its row is replaced, not doubled
        manifest = {
            "run_id": run_id,
            "pipeline": "p",
            "job": "skills",
            "status": "completed",
            "started_at": f"2026-01-0{i + 1}T02:00:00+00:00",
            "metrics": {"accuracy": 0.9 + i / 100, "n_gold": 10, "n_ties": 1},
            "timings": {"fit": 1.0, "export": 0.5},
            "inputs": [{"name": "labels", "path": "/d/l.csv", "sha256": "ab" * 32, "rows": 3, "format": "csv"}],
            "cache": {"hit": i == 3},
        }
        tables = {**_out_tables(), "runs": runs_row(manifest)}
        load_tables(url, tables, run_id, mode=mode, schema="crowd", always_append=("runs",))
    assert _duck_rows(db, "SELECT DISTINCT run_id FROM crowd.consensus") == [("r2",)]
    rows = _duck_rows(
        db,
        "SELECT run_id, accuracy, n_gold, seconds, cache_hit, json_extract(metrics, '$.n_ties')::INT"
        " FROM crowd.runs ORDER BY run_id",
    )
    assert rows == [("r0", 0.9, 10, 1.5, False, 1), ("r1", 0.91, 10, 1.5, False, 1), ("r2", 0.93, 10, 1.5, True, 1)]
    cols = _duck_rows(db, "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'")
    assert [c for (c,) in cols] == RUNS_SCHEMA.names


def test_duckdb_failed_load_leaves_no_rows_of_the_run(tmp_path: Path) -> None:
    db = tmp_path / "out.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE skills (something INTEGER, run_id VARCHAR)")  # incompatible with this run's table
    con.close()
    with pytest.raises(WarehouseError, match="nothing was loaded"):
        load_tables(f"duckdb:///{db}", _out_tables(), "r1", mode="append")
    names = {r[0] for r in _duck_rows(db, "SELECT table_name FROM information_schema.tables")}
    assert names == {"skills"}  # consensus (loaded first) was rolled back with the failure


# --- PostgreSQL ----------------------------------------------------------------------------------------


def _pg(pg_server) -> sa.Engine:  # type: ignore[no-untyped-def]
    url = sa.engine.make_url(pg_server.url).set(drivername="postgresql+psycopg", password=pg_server.password)
    return sa.create_engine(url)


def test_postgresql_query_binds_params(pg_server, rte_dir: Path) -> None:  # type: ignore[no-untyped-def]
    labels = _labels_frame(rte_dir).rename(columns={"task": "item_id", "worker": "annotator", "label": "answer"})
    engine = _pg(pg_server)
    labels.to_sql("lib_labels", engine, if_exists="replace", index=False)
    engine.dispose()
    pw = os.environ[pg_server.password_env]
    cols = {"task": "item_id", "worker": "annotator", "label": "answer"}
    sql = "SELECT item_id, annotator, answer FROM lib_labels WHERE batch = :batch"
    t = read_query(pg_server.url, sql, INPUTS["labels"], {"batch": 2}, cols, password=pw)
    assert t.n_rows == int((labels["batch"] == 2).sum()) and t.format == "postgresql" and t.source == pg_server.url
    assert set(t.df.columns) == {"task", "worker", "label"} and t.df["task"].str.isdigit().all()
    with pytest.raises(InputError, match="returned no rows"):
        read_query(
            pg_server.url,
            "SELECT * FROM lib_labels WHERE annotator = :w",
            INPUTS["labels"],
            {"w": "' OR 1=1 --"},
            cols,
            password=pw,
        )
    with pytest.raises(WarehouseError, match="query failed"):
        read_query(pg_server.url, "SELECT * FROM no_such_table", INPUTS["labels"], password=pw)


def test_postgresql_loads_append_replace_and_rollback(pg_server) -> None:  # type: ignore[no-untyped-def]
    pw = pg_server.password
    tables = _out_tables()
    load_tables(pg_server.url, tables, "r1", mode="append", schema="lib_load", password=pw)
    load_tables(pg_server.url, tables, "r2", mode="append", schema="lib_load", password=pw)
    load_tables(pg_server.url, tables, "r2", mode="append", schema="lib_load", password=pw)
    engine = _pg(pg_server)
    with engine.connect() as c:
        counts = c.execute(sa.text("SELECT run_id, count(*) FROM lib_load.consensus GROUP BY run_id ORDER BY 1")).all()
        assert [tuple(r) for r in counts] == [("r1", 2), ("r2", 2)]
        nan = c.execute(sa.text("SELECT confidence FROM lib_load.consensus WHERE task = '2' LIMIT 1")).scalar()
        assert nan != nan
    load_tables(pg_server.url, tables, "r3", mode="replace", schema="lib_load", password=pw)
    with engine.connect() as c:
        assert c.execute(sa.text("SELECT DISTINCT run_id FROM lib_load.skills")).scalars().all() == ["r3"]
        c.execute(sa.text("CREATE TABLE lib_load.bad_skills (something integer, run_id text)"))
        c.commit()
    with pytest.raises(WarehouseError, match="nothing was loaded"):
        load_tables(pg_server.url, tables, "r4", mode="append", schema="lib_load", prefix="bad_", password=pw)
    with engine.connect() as c:
        assert not sa.inspect(c).has_table("bad_consensus", schema="lib_load")  # rolled back with the failure
    engine.dispose()


# --- hive layout ---------------------------------------------------------------------------------------


def _frames() -> dict[str, pd.DataFrame]:
    return {
        "consensus": pd.DataFrame(
            {
                "task": ["1", "2"],
                "label": ["a", "b"],
                "confidence": [0.9, 0.6],
                "n_labels": [3, 2],
                "fallback": [False, True],
            }
        ),
        "extra": pd.DataFrame({"k": ["x"]}),
    }


def test_hive_layout_reads_back_with_duckdb_and_pyarrow(tmp_path: Path) -> None:
    schemas = {"consensus": OUTPUTS["skills"]["consensus"]}
    w1 = write_run(tmp_path, "pipe", "20261122T010203Z-aaaaaaaa", _frames(), {"run_id": "a"}, schemas, layout="hive")
    write_run(tmp_path, "pipe", "20261123T010203Z-bbbbbbbb", _frames(), {"run_id": "b"}, schemas, layout="hive")
    write_run(tmp_path, "other", "20261123T050000Z-cccccccc", _frames(), {"run_id": "c"}, schemas, layout="hive")
    part = tmp_path / "consensus" / "pipeline=pipe" / "run_date=2026-11-22" / "part-20261122T010203Z-aaaaaaaa.parquet"
    assert part.is_file()
    man = json.loads((w1.path / "manifest.json").read_text())
    assert man["layout"] == "hive" and (w1.path / man["outputs"]["consensus"]["path"]).resolve() == part.resolve()
    assert man["outputs"]["consensus"]["partition"] == {"pipeline": "pipe", "run_date": "2026-11-22"}
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob(".*.partial"))

    ds = pads.dataset(str(tmp_path / "consensus"), format="parquet", partitioning="hive")
    t = ds.to_table()
    assert t.num_rows == 6 and {"pipeline", "run_date", "run_id"} <= set(t.column_names)
    sub = ds.to_table(filter=(pads.field("pipeline") == "pipe") & (pads.field("run_date") == "2026-11-23")).to_pandas()
    assert sub["run_id"].unique().tolist() == ["20261123T010203Z-bbbbbbbb"] and sub["task"].tolist() == ["1", "2"]

    con = duckdb.connect()
    rows = con.execute(
        "SELECT pipeline, CAST(run_date AS VARCHAR), run_id, count(*) FROM read_parquet(?, hive_partitioning=true) "
        "GROUP BY ALL ORDER BY ALL",
        [str(tmp_path / "consensus" / "**" / "*.parquet")],
    ).fetchall()
    assert rows == [
        ("other", "2026-11-23", "20261123T050000Z-cccccccc", 2),
        ("pipe", "2026-11-22", "20261122T010203Z-aaaaaaaa", 2),
        ("pipe", "2026-11-23", "20261123T010203Z-bbbbbbbb", 2),
    ]
    conf = con.execute(
        "SELECT confidence FROM read_parquet(?, hive_partitioning=true) WHERE pipeline = 'pipe' AND task = '1'",
        [str(tmp_path / "consensus" / "**" / "*.parquet")],
    ).fetchall()
    assert conf == [(0.9,), (0.9,)]


def test_hive_failure_leaves_no_part(tmp_path: Path) -> None:
    bad = {"consensus": _frames()["consensus"], "extra": pd.DataFrame({"k": [object()]})}  # not writable to Parquet
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        write_run(tmp_path, "pipe", "20261122T010203Z-aaaaaaaa", bad, {}, layout="hive")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    with pytest.raises(ValueError, match="also an output table name"):
        write_run(tmp_path, "consensus", "r1", _frames(), {}, layout="hive")


# --- a source query is read-only by construction (issue #18, class 6) --------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "COPY (SELECT 1 AS task) TO '{out}'",
        "SELECT 1 AS task; COPY (SELECT 1) TO '{out}'",
        "SELECT * INTO t2 FROM labels",
        "CREATE TABLE t2 AS SELECT * FROM labels",
        "INSERT INTO labels VALUES ('t', 'w', 'l')",
        "ATTACH '{out}' AS other",
        "SET enable_external_access = true",
        "PRAGMA enable_profiling",
        "INSTALL httpfs",
        "CALL pragma_version()",
        "WITH d AS (DELETE FROM labels RETURNING *) SELECT * FROM d",
        "EXPORT DATABASE '{out}'",
    ],
)
def test_source_query_must_be_one_read_only_select(sql: str, tmp_path: Path) -> None:
    from crowdflow.storage.warehouse import check_read_only_query

    out = tmp_path / "written.csv"
    db = tmp_path / "src.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE labels AS SELECT 't1' AS task, 'w1' AS worker, 'a' AS label")
    con.close()
    text = sql.replace("{out}", str(out))
    for kind in ("duckdb", "postgresql"):
        with pytest.raises(SpecError, match=r"sql: (a source|not a query)"):
            check_read_only_query(text, kind)  # type: ignore[arg-type]
    for url in ("duckdb:///:memory:", f"duckdb:///{db}"):  # the spec refuses it; so does the reader
        data = {"name": "x", "labels": {"sql": text, "connection": url}}
        with pytest.raises(SpecError, match="labels: "):
            parse_spec(data, base_dir=tmp_path)
        with pytest.raises(SpecError):
            read_query(url, text, INPUTS["labels"])
    assert not out.exists()


def test_read_only_selects_still_work(tmp_path: Path) -> None:
    from crowdflow.storage.warehouse import check_read_only_query

    for sql in (
        "SELECT * FROM labels",
        "FROM labels",
        "WITH a AS (SELECT * FROM labels) SELECT * FROM a",
        "SELECT * FROM labels UNION ALL SELECT * FROM labels",
        "SELECT * FROM labels WHERE task = $task",
    ):
        check_read_only_query(sql, "duckdb")
    check_read_only_query("SELECT * FROM labels WHERE task = :task", "postgresql")
    # an in-memory DuckDB source may still read data files, and a database file is opened read-only
    part = tmp_path / "labels.parquet"
    duckdb.sql("SELECT 't1' AS task, 'w1' AS worker, 'a' AS label").write_parquet(str(part))
    got = read_query("duckdb:///:memory:", f"SELECT * FROM read_parquet('{part}')", INPUTS["labels"])
    assert got.df[["task", "worker", "label"]].values.tolist() == [["t1", "w1", "a"]]
    db = tmp_path / "src.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE labels AS SELECT 't1' AS task, 'w1' AS worker, 'a' AS label")
    con.close()
    assert read_query(f"duckdb:///{db}", "SELECT * FROM labels", INPUTS["labels"]).n_rows == 1
    with pytest.raises(WarehouseError, match="query failed"):  # no other file is reachable from a database file
        read_query(f"duckdb:///{db}", f"SELECT * FROM read_parquet('{part}')", INPUTS["labels"])
