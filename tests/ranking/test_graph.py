"""Tests for crowdflow.ranking.graph: X, L and the fast build, grouping of identical rows (docs/methods/ranking.md §1.3, §8.1 tests 1 and 4)."""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.ranking.fit import fit_hlasso
from crowdflow.ranking.graph import ComparisonGraph, group_identical_rows, laplacian
from crowdflow.ranking.hlasso import hlasso
from crowdflow.ranking.lbi import lbi_alg2, lbi_alg3
from crowdflow.ranking.least_squares import hodgerank_scores, laplacian_lambda_max
from crowdflow.synth.ranking import comparison_table, mm13_instance, random_pairs


def test_incidence_and_laplacian():
    """Test 1 of docs/methods/ranking.md §8.1: X·1 = 0; L = D − A_w symmetric with zero row sums; λ_max(K_n) = n."""
    rng = np.random.default_rng(0)
    n, m = 25, 300
    i, j = random_pairs(rng, n, m)
    w = rng.uniform(0.5, 3.0, m)
    g = ComparisonGraph.from_arrays(i, j, rng.standard_normal(m), w)
    assert np.abs(g.X @ np.ones(n)).max() == 0.0
    assert g.X.nnz == 2 * m
    L = g.L.toarray()
    np.testing.assert_allclose(L, L.T, atol=1e-12)
    np.testing.assert_allclose(L.sum(axis=1), 0.0, atol=1e-10)
    A = np.zeros((n, n))
    np.add.at(A, (i, j), w)
    np.add.at(A, (j, i), w)
    np.testing.assert_allclose(L, np.diag(A.sum(axis=1)) - A, atol=1e-10)
    np.testing.assert_allclose(L, laplacian(g.X, w).toarray(), atol=1e-10)
    for k in (5, 12):
        iu, ju = np.triu_indices(k, 1)
        gk = ComparisonGraph.from_arrays(iu, ju, np.ones(iu.size))
        assert laplacian_lambda_max(gk.L) == pytest.approx(k, rel=1e-10)
        assert laplacian_lambda_max(gk.L, dense_max_n=0) == pytest.approx(k, rel=1e-6)


def test_fast_graph_build_matches_definitions():
    """The sort-based build (distinct pairs, in-place CSR Laplacian, bincount divergence) equals the
    textbook operators on a weighted multigraph with repeated pairs, both orientations and isolated items."""
    rng = np.random.default_rng(7)
    n, m = 40, 500
    i, j = random_pairs(rng, 30, m)  # items 30..39 never compared
    w = rng.uniform(0.2, 2.0, m)
    y = rng.standard_normal(m)
    g = ComparisonGraph.from_arrays(i, j, y, w, n=n)
    key = np.minimum(i, j) * n + np.maximum(i, j)
    ukey, inv = np.unique(key, return_inverse=True)
    np.testing.assert_array_equal(g.edge, inv)
    np.testing.assert_array_equal(g.edge_u, ukey // n)
    np.testing.assert_array_equal(g.edge_v, ukey % n)
    np.testing.assert_allclose(g.edge_weight, np.bincount(inv, weights=w), rtol=1e-12)
    assert g.L.has_canonical_format
    X = np.zeros((m, n))
    X[np.arange(m), i] = 1.0
    X[np.arange(m), j] = -1.0
    np.testing.assert_allclose(g.L.toarray(), X.T @ (w[:, None] * X), atol=1e-12)
    np.testing.assert_array_equal(g.X.toarray(), X)
    np.testing.assert_array_equal(g.XT.toarray(), X.T)
    theta = rng.standard_normal(n)
    np.testing.assert_array_equal(g.gradient(theta), X @ theta)
    np.testing.assert_allclose(g.divergence(y), X.T @ (w * y), atol=1e-12)
    assert g.n_components == 11  # one big component + 10 isolated items
    assert sorted(g.component_sizes.tolist()) == [1] * 10 + [30]


def test_grouping_equivalence():
    """Test 4 of docs/methods/ranking.md §8.1: merged weighted problems equal the expanded ones (LS, HLASSO, 200 LBI steps)."""

    inst = mm13_instance(2, sn=500, op=0.15)
    i, j, y = inst.graph.i, inst.graph.j, inst.graph.y
    g = ComparisonGraph.from_arrays(i, j, y)
    gm, grp, sgn = group_identical_rows(g)
    assert gm.m < g.m and np.isclose(gm.w.sum(), g.m)
    np.testing.assert_allclose(hodgerank_scores(gm), hodgerank_scores(g), atol=1e-8)
    f_e, f_m = hlasso(g, 0.7), hlasso(gm, 0.7)
    np.testing.assert_allclose(f_m.theta, f_e.theta, atol=1e-8)
    np.testing.assert_allclose(sgn * f_m.gamma[grp], f_e.gamma, atol=1e-8)
    assert f_e.support.any()
    for alg in (lbi_alg2, lbi_alg3):
        kw = {"kappa": 2.0, "stop_rule": "none", "max_iter": 200}
        if alg is lbi_alg2:
            kw["dt"] = 1.0 / ((laplacian_lambda_max(g.L) + 1.0) * 2.0)
        else:
            kw["dt"] = 0.5 / 2.0
        pe, pm = alg(g, **kw), alg(gm, **kw)
        np.testing.assert_allclose(pm.theta, pe.theta, atol=1e-8)
        np.testing.assert_allclose(sgn * pm.gamma[grp], pe.gamma, atol=1e-8)
        np.testing.assert_array_equal(pm.entry_time[grp], pe.entry_time)
        assert (pe.gamma != 0).any()
    # public API: grouping on/off gives the same tables
    df = comparison_table(i, j, y)
    a = fit_hlasso(df, lambda_rule="budget", group_identical=True, diagnostics=False)
    b = fit_hlasso(df, lambda_rule="budget", group_identical=False, diagnostics=False)
    np.testing.assert_allclose(a.outliers["gamma"], b.outliers["gamma"], atol=1e-8)
    np.testing.assert_allclose(a.ranking["score"], b.ranking["score"], atol=1e-8)
