"""Tests for crowdflow.ranking.identifiability: conditions C0–C2 (docs/methods/ranking.md §5.2, §8.1 test 21)."""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.identifiability import identifiability
from crowdflow.synth.ranking import random_pairs


def test_identifiability_small_design():
    """Test 21 of docs/methods/ranking.md §8.1 (first part): n=16, m=1000, 5 % outliers: C2 holds in ≥ 95 % of 20 draws; ρ ≈ 2n/m."""
    holds, rhos = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        i, j = random_pairs(rng, 16, 1000)
        g = ComparisonGraph.from_arrays(i, j, np.ones(1000))
        r = identifiability(g, rng.choice(1000, 50, replace=False))
        holds.append(r.c2)
        rhos.append(r.rho)
        assert r.c1 and 0 < r.c_min <= 1
    assert np.mean(holds) >= 0.95
    assert 0.5 * 2 * 16 / 1000 <= np.mean(rhos) <= 2 * 2 * 16 / 1000


@pytest.mark.slow
def test_identifiability_dense_outliers_fail():
    """Test 21 of docs/methods/ranking.md §8.1 (second part): n=60, m=2000, 20 % outliers: C2 fails in ≥ 80 % of 20 draws."""
    fails, rhos = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        i, j = random_pairs(rng, 60, 2000)
        g = ComparisonGraph.from_arrays(i, j, np.ones(2000))
        r = identifiability(g, rng.choice(2000, 400, replace=False))
        fails.append(not r.c2)
        rhos.append(r.rho)
    assert np.mean(fails) >= 0.8
    assert 0.5 * 2 * 60 / 2000 <= np.mean(rhos) <= 2 * 2 * 60 / 2000
