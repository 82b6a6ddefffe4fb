"""The report's plain least-squares baseline (crowdflow/ranking/baseline.py) equals HodgeRank's fit (fit_hodgerank)
on a family of comparison sets: sizes, weights, ties, several components, duplicated and flipped rows; and the
robust fit's flagged rows are what separates the two rankings (Kendall τ, top-k overlap)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.ranking import fit_hodgerank, fit_lbi
from crowdflow.ranking.baseline import compare_with_least_squares, least_squares_scores


def _comparisons(seed: int, n: int, m: int, parts: int, weighted: bool, ties: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, 1.5, n)
    part = np.arange(n) % parts  # items of each part are only compared with each other: `parts` components
    rows = []
    for _ in range(m):
        p = rng.integers(0, parts)
        members = np.flatnonzero(part == p)
        a, b = rng.choice(members, 2, replace=False)
        y = float(np.sign(theta[a] - theta[b] + rng.normal(0, 0.7)))
        if ties and rng.random() < 0.15:
            y = 0.0
        rows.append((f"u{rng.integers(0, 7)}", f"i{a:03d}", f"i{b:03d}", y))
    cmp = pd.DataFrame(rows, columns=["annotator", "item_a", "item_b", "outcome"])
    if weighted:
        cmp["weight"] = rng.uniform(0.2, 3.0, len(cmp)).round(3)
    return cmp


CASES = [
    (seed, n, m, parts, weighted, ties)
    for seed, (n, m, parts, weighted, ties) in enumerate(
        [
            (5, 30, 1, False, False),
            (12, 200, 1, True, False),
            (20, 400, 2, False, True),
            (40, 600, 3, True, True),
            (8, 60, 1, True, True),
            (30, 2000, 1, False, False),
        ]
    )
]


@pytest.mark.parametrize(("seed", "n", "m", "parts", "weighted", "ties"), CASES)
def test_baseline_equals_hodgerank(seed: int, n: int, m: int, parts: int, weighted: bool, ties: bool) -> None:
    cmp = _comparisons(seed, n, m, parts, weighted, ties)
    ref = fit_hodgerank(cmp, allow_disconnected=True)
    ls = least_squares_scores(ref.ranking, cmp)
    want = ref.ranking.set_index(ref.ranking["item"].astype(str))["score"]
    assert ls.notna().all()
    np.testing.assert_allclose(ls.reindex(want.index).to_numpy(), want.to_numpy(), atol=1e-8)


def test_flagged_rows_separate_the_rankings() -> None:
    """Adversarial rows that reverse the top: plain least squares is pulled, the robust fit is not; the comparison
    reports τ < 1, the flagged rows and a top-k overlap counted by hand."""
    rng = np.random.default_rng(3)
    n, m = 16, 900
    theta = np.linspace(3, -3, n)
    a = rng.integers(0, n, m)
    b = (a + rng.integers(1, n, m)) % n
    y = theta[a] - theta[b] + rng.normal(0, 0.3, m)
    bad = rng.random(m) < 0.12
    y[bad] = -3 * (theta[a[bad]] - theta[b[bad]])
    items = np.array([f"it{k:02d}" for k in range(n)])
    cmp = pd.DataFrame({"annotator": "u", "item_a": items[a], "item_b": items[b], "outcome": y})
    res = fit_lbi(cmp)
    cmp_rows = res.outliers
    out = compare_with_least_squares(res.ranking, cmp_rows)
    assert out is not None
    assert out.n_rows == m and out.n_flagged == int(cmp_rows["is_outlier"].sum()) > 0
    ls = least_squares_scores(res.ranking, cmp_rows)
    tab = out.table
    assert tab["score"].is_monotonic_decreasing
    np.testing.assert_allclose(tab["ls_score"].to_numpy(), ls.reindex(tab["item"]).to_numpy())
    k = out.k
    hand = len(set(tab.nlargest(k, "score")["item"]) & set(tab.nlargest(k, "ls_score")["item"]))
    assert out.top_overlap == hand
    from scipy.stats import kendalltau

    assert out.tau == pytest.approx(kendalltau(tab["score"], tab["ls_score"]).statistic)
    # the robust ranking recovers the true order better than the baseline the adversarial rows pulled
    truth = pd.Series(theta, index=items)
    tau_robust = kendalltau(tab["score"], truth.reindex(tab["item"])).statistic
    tau_ls = kendalltau(tab["ls_score"], truth.reindex(tab["item"])).statistic
    assert tau_robust > tau_ls
