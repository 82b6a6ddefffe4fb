"""The centralised optimum (crowdflow.personal_models.centralized) against cvxpy (AT-7).

An independent cvxpy model of J (docs/methods/personal_models.md §4.3) for Huber and logistic losses.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pandas as pd

from crowdflow.personal_models import (
    PersonalProblem,
    build_problem,
    centralized,
    djam,
)
from crowdflow.synth.personal_models import (
    field_estimation_instance,
)


def cvxpy_theta(prob: PersonalProblem) -> np.ndarray:
    """Independent cross-check: J written directly in cvxpy (½ Σ over edges, docs/methods/personal_models.md §4.3)."""
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


def test_at7_huber_centralized_newton_and_cvxpy(field):
    _inst, prob, _ref = field
    res = centralized(prob)
    assert res.converged and res.iterations <= 20
    assert np.abs(prob.kkt(res.theta)).max() <= 1e-12
    np.testing.assert_allclose(cvxpy_theta(prob), res.theta, atol=1e-6)


def test_at7_huber_multi_sample_and_logistic_vs_cvxpy(bt_tables):
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
    res = djam(prob, seed=0, tol=1e-11, engine="simulation")
    assert res.converged and np.abs(res.theta - ref.theta).max() <= 1e-9

    brows, bedges = bt_tables(9, n=12)
    bprob = build_problem(brows, bedges, loss="logistic", reg=0.1)
    bref = centralized(bprob)
    assert np.abs(bprob.kkt(bref.theta)).max() <= 1e-12
    np.testing.assert_allclose(cvxpy_theta(bprob), bref.theta, atol=1e-5)
