"""Incremental runs against full refits, through the flows: every table equal, bit for bit, after every edit.

Each step edits a date-partitioned folder (a day added, a day re-delivered with corrections, a day deleted, days
renamed so they reorder, a worker erased), then runs the pipeline twice: ``incremental: true`` against its store, and
a full run of a fresh pipeline over the same files (less the erased worker's rows). Every output table must be equal.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from crowdflow.spec import parse_spec
from crowdflow.storage.increments import read_state, state_dir, stored_rows
from crowdflow.storage.runs import read_run
from tests.incremental.helpers import assert_folded_skills_tables, comparisons_family, labels_family, write_day

pytestmark = pytest.mark.usefixtures("prefect_harness")

CHECKS = {"identifiability": "warn", "isolated_workers": "warn", "connectivity": "warn"}


def _spec(job: str, folder: Path, out: Path, name: str, options: dict[str, Any]) -> Any:
    kind = "labels" if job == "skills" else "comparisons"
    checks = {k: v for k, v in CHECKS.items() if job == "skills" or k == "connectivity"}
    return parse_spec(
        {
            "name": name,
            "job": job,
            kind: {"path": str(folder)},
            job: options,
            "checks": checks,
            "output": {"dir": str(out), "report": False},
            "cache": {"enabled": False},
        }
    )


def _run(spec: Any) -> Any:
    from flows.pipeline import run_spec

    return read_run(run_spec(spec)["run_dir"])


def _assert_same_tables(inc: Any, full: Any, what: str) -> None:
    assert sorted(inc.tables) == sorted(full.tables), what
    for name in full.tables:
        pd.testing.assert_frame_equal(inc.tables[name], full.tables[name], check_exact=True, obj=f"{name} {what}")


def _erase_copy(src: Path, dst: Path, column: str, person: str) -> None:
    """The folder as a full refit must see it after an erasure: the same files less the person's rows."""
    if dst.exists():
        shutil.rmtree(dst)
    for f in src.rglob("*.parquet"):
        df = pd.read_parquet(f)
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        df[df[column] != person].to_parquet(target, index=False)


Compare = Callable[[Any, Any, str], None]


def _sequence(
    job: str,
    tmp_path: Path,
    options: dict[str, Any],
    seed: int,
    days: list[pd.DataFrame] | None = None,
    compare: Compare = _assert_same_tables,
    guard: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> list[Any]:
    """Edit a daily folder step by step; after each step ``compare(incremental run, full run, step)``.

    ``guard()`` is entered around every incremental run (e.g. to make reading the store's rows fail). Returns the
    incremental runs.
    """
    from crowdflow.frontdoor.api import forget

    kind, person_col = ("labels", "worker") if job == "skills" else ("comparisons", "annotator")
    if days is None:
        days = labels_family(seed) if job == "skills" else comparisons_family(seed)
    folder, out = tmp_path / "data", tmp_path / "out"
    victim = str(days[1][person_col].iloc[0])
    for d in range(2):
        write_day(folder, d, days[d])
    steps = [
        ("start", lambda: None),
        ("add", lambda: write_day(folder, 2, days[2])),
        ("replace", lambda: write_day(folder, 1, days[1].iloc[::2])),
        ("reorder", lambda: (folder / "day=2026-11-03").rename(folder / "day=2026-10-31")),
        ("erase", lambda: forget(out, "inc", victim)),
        ("add-after-erase", lambda: write_day(folder, 3, days[3])),
        ("delete", lambda: shutil.rmtree(folder / "day=2026-11-01")),
    ]
    erased = False
    runs = []
    for k, (what, edit) in enumerate(steps):
        edit()
        erased = erased or what == "erase"
        with guard():
            inc = _run(_spec(job, folder, out, "inc", {**options, "incremental": True}))
        runs.append(inc)
        ref_folder = folder
        if erased:
            ref_folder = tmp_path / "erased-copy"
            _erase_copy(folder, ref_folder, person_col, victim)
        full = _run(_spec(job, ref_folder, tmp_path / "full", f"full{k}", options))
        compare(inc, full, f"after {what}")
        record = inc.manifest["incremental"]
        assert record["enabled"] and record[kind]["rows"] == int(full.manifest["inputs"][0]["rows"])
        if what == "start":
            assert record["state_from"]["version"] == 0 and record[kind]["files_reused"] == []
        if what == "reorder":
            assert record[kind]["files_read"] == []  # renamed, not changed: nothing read again
        if erased:  # no trace of the erased person in any output, stored statistic or state record
            for name, table in inc.tables.items():
                for col in table.columns:
                    assert victim not in set(table[col].astype(str)), f"{victim} in {name}.{col} after {what}"
            store = state_dir(out, "inc")
            for e in read_state(store).files[kind].values():
                assert victim not in set(stored_rows(store, kind, e)[person_col])
            assert f'"{victim}"' not in (store / "state.json").read_text()
            assert record["state_from"]["erasures"] == 1
    return runs


#: how a folded mv run's worker fold is made after each step of :func:`_sequence` (files only added: updated)
_WORKER_FOLD = {"start": "rebuilt", "add": "updated", "replace": "rebuilt", "reorder": "updated",
                "erase": "rebuilt", "add-after-erase": "updated", "delete": "rebuilt"}  # fmt: skip


def _folded_mv_equals_full(inc: Any, full: Any, what: str) -> None:
    """A folded mv run (skills.incremental + method mv) against a full mv run: docs/methods/skills.md §4.4."""
    assert_folded_skills_tables(inc.tables, full.tables, what)
    rec = inc.manifest["incremental"]["labels"]
    workers = rec["fold"]["workers"]
    assert workers["how"] == _WORKER_FOLD[what.removeprefix("after ")], what
    assert rec["stored_rows_read"] == workers["stored_rows_read"], what
    if what == "after reorder":  # renamed files: nothing new, nothing re-read
        assert workers["stored_rows_read"] == 0 and rec["rows_read"] == 0, what
    assert inc.manifest["fit"]["folded"] and inc.manifest["cache"]["enabled"] is False


def test_folded_mv_flow_equals_full_refit(tmp_path: Path) -> None:
    """skills.incremental + method mv runs folded (crowdflow/skills/folded.py); a whole-file read of a stored file's
    rows fails the run (only the filtered reads of the worker fold are allowed, and counted in the manifest)."""
    from tests.incremental.test_rank_folded import _stored_rows_unreadable

    _sequence("skills", tmp_path, {"method": "mv"}, 0, None, _folded_mv_equals_full, _stored_rows_unreadable)


# pgd and ds take the row path (their fits are not sums over files; fold.how rows): the same store and flow steps
# for both, so they stay in the slow tier to keep the default suite near 10 minutes.
@pytest.mark.slow
@pytest.mark.parametrize("method", ["pgd", "ds"])
def test_skills_incremental_equals_full_refit(tmp_path: Path, method: str) -> None:
    runs = _sequence(
        "skills", tmp_path, {"method": method, "duplicates": "keep_last"}, seed={"pgd": 1, "ds": 2}[method]
    )
    assert all(r.manifest["incremental"]["labels"]["fold"]["how"] == "rows" for r in runs)


# outliers: none is a folded run (its own tables): tests/incremental/test_rank_folded.py
@pytest.mark.slow
def test_ranking_incremental_equals_full_refit(tmp_path: Path) -> None:
    runs = _sequence("ranking", tmp_path, {"outliers": "lbi"}, seed=4)
    assert all(r.manifest["incremental"]["comparisons"]["fold"]["how"] == "rows" for r in runs)


def test_failed_run_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    days = labels_family(7)
    folder, out = tmp_path / "data", tmp_path / "out"
    write_day(folder, 0, days[0])
    _run(_spec("skills", folder, out, "inc", {"method": "mv", "incremental": True}))
    before = (state_dir(out, "inc") / "state.json").read_text()
    bad = days[1].copy()
    bad.loc[0, "label"] = None  # a missing label blocks validation of the new file
    bad["task"] = bad["task"].astype(object)
    bad.loc[1, "task"] = None
    write_day(folder, 1, bad)
    from crowdflow.contracts.errors import ValidationFailed

    with pytest.raises(ValidationFailed, match="day=2026-11-02"):  # before any sum: the file, row and column named
        _run(_spec("skills", folder, out, "inc", {"method": "mv", "incremental": True}))
    assert (state_dir(out, "inc") / "state.json").read_text() == before
    assert json.loads(before)["version"] == 1
