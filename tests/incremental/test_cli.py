"""``crowdflow run --incremental``, ``crowdflow backfill`` and ``crowdflow forget`` as a user types them.

The commands run in this process (``flows.cli.main``, the console script's entry) except where a process boundary is
what is tested: a run killed by SIGKILL and two runs racing on one store.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from crowdflow.storage.runs import latest_run
from tests.incremental.helpers import labels_family, write_day

ROOT = Path(__file__).resolve().parents[2]
# the commands talk to the session's temporary API (no embedded server of their own: a killed command leaves none)
pytestmark = pytest.mark.usefixtures("prefect_harness")
SPEC = """name: daily
job: skills
labels:
  path: data
skills:
  method: pgd
  duplicates: keep_last
checks:
  identifiability: warn
  isolated_workers: warn
output:
  dir: out
  report: false
"""


def _api_env() -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": str(PREFECT_API_URL.value())}


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = _api_env()
    return subprocess.run([sys.executable, "-m", "flows.cli", *argv], capture_output=True, text=True, cwd=cwd, env=env)


def _main(*argv: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    from flows.cli import main

    monkeypatch.chdir(cwd)
    return main(list(argv))


def test_run_backfill_forget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    days = labels_family(11)
    for d in range(2):
        write_day(tmp_path / "data", d, days[d])
    (tmp_path / "spec.yaml").write_text(SPEC)

    def cli(*argv: str) -> int:
        return _main(*argv, cwd=tmp_path, monkeypatch=monkeypatch)

    assert cli("run", "spec.yaml", "--incremental") == 0
    write_day(tmp_path / "data", 2, days[2])
    assert cli("backfill", "spec.yaml", "--partitions", "day=2026-11-01") == 0, capsys.readouterr().err
    run = latest_run(tmp_path / "out", "daily")
    rec = run.manifest["incremental"]["labels"]
    assert rec["files_read"] == ["day=2026-11-01/part-0.parquet", "day=2026-11-03/part-0.parquet"]
    assert rec["files_reused"] == ["day=2026-11-02/part-0.parquet"]
    assert rec["fold"]["how"] == "rows"  # pgd is not a sum over files: the row path (majority vote alone is folded)
    assert run.increments["version"] == 2 and run.increments["files"] == {"labels": 3}
    victim = str(days[2]["worker"].iloc[0])
    capsys.readouterr()
    assert cli("forget", "spec.yaml", "--worker", victim) == 0
    out = capsys.readouterr().out
    assert "erased one worker" in out and victim not in out
    assert cli("run", "spec.yaml", "--incremental") == 0
    after = latest_run(tmp_path / "out", "daily")
    assert victim not in set(after["skills"]["worker"])
    assert after.manifest["incremental"]["state_from"]["erasures"] == 1
    # a full (not incremental) run of the pipeline leaves the erased worker out too, with the same tables
    assert cli("run", "spec.yaml") == 0
    full = latest_run(tmp_path / "out", "daily")
    for name in ("skills", "consensus"):
        pd.testing.assert_frame_equal(full[name], after[name], check_exact=True)
    # usage errors are exit 2 with one line; the console script itself (a process) once
    capsys.readouterr()
    assert cli("forget", "--worker", "x") == 2 and "give a SPEC" in capsys.readouterr().err
    bad = _cli("backfill", "spec.yaml", "--partitions", ",", cwd=tmp_path)
    assert bad.returncode == 2 and "names no partition" in bad.stderr


def _env(**extra: str) -> dict[str, str]:
    return {**_api_env(), **extra}


def test_killed_and_racing_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed before and after its store commit, then two runs at once: the store stays readable, the
    racing runs serialize (one reads the new day, the other starts from its state), and the result is a full
    refit's."""
    import json

    from crowdflow.storage.increments import read_state, state_dir

    days = labels_family(12, n_days=5)
    for d in range(2):
        write_day(tmp_path / "data", d, days[d])
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "full.yaml").write_text(SPEC.replace("name: daily", "name: full"))
    cmd = [sys.executable, "-m", "flows.cli", "run", "spec.yaml", "--incremental"]
    assert _main("run", "spec.yaml", "--incremental", cwd=tmp_path, monkeypatch=monkeypatch) == 0
    store = state_dir(tmp_path / "out", "daily")
    first = latest_run(tmp_path / "out", "daily")

    # killed after writing the new day's stats file, before the export: nothing committed, nothing exported
    write_day(tmp_path / "data", 2, days[2])
    killed = subprocess.run(cmd, cwd=tmp_path, env=_env(CROWDFLOW_TEST_KILL_STATE_AT_STEP="1"), capture_output=True)
    assert killed.returncode == -9
    assert read_state(store).version == 1 and latest_run(tmp_path / "out", "daily").path == first.path
    # killed right after the commit (the run is exported, its state committed, garbage not yet removed)
    killed = subprocess.run(cmd, cwd=tmp_path, env=_env(CROWDFLOW_TEST_KILL_STATE_AT_STEP="2"), capture_output=True)
    assert killed.returncode == -9 and read_state(store).version == 2

    # two runs at once over a new day
    write_day(tmp_path / "data", 3, days[3])
    procs = [
        subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(2)
    ]
    assert [p.wait(600) for p in procs] == [0, 0]
    assert read_state(store).version == 4
    runs = sorted((tmp_path / "out" / "daily").glob("2*/manifest.json"))[-2:]
    reads = sorted(len(json.loads(m.read_text())["incremental"]["labels"]["files_read"]) for m in runs)
    assert reads == [0, 1]  # the second waited for the first and started from its state
    assert {p.name for p in (store / "labels").iterdir()} == {
        e.stats for e in read_state(store).files["labels"].values()
    }

    assert _main("run", "full.yaml", cwd=tmp_path, monkeypatch=monkeypatch) == 0
    inc, full = latest_run(tmp_path / "out", "daily"), latest_run(tmp_path / "out", "full")
    for name in ("skills", "consensus"):
        pd.testing.assert_frame_equal(inc[name], full[name], check_exact=True)
