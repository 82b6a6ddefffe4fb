"""The DJAM engine (crowdflow.personal_models.djam) against docs/methods/personal_models.md §7.

Numbering "AT-k" refers to the acceptance tests of docs/methods/personal_models.md §7. Heavier Monte Carlo versions
(the full seed counts) are marked ``slow``; the default run uses fewer seeds with the same thresholds.
The batched ``matching`` engine must reproduce the one-round-at-a-time engine exactly (AT-18, docs/methods/personal_models.md §6.1).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar

from crowdflow.personal_models import (
    PersonalProblem,
    build_problem,
    centralized,
    cl_admm,
    djam,
    djam_blocked,
    djam_monte_carlo,
    matching_batches,
    rel_errors,
)
from crowdflow.personal_models.djam import _apply_rounds, serial_rounds
from crowdflow.synth.personal_models import (
    field_estimation_instance,
    field_estimation_instance_scaled,
)


def test_at4_two_agents_closed_form(quiet):
    agents = pd.DataFrame({"agent": ["1", "2"], "y": [0.0, 1.0], "weight": [1.0, 2.0]})  # f_i = (a_i/2)(θ − y_i)²
    edges = pd.DataFrame({"source": ["1"], "target": ["2"], "weight": [1.0]})
    prob = build_problem(agents, edges, loss="quadratic", reg=0.0)
    assert prob.beta == pytest.approx(0.5)
    exact = np.linalg.solve([[2.0, -1.0], [-1.0, 3.0]], [0.0, 2.0])
    res = quiet(djam, prob, seed=0, tol=0.0, max_rounds=200, engine="simulation")
    np.testing.assert_allclose(res.theta[:, 0], exact, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(centralized(prob).theta[:, 0], exact, rtol=1e-14)


def test_at5_scaling_guard(quadratic_tables):
    rows, edges = quadratic_tables(5, n=15)
    prob = build_problem(rows, edges, reg=0.1)
    ref = centralized(prob)
    # KKT of the ½-Σ-over-edges objective, written out by hand (not via problem.kkt)
    g = prob.graph
    th = ref.theta
    r = prob.losses.grad(np.arange(prob.n), th)
    np.add.at(r, g.u, g.w[:, None] * (th[g.u] - th[g.v]))
    np.add.at(r, g.v, g.w[:, None] * (th[g.v] - th[g.u]))
    assert np.abs(r).max() <= 1e-10
    # and it minimises J itself: any perturbation increases J
    rng = np.random.default_rng(0)
    for _ in range(5):
        assert prob.objective(th + 1e-4 * rng.standard_normal(th.shape)) > prob.objective(th)
    res = djam(prob, seed=1, tol=1e-12, engine="simulation")
    assert res.converged
    np.testing.assert_allclose(res.theta, th, atol=1e-10)
    # Σ without ½ = doubled weights: a different optimum that DJAM must not match
    doubled = build_problem(rows, edges.assign(weight=2 * edges["weight"]), reg=0.1)
    other = centralized(doubled).theta
    assert np.abs(other - res.theta).max() > 1e-3


def test_at6_quadratic_vectors(quiet, quadratic_tables):
    rows, edges = quadratic_tables(6)
    prob = build_problem(rows, edges, loss="ridge", reg=0.1)
    assert prob.n == 30 and prob.p == 3
    ref = centralized(prob).theta
    res = quiet(djam, prob, seed=2, tol=0.0, max_rounds=20_000, engine="simulation")
    assert rel_errors(res.theta, ref).max() <= 1e-10


def test_local_init_converges(field):
    _inst, prob, ref = field
    res = djam(prob, seed=3, tol=1e-10, init="local", reference=ref, engine="simulation")
    assert res.converged and np.abs(res.theta - ref).max() <= 1e-9
    # round 0 of a local init: every copy C_i[k] is argmin f_k, the isolated-agent estimate. Oracle:
    # Brent on each agent's own loss (p = 1 here), then the same run started from those models.
    assert prob.p == 1
    loc = np.array(
        [
            minimize_scalar(
                lambda t, k=k: float(prob.losses.value(np.full((prob.n, 1), t))[k]),
                bracket=(-50, 50),
                method="brent",
                options={"xtol": 1e-12},
            ).x
            for k in range(prob.n)
        ]
    )
    given = (
        djam(prob, seed=3, tol=1e-10, init=loc[:, None], reference=ref, engine="simulation").diagnostics["V"].iloc[0]
    )
    v0 = res.diagnostics["V"].iloc[0]
    assert v0 == pytest.approx(given, abs=1e-6)
    zero = djam(prob, seed=3, tol=1e-10, reference=ref, engine="simulation").diagnostics["V"].iloc[0]
    assert abs(zero - v0) > 1e-3


def test_at8_fixed_point(field, quiet):
    _inst, prob, ref = field
    res = quiet(
        djam, prob, seed=5, tol=0.0, max_rounds=2000, init=ref, trace_every=100, reference=ref, engine="simulation"
    )
    assert np.abs(res.theta - ref).max() <= 1e-13
    assert res.diagnostics["V"].max() <= 1e-13


def _form4_reference(
    prob: PersonalProblem, schedule: np.ndarray, incremental: bool
) -> dict[tuple[int, int], np.ndarray]:
    """The two-step form (4) of docs/methods/personal_models.md §2.2, written naively with dicts: on activation {i, j} the stored own
    models are exchanged, then both endpoints re-solve from their copies. ``incremental`` keeps
    b_i = Σ_k W_ik C_i[k] as a running sum (same arithmetic as the engine), otherwise it is re-summed."""
    g = prob.graph
    solver = prob.losses.solver(g.degree)
    nbrs = {i: [] for i in range(prob.n)}
    for e in range(g.n_edges):
        nbrs[int(g.u[e])].append((int(g.v[e]), g.w[e]))
        nbrs[int(g.v[e])].append((int(g.u[e]), g.w[e]))
    W = {(i, k): w for i in nbrs for k, w in nbrs[i]}
    C = {(i, k): np.zeros(prob.p) for i in nbrs for k, _ in nbrs[i]}
    B = {i: np.zeros(prob.p) for i in nbrs}

    def G(i):
        if incremental:
            b = B[i]
        else:
            b = np.zeros(prob.p)
            for k, w in nbrs[i]:
                b = b + w * C[(i, k)]
        return solver.solve(np.array([i]), b[None], None)[0]

    own = {i: G(i) for i in nbrs}
    for e in schedule:
        i, j = int(g.u[e]), int(g.v[e])
        # step 1: exchange the stored own models
        B[j] = B[j] + W[(j, i)] * (own[i] - C[(j, i)])
        C[(j, i)] = own[i].copy()
        B[i] = B[i] + W[(i, j)] * (own[j] - C[(i, j)])
        C[(i, j)] = own[j].copy()
        # step 2: both endpoints re-solve
        own[i], own[j] = G(i), G(j)
    return C


@pytest.mark.parametrize("kind", ["huber", "quadratic"])
def test_at9_two_step_form_equals_merged_form(kind, field, quiet, quadratic_tables):
    if kind == "huber":
        prob = field[1]
    else:
        rows, edges = quadratic_tables(7, n=15)
        prob = build_problem(rows, edges, reg=0.1)
    sched = np.random.default_rng(0).integers(0, prob.graph.n_edges, 1500)
    res = quiet(djam, prob, schedule=sched, tol=0.0, refresh_every=0, engine="simulation")
    C = res.copies
    g = prob.graph
    key = [(int(g.holder[a]), int(g.nbr[a])) for a in range(g.nbr.size)]
    same = _form4_reference(prob, sched, incremental=True)
    assert max(np.abs(C[a] - same[k]).max() for a, k in enumerate(key)) <= 1e-15
    # against exactly re-summed b: equal up to the round-off of 1500 incremental updates
    exact = _form4_reference(prob, sched, incremental=False)
    assert max(np.abs(C[a] - exact[k]).max() for a, k in enumerate(key)) <= 1e-14 * max(1.0, np.abs(C).max())


def test_at10_at11_monotone_V_and_epoch_contraction(field, quiet):
    _inst, prob, ref = field
    m = prob.graph.n_edges
    sched = np.random.default_rng(17).integers(0, m, 6000)
    res = quiet(djam, prob, schedule=sched, tol=0.0, reference=ref, trace_every=1, engine="simulation")
    V = res.diagnostics.set_index("round")["V"].reindex(np.arange(6001)).to_numpy()
    assert not np.isnan(V).any()
    assert np.all(np.diff(V) <= 1e-14 * V[0])  # AT-10
    # epochs: T_{m+1} = first round by which every edge was activated since T_m
    T, bounds = 0, [0]
    while True:
        seen = np.zeros(m, dtype=bool)
        t = T
        while t < sched.size and not seen.all():
            seen[sched[t]] = True
            t += 1
        if not seen.all():
            break
        bounds.append(t)
        T = t
    assert len(bounds) >= 5
    beta = prob.beta
    for a, b in itertools.pairwise(bounds):
        if V[a] > 1e-10:
            assert V[b] <= beta * V[a] + 1e-14  # AT-11


def _djam_curves(instance_seeds, edge_seeds, n_rounds):
    out = []
    for s in instance_seeds:
        prob = field_estimation_instance(s).problem()
        ref = centralized(prob).theta
        mc = djam_monte_carlo(prob, edge_seeds, n_rounds, ref, record_every=500)
        out.append(mc.assign(instance=s))
    return pd.concat(out, ignore_index=True)


def _check_at12(curves):
    mean = curves.groupby(["instance", "round"])["mean_rel_err"].mean().unstack("round")
    assert (mean[15_000] <= 1e-6).all(), mean[15_000]
    assert (mean[25_000] <= 1e-9).all(), mean[25_000]


def test_at12_speed_subset():
    _check_at12(_djam_curves([0], list(range(10)), 25_000))


@pytest.mark.slow
def test_at12_speed_full():
    _check_at12(_djam_curves(list(range(10)), list(range(10)), 25_000))


def test_at13_certified_stop(field):
    _inst, prob, ref = field
    for seed in (0, 1, 2):
        res = djam(prob, seed=seed, tol=1e-8, reference=ref, engine="simulation")
        assert res.converged
        true_err = np.linalg.norm(res.theta - ref)
        assert res.error_bound >= true_err  # the certificate bounds the true error
        assert true_err <= 1e-8 * max(1.0, np.linalg.norm(res.theta))
        assert rel_errors(res.theta, ref).mean() <= 1e-8
        # and every trace row's bound dominates (a lower bound on) the true error at that round:
        # max_i ‖θ̂_i − θ_i*‖ = max_rel_err · ‖θ_i*‖ ≥ max_rel_err · min_i ‖θ_i*‖
        d = res.diagnostics
        assert len(d) >= 2
        assert (d["max_rel_err"] * np.linalg.norm(ref, axis=1).min() <= d["error_bound"]).all()


def test_at15_agent_sampling(field):
    _inst, prob, ref = field
    mc = djam_monte_carlo(prob, list(range(5)), 30_000, ref, record_every=1000, sampling="agent")
    last = mc[mc["round"] == 30_000]
    assert (last["mean_rel_err"] <= 1e-6).all()
    res = djam(prob, seed=0, sampling="agent", tol=1e-8, engine="simulation")
    assert res.converged and np.abs(res.theta - ref).max() <= 1e-7


def test_at16_logistic_bradley_terry(bt_tables):
    rows, edges = bt_tables(16)
    prob = build_problem(rows, edges, loss="logistic", reg=0.1)
    assert prob.n == 20 and prob.p == 4
    ref = centralized(prob)
    assert ref.converged
    # certified stop at 1e-9 (relative to ‖Θ̂‖₂ ≈ 4.5), well within AT-16's 20,000-round budget
    res = djam(prob, seed=0, tol=1e-9, max_rounds=20_000, inner_tol=1e-12, engine="simulation")
    assert res.converged and res.iterations <= 20_000
    assert rel_errors(res.theta, ref.theta).max() <= 1e-8


@pytest.mark.slow
def test_at16_logistic_certified_to_floor(bt_tables):
    rows, edges = bt_tables(16)
    prob = build_problem(rows, edges, loss="logistic", reg=0.1)
    ref = centralized(prob).theta
    res = djam(prob, seed=1, tol=1e-10, max_rounds=40_000, engine="simulation")
    assert res.converged and rel_errors(res.theta, ref).max() <= 1e-9


def test_at17_determinism(field, quiet):
    _inst, prob, ref = field
    a = djam(prob, seed=7, tol=1e-10, engine="simulation")
    b = djam(prob, seed=7, tol=1e-10, engine="simulation")  # same seed: bit-identical
    assert a.iterations == b.iterations
    np.testing.assert_array_equal(a.theta, b.theta)
    pd.testing.assert_frame_equal(a.personal_models, b.personal_models)
    c = djam(prob, seed=8, tol=1e-10, engine="simulation")
    assert np.abs(a.theta - c.theta).max() <= 1e-9
    # a Monte Carlo replica is the single run with the same seed
    mc = djam_monte_carlo(prob, [7], 2 * prob.graph.n_edges, ref, record_every=prob.graph.n_edges)
    single = quiet(djam, prob, seed=7, tol=0.0, max_rounds=2 * prob.graph.n_edges, reference=ref, engine="simulation")
    np.testing.assert_allclose(
        mc["mean_rel_err"].to_numpy(), single.diagnostics["mean_rel_err"].to_numpy(), rtol=0, atol=0
    )


@pytest.mark.parametrize("kind", ["huber", "quadratic", "logistic"])
def test_at18_matching_engine_equals_simulation(kind, field, quiet, quadratic_tables, bt_tables):
    if kind == "huber":
        prob = field[1]
    elif kind == "quadratic":
        rows, edges = quadratic_tables(7, n=15)
        prob = build_problem(rows, edges, reg=0.1)
    else:
        rows, edges = bt_tables(2, n=10)
        prob = build_problem(rows, edges, loss="logistic", reg=0.1)
    sched = np.random.default_rng(3).integers(0, prob.graph.n_edges, 600 if kind == "logistic" else 2000)
    a = quiet(djam, prob, schedule=sched, tol=0.0, engine="simulation")
    b = quiet(djam, prob, schedule=sched, tol=0.0, engine="matching")
    assert np.abs(a.copies - b.copies).max() <= 1e-15
    assert np.abs(a.theta - b.theta).max() <= 1e-15


def test_at18_colour_sweeps_contract(field, quiet):
    _inst, prob, ref = field
    classes = prob.graph.edge_colouring()
    g = prob.graph
    for cl in classes:  # each colour class is a matching
        ends = np.concatenate([g.u[cl], g.v[cl]])
        assert np.unique(ends).size == ends.size
    assert sum(c.size for c in classes) == g.n_edges
    assert len(classes) <= 2 * np.max(g.n_neighbours) - 1
    m = g.n_edges
    res = quiet(
        djam, prob, sampling="colour", engine="matching", tol=0.0, max_rounds=30 * m, reference=ref, trace_every=m
    )
    V = res.diagnostics["V"].to_numpy()
    for a, b in itertools.pairwise(V):
        if a > 1e-10:
            assert b <= prob.beta * a + 1e-14


def test_at20_budget(field):
    _inst, prob, _ref = field
    with pytest.warns(RuntimeWarning, match="DJAM stopped at max_rounds = 300"):
        res = djam(prob, seed=0, tol=1e-8, max_rounds=300, engine="simulation")
    assert not res.converged and res.iterations == 300
    assert len(res.personal_models) == prob.n and np.isfinite(res.theta).all()
    assert res.diagnostics["round"].iloc[-1] == 300


def test_no_edges_gives_local_minimisers():
    agents = pd.DataFrame({"agent": ["a", "a", "b"], "y": [1.0, 3.0, -2.0]})
    empty = pd.DataFrame({"source": [], "target": [], "weight": []})
    with pytest.raises(ValueError, match="graph is not connected: 2 components"):
        build_problem(agents, empty)
    prob = build_problem(agents, empty, reg=1.0, prior_mean=0.5, allow_disconnected=True)
    local = np.array([(1 + 3 + 0.5) / 3, (-2 + 0.5) / 2])  # (Σy + λθ̄)/(K + λ)
    for res in (
        djam(prob, engine="simulation"),
        cl_admm(prob, engine="simulation"),
        centralized(prob),
        djam_blocked(prob, n_blocks=2, engine="simulation"),
    ):
        assert res.converged
        np.testing.assert_allclose(res.theta[:, 0], local, rtol=1e-14)
    mc = djam_monte_carlo(prob, [0, 1], 100, local[:, None])
    assert (mc["mean_rel_err"] <= 1e-15).all()


def _quadratic_problem(seed: int, n: int = 200, p: int = 3):
    inst = field_estimation_instance_scaled(seed, n=n)
    rng = np.random.default_rng(seed)
    rows = []
    for a in inst.agents["agent"]:
        th = rng.standard_normal(p)
        for _ in range(int(rng.integers(1, 5))):
            x = rng.standard_normal(p)
            rows.append({"agent": a, **{f"f{k}": x[k] for k in range(p)}, "y": float(x @ th)})
    return build_problem(pd.DataFrame(rows), inst.edges, reg=0.1)


def test_one_batch_equals_its_rounds_one_by_one(scaled):
    _inst, prob, _ref = scaled
    g = prob.graph
    rng = np.random.default_rng(4)
    solver = prob.losses.solver(g.degree)
    C0 = rng.standard_normal((g.nbr.size, 1))
    b0 = np.asarray(g.holder_matrix() @ C0)
    th0 = solver.solve(np.arange(g.n), b0, b0)
    seq = rng.integers(0, g.n_edges, g.n_edges)
    batch = seq[matching_batches(seq, g.u, g.v)[0]]
    assert batch.size > 20
    i, j = g.u[batch], g.v[batch]
    args = (i, j, g.a_uv[batch], g.a_vu[batch], g.w[batch], i, j)
    C1, b1, th1 = C0.copy(), b0.copy(), th0.copy()
    serial_rounds(solver, C1, b1, th1, *args)
    C2, b2, th2 = C0[None].copy(), b0[None].copy(), th0[None].copy()
    _apply_rounds(solver, C2, b2, th2, np.zeros(batch.size, dtype=np.int64), *args)
    np.testing.assert_array_equal(C1, C2[0])
    np.testing.assert_array_equal(b1, b2[0])
    np.testing.assert_array_equal(th1, th2[0])


@pytest.mark.parametrize("kind", ["huber", "quadratic"])
def test_matching_engine_equals_simulation_on_large_batches(kind, scaled, quiet):
    prob = scaled[1] if kind == "huber" else _quadratic_problem(6)
    m = prob.graph.n_edges
    sched = np.random.default_rng(9).integers(0, m, 8 * m)
    a = quiet(djam, prob, schedule=sched, tol=0.0, engine="simulation", check_every=5 * m)
    b = quiet(djam, prob, schedule=sched, tol=0.0, engine="matching", check_every=5 * m)
    assert a.iterations == b.iterations == sched.size
    if kind == "huber":  # same per-element arithmetic: the same bits
        np.testing.assert_array_equal(a.copies, b.copies)
        np.testing.assert_array_equal(a.theta, b.theta)
    else:  # batched p×p mat-vecs may round differently
        assert np.abs(a.copies - b.copies).max() <= 1e-14
        assert np.abs(a.theta - b.theta).max() <= 1e-14
    # random draws (seeded, not a schedule): same rounds, same stop, same result
    c = quiet(djam, prob, seed=3, tol=1e-6, engine="simulation")
    d = quiet(djam, prob, seed=3, tol=1e-6, engine="matching")
    assert c.converged and d.converged and c.iterations == d.iterations
    assert np.abs(c.theta - d.theta).max() <= 1e-14


@pytest.mark.parametrize("kind", ["huber", "quadratic"])
def test_matching_engine_fixed_point_is_centralized_optimum(kind, scaled, quiet):
    if kind == "huber":
        _inst, prob, ref = scaled
    else:
        prob = _quadratic_problem(7, n=400)
        ref = centralized(prob).theta
    res = djam(prob, seed=1, tol=1e-10, engine="matching")
    assert res.converged
    assert np.linalg.norm(res.theta - ref) <= 1e-10 * max(1.0, np.linalg.norm(res.theta))
    # started at the optimum, the engine stays there
    fixed = quiet(djam, prob, seed=2, tol=0.0, max_rounds=5 * prob.graph.n_edges, engine="matching", init=ref)
    assert np.abs(fixed.theta - ref).max() <= 1e-12 * max(1.0, np.abs(ref).max())
