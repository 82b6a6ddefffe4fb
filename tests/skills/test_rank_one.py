"""The rank-one objective and its solvers (docs/methods/skills.md §2.2, §2.3, §2.5, §2.9; §6 AT-U2, AT-U4,
AT-O1..O3): the loss against the per-label objective, the gradient against finite differences, recovery
of the skills in the paper's optimisation setting, monotone loss, the bound-constrained optimum against
L-BFGS-B, and the scaled solver against gd."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize

from crowdflow.graphs import components
from crowdflow.skills import fit_skills
from crowdflow.skills.consensus import skill_box
from crowdflow.skills.identifiability import theorem12_error_bound
from crowdflow.skills.inputs import prepare_labels
from crowdflow.skills.moments import edge_weights, label_moments
from crowdflow.skills.rank_one import fit_rank_one, rank_one_gradient, rank_one_loss
from crowdflow.synth import skills as synth

DATA = Path(__file__).resolve().parents[2] / "crowdflow" / "data"


def fit_quiet(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fit_skills(*args, **kwargs)


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


@pytest.mark.parametrize("name", list(O_GRAPHS))
def test_at_o1_noiseless_recovery(name):
    edges = O_GRAPHS[name]
    s = np.random.default_rng(1).uniform(0.4, 0.6, 25)
    c = synth.rank_one_moments(edges, s)
    w = synth.adjacency(edges, 25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # tol = 0: runs all 50000 iterations
        fit = fit_rank_one(c, w, -1.0, 1.0, x0=0.6, tol=0.0, max_iter=50_000, solver="gd")
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
        solver="gd",
    )
    assert np.max(np.abs(fit.x - s)) <= 1e-6


@pytest.mark.parametrize("name", list(O_GRAPHS))
def test_at_o2_noisy_gd_vs_eg(name):
    edges = O_GRAPHS[name]
    s = np.random.default_rng(2).uniform(0.4, 0.6, 25)
    c = synth.rank_one_moments(edges, s, noise=0.01, seed=2)
    w = synth.adjacency(edges, 25)
    gd = fit_rank_one(c, w, -1.0, 1.0, x0=0.6, tol=1e-10, max_iter=100_000, solver="gd")
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
    gd = fit_rank_one(mo.c_hat, w, lo, hi, tol=1e-12, max_iter=200_000, solver="gd")
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
    fit = fit_rank_one(c, synth.adjacency(synth.ring_edges(3), 3), -1, 1, tol=1e-14, max_iter=100_000, solver="gd")
    assert fit.x[0] == pytest.approx(math.sqrt(c[0, 1] * c[0, 2] / c[1, 2]), abs=1e-10)
    np.testing.assert_allclose(fit.x, s, atol=1e-10)


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
    res = fit_quiet(labels, method="pgd", solver="scaled")
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
