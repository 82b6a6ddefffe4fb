"""Tests for crowdflow.ranking.hodge: the Hodge decomposition, diagnostics, undetectable rows (docs/methods/ranking.md §2.2–2.3, §8.1 tests 5, 7, 8)."""

from __future__ import annotations

import hypothesis as hyp
import numpy as np
import pandas as pd
import pytest

from crowdflow.ranking.fit import fit_hodgerank
from crowdflow.ranking.graph import ComparisonGraph, group_identical_rows
from crowdflow.ranking.hlasso import hlasso
from crowdflow.ranking.hodge import hodge_decomposition, undetectable_rows
from crowdflow.ranking.least_squares import hodgerank_scores
from crowdflow.synth.ranking import random_pairs


def test_undetectable_rows():
    """Test 5 of docs/methods/ranking.md §8.1: path 0–1–2 plus triangle 2–3–4; rows on 0–1, 1–2 have P_kk = 0."""
    g = ComparisonGraph.from_arrays([0, 1, 2, 3, 4], [1, 2, 3, 4, 2], [1.0, -2.0, 1.0, 1.0, -3.0])
    und = undetectable_rows(g)
    np.testing.assert_array_equal(und, [True, True, False, False, False])
    Lp = np.linalg.pinv(g.L.toarray())
    X = g.X.toarray()
    Pkk = 1.0 - np.einsum("ij,jk,ik->i", X, Lp, X)
    np.testing.assert_allclose(Pkk[:2], 0.0, atol=1e-12)
    np.testing.assert_allclose(Pkk[2:], 1.0 / 3.0, atol=1e-12)
    # HLASSO never flags them, however small λ
    f = hlasso(g, 1e-3)
    assert not f.support[:2].any() and f.support[2:].any()


def test_undetectable_matches_dense_leverage():
    """Bridge-based undetectability equals P_kk ≈ 0 from a dense pseudo-inverse (random sparse graphs)."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        n = 40
        parent = np.array([rng.integers(0, k) for k in range(1, n)])  # random tree
        i = np.r_[np.arange(1, n), rng.integers(0, n, 12)]
        j = np.r_[parent, rng.integers(0, n, 12)]
        keep = i != j
        i, j = i[keep], j[keep]
        # a few repeated rows (some identical, some disagreeing)
        rep = rng.choice(i.size, 6, replace=False)
        y = rng.choice([-1.0, 1.0], i.size)
        i = np.r_[i, i[rep]]
        j = np.r_[j, j[rep]]
        y = np.r_[y, np.where(rng.random(6) < 0.5, y[rep], -y[rep])]
        g = ComparisonGraph.from_arrays(i, j, y, n=n)
        X = g.X.toarray()
        Lp = np.linalg.pinv(g.L.toarray())
        Pkk = 1.0 - np.einsum("ij,jk,ik->i", X, Lp, X)
        # rows alone on their pair: undetectable iff P_kk = 0
        single = np.bincount(g.edge, minlength=g.n_edges)[g.edge] == 1
        und = undetectable_rows(g)
        np.testing.assert_array_equal(und[single], np.abs(Pkk[single]) < 1e-9)
        # grouped problem: P_kk = 0 exactly on the undetectable groups
        gm, grp, _ = group_identical_rows(g)
        Xm = gm.X.toarray()
        Pm = 1.0 - gm.w * np.einsum("ij,jk,ik->i", Xm, np.linalg.pinv(gm.L.toarray()), Xm)
        np.testing.assert_array_equal(undetectable_rows(gm), np.abs(Pm) < 1e-9)
        np.testing.assert_array_equal(und, undetectable_rows(gm)[grp])


def sparse_cyclic_graph(seed: int):
    """Sparse weighted multigraph with triangles, long cycles and within-pair disagreement."""
    rng = np.random.default_rng(seed)
    n = 30
    i, j = random_pairs(rng, n, 70)
    rep = rng.choice(70, 25)
    i = np.r_[i, i[rep]]
    j = np.r_[j, j[rep]]
    y = rng.standard_normal(i.size) + 0.5
    w = rng.uniform(0.5, 2.0, i.size)
    return ComparisonGraph.from_arrays(i, j, y, w, n=n)


@pytest.mark.parametrize("dense_max_edges", [1500, 0])
def test_hodge_partition_orthogonality(dense_max_edges):
    """Test 7 of docs/methods/ranking.md §8.1: parts add to y (1e-10), pairwise W-orthogonal (1e-8), shares add to the total."""
    g = sparse_cyclic_graph(11)
    hd = hodge_decomposition(g, dense_max_edges=dense_max_edges)
    parts = [hd.gradient, hd.bicycle, hd.curl, hd.harmonic]
    np.testing.assert_allclose(sum(parts), g.y, atol=1e-10)
    for a in range(4):
        for b in range(a + 1, 4):
            assert abs(np.sum(g.w * parts[a] * parts[b])) < 1e-8
    t = hd.table.iloc[0]
    assert t["bicycle_share"] > 0 and t["curl_share"] > 0 and t["harmonic_share"] > 0
    assert t["bicycle_share"] + t["curl_share"] + t["harmonic_share"] == pytest.approx(
        t["total_inconsistency"], rel=1e-9
    )
    # both curl solvers agree
    other = hodge_decomposition(g, dense_max_edges=1500 - dense_max_edges)
    np.testing.assert_allclose(hd.curl, other.curl, atol=1e-8)


def test_hodge_pure_cases():
    """Test 8 of docs/methods/ranking.md §8.1: pure curl triangle, pure harmonic 4-cycle, K_n, consistent complete data."""
    tri = ComparisonGraph.from_arrays([0, 1, 2], [1, 2, 0], [1.0, 1.0, 1.0])
    t = hodge_decomposition(tri).table.iloc[0]
    assert t["curl_share"] == pytest.approx(1.0) and t["total_inconsistency"] == pytest.approx(1.0)
    assert t["harmonic_share"] == pytest.approx(0.0, abs=1e-12) and t["n_cyclic_triangles"] == 1
    cyc = ComparisonGraph.from_arrays([0, 1, 2, 3], [1, 2, 3, 0], [1.0, 1.0, 1.0, 1.0])
    t = hodge_decomposition(cyc).table.iloc[0]
    assert t["harmonic_share"] == pytest.approx(1.0) and t["harmonic_dim"] == 1 and t["n_triangles"] == 0
    rng = np.random.default_rng(0)
    for n in (4, 7, 10):
        iu, ju = np.triu_indices(n, 1)
        g = ComparisonGraph.from_arrays(iu, ju, rng.standard_normal(iu.size))
        hd = hodge_decomposition(g)
        t = hd.table.iloc[0]
        assert t["n_triangles"] == n * (n - 1) * (n - 2) // 6
        assert t["harmonic_dim"] == 0
        assert np.abs(hd.harmonic).max() < 1e-10
        pos = rng.permutation(n)
        cons = ComparisonGraph.from_arrays(iu, ju, np.where(pos[iu] < pos[ju], 1.0, -1.0))
        t = hodge_decomposition(cons).table.iloc[0]
        assert t["tsr"] == 1.0 and t["n_cyclic_triangles"] == 0


def test_diagnostics_table_per_component():
    df = pd.DataFrame(
        {
            "item_a": ["a", "b", "c", "x", "y", "z", "x"],
            "item_b": ["b", "c", "a", "y", "z", "w", "w"],
            "outcome": [1, 1, 1, 1, -1, 1, 1],
        }
    )
    res = fit_hodgerank(df, allow_disconnected=True)
    d = res.diagnostics.set_index("component")
    assert list(d["n_items"]) == [3, 4] and list(d["n_rows"]) == [3, 4]
    assert d.loc[0, "curl_share"] == pytest.approx(1.0) and d.loc[1, "harmonic_dim"] == 1
    assert d["fiedler_value"].notna().all()


st = hyp.strategies


@hyp.settings(max_examples=25, deadline=None)
@hyp.given(
    n=st.integers(min_value=2, max_value=12),
    m=st.integers(min_value=1, max_value=40),
    seed=st.integers(min_value=0, max_value=10_000),
)
def test_property_ls_and_decomposition(n, m, seed):
    """Any (possibly disconnected) weighted multigraph: LS = dense lstsq per component; parts sum to y."""
    rng = np.random.default_rng(seed)
    i, j = random_pairs(rng, n, m)
    y = rng.choice([-2.0, -1.0, 0.0, 1.0, 2.0], m) + rng.standard_normal(m) * 0.1
    w = rng.uniform(0.5, 2.0, m)
    g = ComparisonGraph.from_arrays(i, j, y, w, n=n)
    theta = hodgerank_scores(g)
    sw = np.sqrt(w)
    ref = np.linalg.lstsq(g.X.toarray() * sw[:, None], sw * y, rcond=None)[0]  # min-norm = centred per component
    np.testing.assert_allclose(theta, ref, atol=1e-8)
    hd = hodge_decomposition(g, theta)
    parts = [hd.gradient, hd.bicycle, hd.curl, hd.harmonic]
    np.testing.assert_allclose(sum(parts), y, atol=1e-10)  # by construction; the content is below
    scale = max(1.0, float(np.sum(w * y * y)))
    for a in range(4):
        for b in range(a + 1, 4):  # an orthogonal decomposition: pairwise W-orthogonal parts
            assert abs(np.sum(w * parts[a] * parts[b])) <= 1e-8 * scale, (a, b)
    sums = np.bincount(g.component, weights=theta, minlength=g.n_components)
    np.testing.assert_allclose(sums, 0.0, atol=1e-10)
    und = undetectable_rows(g)
    Pkk = 1.0 - w * np.einsum("ij,jk,ik->i", g.X.toarray(), np.linalg.pinv(g.L.toarray()), g.X.toarray())
    single = np.bincount(g.edge, minlength=g.n_edges)[g.edge] == 1
    np.testing.assert_array_equal(und[single], np.abs(Pkk[single]) < 1e-9)
