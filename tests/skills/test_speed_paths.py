"""The fast paths of issue #19 against their references: compiled pair counts and BFS, integer-code id
encoding, N without the moments, and whole fits from string, object and integer ids (same tables)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import crowdflow.graphs as graphs
import crowdflow.graphs.pairs as graph_pairs
from crowdflow.labels import factorize_ids, natural_order
from crowdflow.skills import fit_skills, label_moments, prepare_labels
from crowdflow.skills.moments import co_label_matrix
from crowdflow.synth import skills as synth


def _tasks(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    rng = np.random.default_rng(seed)
    w, t, m = int(rng.integers(1, 50)), int(rng.integers(1, 60)), int(rng.integers(2, 5))
    k = rng.integers(0, min(w, 8) + 1, t)
    groups = [rng.choice(w, kk, replace=False) for kk in k]
    if seed % 2:
        groups = [np.sort(g) for g in groups]
    indptr = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
    worker = np.concatenate(groups).astype(np.int64) if k.sum() else np.zeros(0, np.int64)
    return indptr, worker, rng.integers(0, m, worker.size), w, m


@pytest.mark.parametrize("dense", [True, False])
def test_pair_counts_equal_the_sparse_product(dense: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_pairs, "_DENSE_PAIRS_MAX", 1 << 24 if dense else 0)
    for seed in range(40):
        indptr, worker, cls, w, m = _tasks(seed)
        ref, ref_agree = graphs.pair_counts_reference(indptr, worker, cls, w, m)
        got, agree = graphs.pair_counts(indptr, worker, cls, w, m)
        # 12 bytes a stored entry: int32 counts, agreements and column indices (the reference counts in int64)
        assert got.dtype == agree.dtype == got.indices.dtype == np.int32 and got.has_sorted_indices
        np.testing.assert_array_equal(got.indptr, ref.indptr)
        np.testing.assert_array_equal(got.indices, ref.indices)
        np.testing.assert_array_equal(got.data, ref.data)
        np.testing.assert_array_equal(agree, ref_agree)
        alone, _ = graphs.pair_counts(indptr, worker, None, w, m)
        np.testing.assert_array_equal(alone.data, ref.data)


def test_graph_structure_equals_the_scipy_reference() -> None:
    for seed in range(30):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(1, 120))
        edges = synth.random_graph_edges(n, float(rng.uniform(0.002, 0.1)), seed=seed)
        adj = synth.adjacency(edges, n) if len(edges) else sp.csr_matrix((n, n))
        got, ref = graphs.graph_structure(adj), graphs.graph_structure_reference(adj)
        for name in ("depth", "pred", "odd_edge"):
            np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))
        for name in ("labels", "bipartite", "colour", "sizes"):
            a, b = getattr(got.graph, name), getattr(ref.graph, name)
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype
        assert got.graph.n_components == ref.graph.n_components


def _factorize_by_definition(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Every value written with ``str``, equal strings one id, ids in natural order."""
    text = values.astype(str).to_numpy(dtype=object)
    codes, uniques = pd.factorize(text)
    order = natural_order(np.asarray(uniques, dtype=object))
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return rank[codes], np.asarray(uniques, dtype=object)[order]


@pytest.mark.parametrize(
    "values",
    [
        pd.Series([5, -3, 12, 5, 0]),
        pd.Series(np.array([7, 2, 2, 9], dtype=np.uint16)),
        pd.Series([2**60, 3, 2**60 + 1]),
        pd.Series([10**12 + 3, 10**12, 10**12 + 3]),
        pd.Series(["b", "10", "2", "b"], dtype=object),
        pd.Series(["10", "2", "1"], dtype="string[pyarrow]"),
        pd.Series([1, "1", 2.5, "x", 1], dtype=object),
    ],
)
def test_factorize_ids_equals_its_definition(values: pd.Series) -> None:
    codes, ids = factorize_ids(values)
    ref_codes, ref_ids = _factorize_by_definition(values)
    np.testing.assert_array_equal(codes, ref_codes)
    assert ids.tolist() == ref_ids.tolist() and all(type(x) is str for x in ids)


def _labels(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    m, w = int(rng.integers(2, 6)), int(rng.integers(5, 40))
    k = rng.integers(1, 8, int(rng.integers(20, 150)))
    task = np.repeat(np.arange(k.size), k)
    worker = rng.choice(w, task.size, p=(p := 1.0 / np.arange(1, w + 1)) / p.sum())
    keep = ~pd.DataFrame({"t": task, "w": worker}).duplicated().to_numpy()
    return pd.DataFrame({"task": task[keep] * 3, "worker": worker[keep] + 7, "label": rng.integers(0, m, keep.sum())})


def _as(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    if kind == "int":
        return df
    text = {c: df[c].astype(str).to_numpy(dtype=object) for c in df.columns}
    dtype = object if kind == "object" else "string[pyarrow]"
    return pd.DataFrame({c: pd.Series(v, dtype=dtype) for c, v in text.items()})


@pytest.mark.parametrize("method", ["mv", "ds", "pgd"])
def test_string_object_and_integer_ids_give_the_same_tables(method: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for seed in range(4):
            df = _labels(seed)
            fits = [fit_skills(_as(df, kind), method=method, max_iter=50) for kind in ("int", "object", "string")]
            for other in fits[1:]:
                pd.testing.assert_frame_equal(other.skills, fits[0].skills)
                pd.testing.assert_frame_equal(other.consensus, fits[0].consensus)
                pd.testing.assert_frame_equal(other.diagnostics, fits[0].diagnostics)
            assert fits[0].skills["worker"].map(type).eq(str).all()


def test_mv_tables_equal_their_definition() -> None:
    for seed in range(6):
        df = _as(_labels(seed), "object")
        res = fit_skills(df, method="mv", tie_break="smallest")
        lm, _ = prepare_labels(df)
        votes = pd.crosstab(df["task"], df["label"]).reindex(index=lm.tasks, columns=lm.classes, fill_value=0)
        top = votes.to_numpy().argmax(axis=1)  # the first class in label order among the tied ones
        cons = res.consensus.set_index("task").loc[lm.tasks]
        assert cons["label"].tolist() == lm.classes[top].tolist()
        n = votes.sum(axis=1).to_numpy()
        np.testing.assert_allclose(cons["confidence"], votes.to_numpy().max(axis=1) / n)
        np.testing.assert_array_equal(cons["n_labels"], n)
        mv = dict(zip(lm.tasks, lm.classes[top], strict=True))
        agree = (df["label"] == df["task"].map(mv)).groupby(df["worker"]).mean()
        table = res.skills.set_index("worker")
        np.testing.assert_allclose(table["accuracy"], agree.loc[table.index])
        k = df.groupby("task")["worker"].transform("size")
        np.testing.assert_allclose(table["strength"], (k - 1).groupby(df["worker"]).sum().loc[table.index])
        tasks_of = df.groupby("worker")["task"].apply(set)
        workers_of = df.groupby("task")["worker"].apply(set)
        partners = {w: len(set().union(*(workers_of[t] for t in ts)) - {w}) for w, ts in tasks_of.items()}
        assert table["n_partners"].tolist() == [partners[w] for w in table.index]
        assert res.diagnostics["eig_method"].isin(["none"]).all()  # mv: no eigenvalues unless asked for


@pytest.mark.parametrize("min_pair_count", [1, 2])
def test_co_label_matrix_is_the_moments_n(min_pair_count: int) -> None:
    for seed in range(5):
        lm, _ = prepare_labels(_labels(seed))
        got = co_label_matrix(lm, min_pair_count)
        ref = label_moments(lm, min_pair_count=min_pair_count).co_labels
        np.testing.assert_array_equal(got.indptr, ref.indptr)
        np.testing.assert_array_equal(got.indices, ref.indices)
        np.testing.assert_array_equal(got.data, ref.data)
