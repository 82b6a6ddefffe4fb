"""Acceptance tests of spec skills-rank-one.md §6 for crowdflow.skills.fit.

Default run: unit/identifiability/optimisation tests and the statistical tests at the spec's seed
counts (all small). ``@pytest.mark.slow``: the W = 10^4 scale test (AT-P1), the W = 10^5 memory
guard (AT-U5) and the η = 0.01 variant of AT-O1.
"""

from __future__ import annotations

import io
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from crowdflow.graphs import components
from crowdflow.labels import encode_labels
from crowdflow.metrics import majority_vote_expected_error
from crowdflow.skills import (
    LabelMoments,
    edge_weights,
    fit_rank_one,
    fit_skills,
    label_moments,
    odd_cycle_witnesses,
    prediction_error,
    prepare_labels,
    prune_spammer_edges,
    rank_one_gradient,
    rank_one_loss,
    resolve_signs,
    signless_lambda_min,
    skill_box,
    theorem12_error_bound,
    vote_weights,
    weighted_consensus,
)
from crowdflow.synth import skills as synth

DATA = Path(__file__).resolve().parents[2] / "crowdflow" / "data"
SHARED = Path("/work/shared/data")


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def fit_quiet(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fit_skills(*args, **kwargs)


def oracle_error(data: synth.SyntheticLabels) -> float:
    """Bayes error: MAP vote (spec §2.7) with the true skills."""
    lm, _ = prepare_labels(data.labels, classes=data.classes)
    pos = {w: i for i, w in enumerate(data.workers)}
    s = data.skills[[pos[w] for w in lm.workers]]
    cons = weighted_consensus(lm, vote_weights(s, lm.n_classes), tie_break="random", seed=0)
    return prediction_error(cons.consensus, data.truth)


def skills_of(result, data: synth.SyntheticLabels) -> np.ndarray:
    return result.skills.set_index("worker").loc[list(data.workers), "skill"].to_numpy()


def edge_labels(edges: np.ndarray, tasks_per_edge: int, skills: np.ndarray, seed: int = 0):
    wi, ti = synth.edge_assignment(edges, tasks_per_edge * len(edges))
    return synth.one_coin_labels(skills, wi, ti, 2, seed)


# ----------------------------------------------------------------------------------------------
# AT-U1..U5  unit / algebra
# ----------------------------------------------------------------------------------------------
HAND = [  # (task, worker, ±1 label)
    ("t1", "a", 1),
    ("t1", "b", 1),
    ("t1", "c", -1),
    ("t2", "a", 1),
    ("t2", "b", -1),
    ("t3", "b", 1),
    ("t3", "c", 1),
    ("t4", "a", -1),
    ("t4", "b", -1),
    ("t4", "c", -1),
]


@pytest.mark.parametrize("coding", ["pm1", "01", "strings"])
def test_at_u1_hand_moments(coding):
    mapping = {"pm1": {1: "1", -1: "-1"}, "01": {1: "1", -1: "0"}, "strings": {1: "yes", -1: "no"}}[coding]
    df = pd.DataFrame([(t, w, mapping[y]) for t, w, y in HAND], columns=["task", "worker", "label"])
    lm, _ = prepare_labels(df)
    mo = label_moments(lm)
    n = mo.co_labels.toarray()
    c = mo.c_hat.toarray()
    # hand computation: N_ab = 3 (t1,t2,t4), N_ac = 2 (t1,t4), N_bc = 3 (t1,t3,t4)
    assert np.array_equal(n, [[0, 3, 2], [3, 0, 3], [2, 3, 0]])
    # C~_ab = (1 - 1 + 1)/3, C~_ac = (-1 + 1)/2, C~_bc = (-1 + 1 + 1)/3
    expected = np.array([[0, 1 / 3, 0], [1 / 3, 0, 1 / 3], [0, 1 / 3, 0]])
    np.testing.assert_allclose(c, expected, atol=1e-15)
    assert np.array_equal(mo.agreements.toarray(), [[0, 2, 1], [2, 0, 2], [1, 2, 0]])


def test_at_u1_m2_path_equals_pm1_product():
    data = synth.one_coin_labels(
        np.linspace(-0.5, 0.9, 40), *synth.random_assignment(40, 2000, 4, seed=3), n_classes=2, seed=3
    )
    lm, _ = prepare_labels(data.labels)
    mo = label_moments(lm)
    y = np.where(lm.class_idx == 1, 1.0, -1.0)
    ym = sp.csr_matrix((y, (lm.worker_idx, lm.task_idx)), shape=(lm.n_workers, lm.n_tasks))
    s = (ym @ ym.T).tocsr()
    n = mo.co_labels
    s_on_n = np.asarray(s[n.tocoo().row, n.tocoo().col]).ravel()
    c_tilde = s_on_n / n.tocoo().data
    np.testing.assert_allclose(mo.c_hat.tocoo().data, c_tilde, rtol=0, atol=1e-12)
    assert n.nnz > 0 and np.all(n.diagonal() == 0)


def test_at_u2_lemma6_per_label_objective():
    rng = np.random.default_rng(7)
    data = synth.one_coin_labels(
        rng.uniform(-0.3, 0.9, 12), *synth.random_assignment(12, 150, 4, seed=7), n_classes=2, seed=7
    )
    lm, _ = prepare_labels(data.labels)
    mo = label_moments(lm)
    y = np.where(lm.class_idx == 1, 1.0, -1.0)
    by_task: dict[int, list[tuple[int, float]]] = {}
    for i, t, v in zip(lm.worker_idx, lm.task_idx, y, strict=True):
        by_task.setdefault(int(t), []).append((int(i), float(v)))
    n = mo.co_labels.tocoo()
    upper = n.row < n.col
    c_tilde = mo.c_hat.tocoo().data[upper]
    const = 0.5 * float(np.sum(n.data[upper] * (1 - c_tilde**2)))
    diffs = []
    for _ in range(5):
        x = rng.uniform(-1, 1, lm.n_workers)
        per_label = 0.0
        for entries in by_task.values():  # brute force: pairs i < j labelling the same task
            for a in range(len(entries)):
                for b in range(a + 1, len(entries)):
                    (i, yi), (j, yj) = entries[a], entries[b]
                    per_label += 0.5 * (yi * yj - x[i] * x[j]) ** 2
        diffs.append(per_label - rank_one_loss(mo.c_hat, mo.co_labels, x))
    np.testing.assert_allclose(diffs, const, rtol=0, atol=1e-9)


def test_at_u3_multiclass_unbiased():
    m, w, t = 4, 5, 200_000
    p = np.array([0.9, 0.7, 0.5, 0.35, 0.25])
    s = (m * p - 1) / (m - 1)
    data = synth.one_coin_labels(s, *synth.clique_assignment(w, t), n_classes=m, seed=11)
    lm, _ = prepare_labels(data.labels, classes=data.classes)
    c = label_moments(lm).c_hat.toarray()
    expected = np.outer(s, s)
    off = ~np.eye(w, dtype=bool)
    assert np.max(np.abs(c[off] - expected[off])) <= 0.01


def test_at_u4_gradient_finite_differences():
    rng = np.random.default_rng(5)
    edges = synth.random_graph_edges(40, 0.15, seed=5)
    w = synth.adjacency(edges, 40, rng.integers(1, 30, len(edges)).astype(float))
    c = synth.adjacency(edges, 40, rng.uniform(-1, 1, len(edges)))
    x = rng.uniform(-0.9, 0.9, 40)
    g = rank_one_gradient(c, w, x)
    h = 1e-6
    fd = np.array([(rank_one_loss(c, w, x + h * e) - rank_one_loss(c, w, x - h * e)) / (2 * h) for e in np.eye(40)])
    np.testing.assert_allclose(g, fd, rtol=0, atol=1e-6 * max(1.0, np.abs(g).max()))


@pytest.mark.slow
def test_at_u5_no_dense_allocation_1e5_workers():
    import tracemalloc

    n_w = 100_000
    wi, ti = synth.random_assignment(n_w, 150_000, 3, seed=1)
    data = synth.one_coin_labels(np.full(n_w, 0.6), wi, ti, 2, seed=1)
    tracemalloc.start()
    res = fit_quiet(data.labels, max_iter=50, spectral=False)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(res.skills) == data.labels["worker"].nunique()
    assert peak < 2e9  # a dense W×W float64 would need 8e10 bytes


def test_at_u5_memory_guard_5000_workers_with_eigsh():
    """Full pipeline incl. eigsh diagnostics on W = 5000: one dense W×W float64 would need 200 MB."""
    import tracemalloc

    n_w = 5000
    wi, ti = synth.random_assignment(n_w, 7500, 3, seed=2)
    data = synth.one_coin_labels(np.full(n_w, 0.6), wi, ti, 2, seed=2)
    tracemalloc.start()
    res = fit_quiet(data.labels, max_iter=20, spectral=True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(res.skills) == data.labels["worker"].nunique()
    assert (res.diagnostics["eig_method"] == "eigsh").any()
    assert peak < 5e7


# ----------------------------------------------------------------------------------------------
# AT-G1..G5  identifiability
# ----------------------------------------------------------------------------------------------
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
    res = fit_quiet(data.labels)
    assert set(res.skills["status"]) == {"bipartite_component"}
    assert res.diagnostics.loc[0, "bipartite"] and res.diagnostics.loc[0, "status"] == "bipartite_component"
    assert res.diagnostics.loc[0, "odd_cycle_witness_len"] == 0
    assert res.skills["skill"].isna().all() and (res.skills["vote_weight"] == 0).all()
    assert res.consensus["fallback"].all()
    with pytest.raises(ValueError) as exc:
        fit_skills(data.labels, identifiability_policy="raise")
    msg = str(exc.value)
    assert "component 0" in msg and f"{n} workers" in msg and "bipartite_component" in msg
    for wid in data.workers[:20]:  # ids truncated to 20 + count (spec §3.3)
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
    res = fit_quiet(data.labels)
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
    res = fit_skills(df)
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
        fit_skills(df, identifiability_policy="raise")


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
    assert (m1, m2) == ("eigvalsh", "eigsh")
    assert abs(dense - sparse) <= 1e-6
    # weighted, on a smaller graph
    e2 = synth.random_graph_edges(400, 0.03, seed=5)
    adj2 = synth.adjacency(e2, 400, np.random.default_rng(4).integers(1, 10, len(e2)).astype(float))
    assert abs(signless_lambda_min(adj2, 2000)[0] - signless_lambda_min(adj2, 100)[0]) <= 1e-6


def test_diagnostics_report_eig_method_and_spectra():
    edges = synth.ring_edges(11)
    data = edge_labels(edges, 3, np.full(11, 0.7), seed=0)
    assert fit_quiet(data.labels).diagnostics.iloc[0]["eig_method"] == "none"  # spectra are opt-in
    res = fit_quiet(data.labels, weighting="binary", spectral=True)
    d = res.diagnostics.iloc[0]
    assert d["eig_method"] == "eigvalsh"
    assert d["lambda_min_signless_unit"] == pytest.approx(2 - 2 * math.cos(math.pi / 11), abs=1e-9)
    assert d["lambda_min_signless_weighted"] == pytest.approx(d["lambda_min_signless_unit"], abs=1e-9)
    assert d["N_min"] == d["N_max"] == 3 and d["d_max"] == 2 and d["D_sum"] == 22
    assert d["norm_N_2"] == pytest.approx(6.0) and d["norm_N_inf"] == 6
    res2 = fit_quiet(data.labels, weighting="binary", spectral=True, dense_eig_max=5)
    assert res2.diagnostics.iloc[0]["eig_method"] == "eigsh"
    assert res2.diagnostics.iloc[0]["lambda_min_signless_unit"] == pytest.approx(
        d["lambda_min_signless_unit"], abs=1e-6
    )
    # above the stored-entry limit the eigenvalues are skipped, and said so
    res3 = fit_quiet(data.labels, weighting="binary", spectral=True, spectral_max_nnz=10)
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


# ----------------------------------------------------------------------------------------------
# AT-O1..O4  optimisation
# ----------------------------------------------------------------------------------------------
def _connected_odd_random_graph(n: int, p: float) -> np.ndarray:
    for seed in range(100):
        e = synth.random_graph_edges(n, p, seed=seed)
        g = components(synth.adjacency(e, n))
        if g.n_components == 1 and not g.bipartite[0]:
            return e
    raise AssertionError("no connected non-bipartite graph found")


O_GRAPHS = {
    "ring25": synth.ring_edges(25),
    "grid_plus_edge": synth.grid_edges(5, 5, extra=[(0, 6)]),
    "gnp": _connected_odd_random_graph(25, 0.15),
}


@pytest.mark.parametrize("name", list(O_GRAPHS))
def test_at_o1_noiseless_recovery(name):
    edges = O_GRAPHS[name]
    s = np.random.default_rng(1).uniform(0.4, 0.6, 25)
    c = synth.rank_one_moments(edges, s)
    w = synth.adjacency(edges, 25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # tol = 0: runs all 50000 iterations
        fit = fit_rank_one(c, w, -1.0, 1.0, x0=0.6, tol=0.0, max_iter=50_000)
    assert fit.iterations == 50_000
    assert np.max(np.abs(fit.x - s)) <= 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("name", ["grid_plus_edge", "gnp"])
def test_at_o1_paper_step_size(name):
    edges = O_GRAPHS[name]
    s = np.random.default_rng(1).uniform(0.4, 0.6, 25)
    fit = fit_rank_one(
        synth.rank_one_moments(edges, s),
        synth.adjacency(edges, 25),
        -1.0,
        1.0,
        x0=0.6,
        eta=0.01,
        tol=1e-12,
        max_iter=100_000,
    )
    assert np.max(np.abs(fit.x - s)) <= 1e-6


@pytest.mark.parametrize("name", list(O_GRAPHS))
def test_at_o2_noisy_gd_vs_eg(name):
    edges = O_GRAPHS[name]
    s = np.random.default_rng(2).uniform(0.4, 0.6, 25)
    c = synth.rank_one_moments(edges, s, noise=0.01, seed=2)
    w = synth.adjacency(edges, 25)
    gd = fit_rank_one(c, w, -1.0, 1.0, x0=0.6, tol=1e-10, max_iter=100_000)
    eg = fit_rank_one(c, w, 0.3, 0.7, x0=0.6, tol=1e-10, max_iter=100_000, solver="eg")
    assert gd.converged and eg.converged
    assert np.max(np.abs(gd.x - s)) <= 0.05
    assert np.max(np.abs(eg.x - s)) <= 0.05
    assert np.max(np.abs(gd.x - eg.x)) <= 0.01
    delta = c - synth.rank_one_moments(edges, s)
    max_delta = float(np.abs(delta.data).max())
    bound = theorem12_error_bound(w, kappa=0.4, big_k=0.6, max_delta=max_delta)
    assert bound >= np.linalg.norm(eg.x - s)
    if name == "ring25":  # by hand: λ_min(L_s) of the odd ring C_25 = 2 − 2cos(π/25), N_min = 1, ‖N‖_∞ = 2
        mu = 0.4**2 * (2 - 2 * np.cos(np.pi / 25))
        assert bound == pytest.approx(0.6 * 5 * 2 / mu * max_delta, rel=1e-9)
    if name == "gnp":  # where the bound says something: below the 1.5 any point of the EG box is within
        assert bound < 1.5
    # EG fixed point: sum_j N_ij (x_i x_j - C_ij) = 0 inside the box
    d = eg.x * (w @ eg.x) - np.asarray(w.multiply(c).sum(axis=1)).ravel()
    assert np.max(np.abs(d)) < 1e-6


def test_at_o3_monotone_loss_default_eta():
    rng = np.random.default_rng(3)
    s = np.where(np.arange(40) < 12, rng.uniform(-0.3, 0.1, 40), rng.uniform(0.3, 0.9, 40))
    data = synth.one_coin_labels(s, *synth.random_assignment(40, 600, 4, seed=3), 2, seed=3)
    lm, _ = prepare_labels(data.labels)
    mo = label_moments(lm)
    w = edge_weights(mo.co_labels, "count")
    lo, hi = skill_box(lm.labels_per_worker(), 2, 1.0)
    for solver in ("gd", "scaled"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            fit = fit_rank_one(mo.c_hat, w, lo, hi, max_iter=3000, solver=solver)
        tr = fit.loss_trace
        assert tr.size == fit.iterations + 1
        assert np.all(np.diff(tr) <= 1e-12 * max(1.0, tr[0]))
        assert tr[0] == pytest.approx(rank_one_loss(mo.c_hat, w, np.clip(np.full(40, 0.5), lo, hi)), rel=1e-10)
        assert tr[-1] == pytest.approx(rank_one_loss(mo.c_hat, w, fit.x), rel=1e-12)


def test_pgd_reaches_bound_constrained_optimum():
    """Cross-check against L-BFGS-B on the same box, and 'scaled' == 'gd' at the optimum."""
    rng = np.random.default_rng(4)
    s = rng.uniform(-0.2, 0.9, 20)
    data = synth.one_coin_labels(s, *synth.random_assignment(20, 400, 4, seed=4), 2, seed=4)
    lm, _ = prepare_labels(data.labels)
    mo = label_moments(lm)
    w = edge_weights(mo.co_labels, "count")
    lo, hi = skill_box(lm.labels_per_worker(), 2, 1.0)
    gd = fit_rank_one(mo.c_hat, w, lo, hi, tol=1e-12, max_iter=200_000)
    sc = fit_rank_one(mo.c_hat, w, lo, hi, tol=1e-12, max_iter=200_000, solver="scaled")
    ref = minimize(
        lambda x: (rank_one_loss(mo.c_hat, w, x), rank_one_gradient(mo.c_hat, w, x)),
        np.clip(np.full(20, 0.5), lo, hi),
        jac=True,
        method="L-BFGS-B",
        bounds=list(zip(lo, hi, strict=True)),
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000},
    )
    assert gd.converged and sc.converged
    assert gd.final_loss <= ref.fun + 1e-9
    np.testing.assert_allclose(gd.x, ref.x, atol=1e-5)
    np.testing.assert_allclose(gd.x, sc.x, atol=1e-8)
    # KKT: projected gradient vanishes
    g = rank_one_gradient(mo.c_hat, w, gd.x)
    assert np.max(np.abs(np.clip(gd.x - g, lo, hi) - gd.x)) < 1e-8


def test_triangle_closed_form():
    # noiseless triangle: s_1^2 = C12 C13 / C23
    s = np.array([0.9, 0.6, 0.5])
    c = synth.rank_one_moments(synth.ring_edges(3), s)
    fit = fit_rank_one(c, synth.adjacency(synth.ring_edges(3), 3), -1, 1, tol=1e-14, max_iter=100_000)
    assert fit.x[0] == pytest.approx(math.sqrt(c[0, 1] * c[0, 2] / c[1, 2]), abs=1e-10)
    np.testing.assert_allclose(fit.x, s, atol=1e-10)


def test_at_o4_sign_convention():
    rng = np.random.default_rng(6)
    s = rng.uniform(0.2, 0.8, 30)
    wi, ti = synth.random_assignment(30, 2000, 5, seed=6)
    pos = synth.one_coin_labels(s, wi, ti, 2, seed=6)
    neg = synth.one_coin_labels(-s, wi, ti, 2, seed=6)
    r_pos, r_neg = fit_quiet(pos.labels), fit_quiet(neg.labels)
    # negated true skills: the sum rule picks the mirrored solution, i.e. the same skills (+s)
    assert np.sqrt(np.mean((skills_of(r_neg, neg) - s) ** 2)) <= 0.1
    assert np.sqrt(np.mean((skills_of(r_pos, pos) - s) ** 2)) <= 0.1
    # documented sign-convention failure: the predictions are the mirror image (error ≈ 1 − error(+s))
    e_pos, e_neg = prediction_error(r_pos.consensus, pos.truth), prediction_error(r_neg.consensus, neg.truth)
    assert e_pos <= 0.15 and abs(e_neg - (1 - e_pos)) <= 0.03
    # flipping every label: identical skills, every prediction flipped
    flipped = pos.labels.assign(label=np.where(pos.labels["label"] == "1", "0", "1"))
    r_flip = fit_quiet(flipped)
    np.testing.assert_array_equal(r_flip.skills["skill"].to_numpy(), r_pos.skills["skill"].to_numpy())
    a = r_pos.consensus["label"].to_numpy()
    b = r_flip.consensus["label"].to_numpy()
    assert np.all(a != b)  # 5 labels per task: no ties
    # sign rule is applied per component: two components, one mirrored
    x = np.array([0.5, 0.4, -0.6, -0.2, -0.3])
    lab = np.array([0, 0, 0, 1, 1])
    np.testing.assert_allclose(resolve_signs(x, lab), [0.5, 0.4, -0.6, 0.2, 0.3])


def test_sign_mode_bfs_noiseless_and_real_signs():
    s = np.array([0.8, -0.5, 0.6, 0.7, -0.3, 0.9, 0.4])
    edges = synth.complete_edges(7)
    c = synth.rank_one_moments(edges, s)
    w = synth.adjacency(edges, 7)
    fit = fit_rank_one(abs(c), w, 1e-3, 1.0, tol=1e-14, max_iter=100_000)
    np.testing.assert_allclose(fit.x, np.abs(s), atol=1e-9)
    x = resolve_signs(fit.x, np.zeros(7, dtype=int), "bfs", c_hat=c)
    np.testing.assert_allclose(x, s, atol=1e-9)
    # S2 with EG on labels: agrees with S1 on clearly skilled data
    data = synth.one_coin_labels(np.linspace(0.3, 0.9, 15), *synth.random_assignment(15, 1500, 4, seed=8), 2, seed=8)
    r1 = fit_quiet(data.labels, solver="scaled")
    r2 = fit_quiet(data.labels, sign_mode="bfs", solver="eg", max_iter=50_000)
    np.testing.assert_allclose(r1.skills["skill"], r2.skills["skill"], atol=0.05)
    with pytest.raises(ValueError, match="bfs"):
        fit_skills(data.labels, solver="eg")


# ----------------------------------------------------------------------------------------------
# AT-S1..S4, AT-M1  statistical
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ab", [(5, 1), (2, 5), (1, 3)])
def test_at_s1_table1(ab):
    errs, oracle = [], []
    for seed in range(10):
        s = synth.beta_skills(*ab, 11, seed=seed)
        data = synth.one_coin_labels(s, *synth.clique_assignment(11, 300), 2, seed=seed)
        res = fit_quiet(data.labels, classes=data.classes)
        errs.append(prediction_error(res.consensus, data.truth))
        oracle.append(oracle_error(data))
    if ab == (5, 1):
        assert np.mean(errs) <= 0.01 and np.mean(errs) <= np.mean(oracle) + 0.005
    else:
        assert np.mean(errs) >= 0.9


def test_at_s2_sparse_with_spammers():
    errs, oracle, mv, rmse = [], [], [], []
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        s = np.where(np.arange(30) < 12, rng.uniform(-0.05, 0.05, 30), rng.uniform(0.3, 0.9, 30))
        data = synth.one_coin_labels(s, *synth.random_assignment(30, 3000, 5, seed=seed), 2, seed=seed)
        res = fit_quiet(data.labels, classes=data.classes)
        errs.append(prediction_error(res.consensus, data.truth))
        oracle.append(oracle_error(data))
        mv.append(prediction_error(fit_skills(data.labels, "mv").consensus, data.truth))
        rmse.append(np.sqrt(np.mean((skills_of(res, data) - s) ** 2)))
    assert np.mean(errs) <= np.mean(oracle) + 0.01
    assert np.mean(errs) <= np.mean(mv) - 0.05
    assert max(rmse) <= 0.12


def test_at_s3_weighting():
    err_n, err_b = [], []
    for seed in range(20):
        rng = np.random.default_rng(200 + seed)
        s = np.where(np.arange(20) < 10, rng.uniform(-0.1, 0.1, 20), rng.uniform(0.2, 0.8, 20))
        prob = np.where(np.arange(20) < 10, 1.0, 4.0)  # skilled workers 4x as likely to be drawn
        data = synth.one_coin_labels(
            s, *synth.random_assignment(20, 300, 3, seed=seed, worker_weights=prob), 2, seed=seed
        )
        err_n.append(prediction_error(fit_quiet(data.labels).consensus, data.truth))
        err_b.append(prediction_error(fit_quiet(data.labels, weighting="binary").consensus, data.truth))
    assert np.mean(err_n) <= np.mean(err_b) - 0.05


def test_at_s4_ring_more_tasks_helps():
    s = np.linspace(-0.3, 0.8, 11)
    mean_err = {}
    mean_mv = {}
    for t in (11, 330):
        errs, mv = [], []
        for seed in range(15):
            data = synth.one_coin_labels(s, *synth.edge_assignment(synth.ring_edges(11), t), 2, seed=seed)
            errs.append(prediction_error(fit_quiet(data.labels, classes=data.classes).consensus, data.truth))
            mv.append(prediction_error(fit_skills(data.labels, "mv", classes=data.classes).consensus, data.truth))
        mean_err[t], mean_mv[t] = np.mean(errs), np.mean(mv)
    assert mean_err[330] < mean_err[11]
    assert mean_err[330] < mean_mv[330]


# Table 2 (spec §5.3): star plus one triangle, noise injected into C, W = 21 and 91 (paper: 50 runs
# at W = 21/51/71/91; the full table: python -m benchmarks.skills_table2, results/skills.md)
TABLE2_WORKERS = (21, 91)
TABLE2_SEEDS = range(10)


def injected_moments(inst: synth.InjectedNoiseInstance) -> LabelMoments:
    """The injected C on the star+triangle support as label moments.

    N = 1 on every edge (so weights "count", "binary" and "square" coincide), agreement rate
    a = (1 + C)/2 so that C^ = 2a − 1 = C.
    """
    agree = inst.support.copy()
    agree.data = (1.0 + inst.c_hat.data) / 2.0
    return LabelMoments(co_labels=inst.support, agreements=agree, c_hat=inst.c_hat, n_classes=2)


def table2_errors(n_workers: int, seed: int, half_width: float = 0.2) -> tuple[float, float]:
    """(Bayes error, PGD error) of one Table-2 run: library defaults (gd, τ = 1 box from the
    evaluation labels' n_i, sum rule, MAP vote), skills fitted from the injected C only."""
    inst = synth.star_triangle_injected(n_workers, seed, half_width=half_width)
    data = inst.data
    res = fit_quiet(data.labels, classes=data.classes, moments=injected_moments(inst))
    assert (res.skills["status"] == "ok").all()
    return oracle_error(data), prediction_error(res.consensus, data.truth)


@pytest.fixture(scope="module")
def table2_runs() -> dict[int, np.ndarray]:
    """W -> array (runs, 2) of (Bayes error, PGD error)."""
    return {w: np.array([table2_errors(w, seed) for seed in TABLE2_SEEDS]) for w in TABLE2_WORKERS}


@pytest.mark.xfail(
    strict=True,
    reason="issue #3 'within 0.01 of the Bayes error' is not met under the reading of "
    "synth.star_triangle_injected: mean PGD - Bayes = +0.016 to +0.018 over 50 runs per W "
    "(benchmarks/results/skills.md); leaves fitted as C_0j / s_0 with the TRUE hub skill still "
    "leave +0.012 to +0.015, so the gap comes from the U[-0.2, 0.2] noise on the star edges, not from PGD",
)
@pytest.mark.parametrize("n_workers", TABLE2_WORKERS)
def test_table2_star_triangle_within_001_of_bayes(table2_runs, n_workers):
    """Issue #3 acceptance criterion on paper Table 2 (spec §5.3), as a strict xfail.

    Reading (:func:`crowdflow.synth.skills.star_triangle_injected`): skills on the grid linspace(0.8, −0.3, W)
    (hub = worker 0 = most skilled, triangle closed by workers 1, 2); C_ij = s_i s_j + ξ_ij,
    ξ_ij ~ U[−0.2, 0.2] per edge of the star+triangle; PGD fits C on that support only; evaluation
    on T = 3000 tasks, each labelled by 12 distinct uniformly random workers (Bayes error at the
    paper's level, ~0.05–0.06). Asserts mean PGD error − mean Bayes error ≤ 0.01 (10 runs per W).
    """
    bayes, pgd = table2_runs[n_workers].mean(axis=0)
    assert pgd - bayes <= 0.01


@pytest.mark.parametrize("n_workers", TABLE2_WORKERS)
def test_table2_within_001_of_bayes_with_the_noise_in_fig45_notation(n_workers):
    """The same setup with ξ ~ 0.2·U[−1/2, 1/2] = U[−0.1, 0.1], the way the paper writes its other
    injected noise (Figs. 4–5, spec §5.7), instead of the spec's U[−0.2, 0.2]: PGD is within 0.01 of
    the Bayes error (measured +0.0035 to +0.0060 over 20 runs per W; the paper: +0.0000 to +0.0044).

    Not the spec's criterion (that stays the strict xfail above): it shows the gap there comes from
    the noise level on the star edges, and pins PGD's estimation at this level. The evaluation labels
    are those of the test above, so a plain vote (+0.13) or the sign-flipped solution fails it.
    """
    runs = np.array([table2_errors(n_workers, seed, half_width=0.1) for seed in TABLE2_SEEDS])
    bayes, pgd = runs.mean(axis=0)
    assert 0.035 <= bayes <= 0.075
    assert pgd - bayes <= 0.01


@pytest.mark.parametrize("n_workers", TABLE2_WORKERS)
def test_table2_star_triangle_regression(table2_runs, n_workers):
    """Regression guard for the Table 2 reproduction (same reading and runs as the xfail above).

    Not the issue's criterion (see the strict xfail): pins what the reading does reproduce. The
    Bayes error is at the paper's level (paper 0.0425–0.0634; measured 0.052–0.061 over 50 runs)
    and PGD stays within 0.03 of it (measured +0.016 to +0.018 over 50 runs). Constant skills
    (plain vote: +0.13) or the sign-flipped solution (+0.86) break it.
    """
    bayes, pgd = table2_runs[n_workers].mean(axis=0)
    assert 0.035 <= bayes <= 0.075
    assert pgd - bayes <= 0.03


def test_at_m1_multiclass():
    errs, oracle, mv, rmse = [], [], [], []
    for seed in range(10):
        rng = np.random.default_rng(300 + seed)
        p = np.where(np.arange(30) < 9, rng.uniform(0.2, 0.3, 30), rng.uniform(0.4, 0.9, 30))
        s = (4 * p - 1) / 3
        data = synth.one_coin_labels(s, *synth.random_assignment(30, 3000, 5, seed=seed), 4, seed=seed)
        res = fit_quiet(data.labels, classes=data.classes)
        errs.append(prediction_error(res.consensus, data.truth))
        oracle.append(oracle_error(data))
        mv.append(prediction_error(fit_skills(data.labels, "mv", classes=data.classes).consensus, data.truth))
        rmse.append(np.sqrt(np.mean((skills_of(res, data) - s) ** 2)))
        if seed == 0:  # permuting class names leaves skills unchanged
            perm = {"0": "c", "1": "a", "2": "d", "3": "b"}
            res_p = fit_quiet(data.labels.assign(label=data.labels["label"].map(perm)))
            np.testing.assert_array_equal(res_p.skills["skill"].to_numpy(), res.skills["skill"].to_numpy())
            back = res_p.consensus["label"].map({v: k for k, v in perm.items()})
            assert (back.to_numpy() == res.consensus["label"].to_numpy()).mean() > 0.99
    assert np.mean(rmse) <= 0.06
    assert np.mean(errs) <= np.mean(oracle) + 0.01
    assert np.mean(errs) <= np.mean(mv) - 0.05
    assert (res.skills["lower"] >= -1 / 3 - 1e-12).all() and (res.skills["skill"] >= -1 / 3 - 1e-12).all()


# ----------------------------------------------------------------------------------------------
# AT-P1..P3  scale / determinism / edge cases
# ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_at_p1_scale():
    n_w, n_t = 10_000, 200_000
    rng = np.random.default_rng(9)
    s = np.where(rng.random(n_w) < 0.4, rng.uniform(-0.05, 0.05, n_w), rng.uniform(0.3, 0.9, n_w))
    data = synth.one_coin_labels(s, *synth.random_assignment(n_w, n_t, 3, seed=9), 2, seed=9)
    res = fit_quiet(data.labels, max_iter=2000)
    mv = fit_skills(data.labels, "mv")
    assert prediction_error(res.consensus, data.truth) <= prediction_error(mv.consensus, data.truth) + 0.005


def _parquet_bytes(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), buf)
    return buf.getvalue()


@pytest.mark.parametrize("method", ["pgd", "onecoin_ds", "ds", "mv"])
def test_at_p2_deterministic_and_permutation_invariant(method):
    rng = np.random.default_rng(10)
    s = np.where(np.arange(25) < 8, rng.uniform(-0.1, 0.1, 25), rng.uniform(0.3, 0.9, 25))
    data = synth.one_coin_labels(s, *synth.random_assignment(25, 400, 3, seed=10), 3, seed=10)
    r1 = fit_quiet(data.labels, method)
    r2 = fit_quiet(data.labels, method)
    r3 = fit_quiet(data.labels.sample(frac=1.0, random_state=3), method)
    for attr in ("skills", "consensus", "diagnostics"):
        b1 = _parquet_bytes(getattr(r1, attr))
        assert b1 == _parquet_bytes(getattr(r2, attr))
        assert b1 == _parquet_bytes(getattr(r3, attr))
    assert _parquet_bytes(r1.metadata_frame()) == _parquet_bytes(r3.metadata_frame())


def test_at_p3_edge_cases():
    tri = edge_labels(synth.ring_edges(3), 10, np.array([0.8, 0.7, 0.6]), seed=3).labels
    extra = pd.DataFrame(
        {
            "task": ["solo_ok", "solo_few", "shared_few", "shared_few"],
            "worker": ["w0000", "w0009", "w0008", "w0001"],
            "label": ["1", "0", "0", "1"],
        }
    )
    df = pd.concat([tri, extra], ignore_index=True)
    res = fit_skills(df)
    sk = res.skills.set_index("worker")
    cons = res.consensus.set_index("task")
    # task with one label from an identified worker: that worker's vote, n_labels = 1
    assert cons.loc["solo_ok", "label"] == "1" and cons.loc["solo_ok", "n_labels"] == 1
    assert not cons.loc["solo_ok", "fallback"]
    # worker with n_i = 1 <= tau^2 in an odd component: too_few_labels, weight 0
    assert sk.loc["w0008", "status"] == "too_few_labels" and sk.loc["w0008", "vote_weight"] == 0
    assert np.isnan(sk.loc["w0008", "skill"])
    # single-label task of an unidentified worker: fallback (MV = its label) and flagged
    assert sk.loc["w0009", "status"] == "isolated"
    assert cons.loc["solo_few", "fallback"] and cons.loc["solo_few", "label"] == "0"
    # a too_few worker's label is ignored where an identified worker labelled too
    assert cons.loc["shared_few", "label"] == "1" and not cons.loc["shared_few", "fallback"]
    with pytest.raises(ValueError, match="empty"):
        fit_skills(df.iloc[:0])
    with pytest.raises(ValueError, match="column 'worker'"):
        fit_skills(df.drop(columns="worker"))
    with pytest.raises(ValueError, match="null"):
        fit_skills(df.assign(label=df["label"].where(df.index != 3)))
    with pytest.raises(ValueError, match="repeat"):
        fit_skills(pd.concat([df, df.iloc[:1]]))
    assert fit_skills(pd.concat([df, df.iloc[:1]]), duplicates="keep_last").metadata["n_duplicates_dropped"] == 1
    with pytest.raises(ValueError, match="at least 2 classes"):
        fit_skills(df.assign(label="1"))
    # a declared label set makes M = 2 even if only one label is observed
    one = fit_quiet(df.assign(label="1"), classes=["0", "1"])
    assert (one.consensus["label"] == "1").all()
    with pytest.raises(ValueError, match="unknown method"):
        fit_skills(df, "kos")


def test_fallback_zero_and_too_few_breaking_odd_cycle():
    # triangle w0-w1-w2 where w2 has a single label per edge... w2 labels only one task
    df = pd.DataFrame(
        {
            "task": ["a", "a", "b", "b", "b", "c", "c", "d", "d"] + [f"x{k}" for k in range(6) for _ in (0, 1)],
            "worker": ["w0", "w1", "w0", "w1", "w2", "w3", "w0", "w3", "w1"] + ["w0", "w1"] * 6,
            "label": ["1", "1", "1", "0", "1", "1", "1", "0", "0"] + ["1", "1"] * 6,
        }
    )
    # w2 has n = 1 <= tau^2: dropped; remaining graph w0-w1-w3 is still a triangle
    res = fit_skills(df)
    st = res.skills.set_index("worker")["status"]
    assert st["w2"] == "too_few_labels" and (st[["w0", "w1", "w3"]] == "ok").all()
    # without w3 the remaining {w0, w1} is a single edge: bipartite after dropping w2
    df2 = df[df["worker"] != "w3"]
    res2 = fit_skills(df2)
    st2 = res2.skills.set_index("worker")["status"]
    assert st2["w2"] == "too_few_labels" and (st2[["w0", "w1"]] == "bipartite_component").all()
    with pytest.raises(ValueError, match="after dropping too_few_labels"):
        fit_skills(df2, identifiability_policy="raise")
    zero = fit_skills(df2, fallback="zero")
    assert zero.consensus["fallback"].all()
    np.testing.assert_allclose(zero.consensus["confidence"], 0.5)


def test_result_tables_schema():
    data = synth.one_coin_labels(np.linspace(0.2, 0.9, 9), *synth.clique_assignment(9, 50), 2, seed=0)
    res = fit_quiet(data.labels)
    assert list(res.skills.columns[:8]) == [
        "worker",
        "skill",
        "accuracy",
        "vote_weight",
        "n_labels",
        "n_partners",
        "component",
        "status",
    ]
    assert list(res.consensus.columns) == ["task", "label", "confidence", "n_labels", "fallback"]
    for col in ("skill", "accuracy", "vote_weight"):
        assert res.skills[col].dtype == np.float64
    assert res.consensus["confidence"].dtype == np.float64
    assert res.skills["worker"].map(type).eq(str).all() and res.consensus["task"].map(type).eq(str).all()
    for key in ("iterations", "converged", "final_loss", "eta", "tau", "weighting"):
        assert key in res.metadata
    assert res.metadata["eta"] == pytest.approx(1 / (4 * 8 * 50))  # 1/(4 max_i r_i), r_i = 8 * 50
    np.testing.assert_allclose(res.skills["accuracy"], (res.skills["skill"] + 1) / 2)
    post = res.consensus["confidence"]
    assert ((post >= 0.5) & (post <= 1)).all()


def test_map_vote_posterior_closed_form():
    df = pd.DataFrame({"task": ["t", "t", "t"], "worker": ["a", "b", "c"], "label": ["1", "1", "0"]})
    lm = encode_labels(df)
    s = np.array([0.6, 0.2, 0.9])
    v = vote_weights(s, 2)
    np.testing.assert_allclose(v, np.log((1 + s) / (1 - s)))
    out = weighted_consensus(lm, v)
    score = v[0] + v[1] - v[2]  # score_t = sum_i v_i Y_it with Y in {-1, +1}
    expected_label = "1" if score > 0 else "0"
    assert out.consensus.loc[0, "label"] == expected_label
    assert out.consensus.loc[0, "confidence"] == pytest.approx(1 / (1 + math.exp(-abs(score))))
    # multiclass weights log((1 + (M-1) s)/(1 - s)) = log((M-1) p/(1-p))
    p = np.array([0.5, 0.7])
    s3 = (3 * p - 1) / 2
    np.testing.assert_allclose(vote_weights(s3, 3), np.log(2 * p / (1 - p)))


def test_onecoin_dispatch_and_mv_accuracy_column():
    data = synth.one_coin_labels(np.linspace(0.1, 0.9, 12), *synth.random_assignment(12, 500, 5, seed=2), 2, seed=2)
    mv = fit_skills(data.labels, "mv")
    assert mv.skills["skill"].isna().all() and (mv.skills["vote_weight"] == 1).all()
    # accuracy = agreement with the MV label
    lab = data.labels.merge(mv.consensus[["task", "label"]], on="task", suffixes=("", "_mv"))
    agree = (lab["label"] == lab["label_mv"]).groupby(lab["worker"]).mean()
    np.testing.assert_allclose(mv.skills.set_index("worker").loc[agree.index, "accuracy"], agree.to_numpy())
    for method in ("onecoin_ds", "ds"):
        r = fit_skills(data.labels, method)
        assert r.metadata["converged"] and np.isfinite(r.skills["skill"]).all()
        assert not r.consensus["fallback"].any()


# ----------------------------------------------------------------------------------------------
# AT-R1  real data (Snow et al. 2008)
# ----------------------------------------------------------------------------------------------
def _real(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    for root in (DATA, SHARED):
        if (root / name / "labels.csv").exists() and (root / name / "truth.csv").exists():
            return (
                pd.read_csv(root / name / "labels.csv", dtype=str),
                pd.read_csv(root / name / "truth.csv", dtype=str),
            )
    pytest.skip(f"{name}: labels.csv/truth.csv not found under {DATA} (nor {SHARED})")


@pytest.mark.parametrize(("name", "threshold"), [("snow_rte", 0.09), ("snow_temp", 0.072), ("snow_wsd", 0.026)])
def test_at_r1_real_data(name, threshold):
    labels, truth = _real(name)
    res = fit_quiet(labels)
    err = prediction_error(res.consensus, truth)
    assert err <= threshold
    # PGD <= MV, MV counted as the paper does (random tie-break in expectation: ties fractional)
    assert err <= majority_vote_expected_error(labels, truth) + 1e-12
    # the faster solver of the same objective gives the same predictions
    fast = fit_skills(labels, solver="scaled")
    assert fast.metadata["converged"]
    assert prediction_error(fast.consensus, truth) == pytest.approx(err, abs=1e-12)
    assert (res.skills["status"] == "ok").all()


def test_min_pair_count_drops_rare_pairs():
    df = pd.DataFrame([(t, w, str((y + 1) // 2)) for t, w, y in HAND], columns=["task", "worker", "label"])
    lm, _ = prepare_labels(df)
    mo = label_moments(lm, min_pair_count=3)
    # N_ac = 2 is dropped, N_ab = N_bc = 3 kept with unchanged C^
    assert np.array_equal(mo.co_labels.toarray(), [[0, 3, 0], [3, 0, 3], [0, 3, 0]])
    np.testing.assert_allclose(mo.c_hat.toarray(), [[0, 1 / 3, 0], [1 / 3, 0, 1 / 3], [0, 1 / 3, 0]])
    # the remaining path a-b-c is bipartite
    res = fit_skills(df, min_pair_count=3)
    assert (res.skills["status"] == "bipartite_component").all()


def test_label_matrix_input_equals_dataframe_input():
    data = synth.one_coin_labels(np.linspace(0.1, 0.9, 10), *synth.random_assignment(10, 200, 3, seed=1), 2, seed=1)
    a = fit_quiet(data.labels)
    b = fit_quiet(encode_labels(data.labels.sample(frac=1.0, random_state=0)))
    pd.testing.assert_frame_equal(a.skills, b.skills)
    pd.testing.assert_frame_equal(a.consensus, b.consensus)
    with pytest.raises(ValueError, match="declared classes"):
        fit_skills(encode_labels(data.labels), classes=["0", "1", "2"])


def test_spammer_pruning_isolates_spammers():
    rng = np.random.default_rng(12)
    s = np.where(np.arange(20) < 5, 0.0, rng.uniform(0.5, 0.9, 20))  # five exact spammers
    data = synth.one_coin_labels(s, *synth.clique_assignment(20, 2000), 2, seed=12)
    lm, _ = prepare_labels(data.labels)
    mo = label_moments(lm)
    pruned, dropped = prune_spammer_edges(mo, 0.05, 1.0)
    assert dropped > 0 and pruned.co_labels.nnz == mo.co_labels.nnz - 2 * dropped
    res = fit_quiet(data.labels, prune_spammers=(0.05, 1.0))
    st = res.skills.set_index("worker")["status"]
    assert (st.iloc[:5] == "isolated").all() and (st.iloc[5:] == "ok").all()
    assert (res.skills["vote_weight"].iloc[:5] == 0).all()
    assert res.metadata["n_pairs_pruned"] == dropped
    plain = fit_quiet(data.labels)
    assert prediction_error(res.consensus, data.truth) <= prediction_error(plain.consensus, data.truth) + 0.005


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


# ----------------------------------------------------------------------------------------------
# issue #3 "Tests must show" additions, fast paths and streaming
# ----------------------------------------------------------------------------------------------
def test_skill_error_shrinks_as_tasks_grow():
    """RMSE(ŝ, s) falls with the number of tasks (consistency of the moment estimator)."""
    rmse = {}
    for n_tasks in (150, 1500, 15000):
        errs = []
        for seed in range(4):
            rng = np.random.default_rng(400 + seed)
            s = rng.uniform(0.1, 0.8, 20)
            data = synth.one_coin_labels(s, *synth.random_assignment(20, n_tasks, 4, seed=seed), 2, seed=seed)
            res = fit_quiet(data.labels, classes=data.classes, solver="scaled")
            errs.append(np.sqrt(np.mean((skills_of(res, data) - s) ** 2)))
        rmse[n_tasks] = float(np.mean(errs))
    assert rmse[150] > rmse[1500] > rmse[15000]
    assert rmse[15000] < 0.35 * rmse[150]  # ~ 1/sqrt(T): 10x the tasks, ~1/3 the error


def test_star_with_one_odd_cycle_identifies_skills():
    n = 9
    s = np.linspace(0.3, 0.9, n)
    data = edge_labels(synth.star_triangle_edges(n), 2000, s, seed=2)
    res = fit_quiet(data.labels, solver="scaled")
    assert (res.skills["status"] == "ok").all() and np.isfinite(res.skills["skill"]).all()
    est = skills_of(res, data)
    # one triangle pins the hub's scale (s_0² = C01 C02 / C12, noisy); the leaves follow C_0j / s_0
    assert np.max(np.abs(est - s)) < 0.25 and np.corrcoef(est, s)[0, 1] > 0.85
    star = fit_quiet(edge_labels(synth.star_edges(n), 400, s, seed=2).labels)
    assert (star.skills["status"] == "bipartite_component").all() and star.skills["skill"].isna().all()


@pytest.mark.parametrize("seed", range(4))
def test_sparse_moments_equal_naive_dense(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 5))
    w, t = int(rng.integers(5, 30)), int(rng.integers(20, 200))
    data = synth.one_coin_labels(
        rng.uniform(0, 0.9, w), *synth.random_assignment(w, t, int(rng.integers(1, min(w, 6) + 1)), seed=seed), m, seed
    )
    lm = encode_labels(data.labels.sample(frac=1.0, random_state=seed))  # unsorted entries
    mo = label_moments(lm)
    y = np.full((lm.n_workers, lm.n_tasks), -1)
    y[lm.worker_idx, lm.task_idx] = lm.class_idx
    b = (y >= 0).astype(float)
    n = b @ b.T
    agree = sum(((y == c).astype(float) @ (y == c).astype(float).T) for c in range(lm.n_classes))
    np.fill_diagonal(n, 0)
    np.fill_diagonal(agree, 0)
    np.testing.assert_array_equal(mo.co_labels.toarray(), n)
    np.testing.assert_array_equal(mo.agreements.toarray(), agree)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(n > 0, (lm.n_classes * agree / n - 1) / (lm.n_classes - 1), 0.0)
    np.testing.assert_allclose(mo.c_hat.toarray(), c, rtol=0, atol=1e-15)
    # one canonical pattern for all three
    for mat in (mo.agreements, mo.c_hat):
        assert np.array_equal(mat.indptr, mo.co_labels.indptr) and np.array_equal(mat.indices, mo.co_labels.indices)


@pytest.mark.parametrize(("name", "floor"), [("snow_rte", 0.075), ("snow_temp", 0.065), ("snow_wsd", 0.0057)])
def test_real_data_bundled_floors(name, floor):
    """Issue #3 floors with defaults on the bundled sets: error <= floor and <= MV + 0.005."""
    root = DATA / name
    labels = pd.read_csv(root / "labels.csv", dtype=str)
    truth = pd.read_csv(root / "truth.csv", dtype=str)
    err = prediction_error(fit_quiet(labels).consensus, truth)
    mv = prediction_error(fit_skills(labels, "mv").consensus, truth)
    assert err <= floor
    assert err <= mv + 0.005


@pytest.mark.parametrize("name", ["snow_rte", "snow_temp"])
def test_default_start_reaches_the_best_of_random_restarts_on_real_data(name):
    """The Table-5 gap is not an optimisation gap: on the bundled RTE and Temp sets, 20 random starts
    in the box (signs included) never reach a lower loss L than the default start x^0 = 0.5, and the
    default fit equals what ``fit_skills`` returns. So a "better solver for the same objective" cannot
    move PGD's error there (RTE 0.0725, Temp 0.0628 vs the paper's 0.070 / 0.0512). Measured: on RTE
    19 of 20 starts stop in worse local minima (L higher by 58–445), one reaches the default's; on Temp
    all 20 reach ± the same x."""
    root = DATA / name
    labels = pd.read_csv(root / "labels.csv", dtype=str)
    lm, _ = prepare_labels(labels)
    mo = label_moments(lm)
    lo, hi = skill_box(lm.labels_per_worker(), lm.n_classes, 1.0)
    w = edge_weights(mo.co_labels)
    base = fit_rank_one(mo.c_hat, w, lo, hi, solver="scaled")
    assert base.converged
    res = fit_quiet(labels, solver="scaled")
    assert res.metadata["final_loss"] == pytest.approx(base.final_loss, rel=1e-12)
    rng = np.random.default_rng(3)
    losses, dist = [], []
    for _ in range(20):
        x0 = rng.uniform(lo, hi)
        fit = fit_rank_one(mo.c_hat, w, lo, hi, x0=np.where(np.abs(x0) < 1e-3, 0.1, x0), solver="scaled")
        losses.append(fit.final_loss)
        dist.append(min(np.abs(fit.x - base.x).max(), np.abs(fit.x + base.x).max()))  # up to the global sign
    assert min(losses) >= base.final_loss - 1e-9 * abs(base.final_loss)
    if name == "snow_rte":  # non-convex here: most random starts stop in worse local minima (mixed signs)
        assert sum(loss > base.final_loss + 1.0 for loss in losses) >= 10
    else:  # Temp: every start reaches ± the same optimum
        assert max(dist) < 1e-5


def test_scaled_solver_monotone_and_same_optimum():
    data = synth.one_coin_labels(np.linspace(-0.2, 0.9, 30), *synth.random_assignment(30, 1500, 4, seed=6), 3, seed=6)
    lm, _ = prepare_labels(data.labels)
    mo = label_moments(lm)
    lo, hi = skill_box(lm.labels_per_worker(), lm.n_classes, 1.0)
    w = edge_weights(mo.co_labels)
    fast = fit_rank_one(mo.c_hat, w, lo, hi, solver="scaled", tol=1e-12, max_iter=20_000)
    slow = fit_rank_one(mo.c_hat, w, lo, hi, solver="gd", tol=1e-12, max_iter=200_000)
    assert fast.converged and slow.converged and fast.iterations < slow.iterations / 10
    assert np.all(np.diff(fast.loss_trace) <= 1e-9 * fast.loss_trace[0])
    np.testing.assert_allclose(fast.x, slow.x, atol=1e-8)
    # KKT: projected gradient vanishes at the optimum
    g = rank_one_gradient(mo.c_hat, w, fast.x)
    pg = np.clip(fast.x - g / (4 * np.asarray(w.sum(axis=1)).ravel()), lo, hi) - fast.x
    assert np.abs(pg).max() < 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_graph_structure_matches_components(seed):
    from crowdflow.skills import graph_structure

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


def test_streaming_moments_skills_and_consensus_equal_in_memory():
    from crowdflow.skills import accumulate_moments, skills_from_moments, stream_consensus

    rng = np.random.default_rng(3)
    s = np.where(rng.random(40) < 0.3, 0.0, rng.uniform(0.3, 0.9, 40))
    data = synth.one_coin_labels(s, *synth.random_assignment(40, 600, 4, seed=1), 3, seed=1)
    df = data.labels.sort_values("task", kind="stable").reset_index(drop=True)
    table = pa.Table.from_pandas(df, preserve_index=False)
    streamed = accumulate_moments(table.to_batches(max_chunksize=97))  # tasks straddle batches
    assert streamed.n_batches > 5 and streamed.n_tasks == 600 and streamed.n_rows == len(df)
    lm, _ = prepare_labels(df)
    mo = label_moments(lm)
    np.testing.assert_array_equal(streamed.workers, lm.workers)
    np.testing.assert_array_equal(streamed.n_labels, lm.labels_per_worker())
    for attr in ("co_labels", "agreements", "c_hat"):
        a, b = getattr(streamed.moments, attr), getattr(mo, attr)
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.data, b.data)
    table_sk, _ = skills_from_moments(streamed)
    ref = fit_skills(df, solver="scaled", tie_break="smallest")
    np.testing.assert_array_equal(table_sk["skill"].to_numpy(), ref.skills["skill"].to_numpy())
    cons = stream_consensus(table.to_batches(max_chunksize=50), table_sk, streamed.classes)
    a = cons.set_index("task").sort_index()
    b = ref.consensus.set_index("task").sort_index()
    assert (a["label"] == b["label"]).all()
    np.testing.assert_allclose(a["confidence"], b["confidence"], rtol=1e-12)
    # a task whose labels are split by another task cannot be streamed in one pass
    bad = pd.concat([df.iloc[:102], df.iloc[300:], df.iloc[102:300]])
    with pytest.raises(ValueError, match="sort or group the labels by task"):
        accumulate_moments([bad.iloc[:150], bad.iloc[150:]])
    with pytest.raises(ValueError, match="not contiguous"):
        accumulate_moments([pd.DataFrame({"task": ["a", "b", "a", "c"], "worker": list("wxyz"), "label": "1"})])
