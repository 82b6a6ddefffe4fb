"""An export killed at every file-system step (issue #18, class 2): readers never see an uncommitted run.

Each case runs :func:`crowdflow.storage.run_store.write_run` in a subprocess with the test hook
``CROWDFLOW_TEST_KILL_AT_STEP=k`` (the writer SIGKILLs itself right after its k-th step: each table, the
report file, the manifest, the commit rename, each hive part's publication), for both layouts and for runs
with one to three tables. After each kill the test reads the output folder as a user would (pyarrow's
hive datasets, DuckDB's ``hive_partitioning``, :func:`latest_run`) and checks that every visible row belongs
to a run whose manifest is completed; then it runs the next export in-process and checks that the killed
run was either finished (killed after its commit) or removed (killed before it), with no hidden file left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pyarrow.dataset as pads
import pytest

from crowdflow.storage.run_store import TEST_KILL_ENV, latest_run, write_run

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = "pipe"
TABLES = ("consensus", "skills", "components")

_WRITER = textwrap.dedent(
    """
    import sys
    import pandas as pd
    from crowdflow.storage.run_store import write_run
    out, run_id, layout, n, parts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
    names = ("consensus", "skills", "components")[:n]
    tables = {t: pd.DataFrame({"task": [f"{t}-{i}" for i in range(3)], "x": [1.0, 2.0, 3.0]}) for t in names}
    datasets = {"consensus": parts} if parts else None  # parts written by Dask workers, as a partitioned run has
    if parts:
        del tables["consensus"]
    write_run(out, "pipe", run_id, tables, {"run_id": run_id}, extra_files={"report.html": b"<html></html>"},
              layout=layout, datasets=datasets)
    """
)


def _frames(n: int) -> dict[str, object]:
    import pandas as pd

    return {t: pd.DataFrame({"task": [f"{t}-{i}" for i in range(3)], "x": [1.0, 2.0, 3.0]}) for t in TABLES[:n]}


def _n_steps(layout: str, n_tables: int) -> int:
    # tables, the report file, the manifest, the commit, then (hive) one publication per table
    return n_tables + 1 + 1 + 1 + (n_tables if layout == "hive" else 0)


def _completed_runs(out: Path) -> set[str]:
    runs = set()
    base = out / PIPELINE
    for d in base.iterdir() if base.is_dir() else []:
        m = d / "manifest.json"
        if (
            d.is_dir()
            and not d.name.startswith(".")
            and m.is_file()
            and json.loads(m.read_text())["status"] == "completed"
        ):
            runs.add(d.name)
    return runs


def _visible_rows(out: Path, layout: str) -> dict[str, set[str]]:
    """Run ids a reader sees per table: pyarrow hive datasets and DuckDB globs (hive), run folders (flat)."""
    seen: dict[str, set[str]] = {}
    for t in TABLES:
        if layout == "hive":
            folder = out / t
            if not folder.is_dir():
                continue
            ds = pads.dataset(str(folder), format="parquet", partitioning="hive")
            ids = set(ds.to_table(columns=["run_id"]).column("run_id").to_pylist())
            glob = str(folder / "**" / "*.parquet")
            duck = {
                r[0]
                for r in duckdb.sql(
                    f"SELECT DISTINCT run_id FROM read_parquet('{glob}', hive_partitioning=true)"
                ).fetchall()
            }
            assert ids == duck
            seen[t] = ids
        else:
            seen[t] = {
                p.parent.name
                for p in [*(out / PIPELINE).glob(f"*/{t}.parquet"), *(out / PIPELINE).glob(f"*/{t}/")]
                if not p.parent.name.startswith(".")
            }
    return seen


def _hidden_files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob(".*") if p.name not in {"."})


def _worker_parts(folder: Path, run_id: str) -> list[str]:
    """Two Parquet parts of ``consensus`` as a Dask worker leaves them (the writer moves them into the run)."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(2):
        path = folder / f"{run_id}-{k}.parquet"
        pd.DataFrame({"task": [f"consensus-{k}-{i}" for i in range(2)], "x": [1.0, 2.0]}).to_parquet(path)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize(
    ("layout", "n_tables", "worker_parts"),
    [
        pytest.param(layout, n, parts, marks=[pytest.mark.slow] if (layout, parts) == ("hive", False) else [])
        for layout in ("flat", "hive")
        for n, parts in ((1, False), (3, False), (2, True))
    ],
)  # every step killed in both layouts; the hive layout's whole-table cases (one kill per step each) run in the slow tier
def test_kill_at_every_export_step(tmp_path: Path, layout: str, n_tables: int, worker_parts: bool) -> None:
    """Also for a table the Dask workers wrote as parts (a folder of parts, in the run or in its hive partition)."""
    out = tmp_path / "out"
    earlier = "20261101T000000Z-earlier0"
    write_run(out, PIPELINE, earlier, _frames(n_tables), {"run_id": earlier}, layout=layout)  # type: ignore[arg-type]
    total = _n_steps(layout, n_tables)
    for k in range(1, total + 1):
        run_id = f"20261102T0000{k:02d}Z-killed{k:02d}"
        env = {**os.environ, TEST_KILL_ENV: str(k), "PYTHONPATH": str(ROOT)}
        parts = _worker_parts(tmp_path / "scratch", run_id) if worker_parts else []
        proc = subprocess.run(
            [sys.executable, "-c", _WRITER, str(out), run_id, layout, str(n_tables), *parts],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == -signal.SIGKILL, f"step {k}: {proc.stderr[-2000:]}"
        done = _completed_runs(out)
        committed = k >= n_tables + 3  # killed at or after the commit step
        assert (run_id in done) == committed, f"step {k}"
        # what a reader sees right after the crash: only rows of completed runs
        for table, ids in _visible_rows(out, layout).items():
            assert ids <= done, f"step {k}: {table} shows rows of uncommitted runs {ids - done}"
        assert latest_run(out / PIPELINE).name in done

        # the next export of the pipeline finishes or removes what the killed one left
        nxt = f"20261102T0000{k:02d}Z-next{k:04d}"
        tables = _frames(n_tables)
        datasets = None
        if worker_parts:
            del tables["consensus"]
            datasets = {"consensus": _worker_parts(tmp_path / "scratch", nxt)}
        write_run(out, PIPELINE, nxt, tables, {"run_id": nxt}, layout=layout, datasets=datasets)  # type: ignore[arg-type]
        done = _completed_runs(out)
        seen = _visible_rows(out, layout)
        for table in TABLES[:n_tables]:
            assert seen[table] == done, f"step {k}: {table} has {seen[table]} but completed runs are {done}"
        assert _hidden_files(out) == [], f"step {k}: left {_hidden_files(out)}"
        assert latest_run(out / PIPELINE).name == nxt
