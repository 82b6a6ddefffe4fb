"""Folded majority-vote skills fits (``skills.incremental`` + ``method: mv``) against full fits, library level.

Generated families of daily label folders (text ids that grow by day, integer ids, shuffled text ids that make a new
day's tasks sort among the old ones; 2-3 classes with many ties; ``tie_break`` random and smallest; declared
classes), edited step by step: days added, re-delivered with corrections, reordered, deleted, emptied, re-added, a
worker erased. After every step every table equals a full ``method: mv`` fit's (docs/methods/skills.md §4.4: bit
for bit but the distinct-co-labeller columns, NaN with a reason), and the stored rows read are exactly the rows of
the old tasks whose contribution moved (computed here from two full fits), or every stored row after a removal.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd
import pytest

import crowdflow as cf
from crowdflow.contracts.tables import INPUTS
from crowdflow.frontdoor.increment_rules import RULES
from crowdflow.skills import output_tables
from crowdflow.skills.folded import folded_skills_run
from crowdflow.storage import increments
from crowdflow.storage.frames import written_tables
from crowdflow.storage.increments import erase, read_state
from crowdflow.storage.io import read_table as read_input
from tests.incremental.helpers import assert_folded_skills_tables, labels_family, restyle_ids, write_day

Edit = Callable[[Path, list[pd.DataFrame], Path], Any]
EDITS: list[tuple[str, Edit]] = [
    ("add", lambda f, days, s: write_day(f, 3, days[3])),
    ("replace", lambda f, days, s: write_day(f, 1, days[1].iloc[::2])),
    ("add-again", lambda f, days, s: write_day(f, 4, days[4])),
    ("reorder", lambda f, days, s: (f / "day=2026-11-03").rename(f / "day=2026-10-30")),
    ("erase", lambda f, days, s: erase(s, str(days[2]["worker"].iloc[0]), rules=RULES)),
    ("add-after-erase", lambda f, days, s: write_day(f, 5, days[5])),
    ("delete", lambda f, days, s: shutil.rmtree(f / "day=2026-11-01")),
    ("empty-file", lambda f, days, s: write_day(f, 6, days[6].iloc[:0])),
    ("re-add", lambda f, days, s: write_day(f, 0, days[0])),
]
#: steps after which the worker fold is an update (files only added); the others rebuild it from the stored rows
UPDATES = {"add", "add-again", "add-after-erase", "empty-file", "re-add", "reorder"}


def _full(folder: Path, erased: set[str]) -> pd.DataFrame:
    df = read_input(folder, INPUTS["labels"]).df
    return df[~df["worker"].astype(str).isin(erased)].reset_index(drop=True)


def _full_tables(df: pd.DataFrame, options: dict[str, Any]) -> dict[str, pd.DataFrame]:
    return cf.skills(df, method="mv", checks="warn", **options).tables


def _expected_reads(prev: pd.DataFrame, prev_votes: pd.DataFrame, now: pd.DataFrame, votes: pd.DataFrame,
                    new_rows: pd.DataFrame) -> tuple[int, int]:  # fmt: skip
    """Rows of the stored files on old tasks the new rows touch or whose vote moved; the vote-moved-untouched count."""
    old = set(prev["task"].astype(str))
    touched = set(new_rows["task"].astype(str)) & old
    a = prev_votes.set_index(prev_votes["task"].astype(str))["label"].astype(str)
    b = votes.set_index(votes["task"].astype(str))["label"].astype(str)
    common = a.index.intersection(b.index)
    moved = set(common[(a[common] != b[common]).to_numpy()])
    reread = touched | moved
    return int(prev["task"].astype(str).isin(reread).sum()), len(moved - touched)


FAMILIES = [
    ("text", "random", None),
    ("shuffled", "random", None),
    ("int", "smallest", None),
    ("shuffled", "smallest", None),
    ("int", "random", "declared"),
]


#: ~2 s a case: three families on seed 0 in the default run, the rest (12 cases) in the slow tier
CASES = [
    pytest.param(*f, seed, marks=() if seed == 0 and k < 3 else pytest.mark.slow, id=f"{'-'.join(map(str, f))}-{seed}")
    for seed in range(3)
    for k, f in enumerate(FAMILIES)
]


@pytest.mark.parametrize(("style", "tie_break", "classes", "seed"), CASES)
def test_folded_skills_equal_a_full_mv_fit_after_every_edit(
    tmp_path: Path, seed: int, style: str, tie_break: str, classes: str | None
) -> None:
    days = restyle_ids(labels_family(seed, n_days=7, tasks_per_day=25), style, seed)
    options: dict[str, Any] = {"tie_break": tie_break, "seed": seed}
    if classes:  # a declared label set with a class nobody uses
        options["classes"] = [*sorted({str(v) for d in days for v in d["label"]}), "never"]
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(3):
        write_day(folder, d, days[d])
    erased: set[str] = set()
    prev_rows, prev_votes = None, None
    for name, edit in [("first", lambda f, d, s: None), *EDITS]:
        edit(folder, days, store)
        if name == "erase":
            erased.add(str(days[2]["worker"].iloc[0]))
        reads: list[int] = []
        real = increments.stored_rows_of

        def counting(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            reads.append(len(out.rows))
            return out

        with mock.patch("crowdflow.skills.folded.stored_rows_of", counting):
            run = folded_skills_run(store, folder, **options)
        got = written_tables("skills", output_tables(run.fit.result, run.fit.report))
        rows = _full(folder, erased)
        want = _full_tables(rows, options)
        what = f"{style}/{tie_break} seed {seed} after {name}"
        assert_folded_skills_tables(got, want, what)
        acc = run.input["fold"]["workers"]
        assert acc["stored_rows_read"] == sum(reads) == run.input["stored_rows_read"], what
        if name in UPDATES and name != "first":
            assert acc["how"] == "updated", what
            assert prev_rows is not None and prev_votes is not None
            new_rows = rows.iloc[0:0] if not run.input["files_read"] else pd.concat(
                [pd.read_parquet(folder / p) for p in run.input["files_read"]], ignore_index=True)  # fmt: skip
            new_rows = new_rows[~new_rows["worker"].astype(str).isin(erased)]
            n, untouched = _expected_reads(prev_rows, prev_votes, rows, want["consensus"], new_rows)
            assert acc["stored_rows_read"] == n and acc["tasks_vote_moved_untouched"] == untouched, what
            assert untouched == 0, what  # a vote moves only with its counts (ties draw by task id)
        else:
            # a first run streams its files and reads them back from the store file by file (new_rows_read_back)
            back = acc["new_rows_read_back"]
            assert back == (run.input["rows_read"] if name == "first" else 0), what
            assert acc["how"] == "rebuilt" and acc["stored_rows_read"] == len(rows) - run.input["rows_read"] + back, (
                what
            )
        prev_rows, prev_votes = rows, want["consensus"]
        if erased:
            victim = next(iter(erased))
            for table in got.values():  # the id columns of every table and of the stored worker fold
                for col in ("worker", "workers"):
                    if col in table.columns:
                        assert victim not in {i for v in table[col].astype(str) for i in v.split(",")}, what
            state = read_state(store)
            kept = pd.read_parquet(store / "mv-workers" / state.folds["mv-workers"]["file"])["worker"]
            assert victim not in set(kept.astype(str)), what  # the per-task table names workers by code into it


def test_repeated_answers_across_files_are_refused(tmp_path: Path) -> None:
    """A (task, worker) pair in a stored file and in a new one: a folded run would count it twice; it is refused
    naming the pair, and the store keeps its state."""
    days = labels_family(4)
    folder, store = tmp_path / "data", tmp_path / "store"
    write_day(folder, 0, days[0])
    folded_skills_run(store, folder)
    before = (store / "state.json").read_text()
    again = days[0].iloc[:3].assign(label=days[0]["label"].iloc[:3])
    write_day(folder, 1, pd.concat([days[1], again], ignore_index=True))
    row = again.iloc[0]
    with pytest.raises(ValueError, match=f"worker '{row['worker']}' answers task '{row['task']}'|more than once"):
        folded_skills_run(store, folder)
    assert (store / "state.json").read_text() == before


def test_ties_draw_by_task_id_so_a_new_task_moves_no_old_vote(tmp_path: Path) -> None:
    """``tie_break: random`` draws by (task id, class, seed) (crowdflow.skills.ties, one rule for the full, folded and
    partitioned runs): new tied tasks that sort before old tied ones move none of their votes, so the folded run
    re-reads no stored row of an untouched task, and stays equal to the full fit."""
    old = pd.DataFrame({"task": ["m1", "m2", "m3", "m4"] * 2, "worker": ["a"] * 4 + ["b"] * 4,
                        "label": ["x"] * 4 + ["y"] * 4})  # fmt: skip
    folder, store = tmp_path / "data", tmp_path / "store"
    write_day(folder, 0, old)
    first = folded_skills_run(store, folder, seed=3).fit.result.consensus
    assert set(first["label"]) == {"x", "y"}  # the four tied tasks do not all draw the first class
    for k in range(6):  # new tied tasks that sort first: under a positional draw they shifted every old task's draw
        new = pd.DataFrame({"task": [f"a{k}"] * 2, "worker": ["a", "b"], "label": ["x", "y"]})
        write_day(folder, k + 1, new)
        run = folded_skills_run(store, folder, seed=3)
        want = _full_tables(_full(folder, set()), {"seed": 3})
        assert_folded_skills_tables(written_tables("skills", output_tables(run.fit.result, run.fit.report)), want,
                                    f"step {k}")  # fmt: skip
        acc = run.input["fold"]["workers"]
        assert acc["tasks_vote_moved_untouched"] == 0 and acc["stored_rows_read"] == 0, f"step {k}"
        now = run.fit.result.consensus.set_index("task")["label"]
        assert now[["m1", "m2", "m3", "m4"]].tolist() == first.set_index("task")["label"].tolist()


def test_a_backfill_and_new_options_rebuild_the_worker_fold(tmp_path: Path) -> None:
    """A partition re-read (a backfill) would add its rows twice to the worker fold, and other vote options move
    every vote: both rebuild it from the stored rows (and say why); the tables stay a full fit's."""
    days = labels_family(6)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(3):
        write_day(folder, d, days[d])
    folded_skills_run(store, folder)
    for kw, why in (({"refresh": ["day=2026-11-02"]}, "re-read"), ({"tie_break": "smallest"}, "vote options")):
        run = folded_skills_run(store, folder, **kw)  # type: ignore[arg-type]
        acc = run.input["fold"]["workers"]
        assert acc["how"] == "rebuilt" and why in acc["why"], acc
        options = {"tie_break": kw.get("tie_break", "random")}
        want = _full_tables(_full(folder, set()), options)
        assert_folded_skills_tables(written_tables("skills", output_tables(run.fit.result, run.fit.report)), want, why)
    run = folded_skills_run(store, folder, tie_break="smallest")
    assert run.input["fold"]["workers"]["how"] == "updated" and run.input["stored_rows_read"] == 0


def test_rows_without_a_label_are_left_out_as_a_full_fit_leaves_them(tmp_path: Path) -> None:
    """A row with no task, worker or label (what ``checks.validation: warn`` lets through) counts in no sum of a
    folded run, as a full fit leaves it out (``crowdflow.labels.answered``, the one rule)."""
    days = labels_family(8)
    folder, store = tmp_path / "data", tmp_path / "store"
    write_day(folder, 0, days[0])
    folded_skills_run(store, folder)
    bad = days[1].astype({"label": object, "worker": object})
    bad.loc[0, "label"], bad.loc[3, "worker"] = None, None
    write_day(folder, 1, bad)
    run = folded_skills_run(store, folder)
    assert run.input["fold"]["workers"]["how"] == "updated"
    want = _full_tables(_full(folder, set()).dropna(subset=["task", "worker", "label"]), {})
    assert_folded_skills_tables(written_tables("skills", output_tables(run.fit.result, run.fit.report)), want, "nulls")


def _positional_rule(scores: Any, tasks: Any, classes: Any, tie_break: str = "random", seed: int = 0) -> Any:
    """The tie rule before issue #38's fix: a draw indexed by the task's row (what older stores were voted with)."""
    import numpy as np

    top = scores.max(axis=1, keepdims=True)
    is_top = np.isclose(scores, top, rtol=1e-12, atol=1e-12)
    noise = np.random.default_rng(seed).random(scores.shape)
    return np.argmax(np.where(is_top, noise, -1.0), axis=1).astype(np.int64), int((is_top.sum(axis=1) > 1).sum())


def test_a_worker_fold_voted_by_another_tie_rule_is_corrected_by_its_moved_votes(tmp_path: Path) -> None:
    """A store written under the old (positional) tie rule holds other winners for some tied tasks; the next folded
    run finds those tasks by their vote, re-reads their stored rows and its tables equal the full fit's."""
    days = labels_family(5, n_days=3)
    folder, store = tmp_path / "data", tmp_path / "store"
    write_day(folder, 0, pd.concat([days[0], days[1]], ignore_index=True))
    with mock.patch("crowdflow.skills.majority.pick_winners", _positional_rule):
        old = folded_skills_run(store, folder, seed=1).fit.result.consensus
    write_day(folder, 2, days[2])
    got = folded_skills_run(store, folder, seed=1)
    acc = got.input["fold"]["workers"]
    want = _full_tables(_full(folder, set()), {"seed": 1})
    assert acc["how"] == "updated" and acc["tasks_vote_moved_untouched"] > 0
    assert (old.set_index("task")["label"] != want["consensus"].set_index("task")["label"].reindex(old["task"])).any()
    out = written_tables("skills", output_tables(got.fit.result, got.fit.report))
    assert_folded_skills_tables(out, want, "after the tie rule changed")
