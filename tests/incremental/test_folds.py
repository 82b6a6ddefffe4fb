"""Folded runs (format 2): per-file sums in the increment store, folded, equal a full refit after every edit.

Majority vote from per-task class counts and HodgeRank from per-pair sums, on generated families of daily folders:
files added, replaced, deleted, renamed (reordered), duplicated, emptied; workers erased; a format-1 store
migrated; writers killed at every step; racing writers. The reference is always the fit over a full read of the
folder as it is now (``read_table`` in listing order, less erased workers), computed by the library's own fit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.tables import INPUTS
from crowdflow.frontdoor.increment_rules import RULES
from crowdflow.labels import encode_labels
from crowdflow.ranking import fit_ranking
from crowdflow.ranking.increments import PAIR_SUMS, hodgerank_from_pairs, hodgerank_run, pair_sums
from crowdflow.skills import majority_vote
from crowdflow.skills.increments import LABEL_COUNTS, FoldedLabels, label_sums, majority_run
from crowdflow.storage.increments import erase, read_state, read_table, stored_rows
from crowdflow.storage.io import read_table as read_input
from tests.incremental.helpers import FAMILIES, assert_folded_tables, comparisons_family, labels_family, write_day

ROOT = Path(__file__).resolve().parents[2]


def _full(folder: Path, kind: str, erased: tuple[str, ...] = ()) -> pd.DataFrame:
    df = read_input(folder, INPUTS[kind]).df
    col = "worker" if kind == "labels" else "annotator"
    return df[~df[col].astype(str).isin(erased)].reset_index(drop=True)


def _mv_full(folder: Path, tie_break: str, seed: int, erased: tuple[str, ...] = ()) -> pd.DataFrame:
    return majority_vote(encode_labels(_full(folder, "labels", erased)), tie_break, seed).consensus  # type: ignore[arg-type]


def _refold(store: Path, kind: str) -> pd.DataFrame:
    """The fold recomputed from scratch from the stored rows (every file, in hash order)."""
    rule = RULES[kind]
    state = read_state(store)
    sums = []
    for sha in sorted(state.files[kind]):
        e = state.files[kind][sha]
        sums += [rule.sums(stored_rows(store, kind, e))] * max(len(e.paths), 1)
    return rule.refold(sums)


EDITS = [
    ("add", lambda f, days: write_day(f, 3, days[3])),
    ("replace", lambda f, days: write_day(f, 1, days[1].iloc[::2])),
    ("delete", lambda f, days: shutil.rmtree(f / "day=2026-11-01")),
    ("reorder", lambda f, days: (f / "day=2026-11-03").rename(f / "day=2026-11-00")),
    ("duplicate", lambda f, days: shutil.copytree(f / "day=2026-11-02", f / "day=2026-11-09")),
    ("empty-file", lambda f, days: write_day(f, 2, days[2].iloc[:0])),
    ("re-add", lambda f, days: write_day(f, 1, days[1])),
]


@pytest.mark.parametrize("tie_break", ["random", "smallest"])
@pytest.mark.parametrize("seed", range(6))
def test_folded_majority_equals_a_full_refit_after_every_edit(tmp_path: Path, seed: int, tie_break: str) -> None:
    days = labels_family(seed, tasks_per_day=30)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(3):
        write_day(folder, d, days[d])
    hows = []
    for name, edit in [("first", lambda f, d: None), *EDITS]:
        edit(folder, days)
        run = majority_run(store, folder, tie_break=tie_break, seed=seed)  # type: ignore[arg-type]
        pd.testing.assert_frame_equal(run.consensus, _mv_full(folder, tie_break, seed), check_exact=True, obj=name)
        state = read_state(store)
        fold = read_table(store, "labels", state.folds["labels"]["file"])
        pd.testing.assert_frame_equal(fold, _refold(store, "labels"), check_exact=True, obj=f"fold after {name}")
        hows.append(run.input["fold"]["how"])
        on_disk = {p.name for p in (store / "labels").iterdir()}
        named = {e.stats for e in state.files["labels"].values()} | {e.sums for e in state.files["labels"].values()}
        assert on_disk == named | {state.folds["labels"]["file"]}, f"garbage left after {name}"
    # integer counts: after the first run every fold is an update of the stored one, never a refold
    assert hows == ["refolded"] + ["updated"] * len(EDITS)


@pytest.mark.parametrize("integral", [True, False])
@pytest.mark.parametrize("seed", range(5))
def test_folded_hodgerank_equals_a_full_refit_after_every_edit(tmp_path: Path, seed: int, integral: bool) -> None:
    days = comparisons_family(seed)
    if integral:  # wins and losses (±1, ties 0): every sum an integer, so the fold is exact
        days = [d.assign(outcome=np.sign(d["outcome"]).astype(np.int64)) for d in days]
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(3):
        write_day(folder, d, days[d])
    worst = 0.0
    for name, edit in [("first", lambda f, d: None), *EDITS]:
        edit(folder, days)
        run = hodgerank_run(store, folder)
        ref = fit_ranking(_full(folder, "comparisons"), outliers="none").tables["ranking"]
        got = run.result.ranking
        if integral:  # the same table as a fit over the rows, bit for bit
            pd.testing.assert_frame_equal(got, ref, check_exact=True, obj=name)
        else:
            m = ref.merge(got, on="item", suffixes=("_ref", "_got"))
            assert len(m) == len(ref) == len(got)
            assert (m["n_comparisons_ref"] == m["n_comparisons_got"]).all()
            worst = max(worst, float(np.abs(m["score_ref"] - m["score_got"]).max()))
        state = read_state(store)
        fold = read_table(store, "comparisons", state.folds["comparisons"]["file"])
        # canonical: the stored fold is the one a from-scratch fold of the same files gives, bit for bit
        pd.testing.assert_frame_equal(fold, _refold(store, "comparisons"), check_exact=True, obj=f"fold {name}")
        assert run.input["fold"]["how"] == ("updated" if integral and name != "first" else "refolded")
    assert worst < 1e-9


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pair_fit_tables_equal_a_full_fit(family: str) -> None:
    """Every table of a fit on the pair sums against a full least-squares fit over the rows, on 6 shapes a family
    (items, rows a day, seeds): ranking bit for bit when integral, components and pair residuals by their rules.
    Worst over 20 seeds a family (a one-off run): scores 7.4e-16 relative, shares 7.8e-16."""
    kw = FAMILIES[family]
    integral = kw["outcomes"] != "real" and kw.get("weights") != "real"
    for seed in range(6):
        days = comparisons_family(seed, n_items=8 + 3 * seed, per_day=30 + 15 * seed, **kw)  # type: ignore[arg-type]
        rows = pd.concat(days, ignore_index=True)
        full = fit_ranking(rows, outliers="none").tables
        assert_folded_tables(hodgerank_from_pairs(pair_sums(rows)).tables, full, integral, f"{family} seed {seed}")


@pytest.mark.parametrize("seed", range(4))
def test_erased_worker_leaves_no_trace_in_the_folds(tmp_path: Path, seed: int) -> None:
    days = labels_family(seed)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(3):
        write_day(folder, d, days[d])
    majority_run(store, folder)
    victim = str(days[0]["worker"].iloc[0])
    rec = erase(store, victim, rules=RULES)
    assert rec.rows_removed > 0
    state = read_state(store)
    # the erasure updated the fold at once (subtracting the touched files' old sums, adding their new ones)
    fold = read_table(store, "labels", state.folds["labels"]["file"])
    no_victim = _full(folder, "labels", (victim,))
    want = FoldedLabels.empty()
    from crowdflow.skills.increments import fold_labels

    want = fold_labels(want, [label_sums(no_victim)])[0].to_frame()
    pd.testing.assert_frame_equal(fold, want, check_exact=True)
    write_day(folder, 3, days[3])  # a new day with the worker in it
    run = majority_run(store, folder)
    assert run.input["fold"]["how"] == "updated"
    pd.testing.assert_frame_equal(run.consensus, _mv_full(folder, "random", 0, (victim,)), check_exact=True)
    for e in read_state(store).files["labels"].values():
        assert victim not in set(stored_rows(store, "labels", e)["worker"].astype(str))
    assert f'"{victim}"' not in (store / "state.json").read_text()


def test_erasure_without_rules_drops_the_fold_and_the_next_run_refolds(tmp_path: Path) -> None:
    days = comparisons_family(2)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(3):
        write_day(folder, d, days[d])
    hodgerank_run(store, folder)
    victim = str(days[1]["annotator"].iloc[0])
    erase(store, victim)
    assert "comparisons" not in read_state(store).folds
    run = hodgerank_run(store, folder)
    assert run.input["fold"]["how"] == "refolded"
    ref = fit_ranking(_full(folder, "comparisons", (victim,)), outliers="none").tables["ranking"]
    m = ref.merge(run.result.ranking, on="item")
    assert float(np.abs(m["score_x"] - m["score_y"]).max()) < 1e-9


def test_a_format_1_store_is_migrated(tmp_path: Path) -> None:
    """A store written by format 1 (rows only, no sums, no folds) is read; the next folded run derives the sums."""
    days = labels_family(7)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(3):
        write_day(folder, d, days[d])
    majority_run(store, folder)
    raw = json.loads((store / "state.json").read_text())
    raw["format"] = "crowdflow-increments/1"
    raw.pop("folds")
    for e in raw["files"]["labels"].values():
        e.pop("sums")
        e.pop("exact")
    (store / "state.json").write_text(json.dumps(raw))
    assert all(e.sums is None for e in read_state(store).files["labels"].values())
    write_day(folder, 3, days[3])
    run = majority_run(store, folder)
    assert run.input["files_read"] == ["day=2026-11-04/part-0.parquet"] and run.input["fold"]["how"] == "refolded"
    assert run.input["stored_rows_read"] == sum(len(days[d]) for d in range(3))  # summed once from their rows
    pd.testing.assert_frame_equal(run.consensus, _mv_full(folder, "random", 0), check_exact=True)
    assert json.loads((store / "state.json").read_text())["format"] == "crowdflow-increments/2"


def test_sums_are_what_the_rules_say() -> None:
    """One file's sums by hand: counts per (task, label); pair sums oriented from the first item in text order."""
    lab = pd.DataFrame(
        {"task": ["t2", "t1", "t1", "t2"], "worker": ["a", "a", "b", "b"], "label": ["x", "y", "y", "x"]}
    )
    assert label_sums(lab).to_dict("list") == {"task": ["t1", "t2"], "label": ["y", "x"], "count": [2, 2]}
    cmp = pd.DataFrame({"annotator": ["a", "b"], "item_a": ["q", "p"], "item_b": ["p", "q"], "outcome": [1.5, 2.0]})
    s = pair_sums(cmp)
    assert s.to_dict("list") == {"lo": ["p"], "hi": ["q"], "n": [2], "w": [2.0], "s": [0.5], "q": [6.25]}
    assert LABEL_COUNTS.exact(label_sums(lab)) and not PAIR_SUMS.exact(s)
    res = hodgerank_from_pairs(s)
    assert res.ranking.set_index("item")["score"].to_dict() == pytest.approx({"p": 0.125, "q": -0.125})


_RUN = """
import sys
from crowdflow.skills.increments import majority_run
majority_run(sys.argv[1], sys.argv[2], run_id=sys.argv[3], out=sys.argv[4])
"""


@pytest.mark.parametrize("step", [1, 2, 4, 5, 6, 7, 8])
def test_killed_folded_run_leaves_the_previous_state(tmp_path: Path, step: int) -> None:
    """Kill the run after its k-th store step (rows and sums of 2 files, fold, state.json, garbage; 8: no kill)."""
    days = labels_family(5)
    folder, store = tmp_path / "data", tmp_path / "store"
    write_day(folder, 0, days[0])
    majority_run(store, folder)
    before = read_state(store)
    for d in (1, 2):
        write_day(folder, d, days[d])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CROWDFLOW_TEST_KILL_STATE_AT_STEP": str(step)}
    out = tmp_path / "consensus.parquet"
    proc = subprocess.run([sys.executable, "-c", _RUN, str(store), str(folder), "k", str(out)], env=env, check=False)
    after = read_state(store)
    committed = after.version == before.version + 1
    assert proc.returncode == (-9 if step <= 7 else 0)
    assert committed == (step >= 6)  # steps 1-5 are uncommitted files; 6 is state.json
    if not committed:
        assert after.folds == before.folds and after.files == before.files
    run = majority_run(store, folder)
    pd.testing.assert_frame_equal(run.consensus, _mv_full(folder, "random", 0), check_exact=True)
    state = read_state(store)
    named = {e.stats for e in state.files["labels"].values()} | {e.sums for e in state.files["labels"].values()}
    assert {p.name for p in (store / "labels").iterdir()} == named | {state.folds["labels"]["file"]}


def test_racing_folded_runs_never_corrupt_the_fold(tmp_path: Path) -> None:
    days = labels_family(3, n_days=6)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(6):
        write_day(folder, d, days[d])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RUN, str(store), str(folder), f"r{k}", str(tmp_path / f"o{k}.pq")], env=env
        )
        for k in range(3)
    ]
    assert [p.wait(300) for p in procs] == [0, 0, 0]
    assert read_state(store).version == 3
    want = _mv_full(folder, "random", 0)
    for k in range(3):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / f"o{k}.pq"), want, check_exact=True)
