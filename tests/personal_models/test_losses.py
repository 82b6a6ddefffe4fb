"""The exact local solvers G_i of the three loss families (crowdflow.personal_models.losses).

Huber against brute-force minimisation and the three single-sample cases, logistic against scipy
(docs/methods/personal_models.md §2.5).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize, minimize_scalar

from crowdflow.personal_models import (
    build_problem,
)


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
    """docs/methods/personal_models.md §2.5: the three closed-form cases for one observation."""
    agents = pd.DataFrame({"agent": ["a", "b"], "y": [0.0, 0.0]})
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


def test_logistic_local_solver_matches_scipy(bt_tables):
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
