"""The smoothed BTL objective: loss against a loop and cvxpy, gradient and Hessian-vector
products against finite differences, blocked evaluation, the stable log-sum-exp."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from crowdflow.personal_rankings import PairData, PersonalComparisons, encode_personal_comparisons
from crowdflow.personal_rankings.btl import paper_lambda
from crowdflow.personal_rankings.objective import SmoothedBTLObjective
from crowdflow.synth.personal_rankings import synthetic_personal_comparisons

SIGMA = 0.18


def test_loss_matches_direct_loop_and_cvxpy(
    small: tuple[PersonalComparisons, np.ndarray], rand_point: Callable[..., tuple[np.ndarray, np.ndarray]]
) -> None:
    import cvxpy as cp
    import scipy.sparse as sp

    syn = synthetic_personal_comparisons(12, 2, 5, seed=4)
    enc = encode_personal_comparisons(syn.comparisons)
    obj = SmoothedBTLObjective(enc.pairs, SIGMA, 0.0)
    X = np.random.default_rng(0).uniform(-1, 1, (enc.m, enc.n))
    ours = obj.dense_value(X)
    # direct Σ −log f(y Δ) over the raw rows
    df = syn.comparisons
    u = df["annotator"].str[1:].astype(int).to_numpy()
    a = df["item_a"].str[1:].astype(int).to_numpy()
    b = df["item_b"].str[1:].astype(int).to_numpy()
    y = df["outcome"].to_numpy()
    direct = 0.0
    for i in range(len(df)):
        direct += -np.log(1.0 / (1.0 + np.exp(-y[i] * (X[u[i], a[i]] - X[u[i], b[i]]) / SIGMA)))
    assert ours == pytest.approx(direct, rel=1e-9)
    # factor path agrees with the dense reference
    L, R = rand_point(enc.m, enc.n, 2)
    assert obj.evaluate(L, R).f == pytest.approx(obj.dense_value(L @ R.T), rel=1e-12)
    # cvxpy's logistic expression at the same X (docs/methods/personal_rankings.md §6.1, item 2)
    N = len(df)
    A = sp.csr_matrix(
        (np.r_[np.ones(N), -np.ones(N)], (np.r_[np.arange(N), np.arange(N)], np.r_[u * enc.n + a, u * enc.n + b])),
        shape=(N, enc.m * enc.n),
    )
    Xv = cp.Parameter((enc.m, enc.n), value=X)
    expr = cp.sum(cp.logistic(cp.multiply(-y / SIGMA, A @ cp.vec(Xv, order="C"))))
    assert ours == pytest.approx(float(expr.value), rel=1e-9)


def test_euclidean_gradient_finite_differences(
    small_obj: SmoothedBTLObjective, rand_point: Callable[..., tuple[np.ndarray, np.ndarray]]
) -> None:
    obj = small_obj
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, (obj.m, obj.n))
    G = obj.dense_gradient(X)
    t = 1e-5
    for _ in range(5):
        E = rng.standard_normal(X.shape)
        fd = (obj.dense_value(X + t * E) - obj.dense_value(X - t * E)) / (2 * t)
        assert abs(fd - np.sum(G * E)) <= 1e-6 * abs(fd)
    # factor gradients are (G R, Gᵀ L)
    L, R = rand_point(obj.m, obj.n, 3)
    pt = obj.evaluate(L, R)
    G = obj.dense_gradient(L @ R.T)
    np.testing.assert_allclose(pt.egrad_L, G @ R, rtol=1e-10, atol=1e-10 * np.abs(G @ R).max())
    np.testing.assert_allclose(pt.egrad_R, G.T @ L, rtol=1e-10, atol=1e-10 * np.abs(G.T @ L).max())


def test_euclidean_hessian_vector_finite_differences(
    small_obj: SmoothedBTLObjective, rand_point: Callable[..., tuple[np.ndarray, np.ndarray]]
) -> None:
    obj = small_obj
    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, (obj.m, obj.n))
    t = 1e-5
    for _ in range(3):
        E = rng.standard_normal(X.shape)
        DG = obj.dense_hvp(X, E)
        fd = (obj.dense_gradient(X + t * E) - obj.dense_gradient(X - t * E)) / (2 * t)
        assert np.abs(fd - DG).max() <= 1e-6 * np.abs(DG).max()
    # factor Hessian: (DG[Ė] R + G ξ_R, DG[Ė]ᵀ L + Gᵀ ξ_L), also vs finite differences of the factor gradient
    L, R = rand_point(obj.m, obj.n, 3)
    xiL, xiR = rand_point(obj.m, obj.n, 3, seed=5, scale=1.0)
    pt = obj.evaluate(L, R)
    hL, hR = obj.ehess(pt, xiL, xiR)
    p1 = obj.evaluate(L + t * xiL, R + t * xiR)
    p0 = obj.evaluate(L - t * xiL, R - t * xiR)
    fdL = (p1.egrad_L - p0.egrad_L) / (2 * t)
    fdR = (p1.egrad_R - p0.egrad_R) / (2 * t)
    assert np.abs(fdL - hL).max() <= 1e-6 * np.abs(hL).max()
    assert np.abs(fdR - hR).max() <= 1e-6 * np.abs(hR).max()


def test_blocked_evaluation_equals_single_block(
    small: tuple[PersonalComparisons, np.ndarray], rand_point: Callable[..., tuple[np.ndarray, np.ndarray]]
) -> None:
    enc, _ = small
    lam = paper_lambda(enc.m, enc.n, 3)
    one = SmoothedBTLObjective(enc.pairs, SIGMA, lam)
    many = SmoothedBTLObjective(enc.pairs, SIGMA, lam, block_entries=7 * enc.n)  # 5 blocks (30 rows / 7)
    assert one.single_block and len(many.blocks) == 5
    L, R = rand_point(enc.m, enc.n, 3, scale=0.9)
    L[4] *= 3.0  # make the block maxima differ, exercising the streaming log-sum-exp rescaling
    xiL, xiR = rand_point(enc.m, enc.n, 3, seed=9)
    p1, p2 = one.evaluate(L, R), many.evaluate(L, R)
    assert p2.f == pytest.approx(p1.f, rel=1e-13)
    np.testing.assert_allclose(p2.egrad_L, p1.egrad_L, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(p2.egrad_R, p1.egrad_R, rtol=1e-10, atol=1e-10)
    for a, b in zip(one.ehess(p1, xiL, xiR), many.ehess(p2, xiL, xiR), strict=False):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9 * np.abs(a).max())


def test_stable_regularizer() -> None:
    obj = SmoothedBTLObjective(PairData.from_triples(1, 2, [0], [0], [1]), SIGMA, 1.0)
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (20, 30))
    X[3, 4] = 30.0
    with np.errstate(over="ignore"):
        naive = np.log(np.exp(X**2).sum())
    assert not np.isfinite(naive)
    v = obj.log_sum_exp_sq(X)
    assert np.isfinite(v) and v == pytest.approx(900.0, abs=1e-6)
    Y = rng.uniform(-2, 2, (20, 30))
    assert obj.log_sum_exp_sq(Y) == pytest.approx(np.log(np.exp(Y**2).sum()), rel=1e-12)
    # the smoothed ∞-norm bracket ‖X‖_∞² ≤ μ log Σ exp(X²/μ) ≤ ‖X‖_∞² + μ ln(mn)
    assert np.abs(Y).max() ** 2 <= obj.log_sum_exp_sq(Y) <= np.abs(Y).max() ** 2 + np.log(Y.size)
