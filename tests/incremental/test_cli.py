"""``crowdflow run --incremental``, ``crowdflow backfill`` and ``crowdflow forget`` as a user types them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from crowdflow.storage.runs import latest_run
from tests.incremental.helpers import labels_family, write_day

ROOT = Path(__file__).resolve().parents[2]
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


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "flows.cli", *argv], capture_output=True, text=True, cwd=cwd, env=env)


def test_run_backfill_forget(tmp_path: Path) -> None:
    days = labels_family(11)
    for d in range(2):
        write_day(tmp_path / "data", d, days[d])
    (tmp_path / "spec.yaml").write_text(SPEC)
    assert _cli("run", "spec.yaml", "--incremental", cwd=tmp_path).returncode == 0
    write_day(tmp_path / "data", 2, days[2])
    res = _cli("backfill", "spec.yaml", "--partitions", "day=2026-11-01", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    run = latest_run(tmp_path / "out", "daily")
    rec = run.manifest["incremental"]["labels"]
    assert rec["files_read"] == ["day=2026-11-01/part-0.parquet", "day=2026-11-03/part-0.parquet"]
    assert rec["files_reused"] == ["day=2026-11-02/part-0.parquet"]
    assert run.increments["version"] == 2 and run.increments["files"] == {"labels": 3}
    victim = str(days[2]["worker"].iloc[0])
    res = _cli("forget", "spec.yaml", "--worker", victim, cwd=tmp_path)
    assert res.returncode == 0 and "erased one worker" in res.stdout and victim not in res.stdout
    assert _cli("run", "spec.yaml", "--incremental", cwd=tmp_path).returncode == 0
    after = latest_run(tmp_path / "out", "daily")
    assert victim not in set(after["skills"]["worker"])
    assert after.manifest["incremental"]["state_from"]["erasures"] == 1
    # a full (not incremental) run of the pipeline leaves the erased worker out too, with the same tables
    assert _cli("run", "spec.yaml", cwd=tmp_path).returncode == 0
    full = latest_run(tmp_path / "out", "daily")
    for name in ("skills", "consensus"):
        pd.testing.assert_frame_equal(full[name], after[name], check_exact=True)
    # usage errors are exit 2 with one line
    bad = _cli("forget", "--worker", "x", cwd=tmp_path)
    assert bad.returncode == 2 and "give a SPEC" in bad.stderr
    bad = _cli("backfill", "spec.yaml", "--partitions", ",", cwd=tmp_path)
    assert bad.returncode == 2 and "names no partition" in bad.stderr
