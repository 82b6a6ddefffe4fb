"""A folded run reads its new files one at a time: checked, summed, dropped (``assemble(check=..., rows=False)``).

On generated families of daily folders (±1, integer and real outcomes; with and without weights; 1-9 files; a second
step that adds files to a committed state): the streamed assembly hands the check each new file's canonical rows
(those a full read gives), keeps none of them, and folds to the same table, bit for bit, as the assembly that holds
them; an exact refold taken a few files at a time equals the one-shot refold; a check that raises stops the
assembly before anything is committed; and the streamed assembly's peak of traced memory stays near one file's
rows where holding them grows with the number of files.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.tables import INPUTS
from crowdflow.frontdoor.increment_rules import RULES
from crowdflow.ranking.increments import PAIR_SUMS
from crowdflow.skills.increments import LABEL_COUNTS
from crowdflow.storage import increments
from crowdflow.storage.datasets import read_partition
from crowdflow.storage.increment_inputs import Assembled, assemble
from crowdflow.storage.increments import commit_state, read_state, read_table, state_lock
from crowdflow.storage.listing import list_partitions
from tests.incremental.helpers import comparisons_family, labels_family, write_day

#: (seed, files in the first step, files added in the second, outcomes, weights)
CASES = [
    (0, 1, 1, "sign", None),
    (1, 3, 2, "int", "int"),
    (2, 5, 1, "real", None),
    (3, 2, 4, "sign", "real"),
    (4, 6, 3, "int", None),
]


def _step(store: Path, folder: Path, check: Any, kind: str = "comparisons") -> Assembled:
    """One run's assembly and commit, as :func:`crowdflow.storage.increment_inputs.folded_input` does it."""
    with state_lock(store):
        state = read_state(store)
        got = assemble(store, state, folder, kind, rule=RULES[kind], rows=False, check=check)
        assert got.fold is not None
        commit_state(store, state, {**state.files, kind: got.files}, None, folds={**state.folds, kind: got.fold.record})
    return got


@pytest.mark.parametrize(("seed", "first", "added", "outcomes", "weights"), CASES)
def test_streamed_assembly_checks_each_new_file_and_folds_the_same(
    tmp_path: Path, seed: int, first: int, added: int, outcomes: str, weights: str | None
) -> None:
    days = comparisons_family(seed, n_days=first + added, per_day=40 + 25 * seed, outcomes=outcomes, weights=weights)
    folder = tmp_path / "data"
    seen: list[tuple[str, pd.DataFrame]] = []

    def check(df: pd.DataFrame, path: str) -> None:
        seen.append((path, df.reset_index(drop=True)))

    for step, days_now in (("first", range(first)), ("second", range(first, first + added))):
        for d in days_now:
            write_day(folder, d, days[d])
        seen.clear()
        streamed = _step(tmp_path / "streamed", folder, check)
        held = _step(tmp_path / "held", folder, None)
        # each new file once, in listing order, with the rows a full read gives
        parts = [
            p for p in list_partitions(folder) if any(p.rel.startswith(f"day=2026-11-{d + 1:02d}/") for d in days_now)
        ]
        assert [p for p, _ in seen] == [p.path for p in parts], step
        for (_, got), part in zip(seen, parts, strict=True):
            want = read_partition(part, INPUTS["comparisons"]).df.reset_index(drop=True)
            pd.testing.assert_frame_equal(got, want, check_exact=True)
        # no rows kept, but counted; the fold and the files' account are the held assembly's
        n_new = sum(len(days[d]) for d in days_now)
        assert len(streamed.new_rows) == 0 and len(streamed.table.df) == 0 and streamed.rows_read == n_new
        assert held.rows_read is None and len(held.new_rows) == n_new
        assert streamed.record() == held.record(), step
        assert streamed.fold is not None and held.fold is not None
        pd.testing.assert_frame_equal(streamed.fold.table, held.fold.table, check_exact=True, obj=step)
        assert streamed.record()["rows"] == sum(len(days[d]) for d in range(max(days_now) + 1))


def test_a_failing_check_stops_the_assembly_and_commits_nothing(tmp_path: Path) -> None:
    days = comparisons_family(7, n_days=4, outcomes="sign")
    folder, store = tmp_path / "data", tmp_path / "store"
    for d in range(2):
        write_day(folder, d, days[d])
    _step(store, folder, None)
    before = (store / "state.json").read_text()
    for d in range(2, 4):
        write_day(folder, d, days[d])
    calls: list[str] = []

    def refuse_second(df: pd.DataFrame, path: str) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise ValueError(f"bad rows in {path}")

    with pytest.raises(ValueError, match="day=2026-11-04"):
        _step(store, folder, refuse_second)
    assert len(calls) == 2 and (store / "state.json").read_text() == before
    got = _step(store, folder, None)  # the next run reads both new files again and folds them
    assert got.read == ["day=2026-11-03/part-0.parquet", "day=2026-11-04/part-0.parquet"]


@pytest.mark.parametrize("n_files", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("kind", ["comparisons", "labels"])
def test_exact_refold_in_chunks_equals_the_one_shot_refold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_files: int, kind: str
) -> None:
    monkeypatch.setattr(increments, "REFOLD_CHUNK", 2)  # several chunks on small folders
    if kind == "comparisons":
        days = comparisons_family(n_files, n_days=n_files, outcomes="int", weights="int")
    else:
        days = labels_family(n_files, n_days=n_files)
    folder, store = tmp_path / "data", tmp_path / "store"
    for d, df in enumerate(days):
        write_day(folder, d, df)
    got = _step(store, folder, None, kind)
    assert got.fold is not None and got.fold.how == "refolded"
    rule = PAIR_SUMS if kind == "comparisons" else LABEL_COUNTS
    entries = got.files
    one_shot = rule.refold([read_table(store, kind, str(entries[sha].sums)) for sha in sorted(entries)])
    pd.testing.assert_frame_equal(got.fold.table, one_shot, check_exact=True)


@pytest.mark.slow  # tracemalloc slows the assemblies: ~9 s
def test_streamed_assembly_memory_does_not_grow_with_the_new_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Peak traced memory (numpy and Python objects) of a first assembly over 4 and over 16 files of 20,000 rows
    (100 items: a file's pair sums are small beside its rows): streamed, it stays that of one file plus the sums of
    a refold chunk; holding the rows, it grows with the files."""
    monkeypatch.setattr(increments, "REFOLD_CHUNK", 2)
    rng = np.random.default_rng(5)
    ids = np.asarray([f"item{k:04d}" for k in range(100)], dtype=object)
    rows = 20_000
    for d in range(16):
        i = rng.integers(0, 100, rows)
        j = (i + 1 + rng.integers(0, 99, rows)) % 100
        df = pd.DataFrame({"annotator": "a0", "item_a": ids[i], "item_b": ids[j], "outcome": rng.choice([-1, 1], rows)})
        for n in (4, 16):
            if d < n:
                write_day(tmp_path / f"data{n}", d, df)

    def peak(n: int, check: Any) -> int:
        tracemalloc.start()
        try:
            _step(tmp_path / f"store{n}-{check is None}", tmp_path / f"data{n}", check)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    _step(tmp_path / "warm-up", tmp_path / "data4", None)  # the first assembly's lazy imports, untraced
    streamed = {n: peak(n, lambda df, path: None) for n in (4, 16)}
    held = {n: peak(n, None) for n in (4, 16)}
    assert streamed[16] < 1.1 * streamed[4], (streamed, held)
    assert held[16] > 1.5 * held[4], (held, streamed)  # the control: holding the rows grows with the files
