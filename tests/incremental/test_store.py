"""The increment store on its own: assembled inputs equal a full read, atomic commits, the lock, kills, erasure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from crowdflow.contracts.tables import INPUTS
from crowdflow.storage.increment_inputs import assemble, matches_partition
from crowdflow.storage.increments import (
    FORMAT,
    StateBusy,
    commit_state,
    drop_erased,
    erase,
    read_state,
    state_lock,
    stored_rows,
)
from crowdflow.storage.io import read_table
from tests.incremental.helpers import comparisons_family, labels_family, write_day

ROOT = Path(__file__).resolve().parents[2]


def _full(folder: Path, kind: str) -> pd.DataFrame:
    return read_table(folder, INPUTS[kind]).df


def _step(store: Path, folder: Path, kind: str, refresh: tuple[str, ...] = ()) -> pd.DataFrame:
    """One incremental ingest + commit; returns the assembled table."""
    with state_lock(store):
        state = read_state(store)
        got = assemble(store, state, folder, kind, refresh=refresh)
        commit_state(store, state, {**state.files, kind: got.files}, run_id="test")
    return got.table.df


# each edit of the folder an incremental run must follow: (name, edit(folder, days))
EDITS = [
    ("add", lambda f, days: write_day(f, 3, days[3])),
    ("replace", lambda f, days: write_day(f, 1, days[1].iloc[::2])),
    ("delete", lambda f, days: shutil.rmtree(f / "day=2026-11-01")),
    ("reorder", lambda f, days: (f / "day=2026-11-03").rename(f / "day=2026-11-00")),
    ("empty-file", lambda f, days: write_day(f, 2, days[2].iloc[:0])),
]


@pytest.mark.parametrize("kind", ["labels", "comparisons"])
@pytest.mark.parametrize("seed", range(6))
def test_assembled_equals_full_read_after_every_edit(tmp_path: Path, kind: str, seed: int) -> None:
    days = labels_family(seed) if kind == "labels" else comparisons_family(seed)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(3):
        write_day(folder, d, days[d])
    pd.testing.assert_frame_equal(_step(store, folder, kind), _full(folder, kind))
    for name, edit in EDITS:
        edit(folder, days)
        inc = _step(store, folder, kind)
        pd.testing.assert_frame_equal(inc, _full(folder, kind), obj=f"{kind} after {name}")
        state = read_state(store)
        # the store holds exactly the files of the folder now, and each file's rows are its rows
        assert sum(e.rows for e in state.files[kind].values()) >= len(inc) - 0
        on_disk = {p.name for p in (store / kind).iterdir()}
        assert on_disk == {e.stats for e in state.files[kind].values()}, f"garbage left after {name}"


def test_second_run_reads_nothing_and_backfill_rereads(tmp_path: Path) -> None:
    days = labels_family(1)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(3):
        write_day(folder, d, days[d])
    _step(store, folder, "labels")
    state = read_state(store)
    again = assemble(store, state, folder, "labels")
    assert again.read == [] and len(again.reused) == 3 and len(again.new_rows) == 0
    back = assemble(store, state, folder, "labels", refresh=["day=2026-11-02"])
    assert back.read == ["day=2026-11-02/part-0.parquet"]
    pd.testing.assert_frame_equal(back.table.df, _full(folder, "labels"))
    assert matches_partition("day=2026-11-02/part-0.parquet", ["day=2026-11-02/"])
    assert not matches_partition("day=2026-11-020/part-0.parquet", ["day=2026-11-02"])


@pytest.mark.parametrize("seed", range(4))
def test_erase_leaves_no_trace(tmp_path: Path, seed: int) -> None:
    days = labels_family(seed)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(3):
        write_day(folder, d, days[d])
    _step(store, folder, "labels")
    victim = str(days[0]["worker"].iloc[0])
    n_before = sum(int((d["worker"] == victim).sum()) for d in days[:3])
    rec = erase(store, victim)
    assert rec.rows_removed == n_before > 0
    write_day(folder, 3, days[3])  # a new day with the worker in it
    inc = _step(store, folder, "labels")
    full = _full(folder, "labels")
    pd.testing.assert_frame_equal(inc, full[full["worker"] != victim].reset_index(drop=True))
    # no trace: not in any stored statistic, not in the state file (only a salted hash and counts)
    state = read_state(store)
    for e in state.files["labels"].values():
        assert victim not in set(stored_rows(store, "labels", e)["worker"])
    text = (store / "state.json").read_text()
    assert f'"{victim}"' not in text
    assert json.loads(text)["erasures"][0]["rows_removed"] == n_before
    # erasing again records nothing new
    erase(store, victim)
    assert len(read_state(store).erasures) == 1
    kept, n = drop_erased(read_state(store), days[3], "labels")
    assert n == int((days[3]["worker"] == victim).sum()) and victim not in set(kept["worker"])


def test_state_format_is_checked(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "state.json").write_text(json.dumps({"format": "crowdflow-increments/99"}))
    with pytest.raises(Exception, match="crowdflow-increments/99"):
        read_state(store)
    (store / "state.json").write_text(
        json.dumps({"format": FORMAT, "files": {"labels": {"x": {"stats": "gone", "rows": 1}}}})
    )
    with pytest.raises(Exception, match="missing"):
        read_state(store)


_HOLD = """
import sys, time
from pathlib import Path
from crowdflow.storage.increments import state_lock
with state_lock(sys.argv[1]):
    Path(sys.argv[2]).write_text("held")
    time.sleep(float(sys.argv[3]))
"""


def _holder(store: Path, marker: Path, seconds: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-c", _HOLD, str(store), str(marker), str(seconds)], env=env)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    return p


def test_lock_waits_then_refuses_and_a_dead_holder_is_cleared(tmp_path: Path) -> None:
    store = tmp_path / "store"
    p = _holder(store, tmp_path / "m1", 3.0)
    with pytest.raises(StateBusy, match="locked"), state_lock(store, timeout=0.3):
        pass
    with state_lock(store, timeout=60):  # waits for the holder, then gets it
        assert (store / "lock").read_text().split()[1] == str(os.getpid())
    assert p.wait(60) == 0
    # a holder killed with the lock held: the next one clears the lock it left
    p = _holder(store, tmp_path / "m2", 60.0)
    p.kill()
    p.wait()
    assert (store / "lock").exists()
    with state_lock(store, timeout=5):
        pass


_RACER = """
import sys
from crowdflow.storage.increments import commit_state, read_state, state_lock
from crowdflow.storage.increment_inputs import assemble
store, folder = sys.argv[1], sys.argv[2]
with state_lock(store, timeout=120):
    state = read_state(store)
    got = assemble(store, state, folder, "labels")
    commit_state(store, state, {**state.files, "labels": got.files}, run_id=sys.argv[3])
"""


def test_two_racing_writers_never_corrupt_the_store(tmp_path: Path) -> None:
    days = labels_family(3, n_days=6)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(6):
        write_day(folder, d, days[d])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _RACER, str(store), str(folder), f"r{k}"], env=env) for k in range(3)
    ]
    assert [p.wait(300) for p in procs] == [0, 0, 0]
    state = read_state(store)
    assert state.version == 3  # each writer committed once, one after another (none overwrote another's base)
    got = assemble(store, state, folder, "labels")
    assert got.read == []
    pd.testing.assert_frame_equal(got.table.df, _full(folder, "labels"))


@pytest.mark.parametrize("step", [1, 2, 3, 4, 5, 6])
def test_killed_writer_leaves_the_previous_state_readable(tmp_path: Path, step: int) -> None:
    """Kill the writer after each of its store steps (3 stats files, state.json, garbage removal; 6: no kill)."""
    days = labels_family(5)
    folder, store = tmp_path / "data", tmp_path / "store"
    write_day(folder, 0, days[0])
    _step(store, folder, "labels")
    before = read_state(store)
    for d in (1, 2):
        write_day(folder, d, days[d])
    write_day(folder, 0, days[0].iloc[1:])  # day 0 replaced as well: 3 files to read
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CROWDFLOW_TEST_KILL_STATE_AT_STEP": str(step)}
    proc = subprocess.run([sys.executable, "-c", _RACER, str(store), str(folder), "killed"], env=env, check=False)
    after = read_state(store)  # readable whatever the step
    assert proc.returncode == (-9 if step <= 5 else 0)
    # killed before state.json is replaced: the previous state; after: the new one (never a mix)
    assert after.version == before.version + (step >= 4)
    # the next writer clears the dead lock and repairs: the store then equals a full read
    pd.testing.assert_frame_equal(_step(store, folder, "labels"), _full(folder, "labels"))
    assert {p.name for p in (store / "labels").iterdir()} == {
        e.stats for e in read_state(store).files["labels"].values()
    }
