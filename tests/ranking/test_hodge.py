"""Tests for crowdflow.ranking.hodge (spec robust-hodgerank.md §8, tests 1–11, 21, 24).

LBI-specific acceptance tests (12–20, 25) live in tests/ranking/test_lbi.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.ranking.comparisons import canonical_comparisons, comparisons_from_winners
from crowdflow.ranking.cv import cv_lambda
from crowdflow.ranking.fit import fit_hlasso, fit_hodgerank, fit_robust_hodgerank
from crowdflow.ranking.graph import (
    ComparisonGraph,
    build_comparison_graph,
    check_comparison_graph,
    group_identical_rows,
    laplacian,
)
from crowdflow.ranking.hlasso import hlasso, hlasso_path
from crowdflow.ranking.hodge import hodge_decomposition, undetectable_rows
from crowdflow.ranking.identifiability import identifiability
from crowdflow.ranking.least_squares import LaplacianSolver, hodgerank_scores, laplacian_lambda_max, refit_without
from crowdflow.ranking.numerics import shrink
from crowdflow.ranking.scale import huber_concomitant_scale

# ----------------------------------------------------------------------------------------------
# generators (seeded, with ground truth)
# ----------------------------------------------------------------------------------------------


def random_pairs(rng: np.random.Generator, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    i = rng.integers(0, n, m)
    j = rng.integers(0, n - 1, m)
    j[j >= i] += 1
    return i, j


def huber_setting(seed: int = 1):
    """Spec test 9 setting: n=30, m=600 uniform pairs, θ*~N(0,1), σ=0.2, 30 rows shifted by ±4."""
    rng = np.random.default_rng(seed)
    n, m = 30, 600
    i, j = random_pairs(rng, n, m)
    theta = rng.standard_normal(n)
    y = theta[i] - theta[j] + 0.2 * rng.standard_normal(m)
    out = rng.choice(m, 30, replace=False)
    y[out] += 4.0 * rng.choice([-1.0, 1.0], 30)
    truth = np.zeros(m, dtype=bool)
    truth[out] = True
    return ComparisonGraph.from_arrays(i, j, y), theta, truth


def to_frame(i, j, y, w=None, annotator=None) -> pd.DataFrame:
    df = pd.DataFrame(
        {
            "annotator": annotator if annotator is not None else [f"a{k % 7}" for k in range(len(y))],
            "item_a": [f"it{v}" for v in i],
            "item_b": [f"it{v}" for v in j],
            "outcome": np.asarray(y, dtype=float),
        }
    )
    if w is not None:
        df["weight"] = w
    return df


# ----------------------------------------------------------------------------------------------
# §1 data model and validation
# ----------------------------------------------------------------------------------------------


def test_incidence_and_laplacian():
    """Spec test 1: X·1 = 0; L = D − A_w symmetric with zero row sums; λ_max(K_n) = n."""
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


def test_winner_form_and_aliases():
    df = pd.DataFrame(
        {
            "annotator": ["u1", "u2", "u3", "u4"],
            "item_a": ["x", "x", "y", "z"],
            "item_b": ["y", "z", "z", "x"],
            "winner": ["x", "z", "TIE", "x"],
        }
    )
    out = comparisons_from_winners(df)
    np.testing.assert_array_equal(out["outcome"].to_numpy(), [1.0, -1.0, 0.0, -1.0])
    crowdkit = pd.DataFrame({"worker": ["u1"], "left": ["a"], "right": ["b"], "label": ["b"]})
    can = canonical_comparisons(crowdkit)
    assert can.loc[0, "outcome"] == -1.0 and can.loc[0, "annotator"] == "u1"
    # integer ids become strings, natural sort for numeric ids
    g = build_comparison_graph(pd.DataFrame({"item_a": [2, 10], "item_b": [10, 1], "outcome": [1, 1]}))
    assert list(g.items) == ["1", "2", "10"]


@pytest.mark.parametrize(
    ("df", "match"),
    [
        (pd.DataFrame({"item_a": ["a"], "item_b": ["a"], "outcome": [1.0]}), "itself"),
        (pd.DataFrame({"item_a": ["a"], "item_b": ["b"]}), "outcome"),
        (pd.DataFrame({"item_a": ["a", None], "item_b": ["b", "c"], "outcome": [1.0, 1.0]}), "item_a"),
        (pd.DataFrame({"item_a": ["a"], "item_b": ["b"], "outcome": [np.inf]}), "outcome"),
        (pd.DataFrame({"item_a": ["a"], "item_b": ["b"], "outcome": [1.0], "weight": [0.0]}), "weight"),
        (pd.DataFrame({"item_a": ["a"], "item_b": ["b"], "winner": ["c"]}), "winner"),
        (pd.DataFrame({"item_a": [], "item_b": [], "outcome": []}), "empty"),
    ],
)
def test_bad_input_raises(df, match):
    with pytest.raises(ValueError, match=match):
        canonical_comparisons(df)


def test_orientation_invariance():
    """Spec test 2: flipping rows (i,j,y)→(j,i,−y) leaves θ unchanged and negates γ and residuals."""
    g, _, _ = huber_setting(3)
    rng = np.random.default_rng(7)
    flip = rng.random(g.m) < 0.4
    i2 = np.where(flip, g.j, g.i)
    j2 = np.where(flip, g.i, g.j)
    y2 = np.where(flip, -g.y, g.y)
    df1 = to_frame(g.i, g.j, g.y)
    df2 = to_frame(i2, j2, y2)
    sgn = np.where(flip, -1.0, 1.0)
    for fit in (
        lambda d: fit_hlasso(d, lambda_rule="fixed", lam=1.0, diagnostics=False),
        lambda d: fit_robust_hodgerank(d, method="lbi", stop_rule="time", t_stop=1.0, diagnostics=False),
    ):
        r1, r2 = fit(df1), fit(df2)
        s1 = r1.scores.set_index("item")
        s2 = r2.scores.set_index("item").loc[s1.index]
        np.testing.assert_allclose(s1["score_robust"], s2["score_robust"], atol=1e-8)
        np.testing.assert_allclose(s1["score_debiased"], s2["score_debiased"], atol=1e-8)
        o1 = r1.outliers.sort_values("row_id")
        o2 = r2.outliers.sort_values("row_id")
        np.testing.assert_allclose(o2["gamma"].to_numpy(), sgn * o1["gamma"].to_numpy(), atol=1e-8)
        np.testing.assert_allclose(o2["residual"].to_numpy(), sgn * o1["residual"].to_numpy(), atol=1e-8)
        assert (o1["is_outlier"].to_numpy() == o2["is_outlier"].to_numpy()).all()
        assert r1.outliers["is_outlier"].sum() > 0


def test_disconnected_graph():
    """Spec test 3: c = 3, memberships {0..4}, {5..9}, {10}; 10 isolated; no global rank by default."""
    rng = np.random.default_rng(0)
    rows = []
    for block in (range(5), range(5, 10)):
        b = list(block)
        for a_ in b:
            for c_ in b:
                if a_ < c_:
                    rows.append((a_, c_, float(rng.choice([-1, 1]))))
    df = pd.DataFrame(rows, columns=["item_a", "item_b", "outcome"])
    universe = list(range(11))
    rep = check_comparison_graph(df, items=universe)
    assert rep.n_components == 3 and not rep.connected
    comp = rep.components.set_index("item")["component"]
    groups = {tuple(sorted(int(x) for x in comp.index[comp == c])) for c in comp.unique()}
    assert groups == {(0, 1, 2, 3, 4), (5, 6, 7, 8, 9), (10,)}
    assert rep.isolated_items == ["10"]
    with pytest.raises(ValueError, match="not connected"):
        fit_hodgerank(df, items=universe)
    with pytest.raises(ValueError, match="not connected"):
        fit_hlasso(df, items=universe)
    res = fit_hodgerank(df, items=universe, allow_disconnected=True)
    sums = res.ranking.groupby("component")["score"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 0.0, atol=1e-12)
    assert res.ranking.groupby("component")["rank"].min().eq(1).all()
    assert res.ranking.loc[res.ranking["item"] == "10", "n_comparisons"].item() == 0
    rob = fit_hlasso(df, items=universe, allow_disconnected=True, lambda_rule="fixed", lam=0.5)
    np.testing.assert_allclose(rob.ranking.groupby("component")["score"].sum().to_numpy(), 0.0, atol=1e-10)


def mm13_data(seed: int, n: int = 16, sn: int = 400, op: float = 0.1):
    """MM13 protocol: random total order, SN uniform ±1 comparisons, OP fraction reversed."""
    rng = np.random.default_rng(seed)
    pos = rng.permutation(n)  # pos[item] = true rank position (0 = best)
    i, j = random_pairs(rng, n, sn)
    y = np.where(pos[i] < pos[j], 1.0, -1.0)
    flip = np.zeros(sn, dtype=bool)
    flip[rng.choice(sn, round(op * sn), replace=False)] = True
    y[flip] *= -1
    return i, j, y, flip, pos


def test_grouping_equivalence():
    """Spec test 4: merged weighted problems equal the expanded ones (LS, HLASSO, 200 LBI steps)."""
    from crowdflow.ranking.lbi import lbi_alg2, lbi_alg3

    i, j, y, _, _ = mm13_data(2, sn=500, op=0.15)
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
    df = to_frame(i, j, y)
    a = fit_hlasso(df, lambda_rule="budget", group_identical=True, diagnostics=False)
    b = fit_hlasso(df, lambda_rule="budget", group_identical=False, diagnostics=False)
    np.testing.assert_allclose(a.outliers["gamma"], b.outliers["gamma"], atol=1e-8)
    np.testing.assert_allclose(a.ranking["score"], b.ranking["score"], atol=1e-8)


def test_undetectable_rows():
    """Spec test 5: path 0–1–2 plus triangle 2–3–4; rows on 0–1, 1–2 have P_kk = 0."""
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


# ----------------------------------------------------------------------------------------------
# §2 HodgeRank and the Hodge decomposition
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["splu", "cg"])
def test_noise_free_recovery(method):
    """Spec test 6: y = θ*_i − θ*_j ⇒ LS = θ* − mean(θ*) to 1e-8, total inconsistency < 1e-12."""
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
    """Spec test 7: parts add to y (1e-10), pairwise W-orthogonal (1e-8), shares add to the total."""
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
    """Spec test 8: pure curl triangle, pure harmonic 4-cycle, K_n, consistent complete data."""
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


# ----------------------------------------------------------------------------------------------
# §3 HLASSO
# ----------------------------------------------------------------------------------------------


def _cvx_huber(g: ComparisonGraph, lam: float) -> np.ndarray:
    cp = pytest.importorskip("cvxpy")
    th = cp.Variable(g.n)
    obj = cp.sum(cp.multiply(g.w, cp.huber(g.X @ th - g.y, lam))) / 2
    cp.Problem(cp.Minimize(obj), [cp.sum(th) == 0]).solve(
        solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12
    )
    return th.value


def test_huber_equivalence():
    """Spec test 9: HLASSO θ = Huber-regression θ (cvxpy) to 1e-4; γ = shrink(y − Xθ, λ) to 1e-8."""
    g, _, truth = huber_setting(1)
    f = hlasso(g, 1.0)
    assert f.converged
    th_h = _cvx_huber(g, 1.0)
    assert np.abs(f.theta - th_h).max() < 1e-4
    np.testing.assert_allclose(f.gamma, shrink(g.y - g.X @ f.theta, 1.0), atol=1e-8)
    assert (f.support & truth).sum() == truth.sum()


def test_split_equivalence_and_lambda_max():
    """Spec test 10: joint (HL) by cvxpy = two-stage (a)+(b) to 1e-6; λ_max and first entry."""
    cp = pytest.importorskip("cvxpy")
    g, _, _ = huber_setting(2)
    w = g.w * np.linspace(0.5, 2.0, g.m)  # weighted version of the same data
    g = ComparisonGraph.from_arrays(g.i, g.j, g.y, w)
    lam = 0.8
    th, gm = cp.Variable(g.n), cp.Variable(g.m)
    obj = 0.5 * cp.sum(cp.multiply(g.w, cp.square(g.y - g.X @ th - gm))) + lam * cp.sum(cp.multiply(g.w, cp.abs(gm)))
    cp.Problem(cp.Minimize(obj), [cp.sum(th) == 0]).solve(
        solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12
    )
    f = hlasso(g, lam, tol=1e-12)
    assert np.abs(f.theta - th.value).max() < 1e-6
    assert np.abs(f.gamma - gm.value).max() < 1e-6
    ls_res = g.y - g.X @ hodgerank_scores(g)
    path = hlasso_path(g, n_lambdas=40)
    assert path.lambda_max == pytest.approx(np.abs(ls_res).max(), rel=1e-12)
    assert int(np.argmin(path.path_rank)) == int(np.argmax(np.abs(ls_res)))
    assert path.entry_lambda[np.argmax(np.abs(ls_res))] == pytest.approx(path.lambda_max)


def test_path_entry_lambda_is_refined():
    """Interpolated entry λ is where |r_k(λ)| = λ: re-solving just above / below flips the support."""
    g, _, _ = huber_setting(4)
    path = hlasso_path(g, n_lambdas=30)
    order = np.argsort(-path.order_key)
    for k in order[3:8]:
        lam_e = path.entry_lambda[k]
        assert not hlasso(g, lam_e * 1.03).support[k]
        assert hlasso(g, lam_e * 0.97).support[k]


def test_budget_rule_includes_crossing_group():
    """Spec §3.4.3: flag the first rows along the path until ≥ 5 % of the weight, whole groups."""
    i, j, y, flip, _ = mm13_data(5, sn=600, op=0.1)
    df = to_frame(i, j, y)
    res = fit_hlasso(df, lambda_rule="budget", budget=0.05, diagnostics=False)
    out = res.outliers
    flagged = out["is_outlier"].to_numpy()
    assert flagged.sum() >= 0.05 * len(out)
    # flagged rows are a prefix of the path order
    assert out.loc[flagged, "path_rank"].max() < out.loc[~flagged, "path_rank"].min()
    # identical rows share the decision
    key = out.assign(
        o=np.where(out.item_a < out.item_b, out.outcome, -out.outcome),
        u=np.minimum(out.item_a, out.item_b),
        v=np.maximum(out.item_a, out.item_b),
    )
    assert key.groupby(["u", "v", "o"])["is_outlier"].nunique().max() == 1
    assert flip[flagged].mean() > 0.9


def test_concomitant_scale():
    """Spec test 11: no outliers, n=50, m=5000, σ=0.3: σ̂ ∈ [0.27, 0.33] (a=0.7126); ≈0.68σ (a=1)."""
    rng = np.random.default_rng(0)
    n, m, s = 50, 5000, 0.3
    i, j = random_pairs(rng, n, m)
    th = rng.standard_normal(n)
    g = ComparisonGraph.from_arrays(i, j, th[i] - th[j] + s * rng.standard_normal(m))
    est = huber_concomitant_scale(g)
    assert est.converged and 0.27 <= est.sigma <= 0.33
    assert est.lam == pytest.approx(1.35 * est.sigma)
    lit = huber_concomitant_scale(g, a=1.0)
    assert 0.68 * 0.9 <= lit.sigma / s <= 0.68 * 1.1


def test_concomitant_solves_joint_convex_problem():
    """The (θ, σ) alternation reaches the jointly convex optimum (cvxpy quad_over_lin form, §3.4.1)."""
    cp = pytest.importorskip("cvxpy")
    g, _, _ = huber_setting(6)
    g = ComparisonGraph.from_arrays(g.i[:200], g.j[:200], g.y[:200], n=g.n)
    M, a = 1.35, 0.7126
    est = huber_concomitant_scale(g, M=M, a=a, tol=1e-12)
    th, u, v, sig = cp.Variable(g.n), cp.Variable(g.m), cp.Variable(g.m), cp.Variable(pos=True)
    obj = (
        cp.quad_over_lin(cp.multiply(np.sqrt(g.w), u), sig)
        + 2 * M * cp.sum(cp.multiply(g.w, cp.abs(v)))
        + a * g.w.sum() * sig
    )
    cons = [u + v == g.X @ th - g.y, cp.sum(th) == 0]
    cp.Problem(cp.Minimize(obj), cons).solve(solver="CLARABEL")
    assert est.sigma == pytest.approx(float(sig.value), rel=1e-4)
    assert np.abs(est.fit.theta - th.value).max() < 1e-4


def test_cv_lambda_recovers_gross_outliers():
    """Spec §3.4.2: random-projection CV picks a λ between noise and the ±4 shifts."""
    g, _, truth = huber_setting(0)
    path = hlasso_path(g, n_lambdas=40)
    lam, table = cv_lambda(g, path.lambdas, folds=5, seed=0)
    f = hlasso(g, lam)
    assert (f.support & truth).sum() == truth.sum()
    assert (f.support & ~truth).sum() <= 3
    assert list(table.columns) == ["lambda", "cv_error", "cv_se"]
    res = fit_hlasso(to_frame(g.i, g.j, g.y), lambda_rule="cv", n_lambdas=40, diagnostics=False)
    assert res.outliers["is_outlier"].sum() == pytest.approx(30, abs=3)


def test_debiased_refit_is_ls_without_flagged_rows():
    g, th, _truth = huber_setting(1)
    f = hlasso(g, 1.0)
    deb = refit_without(g, f.support, f.theta)
    keep = ~f.support
    ref = np.linalg.lstsq(g.X.toarray()[keep], g.y[keep], rcond=None)[0]
    np.testing.assert_allclose(deb, ref - ref.mean(), atol=1e-8)
    # debiasing removes the λ-shrinkage: closer to the truth than the HLASSO scores here
    tc = th - th.mean()
    assert np.linalg.norm(deb - tc) < np.linalg.norm(hodgerank_scores(g) - tc)


def test_hlasso_warns_when_not_converged():
    g, _, _ = huber_setting(1)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        hlasso(g, 0.05, max_iter=3)


# ----------------------------------------------------------------------------------------------
# §5 identifiability
# ----------------------------------------------------------------------------------------------


def test_identifiability_small_design():
    """Spec test 21 (first part): n=16, m=1000, 5 % outliers: C2 holds in ≥ 95 % of 20 draws; ρ ≈ 2n/m."""
    holds, rhos = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        i, j = random_pairs(rng, 16, 1000)
        g = ComparisonGraph.from_arrays(i, j, np.ones(1000))
        r = identifiability(g, rng.choice(1000, 50, replace=False))
        holds.append(r.c2)
        rhos.append(r.rho)
        assert r.c1 and 0 < r.c_min <= 1
    assert np.mean(holds) >= 0.95
    assert 0.5 * 2 * 16 / 1000 <= np.mean(rhos) <= 2 * 2 * 16 / 1000


@pytest.mark.slow
def test_identifiability_dense_outliers_fail():
    """Spec test 21 (second part): n=60, m=2000, 20 % outliers: C2 fails in ≥ 80 % of 20 draws."""
    fails, rhos = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        i, j = random_pairs(rng, 60, 2000)
        g = ComparisonGraph.from_arrays(i, j, np.ones(2000))
        r = identifiability(g, rng.choice(2000, 400, replace=False))
        fails.append(not r.c2)
        rhos.append(r.rho)
    assert np.mean(fails) >= 0.8
    assert 0.5 * 2 * 60 / 2000 <= np.mean(rhos) <= 2 * 2 * 60 / 2000


# ----------------------------------------------------------------------------------------------
# §8.24 output tables
# ----------------------------------------------------------------------------------------------


def test_output_tables_shape_and_parquet_roundtrip(tmp_path):
    """Spec test 24 (library side): tables have the documented columns and a stable Arrow schema."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    i, j, y, _flip, _pos = mm13_data(1, sn=300, op=0.1)
    df = to_frame(i, j, y)
    res_a = fit_robust_hodgerank(df, method="lbi")
    res_b = fit_robust_hodgerank(df.drop(columns=["annotator"]).iloc[:200], method="hlasso")
    assert list(res_a.ranking.columns) == ["item", "score", "rank", "component", "n_comparisons"]
    assert list(res_a.outliers.columns)[:8] == [
        "row_id",
        "annotator",
        "item_a",
        "item_b",
        "outcome",
        "weight",
        "gamma",
        "entry_time",
    ]
    assert {"is_outlier", "path_rank", "undetectable", "residual"} <= set(res_a.outliers.columns)
    assert list(res_a.annotators.columns) == ["annotator", "n_comparisons", "n_outliers", "outlier_rate"]
    assert res_a.annotators["n_comparisons"].sum() == len(df)
    assert res_b.annotators.empty
    assert len(res_a.outliers) == len(df) and sorted(res_a.outliers["row_id"]) == list(range(len(df)))
    assert res_a.ranking["rank"].min() == 1 and res_a.ranking["rank"].max() == 16
    for name in ("ranking", "outliers", "annotators", "diagnostics"):
        schemas = []
        for res in (res_a, res_b):
            tab = pa.Table.from_pandas(getattr(res, name), preserve_index=False)
            path = tmp_path / f"{name}_{res.method}.parquet"
            pq.write_table(tab, path)
            back = pq.read_table(path)
            assert back.schema.equals(tab.schema)
            pd.testing.assert_frame_equal(back.to_pandas(), tab.to_pandas())
            schemas.append(tab.schema.remove_metadata())
        if name != "annotators":
            assert schemas[0].equals(schemas[1]), name


# ----------------------------------------------------------------------------------------------
# property-based checks (hypothesis)
# ----------------------------------------------------------------------------------------------

import hypothesis as hyp  # noqa: E402  (a test dependency: never skip these silently)

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
