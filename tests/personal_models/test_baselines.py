"""The CL-ADMM baseline (crowdflow.personal_models.baselines): convergence, AT-14, matching engine.

docs/methods/personal_models.md §4.2 (the reconstruction) and §5.3 (the comparison with DJAM).
"""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.personal_models import (
    RHO_GRID,
    build_problem,
    centralized,
    cl_admm,
    cl_admm_monte_carlo,
    djam_monte_carlo,
    rel_errors,
)


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


def test_cl_admm_converges_to_optimum(field, quiet, quadratic_tables):
    _inst, prob, ref = field
    res = cl_admm(prob, rho=0.316, seed=0, tol=1e-8, reference=ref, engine="simulation")
    assert res.converged and res.metadata["rho"] == 0.316
    assert np.linalg.norm(res.theta - ref) <= res.error_bound + 1e-15
    assert np.abs(res.theta - ref).max() <= 1e-7
    rows, edges = quadratic_tables(12, n=15)
    qprob = build_problem(rows, edges, reg=0.1)
    qref = centralized(qprob).theta
    q = cl_admm(qprob, rho=1.0, seed=1, tol=1e-10, engine="simulation")
    assert q.converged and np.abs(q.theta - qref).max() <= 1e-9
    # single run equals the Monte Carlo replica with the same seed
    mc = cl_admm_monte_carlo(prob, [3], 2 * prob.graph.n_edges, ref, rho=1.0, record_every=prob.graph.n_edges)
    single = quiet(
        cl_admm, prob, rho=1.0, seed=3, tol=0.0, max_rounds=2 * prob.graph.n_edges, reference=ref, engine="simulation"
    )
    np.testing.assert_allclose(mc["mean_rel_err"].to_numpy(), single.diagnostics["mean_rel_err"].to_numpy(), rtol=1e-13)


def test_cl_admm_matching_equals_simulation(scaled, quiet):
    _inst, prob, ref = scaled
    m = prob.graph.n_edges
    for rho in (0.316, 3.16):
        a = quiet(cl_admm, prob, rho=rho, seed=4, tol=0.0, max_rounds=4 * m, engine="simulation")
        b = quiet(cl_admm, prob, rho=rho, seed=4, tol=0.0, max_rounds=4 * m, engine="matching")
        np.testing.assert_array_equal(a.theta, b.theta)
    c = cl_admm(prob, rho=0.316, seed=4, tol=1e-9, engine="matching")
    assert c.converged and rel_errors(c.theta, ref).mean() <= 1e-6
    with pytest.raises(ValueError, match="unknown engine"):
        cl_admm(prob, engine="threads")
