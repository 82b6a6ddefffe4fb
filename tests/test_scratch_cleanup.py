"""Nothing left behind (issue #33, item 5): a run's scratch goes when it ends; a killed run's goes at the next
run or ``crowdflow clean``; a live run's scratch is never removed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from crowdflow.storage.scratch import LOCK_FILE, is_dead, owned_scratch, sweep

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def _env(tmp: Path) -> dict[str, str]:
    (tmp / "tmp").mkdir(exist_ok=True)
    # the subprocess runs its own embedded API under its own PREFECT_HOME, never the session harness's server
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_")}
    return {**env, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp / "tmp"), "PREFECT_HOME": str(tmp / "prefect-home")}


_HOLD = """
import sys, time
from crowdflow.storage.scratch import owned_scratch
with owned_scratch(sys.argv[1], sys.argv[2]) as folder:
    open(folder + "/bucket-0.parquet", "wb").write(b"x" * 1000)
    print(folder, flush=True)
    time.sleep(600)
"""


def _holder(prefix: str, parent: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen([PY, "-c", _HOLD, prefix, str(parent)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_killed_owner_s_folder_is_removed_and_a_live_one_is_kept(tmp_path: Path) -> None:
    env, scratch = _env(tmp_path), tmp_path / "scratch"
    scratch.mkdir()
    live, live_dir = _holder("crowdflow-run-", scratch, env)
    dead, dead_dir = _holder("crowdflow-dask-", tmp_path / "tmp", env)
    ended, ended_dir = _holder("crowdflow-run-", scratch, env)
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        ended.terminate()  # a SIGTERM with Python's default handler also skips the cleanup: the lock goes anyway
        ended.wait()
        assert dead_dir.is_dir() and ended_dir.is_dir() and live_dir.is_dir()
        assert is_dead(dead_dir) and is_dead(ended_dir) and not is_dead(live_dir)
        # `crowdflow clean`, a concurrent process, removes exactly the dead runs' folders
        out = subprocess.run(
            [PY, "-m", "flows.cli", "clean", "--out", str(scratch)], env=env, capture_output=True, text=True, check=True
        )
        assert "2 folder(s)" in out.stdout, out.stdout + out.stderr
        assert not dead_dir.exists() and not ended_dir.exists()
        assert live_dir.is_dir() and (live_dir / "bucket-0.parquet").exists()
    finally:
        live.kill()
        live.wait()
    assert sweep(scratch) == [str(live_dir)]  # once its owner is gone


def test_an_unlocked_folder_is_removed_only_when_old(tmp_path: Path) -> None:
    young = tmp_path / "crowdflow-run-young"
    old = tmp_path / "crowdflow-run-old"
    other = tmp_path / "not-ours"
    for d in (young, old, other):
        d.mkdir()
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    os.utime(other, (time.time() - 7200, time.time() - 7200))
    assert sweep(tmp_path) == [str(old)]
    assert young.is_dir() and other.is_dir()
    with owned_scratch("crowdflow-run-", tmp_path) as mine:  # this process is alive: kept
        assert (Path(mine) / LOCK_FILE).exists() and sweep(tmp_path) == []
        (Path(mine) / "owner-of-another-host").touch()
    assert not Path(mine).exists()  # removed at the end of the block
    try:
        with owned_scratch("crowdflow-run-", tmp_path) as mine:
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert not Path(mine).exists()
    # a folder whose owner file names another host is left to that host
    with owned_scratch("crowdflow-run-", tmp_path) as mine:
        (Path(mine) / ".crowdflow-owner").write_text(json.dumps({"host": "elsewhere", "pid": 1}))
        assert not is_dead(Path(mine))


def _labels(folder: Path, n_files: int = 12, rows: int = 60_000) -> None:
    rng = np.random.default_rng(33)
    folder.mkdir()
    for k in range(n_files):
        task = rng.integers(0, 100_000, rows)
        df = pd.DataFrame(
            {
                "task": "t" + task.astype(str),
                "worker": "w" + ((task * 7 + np.arange(rows) * 13) % 400).astype(str),
                "label": rng.integers(0, 2, rows).astype(str),
            }
        ).drop_duplicates(["task", "worker"])
        df.to_parquet(folder / f"part-{k}.parquet", index=False)


def test_a_sigkilled_run_leaves_scratch_that_the_next_run_or_clean_removes(tmp_path: Path) -> None:
    """A real `crowdflow run` on a Dask LocalCluster, SIGKILLed once its label buckets are on disk."""
    env, scratch = _env(tmp_path), tmp_path / "scratch"
    _labels(tmp_path / "labels")
    spec = {
        "name": "killed",
        "labels": {"path": "labels"},
        "skills": {"method": "mv", "duplicates": "keep_last"},
        "runner": {"kind": "dask", "n_workers": 1, "processes": False, "partitions": 8, "scratch_dir": str(scratch)},
        "output": {"dir": "out"},
    }
    (tmp_path / "spec.yaml").write_text(json.dumps(spec))
    proc = subprocess.Popen(
        [PY, "-m", "flows.cli", "run", str(tmp_path / "spec.yaml")],
        env=env,
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if list(scratch.glob("crowdflow-run-*/buckets/bucket-*")):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before its buckets were seen: make the input larger"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    left = list(scratch.glob("crowdflow-run-*")) + list((tmp_path / "tmp").glob("crowdflow-dask-*"))
    assert any(p.name.startswith("crowdflow-run-") for p in left)
    assert any(p.name.startswith("crowdflow-dask-") for p in left)
    out = subprocess.run(
        [PY, "-m", "flows.cli", "clean", "--out", str(scratch)], env=env, capture_output=True, text=True, check=True
    )
    assert f"{len(left)} folder(s)" in out.stdout, out.stdout
    assert not any(p.exists() for p in left)
