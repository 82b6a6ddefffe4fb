"""Every skills path but rank-one PGD forms no worker pair (issue #36, docs/scale.md "Memory laws").

The pair builder (:mod:`crowdflow.graphs.pairs`: the compiled dense and row kernels behind ``pair_counts``, and its
sparse-product reference) is replaced by one that raises; then the pre-fit check, the door, ``fit_skills`` (inline
and with an executor) and the partitioned fit run on a family of label sets for every method but pgd. On the same
family the pair-free answers equal the pair path's: the identifiability verdict and components (bipartite
components included), ``n_partners``, ``strength`` and the diagnostics columns that are row statistics of N.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import crowdflow.graphs.pairs as pairs
from crowdflow.checks import check_worker_graph
from crowdflow.executors import inline_executor
from crowdflow.graphs import worker_graph_report, worker_graph_report_pairs
from crowdflow.labels import encode_labels
from crowdflow.skills import SkillsOptions, fit_skills, fit_skills_partitioned
from crowdflow.skills.door import skills as skills_door

PAIR_FREE = ("ds", "onecoin_ds", "mv", "auto")
#: columns of the components table that are row statistics of N (exact without pairs, inline)
ROW_STATS = ("component", "status", "n_workers", "n_ok_workers", "n_edges", "n_tasks", "n_labels", "bipartite")
ROW_STATS += ("d_max", "D_sum", "norm_N_inf", "kappa", "K")


def _draw(seed: int) -> pd.DataFrame:
    """One label set: a random core (tasks of 1–6 workers), bipartite blocks of 2-worker tasks (a chain, an even
    cycle, a complete bipartite block), sometimes an odd cycle of 2-worker tasks, isolated workers; ids as text or
    integers, 2–4 classes, rows shuffled."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[int, int]] = []
    n_core = int(rng.integers(3, 40))
    for t in range(int(rng.integers(1, 120))):
        k = int(min(n_core, rng.choice([1, 2, 2, 3, 4, 6])))
        rows += [(t, int(w)) for w in rng.choice(n_core, k, replace=False)]
    base_t, base_w = 1000, 1000
    for _ in range(int(rng.integers(0, 4))):  # bipartite blocks
        a, b = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        for i in range(a):
            for j in range(b):
                if rng.random() < 0.7 or (i == 0 and j == 0):
                    rows += [(base_t, base_w + i), (base_t, base_w + a + j)]
                    base_t += 1
        if a >= 2 and b >= 1:  # keep it connected: worker a+0 joined to every left worker
            for i in range(a):
                rows += [(base_t, base_w + i), (base_t, base_w + a)]
                base_t += 1
        base_w += a + b
    if rng.random() < 0.5:  # an odd cycle of 2-worker tasks (identifiable)
        n = int(rng.choice([3, 5, 7]))
        for i in range(n):
            rows += [(base_t, base_w + i), (base_t, base_w + (i + 1) % n)]
            base_t += 1
        base_w += n
    for _ in range(int(rng.integers(0, 3))):  # isolated workers
        rows.append((base_t, base_w))
        base_t += 1
        base_w += 1
    df = pd.DataFrame(rows, columns=["task", "worker"]).drop_duplicates()
    m = int(rng.integers(2, 5))
    df["label"] = rng.integers(0, m, len(df))
    if rng.random() < 0.6:
        df = df.assign(task="t" + df["task"].astype(str), worker="w" + df["worker"].astype(str))
        df["label"] = "c" + df["label"].astype(str)
    if df["label"].nunique() < 2:
        df.loc[df.index[0], "label"] = df["label"].iloc[-1] + ("x" if isinstance(df["label"].iloc[-1], str) else 1)
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)


SEEDS = list(range(24))


def _no_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a worker pair was formed on a pair-free path")

    for name in ("_pair_count_dense", "_pair_count_rows", "pair_counts_reference"):
        monkeypatch.setattr(pairs, name, refuse)


def test_the_guard_fires_on_the_pair_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replaced builder is the one the pair paths call: pgd, the pair report and spectral ds all hit it."""
    df = _draw(3)
    _no_pairs(monkeypatch)
    for call in (
        lambda: fit_skills(df, method="pgd"),
        lambda: fit_skills(df, method="ds", spectral=True),
        lambda: worker_graph_report_pairs(encode_labels(df)),
    ):
        with pytest.raises(AssertionError, match="worker pair was formed"):
            call()


@pytest.mark.parametrize("seed", SEEDS)
def test_no_pair_is_formed_by_any_method_but_pgd(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    df = _draw(seed)
    lm = encode_labels(df)
    _no_pairs(monkeypatch)
    checks = check_worker_graph(lm, "warn", "warn")
    method = PAIR_FREE[seed % len(PAIR_FREE)]
    res = fit_skills(df, method=method, graph_report=checks.report, tie_break="smallest")
    assert len(res.skills) == lm.n_workers
    # a Dask-style executor: the non-pgd fit must not send pair counts to it either
    res_x = fit_skills(df, method=method, executor=inline_executor, tie_break="smallest")
    pd.testing.assert_frame_equal(res_x.skills, res.skills)
    fit = skills_door(df, method=method, checks="warn", tie_break="smallest")
    assert len(fit.skills) == lm.n_workers
    if seed % 3 == 0:
        folder = tmp_path / "labels"
        folder.mkdir()
        text = df.astype(str)
        for k, rows in enumerate(np.array_split(np.arange(len(text)), 3)):
            text.iloc[rows].to_parquet(folder / f"part-{k}.parquet", index=False)
        partitioned_method = "ds" if method == "auto" else method
        opts = SkillsOptions(method=partitioned_method, tie_break="smallest")
        part = fit_skills_partitioned(folder, opts, out_folder=tmp_path / "out", n_buckets=4)
        assert len(part.result.skills) == lm.n_workers
        assert part.result.skills["n_partners"].isna().all()
        assert part.result.skills["missing_reason"].str.contains("n_partners: distinct co-labellers").all()


@pytest.mark.parametrize("seed", SEEDS)
def test_the_pair_free_answers_equal_the_pair_paths(seed: int) -> None:
    df = _draw(seed)
    lm = encode_labels(df)
    ref = worker_graph_report_pairs(lm)
    new = worker_graph_report(lm)
    pd.testing.assert_frame_equal(new.workers, ref.workers)
    pd.testing.assert_frame_equal(new.components, ref.components)
    assert check_worker_graph(new, "warn", "warn").results == check_worker_graph(ref, "warn", "warn").results
    # the fit: spectral=True makes ds form N (the pair path); default ds does not
    free = fit_skills(df, method="ds", tie_break="smallest")
    with_pairs = fit_skills(df, method="ds", tie_break="smallest", spectral=True)
    cols = ["worker", "skill", "accuracy", "n_labels", "n_partners", "component", "status", "identifiable", "strength"]
    pd.testing.assert_frame_equal(free.skills[cols], with_pairs.skills[cols])
    pd.testing.assert_frame_equal(free.diagnostics[list(ROW_STATS)], with_pairs.diagnostics[list(ROW_STATS)])
    pd.testing.assert_frame_equal(free.consensus, with_pairs.consensus)
    ok = free.diagnostics["status"] == "ok"
    per_pair = free.diagnostics.loc[ok, ["N_min", "N_median", "N_max", "odd_cycle_witness_len"]]
    assert per_pair.isna().all().all()
    reasons = free.diagnostics.loc[ok, "missing_reason"]
    assert reasons.str.contains("N_min,N_median,N_max,odd_cycle_witness_len: a statistic of individual").all()


def test_the_family_has_bipartite_components_isolated_workers_and_odd_cycles() -> None:
    seen: set[str] = set()
    two_worker_odd = 0
    for seed in SEEDS:
        rep = worker_graph_report(encode_labels(_draw(seed)))
        seen |= set(rep.components["status"])
        two_worker_odd += int(rep.components["status"].eq("ok").sum() > 1)
    assert seen == {"ok", "bipartite_component", "isolated"}
    assert two_worker_odd > 0  # an identifiable component besides the core: an odd cycle of 2-worker tasks


def _many_workers(n_labels: int, n_workers: int, seed: int = 36) -> tuple[pd.DataFrame, np.ndarray]:
    """n_labels labels over n_workers workers (5 distinct per task, 3 classes, one-coin accuracy U[0.5, 0.95]):
    most workers label ~25 tasks, so nearly every pair of workers that meets meets once."""
    rng = np.random.default_rng(seed)
    k, n_tasks = 5, n_labels // 5
    workers = np.sort(rng.integers(0, n_workers, (n_tasks, k)), axis=1) + np.arange(k)
    workers %= n_workers
    truth = rng.integers(0, 3, n_tasks)
    acc = rng.uniform(0.5, 0.95, n_workers)
    w = workers.ravel()
    t = np.repeat(np.arange(n_tasks), k)
    right = rng.random(w.size) < acc[w]
    label = np.where(right, truth[t], (truth[t] + rng.integers(1, 3, w.size)) % 3)
    return pd.DataFrame({"task": t, "worker": w, "label": label}), truth


@pytest.mark.filterwarnings("ignore:ds EM stopped:RuntimeWarning")
@pytest.mark.parametrize("method", ["mv", pytest.param("ds", marks=pytest.mark.slow)])
def test_a_million_labels_over_200k_workers_inline_without_pairs(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """10^6 labels, 2·10^5 workers (~4·10^6 stored pairs if N were formed): completes inline with no pair formed,
    and the consensus recovers the generating labels (ds: 100 EM iterations, not converged at this sparsity,
    ~30-40 s on the shared host, hence slow)."""
    df, truth = _many_workers(1_000_000, 200_000)
    _no_pairs(monkeypatch)
    res = fit_skills(df, method=method, tie_break="smallest")
    assert len(res.skills) == df["worker"].nunique() > 198_000 and len(res.consensus) == 200_000
    cons = res.consensus
    got = pd.Series(cons["label"].astype(int).to_numpy(), index=cons["task"].astype(int).to_numpy())
    accuracy = float(np.mean(got.reindex(np.arange(truth.size)).to_numpy() == truth))
    assert accuracy > 0.88  # five labels of accuracy U[0.5, 0.95] per task: majority vote ~0.90
    assert ((res.skills["n_partners"] >= 4) & (res.skills["n_partners"] <= res.skills["strength"])).all()
    assert (res.skills["strength"] == 4 * res.skills["n_labels"]).all()  # every task has 5 workers: k − 1 = 4
