"""The pair-free worker-graph check (parity union-find, ``worker_graph_report``) equals the pair-graph check
(``worker_graph_report_pairs``) on a family of label sets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.errors import DegenerateInput
from crowdflow.graphs import ParityForest, co_label_counts, pair_bound, worker_graph_report_pairs
from crowdflow.graphs import worker_graph_report as worker_graph_parity
from crowdflow.labels import encode_labels
from crowdflow.skills.fit import fit_skills
from crowdflow.skills.moments import PGD_BYTES_PER_PAIR
from crowdflow.skills.options import SkillsOptions


def _frame(pairs: list[tuple[int, int]], rng: np.random.Generator) -> pd.DataFrame:
    """(task, worker) pairs -> a labels frame with shuffled rows, string ids and random labels."""
    df = pd.DataFrame(pairs, columns=["task", "worker"]).drop_duplicates()
    df = df.sample(frac=1.0, random_state=int(rng.integers(1 << 30))).reset_index(drop=True)
    return pd.DataFrame(
        {
            "task": "t" + df["task"].astype(str),
            "worker": "w" + df["worker"].astype(str),
            "label": rng.integers(0, 3, len(df)).astype(str),
        }
    )


def _random(rng: np.random.Generator) -> list[tuple[int, int]]:
    n_w = int(rng.integers(2, 60))
    n_t = int(rng.integers(1, 80))
    k_max = int(rng.integers(1, 6))
    return [(t, int(w)) for t in range(n_t) for w in rng.integers(0, n_w, int(rng.integers(1, k_max + 1)))]


def _bipartite(rng: np.random.Generator) -> list[tuple[int, int]]:
    """Two-worker tasks between sides A and B only (bipartite), sometimes one A-A task (odd cycle or not)."""
    a, b = int(rng.integers(1, 12)), int(rng.integers(1, 12))
    pairs = []
    for t in range(int(rng.integers(1, 40))):
        pairs += [(t, int(rng.integers(0, a))), (t, a + int(rng.integers(0, b)))]
    if rng.random() < 0.5 and a >= 2:
        pairs += [(10_000, 0), (10_000, 1)]
    return pairs


def _cycle(rng: np.random.Generator) -> list[tuple[int, int]]:
    """A cycle (odd or even length) of 2-worker tasks, a chain, isolated workers and a triangle task elsewhere."""
    n = int(rng.integers(3, 12))
    pairs = [(i, i) for i in range(n)] + [(i, (i + 1) % n) for i in range(n)]
    m = int(rng.integers(2, 10))
    pairs += [(100 + i, 50 + i) for i in range(m - 1)] + [(100 + i, 51 + i) for i in range(m - 1)]  # chain
    pairs += [(300 + i, 200 + i) for i in range(int(rng.integers(0, 4)))]  # isolated workers
    if rng.random() < 0.5:
        pairs += [(400, 90), (400, 91), (400, 92)]
    return pairs


def _family(n: int) -> list[pd.DataFrame]:
    rng = np.random.default_rng(36)
    makers = [_random, _bipartite, _cycle]
    return [_frame(makers[i % 3](rng), rng) for i in range(n)]


@pytest.mark.parametrize("df", _family(90))
def test_parity_report_equals_pair_graph_report(df: pd.DataFrame) -> None:
    lm = encode_labels(df)
    ref = worker_graph_report_pairs(lm)
    new = worker_graph_parity(lm)
    pd.testing.assert_frame_equal(new.workers, ref.workers)
    pd.testing.assert_frame_equal(new.components, ref.components)
    assert new.co_labels is None
    np.testing.assert_array_equal(new.graph.colour, ref.graph.colour)


def test_family_covers_every_status() -> None:
    seen = set()
    for df in _family(90):
        seen |= set(worker_graph_parity(encode_labels(df)).workers["status"])
    assert seen == {"ok", "bipartite_component", "isolated"}


@pytest.mark.parametrize("df", _family(45))
def test_forests_of_task_buckets_merge_to_the_whole(df: pd.DataFrame) -> None:
    """Tasks split over buckets (a worker in many): the merged forests give the whole's components."""
    lm = encode_labels(df)
    whole = worker_graph_report_pairs(lm).graph
    rng = np.random.default_rng(len(df))
    bucket = rng.integers(0, 4, lm.n_tasks)
    merged: ParityForest | None = None
    for b in range(4):
        keep = bucket[lm.task_idx] == b
        t = lm.task_idx[keep]
        w = lm.worker_idx[keep]
        order = np.lexsort((w, t))
        t, w = t[order], w[order]
        indptr = np.zeros(lm.n_tasks + 1, dtype=np.int64)
        np.cumsum(np.bincount(t, minlength=lm.n_tasks), out=indptr[1:])
        f = ParityForest.from_labels(indptr, w, lm.n_workers)
        if merged is None:
            merged = f
        else:
            merged.merge(f)
    assert merged is not None
    g = merged.components()
    np.testing.assert_array_equal(g.labels, whole.labels)
    np.testing.assert_array_equal(g.bipartite, whole.bipartite)
    np.testing.assert_array_equal(g.colour, whole.colour)


def test_a_three_worker_task_makes_its_component_identifiable() -> None:
    df = pd.DataFrame({"task": ["a", "a", "a", "b", "b"], "worker": ["x", "y", "z", "u", "v"], "label": "1"})
    rep = worker_graph_parity(encode_labels(df))
    assert dict(zip(rep.workers["worker"], rep.workers["status"], strict=True)) == {
        "u": "bipartite_component",
        "v": "bipartite_component",
        "x": "ok",
        "y": "ok",
        "z": "ok",
    }


@pytest.mark.parametrize("df", _family(30))
def test_pair_bound_bounds_the_stored_pairs(df: pd.DataFrame) -> None:
    lm = encode_labels(df)
    k = np.bincount(lm.task_idx, minlength=lm.n_tasks)
    nnz = co_label_counts(lm).nnz
    bound = pair_bound(k, lm.n_workers)
    assert nnz <= bound
    if k.max() <= 2:  # 2-worker tasks: the bound counts each task's pair once per direction
        assert bound >= nnz and bound == min(int(2 * (k == 2).sum()), lm.n_workers * (lm.n_workers - 1))


def test_pgd_over_the_pair_budget_is_refused_with_the_figure() -> None:
    rng = np.random.default_rng(5)
    df = pd.DataFrame(
        {"task": np.repeat(np.arange(200), 5).astype(str), "worker": rng.integers(0, 40, 1000).astype(str)}
    ).drop_duplicates()
    df["label"] = rng.integers(0, 2, len(df)).astype(str)
    lm = encode_labels(df)
    k = np.bincount(lm.task_idx)
    need = pair_bound(k, lm.n_workers) * PGD_BYTES_PER_PAIR
    with pytest.raises(DegenerateInput, match=f"{need / 1e9:.2f} GB") as err:
        fit_skills(df, SkillsOptions(method="pgd", pair_memory_budget=need - 1))
    assert err.value.reason == "pair_memory_budget" and err.value.exit_code == 2
    assert fit_skills(df, SkillsOptions(method="pgd", pair_memory_budget=need)).skills.shape[0] == lm.n_workers
    # ds never holds the pairs' statistics for the fit: the budget does not apply
    assert fit_skills(df, SkillsOptions(method="ds", pair_memory_budget=1)).skills.shape[0] == lm.n_workers
