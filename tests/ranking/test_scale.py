"""Tests for crowdflow.ranking.scale: Huber's concomitant scale (docs/methods/ranking.md §3.4.1, §8.1 test 11)."""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.scale import huber_concomitant_scale
from crowdflow.synth.ranking import huber_instance, random_pairs


def test_concomitant_scale():
    """Test 11 of docs/methods/ranking.md §8.1: no outliers, n=50, m=5000, σ=0.3: σ̂ ∈ [0.27, 0.33] (a=0.7126); ≈0.68σ (a=1)."""
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
    """The (θ, σ) alternation reaches the jointly convex optimum (cvxpy quad_over_lin form, docs/methods/ranking.md §3.4.1)."""
    cp = pytest.importorskip("cvxpy")
    g = huber_instance(6).graph
    g = ComparisonGraph.from_arrays(g.i[:200], g.j[:200], g.y[:200], n=g.n)
    M, a = 1.35, 0.7126
    est = huber_concomitant_scale(g, M=M, a=a, scale_tol=1e-12)
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
