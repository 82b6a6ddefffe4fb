"""Folded ranking runs through the flow (``ranking.incremental`` + ``outliers: none``) against full runs.

The same edit sequence as tests/incremental/test_flows.py (days added, re-delivered, reordered, an annotator erased,
a day deleted) on generated families (±1 and integer outcomes, integer and real weights, disconnected graphs).
After every step: the ``ranking`` table equals the full run's bit for bit when the sums are integers (≤ 1e-12
relative otherwise); ``components`` equals it column by column (exact integer columns, shares to 1e-12, the row
quantiles NaN with a reason); ``pair_residuals`` equals the full run's ``residuals`` summed per pair; and reading a
stored file's rows fails the run (the manifest says none were read).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd
import pytest

from crowdflow.contracts.errors import SpecError, ValidationFailed
from crowdflow.storage.increments import read_state, state_dir
from tests.incremental.helpers import FAMILIES, assert_folded_tables, comparisons_family, write_day
from tests.incremental.test_flows import Compare, _run, _sequence, _spec

pytestmark = pytest.mark.usefixtures("prefect_harness")
ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def _stored_rows_unreadable() -> Iterator[None]:
    """Any read of a stored file's rows during the run fails it."""

    def refuse(*args: Any, **kwargs: Any) -> pd.DataFrame:
        raise AssertionError("a folded run read a stored file's rows")

    with (
        mock.patch("crowdflow.storage.increment_inputs.stored_rows", refuse),
        mock.patch("crowdflow.storage.increments.stored_rows", refuse),
    ):
        yield


def _folded_equals_full(integral: bool) -> Compare:
    def compare(inc: Any, full: Any, what: str) -> None:
        assert_folded_tables(inc.tables, full.tables, integral, what)
        rec = inc.manifest["incremental"]["comparisons"]
        first = what == "after start"
        assert rec["stored_rows_read"] == 0 and (first or rec["rows_read"] < rec["rows"]), what
        assert rec["fold"]["how"] == ("updated" if integral and not first else "refolded"), what
        assert inc.manifest["fit"]["folded"] and inc.manifest["inputs"][0]["rows"] == rec["rows"]

    return compare


@pytest.mark.parametrize(
    "family",
    # ~25 s each (14 flow runs); the first replaces test_flows' former least-squares case in the default suite
    ["sign", *(pytest.param(f, marks=pytest.mark.slow) for f in ("int-weights-disconnected", "real",
     "real-weights-disconnected"))],
)  # fmt: skip
def test_folded_flow_equals_full_run(tmp_path: Path, family: str) -> None:
    kw = FAMILIES[family]
    seed = list(FAMILIES).index(family) + 3
    days = comparisons_family(seed, n_items=18, **kw)  # type: ignore[arg-type]
    integral = kw["outcomes"] != "real" and kw.get("weights") != "real"
    options = {"outliers": "none"}
    _sequence("ranking", tmp_path, options, seed, days, _folded_equals_full(integral), _stored_rows_unreadable)


def test_folded_flow_on_dask_and_the_refusals(tmp_path: Path) -> None:
    """``runner.kind: dask`` runs the folded path (the new files in the flow process); the row path and queries
    are refused with a SpecError."""
    days = comparisons_family(9, outcomes="sign")
    folder, out = tmp_path / "data", tmp_path / "out"
    for d in range(2):
        write_day(folder, d, days[d])
    spec = _spec("ranking", folder, out, "dask", {"outliers": "none", "incremental": True})
    dask = spec.model_copy(update={"runner": spec.runner.model_copy(update={"kind": "dask"})})
    assert dask.partitioned_input() is not None
    inc = _run(dask)
    full = _run(_spec("ranking", folder, out, "full", {"outliers": "none"}))
    pd.testing.assert_frame_equal(inc.tables["ranking"], full.tables["ranking"], check_exact=True)
    assert inc.manifest["incremental"]["comparisons"]["fold"]["how"] == "refolded"
    rows = _spec("ranking", folder, out, "trimmed", {"outliers": "trimmed", "incremental": True})
    rows = rows.model_copy(update={"runner": rows.runner.model_copy(update={"kind": "dask"})})
    with pytest.raises(SpecError, match="outliers: none"):
        _run(rows)
    url = _spec("ranking", folder, out, "url", {"outliers": "none", "incremental": True})
    url = url.model_copy(update={"comparisons": url.comparisons.model_copy(update={"path": "s3://bucket/days/"})})
    with pytest.raises(SpecError, match="query or a URL"):
        _run(url)


_SPEC = """name: daily
job: ranking
comparisons:
  path: data
ranking:
  outliers: none
checks:
  connectivity: warn
output:
  dir: out
  report: false
"""


def test_run_killed_after_export_before_commit(tmp_path: Path) -> None:
    """SIGKILL when the run starts to commit (its run folder exported): the store keeps its previous state, and the
    next run reads the new day again and equals a full run."""
    from prefect.settings import PREFECT_API_URL

    days = comparisons_family(13, outcomes="sign")
    write_day(tmp_path / "data", 0, days[0])
    (tmp_path / "spec.yaml").write_text(_SPEC)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    cmd = [sys.executable, "-m", "flows.cli", "run", "spec.yaml", "--incremental"]
    spec = _spec("ranking", tmp_path / "data", tmp_path / "out", "daily", {"outliers": "none", "incremental": True})
    _run(spec)
    store = state_dir(tmp_path / "out", "daily")
    before = (store / "state.json").read_text()
    write_day(tmp_path / "data", 1, days[1])
    kill = {**env, "CROWDFLOW_TEST_KILL_STATE_AT_STEP": "before-commit"}
    assert subprocess.run(cmd, cwd=tmp_path, env=kill, capture_output=True, check=False).returncode == -9
    assert len([p for p in (tmp_path / "out" / "daily").iterdir() if not p.name.startswith(".")]) == 2  # exported
    assert (store / "state.json").read_text() == before and read_state(store).version == 1
    inc = _run(spec)
    rec = inc.manifest["incremental"]["comparisons"]
    assert rec["files_read"] == ["day=2026-11-02/part-0.parquet"] and rec["fold"]["how"] == "updated"
    full = _run(_spec("ranking", tmp_path / "data", tmp_path / "full", "full", {"outliers": "none"}))
    pd.testing.assert_frame_equal(inc.tables["ranking"], full.tables["ranking"], check_exact=True)
    assert read_state(store).version == 2


@pytest.mark.slow  # five seconds of flow runs on a quiet host, ~20 s under load
def test_folded_run_validates_each_new_file_by_itself(tmp_path: Path) -> None:
    """A first folded run over three files reads, validates and sums them one at a time: a bad row stops it naming
    its file and its row in that file, with nothing committed; ``checks.validation: warn`` counts the failures over
    the files and goes on (the clean multi-file first run equals a full run: test_folded_flow_equals_full_run)."""
    days = comparisons_family(17, n_days=3, outcomes="sign")
    folder, out = tmp_path / "data", tmp_path / "out"
    bad = days[1].copy()
    bad["annotator"] = bad["annotator"].astype(object)
    bad.loc[5, "annotator"] = None  # row 6 of the second file: an id must not be missing (the sums do not read it)
    for d, df in enumerate([days[0], bad, days[2]]):
        write_day(folder, d, df)
    spec = _spec("ranking", folder, out, "daily", {"outliers": "none", "incremental": True})
    with pytest.raises(ValidationFailed, match=r"(?s)day=2026-11-02/part-0\.parquet.*row 6 \(annotator"):
        _run(spec)
    assert read_state(state_dir(out, "daily")).version == 0
    warn = spec.model_copy(update={"checks": spec.checks.model_copy(update={"validation": "warn"})})
    run = _run(warn)
    n = sum(len(d) for d in days)
    said = run.manifest["checks"]["validation.comparisons"]
    assert said.endswith(f"({n} rows; 3 files validated one by one)") and run.manifest["checks"]["validation"] != (
        "passed"
    ), said
