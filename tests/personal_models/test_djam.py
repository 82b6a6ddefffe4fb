"""Tests of crowdflow.personal_models (djam, baselines, fit) against spec personal-models-djam.md §7.

Numbering "AT-k" refers to the spec's acceptance test k. Heavier Monte Carlo versions (the spec's full
seed counts) are marked ``slow``; the default run uses fewer seeds with the same thresholds.
"""

from __future__ import annotations

import doctest
import io
import itertools
import warnings
from concurrent.futures import ThreadPoolExecutor

import cvxpy as cp
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.optimize import minimize, minimize_scalar

import crowdflow.personal_models.fit as fit_module
import crowdflow.synth.personal_models as synth_module
from crowdflow.personal_models import (
    RHO_GRID,
    PersonalProblem,
    build_problem,
    centralized,
    certificate,
    cl_admm,
    cl_admm_monte_carlo,
    djam,
    djam_blocked,
    djam_monte_carlo,
    fit_personal_models,
    partition_agents,
    rel_errors,
)
from crowdflow.synth.personal_models import field_estimation_instance, preference_tables, worker_calibration_tables


# ----------------------------------------------------------------------------------------------
# instances
# ----------------------------------------------------------------------------------------------
def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kwargs)


def quadratic_tables(seed: int, n: int = 30, p: int = 3, radius: float = 0.3, lo: int = 2, hi: int = 7):
    """AT-6 instance: §5 graph, p-dim ridge regression, lo..hi samples per agent."""
    inst = field_estimation_instance(seed, n=n, radius=radius)
    rng = np.random.default_rng(seed + 1000)
    base = rng.standard_normal(p)
    rows = []
    for a in inst.agents["agent"]:
        th = base + 0.5 * rng.standard_normal(p)
        for _ in range(int(rng.integers(lo, hi + 1))):
            x = rng.standard_normal(p)
            rows.append(
                {"agent": a, **{f"f{k}": x[k] for k in range(p)}, "y": float(x @ th + 0.1 * rng.standard_normal())}
            )
    return pd.DataFrame(rows), inst.edges


def bt_tables(seed: int, n: int = 20, p: int = 4, n_items: int = 12):
    """AT-16 instance: personalised Bradley–Terry, r = 0.35 graph, 5–15 comparisons per agent."""
    inst = field_estimation_instance(seed, n=n, radius=0.35)
    rng = np.random.default_rng(seed + 2000)
    items = rng.standard_normal((n_items, p))
    base = rng.standard_normal(p)
    rows = []
    for a in inst.agents["agent"]:
        th = base + 0.3 * rng.standard_normal(p)
        for _ in range(int(rng.integers(5, 16))):
            i, j = rng.choice(n_items, 2, replace=False)
            d = items[i] - items[j]
            rows.append({"agent": a, "x": list(d), "y": float(rng.random() < 1 / (1 + np.exp(-d @ th)))})
    return pd.DataFrame(rows), inst.edges


@pytest.fixture(scope="module")
def field():
    inst = field_estimation_instance(3)
    prob = inst.problem()
    ref = centralized(prob)
    return inst, prob, ref.theta


def cvxpy_theta(prob: PersonalProblem) -> np.ndarray:
    """Independent cross-check: J written directly in cvxpy (½ Σ over edges, spec §4.1)."""
    g, L = prob.graph, prob.losses
    T = cp.Variable((prob.n, prob.p))
    obj = 0.5 * cp.sum(cp.multiply(g.w, cp.sum(cp.square(T[g.u] - T[g.v]), axis=1)))
    if prob.loss == "huber":
        agent = np.repeat(np.arange(prob.n), np.diff(L.ptr))
        r = L.y - T[agent, 0]
        # cvxpy's huber(r, κ) = 2·h_κ(r); per-sample κ via scaling: h_κ(r) = κ² h_1(r/κ)
        k = L.kappa[agent]
        obj += cp.sum(cp.multiply(L.w * k**2 / 2, cp.huber(cp.multiply(1 / k, r), 1.0)))
        obj += cp.sum(cp.multiply(L.s / 2, cp.square(T[:, 0] - L.mu)))
    elif prob.loss == "logistic":
        agent = np.repeat(np.arange(prob.n), np.diff(L.ptr))
        m = cp.sum(cp.multiply(L.d, T[agent]), axis=1)
        obj += cp.sum(cp.multiply(L.w, cp.logistic(cp.multiply(-L.z, m))))
        obj += 0.5 * cp.sum(cp.multiply(L.lam, cp.sum(cp.square(T - L.prior), axis=1)))
    else:
        raise AssertionError
    cp.Problem(cp.Minimize(obj)).solve(solver="CLARABEL", tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    return np.asarray(T.value)


# ----------------------------------------------------------------------------------------------
# AT-1..3 validation
# ----------------------------------------------------------------------------------------------
def _agents(ids, y=None):
    y = y if y is not None else np.arange(len(ids), dtype=float)
    return pd.DataFrame({"agent": list(ids), "y": y})


def test_at1_disconnected_rejected_and_opt_in():
    agents = _agents(["a", "b", "c", "d", "e"], [0.0, 1.0, 2.0, 3.0, 4.0])
    edges = pd.DataFrame({"source": ["a", "c"], "target": ["b", "d"], "weight": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"graph is not connected: 3 components \(sizes \[2, 2, 1\]"):
        build_problem(agents, edges)
    prob = build_problem(agents, edges, reg=0.5, prior_mean=1.0, allow_disconnected=True)
    ref = centralized(prob)
    res = djam(prob, seed=0, tol=1e-12)
    assert res.converged
    np.testing.assert_allclose(res.theta, ref.theta, atol=1e-11)
    # isolated agent e: argmin ½(y − θ)² + (λ/2)(θ − θ̄)² = (y + λθ̄)/(1 + λ)
    e = list(prob.agents).index("e")
    assert res.theta[e, 0] == pytest.approx((4.0 + 0.5 * 1.0) / 1.5, abs=1e-14)
    # component a–b in closed form: [[1+λ+W, −W], [−W, 1+λ+W]] θ = [y + λθ̄]
    A = np.array([[1.5 + 1.0, -1.0], [-1.0, 1.5 + 1.0]])
    np.testing.assert_allclose(res.theta[:2, 0], np.linalg.solve(A, [0.5, 1.5]), atol=1e-11)
    assert res.personal_models["component"].nunique() == 3


def test_at1_isolated_agent_rejected():
    agents = _agents(["a", "b", "c"])
    edges = pd.DataFrame({"source": ["a"], "target": ["b"], "weight": [1.0]})
    with pytest.raises(
        ValueError, match=r"graph is not connected: 2 components \(sizes \[2, 1\]; e.g. agents component of 1: \[c\]"
    ):
        build_problem(agents, edges)


@pytest.mark.parametrize(
    ("edges", "message"),
    [
        (
            {"source": ["a", "b"], "target": ["b", "a"], "weight": [1.0, 2.0]},
            r"edges: asymmetric weights for pairs \[\(a, b: 1.0 vs 2.0\)\]",
        ),
        (
            {"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, -1.0]},
            r"edges: non-positive or non-finite weight.*\(b, c, -1.0\)",
        ),
        (
            {"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, np.nan]},
            r"edges: non-positive or non-finite weight",
        ),
        (
            {"source": ["a", "b", "c"], "target": ["b", "c", "c"], "weight": [1.0, 1.0, 1.0]},
            r"edges: self-loop on \[c\]",
        ),
        ({"source": ["a", "b"], "target": ["b", "zz"], "weight": [1.0, 1.0]}, r"edges: unknown agent id\(s\) \[zz\]"),
        (
            {"source": ["a", "a", "b"], "target": ["b", "b", "c"], "weight": [1.0, 1.0, 1.0]},
            r"edges: duplicate pair \(a, b\)",
        ),
    ],
)
def test_at2_edge_rejections(edges, message):
    with pytest.raises(ValueError, match=message):
        build_problem(_agents(["a", "b", "c"]), pd.DataFrame(edges))


def test_at2_symmetric_duplicate_pair_is_deduplicated():
    edges = pd.DataFrame({"source": ["a", "b", "b"], "target": ["b", "a", "c"], "weight": [1.5, 1.5, 1.0]})
    prob = build_problem(_agents(["a", "b", "c"]), edges)
    assert prob.graph.n_edges == 2


def test_at2_convexity_rejections():
    edges = pd.DataFrame({"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, 1.0]})
    # ridge agent with λ = 0 and fewer than p samples
    rows = pd.DataFrame(
        {
            "agent": ["a", "a", "a", "b", "b", "b", "c"],
            "f0": [1, 0, 1, 1, 0, 2, 1.0],
            "f1": [0, 1, 1, 0, 1, 1, 2.0],
            "y": [1, 2, 3, 1, 2, 3, 1.0],
        }
    )
    with pytest.raises(ValueError, match=r"agent c: loss not strongly convex \(λ_min"):
        build_problem(rows, edges, loss="quadratic", reg=0.0)
    with pytest.raises(ValueError, match=r"loss not strongly convex \(ridge needs reg > 0\)"):
        build_problem(rows, edges, loss="ridge", reg={"a": 1.0, "b": 1.0, "c": 0.0})
    build_problem(rows, edges, loss="quadratic", reg={"a": 0.0, "b": 0.0, "c": 0.1})  # enough data elsewhere
    # Huber with s = 0
    with pytest.raises(ValueError, match=r"agent a: loss not strongly convex \(huber needs s = reg > 0"):
        build_problem(_agents(["a", "b", "c"]), edges, loss="huber", reg=0.0)
    with pytest.raises(ValueError, match=r"logistic needs reg > 0"):
        build_problem(_agents(["a", "b", "c"], [0, 1, 1.0]), edges, loss="logistic", reg=0.0)
    # an agent without data needs a prior
    nodata = _agents(["a", "b", "c"], [1.0, 2.0, np.nan])
    with pytest.raises(ValueError, match=r"agent\(s\) \[c\]: no data and no prior"):
        build_problem(nodata, edges, reg=0.0)
    prob = build_problem(nodata, edges, reg=0.2)
    assert prob.n_samples.tolist() == [1, 1, 0]


def test_observation_checks():
    edges = pd.DataFrame({"source": ["a"], "target": ["b"], "weight": [1.0]})
    bad_x = pd.DataFrame({"agent": ["a", "b"], "x": [[1.0, 2.0], [1.0]], "y": [1.0, 2.0]})
    with pytest.raises(ValueError, match="observations: inconsistent dimension"):
        build_problem(bad_x, edges)
    nonfinite = pd.DataFrame({"agent": ["a", "b"], "f": [1.0, np.inf], "y": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"observations: non-finite features for agent\(s\) \[b\]"):
        build_problem(nonfinite, edges)
    with pytest.raises(ValueError, match="logistic targets must be 0/1"):
        build_problem(pd.DataFrame({"agent": ["a", "b"], "y": [0.0, 2.0]}), edges, loss="logistic")
    with pytest.raises(ValueError, match="agents: missing column 'y'"):
        build_problem(pd.DataFrame({"agent": ["a", "b"]}), edges)
    with pytest.raises(ValueError, match="duplicate/null agent_id"):
        build_problem(pd.DataFrame({"agent": ["a", None], "y": [1.0, 2.0]}), edges)


def test_at3_zero_weight_edges_dropped_with_warning():
    agents = _agents(["a", "b", "c"])
    edges = pd.DataFrame({"source": ["a", "b", "a"], "target": ["b", "c", "c"], "weight": [1.0, 1.0, 0.0]})
    with pytest.warns(RuntimeWarning, match=r"dropping 1 zero-weight edge\(s\), e.g. \(a, c\)"):
        prob = build_problem(agents, edges)
    assert prob.graph.n_edges == 2
    edges2 = pd.DataFrame({"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, 0.0]})
    with (
        pytest.warns(RuntimeWarning, match="zero-weight"),
        pytest.raises(ValueError, match="graph is not connected: 2 components"),
    ):
        build_problem(agents, edges2)


def test_feature_columns_and_list_column_agree():
    rows, edges = quadratic_tables(11, n=12)
    as_list = pd.DataFrame({"agent": rows["agent"], "x": rows[["f0", "f1", "f2"]].to_numpy().tolist(), "y": rows["y"]})
    shuffled = rows.sample(frac=1.0, random_state=1)
    a = centralized(build_problem(rows, edges, reg=0.1))
    b = centralized(build_problem(as_list, edges, reg=0.1))
    c = centralized(build_problem(shuffled, edges, reg=0.1))
    np.testing.assert_allclose(a.theta, b.theta, atol=1e-13)
    np.testing.assert_allclose(a.theta, c.theta, atol=1e-13)
    assert list(a.personal_models.columns[:4]) == ["agent", "theta_f0", "theta_f1", "theta_f2"]
    assert list(b.personal_models.columns[:4]) == ["agent", "theta_x_0", "theta_x_1", "theta_x_2"]


# ----------------------------------------------------------------------------------------------
# local solvers
# ----------------------------------------------------------------------------------------------
def test_huber_local_solver_matches_brute_force():
    rng = np.random.default_rng(0)
    rows = []
    for k in range(40):
        for _ in range(int(rng.integers(0, 7))):
            rows.append(
                {"agent": f"a{k:02d}", "y": float(3 * rng.standard_normal()), "weight": float(rng.uniform(0.2, 2))}
            )
        rows.append({"agent": f"a{k:02d}", "y": np.nan})
    agents = pd.DataFrame(rows)
    ids = sorted(agents["agent"].unique())
    edges = pd.DataFrame({"source": ids[:-1], "target": ids[1:], "weight": 1.0})
    c = rng.uniform(0.5, 3, len(ids))
    kap = rng.uniform(0.2, 2, len(ids))
    prob = build_problem(
        agents,
        edges,
        loss="huber",
        reg=0.3,
        prior_mean=0.7,
        huber_c=dict(zip(ids, c, strict=True)),
        huber_kappa=dict(zip(ids, kap, strict=True)),
    )
    L = prob.losses
    for shift in (prob.graph.degree, np.zeros(prob.n)):
        solver = L.solver(shift)
        b = rng.normal(0, 3, (prob.n, 1))
        got = solver.solve(np.arange(prob.n), b)[:, 0]
        for i in range(prob.n):
            ys = L.y[L.ptr[i] : L.ptr[i + 1]]
            ws = L.w[L.ptr[i] : L.ptr[i + 1]]

            def phi(t, i=i, ys=ys, ws=ws):
                r = np.abs(ys - t)
                h = np.where(r <= L.kappa[i], 0.5 * r**2, L.kappa[i] * r - 0.5 * L.kappa[i] ** 2)
                return np.sum(ws * h) + 0.5 * L.s[i] * (t - L.mu[i]) ** 2 + 0.5 * shift[i] * t * t - b[i, 0] * t

            best = minimize_scalar(phi, bracket=(-50, 50), method="brent", options={"xtol": 1e-14}).x
            assert got[i] == pytest.approx(best, abs=1e-6)  # Brent is only ~sqrt(ε) accurate
            assert phi(got[i]) <= phi(best) + 1e-12
            # exact stationarity of the returned value
            r = np.clip(ys - got[i], -L.kappa[i], L.kappa[i])
            stat = (L.s[i] + shift[i]) * got[i] - b[i, 0] - L.s[i] * L.mu[i] - np.sum(ws * r)
            assert abs(stat) <= 1e-12 * max(1.0, abs(b[i, 0]))
    # the padded fast path and the ragged path agree
    s1 = L.solver(prob.graph.degree)
    assert s1.padded is not None
    s2 = type(s1)(a=s1.a, tau=s1.tau, losses=L, padded=None)
    b = rng.normal(0, 3, (prob.n, 1))
    np.testing.assert_array_equal(s1.solve(np.arange(prob.n), b), s2.solve(np.arange(prob.n), b))


def test_huber_single_sample_three_cases():
    """Spec §2.5: the three closed-form cases for one observation."""
    agents = _agents(["a", "b"], [0.0, 0.0])
    prob = build_problem(
        agents,
        pd.DataFrame({"source": ["a"], "target": ["b"], "weight": [1.0]}),
        loss="huber",
        reg=0.5,
        huber_c=2.0,
        huber_kappa=1.0,
    )
    solver = prob.losses.solver(prob.graph.degree)  # a = w + s = 1.5
    for q in (-10.0, 0.3, 10.0):
        th = solver.solve(np.array([0]), np.array([[q]]))[0, 0]
        cands = [(q + 2 * 0.0) / 3.5, (q + 2 * 1.0) / 1.5, (q - 2 * 1.0) / 1.5]
        valid = [abs(0 - cands[0]) <= 1, 0 - cands[1] >= 1, 0 - cands[2] <= -1]
        assert sum(valid) >= 1
        assert th == pytest.approx(cands[valid.index(True)], abs=1e-15)


def test_logistic_local_solver_matches_scipy():
    rows, edges = bt_tables(4, n=8)
    prob = build_problem(rows, edges, loss="logistic", reg=0.1)
    L = prob.losses
    rng = np.random.default_rng(1)
    b = rng.normal(0, 2, (prob.n, prob.p))
    got = L.solver(prob.graph.degree).solve(np.arange(prob.n), b)
    for i in range(prob.n):
        sl = slice(L.ptr[i], L.ptr[i + 1])

        def phi(x, i=i, sl=sl):
            m = L.d[sl] @ x
            return (
                np.sum(L.w[sl] * np.logaddexp(0, -L.z[sl] * m))
                + 0.5 * L.lam[i] * np.sum((x - L.prior[i]) ** 2)
                + 0.5 * prob.graph.degree[i] * x @ x
                - b[i] @ x
            )

        ref = minimize(phi, np.zeros(prob.p), method="BFGS", options={"gtol": 1e-11}).x
        np.testing.assert_allclose(got[i], ref, atol=1e-6)
    # gradient of φ at the returned point is at the inner tolerance
    g = L.grad(np.arange(prob.n), got) + prob.graph.degree[:, None] * got - b
    assert np.abs(g).max() <= 1e-12 * max(1.0, np.linalg.norm(b, axis=1).max())


# ----------------------------------------------------------------------------------------------
# AT-4..9 correctness
# ----------------------------------------------------------------------------------------------
def test_at4_two_agents_closed_form():
    agents = pd.DataFrame({"agent": ["1", "2"], "y": [0.0, 1.0], "weight": [1.0, 2.0]})  # f_i = (a_i/2)(θ − y_i)²
    edges = pd.DataFrame({"source": ["1"], "target": ["2"], "weight": [1.0]})
    prob = build_problem(agents, edges, loss="quadratic", reg=0.0)
    assert prob.beta == pytest.approx(0.5)
    exact = np.linalg.solve([[2.0, -1.0], [-1.0, 3.0]], [0.0, 2.0])
    res = quiet(djam, prob, seed=0, tol=0.0, max_rounds=200)
    np.testing.assert_allclose(res.theta[:, 0], exact, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(centralized(prob).theta[:, 0], exact, rtol=1e-14)


def test_at5_scaling_guard():
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
    res = djam(prob, seed=1, tol=1e-12)
    assert res.converged
    np.testing.assert_allclose(res.theta, th, atol=1e-10)
    # Σ without ½ = doubled weights: a different optimum that DJAM must not match
    doubled = build_problem(rows, edges.assign(weight=2 * edges["weight"]), reg=0.1)
    other = centralized(doubled).theta
    assert np.abs(other - res.theta).max() > 1e-3


def test_at6_quadratic_vectors():
    rows, edges = quadratic_tables(6)
    prob = build_problem(rows, edges, loss="ridge", reg=0.1)
    assert prob.n == 30 and prob.p == 3
    ref = centralized(prob).theta
    res = quiet(djam, prob, seed=2, tol=0.0, max_rounds=20_000)
    assert rel_errors(res.theta, ref).max() <= 1e-10


def test_at7_huber_centralized_newton_and_cvxpy(field):
    _inst, prob, _ref = field
    res = centralized(prob)
    assert res.converged and res.iterations <= 20
    assert np.abs(prob.kkt(res.theta)).max() <= 1e-12
    np.testing.assert_allclose(cvxpy_theta(prob), res.theta, atol=1e-6)


def test_at7_huber_multi_sample_and_logistic_vs_cvxpy():
    rng = np.random.default_rng(3)
    inst = field_estimation_instance(8, n=15)
    rows = []
    for a, f in zip(inst.agents["agent"], inst.field, strict=True):
        for _ in range(int(rng.integers(1, 6))):
            rows.append({"agent": a, "y": f + (5 if rng.random() < 0.2 else 0.5) * rng.standard_normal()})
    prob = build_problem(pd.DataFrame(rows), inst.edges, loss="huber", reg=0.1, huber_c=4.0, huber_kappa=0.7)
    ref = centralized(prob)
    assert np.abs(prob.kkt(ref.theta)).max() <= 1e-12
    np.testing.assert_allclose(cvxpy_theta(prob), ref.theta, atol=1e-6)
    res = djam(prob, seed=0, tol=1e-11)
    assert res.converged and np.abs(res.theta - ref.theta).max() <= 1e-9

    brows, bedges = bt_tables(9, n=12)
    bprob = build_problem(brows, bedges, loss="logistic", reg=0.1)
    bref = centralized(bprob)
    assert np.abs(bprob.kkt(bref.theta)).max() <= 1e-12
    np.testing.assert_allclose(cvxpy_theta(bprob), bref.theta, atol=1e-5)


def test_local_init_converges(field):
    _inst, prob, ref = field
    res = djam(prob, seed=3, tol=1e-10, init="local", reference=ref)
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
    given = djam(prob, seed=3, tol=1e-10, init=loc[:, None], reference=ref).diagnostics["V"].iloc[0]
    v0 = res.diagnostics["V"].iloc[0]
    assert v0 == pytest.approx(given, abs=1e-6)
    zero = djam(prob, seed=3, tol=1e-10, reference=ref).diagnostics["V"].iloc[0]
    assert abs(zero - v0) > 1e-3


def test_at8_fixed_point(field):
    _inst, prob, ref = field
    res = quiet(djam, prob, seed=5, tol=0.0, max_rounds=2000, init=ref, trace_every=100, reference=ref)
    assert np.abs(res.theta - ref).max() <= 1e-13
    assert res.diagnostics["V"].max() <= 1e-13


def _form4_reference(
    prob: PersonalProblem, schedule: np.ndarray, incremental: bool
) -> dict[tuple[int, int], np.ndarray]:
    """Spec §2.2 two-step form (4), written naively with dicts: on activation {i, j} the stored own
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
def test_at9_two_step_form_equals_merged_form(kind, field):
    if kind == "huber":
        prob = field[1]
    else:
        rows, edges = quadratic_tables(7, n=15)
        prob = build_problem(rows, edges, reg=0.1)
    sched = np.random.default_rng(0).integers(0, prob.graph.n_edges, 1500)
    res = quiet(djam, prob, schedule=sched, tol=0.0, refresh_every=0)
    C = res.copies
    g = prob.graph
    key = [(int(g.holder[a]), int(g.nbr[a])) for a in range(g.nbr.size)]
    same = _form4_reference(prob, sched, incremental=True)
    assert max(np.abs(C[a] - same[k]).max() for a, k in enumerate(key)) <= 1e-15
    # against exactly re-summed b: equal up to the round-off of 1500 incremental updates
    exact = _form4_reference(prob, sched, incremental=False)
    assert max(np.abs(C[a] - exact[k]).max() for a, k in enumerate(key)) <= 1e-14 * max(1.0, np.abs(C).max())


# ----------------------------------------------------------------------------------------------
# AT-10..16 convergence behaviour on the §5 setup
# ----------------------------------------------------------------------------------------------
def test_at10_at11_monotone_V_and_epoch_contraction(field):
    _inst, prob, ref = field
    m = prob.graph.n_edges
    sched = np.random.default_rng(17).integers(0, m, 6000)
    res = quiet(djam, prob, schedule=sched, tol=0.0, reference=ref, trace_every=1)
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
        res = djam(prob, seed=seed, tol=1e-8, reference=ref)
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


def test_certificate_dominates_true_error_along_runs(field):
    _inst, prob, ref = field
    for fn in (djam, cl_admm):
        res = quiet(fn, prob, seed=4, tol=0.0, max_rounds=3000, reference=ref, trace_every=50)
        d = res.diagnostics
        # per-agent errors are ≤ the global error ≤ the bound: max_i ‖θ̂_i − θ_i*‖ ≤ error_bound
        max_abs = d["max_rel_err"] * np.linalg.norm(ref, axis=1).max()
        assert (d["error_bound"] > 0).all()
        assert (d["max_rel_err"] * np.linalg.norm(ref, axis=1).min() <= d["error_bound"]).all()
        assert max_abs.iloc[-1] < max_abs.iloc[0]
    # exact check at many random points: ‖Θ − Θ*‖ ≤ ‖∇J(Θ)‖/m_min
    rng = np.random.default_rng(0)
    for scale in (1e-8, 1e-4, 1.0, 10.0):
        th = ref + scale * rng.standard_normal(ref.shape)
        _, bound, _ = certificate(prob, th)
        assert bound >= np.linalg.norm(th - ref)


def _baseline_curves(prob, ref, seeds):
    dj = djam_monte_carlo(prob, seeds, 6000, ref, record_every=1000)
    ad = cl_admm_monte_carlo(prob, seeds, 20_000, ref, rho=RHO_GRID, record_every=1000)
    return dj, ad


def _check_at14(dj, ad):
    at = lambda df, t: df.loc[df["round"] == t, "mean_rel_err"].mean()  # noqa: E731
    by = {r: ad[ad["rho"] == r] for r in RHO_GRID}
    d6 = at(dj, 6000)
    best = min(at(by[r], 6000) for r in RHO_GRID)
    assert d6 <= 10 * best
    assert at(by[10.0], 6000) >= 100 * d6
    assert at(by[0.316], 20_000) <= 1e-9


def test_at14_baseline_comparison_subset(field):
    _inst, prob, ref = field
    _check_at14(*_baseline_curves(prob, ref, list(range(5))))


@pytest.mark.slow
def test_at14_baseline_comparison_full(field):
    _inst, prob, ref = field
    _check_at14(*_baseline_curves(prob, ref, list(range(100))))


def test_at15_agent_sampling(field):
    _inst, prob, ref = field
    mc = djam_monte_carlo(prob, list(range(5)), 30_000, ref, record_every=1000, sampling="agent")
    last = mc[mc["round"] == 30_000]
    assert (last["mean_rel_err"] <= 1e-6).all()
    res = djam(prob, seed=0, sampling="agent", tol=1e-8)
    assert res.converged and np.abs(res.theta - ref).max() <= 1e-7


def test_at16_logistic_bradley_terry():
    rows, edges = bt_tables(16)
    prob = build_problem(rows, edges, loss="logistic", reg=0.1)
    assert prob.n == 20 and prob.p == 4
    ref = centralized(prob)
    assert ref.converged
    # certified stop at 1e-9 (relative to ‖Θ̂‖₂ ≈ 4.5), well within the spec's 20,000-round budget
    res = djam(prob, seed=0, tol=1e-9, max_rounds=20_000, inner_tol=1e-12)
    assert res.converged and res.iterations <= 20_000
    assert rel_errors(res.theta, ref.theta).max() <= 1e-8


@pytest.mark.slow
def test_at16_logistic_certified_to_floor():
    rows, edges = bt_tables(16)
    prob = build_problem(rows, edges, loss="logistic", reg=0.1)
    ref = centralized(prob).theta
    res = djam(prob, seed=1, tol=1e-10, max_rounds=40_000)
    assert res.converged and rel_errors(res.theta, ref).max() <= 1e-9


# ----------------------------------------------------------------------------------------------
# AT-17..20 engineering
# ----------------------------------------------------------------------------------------------
def test_at17_determinism(field):
    _inst, prob, ref = field
    a = djam(prob, seed=7, tol=1e-10)
    b = djam(prob, seed=7, tol=1e-10)  # same seed: bit-identical
    assert a.iterations == b.iterations
    np.testing.assert_array_equal(a.theta, b.theta)
    pd.testing.assert_frame_equal(a.personal_models, b.personal_models)
    c = djam(prob, seed=8, tol=1e-10)
    assert np.abs(a.theta - c.theta).max() <= 1e-9
    # a Monte Carlo replica is the single run with the same seed
    mc = djam_monte_carlo(prob, [7], 2 * prob.graph.n_edges, ref, record_every=prob.graph.n_edges)
    single = quiet(djam, prob, seed=7, tol=0.0, max_rounds=2 * prob.graph.n_edges, reference=ref)
    np.testing.assert_allclose(
        mc["mean_rel_err"].to_numpy(), single.diagnostics["mean_rel_err"].to_numpy(), rtol=0, atol=0
    )


@pytest.mark.parametrize("kind", ["huber", "quadratic", "logistic"])
def test_at18_matching_engine_equals_simulation(kind, field):
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


def test_at18_colour_sweeps_contract(field):
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


def test_at19_personal_models_roundtrip_parquet(field):
    _inst, prob, _ref = field
    res = djam(prob, seed=0)
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(res.personal_models, preserve_index=False), buf)
    back = pq.read_table(io.BytesIO(buf.getvalue())).to_pandas()
    pd.testing.assert_frame_equal(back, res.personal_models)
    assert len(back) == prob.n and back["agent"].is_unique
    assert list(back.columns) == ["agent", "theta", "residual", "component", "n_samples"]
    d = res.diagnostics
    assert list(d.columns) == [
        "round",
        "kkt_norm",
        "error_bound",
        "rel_error_bound",
        "mean_rel_err",
        "max_rel_err",
        "V",
    ]


def test_at20_budget(field):
    _inst, prob, _ref = field
    with pytest.warns(RuntimeWarning, match="DJAM stopped at max_rounds = 300"):
        res = djam(prob, seed=0, tol=1e-8, max_rounds=300)
    assert not res.converged and res.iterations == 300
    assert len(res.personal_models) == prob.n and np.isfinite(res.theta).all()
    assert res.diagnostics["round"].iloc[-1] == 300


# ----------------------------------------------------------------------------------------------
# baselines, blocked mode, entry point, crowdsourcing instantiation
# ----------------------------------------------------------------------------------------------
def test_cl_admm_converges_to_optimum(field):
    _inst, prob, ref = field
    res = cl_admm(prob, rho=0.316, seed=0, tol=1e-8, reference=ref)
    assert res.converged and res.metadata["rho"] == 0.316
    assert np.linalg.norm(res.theta - ref) <= res.error_bound + 1e-15
    assert np.abs(res.theta - ref).max() <= 1e-7
    rows, edges = quadratic_tables(12, n=15)
    qprob = build_problem(rows, edges, reg=0.1)
    qref = centralized(qprob).theta
    q = cl_admm(qprob, rho=1.0, seed=1, tol=1e-10)
    assert q.converged and np.abs(q.theta - qref).max() <= 1e-9
    # single run equals the Monte Carlo replica with the same seed
    mc = cl_admm_monte_carlo(prob, [3], 2 * prob.graph.n_edges, ref, rho=1.0, record_every=prob.graph.n_edges)
    single = quiet(cl_admm, prob, rho=1.0, seed=3, tol=0.0, max_rounds=2 * prob.graph.n_edges, reference=ref)
    np.testing.assert_allclose(mc["mean_rel_err"].to_numpy(), single.diagnostics["mean_rel_err"].to_numpy(), rtol=1e-13)


def test_partition_blocks():
    inst = field_estimation_instance(21, n=60, radius=0.25)
    prob = inst.problem()
    block = partition_agents(prob.graph, 4)
    assert set(block.tolist()) == {0, 1, 2, 3}
    assert np.bincount(block).min() >= 60 // 4
    cut = np.mean(block[prob.graph.u] != block[prob.graph.v])
    assert cut < 0.5


@pytest.mark.parametrize("kind", ["huber", "quadratic"])
def test_blocked_mode_equals_centralized(kind):
    if kind == "huber":
        prob = field_estimation_instance(22, n=40, radius=0.3).problem()
    else:
        rows, edges = quadratic_tables(23, n=40)
        prob = build_problem(rows, edges, reg=0.1)
    ref = centralized(prob).theta
    seq = djam_blocked(prob, n_blocks=4, seed=0, tol=1e-9)
    assert seq.converged and seq.metadata["n_blocks"] == 4 and seq.metadata["cut_edges"] > 0
    assert np.linalg.norm(seq.theta - ref) <= 1e-9 * max(1.0, np.linalg.norm(seq.theta))
    with ThreadPoolExecutor(max_workers=2) as ex:
        thr = djam_blocked(prob, n_blocks=4, seed=0, tol=1e-9, executor=ex)
    np.testing.assert_array_equal(seq.theta, thr.theta)
    calls = []

    def my_executor(fn, items):  # the callable form a Dask/Prefect adapter would take
        calls.append(len(items))
        return [fn(it) for it in reversed(items)][::-1]

    cal = djam_blocked(prob, n_blocks=4, seed=0, tol=1e-9, executor=my_executor)
    np.testing.assert_array_equal(seq.theta, cal.theta)
    assert calls and all(c == 4 for c in calls)


def test_fit_personal_models_entry_point(field):
    inst, _prob, ref = field
    kw = {"loss": "huber", "reg": inst.s, "huber_c": inst.huber_c, "huber_kappa": inst.huber_kappa}
    for method in ("centralized", "djam", "cl_admm", "djam_blocked"):
        res = fit_personal_models(inst.agents, inst.edges, method=method, tol=1e-7, **kw)
        assert res.method == method and res.converged
        np.testing.assert_allclose(res.personal_models["theta"].to_numpy(), ref[:, 0], atol=1e-6)
    with pytest.raises(ValueError, match="unknown method"):
        fit_personal_models(inst.agents, inst.edges, method="nope", **kw)


def test_doctests():
    for module in (fit_module, synth_module):
        res = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert res.failed == 0 and res.attempted >= 2


def _team_labels(seed: int):
    """Three teams of workers; each team labels its own tasks (binary), accuracy set per worker."""
    rng = np.random.default_rng(seed)
    team_acc = [0.92, 0.75, 0.6]
    rows, gold, acc = [], [], {}
    for t, base in enumerate(team_acc):
        workers = [f"t{t}w{k:02d}" for k in range(10)]
        for w in workers:
            acc[w] = float(np.clip(base + 0.03 * rng.standard_normal(), 0.5, 0.99))
        for task in range(60):
            tid = f"t{t}q{task:03d}"
            truth = int(rng.integers(0, 2))
            gold.append((tid, truth))
            for w in rng.choice(workers, 6, replace=False):
                lab = truth if rng.random() < acc[w] else 1 - truth
                rows.append((tid, w, lab))
    labels = pd.DataFrame(rows, columns=["task", "worker", "label"])
    truth = pd.DataFrame(gold, columns=["task", "label"])
    return labels, truth, acc


def test_worker_calibration_smooths_few_gold_answers():
    labels, truth, acc = _team_labels(0)
    # only 4 gold answers per worker
    rng = np.random.default_rng(1)
    gold_tasks = set()
    for _w, grp in labels.groupby("worker"):
        gold_tasks.update(rng.choice(grp["task"].to_numpy(), 4, replace=False).tolist())
    gold = truth[truth["task"].isin(gold_tasks)]
    agents, edges = worker_calibration_tables(labels, gold, k=4, min_overlap=3, strength=2.0, reg=1.0)
    assert set(agents.columns) >= {"agent", "y", "intercept", "reg", "prior_mean"}
    assert agents["y"].dropna().isin([0.0, 1.0]).all()
    assert (edges["weight"] > 0).all() and (edges["source"] < edges["target"]).all()
    # edges stay within teams (co-labels only happen inside a team)
    assert (edges["source"].str[:2] == edges["target"].str[:2]).all()
    res = fit_personal_models(agents, edges, loss="logistic", method="djam", tol=1e-7, allow_disconnected=True)
    cen = fit_personal_models(agents, edges, loss="logistic", method="centralized", allow_disconnected=True)
    assert res.converged and np.linalg.norm(res.theta - cen.theta) <= res.error_bound
    smooth = 1 / (1 + np.exp(-res.personal_models.set_index("agent")["theta_intercept"]))
    # graph-free baseline: same loss and prior, no edges
    alone = fit_personal_models(agents, edges.iloc[:0], loss="logistic", method="centralized", allow_disconnected=True)
    indep = 1 / (1 + np.exp(-alone.personal_models.set_index("agent")["theta_intercept"]))
    true = pd.Series(acc).reindex(smooth.index)
    err_smooth = float(np.mean((smooth - true) ** 2))
    err_indep = float(np.mean((indep - true) ** 2))
    assert err_smooth < 0.6 * err_indep, (err_smooth, err_indep)


def test_worker_bias_tables_numeric():
    rng = np.random.default_rng(2)
    bias = {f"w{k}": (0.5 if k < 5 else -0.5) + 0.05 * rng.standard_normal() for k in range(10)}
    rows, gold = [], []
    for task in range(80):
        g = float(rng.normal(3, 1))
        gold.append((f"q{task}", g))
        group = [f"w{k}" for k in range(5)] if task % 2 == 0 else [f"w{k}" for k in range(5, 10)]
        for w in group:
            rows.append((f"q{task}", w, g + bias[w] + 0.3 * rng.standard_normal()))
    labels = pd.DataFrame(rows, columns=["task", "worker", "label"])
    truth = pd.DataFrame(gold, columns=["task", "label"]).iloc[:6]  # 3 gold tasks per group
    agents, edges = worker_calibration_tables(labels, truth, target="bias", k=3, reg=1.0)
    res = fit_personal_models(agents, edges, loss="quadratic", method="djam", tol=1e-10, allow_disconnected=True)
    est = res.personal_models.set_index("agent")["theta_intercept"]
    assert np.abs(est - pd.Series(bias)).max() < 0.3


def test_preference_tables_recover_personal_tastes():
    rng = np.random.default_rng(4)
    items = pd.DataFrame(
        {"item": [f"i{k}" for k in range(15)], "f0": rng.standard_normal(15), "f1": rng.standard_normal(15)}
    )
    X = items[["f0", "f1"]].to_numpy()
    users = [f"u{k}" for k in range(12)]
    taste = {u: (np.array([2.0, 0.0]) if k < 6 else np.array([0.0, -2.0])) for k, u in enumerate(users)}
    rows = []
    for u in users:
        for _ in range(40):
            a, b = rng.choice(15, 2, replace=False)
            p = 1 / (1 + np.exp(-(X[a] - X[b]) @ taste[u]))
            rows.append((u, f"i{a}", f"i{b}", 1 if rng.random() < p else -1))
    comps = pd.DataFrame(rows, columns=["annotator", "item_a", "item_b", "outcome"])
    comps.loc[:3, "outcome"] = 0  # a few ties
    agents = preference_tables(comps, items)
    assert len(agents) == len(comps) + 4 and agents["weight"].sum() == pytest.approx(len(comps))
    # similarity graph: a ring inside each taste group
    grp = [users[:6], users[6:]]
    edges = pd.DataFrame(
        [(g[k], g[(k + 1) % 6], 1.0) for g in grp for k in range(6)], columns=["source", "target", "weight"]
    )
    res = fit_personal_models(agents, edges, loss="logistic", reg=0.1, method="djam", tol=1e-8, allow_disconnected=True)
    cen = fit_personal_models(agents, edges, loss="logistic", reg=0.1, method="centralized", allow_disconnected=True)
    assert res.converged and np.linalg.norm(res.theta - cen.theta) <= res.error_bound
    th = res.personal_models.set_index("agent")[["theta_x_0", "theta_x_1"]]
    for u in users:
        t = th.loc[u].to_numpy()
        cos = t @ taste[u] / (np.linalg.norm(t) * np.linalg.norm(taste[u]))
        assert cos > 0.9, (u, t)
    with pytest.raises(ValueError, match=r"unknown item id\(s\) \[zz\]"):
        preference_tables(comps.assign(item_b="zz"), items)


def test_no_edges_gives_local_minimisers():
    agents = pd.DataFrame({"agent": ["a", "a", "b"], "y": [1.0, 3.0, -2.0]})
    empty = pd.DataFrame({"source": [], "target": [], "weight": []})
    with pytest.raises(ValueError, match="graph is not connected: 2 components"):
        build_problem(agents, empty)
    prob = build_problem(agents, empty, reg=1.0, prior_mean=0.5, allow_disconnected=True)
    local = np.array([(1 + 3 + 0.5) / 3, (-2 + 0.5) / 2])  # (Σy + λθ̄)/(K + λ)
    for res in (djam(prob), cl_admm(prob), centralized(prob), djam_blocked(prob, n_blocks=2)):
        assert res.converged
        np.testing.assert_allclose(res.theta[:, 0], local, rtol=1e-14)
    mc = djam_monte_carlo(prob, [0, 1], 100, local[:, None])
    assert (mc["mean_rel_err"] <= 1e-15).all()
