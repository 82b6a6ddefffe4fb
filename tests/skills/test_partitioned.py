"""The partitioned skills path (task buckets, passes over files) gives the in-memory fit, on a family of inputs.

Each case is drawn by :func:`_draw`: worker counts, task counts, classes, labels per task (including one-label
tasks and two-label ties), skewed worker activity, files that split tasks, duplicates across files, null rows,
integer ids, declared classes never used, more buckets than tasks. The in-memory reference is
:func:`crowdflow.skills.fit_skills` on the concatenated files.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.errors import InputError
from crowdflow.metrics import gold_metrics, review_skills
from crowdflow.skills import SkillsOptions, fit_skills, fit_skills_partitioned

METHODS = ("ds", "onecoin_ds", "mv", "pgd")


def _draw(seed: int) -> dict:  # type: ignore[type-arg]
    """One case of the family: labels, how they are cut into files, and the options that vary."""
    rng = np.random.default_rng(seed)
    n_workers = int(rng.choice([3, 8, 30, 90]))
    n_tasks = int(rng.choice([20, 150, 900]))
    m = int(rng.choice([2, 2, 3, 5]))
    activity = rng.pareto(1.2, n_workers) + 0.05  # a few heavy workers, many light ones
    p_worker = activity / activity.sum()
    skill = rng.uniform(-0.1, 0.9, n_workers)
    truth = rng.integers(0, m, n_tasks)
    rows = []
    for t in range(n_tasks):
        k = int(min(n_workers, rng.choice([1, 2, 3, 5, 7])))
        for w in rng.choice(n_workers, k, replace=False, p=p_worker):
            right = rng.random() < (1 + (m - 1) * skill[w]) / m
            rows.append((t, w, int(truth[t]) if right else int(rng.integers(0, m))))
    df = pd.DataFrame(rows, columns=["task", "worker", "label"])
    ids_as_int = bool(rng.random() < 0.3)
    if not ids_as_int:
        df["task"] = "t" + df["task"].astype(str)
        df["worker"] = "w" + df["worker"].astype(str)
        df["label"] = np.array(["cat", "dog", "eel", "fox", "gnu"])[df["label"]]
    df = df.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    duplicates = str(rng.choice(["error", "keep_first", "keep_last"]))
    if duplicates != "error":  # repeat some (task, worker) pairs with another answer, in other files
        extra = df.sample(n=max(1, len(df) // 20), random_state=seed + 1).copy()
        extra["label"] = extra["label"].sample(frac=1.0, random_state=seed + 2).to_numpy()
        df = pd.concat([df, extra], ignore_index=True)
    n_files = int(rng.choice([1, 3, 7]))
    return {
        "labels": df,
        "n_files": n_files,
        "n_buckets": int(rng.choice([1, 2, 5, 64])),
        "duplicates": duplicates,
        "ids_as_int": ids_as_int,
        "seed": seed,
    }


def _write(case: dict, folder: Path) -> pd.DataFrame:  # type: ignore[type-arg]
    """Cut the labels into files (contiguous row ranges, so a task's labels span files) and return the frame read."""
    folder.mkdir(parents=True, exist_ok=True)
    df = case["labels"]
    for k, rows in enumerate(np.array_split(np.arange(len(df)), case["n_files"])):
        df.iloc[rows].to_parquet(folder / f"part-{k:03d}.parquet", index=False)
    return df.astype(str)


#: what a partitioned fit without pairs (every method but pgd) cannot sum over its buckets: distinct co-labellers
_PARTNERS = {"skills": ["n_partners", "missing_reason"], "diagnostics": ["n_edges", "d_max", "D_sum", "missing_reason"]}


def _same_fit(part, ref, exact: bool) -> None:  # type: ignore[no-untyped-def]
    tol = {"rtol": 0.0, "atol": 0.0} if exact else {"rtol": 1e-9, "atol": 1e-12}
    got_s, want_s = part.result.skills, ref.skills
    got_d, want_d = part.result.diagnostics, ref.diagnostics
    if part.result.metadata["method"] != "pgd":  # no pair formed: those columns are missing, with their reason
        assert got_s["n_partners"].isna().all() and got_d["n_edges"].isna().all()
        assert got_s["missing_reason"].str.contains("n_partners: distinct co-labellers are not a sum").all()
        got_s, want_s = got_s.drop(columns=_PARTNERS["skills"]), want_s.drop(columns=_PARTNERS["skills"])
        got_d, want_d = got_d.drop(columns=_PARTNERS["diagnostics"]), want_d.drop(columns=_PARTNERS["diagnostics"])
    pd.testing.assert_frame_equal(got_s, want_s, check_exact=exact, **tol)
    pd.testing.assert_frame_equal(got_d, want_d, check_exact=exact, **tol)
    cons = pd.concat([pd.read_parquet(p) for p in part.consensus_parts], ignore_index=True)
    cons = cons.sort_values("task").reset_index(drop=True)
    want = ref.consensus.sort_values("task").reset_index(drop=True)
    assert cons["task"].tolist() == want["task"].astype(str).tolist()
    assert cons["label"].tolist() == want["label"].astype(str).tolist()
    np.testing.assert_allclose(cons["confidence"], want["confidence"], **tol)
    np.testing.assert_array_equal(cons["n_labels"], want["n_labels"])
    np.testing.assert_array_equal(cons["fallback"], want["fallback"])
    for key in ("n_tasks", "n_labels", "n_workers", "n_duplicates_dropped", "iterations", "converged", "n_ties"):
        assert part.result.metadata[key] == ref.metadata[key], key
    for key in ("frac_workers_identified", "frac_labels_identified", "frac_tasks_identified"):
        assert part.result.metadata[key] == pytest.approx(ref.metadata[key], abs=1e-12), key


@pytest.mark.parametrize(
    "seed", [*range(2, 10), *(pytest.param(s, marks=pytest.mark.slow) for s in (0, 1, *range(10, 40)))]
)
def test_partitioned_equals_in_memory_over_the_family(seed: int, tmp_path: Path) -> None:
    case = _draw(seed)
    frame = _write(case, tmp_path / "labels")
    method = METHODS[seed % len(METHODS)]
    opts = SkillsOptions(method=method, tie_break="smallest", duplicates=case["duplicates"])
    ref = fit_skills(frame, opts)
    part = fit_skills_partitioned(tmp_path / "labels", opts, out_folder=tmp_path / "out", n_buckets=case["n_buckets"])
    _same_fit(part, ref, exact=method in ("mv", "pgd"))


@pytest.mark.parametrize("method", METHODS)
def test_every_method_on_a_three_class_set_with_ties(method: str, tmp_path: Path) -> None:
    """Each method once on the same cut, with two-label ties and declared classes one of which is never used."""
    case = _draw(101) | {"n_files": 4, "n_buckets": 3}
    frame = _write(case, tmp_path / "labels")
    classes = [*sorted(set(frame["label"])), "zzz-unused"]
    opts = SkillsOptions(method=method, tie_break="smallest", duplicates=case["duplicates"], classes=classes)
    ref = fit_skills(frame, opts)
    part = fit_skills_partitioned(tmp_path / "labels", opts, out_folder=tmp_path / "out", n_buckets=3)
    assert part.result.metadata["classes"] == ref.metadata["classes"]
    _same_fit(part, ref, exact=method in ("mv", "pgd"))


def test_passes_are_iterations_plus_two_and_gold_is_counted(tmp_path: Path) -> None:
    """DS: one initialising pass, one per EM iteration, one final E-step with the consensus; gold counted there."""
    case = _draw(7) | {"duplicates": "error"}
    case["labels"] = case["labels"].drop_duplicates(["task", "worker"])
    frame = _write(case, tmp_path / "labels")
    ref = fit_skills(frame, method="ds", tie_break="smallest")
    gold = ref.consensus[["task", "label"]].astype(str).iloc[::3].reset_index(drop=True)
    gold.loc[::2, "label"] = "not-a-class"  # half of them wrong on purpose
    gold = pd.concat([gold, pd.DataFrame({"task": ["never-labelled"], "label": ["x"]})], ignore_index=True)
    part = fit_skills_partitioned(
        tmp_path / "labels", out_folder=tmp_path / "out", method="ds", tie_break="smallest", truth=gold
    )
    assert part.passes == ref.metadata["iterations"] + 2
    want = review_skills(frame, ref.consensus, gold)
    assert part.gold == gold_metrics(ref.consensus, gold, ref.metadata["classes"]).as_dict()
    assert part.gold["n_gold"] == len(gold) - 1 and part.gold["n_gold_unlabelled"] == 1
    assert part.review.metrics == want.metrics
    assert part.review.record == want.record
    for name in ("gold_workers", "gold_confusion"):
        pd.testing.assert_frame_equal(part.review.tables[name], want.tables[name])


def test_dask_workers_give_the_same_fit(tmp_path: Path) -> None:
    """The passes pickled to Dask worker processes (not threads) return the in-process result."""
    distributed = pytest.importorskip("distributed")
    case = _draw(3) | {"n_files": 3}
    frame = _write(case, tmp_path / "labels")
    ref = fit_skills(frame, method="ds", tie_break="smallest", duplicates=case["duplicates"])
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as client,
    ):

        def run(fn, items):  # type: ignore[no-untyped-def]
            return client.gather(client.map(fn, items, pure=False))

        part = fit_skills_partitioned(
            tmp_path / "labels",
            out_folder=tmp_path / "out",
            executor=run,
            method="ds",
            tie_break="smallest",
            duplicates=case["duplicates"],
        )
    _same_fit(part, ref, exact=False)


def test_duplicates_across_files_name_both_files(tmp_path: Path) -> None:
    folder = tmp_path / "labels"
    folder.mkdir()
    pd.DataFrame({"task": ["a", "b"], "worker": ["x", "y"], "label": ["1", "0"]}).to_parquet(folder / "one.parquet")
    pd.DataFrame({"task": ["c", "a"], "worker": ["y", "x"], "label": ["1", "1"]}).to_parquet(folder / "two.parquet")
    with pytest.raises(InputError, match=r"2 rows repeat a \(task, worker\) pair") as err:
        fit_skills_partitioned(folder, out_folder=tmp_path / "out")
    assert "one.parquet row 1" in str(err.value) and "two.parquet row 2" in str(err.value)
    part = fit_skills_partitioned(folder, out_folder=tmp_path / "out", duplicates="keep_last", method="mv")
    assert part.result.metadata["n_duplicates_dropped"] == 1


def test_bad_files_are_named(tmp_path: Path) -> None:
    folder = tmp_path / "labels"
    folder.mkdir()
    pd.DataFrame({"task": ["a"], "worker": ["x"], "label": ["1"]}).to_parquet(folder / "good.parquet")
    pd.DataFrame({"task": ["b"], "annotator": ["x"], "answer": ["1"]}).to_parquet(folder / "bad.parquet")
    with pytest.raises(InputError, match=r"bad\.parquet.*missing required column"):
        fit_skills_partitioned(folder, out_folder=tmp_path / "out")
    (folder / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match=r"bad\.parquet.*cannot read Parquet"):
        fit_skills_partitioned(folder, out_folder=tmp_path / "out")
    (folder / "bad.parquet").unlink()
    with pytest.raises(InputError, match="outside the declared label set"):
        fit_skills_partitioned(folder, out_folder=tmp_path / "out", classes=["0", "2"])
    with pytest.raises(InputError, match="no Parquet file"):
        fit_skills_partitioned(tmp_path / "out", out_folder=tmp_path / "out2")


def test_skills_recover_the_truth_from_partitions(tmp_path: Path) -> None:
    """Not only equal to in-memory: the partitioned DS skills track the skills that generated the labels."""
    rng = np.random.default_rng(11)
    n_workers, n_tasks = 25, 3000
    skill = rng.uniform(0.1, 0.9, n_workers)
    truth = rng.integers(0, 2, n_tasks)
    task = np.repeat(np.arange(n_tasks), 5)
    worker = np.concatenate([rng.choice(n_workers, 5, replace=False) for _ in range(n_tasks)])
    right = rng.random(task.size) < (1 + skill[worker]) / 2
    label = np.where(right, truth[task], 1 - truth[task])
    df = pd.DataFrame({"task": task.astype(str), "worker": worker.astype(str), "label": label.astype(str)})
    folder = tmp_path / "labels"
    folder.mkdir()
    for k, rows in enumerate(np.array_split(rng.permutation(len(df)), 5)):
        df.iloc[rows].to_parquet(folder / f"{k}.parquet", index=False)
    part = fit_skills_partitioned(folder, out_folder=tmp_path / "out", n_buckets=4)
    got = part.result.skills.set_index("worker")["skill"].reindex([str(w) for w in range(n_workers)]).to_numpy()
    assert np.sqrt(np.mean((got - skill) ** 2)) < 0.05
    cons = pd.concat([pd.read_parquet(p) for p in part.consensus_parts])
    acc = cons.set_index("task")["label"].reindex([str(t) for t in range(n_tasks)]).to_numpy() == truth.astype(str)
    assert acc.mean() > 0.9


def test_in_process_executor_is_the_default(tmp_path: Path) -> None:
    """``executor=None`` and an explicit list-map executor are the same computation."""
    case = _draw(5)
    _write(case, tmp_path / "labels")
    calls: list[int] = []

    def counting(fn, items):  # type: ignore[no-untyped-def]
        calls.append(len(items))
        return [fn(x) for x in items]

    run = functools.partial(
        fit_skills_partitioned, tmp_path / "labels", method="mv", duplicates=case["duplicates"], n_buckets=3
    )
    a = run(out_folder=tmp_path / "a")
    b = run(out_folder=tmp_path / "b", executor=counting)
    pd.testing.assert_frame_equal(a.result.skills, b.result.skills)
    assert calls[0] == case["n_files"] and all(c <= 3 for c in calls[1:])


@pytest.mark.parametrize("method", ["ds", "pgd"])
def test_skipped_spectral_diagnostics_are_explained(method: str, tmp_path: Path) -> None:
    """A component over ``spectral_max_nnz`` gets NaN eigenvalues with a reason (a 10^7-label run with 20,000 workers
    stopped as "unexpected error" on these NaN), in memory and partitioned."""
    from crowdflow.contracts.missing import check_explained

    case = _draw(2) | {"duplicates": "keep_last"}
    frame = _write(case, tmp_path / "labels")
    ref = fit_skills(frame, method=method, duplicates="keep_last", spectral_max_nnz=2, spectral=True)
    assert (ref.diagnostics["eig_method"] == "skipped").any()
    assert ref.diagnostics["norm_N_2"].isna().any()
    check_explained({"components": ref.diagnostics, "skills": ref.skills})
    part = fit_skills_partitioned(
        tmp_path / "labels",
        out_folder=tmp_path / "out",
        method=method,
        duplicates="keep_last",
        spectral_max_nnz=2,
        spectral=True,
    )
    check_explained({"components": part.result.diagnostics})


@pytest.mark.parametrize("kind", ["ds", "mv"])
def test_a_consensus_pass_in_turn_from_each_holder_equals_one_in_bucket_order(kind: str, tmp_path: Path) -> None:
    """The consensus pass submits the buckets in turn from each place that holds them and folds them as they complete
    (``crowdflow.executors.interleaved``): with an executor that says it holds the buckets in two places (the first
    half and the rest, the layout that left a Dask worker idle), the parts, their order, the agreements, the counts,
    the gold reviews and the log-likelihood are those of the one-place pass, bit for bit (same held buckets, same
    parameters)."""
    from crowdflow.executors import InlineMemory
    from crowdflow.skills.buckets import ds_consensus, mv_consensus
    from crowdflow.skills.held_em import consensus_pass
    from crowdflow.skills.partitioned import encode_buckets, read_and_keep_all
    from crowdflow.storage.datasets import list_partitions

    class Placed(InlineMemory):
        two = False

        def groups(self, handles: list[object]) -> list[list[int]]:
            half = (len(handles) + 1) // 2
            return [list(range(half)), list(range(half, len(handles)))] if self.two else [list(range(len(handles)))]

    case = _draw(11) | {"duplicates": "error"}
    case["labels"] = case["labels"].drop_duplicates(["task", "worker"])
    frame = _write(case, tmp_path / "labels")
    gold = frame[["task", "label"]].drop_duplicates("task").iloc[::4].astype(str).reset_index(drop=True)
    run = Placed()
    parts = list_partitions(tmp_path / "labels")
    union, _, pieces = read_and_keep_all(run, parts, str(tmp_path / "b"), 7, None)
    workers, classes = union.finish(None)
    enc = encode_buckets(sorted(pieces), run, workers, classes, "error", [p.name for p in parts], pieces=pieces)
    w, m = len(workers), classes.size
    rng = np.random.default_rng(5)
    common = {
        "n_workers": w,
        "classes": classes,
        "component": np.zeros(w, np.int64),
        "truth": gold,
        "ok": np.ones(w, bool),
    }
    common |= {"tie_break": "random", "seed": 3}
    if kind == "ds":
        extra = {"log_pi_t": np.log(rng.uniform(0.1, 1.0, (m, w * m))), "log_q": np.log(np.full(m, 1.0 / m))}
        fn = ds_consensus
    else:
        extra, fn = {}, mv_consensus
    got = {}
    for two in (False, True):
        run.two = two
        got[two] = consensus_pass(enc.held, run, fn, {"out_folder": str(tmp_path / f"out-{two}"), **common, **extra}, 1)
    one, turns = got[False], got[True]
    assert (
        [Path(p).name for p in turns["paths"]]
        == [Path(p).name for p in one["paths"]]
        == sorted(Path(p).name for p in one["paths"])
    )
    assert len(one["paths"]) == len(enc.held) > 2
    for a, b in zip(one["paths"], turns["paths"], strict=True):
        pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b))
    np.testing.assert_array_equal(one["agreements"], turns["agreements"])
    for key in ("n_ties", "n_fallback", "tasks_with_ok", "log_likelihood"):
        assert one[key] == turns[key]
    for x, y in zip(one["per_component"], turns["per_component"], strict=True):
        np.testing.assert_array_equal(x, y)
    for ra, rb in zip(one["reviews"], turns["reviews"], strict=True):
        assert (ra.n_tasks, ra.n_gold, ra.n_correct, ra.n_changed) == (
            rb.n_tasks,
            rb.n_gold,
            rb.n_correct,
            rb.n_changed,
        )
        pd.testing.assert_frame_equal(ra.changed, rb.changed)
        if ra.gold_workers is not None or rb.gold_workers is not None:
            pd.testing.assert_frame_equal(ra.gold_workers, rb.gold_workers)


@pytest.mark.parametrize("min_pending", [1, 7, 1 << 18])
@pytest.mark.parametrize("seed", range(4))
def test_the_id_union_equals_the_sorted_distinct_ids_of_all_files(
    seed: int, min_pending: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files' worker ids (Arrow text or numbers, overlapping, repeated, some files without ids) folded into an
    ``IdUnion`` that merges its pending ids at drawn thresholds: the run's dictionary is the natural sort of every
    distinct id's text, and the rows, drops and digests are summed and kept."""
    import pyarrow as pa

    from crowdflow.labels import natural_sort
    from crowdflow.skills import partitioned
    from crowdflow.skills.buckets import SplitSummary

    monkeypatch.setattr(partitioned, "UNION_MIN_PENDING", min_pending)
    rng = np.random.default_rng(seed)
    numeric = rng.random() < 0.3
    union, seen = partitioned.IdUnion(), set()
    for f in range(int(rng.integers(1, 12))):
        ids = rng.integers(0, 300, int(rng.choice([0, 5, 120])))
        values = np.unique(ids).astype(object) if numeric else pa.array([f"w{i}" for i in np.unique(ids)], pa.string())
        seen |= {str(v) for v in (values if numeric else values.to_pylist())}
        union.add(SplitSummary(f, 10 * f, f, values, pa.array(["a", "b"]), sha256=f"d{f}"))
    workers, classes = union.finish(None)
    assert workers.tolist() == natural_sort(np.array(sorted(seen), dtype=object)).tolist()
    assert classes.tolist() == ["a", "b"]
    assert union.n_rows == sum(10 * f for f in range(len(union.digests))) and len(union.pending) == 0
