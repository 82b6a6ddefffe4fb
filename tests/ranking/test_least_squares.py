"""Tests for crowdflow.ranking.least_squares: HodgeRank scores and the debiased refit (docs/methods/ranking.md §2.1, §3.3, §8.1 test 6)."""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.hlasso import hlasso
from crowdflow.ranking.hodge import hodge_decomposition
from crowdflow.ranking.least_squares import LaplacianSolver, hodgerank_scores, refit_without
from crowdflow.synth.ranking import huber_instance, random_pairs


@pytest.mark.parametrize("method", ["splu", "cg"])
def test_noise_free_recovery(method):
    """Test 6 of docs/methods/ranking.md §8.1: y = θ*_i − θ*_j ⇒ LS = θ* − mean(θ*) to 1e-8, total inconsistency < 1e-12."""
    rng = np.random.default_rng(4)
    n, m = 60, 400
    i, j = random_pairs(rng, n, m)
    th = rng.standard_normal(n)
    g = ComparisonGraph.from_arrays(i, j, th[i] - th[j])
    assert g.n_components == 1
    theta = hodgerank_scores(g, LaplacianSolver.from_graph(g, method=method))
    np.testing.assert_allclose(theta, th - th.mean(), atol=1e-8)
    hd = hodge_decomposition(g, theta)
    assert hd.table["total_inconsistency"].item() < 1e-12


@pytest.mark.parametrize("method", ["splu", "cg"])
def test_ls_matches_dense_lstsq(method):
    """HodgeRank (sparse, weighted) equals dense weighted least squares (min-norm, centred)."""
    rng = np.random.default_rng(5)
    n, m = 40, 500
    i, j = random_pairs(rng, n, m)
    w = rng.uniform(0.2, 4.0, m)
    y = rng.standard_normal(m) * 2
    g = ComparisonGraph.from_arrays(i, j, y, w)
    theta = hodgerank_scores(g, LaplacianSolver.from_graph(g, method=method))
    sw = np.sqrt(w)
    ref = np.linalg.lstsq(g.X.toarray() * sw[:, None], sw * y, rcond=None)[0]
    np.testing.assert_allclose(theta, ref - ref.mean(), atol=1e-8)


def test_debiased_refit_is_ls_without_flagged_rows():
    inst = huber_instance(1)
    g, th = inst.graph, inst.theta
    f = hlasso(g, 1.0)
    deb = refit_without(g, f.support, f.theta)
    keep = ~f.support
    ref = np.linalg.lstsq(g.X.toarray()[keep], g.y[keep], rcond=None)[0]
    np.testing.assert_allclose(deb, ref - ref.mean(), atol=1e-8)
    # debiasing removes the λ-shrinkage: closer to the truth than the HLASSO scores here
    tc = th - th.mean()
    assert np.linalg.norm(deb - tc) < np.linalg.norm(hodgerank_scores(g) - tc)


@pytest.mark.parametrize("n_components", [1, 3])
def test_dense_cholesky_equals_sparse_lu(n_components, monkeypatch):
    """A dense grounded Laplacian is factorised by Cholesky (issue #19): the same scores as SuperLU to 1e-10."""
    import crowdflow.ranking.least_squares as ls

    rng = np.random.default_rng(11)
    n, m = 90 * n_components, 3000 * n_components
    i, j = random_pairs(rng, 90, m)
    off = 90 * rng.integers(0, n_components, m)  # disjoint blocks: n_components components
    g = ComparisonGraph.from_arrays(i + off, j + off, rng.standard_normal(m), rng.uniform(0.5, 2.0, m), n=n)
    dense = LaplacianSolver.from_graph(g, method="splu")
    assert dense._chol is not None and dense._lu is None
    monkeypatch.setattr(ls, "DENSE_FACTOR_MIN_DENSITY", 2.0)
    sparse = LaplacianSolver.from_graph(g, method="splu")
    assert sparse._chol is None and sparse._lu is not None
    b = g.divergence(g.y)
    np.testing.assert_allclose(dense.solve(b), sparse.solve(b), rtol=0, atol=1e-10 * np.abs(sparse.solve(b)).max())
    bb = rng.standard_normal((n, 3))
    np.testing.assert_allclose(dense.solve(bb), sparse.solve(bb), rtol=0, atol=1e-9)
