"""Signs and votes (docs/methods/skills.md §2.4, §2.7; §6 AT-O4): the sum rule and BFS sign propagation,
the log-odds MAP vote and its posterior in closed form."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from crowdflow.labels import encode_labels
from crowdflow.skills import fit_skills, prediction_error
from crowdflow.skills.consensus import resolve_signs, vote_weights, weighted_consensus
from crowdflow.skills.rank_one import fit_rank_one
from crowdflow.synth import skills as synth


def fit_quiet(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fit_skills(*args, **kwargs)


def skills_of(result, data: synth.SyntheticLabels) -> np.ndarray:
    return result.skills.set_index("worker").loc[list(data.workers), "skill"].to_numpy()


def test_at_o4_sign_convention():
    rng = np.random.default_rng(6)
    s = rng.uniform(0.2, 0.8, 30)
    wi, ti = synth.random_assignment(30, 2000, 5, seed=6)
    pos = synth.one_coin_labels(s, wi, ti, 2, seed=6)
    neg = synth.one_coin_labels(-s, wi, ti, 2, seed=6)
    r_pos, r_neg = fit_quiet(pos.labels, method="pgd"), fit_quiet(neg.labels, method="pgd")
    # negated true skills: the sum rule picks the mirrored solution, i.e. the same skills (+s)
    assert np.sqrt(np.mean((skills_of(r_neg, neg) - s) ** 2)) <= 0.1
    assert np.sqrt(np.mean((skills_of(r_pos, pos) - s) ** 2)) <= 0.1
    # documented sign-convention failure: the predictions are the mirror image (error ≈ 1 − error(+s))
    e_pos, e_neg = prediction_error(r_pos.consensus, pos.truth), prediction_error(r_neg.consensus, neg.truth)
    assert e_pos <= 0.15 and abs(e_neg - (1 - e_pos)) <= 0.03
    # flipping every label: identical skills, every prediction flipped
    flipped = pos.labels.assign(label=np.where(pos.labels["label"] == "1", "0", "1"))
    r_flip = fit_quiet(flipped, method="pgd")
    np.testing.assert_array_equal(r_flip.skills["skill"].to_numpy(), r_pos.skills["skill"].to_numpy())
    a = r_pos.consensus["label"].to_numpy()
    b = r_flip.consensus["label"].to_numpy()
    assert np.all(a != b)  # 5 labels per task: no ties
    # sign rule is applied per component: two components, one mirrored
    x = np.array([0.5, 0.4, -0.6, -0.2, -0.3])
    lab = np.array([0, 0, 0, 1, 1])
    np.testing.assert_allclose(resolve_signs(x, lab), [0.5, 0.4, -0.6, 0.2, 0.3])


def test_sign_mode_bfs_noiseless_and_real_signs():
    s = np.array([0.8, -0.5, 0.6, 0.7, -0.3, 0.9, 0.4])
    edges = synth.complete_edges(7)
    c = synth.rank_one_moments(edges, s)
    w = synth.adjacency(edges, 7)
    fit = fit_rank_one(abs(c), w, 1e-3, 1.0, tol=1e-14, max_iter=100_000, solver="gd")
    np.testing.assert_allclose(fit.x, np.abs(s), atol=1e-9)
    x = resolve_signs(fit.x, np.zeros(7, dtype=int), "bfs", c_hat=c)
    np.testing.assert_allclose(x, s, atol=1e-9)
    # S2 with EG on labels: agrees with S1 on clearly skilled data
    data = synth.one_coin_labels(np.linspace(0.3, 0.9, 15), *synth.random_assignment(15, 1500, 4, seed=8), 2, seed=8)
    r1 = fit_quiet(data.labels, method="pgd", solver="scaled")
    r2 = fit_quiet(data.labels, method="pgd", sign_mode="bfs", solver="eg", max_iter=50_000)
    np.testing.assert_allclose(r1.skills["skill"], r2.skills["skill"], atol=0.05)
    with pytest.raises(ValueError, match="bfs"):
        fit_skills(data.labels, method="pgd", solver="eg")


def test_map_vote_posterior_closed_form():
    df = pd.DataFrame({"task": ["t", "t", "t"], "worker": ["a", "b", "c"], "label": ["1", "1", "0"]})
    lm = encode_labels(df)
    s = np.array([0.6, 0.2, 0.9])
    v = vote_weights(s, 2)
    np.testing.assert_allclose(v, np.log((1 + s) / (1 - s)))
    out = weighted_consensus(lm, v)
    score = v[0] + v[1] - v[2]  # score_t = sum_i v_i Y_it with Y in {-1, +1}
    expected_label = "1" if score > 0 else "0"
    assert out.consensus.loc[0, "label"] == expected_label
    assert out.consensus.loc[0, "confidence"] == pytest.approx(1 / (1 + math.exp(-abs(score))))
    # multiclass weights log((1 + (M-1) s)/(1 - s)) = log((M-1) p/(1-p))
    p = np.array([0.5, 0.7])
    s3 = (3 * p - 1) / 2
    np.testing.assert_allclose(vote_weights(s3, 3), np.log(2 * p / (1 - p)))
