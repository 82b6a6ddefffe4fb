"""The one-read path (issue #36): each file split once into bucket pieces kept in memory gives the disk split's fit.

Family (:func:`_case`): 1, 2 or 3 classes (one seen class with the label set declared), string or integer ids, tasks
whose labels are cut across 2–5 files (contiguous row ranges of a shuffled table), 1–9 buckets, repeated (task,
worker) pairs in other files under ``keep_first`` / ``keep_last``. Each case is fitted with the disk split and the
re-read of its pieces (the default executor, which holds nothing) and with the pieces kept in this process's memory
(:class:`crowdflow.executors.InlineMemory`): the same pieces in the same order through the same encode, so the same
bits. On two Dask worker processes the pieces move between the workers in memory and each EM pass sums per worker,
then across the workers: the same labels and counts, probabilities to summation order (1e-9 at the EM's fixed point).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.errors import InputError
from crowdflow.executors import InlineMemory
from crowdflow.skills import SkillsOptions, fit_skills_partitioned

TOL = 1e-9


def _case(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    m = int(rng.choice([1, 2, 3]))
    n_workers, n_tasks = int(rng.choice([4, 25, 80])), int(rng.choice([40, 300]))
    skill = rng.uniform(0.0, 0.9, n_workers)
    truth = rng.integers(0, m, n_tasks)
    rows = []
    for t in range(n_tasks):
        for w in rng.choice(n_workers, int(min(n_workers, rng.choice([1, 2, 3, 5]))), replace=False):
            right = rng.random() < (1 + (m - 1) * skill[w]) / m
            rows.append((t, int(w), int(truth[t]) if right else int(rng.integers(0, m))))
    df = pd.DataFrame(rows, columns=["task", "worker", "label"])
    if rng.random() < 0.7:  # string ids (else integers, read as text)
        df = df.assign(task="t" + df["task"].astype(str), worker="w" + df["worker"].astype(str))
    df["label"] = "c" + df["label"].astype(str)
    df = df.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    duplicates = str(rng.choice(["keep_first", "keep_last"]))
    extra = df.sample(n=max(1, len(df) // 15), random_state=seed + 1).assign(label=f"c{m - 1}")
    df = pd.concat([df, extra], ignore_index=True)  # repeats land in the last file(s): other files than the first
    return {
        "labels": df,
        "n_files": int(rng.integers(2, 6)),
        "n_buckets": int(rng.choice([1, 3, 9])),
        "duplicates": duplicates,
        "classes": ["c0", "c1"] if m == 1 else None,
    }


def _write(case: dict[str, Any], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    df = case["labels"]
    for k, rows in enumerate(np.array_split(np.arange(len(df)), case["n_files"])):
        df.iloc[rows].to_parquet(folder / f"part-{k:03d}.parquet", index=False)


def _fit(case: dict[str, Any], folder: Path, out: Path, method: str, executor: Any) -> Any:
    opts = SkillsOptions(
        method=method, tie_break="smallest", ds_tol=1e-12, duplicates=case["duplicates"], classes=case["classes"]
    )
    return fit_skills_partitioned(folder, opts, out_folder=out, executor=executor, n_buckets=case["n_buckets"])


def _consensus(part: Any) -> pd.DataFrame:
    cons = pd.concat([pd.read_parquet(p) for p in part.consensus_parts], ignore_index=True)
    return cons.sort_values("task").reset_index(drop=True)


def _check(a: Any, b: Any, exact: bool) -> None:
    pd.testing.assert_frame_equal(a.result.skills, b.result.skills, check_exact=exact, rtol=TOL, atol=TOL)
    ca, cb = _consensus(a), _consensus(b)
    assert ca["task"].tolist() == cb["task"].tolist() and ca["label"].tolist() == cb["label"].tolist()
    pd.testing.assert_frame_equal(ca, cb, check_exact=exact, rtol=TOL, atol=TOL)
    for key in ("n_tasks", "n_labels", "n_duplicates_dropped", "n_ties"):
        assert a.result.metadata[key] == b.result.metadata[key], key
    assert a.review.metrics == b.review.metrics
    if exact:
        np.testing.assert_array_equal(a.result.loss_trace, b.result.loss_trace)
        assert a.passes == b.passes


@pytest.mark.parametrize("seed", range(8))
def test_pieces_kept_in_memory_give_the_disk_split_bits(seed: int, tmp_path: Path) -> None:
    case = _case(seed)
    _write(case, tmp_path / "labels")
    for method in ("ds", "mv"):
        disk = _fit(case, tmp_path / "labels", tmp_path / f"d-{method}", method, None)
        kept = _fit(case, tmp_path / "labels", tmp_path / f"k-{method}", method, InlineMemory())
        assert disk.result.metadata["n_duplicates_dropped"] > 0
        # ds to summation order: a held pass adds every bucket to one counts array, the disk path each bucket's own
        _check(disk, kept, exact=method == "mv")


def test_a_task_cut_across_files_keeps_all_its_labels(tmp_path: Path) -> None:
    folder = tmp_path / "labels"
    folder.mkdir()
    for k in range(3):  # task "a" has one label in each file; "b" two in the first
        rows = {"task": ["a", "b", "b"][: 3 if k == 0 else 1], "worker": [f"w{k}", "w1", "w2"][: 3 if k == 0 else 1]}
        pd.DataFrame({**rows, "label": ["x"] * len(rows["task"])}).to_parquet(folder / f"f{k}.parquet")
    pd.DataFrame({"task": ["c"], "worker": ["w0"], "label": ["y"]}).to_parquet(folder / "f3.parquet")
    kept = fit_skills_partitioned(folder, out_folder=tmp_path / "o", executor=InlineMemory(), method="mv", n_buckets=2)
    cons = _consensus(kept).set_index("task")
    assert cons.loc["a", "n_labels"] == 3 and cons.loc["b", "n_labels"] == 2 and cons.loc["c", "n_labels"] == 1


def test_duplicates_on_the_kept_path_name_both_files_and_rows(tmp_path: Path) -> None:
    folder = tmp_path / "labels"
    folder.mkdir()
    pd.DataFrame({"task": ["a", "b"], "worker": ["x", "y"], "label": ["1", "0"]}).to_parquet(folder / "one.parquet")
    pd.DataFrame({"task": ["c", "a"], "worker": ["y", "x"], "label": ["1", "1"]}).to_parquet(folder / "two.parquet")
    with pytest.raises(InputError, match=r"2 rows repeat a \(task, worker\) pair") as err:
        fit_skills_partitioned(folder, out_folder=tmp_path / "out", executor=InlineMemory())
    assert "one.parquet row 1" in str(err.value) and "two.parquet row 2" in str(err.value)
    assert err.value.column == "task,worker"


@pytest.mark.parametrize(
    "seed", [0, 3, pytest.param(5, marks=pytest.mark.slow), pytest.param(6, marks=pytest.mark.slow)]
)
def test_pieces_moved_between_dask_workers_give_the_same_fit(
    seed: int, tmp_path: Path, dask_map: Any, held_after_release: Any
) -> None:
    case = _case(seed)
    _write(case, tmp_path / "labels")
    disk = _fit(case, tmp_path / "labels", tmp_path / "d", "ds", None)
    on_dask = _fit(case, tmp_path / "labels", tmp_path / "k", "ds", dask_map)
    _check(disk, on_dask, exact=False)
    info = held_after_release()
    assert all(n == 0 for n in info.values()), info  # the files, the pieces and the codes were all released


def test_duplicates_on_dask_workers_are_named_and_nothing_stays_held(
    tmp_path: Path, dask_map: Any, held_after_release: Any
) -> None:
    folder = tmp_path / "labels"
    folder.mkdir()
    for k in range(3):
        rows = pd.DataFrame({"task": [f"t{k}", "t9"], "worker": ["x", "x" if k == 2 else f"y{k}"], "label": ["1", "0"]})
        rows.to_parquet(folder / f"f{k}.parquet")
    pd.DataFrame({"task": ["t9"], "worker": ["y0"], "label": ["1"]}).to_parquet(folder / "f3.parquet")
    with pytest.raises(InputError, match=r"2 rows repeat a \(task, worker\) pair") as err:
        fit_skills_partitioned(folder, out_folder=tmp_path / "out", executor=dask_map, n_buckets=3)
    assert "f0.parquet row 2" in str(err.value) and "f3.parquet row 1" in str(err.value)
    info = held_after_release()
    assert all(n == 0 for n in info.values()), info
