"""Tests for crowdflow.ranking.hlasso: Huber equivalence, the split, the path, the budget rule (docs/methods/ranking.md §3, §8.1 tests 9–10)."""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.ranking.fit import fit_hlasso
from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.hlasso import hlasso, hlasso_path
from crowdflow.ranking.least_squares import hodgerank_scores
from crowdflow.ranking.numerics import shrink
from crowdflow.synth.ranking import comparison_table, huber_instance, mm13_instance


def _cvx_huber(g: ComparisonGraph, lam: float) -> np.ndarray:
    cp = pytest.importorskip("cvxpy")
    th = cp.Variable(g.n)
    obj = cp.sum(cp.multiply(g.w, cp.huber(g.X @ th - g.y, lam))) / 2
    cp.Problem(cp.Minimize(obj), [cp.sum(th) == 0]).solve(
        solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12
    )
    return th.value


def test_huber_equivalence():
    """Test 9 of docs/methods/ranking.md §8.1: HLASSO θ = Huber-regression θ (cvxpy) to 1e-4; γ = shrink(y − Xθ, λ) to 1e-8."""
    inst = huber_instance(1)
    g, truth = inst.graph, inst.outlier
    f = hlasso(g, 1.0)
    assert f.converged
    th_h = _cvx_huber(g, 1.0)
    assert np.abs(f.theta - th_h).max() < 1e-4
    np.testing.assert_allclose(f.gamma, shrink(g.y - g.X @ f.theta, 1.0), atol=1e-8)
    assert (f.support & truth).sum() == truth.sum()


def test_split_equivalence_and_lambda_max():
    """Test 10 of docs/methods/ranking.md §8.1: joint (HL) by cvxpy = two-stage (a)+(b) to 1e-6; λ_max and first entry."""
    cp = pytest.importorskip("cvxpy")
    g = huber_instance(2).graph
    w = g.w * np.linspace(0.5, 2.0, g.m)  # weighted version of the same data
    g = ComparisonGraph.from_arrays(g.i, g.j, g.y, w)
    lam = 0.8
    th, gm = cp.Variable(g.n), cp.Variable(g.m)
    obj = 0.5 * cp.sum(cp.multiply(g.w, cp.square(g.y - g.X @ th - gm))) + lam * cp.sum(cp.multiply(g.w, cp.abs(gm)))
    cp.Problem(cp.Minimize(obj), [cp.sum(th) == 0]).solve(
        solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12
    )
    f = hlasso(g, lam, tol=1e-12)
    assert np.abs(f.theta - th.value).max() < 1e-6
    assert np.abs(f.gamma - gm.value).max() < 1e-6
    ls_res = g.y - g.X @ hodgerank_scores(g)
    path = hlasso_path(g, n_lambdas=40)
    assert path.lambda_max == pytest.approx(np.abs(ls_res).max(), rel=1e-12)
    assert int(np.argmin(path.path_rank)) == int(np.argmax(np.abs(ls_res)))
    assert path.entry_lambda[np.argmax(np.abs(ls_res))] == pytest.approx(path.lambda_max)


def test_path_entry_lambda_is_refined():
    """Interpolated entry λ is where |r_k(λ)| = λ: re-solving just above / below flips the support."""
    g = huber_instance(4).graph
    path = hlasso_path(g, n_lambdas=30)
    order = np.argsort(-path.order_key)
    for k in order[3:8]:
        lam_e = path.entry_lambda[k]
        assert not hlasso(g, lam_e * 1.03).support[k]
        assert hlasso(g, lam_e * 0.97).support[k]


def test_budget_rule_includes_crossing_group():
    """docs/methods/ranking.md §3.4.3: flag the first rows along the path until ≥ 5 % of the weight, whole groups."""
    inst = mm13_instance(5, sn=600, op=0.1)
    i, j, y, flip = inst.graph.i, inst.graph.j, inst.graph.y, inst.outlier
    df = comparison_table(i, j, y)
    res = fit_hlasso(df, lambda_rule="budget", budget=0.05, diagnostics=False)
    out = res.outliers
    flagged = out["is_outlier"].to_numpy()
    assert flagged.sum() >= 0.05 * len(out)
    # flagged rows are a prefix of the path order
    assert out.loc[flagged, "path_rank"].max() < out.loc[~flagged, "path_rank"].min()
    # identical rows share the decision
    key = out.assign(
        o=np.where(out.item_a < out.item_b, out.outcome, -out.outcome),
        u=np.minimum(out.item_a, out.item_b),
        v=np.maximum(out.item_a, out.item_b),
    )
    assert key.groupby(["u", "v", "o"])["is_outlier"].nunique().max() == 1
    assert flip[flagged].mean() > 0.9


def test_hlasso_warns_when_not_converged():
    g = huber_instance(1).graph
    with pytest.warns(RuntimeWarning, match="did not converge"):
        hlasso(g, 0.05, max_iter=3)
