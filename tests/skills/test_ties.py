"""One tie rule for every path (issue #38): the draw depends on (task id, class, seed) only.

The rule (:mod:`crowdflow.skills.ties`) is checked three ways: the hash against published FNV-1a vectors; the
draws as a fair die over tasks; and, on a family of label sets with many ties (even label counts, 2-4 classes,
permuted rows, tasks split across files and buckets), the inline vote, the partitioned vote (in process and on a
Dask LocalCluster, several bucket counts) and the folded (incremental) vote give the same winners, bit for bit,
for majority vote and for Dawid-Skene posteriors that tie.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from crowdflow.skills import SkillsOptions, fit_skills, fit_skills_partitioned
from crowdflow.skills.folded import folded_skills_run
from crowdflow.skills.ties import id_hashes, pick_winners, tie_draws


def test_the_hash_is_fnv1a_64() -> None:
    """Published FNV-1a 64-bit vectors (Noll's test suite), so the draw is the same on every host and version."""
    got = id_hashes(["", "a", "foobar"])
    assert got.tolist() == [0xCBF29CE484222325, 0xAF63DC4C8601EC8C, 0x85944171F73967E8]
    # the text is hashed as UTF-8, whatever container holds it; non-text ids by their str
    same = [id_hashes(pa.array(["é", "t1"])), id_hashes(np.array(["é", "t1"], dtype=object)),
            id_hashes(pa.chunked_array([["é"], ["t1"]]))]  # fmt: skip
    for h in same:
        assert h.tolist() == same[0].tolist()
    assert id_hashes(np.array([7, 12])).tolist() == id_hashes(["7", "12"]).tolist()
    assert id_hashes(pa.array(["x", "abc", "y"]).slice(1, 1)).tolist() == id_hashes(["abc"]).tolist()


def _tied_scores(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    """Vote counts with many ties; some rows scaled by an inexact float (posterior-like scores)."""
    s = rng.integers(0, 3, size=(n, m)).astype(np.float64)
    s[::7] *= 0.1
    return s


@pytest.mark.parametrize("seed", range(4))
def test_winners_do_not_depend_on_the_partition_or_the_class_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 5))
    n = 3000
    tasks = np.array([f"task-{rng.integers(10**9)}-{k}" for k in range(n)], dtype=object)
    classes = np.array(["cat", "dog", "eel", "fox"][:m], dtype=object)
    scores = _tied_scores(rng, n, m)
    whole, ties = pick_winners(scores, tasks, classes, "random", seed)
    assert ties > n // 4  # the family is tie-heavy
    # any partition of the tasks, in any order, and any order of the classes: the same winning label per task
    part = rng.integers(0, int(rng.integers(2, 9)), n)
    perm_c = rng.permutation(m)
    got = np.empty(n, dtype=object)
    total = 0
    for b in np.unique(part):
        rows = rng.permutation(np.flatnonzero(part == b))
        w, t = pick_winners(scores[rows][:, perm_c], pa.array(tasks[rows].tolist()), classes[perm_c], "random", seed)
        got[rows] = classes[perm_c][w]
        total += t
    assert total == ties
    assert (got == classes[whole]).all()
    # the winner is always one of the top classes
    assert (scores[np.arange(n), whole] == scores.max(axis=1)).all()
    # "smallest" is the first top class in the given order
    first, _ = pick_winners(scores, tasks, classes, "smallest", seed)
    assert (first == np.argmax(scores == scores.max(axis=1)[:, None], axis=1)).all()


def test_draws_are_a_fair_die_and_move_with_the_seed() -> None:
    n = 40_000
    tasks = [f"t{k:07d}" for k in range(n)]
    for m in (2, 3, 4):
        classes = [f"c{k}" for k in range(m)]
        w, ties = pick_winners(np.ones((n, m)), tasks, classes, "random", 11)
        assert ties == n
        share = np.bincount(w, minlength=m) / n
        # binomial sd = sqrt(p(1-p)/n) <= 0.0025: 5 sd
        assert np.abs(share - 1 / m).max() < 0.0125, (m, share)
    u = tie_draws(tasks, ["a", "b"], 0)
    assert u.shape == (n, 2) and (u >= 0).all() and (u < 1).all()
    assert abs(u.mean() - 0.5) < 0.005 and abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.02
    a, _ = pick_winners(np.ones((n, 2)), tasks, ["a", "b"], "random", 0)
    b, _ = pick_winners(np.ones((n, 2)), tasks, ["a", "b"], "random", 1)
    assert 0.45 < (a != b).mean() < 0.55  # another seed, another (independent) coin
    with pytest.raises(ValueError, match="unknown tie_break"):
        pick_winners(np.ones((2, 2)), ["a", "b"], ["x", "y"], "first", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="do not match"):
        pick_winners(np.ones((2, 2)), ["a"], ["x", "y"], "random", 0)


def _tie_family(seed: int) -> pd.DataFrame:
    """Labels with many ties: every task gets an even number of labels (2 or 4) over 2-4 classes; ids of mixed
    lengths (some numeric-looking, so the natural order is not the text order); rows permuted."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 5))
    n_workers, n_tasks = int(rng.integers(6, 20)), int(rng.integers(150, 400))
    classes = np.array(["no", "yes", "maybe", "n/a"][:m])
    rows = []
    for t in range(n_tasks):
        k = int(rng.choice([2, 4]))
        for w in rng.choice(n_workers, k, replace=False):
            rows.append((f"{t}" if t % 3 else f"task-{t}", f"w{w}", classes[rng.integers(0, m)]))
    df = pd.DataFrame(rows, columns=["task", "worker", "label"])
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def _write_files(df: pd.DataFrame, folder: Path, n_files: int) -> list[Path]:
    """Contiguous row ranges (a task's labels span files), one folder per day so the folded run can add them."""
    paths = []
    for k, rows in enumerate(np.array_split(np.arange(len(df)), n_files)):
        d = folder / f"day={k:02d}"
        d.mkdir(parents=True, exist_ok=True)
        df.iloc[rows].to_parquet(d / "part-0.parquet", index=False)
        paths.append(d / "part-0.parquet")
    return paths


def _labels(table: pd.DataFrame) -> pd.Series:
    return table.set_index(table["task"].astype(str))["label"].astype(str).sort_index()


def _partitioned(folder: Path, tmp: Path, opts: SkillsOptions, executor: Any, n_buckets: int) -> pd.Series:
    part = fit_skills_partitioned(folder, opts, out_folder=tmp, executor=executor, n_buckets=n_buckets)
    cons = pd.concat([pd.read_parquet(p) for p in part.consensus_parts], ignore_index=True)
    assert part.result.metadata["n_ties"] == int(part.result.metadata["n_ties"])
    return _labels(cons)


@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.slow) for s in (1, 2, 3))])
def test_inline_partitioned_dask_and_folded_majority_votes_agree(seed: int, tmp_path: Path, dask_map: Any) -> None:
    df = _tie_family(seed)
    opts = SkillsOptions(method="mv", tie_break="random", seed=seed)
    ref = fit_skills(df, opts)
    want = _labels(ref.consensus)
    assert ref.metadata["n_ties"] > len(want) // 5
    folder = tmp_path / "labels"
    paths = _write_files(df, folder, 3 + seed)
    for n_buckets in (1, 3, 64):
        got = _partitioned(folder, tmp_path / f"out-{n_buckets}", opts, None, n_buckets)
        pd.testing.assert_series_equal(got, want, obj=f"in-process partitioned, {n_buckets} buckets")
    got = _partitioned(folder, tmp_path / "out-dask", opts, dask_map, 5)
    pd.testing.assert_series_equal(got, want, obj="partitioned on Dask")
    # folded: the files arrive one run at a time (the incremental path), then the tables equal the inline fit's
    store, growing = tmp_path / "store", tmp_path / "growing"
    for k, p in enumerate(paths):
        (growing / p.parent.name).mkdir(parents=True)
        (growing / p.parent.name / p.name).write_bytes(p.read_bytes())
        run = folded_skills_run(store, growing, tie_break="random", seed=seed)
        assert run.input["fold"]["workers"].get("tasks_vote_moved_untouched", 0) == 0  # a vote moves with its counts
    pd.testing.assert_series_equal(_labels(run.fit.result.consensus), want, obj="folded")
    pd.testing.assert_frame_equal(
        run.fit.result.consensus.drop(columns="fallback").reset_index(drop=True),
        ref.consensus.drop(columns=[c for c in ("fallback",) if c in ref.consensus]).reset_index(drop=True),
        check_exact=True,
    )


def _symmetric_ds_labels(seed: int) -> pd.DataFrame:
    """A label set invariant under any permutation of the workers and of the classes: Dawid-Skene's fixed point
    from the majority-vote start is symmetric, so every task whose two labels disagree has a tied posterior."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 4))
    classes = ["a", "b", "c"][:m]
    n_w = int(rng.integers(3, 5))
    rows, t = [], 0
    for i in range(n_w):
        for j in range(n_w):
            if i == j:
                continue
            for li in range(m):
                for lj in range(m):
                    copies = 3 if li == lj else 1
                    for _ in range(copies if i < j or li != lj else 0):
                        rows += [(f"t{t}", f"w{i}", classes[li]), (f"t{t}", f"w{j}", classes[lj])]
                        t += 1
    df = pd.DataFrame(rows, columns=["task", "worker", "label"])
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_inline_partitioned_and_dask_dawid_skene_ties_agree(seed: int, tmp_path: Path, dask_map: Any) -> None:
    df = _symmetric_ds_labels(seed)
    opts = SkillsOptions(method="ds", tie_break="random", seed=seed + 5, ds_prior=0.0)
    ref = fit_skills(df, opts)
    want = _labels(ref.consensus)
    assert ref.metadata["n_ties"] > 0
    tied = ref.consensus["confidence"].to_numpy() < 1 / 2 + 1e-9
    labels = ref.consensus["label"].astype(str).to_numpy()
    assert len(set(labels[tied])) > 1  # the draw picks different classes, not always the first
    folder = tmp_path / "labels"
    _write_files(df, folder, 3)
    for n_buckets in (1, 4):
        got = _partitioned(folder, tmp_path / f"out-{n_buckets}", opts, None, n_buckets)
        pd.testing.assert_series_equal(got, want, obj=f"in-process partitioned ds, {n_buckets} buckets")
    got = _partitioned(folder, tmp_path / "out-dask", opts, dask_map, 3)
    pd.testing.assert_series_equal(got, want, obj="partitioned ds on Dask")
