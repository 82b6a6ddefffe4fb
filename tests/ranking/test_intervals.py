"""Least-squares score intervals (crowdflow.ranking.intervals) against a dense computation."""

from __future__ import annotations

import numpy as np
import pandas as pd

from crowdflow.ranking import score_intervals


def test_score_intervals_match_dense_least_squares() -> None:
    """σ̂²·diag(L⁺) from the sparse grounded solves equals the dense pseudo-inverse computation."""
    rng = np.random.default_rng(3)
    n, m = 8, 60
    theta = np.linspace(1, -1, n)
    a = rng.integers(0, n, m)
    b = (a + rng.integers(1, n, m)) % n
    y = theta[a] - theta[b] + rng.normal(0, 0.3, m)
    w = rng.integers(1, 3, m).astype(float)
    X = np.zeros((m, n))
    X[np.arange(m), a] = 1
    X[np.arange(m), b] = -1
    Lw = X.T @ (w[:, None] * X)
    score = np.linalg.pinv(Lw) @ X.T @ (w * y)
    items = [f"i{k}" for k in range(n)]
    ranking = pd.DataFrame({"item": items, "score": score, "component": 0})
    rows = pd.DataFrame(
        {
            "item_a": np.array(items)[a],
            "item_b": np.array(items)[b],
            "weight": w,
            "residual": y - (score[a] - score[b]),
            "is_outlier": False,
        }
    )
    got = score_intervals(ranking, rows).set_index("item").loc[items]
    sigma2 = np.sum(w * (y - X @ score) ** 2) / (m - n + 1)
    want = np.sqrt(sigma2 * np.diag(np.linalg.pinv(Lw)))
    np.testing.assert_allclose(got["se"].to_numpy(), want, rtol=1e-8)
    np.testing.assert_allclose(got["upper"] - got["lower"], 2 * 1.96 * want, rtol=1e-8)
    # rows flagged as outliers do not count: the same dense computation on the other rows only
    rows.loc[:4, "is_outlier"] = True
    rows.loc[:4, "residual"] = 100.0
    keep = ~rows["is_outlier"].to_numpy()
    Xk, wk, rk = X[keep], w[keep], rows["residual"].to_numpy()[keep]
    sigma2_k = np.sum(wk * rk**2) / (int(keep.sum()) - n + 1)
    want_k = np.sqrt(sigma2_k * np.diag(np.linalg.pinv(Xk.T @ (wk[:, None] * Xk))))
    got_k = score_intervals(ranking, rows).set_index("item").loc[items]
    np.testing.assert_allclose(got_k["se"].to_numpy(), want_k, rtol=1e-8)
