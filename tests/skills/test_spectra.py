"""The sparse smallest eigenvalue of the signless Laplacian against dense LAPACK, over a family of graphs.

Above ``dense_max`` the diagnostics take λ_min(L_s) from Jacobi-preconditioned LOBPCG (Lanczos when LOBPCG's
residual check fails). Both must equal dense ``eigvalsh`` on every graph the family draws: dense and sparse,
weighted and unit, odd rings, nearly bipartite graphs (one odd edge of tiny weight: λ_min close to 0, the hard
case for an iterative solver), stars with a triangle, and the skewed co-label graphs of Zipf-active workers.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

from crowdflow.skills.spectra import signless_lambda_min, signless_laplacian


def _sym(rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, n: int) -> sp.csr_matrix:
    a = sp.coo_matrix((weights, (rows, cols)), shape=(n, n)).tocsr()
    a = a + a.T
    a.setdiag(0)
    a.eliminate_zeros()
    return sp.csr_matrix(a)


def _graph(kind: str, n: int, rng: np.random.Generator) -> sp.csr_matrix:
    if kind == "dense":
        r, c = np.triu_indices(n, 1)
        keep = rng.random(r.size) < 0.3
        return _sym(r[keep], c[keep], rng.integers(1, 20, keep.sum()).astype(float), n)
    if kind == "sparse":
        m = 3 * n
        return _sym(rng.integers(0, n, m), rng.integers(0, n, m), np.ones(m), n)
    if kind == "odd_ring":
        n -= 1 - n % 2  # odd
        i = np.arange(n)
        return _sym(i, (i + 1) % n, np.ones(n), n)
    if kind == "near_bipartite":
        half = n // 2
        m = 4 * n
        r, c = rng.integers(0, half, m), rng.integers(half, n, m)
        a = _sym(r, c, rng.uniform(1, 5, m), n)
        return sp.csr_matrix(a + _sym(np.array([0]), np.array([1]), np.array([1e-3]), n))
    if kind == "star_triangle":
        i = np.arange(1, n)
        return _sym(np.r_[np.zeros(n - 1, int), 1], np.r_[i, 2], np.ones(n), n)
    if kind == "zipf":
        act = 1 / np.arange(1, n + 1) ** rng.uniform(0.8, 1.3)
        act /= act.sum()
        rows, cols = [], []
        for k in rng.integers(2, 8, 8 * n):
            ws = rng.choice(n, size=min(k, n), replace=False, p=act)
            a, b = np.meshgrid(ws, ws)
            rows.append(a.ravel())
            cols.append(b.ravel())
        r, c = np.concatenate(rows), np.concatenate(cols)
        return _sym(r, c, np.ones(r.size) / 2, n)
    raise AssertionError(kind)


KINDS = ("dense", "sparse", "odd_ring", "near_bipartite", "star_triangle", "zipf")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [40, 150, 400])
def test_sparse_lambda_min_equals_dense(kind: str, n: int) -> None:
    rng = np.random.default_rng(n * 31 + KINDS.index(kind))
    adj = _graph(kind, n, rng)
    ls = signless_laplacian(adj)
    if ls.shape[0] == 0 or not np.all(ls.diagonal() > 0):
        adj = sp.csr_matrix(adj + _sym(np.arange(n - 1), np.arange(1, n), np.ones(n - 1), n))  # no isolated vertex
        ls = signless_laplacian(adj)
    exact = float(scipy.linalg.eigvalsh(ls.toarray(), subset_by_index=[0, 0])[0])
    lam, method = signless_lambda_min(adj, dense_max=10, dense_fallback_max=10)  # iterative only
    assert method in ("lobpcg", "eigsh")
    scale = float(abs(ls).sum(axis=1).max())
    assert abs(lam - exact) <= 1e-8 * scale + 1e-9 * abs(exact), (kind, n, method, lam, exact)
    # deterministic: the same call gives the same bits
    assert signless_lambda_min(adj, dense_max=10, dense_fallback_max=10) == (lam, method)
    # the default fallback: LOBPCG's verified answer, or the dense one when its check fails
    lam2, method2 = signless_lambda_min(adj, dense_max=10)
    assert (lam2, method2) == ((lam, method) if method == "lobpcg" else (exact, "eigvalsh"))


def test_lobpcg_is_taken_on_dense_co_label_graphs() -> None:
    """The fast path is the one used on the skewed co-label graphs it was chosen for (not always the fallback)."""
    rng = np.random.default_rng(7)
    methods = {signless_lambda_min(_graph("zipf", n, rng), dense_max=10)[1] for n in (150, 300, 400)}
    assert methods == {"lobpcg"}
