"""IHT / GradMP with the TVCS projection (docs/methods/assignment.md §4).

Acceptance tests T11–T12 of docs/methods/assignment.md §7.4.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.assignment.iht import Loss, exact_recovery, gradmp, iht, relax_constraints, selection_recall
from crowdflow.assignment.projector import TVCSProjector
from crowdflow.synth.assignment import synthetic_tvcs


def _recovery(n, seeds, keep, max_iter=100):
    recalls, successes = [], []
    for seed in seeds:
        d = synthetic_tvcs(n, seed=seed)
        loss = Loss("squares", d.X, d.y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # GradMP may cycle at small n
            r = gradmp(loss, relax_constraints(d.constraints, keep), max_iter=max_iter)
        w = TVCSProjector(d.constraints).project(r.w)  # every result projected onto the full set
        assert d.constraints.is_feasible((w != 0).astype(np.int8))
        recalls.append(selection_recall(w, d.w_true))
        successes.append(exact_recovery(w, d.w_true))
    return float(np.mean(recalls)), float(np.mean(successes))


def test_t11_gradmp_recovery_n400():
    """T11: full-TVCS GradMP at n = 400 over 5 seeds: recall ≥ 0.95, success ≥ 0.8."""
    recall, success = _recovery(400, range(5), ("total", "view1", "view2"))
    assert recall >= 0.95 and success >= 0.8, (recall, success)


def test_t11_full_beats_overall_sparsity_n300():
    """T11: at n = 300 the full-TVCS recall is ≥ the overall-sparsity recall (5 seeds)."""
    full, _ = _recovery(300, range(5), ("total", "view1", "view2"), max_iter=20)
    overall, _ = _recovery(300, range(5), ("total",), max_iter=20)
    assert full >= overall, (full, overall)


def test_t12_iht_monotone_and_feasible():
    d = synthetic_tvcs(300, seed=1)
    loss = Loss("squares", d.X, d.y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = iht(loss, d.constraints, max_iter=60)
    f = r.trace
    assert np.all(np.diff(f) <= 1e-9 * np.maximum(1.0, f[:-1])), "f(w_t) must be non-increasing (γ = 1/L)"
    assert d.constraints.is_feasible((r.w != 0).astype(np.int8))
    assert f[-1] < 0.2 * loss.value(np.zeros(400))


def test_iht_converges_and_warns():
    d = synthetic_tvcs(400, seed=2)
    loss = Loss("squares", d.X, d.y)
    with pytest.warns(RuntimeWarning, match="IHT did not converge"):
        r = iht(loss, d.constraints, max_iter=3)
    assert not r.converged and r.iterations == 3
    r = gradmp(loss, d.constraints)
    assert r.converged and r.iterations < 10 and exact_recovery(r.w, d.w_true)
    # warm start from the truth is a fixed point of IHT up to the noise level
    r = iht(loss, d.constraints, w0=d.w_true, max_iter=500)
    assert r.converged and exact_recovery(r.w, d.w_true)


@pytest.mark.parametrize("kind", ["squares", "logistic", "squared_hinge"])
def test_loss_gradients_finite_differences(kind):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 8))
    y = rng.standard_normal(30) if kind == "squares" else np.sign(rng.standard_normal(30))
    loss = Loss(kind, X, y)
    w = rng.standard_normal(8) * 0.3
    _, g = loss.value_grad(w)
    h = 1e-6
    fd = np.array([(loss.value(w + h * e) - loss.value(w - h * e)) / (2 * h) for e in np.eye(8)])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)
    # Lipschitz constant bounds the gradient change
    w2 = rng.standard_normal(8)
    assert np.linalg.norm(loss.value_grad(w2)[1] - g) <= loss.lipschitz() * np.linalg.norm(w2 - w) + 1e-9


def test_classification_full_tvcs_recall():
    """docs/methods/assignment.md §4.4 classification (squared hinge, n = 800): full TVCS selects more of the true
    support than overall sparsity, with a test error well below chance."""
    rec = {"full": [], "overall": []}
    err = []
    for seed in range(3):
        d = synthetic_tvcs(800, seed=seed, task="classification")
        loss = Loss("squared_hinge", d.X, d.y)
        full = TVCSProjector(d.constraints)
        for name, keep in (("full", ("total", "view1", "view2")), ("overall", ("total",))):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                r = gradmp(loss, relax_constraints(d.constraints, keep), max_iter=20)
            w = full.project(r.w)
            rec[name].append(selection_recall(w, d.w_true))
            if name == "full":
                err.append(np.mean(np.sign(d.X_test @ w) != d.y_test))
    assert np.mean(rec["full"]) > np.mean(rec["overall"])
    assert np.mean(err) < 0.3


def test_relax_constraints_and_inputs():
    cons = TVCSConstraints.build(4, [0, 0, 1, 1], [0, 1, 0, 1], 1, 1, 2)
    ov = relax_constraints(cons, ("total",))
    np.testing.assert_array_equal(ov.caps1, [2, 2])
    assert ov.total == 2
    with pytest.raises(ValueError):
        relax_constraints(cons, ("rows",))
    with pytest.raises(ValueError, match="labels"):
        Loss("logistic", np.ones((2, 2)), np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="finite"):
        Loss("squares", np.array([[np.nan]]), np.array([1.0]))
    with pytest.raises(ValueError):
        iht(Loss("squares", np.ones((2, 4)), np.ones(2)), cons, step=-1.0)
