"""Features that compose: job × runner × input kind × output × cache × consumer, every pair of values covered.

Each capability has its own tests; users meet the combinations (issue #33, item 2). The full product is 800 runs;
a pairwise covering array (every pair of values of every two factors in at least one run, constraints honoured)
is about 25. It is generated here, by a greedy construction over the feasible rows of the product, and
:func:`test_the_array_covers_every_feasible_pair` checks the coverage itself. Each row runs end to end (a real
pipeline under the embedded Prefect API; Dask rows on a LocalCluster; SQL inputs from DuckDB; PostgreSQL outputs
to the session's throw-away server) and its read-back tables must equal the same job's inline flat-file run.
:func:`test_a_planted_reader_fault_is_caught` breaks the run reader on purpose: the check must fail.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

import crowdflow.storage.runs as runs_module
from crowdflow.skills.reasons import PARTITIONED_MISSING
from crowdflow.spec import parse_spec
from crowdflow.storage.run_store import read_skills_run

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

DATA = Path(__file__).resolve().parents[2] / "crowdflow" / "data"

FACTORS: dict[str, tuple[str, ...]] = {
    "job": ("skills", "ranking"),
    "runner": ("inline", "dask"),
    "input": ("file", "folder", "hive", "url", "sql"),
    "output": ("flat", "hive", "duckdb", "postgresql"),
    "cache": ("on", "off"),
    "consumer": ("read_run", "latest_run", "next_batch", "report", "warehouse"),
}


def feasible(row: dict[str, str]) -> bool:
    """The combinations that mean something: the next batch reads skills runs; a warehouse needs a database."""
    if row.get("consumer") == "next_batch" and row.get("job") not in (None, "skills"):
        return False
    return not (row.get("consumer") == "warehouse" and row.get("output") not in (None, "duckdb", "postgresql"))


def pairwise_rows(factors: dict[str, tuple[str, ...]]) -> list[dict[str, str]]:
    """A pairwise covering array over the feasible rows of the product, by greedy choice (deterministic).

    Each step takes the feasible row that covers the most pairs not yet covered (ties: first in product order),
    until every feasible pair is covered. A pair is feasible when some feasible row holds it.
    """
    names = list(factors)
    rows = [dict(zip(names, values, strict=True)) for values in itertools.product(*factors.values())]
    rows = [r for r in rows if feasible(r)]

    def pairs(row: dict[str, str]) -> set[tuple[str, str, str, str]]:
        return {(a, row[a], b, row[b]) for a, b in itertools.combinations(names, 2)}

    todo = set().union(*(pairs(r) for r in rows))
    chosen: list[dict[str, str]] = []
    while todo:
        best = max(rows, key=lambda r: len(pairs(r) & todo))
        chosen.append(best)
        todo -= pairs(best)
    return chosen


ROWS = pairwise_rows(FACTORS)


def test_the_array_covers_every_feasible_pair() -> None:
    names = list(FACTORS)
    for a, b in itertools.combinations(names, 2):
        for va, vb in itertools.product(FACTORS[a], FACTORS[b]):
            possible = feasible({a: va, b: vb}) and any(
                feasible({**dict(zip(names, vals, strict=True))})
                and vals[names.index(a)] == va
                and vals[names.index(b)] == vb
                for vals in itertools.product(*FACTORS.values())
            )
            covered = any(r[a] == va and r[b] == vb for r in ROWS)
            assert covered == possible, (a, va, b, vb)
    assert all(feasible(r) for r in ROWS)
    assert len(ROWS) <= 30  # the suite's time: each row is a pipeline run


# ---------------------------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Inputs:
    """One job's main input in every kind the matrix uses, written once per module."""

    table: str  # the spec's input field
    frame: pd.DataFrame
    sources: dict[str, dict[str, Any]]
    extra: dict[str, Any]  # the job's other spec fields (truth, options)


def _write_inputs(root: Path, job: str) -> Inputs:
    if job == "skills":
        frame = pd.read_csv(DATA / "snow_rte" / "labels.csv", dtype=str)
        table, key = "labels", "task"
        extra: dict[str, Any] = {
            "truth": {"path": str(DATA / "snow_rte" / "truth.csv")},
            "skills": {"method": "ds", "seed": 0},
        }
    else:
        frame = pd.read_csv(
            DATA / "samples" / "comparisons.csv", dtype={"annotator": str, "item_a": str, "item_b": str}
        )
        table, key = "comparisons", "annotator"
        extra = {"ranking": {"outliers": "trimmed"}}  # the robust rule both runners have
    base = root / job
    base.mkdir()
    csv = base / f"{table}.csv"
    frame.to_csv(csv, index=False)
    folder = base / "folder"
    folder.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(frame)), 3)):
        pq.write_table(pa.Table.from_pandas(frame.iloc[part], preserve_index=False), folder / f"part-{i}.parquet")
    hive = base / "hive"
    buckets = frame[key].map(lambda v: sum(map(ord, str(v))) % 3)
    for b in range(3):
        d = hive / f"batch={b}"
        d.mkdir(parents=True)
        pq.write_table(pa.Table.from_pandas(frame[buckets == b], preserve_index=False), d / "part-0.parquet")
    db = base / "inputs.duckdb"
    con = duckdb.connect(str(db))
    try:
        con.register("frame_view", frame)
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM frame_view")
    finally:
        con.close()
    sources = {
        "file": {"path": str(csv)},
        "folder": {"path": str(folder), "format": "parquet"},
        "hive": {"path": str(hive), "format": "parquet"},
        "url": {"path": folder.as_uri(), "format": "parquet"},
        "sql": {"sql": f"SELECT * FROM {table}", "connection": f"duckdb:///{db}"},
    }
    return Inputs(table=table, frame=frame, sources=sources, extra=extra)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Inputs]:
    root = tmp_path_factory.mktemp("composition-inputs")
    return {job: _write_inputs(root, job) for job in FACTORS["job"]}


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address


# ------------------------------------------------------------------------------------------------------ the checks


def _canonical(df: pd.DataFrame) -> pd.DataFrame:
    """A table as compared: columns sorted, rows sorted by every column, a plain index.

    ``run_id`` differs by construction; ``part``/``row_id`` (an outlier row's file of the input and its position
    in it, as read) follow how the input was split and ordered (one part inline, one per file on Dask; a hive
    folder groups rows by partition): the row itself (annotator, items, outcome) is compared instead.
    """
    df = df.drop(columns=[c for c in ("run_id", "part", "row_id") if c in df.columns])
    df = df[sorted(df.columns)]
    keys = [c for c in df.columns if not pd.api.types.is_float_dtype(df[c])] or list(df.columns)
    return df.sort_values(keys, kind="stable").reset_index(drop=True)


def _without_partitioned_missing(
    got: pd.DataFrame, ref: pd.DataFrame, name: str, what: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A skills run whose Dask workers read the labels forms no worker pair: the distinct co-labellers
    (``PARTITIONED_MISSING``) are missing there, each row saying why, where the inline run has them. Those columns
    (and the reason column) are checked for that and left out of the comparison; every other number must agree."""
    cols = [c for c in PARTITIONED_MISSING.get(name, ()) if c in ref.columns and c in got.columns]
    if not cols or not got[cols].isna().all().all():
        return got, ref
    assert ref[cols].notna().all().all(), f"{what}: {name} {cols} missing inline too"
    assert got["missing_reason"].str.contains("distinct co-labellers").all(), f"{what}: {name} {cols} without reason"
    drop = [*cols, "missing_reason"]
    return got.drop(columns=drop), ref.drop(columns=[c for c in drop if c in ref.columns])


def assert_same_tables(got: dict[str, pd.DataFrame], reference: dict[str, pd.DataFrame], what: str) -> None:
    assert set(got) == set(reference), f"{what}: tables {sorted(got)} != {sorted(reference)}"
    for name in reference:
        a, b = _canonical(got[name]), _canonical(reference[name])
        a, b = _without_partitioned_missing(a, b, name, what)
        a, b = _canonical(a), _canonical(b)
        assert list(a.columns) == list(b.columns), f"{what}: {name} columns"
        assert len(a) == len(b), f"{what}: {name} has {len(a)} rows, the inline flat run {len(b)}"
        for col in b.columns:
            if pd.api.types.is_float_dtype(b[col]):
                np.testing.assert_allclose(
                    a[col].to_numpy(float),
                    b[col].to_numpy(float),
                    rtol=1e-6,
                    atol=1e-9,
                    err_msg=f"{what}: {name}.{col}",
                )
            else:
                assert a[col].astype(str).tolist() == b[col].astype(str).tolist(), f"{what}: {name}.{col}"


def _spec(row: dict[str, str], inp: Inputs, out: Path, name: str, dask: str, pg: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "job": row["job"],
        inp.table: inp.sources[row["input"]],
        **inp.extra,
        "cache": {"enabled": row["cache"] == "on"},
        "output": {"dir": str(out), "layout": "hive" if row["output"] == "hive" else "flat"},
    }
    if row["runner"] == "dask":
        spec["runner"] = {"kind": "dask", "address": dask, "partitions": 3}
    if row["output"] == "duckdb":
        spec["output"]["warehouse"] = {"connection": f"duckdb:///{out / 'warehouse.duckdb'}", "schema": "crowdflow"}
    elif row["output"] == "postgresql":
        spec["output"]["warehouse"] = {
            "connection": pg.url,
            "password_env": pg.password_env,
            "schema": name.replace("-", "_"),
        }
    return spec


def _warehouse_tables(row: dict[str, str], spec: dict[str, Any], run_id: str, pg: Any) -> dict[str, pd.DataFrame]:
    wh = spec["output"]["warehouse"]
    schema = wh["schema"]
    if row["output"] == "duckdb":
        con = duckdb.connect(wh["connection"].removeprefix("duckdb:///"), read_only=True)
        try:
            catalog = con.execute("SELECT current_database()").fetchall()[0][0]
            names = [
                r[0]
                for r in con.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND table_catalog = ?",
                    [schema, catalog],
                ).fetchall()
            ]
            return {
                n: con.execute(f'SELECT * FROM "{catalog}"."{schema}"."{n}" WHERE run_id = ?', [run_id]).df()
                for n in names
                if n != "runs"
            }
        finally:
            con.close()
    engine = sa.create_engine(
        pg.url.replace("postgresql://", "postgresql+psycopg://", 1), connect_args={"password": pg.password}
    )
    try:
        with engine.connect() as conn:
            names = [n for n in sa.inspect(conn).get_table_names(schema=schema) if n != "runs"]
            return {
                n: pd.read_sql(sa.text(f'SELECT * FROM "{schema}"."{n}" WHERE run_id = :r'), conn, params={"r": run_id})
                for n in names
            }
    finally:
        engine.dispose()


def run_row(
    row: dict[str, str],
    inp: Inputs,
    out: Path,
    reference: dict[str, pd.DataFrame],
    dask: str,
    pg: Any,
    read_run: Callable[[Path], Any] | None = None,
) -> None:
    """Run one row of the array and check every read-back against the inline flat-file run's tables."""
    from flows.deploy import run_pipeline

    read = read_run or runs_module.read_run
    name = "-".join(row[k] for k in ("job", "runner", "input", "output", "cache", "consumer")).replace("_", "")
    spec = _spec(row, inp, out, name, dask, pg)
    summary = run_pipeline(parse_spec(spec, origin=name, base_dir=None))
    what = f"row {row}"
    run = read(Path(summary["run_dir"]))
    assert_same_tables(run.tables, reference, f"{what}, read_run")
    consumer = row["consumer"]
    if consumer == "latest_run":
        newest = runs_module.latest_run(out, name)
        assert newest.path == run.path
        assert_same_tables(newest.tables, reference, f"{what}, latest_run")
    elif consumer == "report":
        text = (Path(summary["run_dir"]) / "report.html").read_text()
        assert summary["run_id"] in text and "<html" in text[:2000].lower()
    elif consumer == "warehouse":
        assert_same_tables(_warehouse_tables(row, spec, summary["run_id"], pg), reference, f"{what}, warehouse")
    elif consumer == "next_batch":
        skills_run = read_skills_run(out / name)
        for table in ("skills", "consensus"):
            assert_same_tables({table: skills_run[table]}, {table: reference[table]}, f"{what}, next-batch reader")
        batch = run_pipeline(
            parse_spec(
                {
                    "name": f"{name}-next",
                    "job": "next_batch",
                    "skills_run": str(out / name),
                    "open_tasks": {"path": str(DATA / "samples" / "open_tasks.csv")},
                    "workers": {"path": str(DATA / "samples" / "workers.csv")},
                    "assignment": {"budget": 40, "worker_cap": 4, "task_cap": 1},
                    "output": {"dir": str(out)},
                },
                origin=f"{name}-next",
                base_dir=None,
            )
        )
        assert runs_module.read_run(Path(batch["run_dir"])).tables["assignment"].shape[0] > 0


@pytest.fixture(scope="module")
def references(
    inputs: dict[str, Inputs], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, pd.DataFrame]]:
    """Each job's inline run over its CSV file, flat layout, cache off: the tables every row must equal."""
    from flows.deploy import run_pipeline

    out = tmp_path_factory.mktemp("composition-reference")
    refs = {}
    for job, inp in inputs.items():
        spec = {
            "name": f"reference-{job}",
            "job": job,
            inp.table: inp.sources["file"],
            **inp.extra,
            "cache": {"enabled": False},
            "output": {"dir": str(out)},
        }
        summary = run_pipeline(parse_spec(spec, origin=job, base_dir=None))
        refs[job] = runs_module.read_run(Path(summary["run_dir"])).tables
    return refs


@pytest.mark.parametrize("row", ROWS, ids=lambda r: "-".join(r.values()))
def test_composition(
    row: dict[str, str],
    inputs: dict[str, Inputs],
    references: dict[str, dict[str, pd.DataFrame]],
    dask_address: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    pg = request.getfixturevalue("pg_server") if row["output"] == "postgresql" else None
    run_row(row, inputs[row["job"]], tmp_path / "out", references[row["job"]], dask_address, pg)


def test_a_planted_reader_fault_is_caught(
    inputs: dict[str, Inputs], references: dict[str, dict[str, pd.DataFrame]], dask_address: str, tmp_path: Path
) -> None:
    """A reader that loses one row of a folder-of-parts table makes the matrix fail (the check can fail)."""

    def lossy_read_run(path: Path) -> Any:
        run = runs_module.read_run(path)
        run.tables["consensus"] = run.tables["consensus"].iloc[:-1]
        return run

    row = {
        "job": "skills",
        "runner": "dask",
        "input": "folder",
        "output": "flat",
        "cache": "off",
        "consumer": "read_run",
    }
    with pytest.raises(AssertionError, match="consensus has"):
        run_row(
            row, inputs["skills"], tmp_path / "out", references["skills"], dask_address, None, read_run=lossy_read_run
        )
