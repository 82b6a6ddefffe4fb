"""RTR and L-BFGS reach the same optimum, and the global optimum of the full-rank convex problem."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest

from crowdflow.personal_rankings import (
    PersonalComparisons,
    encode_personal_comparisons,
    fit_low_rank_btl,
    fit_personal_rankings,
    relative_error,
)
from crowdflow.personal_rankings.objective import SmoothedBTLObjective
from crowdflow.synth.personal_rankings import synthetic_personal_comparisons

SIGMA = 0.18


def test_solver_agreement_K100(
    encoded: Callable[[int, int, float, int], tuple[PersonalComparisons, np.ndarray]],
) -> None:
    enc, Xs = encoded(100, 5, 5, 1)
    out = {}
    for method in ("rtr", "lbfgs"):
        res = fit_personal_rankings(enc, rank=5, method=method)
        assert res.diagnostics.converged
        out[method] = (res.diagnostics.objective, relative_error(res.score_matrix(), Xs))
    assert out["rtr"][0] == pytest.approx(out["lbfgs"][0], rel=1e-6)
    assert abs(out["rtr"][1] - out["lbfgs"][1]) <= 0.005
    # RTR reaches the (lower or equal) objective: L-BFGS stops on relative reduction
    assert out["rtr"][0] <= out["lbfgs"][0] * (1 + 1e-9)


def test_full_rank_fit_reaches_cvxpy_global_optimum() -> None:
    """With r = min(m, n) the factorization covers every X, so F's convex global minimum is reachable."""
    import cvxpy as cp

    syn = synthetic_personal_comparisons(6, 2, 8, seed=2, n_items=7)
    enc = encode_personal_comparisons(syn.comparisons)
    m, n = enc.m, enc.n
    r = min(m, n)
    lam = 2.0
    p = enc.pairs
    X = cp.Variable((m, n))
    delta = X[p.user, p.a] - X[p.user, p.b]
    F = (
        p.w_pos @ cp.logistic(-delta / SIGMA)
        + p.w_neg @ cp.logistic(delta / SIGMA)
        + lam * cp.log_sum_exp(cp.square(X))
    )
    prob = cp.Problem(cp.Minimize(F))
    prob.solve(solver="CLARABEL")
    obj = SmoothedBTLObjective(p, SIGMA, lam)
    f_cvx = obj.dense_value(np.asarray(X.value))
    # both solvers are slow on this degenerate full-rank parametrization (the optimum's singular values
    # span 0.09–2.9, so the factor metric is ill-conditioned) but head to the same global optimum
    out, _ = fit_low_rank_btl(p, r, method="rtr", lambda_=lam)
    assert out.converged
    assert out.objective <= f_cvx * (1 + 1e-7)
    assert out.objective == pytest.approx(f_cvx, rel=1e-6)
    np.testing.assert_allclose(out.L @ out.R.T, X.value, atol=2e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out, _ = fit_low_rank_btl(p, r, method="lbfgs", lambda_=lam, max_iter=300)
    assert out.objective == pytest.approx(f_cvx, rel=1e-4)
