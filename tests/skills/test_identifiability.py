"""Identifiability checks and diagnostics (docs/methods/skills.md §3; §6 AT-G1..G5): bipartite components
reported (and raised on), odd-cycle witnesses, signless-Laplacian eigenvalues in closed form, the
non-identifiability of a bipartite graph, the BFS structure against the graph components."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from crowdflow.graphs import components
from crowdflow.skills import fit_skills
from crowdflow.skills.identifiability import odd_cycle_witnesses, theorem12_error_bound
from crowdflow.skills.rank_one import rank_one_loss
from crowdflow.skills.spectra import signless_lambda_min
from crowdflow.synth import skills as synth


def fit_quiet(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fit_skills(*args, **kwargs)


def edge_labels(edges: np.ndarray, tasks_per_edge: int, skills: np.ndarray, seed: int = 0):
    wi, ti = synth.edge_assignment(edges, tasks_per_edge * len(edges))
    return synth.one_coin_labels(skills, wi, ti, 2, seed)


def skills_of(result, data: synth.SyntheticLabels) -> np.ndarray:
    return result.skills.set_index("worker").loc[list(data.workers), "skill"].to_numpy()


BIPARTITE_GRAPHS = {
    "even_ring": (synth.ring_edges(10), 10),
    "path": (synth.path_edges(6), 6),
    "star": (synth.star_edges(7), 7),
    "tree": (np.array([[0, 1], [0, 2], [1, 3], [1, 4], [2, 5], [5, 6]]), 7),
    "single_edge": (np.array([[0, 1]]), 2),
    "grid5x5": (synth.grid_edges(5, 5), 25),
}


@pytest.mark.parametrize("name", list(BIPARTITE_GRAPHS))
def test_at_g1_bipartite_reported_and_raise(name):
    edges, n = BIPARTITE_GRAPHS[name]
    data = edge_labels(edges, 5, np.full(n, 0.6), seed=1)
    res = fit_quiet(data.labels, method="pgd")
    assert set(res.skills["status"]) == {"bipartite_component"}
    assert res.diagnostics.loc[0, "bipartite"] and res.diagnostics.loc[0, "status"] == "bipartite_component"
    assert res.diagnostics.loc[0, "odd_cycle_witness_len"] == 0
    assert res.skills["skill"].isna().all() and (res.skills["vote_weight"] == 0).all()
    assert res.consensus["fallback"].all()
    with pytest.raises(ValueError) as exc:
        fit_skills(data.labels, method="pgd", identifiability_policy="raise")
    msg = str(exc.value)
    assert "component 0" in msg and f"{n} workers" in msg and "bipartite_component" in msg
    for wid in data.workers[:20]:  # ids truncated to 20 + count (docs/methods/skills.md §3.3)
        assert wid in msg
    if n > 20:
        assert f"(+{n - 20} more)" in msg


ODD_GRAPHS = {
    "odd_ring_11": (synth.ring_edges(11), 11),
    "triangle": (synth.ring_edges(3), 3),
    "k5": (synth.complete_edges(5), 5),
    "grid_diag": (synth.grid_edges(5, 5, extra=[(0, 6)]), 25),
}


@pytest.mark.parametrize("name", list(ODD_GRAPHS))
def test_at_g2_odd_cycle_witness(name):
    edges, n = ODD_GRAPHS[name]
    adj = synth.adjacency(edges, n)
    wit = odd_cycle_witnesses(adj)
    assert list(wit) == [0]
    cyc = wit[0]
    assert cyc.size % 2 == 1 and np.unique(cyc).size == cyc.size
    dense = adj.toarray()
    assert all(dense[cyc[k], cyc[(k + 1) % cyc.size]] > 0 for k in range(cyc.size))
    data = edge_labels(edges, 5, np.full(n, 0.6), seed=2)
    res = fit_quiet(data.labels, method="pgd")
    assert (res.skills["status"] == "ok").all()
    diag = res.diagnostics.iloc[0]
    assert not diag["bipartite"] and diag["status"] == "ok" and diag["odd_cycle_witness_len"] % 2 == 1


def test_odd_cycle_witness_many_components():
    # triangle + 7-ring + even ring + K4, disjoint, with shuffled node ids
    parts = [synth.ring_edges(3), synth.ring_edges(7), synth.ring_edges(6), synth.complete_edges(4)]
    offs = np.cumsum([0, 3, 7, 6])
    edges = np.vstack([p + o for p, o in zip(parts, offs, strict=True)])
    perm = np.random.default_rng(0).permutation(20)
    adj = synth.adjacency(perm[edges], 20)
    g = components(adj)
    wit = odd_cycle_witnesses(adj, g)
    assert set(wit) == set(np.flatnonzero(~g.bipartite).tolist()) and len(wit) == 3
    dense = adj.toarray()
    for c, cyc in wit.items():
        assert cyc.size % 2 == 1 and np.all(g.labels[cyc] == c)
        assert all(dense[cyc[k], cyc[(k + 1) % cyc.size]] > 0 for k in range(cyc.size))


def test_at_g3_disjoint_union():
    # triangle {w0,w1,w2} (10 tasks per edge), single edge {w3,w4}, isolated w5 (own tasks)
    tri = edge_labels(synth.ring_edges(3), 10, np.array([0.8, 0.7, 0.6]), seed=3).labels
    pair = pd.DataFrame(
        {
            "task": [f"e{k}" for k in range(10) for _ in (0, 1)],
            "worker": ["w0003", "w0004"] * 10,
            "label": ["1", "0"] * 10,
        }
    )
    iso = pd.DataFrame({"task": [f"i{k}" for k in range(5)], "worker": "w0005", "label": "1"})
    df = pd.concat([tri, pair, iso], ignore_index=True)
    res = fit_skills(df, method="pgd")
    sk = res.skills.set_index("worker")
    assert sk.loc[["w0000", "w0001", "w0002"], "status"].eq("ok").all()
    assert sk.loc[["w0003", "w0004"], "status"].eq("bipartite_component").all()
    assert sk.loc["w0005", "status"] == "isolated"
    assert np.isfinite(sk.loc[["w0000", "w0001", "w0002"], "skill"]).all()
    assert sk.loc[["w0003", "w0004", "w0005"], "skill"].isna().all()
    assert (sk.loc[["w0003", "w0004", "w0005"], "vote_weight"] == 0).all()
    assert sorted(res.diagnostics["status"]) == ["bipartite_component", "isolated", "ok"]
    assert len(set(sk["component"])) == 3
    cons = res.consensus.set_index("task")
    assert cons.loc[[f"e{k}" for k in range(10)], "fallback"].all()
    assert cons.loc[[f"i{k}" for k in range(5)], "label"].eq("1").all()  # MV fallback
    assert not cons.loc[tri["task"].unique(), "fallback"].any()
    assert res.metadata["frac_workers_identified"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="isolated"):
        fit_skills(df, method="pgd", identifiability_policy="raise")


def test_at_g4_signless_lambda_min_closed_forms():
    for n in (4, 6, 9):
        lam, method = signless_lambda_min(synth.adjacency(synth.complete_edges(n), n))
        assert lam == pytest.approx(n - 2, abs=1e-9) and method == "eigvalsh"
    for n in (3, 5, 11, 25):
        lam, _ = signless_lambda_min(synth.adjacency(synth.ring_edges(n), n))
        assert lam == pytest.approx(2 - 2 * math.cos(math.pi / n), abs=1e-9)
    assert signless_lambda_min(synth.adjacency(synth.ring_edges(3), 3))[0] == pytest.approx(1.0, abs=1e-12)
    for edges, n in BIPARTITE_GRAPHS.values():
        assert abs(signless_lambda_min(synth.adjacency(edges, n))[0]) < 1e-9


def test_at_g4_eigsh_matches_dense():
    n = 1500
    edges = synth.random_graph_edges(n, 0.01, seed=4)
    adj = synth.adjacency(edges, n)
    assert components(adj).n_components == 1
    dense, m1 = signless_lambda_min(adj, dense_max=2000)
    sparse, m2 = signless_lambda_min(adj, dense_max=1000)
    assert (m1, m2) == ("eigvalsh", "lobpcg")
    assert abs(dense - sparse) <= 1e-6
    # the fallbacks (taken when LOBPCG's residual check fails; here: a vertex without edges) agree too: dense up to
    # dense_fallback_max, Lanczos above
    lone = sp.block_diag([adj, sp.csr_matrix((1, 1))]).tocsr()
    fallback, m3 = signless_lambda_min(lone, dense_max=1000)
    assert m3 == "eigvalsh" and abs(fallback) <= 1e-9
    fallback, m3 = signless_lambda_min(lone, dense_max=1000, dense_fallback_max=1000)
    assert m3 == "eigsh" and abs(fallback) <= 1e-6
    # weighted, on a smaller graph
    e2 = synth.random_graph_edges(400, 0.03, seed=5)
    adj2 = synth.adjacency(e2, 400, np.random.default_rng(4).integers(1, 10, len(e2)).astype(float))
    assert abs(signless_lambda_min(adj2, 2000)[0] - signless_lambda_min(adj2, 100)[0]) <= 1e-6


def test_diagnostics_report_eig_method_and_spectra():
    edges = synth.ring_edges(11)
    data = edge_labels(edges, 3, np.full(11, 0.7), seed=0)
    assert (
        fit_quiet(data.labels, method="pgd", spectral=False).diagnostics.iloc[0]["eig_method"] == "none"
    )  # spectra off
    res = fit_quiet(data.labels, method="pgd", weighting="binary", spectral=True)
    d = res.diagnostics.iloc[0]
    assert d["eig_method"] == "eigvalsh"
    assert d["lambda_min_signless_unit"] == pytest.approx(2 - 2 * math.cos(math.pi / 11), abs=1e-9)
    assert d["lambda_min_signless_weighted"] == pytest.approx(d["lambda_min_signless_unit"], abs=1e-9)
    assert d["N_min"] == d["N_max"] == 3 and d["d_max"] == 2 and d["D_sum"] == 22
    assert d["norm_N_2"] == pytest.approx(6.0) and d["norm_N_inf"] == 6
    res2 = fit_quiet(data.labels, method="pgd", weighting="binary", spectral=True, dense_eig_max=5)
    assert res2.diagnostics.iloc[0]["eig_method"] == "lobpcg"
    assert res2.diagnostics.iloc[0]["lambda_min_signless_unit"] == pytest.approx(
        d["lambda_min_signless_unit"], abs=1e-6
    )
    # above the stored-entry limit the eigenvalues are skipped, and said so
    res3 = fit_quiet(data.labels, method="pgd", weighting="binary", spectral=True, spectral_max_nnz=10)
    assert res3.diagnostics.iloc[0]["eig_method"] == "skipped"
    assert np.isnan(res3.diagnostics.iloc[0]["lambda_min_signless_unit"])


def test_at_g5_non_identifiability_demo():
    edges = synth.grid_edges(4, 4)
    g = components(synth.adjacency(edges, 16))
    assert g.bipartite[0]
    s = np.random.default_rng(0).uniform(0.3, 0.9, 16)
    alpha = 1.5
    s2 = np.where(g.colour == 0, alpha * s, s / alpha)
    c1, c2 = synth.rank_one_moments(edges, s), synth.rank_one_moments(edges, s2)
    np.testing.assert_allclose(c1.toarray(), c2.toarray(), atol=1e-15)
    w = synth.adjacency(edges, 16)
    assert rank_one_loss(c1, w, s) == pytest.approx(rank_one_loss(c1, w, s2), abs=1e-15)
    assert not np.allclose(s, s2)


def test_graph_helpers_do_not_mutate_inputs():
    adj = synth.adjacency(synth.ring_edges(5), 5).tolil()
    adj[2, 2] = 7.0  # a self-loop must be ignored, and left in place
    adj = adj.tocsr()
    before = (adj.data.copy(), adj.indices.copy(), adj.indptr.copy())
    assert odd_cycle_witnesses(adj)[0].size == 5
    assert signless_lambda_min(adj)[0] == pytest.approx(2 - 2 * math.cos(math.pi / 5), abs=1e-12)
    theorem12_error_bound(adj, 0.4, 0.6, 0.01)
    for arr, ref in zip((adj.data, adj.indices, adj.indptr), before, strict=True):
        np.testing.assert_array_equal(arr, ref)


@pytest.mark.parametrize("seed", range(6))
def test_graph_structure_matches_components(seed):
    from crowdflow.graphs import graph_structure

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    edges = synth.random_graph_edges(n, float(rng.uniform(0.01, 0.15)), seed=seed)
    adj = synth.adjacency(edges, n) if len(edges) else sp.csr_matrix((n, n))
    st = graph_structure(adj)
    ref = components(adj)
    np.testing.assert_array_equal(st.graph.labels, ref.labels)
    np.testing.assert_array_equal(st.graph.bipartite, ref.bipartite)
    np.testing.assert_array_equal(st.graph.sizes, ref.sizes)
    dense = adj.toarray() != 0
    for c in np.flatnonzero(ref.bipartite):  # level parity is a proper 2-colouring
        members = np.flatnonzero(st.graph.labels == c)
        sub = dense[np.ix_(members, members)]
        col = st.graph.colour[members]
        assert not np.any(sub & (col[:, None] == col[None, :]))
    for c, cyc in odd_cycle_witnesses(adj).items():
        assert cyc.size % 2 == 1 and not ref.bipartite[c] and len(set(cyc.tolist())) == cyc.size
        assert all(dense[cyc[k], cyc[(k + 1) % cyc.size]] for k in range(cyc.size))


def test_star_with_one_odd_cycle_identifies_skills():
    n = 9
    s = np.linspace(0.3, 0.9, n)
    data = edge_labels(synth.star_triangle_edges(n), 2000, s, seed=2)
    res = fit_quiet(data.labels, method="pgd", solver="scaled")
    assert (res.skills["status"] == "ok").all() and np.isfinite(res.skills["skill"]).all()
    est = skills_of(res, data)
    # one triangle pins the hub's scale (s_0² = C01 C02 / C12, noisy); the leaves follow C_0j / s_0
    assert np.max(np.abs(est - s)) < 0.25 and np.corrcoef(est, s)[0, 1] > 0.85
    star = fit_quiet(edge_labels(synth.star_edges(n), 400, s, seed=2).labels, method="pgd")
    assert (star.skills["status"] == "bipartite_component").all() and star.skills["skill"].isna().all()
