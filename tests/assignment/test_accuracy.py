"""Expected accuracy of the MAP vote (crowdflow.assignment.accuracy).

Acceptance tests of docs/methods/assignment.md §7.4: T13 (the corrected gradient of the smoothed
objective) and T14 (Monte Carlo against exact enumeration).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.assignment.accuracy import (
    expected_accuracy,
    map_accuracy_exact,
    map_accuracy_mc,
    sample_votes,
    smoothed_accuracy,
)

# ---------------------------------------------------------------------------------------------
# crowdsourcing objective: T13 gradient, T14 accuracy oracle
# ---------------------------------------------------------------------------------------------


def test_t13_corrected_gradient_matches_finite_differences():
    rng = np.random.default_rng(15)
    p, m = 40, 6
    t_idx = rng.integers(0, m, size=p)
    q = rng.uniform(0.5, 0.9, size=p)
    prior = rng.uniform(0.3, 0.7, size=m)
    W = rng.random(p)
    Z1, Z0 = sample_votes(q, 5, rng)
    _, g = smoothed_accuracy(W, Z1, Z0, t_idx, prior)
    h = 1e-6
    fd = np.array(
        [
            (
                smoothed_accuracy(W + h * e, Z1, Z0, t_idx, prior)[0]
                - smoothed_accuracy(W - h * e, Z1, Z0, t_idx, prior)[0]
            )
            / (2 * h)
            * m
            for e in np.eye(p)
        ]
    )
    assert np.max(np.abs(fd - g)) / np.max(np.abs(g)) < 1e-4


def test_t14_mc_accuracy_matches_exact_enumeration():
    rng = np.random.default_rng(16)
    m = 30
    counts = rng.integers(0, 9, size=m)
    counts[0] = 0
    t_idx = np.repeat(np.arange(m), counts)
    q = rng.uniform(0.5, 0.9, size=t_idx.size)
    prior = np.full(m, 0.5)
    prior[1:10] = rng.uniform(0.2, 0.8, size=9)
    exact = map_accuracy_exact(q, t_idx, prior)
    mc = map_accuracy_mc(q, t_idx, prior, samples=20_000, seed=0)
    assert np.max(np.abs(mc - exact)) < 0.01
    assert exact[0] == 0.5  # task with no worker, prior 0.5 (ties go to 1)
    # one worker: accuracy = Q when prior is flat
    assert map_accuracy_exact(np.array([0.7]), np.array([0]), np.array([0.5]))[0] == pytest.approx(0.7)
    # two workers with equal Q: a 1–1 split ties and goes to 1 -> accuracy = Q² + Q(1−Q)
    acc = map_accuracy_exact(np.array([0.7, 0.7]), np.array([0, 0]), np.array([0.5]))[0]
    assert acc == pytest.approx(0.7**2 + 0.7 * 0.3)
    df = pd.DataFrame({"task": t_idx.astype(str), "worker": "w", "quality": q})
    assert expected_accuracy(df, samples=None) == pytest.approx(
        map_accuracy_exact(q, np.unique(t_idx, return_inverse=True)[1], np.full(np.unique(t_idx).size, 0.5)).mean()
    )
