"""The folded majority-vote fold kept in parts (:mod:`crowdflow.skills.folded_parts`), library level.

Generated families of daily label folders (text ids that grow by day, shuffled text ids that land among the old
ones), with parts made tiny so that a few days make many parts, edited step by step (days added, re-delivered,
reordered, deleted, emptied, re-added, a worker erased). After every step: every table equals a full ``method: mv``
fit's; the parts, read back whole, are the full fold (tasks, counts, votes, a worker of each task), ordered and
disjoint; a run on parts opens only the parts holding its tasks (the others are made unreadable and the run still
succeeds); an erased worker is in no stored file; a store killed at each step of a run keeps its previous state and
the next run equals a full fit; a one-table store migrates to parts once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import crowdflow as cf
from crowdflow.contracts.tables import INPUTS
from crowdflow.skills import folded, folded_parts, output_tables
from crowdflow.skills.folded import folded_skills_run
from crowdflow.skills.folded_parts import PARTS_FORMAT, PARTS_KEY, PartsIndex, read_consensus, read_parts
from crowdflow.skills.increments import folded_from_table
from crowdflow.storage.frames import written_tables
from crowdflow.storage.increments import read_state
from crowdflow.storage.io import read_table as read_input
from tests.incremental.helpers import assert_folded_skills_tables, labels_family, restyle_ids, write_day
from tests.incremental.test_skills_folded import EDITS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of a few tasks: 25 tasks a day make a new part every day or two, and a split now and then."""
    monkeypatch.setattr(folded_parts, "SPLIT_TASKS", 9)
    monkeypatch.setattr(folded_parts, "NEW_PART_MIN", 6)
    monkeypatch.setattr(folded_parts, "SPLIT_OVER", 20)


def _full(folder: Path, erased: set[str]) -> pd.DataFrame:
    df = read_input(folder, INPUTS["labels"]).df
    return df[~df["worker"].astype(str).isin(erased)].reset_index(drop=True)


def check_parts(store: Path, rows: pd.DataFrame, consensus: pd.DataFrame, what: str) -> PartsIndex:
    """The stored parts, read back whole, against the full fold of ``rows`` and the full fit's ``consensus``."""
    rec = read_state(store).folds["labels"]
    assert rec["format"] == PARTS_FORMAT, what
    index = PartsIndex.from_record(rec)
    for a, b in zip(index.parts, index.parts[1:], strict=False):  # ordered, disjoint ranges
        assert a.lo <= a.hi < b.lo <= b.hi, what
    fold, winners, rep = read_parts(store, index.parts)
    full = folded_from_table(rows)
    assert fold.tasks.equals(full.tasks), what
    got = pd.DataFrame(fold.counts, columns=fold.classes.astype(str)).reindex(columns=full.classes.astype(str))
    assert np.array_equal(got.fillna(0).to_numpy(np.int64), full.counts), what
    by_task = consensus.assign(task=consensus["task"].astype(str)).set_index("task")["label"].astype(str)
    assert winners.to_pylist() == by_task.loc[fold.tasks.to_pylist()].tolist(), what
    pairs = set(zip(rows["task"].astype(str), rows["worker"].astype(str), strict=True))
    assert all((t, w) in pairs for t, w in zip(fold.tasks.to_pylist(), rep.to_pylist(), strict=True)), what
    assert index.n_tasks == len(full.tasks) and [p.n for p in index.parts] == [
        pq.read_metadata(store / PARTS_KEY / p.fold).num_rows for p in index.parts
    ], what
    cons = read_consensus(store, index)
    want = consensus.assign(task=consensus["task"].astype(str))[["task", "label", "confidence", "n_labels"]]
    pd.testing.assert_frame_equal(cons[want.columns].astype({"label": str}), want.astype({"label": str}), obj=what)
    return index


FAMILIES = [("text", 0), ("shuffled", 0), ("text", 1), ("shuffled", 2)]
#: ~5 s a case on a quiet host (15 at load 4): the first in the default run, the others in the slow tier
CASES = [
    pytest.param(*f, marks=() if k == 0 else pytest.mark.slow, id=f"{f[0]}-{f[1]}") for k, f in enumerate(FAMILIES)
]


@pytest.mark.usefixtures("tiny_parts")
@pytest.mark.parametrize(("style", "seed"), CASES)
def test_parts_equal_a_full_fit_after_every_edit(tmp_path: Path, style: str, seed: int) -> None:
    days = restyle_ids(labels_family(seed, n_days=7, tasks_per_day=25), style, seed)
    options: dict[str, Any] = {"tie_break": "random", "seed": seed}
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(3):
        write_day(folder, d, days[d])
    erased: set[str] = set()
    for name, edit in [("first", lambda f, d, s: None), *EDITS]:
        before = PartsIndex.from_record(read_state(store).folds.get("labels") or {})
        seen = set(read_state(store).files.get("labels", {}))
        edit(folder, days, store)
        if name == "erase":
            erased.add(str(days[2]["worker"].iloc[0]))
            assert "labels" not in read_state(store).folds  # the parts name workers: dropped with the erasure
        run = folded_skills_run(store, folder, **options)
        rows = _full(folder, erased)
        full = cf.skills(rows, method="mv", checks="warn", **options).tables
        what = f"{style} seed {seed} after {name}"
        assert_folded_skills_tables(written_tables("skills", output_tables(run.fit.result, run.fit.report)), full, what)
        index = check_parts(store, rows, full["consensus"], what)
        parts = run.input["fold"]["workers"]["parts"]
        assert parts["total"] == len(index.parts) and parts["tasks_total"] == index.n_tasks, what
        if name in {"add", "add-again"} and style == "text":
            # dated ids: a day's tasks are new or of the day before: the parts below its first task are not read
            new = list(run.input["files_read"])
            low = min(str(t) for p in new for t in pd.read_parquet(folder / p)["task"])
            below = sum(p.hi < low for p in before.parts)
            assert below >= 1 and parts["read"] <= len(before.parts) - below, (what, parts)
            assert parts["reused"] >= below and seen, (what, parts)
        if erased:  # no stored file names the erased worker
            victim = next(iter(erased))
            for sub in ("mv-parts", "mv-workers", "labels"):
                for f in (store / sub).glob("*.parquet"):
                    t = pq.read_table(f)
                    for c in t.column_names:
                        if pa.types.is_string(t.schema.field(c).type) and c in ("worker", "rep"):
                            assert victim not in set(t[c].to_pylist()), (what, f.name, c)


@pytest.mark.usefixtures("tiny_parts")
def test_a_run_on_parts_opens_only_the_parts_it_touches(tmp_path: Path) -> None:
    """The parts no new task falls in are made unreadable (garbage bytes); the run succeeds, equals a full fit once
    they are put back, and carries them over by name."""
    days = labels_family(5, n_days=8, tasks_per_day=25)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(6):
        write_day(folder, d, days[d])
        folded_skills_run(store, folder)
    before = PartsIndex.from_record(read_state(store).folds["labels"])
    assert len(before.parts) >= 6
    write_day(folder, 6, days[6])
    new_tasks = pa.array(days[6]["task"].astype(str).unique().tolist(), pa.string())
    hit = set(before.locate(new_tasks).tolist())
    kept: dict[Path, bytes] = {}
    for j, p in enumerate(before.parts):
        if j not in hit and j != len(before.parts) - 1:
            for name in (p.fold, p.consensus):
                path = store / PARTS_KEY / name
                kept[path] = path.read_bytes()
                path.write_bytes(b"not a parquet file")
    assert len(kept) >= 8
    run = folded_skills_run(store, folder, whole_consensus=False)
    after = PartsIndex.from_record(read_state(store).folds["labels"])
    names = {p.fold for p in after.parts}
    assert {p.name for p in kept if p.name.startswith("fold-")} <= names  # carried over, not rewritten
    assert run.input["fold"]["workers"]["parts"]["read"] <= len(hit | {len(before.parts) - 1})
    for path, data in kept.items():
        path.write_bytes(data)
    rows = _full(folder, set())
    full = cf.skills(rows, method="mv", checks="warn").tables
    check_parts(store, rows, full["consensus"], "after a run with unreadable untouched parts")
    got = written_tables("skills", output_tables(run.fit.result, run.fit.report))
    assert got["consensus"].empty  # whole_consensus=False: the rows are in the parts (checked above)
    assert_folded_skills_tables({k: v for k, v in got.items() if k != "consensus"},
                                {k: v for k, v in full.items() if k != "consensus"}, "run")  # fmt: skip


def test_a_one_table_store_migrates_to_parts_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store of the one-table layout (``mv-tasks`` and one fold file) is read whole once and written in parts;
    the next run is on parts; both equal a full fit. Ids that are numbers stay in one table."""
    days = labels_family(3, n_days=4, tasks_per_day=30)
    folder, store = tmp_path / "data", tmp_path / "store"
    write_day(folder, 0, days[0])
    with monkeypatch.context() as m:  # the layout before parts
        m.setattr(folded, "first_is_number", lambda task: True)
        folded_skills_run(store, folder)
    state = read_state(store)
    assert "mv-tasks" in state.folds and "file" in state.folds["labels"]
    for d, how in ((1, "the fold was one table (the migration to parts)"), (2, None)):
        write_day(folder, d, days[d])
        run = folded_skills_run(store, folder)
        rows = _full(folder, set())
        full = cf.skills(rows, method="mv", checks="warn").tables
        assert_folded_skills_tables(
            written_tables("skills", output_tables(run.fit.result, run.fit.report)), full, f"{d}"
        )
        check_parts(store, rows, full["consensus"], f"day {d}")
        parts = run.input["fold"]["workers"]["parts"]
        assert parts.get("why_whole") == how and run.input["fold"]["workers"]["how"] == "updated"
        assert "mv-tasks" not in read_state(store).folds and not list((store / "mv-tasks").glob("*.parquet"))
    ints = restyle_ids(days, "int")
    other = tmp_path / "ints"
    for d in range(2):
        write_day(other, d, ints[d])
        folded_skills_run(tmp_path / "store-int", other)
    assert "file" in read_state(tmp_path / "store-int").folds["labels"]


_KILLED_RUN = """
import sys
from crowdflow.skills import folded_parts
from crowdflow.skills.folded import folded_skills_run
folded_parts.SPLIT_TASKS, folded_parts.NEW_PART_MIN, folded_parts.SPLIT_OVER = 9, 6, 20
folded_skills_run(sys.argv[1], sys.argv[2])
"""


# ~20 CLI-free subprocesses of a few seconds each (200 s at load 4): the slow tier
@pytest.mark.slow
def test_a_run_killed_at_each_step_keeps_the_previous_state(tmp_path: Path) -> None:
    """SIGKILL after each store step of a run on parts (stats, sums, each part's files, the worker fold, the state,
    the garbage): before the state is written the previous state is intact and readable; the next run equals a
    full fit either way."""
    days = labels_family(7, n_days=5, tasks_per_day=25)
    folder, store = tmp_path / "data", tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for d in range(3):
        write_day(folder, d, days[d])
        subprocess.run([sys.executable, "-c", _KILLED_RUN, str(store), str(folder)], env=env, check=True)
    write_day(folder, 3, days[3])
    base = (store / "state.json").read_text()
    k = 0
    while True:
        k += 1
        saved = tmp_path / f"store-{k}"
        shutil.copytree(store, saved)
        kill = {**env, "CROWDFLOW_TEST_KILL_STATE_AT_STEP": str(k)}
        done = subprocess.run([sys.executable, "-c", _KILLED_RUN, str(saved), str(folder)], env=kill, check=False)
        if done.returncode == 0:
            break
        assert done.returncode == -9, k
        state = json.loads((saved / "state.json").read_text())
        assert (saved / "state.json").read_text() == base or state["version"] == json.loads(base)["version"] + 1
        read_state(saved)  # readable, names only files on disk
        run = folded_skills_run(saved, folder)
        rows = _full(folder, set())
        full = cf.skills(rows, method="mv", checks="warn").tables
        got = written_tables("skills", output_tables(run.fit.result, run.fit.report))
        assert_folded_skills_tables(got, full, f"killed after step {k}")
        shutil.rmtree(saved)
    assert k >= 8  # stats, sums, two part files per part, the worker fold, state.json, garbage
