"""Issue #36's compiled kernels of the PGD path against brute force, over a family of small shapes.

Pair counts (both kernels, with and without the agreements) against a Python loop over every pair of labels of
every task; the (task, worker) order they are grouped by against a stable argsort (its already-sorted shortcut and
duplicate keys); the signless-Laplacian operator of the spectral
diagnostics against scipy's L_s; the fused mat-vec of the ``scaled`` solver against scipy's ``csr_matvec``, bit for
bit. Shapes: 1-40 workers, 2-6 classes, one class only (every pair agrees), Zipf-skewed activity, tasks with one or
two labellers only, isolated workers, empty tasks.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp

import crowdflow.graphs as graphs
import crowdflow.graphs.pairs as graph_pairs
from crowdflow.labels import task_major_order
from crowdflow.skills.rank_one import _two_products
from crowdflow.skills.spectra import _Operator, signless_laplacian

KINDS = ("uniform", "one_class", "zipf", "one_or_two", "isolated", "wide")


def _shape(kind: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Labels grouped by task (row pointer, worker, class) with distinct workers in a task, W and M."""
    rng = np.random.default_rng(seed)
    w = int(rng.integers(1, 41))
    t = int(rng.integers(1, 60))
    m = int(rng.integers(2, 7))
    p = np.full(w, 1.0 / w)
    if kind == "zipf":
        p = 1.0 / np.arange(1, w + 1) ** rng.uniform(0.8, 1.5)
        p /= p.sum()
    top = {"one_or_two": 2, "wide": 20}.get(kind, 8)
    k = rng.integers(0, min(w, top) + 1, t)
    if kind == "one_or_two":
        k = np.minimum(np.maximum(k, 1), 2)
    groups = [rng.choice(w, int(kk), replace=False, p=p) for kk in k]
    if kind == "isolated" and w > 2:  # the last workers only ever label alone
        lone = np.arange(w - 2, w)
        groups = [g[~np.isin(g, lone)] for g in groups] + [np.array([i]) for i in lone]
    k = np.array([g.size for g in groups], dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
    worker = np.concatenate(groups).astype(np.int64) if k.sum() else np.zeros(0, np.int64)
    cls = np.zeros(worker.size, np.int64) if kind == "one_class" else rng.integers(0, m, worker.size)
    return indptr, worker, cls, w, m


def _brute(indptr: np.ndarray, worker: np.ndarray, cls: np.ndarray) -> tuple[Counter[tuple[int, int]], Counter]:
    n: Counter[tuple[int, int]] = Counter()
    agree: Counter[tuple[int, int]] = Counter()
    for t in range(indptr.size - 1):
        lab = range(int(indptr[t]), int(indptr[t + 1]))
        for p in lab:
            for q in lab:
                if p != q:
                    n[int(worker[p]), int(worker[q])] += 1
                    agree[int(worker[p]), int(worker[q])] += int(cls[p] == cls[q])
    return n, agree


@pytest.mark.parametrize("dense", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_pair_counts_equal_brute_force(kind: str, dense: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_pairs, "_DENSE_PAIRS_MAX", 1 << 24 if dense else 0)
    monkeypatch.setattr(graph_pairs, "_DENSE_CELLS_PER_PAIR", 1 << 40)  # the dense kernel whenever a pair exists
    calls: Counter[str] = Counter()
    for name in ("_pair_count_dense", "_pair_count_rows"):
        kernel = getattr(graph_pairs, name)
        monkeypatch.setattr(graph_pairs, name, lambda *a, _k=kernel, _n=name: calls.update([_n]) or _k(*a))
    for seed in range(12):
        indptr, worker, cls, w, m = _shape(kind, 100 * seed + KINDS.index(kind))
        want_n, want_a = _brute(indptr, worker, cls)
        got, agree = graphs.pair_counts(indptr, worker, cls, w, m)
        coo = got.tocoo()
        got_n = {(int(i), int(j)): int(v) for i, j, v in zip(coo.row, coo.col, coo.data, strict=True)}
        got_a = {(int(i), int(j)): int(v) for i, j, v in zip(coo.row, coo.col, agree, strict=True)}
        assert got_n == dict(want_n), (kind, seed)
        assert got_a == {key: want_a[key] for key in want_n}, (kind, seed)
        assert got.has_sorted_indices and all(np.all(np.diff(r.indices) > 0) for r in got)  # sorted, no duplicates
        assert np.all(got.indices != np.repeat(np.arange(w), np.diff(got.indptr)))  # no diagonal
        alone, _ = graphs.pair_counts(indptr, worker, None, w, m)
        np.testing.assert_array_equal(alone.indptr, got.indptr)
        np.testing.assert_array_equal(alone.indices, got.indices)
        np.testing.assert_array_equal(alone.data, got.data)
    assert calls["_pair_count_dense" if dense else "_pair_count_rows"] >= 12  # the kernel under test did the counting


@pytest.mark.parametrize("kind", ["shuffled", "sorted", "duplicates", "wide_codes"])
def test_task_major_order_is_the_stable_argsort(kind: str) -> None:
    rng = np.random.default_rng(len(kind))
    for _ in range(40):
        n, t_codes, w = int(rng.integers(2, 2000)), int(rng.integers(1, 300)), int(rng.integers(1, 200))
        task, worker = rng.integers(0, t_codes, n), rng.integers(0, w, n)
        if kind == "sorted":
            order = np.lexsort((worker, task))
            task, worker = task[order], worker[order]
        if kind == "duplicates":  # repeated (task, worker) pairs: ties keep their input order
            task, worker = np.repeat(task[: n // 3 + 1], 3)[:n], np.repeat(worker[: n // 3 + 1], 3)[:n]
        if kind == "wide_codes":  # codes over a range far wider than the entries: the argsort path
            task = task * 10**6
        got, keys = task_major_order(task, worker, w)
        want = np.argsort(task * w + worker, kind="stable")
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(keys, (task * w + worker)[want])


@pytest.mark.parametrize("kind", ["shuffled", "grouped", "duplicates", "long_task", "worker_past_w", "wide_codes"])
def test_task_major_order_counting_path_is_the_stable_argsort(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """From COUNTING_SORT_MIN entries the order comes from two counting sorts (crowdflow.orders); the same permutation
    as the stable argsort, and the counting kernel ran unless the codes leave its ranges (then numpy's sort)."""
    import crowdflow.orders as orders

    calls = Counter[str]()
    real = orders.task_worker_order

    def spy(*args: object) -> np.ndarray:
        calls["lsd"] += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(orders, "task_worker_order", spy)
    rng = np.random.default_rng(len(kind) + 7)
    for _ in range(4):
        n, t_codes, w = int(rng.integers(1 << 16, 1 << 17)), int(rng.integers(1, 40_000)), int(rng.integers(1, 3000))
        task, worker = rng.integers(0, t_codes, n), rng.integers(0, w, n)
        if kind == "grouped":  # tasks in runs (as most inputs come), workers unsorted inside a run
            task = np.sort(task)
        if kind == "duplicates":  # repeated (task, worker) pairs: ties keep their input order
            task, worker = np.repeat(task[: n // 3 + 1], 3)[:n], np.repeat(worker[: n // 3 + 1], 3)[:n]
        if kind == "long_task":  # one task holds a third of the entries
            task[rng.random(n) < 0.33] = 0
        if kind == "worker_past_w":  # a worker code >= W: the key is not (task, worker) order; argsort of the key
            worker[0] = w + 5
        if kind == "wide_codes":  # task codes over a range far wider than the entries: the argsort path
            task = task * 10**6
        got, keys = task_major_order(task, worker, w)
        want = np.argsort(task * w + worker, kind="stable")
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(keys, (task * w + worker)[want])
    assert calls["lsd"] == (0 if kind in ("worker_past_w", "wide_codes") else 4)


def _sym(rng: np.random.Generator, n: int, fill: float, weights: str) -> sp.csr_matrix:
    a = sp.random(n, n, density=fill, random_state=np.random.RandomState(int(rng.integers(2**31))), format="csr")
    if weights == "counts":
        a.data = np.ceil(a.data * 50)
    elif weights == "unit":
        a.data[:] = 1.0
    a = sp.csr_matrix(sp.triu(a, 1) + sp.triu(a, 1).T)
    return a


@pytest.mark.parametrize("weights", ["counts", "unit", "real"])
@pytest.mark.parametrize("fill", [0.02, 0.6])  # CSR and dense application
def test_signless_operator_equals_scipy(weights: str, fill: float) -> None:
    rng = np.random.default_rng(int(fill * 100) + len(weights))
    for n in (1, 7, 60, 250):
        a = _sym(rng, n, fill, weights)
        x = rng.standard_normal(n)
        op = _Operator.build(a, signless=True)
        assert (op.dense.shape[0] == n) == (4 * a.nnz >= n * n)
        want = signless_laplacian(a) @ x
        np.testing.assert_allclose(op @ x, want, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(want).max())))
        assert op.norm1 == pytest.approx(float(abs(signless_laplacian(a)).sum(axis=1).max()), rel=1e-12)
        # a stored diagonal: ignored by L_s, kept by the plain operator (the largest eigenvalue's)
        with_diag = sp.csr_matrix(a + sp.diags(rng.uniform(1, 2, n)))
        np.testing.assert_allclose(_Operator.build(with_diag, signless=True) @ x, want, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(_Operator.build(with_diag, signless=False) @ x, with_diag @ x, rtol=1e-12, atol=1e-9)


def test_fused_products_are_scipy_csr_matvec_bit_for_bit() -> None:
    rng = np.random.default_rng(36)
    for n in (1, 9, 120, 700):
        w = _sym(rng, n, float(rng.uniform(0.01, 0.5)), "counts")
        w.sort_indices()
        c = rng.uniform(-1, 1, w.nnz)
        wc = sp.csr_matrix((w.data * c, w.indices, w.indptr), shape=w.shape)
        x = rng.uniform(-1, 1, n)
        a, b = np.empty(n), np.empty(n)
        _two_products(w.indptr.astype(np.uint64), w.indices.view(np.uint32), wc.data, w.data, x, x * x, a, b)
        np.testing.assert_array_equal(a, wc @ x)
        np.testing.assert_array_equal(b, w @ (x * x))
