"""The majority-vote worker fold rebuilt file by file (crowdflow/skills/folded_stream.py) against the in-memory
rebuild (every row at once: ``update_workers`` without a stored fold) and against sums counted here from the rows.

Families: labels split over 1-5 files at random (tasks across files, a task's labels one per file, workers seen only
in a late file), three id styles (ids that grow, integers, shuffled text), 2-3 classes with ties; degenerate cases
(a triangle whose three labels are in three files: an odd cycle only the union of the files shows; a two-worker
task across files: a bipartite edge; one file; a file of one row). Then the store: the first folded run streams its
files (the account says so, and its tables equal a full ``method: mv`` fit's), a (task, worker) answered twice in
two files is refused, and the task lookup of the pass equals Arrow's hash lookup on awkward ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import crowdflow as cf
from crowdflow.contracts.tables import INPUTS
from crowdflow.skills import output_tables
from crowdflow.skills.folded import WorkerFold, _rows, folded_skills_run, update_workers
from crowdflow.skills.folded_stream import DuplicatePair, TaskIndex, rebuild_streamed
from crowdflow.skills.increments import FoldedLabels, vote_folded
from crowdflow.storage.frames import written_tables
from crowdflow.storage.io import read_table as read_input
from tests.incremental.helpers import assert_folded_skills_tables, labels_family, restyle_ids, write_day


def _fold(rows: pd.DataFrame) -> FoldedLabels:
    s = rows.astype({"task": str, "label": str})
    ct = pd.crosstab(s["task"], s["label"]).sort_index()
    classes = np.asarray(list(ct.columns), dtype=object)
    return FoldedLabels(pa.array(list(ct.index), pa.string()), classes, ct.to_numpy(dtype=np.int64))


def _split(rows: pd.DataFrame, n_files: int, rng: np.random.Generator) -> list[pd.DataFrame]:
    """``rows`` over ``n_files`` files at random (a task's labels land in several files)."""
    at = rng.integers(0, n_files, len(rows))
    return [rows[at == k].reset_index(drop=True) for k in range(n_files)]


def _both(files: list[pd.DataFrame], tie_break: str = "random", seed: int = 0) -> tuple[WorkerFold, WorkerFold, Any]:
    rows = pd.concat(files, ignore_index=True)
    folded = _fold(rows)
    _, _, winners = vote_folded(folded, None, tie_break, seed)  # type: ignore[arg-type]
    whole = update_workers(None, folded, winners, rows, lambda t: rows.iloc[:0], "test").fold
    k = folded.counts.sum(axis=1).astype(np.int64)
    got = rebuild_streamed(folded.tasks, winners, k, ((_rows(f), False) for f in files))
    table = pa.table({"task": folded.tasks, "winner": winners, "k": pa.array(k), "rep": pa.array(got.rep)})
    f = got.forest
    streamed = WorkerFold(got.workers, got.n_labels, got.agree, got.strength, f.parent, f.par, f.rank, f.odd, table)
    return streamed, whole, got


def _assert_same(streamed: WorkerFold, whole: WorkerFold, rows: pd.DataFrame, what: str) -> None:
    assert streamed.workers.tolist() == whole.workers.tolist(), what
    for name in ("n_labels", "agree", "strength"):
        assert np.array_equal(getattr(streamed, name), getattr(whole, name)), f"{what}: {name}"
    a, b = streamed.forest().components(), whole.forest().components()
    assert a.n_components == b.n_components, what
    for name in ("labels", "bipartite", "colour", "sizes"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), f"{what}: components.{name}"
    for col in ("task", "winner", "k"):
        assert streamed.tasks[col].equals(whole.tasks[col]), f"{what}: tasks.{col}"
    # one worker per task, of the task's component
    assert np.array_equal(a.labels[streamed.tasks["rep"].to_numpy()], b.labels[whole.tasks["rep"].to_numpy()]), what
    # and the sums against the rows, counted here
    s = rows.astype(str)
    n = s.groupby("worker").size()
    assert np.array_equal(streamed.n_labels, n.reindex(streamed.workers.tolist()).to_numpy()), what
    k = s.groupby("task").size()
    strength = (s["task"].map(k) - 1).groupby(s["worker"]).sum()
    assert np.array_equal(streamed.strength, strength.reindex(streamed.workers.tolist()).to_numpy()), what
    win = dict(zip(streamed.tasks["task"].to_pylist(), streamed.tasks["winner"].to_pylist(), strict=True))
    agree = (s["label"] == s["task"].map(win)).groupby(s["worker"]).sum()
    assert np.array_equal(streamed.agree, agree.reindex(streamed.workers.tolist()).to_numpy()), what


@pytest.mark.parametrize("style", ["text", "int", "shuffled"])
@pytest.mark.parametrize("seed", range(4))
def test_streamed_rebuild_equals_the_in_memory_one(seed: int, style: str) -> None:
    rng = np.random.default_rng(100 + seed)
    days = restyle_ids(labels_family(seed, n_days=4, n_workers=int(rng.integers(6, 30)), tasks_per_day=30), style, seed)
    rows = pd.concat(days, ignore_index=True)
    for n_files in (1, 2, int(rng.integers(3, 6))):
        files = _split(rows, n_files, rng)
        for tie_break in ("random", "smallest"):
            streamed, whole, got = _both(files, tie_break, seed)
            what = f"{style} seed {seed}, {n_files} files, {tie_break}"
            _assert_same(streamed, whole, rows, what)
            assert got.rows == len(rows), what
            if n_files == 1:
                assert got.spanning_rows == 0, what
    # the daily files as written (tasks labelled again a day later span files)
    streamed, whole, got = _both(days)
    _assert_same(streamed, whole, rows, f"{style} seed {seed}, days")
    assert 0 < got.spanning_rows < len(rows)


def _frame(triples: list[tuple[str, str, str]]) -> pd.DataFrame:
    return pd.DataFrame(triples, columns=["task", "worker", "label"])


@pytest.mark.parametrize(
    ("files", "bipartite"),
    [
        # a triangle: three workers of one task, one label per file; no file alone shows the odd cycle
        ([[("t1", "a", "x")], [("t1", "b", "x")], [("t1", "c", "y")]], [False]),
        # a two-worker task across files: one edge, a bipartite component
        ([[("t1", "a", "x"), ("t2", "c", "x")], [("t1", "b", "y"), ("t2", "d", "x")]], [True, True]),
        # a path a-b-c (two-worker tasks, one across files) closed by c-a in a third file: an odd cycle of three
        (
            [
                [("t1", "a", "x"), ("t2", "b", "x")],
                [("t1", "b", "y"), ("t2", "c", "y"), ("t3", "c", "x")],
                [("t3", "a", "y")],
            ],
            [False],
        ),
        # a four-cycle over four files: bipartite
        (
            [
                [("t1", "a", "x"), ("t2", "b", "x")],
                [("t1", "b", "x"), ("t3", "c", "x")],
                [("t2", "c", "y"), ("t4", "d", "x")],
                [("t3", "d", "x"), ("t4", "a", "y")],
            ],
            [True],
        ),
        # one file of one row: an isolated worker
        ([[("t1", "a", "x")]], [True]),
    ],
)
def test_parity_across_files(files: list[list[tuple[str, str, str]]], bipartite: list[bool]) -> None:
    frames = [_frame(f) for f in files]
    streamed, whole, _ = _both(frames)
    _assert_same(streamed, whole, pd.concat(frames, ignore_index=True), str(files))
    assert streamed.forest().components().bipartite.tolist() == bipartite


@pytest.mark.parametrize("where", ["one file", "two files"])
def test_a_pair_answered_twice_is_refused(where: str) -> None:
    a = [("t1", "a", "x"), ("t1", "b", "x"), ("t2", "a", "y")]
    files = [_frame([*a, ("t1", "a", "y")])] if where == "one file" else [_frame(a), _frame([("t1", "a", "y")])]
    rows = pd.concat(files, ignore_index=True)
    folded = _fold(rows)
    _, _, winners = vote_folded(folded, None, "smallest", 0)
    k = folded.counts.sum(axis=1).astype(np.int64)
    with pytest.raises(DuplicatePair, match="worker 'a' answers task 't1' more than once"):
        rebuild_streamed(folded.tasks, winners, k, ((_rows(f), False) for f in files))


def test_a_row_of_a_task_the_fold_lacks_is_refused() -> None:
    rows = _frame([("t1", "a", "x"), ("t1", "b", "x")])
    folded = _fold(rows)
    _, _, winners = vote_folded(folded, None, "smallest", 0)
    k = folded.counts.sum(axis=1).astype(np.int64)
    extra = _frame([("t0", "a", "x")])
    with pytest.raises(ValueError, match="rows of task 't0'"):
        rebuild_streamed(folded.tasks, winners, k, [(_rows(rows), False), (_rows(extra), False)])


@pytest.mark.parametrize("seed", range(3))
def test_task_index_equals_a_hash_lookup(seed: int) -> None:
    """Ids of many lengths, prefixes of each other, non-ASCII, and (queried) ids with NUL bytes or longer than any."""
    rng = np.random.default_rng(seed)
    alphabet = list("ab0Z-_é字")
    ids = {"".join(rng.choice(alphabet, int(rng.integers(1, 7)))) for _ in range(300)} | {"a", "aa", "a0", ""}
    fold = pc.sort_indices(pa.array(sorted(ids)))  # text order, as the label fold keeps it
    tasks = pa.array(sorted(ids)).take(fold)
    queries = pa.array([*rng.choice(sorted(ids), 200).tolist(), "a\x00", "zzzzzzzzzzzz", "字字字字字字字字", "b"])
    want = pc.index_in(queries, value_set=tasks).fill_null(-1).to_numpy(zero_copy_only=False)
    assert np.array_equal(TaskIndex(tasks).positions(queries), want)
    # a fold holding a NUL byte falls back to the hash lookup
    with_nul = pa.array(sorted([*ids, "a\x00b"]))
    q = pa.array(["a\x00b", "a", "zz"])
    want = pc.index_in(q, value_set=with_nul).fill_null(-1).to_numpy(zero_copy_only=False)
    idx = TaskIndex(with_nul)
    assert idx.keys is None and np.array_equal(idx.positions(q), want)


@pytest.mark.parametrize("seed", range(2))
def test_first_folded_run_streams_its_files_and_equals_a_full_fit(tmp_path: Path, seed: int) -> None:
    """The first folded run over a history keeps no file's rows: they are summed as read and the worker fold is
    rebuilt from the store file by file; its tables equal a full mv fit's; the next day updates the fold."""
    days = labels_family(seed, n_days=5, tasks_per_day=30)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(4):
        write_day(folder, d, days[d])
    for step in ("first", "day"):
        if step == "day":
            write_day(folder, 4, days[4])
        run = folded_skills_run(store, folder, tie_break="random", seed=seed)
        got = written_tables("skills", output_tables(run.fit.result, run.fit.report))
        full = read_input(folder, INPUTS["labels"]).df
        want = cf.skills(full, method="mv", checks="warn", tie_break="random", seed=seed).tables
        assert_folded_skills_tables(got, want, f"seed {seed} {step}")
        acc = run.input["fold"]["workers"]
        if step == "first":
            assert acc["how"] == "rebuilt" and acc["streamed"] and acc["files_passed"] == 4
            assert acc["new_rows_read_back"] == run.input["rows_read"] == len(full)
            assert acc["spanning_rows"] > 0  # tasks labelled again a day later
        else:
            assert acc["how"] == "updated" and run.input["files_read"] == ["day=2026-11-05/part-0.parquet"]
