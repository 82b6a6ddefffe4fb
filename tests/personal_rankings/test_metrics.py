"""From scores to rankings: Borda order, invariances, ties."""

from __future__ import annotations

import numpy as np

from crowdflow.personal_rankings import borda_scores, rankings_from_scores

SIGMA = 0.18


def test_rankings_match_borda_and_invariances() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((7, 9))
    ranks = rankings_from_scores(X)
    tau = borda_scores(X, SIGMA)
    np.testing.assert_array_equal(ranks, rankings_from_scores(tau))
    for i in range(7):
        assert sorted(ranks[i]) == list(range(1, 10))
        assert np.argsort(-X[i]).tolist() == np.argsort(ranks[i]).tolist()
    Y = 2.5 * X + rng.standard_normal((7, 1))
    np.testing.assert_array_equal(rankings_from_scores(Y), ranks)
    # ties: stable by item position
    assert rankings_from_scores(np.array([[1.0, 2.0, 1.0, 2.0]])).tolist() == [[3, 1, 4, 2]]
