"""Candidate scores from skills and consensus confidence (crowdflow.assignment.scores)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.assignment.accuracy import sample_votes, smoothed_accuracy
from crowdflow.assignment.fit import assign_tasks
from crowdflow.assignment.scores import candidate_scores

# ---------------------------------------------------------------------------------------------
# candidate scores from skills and confidence
# ---------------------------------------------------------------------------------------------


def test_candidate_scores_formula_and_gradient_identity():
    skills = pd.DataFrame({"worker": ["a", "b", "c"], "accuracy": [0.9, 0.6, 0.3]})
    consensus = pd.DataFrame({"task": ["x", "y"], "confidence": [0.5, 0.95]})
    sc = candidate_scores(skills, consensus)
    assert len(sc) == 6 and list(sc.columns) == ["task", "worker", "score", "quality", "prior"]
    q = sc["quality"].to_numpy()
    pi = sc["prior"].to_numpy()
    np.testing.assert_allclose(sc["score"], pi * (1 - pi) * (2 * q - 1) * np.log(q / (1 - q)))
    assert (sc["score"] > 0).all()
    s = sc.set_index(["task", "worker"])["score"]
    assert s[("x", "a")] > s[("y", "a")]  # uncertain task first
    assert s[("x", "a")] > s[("x", "b")]  # better worker first
    # the score is the expected corrected gradient at W = 0 (Monte Carlo, fixed seed)
    rng = np.random.default_rng(14)
    t_idx = np.array([0, 0, 0, 1, 1, 1])
    Z1, Z0 = sample_votes(q, 200_000, rng)
    _, g = smoothed_accuracy(np.zeros(6), Z1, Z0, t_idx, np.array([0.5, 0.95]))
    np.testing.assert_allclose(g, sc["score"].to_numpy(), atol=4e-3)
    # skill column (binary one-coin s = 2p − 1) gives the same quality
    sc2 = candidate_scores(pd.DataFrame({"worker": ["a", "b", "c"], "skill": [0.8, 0.2, -0.4]}), consensus)
    np.testing.assert_allclose(sc2["quality"], sc["quality"])


def test_candidate_scores_pairs_and_missing_workers():
    skills = pd.DataFrame({"worker": ["a", "b"], "accuracy": [0.8, np.nan]})
    pairs = pd.DataFrame({"task": ["x", "y", "z"], "worker": ["a", "b", "a"]})
    with pytest.raises(ValueError, match="without a usable"):
        candidate_scores(skills, None, pairs)
    sc = candidate_scores(skills, None, pairs, missing="drop")
    assert list(zip(sc.task, sc.worker, strict=True)) == [("x", "a"), ("z", "a")]
    assert (sc["prior"] == 0.5).all()
    with pytest.raises(ValueError, match="pairs"):
        candidate_scores(skills)
    with pytest.raises(ValueError, match="confidence"):
        candidate_scores(skills, pd.DataFrame({"task": ["x"], "confidence": [1.5]}), pairs, missing="drop")
    # scores feed straight into assign_tasks
    res = assign_tasks(sc, budget=1, worker_cap=1, task_cap=1)
    assert res.n_selected == 1
