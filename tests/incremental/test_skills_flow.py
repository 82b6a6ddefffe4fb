"""Folded majority-vote skills runs through the pipeline: the CLI with a kill before the commit, a repeated answer
refused with exit code 2, gold answers and a Dask runner (docs/methods/skills.md §4.4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.spec import parse_spec
from crowdflow.storage.increments import read_state, state_dir
from tests.incremental.helpers import assert_folded_skills_tables, labels_family, write_day
from tests.incremental.test_flows import _run

pytestmark = pytest.mark.usefixtures("prefect_harness")
ROOT = Path(__file__).resolve().parents[2]
SPEC = """name: daily
job: skills
labels:
  path: data
skills:
  method: mv
checks:
  identifiability: warn
  isolated_workers: warn
output:
  dir: out
  report: false
"""


def _spec(folder: Path, out: Path, name: str, incremental: bool, truth: Path | None = None, dask: bool = False) -> Any:
    raw: dict[str, Any] = {
        "name": name,
        "job": "skills",
        "labels": {"path": str(folder)},
        "skills": {"method": "mv", "incremental": incremental},
        "checks": {"identifiability": "warn", "isolated_workers": "warn"},
        "output": {"dir": str(out), "report": False},
        "cache": {"enabled": False},
    }
    if truth is not None:
        raw["truth"] = {"path": str(truth)}
    if dask:
        raw["runner"] = {"kind": "dask", "n_workers": 1}
    return parse_spec(raw)


def _env(**extra: str) -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": str(PREFECT_API_URL.value()), **extra}


# ~40 s at load 8-12 (a CLI process and four flow runs): the slow tier, to keep the default run's additions near 10 s;
# the store's own kill points are in the default tier (tests/incremental/test_folds.py)
@pytest.mark.slow
def test_run_killed_after_export_before_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL when the run starts to commit (its run folder exported): the store keeps its previous state (label
    fold and worker fold), and the next run reads the new day again and equals a full run."""
    days = labels_family(13)
    write_day(tmp_path / "data", 0, days[0])
    (tmp_path / "spec.yaml").write_text(SPEC)
    cmd = [sys.executable, "-m", "flows.cli", "run", "spec.yaml", "--incremental"]
    spec = _spec(tmp_path / "data", tmp_path / "out", "daily", True)
    _run(spec)
    store = state_dir(tmp_path / "out", "daily")
    before = (store / "state.json").read_text()
    write_day(tmp_path / "data", 1, days[1])
    kill = _env(CROWDFLOW_TEST_KILL_STATE_AT_STEP="before-commit")
    assert subprocess.run(cmd, cwd=tmp_path, env=kill, capture_output=True, check=False).returncode == -9
    assert len([p for p in (tmp_path / "out" / "daily").iterdir() if not p.name.startswith(".")]) == 2  # exported
    assert (store / "state.json").read_text() == before and read_state(store).version == 1
    inc = _run(spec)
    rec = inc.manifest["incremental"]["labels"]
    assert rec["files_read"] == ["day=2026-11-02/part-0.parquet"] and rec["fold"]["how"] == "updated"
    assert rec["fold"]["workers"]["how"] == "updated"
    full = _run(_spec(tmp_path / "data", tmp_path / "full", "full", False))
    assert_folded_skills_tables(inc.tables, full.tables, "after the kill")
    assert read_state(store).version == 2
    # a repeated (task, worker) answer in a new day: an input error (exit 2) naming the pair; the store is kept
    again = days[1].iloc[:2]
    write_day(tmp_path / "data", 2, pd.concat([days[2], again], ignore_index=True))
    from flows.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", "spec.yaml", "--incremental"]) == 2
    assert "more than once" in capsys.readouterr().err
    assert read_state(store).version == 2


@pytest.mark.slow
def test_folded_skills_with_gold_on_dask(tmp_path: Path) -> None:
    """``runner.kind: dask`` runs the folded path (the new files read in the flow process); with gold answers the
    gold tables and accuracy equal a full run's (the gold tasks' stored rows re-read, counted)."""
    days = labels_family(21)
    folder = tmp_path / "data"
    for d in range(2):
        write_day(folder, d, days[d])
    tasks = pd.unique(pd.concat(days)["task"].astype(str))
    rng = np.random.default_rng(0)
    gold = pd.DataFrame({"task": tasks[::3], "label": rng.integers(0, 2, len(tasks[::3])).astype(str)})
    truth = tmp_path / "truth.csv"
    gold.to_csv(truth, index=False)
    for step in range(2):
        if step:
            write_day(folder, 2, days[2])
        spec = _spec(folder, tmp_path / "out", "inc", True, truth, dask=True)
        assert spec.partitioned_input() is not None
        inc = _run(spec)
        full = _run(_spec(folder, tmp_path / "full", f"full{step}", False, truth))
        assert_folded_skills_tables(inc.tables, full.tables, f"step {step}")
        assert {"gold_workers", "gold_confusion"} <= set(inc.tables)
        for key in ("accuracy", "n_gold", "baseline_accuracy", "n_ties", "n_changed_vs_majority"):
            assert inc.manifest["metrics"][key] == full.manifest["metrics"][key], key
        workers = inc.manifest["incremental"]["labels"]["fold"]["workers"]
        assert workers["how"] == ("rebuilt" if step == 0 else "updated")
        assert inc.manifest["incremental"]["labels"]["stored_rows_read"] == workers["stored_rows_read"]
        if step:  # the stored rows of the touched tasks and of the stored gold tasks
            assert workers["stored_rows_read"] > 0


@pytest.mark.slow
def test_consensus_published_in_parts_the_untouched_ones_hard_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daily run on a fold kept in parts (:mod:`crowdflow.skills.folded_parts`, parts made tiny) publishes its
    consensus as the parts: ``read_run`` reads them as one table equal to a full run's; the parts no new task falls
    in are the same files (one inode) as the previous run's; the manifest counts the parts rewritten and reused."""
    from crowdflow.skills import folded_parts

    monkeypatch.setattr(folded_parts, "SPLIT_TASKS", 15)
    monkeypatch.setattr(folded_parts, "NEW_PART_MIN", 10)
    days = labels_family(17, n_days=5, tasks_per_day=30)
    folder = tmp_path / "data"
    for d in range(2):
        write_day(folder, d, days[d])
    spec = _spec(folder, tmp_path / "out", "daily", True)
    inodes: dict[int, str] = {}
    for d in range(2, 5):
        write_day(folder, d, days[d])
        inc = _run(spec)
        full = _run(_spec(folder, tmp_path / "full", f"full{d}", False))
        assert_folded_skills_tables(inc.tables, full.tables, f"day {d}")
        out = inc.manifest["outputs"]["consensus"]
        parts = inc.manifest["incremental"]["labels"]["fold"]["workers"]["parts"]
        assert out["path"] == "consensus/" and out["parts"] == parts["total"] >= 3
        files = sorted((inc.path / "consensus").glob("part-*.parquet"))
        now = {os.stat(f).st_ino: f.name for f in files}
        if d > 2:  # the first run migrates (every part written); then the untouched parts are the previous files
            assert parts["reused"] >= 1 and parts["rewritten"] + parts["reused"] == parts["total"]
            assert len(set(now) & set(inodes)) == parts["reused"]
            assert all(os.stat(f).st_nlink >= 2 for f in files)  # the store's file and the run's
        inodes = now
