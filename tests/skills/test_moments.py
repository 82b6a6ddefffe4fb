"""Moments of the skills fit: N, agreements and C^ against hand computations, dense references and
the unbiasedness of C^ (docs/methods/skills.md §2.1, §6 AT-U1, AT-U3); pair filters and spammer pruning
(docs/methods/skills.md §2.6)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from crowdflow.labels import encode_labels
from crowdflow.skills import fit_skills, prediction_error
from crowdflow.skills.inputs import prepare_labels
from crowdflow.skills.moments import label_moments, prune_spammer_edges
from crowdflow.synth import skills as synth


def fit_quiet(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fit_skills(*args, **kwargs)


HAND = [  # (task, worker, ±1 label)
    ("t1", "a", 1),
    ("t1", "b", 1),
    ("t1", "c", -1),
    ("t2", "a", 1),
    ("t2", "b", -1),
    ("t3", "b", 1),
    ("t3", "c", 1),
    ("t4", "a", -1),
    ("t4", "b", -1),
    ("t4", "c", -1),
]


@pytest.mark.parametrize("coding", ["pm1", "01", "strings"])
def test_at_u1_hand_moments(coding):
    mapping = {"pm1": {1: "1", -1: "-1"}, "01": {1: "1", -1: "0"}, "strings": {1: "yes", -1: "no"}}[coding]
    df = pd.DataFrame([(t, w, mapping[y]) for t, w, y in HAND], columns=["task", "worker", "label"])
    lm, _ = prepare_labels(df)
    mo = label_moments(lm)
    n = mo.co_labels.toarray()
    c = mo.c_hat.toarray()
    # hand computation: N_ab = 3 (t1,t2,t4), N_ac = 2 (t1,t4), N_bc = 3 (t1,t3,t4)
    assert np.array_equal(n, [[0, 3, 2], [3, 0, 3], [2, 3, 0]])
    # C~_ab = (1 - 1 + 1)/3, C~_ac = (-1 + 1)/2, C~_bc = (-1 + 1 + 1)/3
    expected = np.array([[0, 1 / 3, 0], [1 / 3, 0, 1 / 3], [0, 1 / 3, 0]])
    np.testing.assert_allclose(c, expected, atol=1e-15)
    assert np.array_equal(mo.agreements.toarray(), [[0, 2, 1], [2, 0, 2], [1, 2, 0]])


def test_at_u1_m2_path_equals_pm1_product():
    data = synth.one_coin_labels(
        np.linspace(-0.5, 0.9, 40), *synth.random_assignment(40, 2000, 4, seed=3), n_classes=2, seed=3
    )
    lm, _ = prepare_labels(data.labels)
    mo = label_moments(lm)
    y = np.where(lm.class_idx == 1, 1.0, -1.0)
    ym = sp.csr_matrix((y, (lm.worker_idx, lm.task_idx)), shape=(lm.n_workers, lm.n_tasks))
    s = (ym @ ym.T).tocsr()
    n = mo.co_labels
    s_on_n = np.asarray(s[n.tocoo().row, n.tocoo().col]).ravel()
    c_tilde = s_on_n / n.tocoo().data
    np.testing.assert_allclose(mo.c_hat.tocoo().data, c_tilde, rtol=0, atol=1e-12)
    assert n.nnz > 0 and np.all(n.diagonal() == 0)


def test_at_u3_multiclass_unbiased():
    m, w, t = 4, 5, 200_000
    p = np.array([0.9, 0.7, 0.5, 0.35, 0.25])
    s = (m * p - 1) / (m - 1)
    data = synth.one_coin_labels(s, *synth.clique_assignment(w, t), n_classes=m, seed=11)
    lm, _ = prepare_labels(data.labels, classes=data.classes)
    c = label_moments(lm).c_hat.toarray()
    expected = np.outer(s, s)
    off = ~np.eye(w, dtype=bool)
    assert np.max(np.abs(c[off] - expected[off])) <= 0.01


@pytest.mark.parametrize("seed", range(4))
def test_sparse_moments_equal_naive_dense(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 5))
    w, t = int(rng.integers(5, 30)), int(rng.integers(20, 200))
    data = synth.one_coin_labels(
        rng.uniform(0, 0.9, w), *synth.random_assignment(w, t, int(rng.integers(1, min(w, 6) + 1)), seed=seed), m, seed
    )
    lm = encode_labels(data.labels.sample(frac=1.0, random_state=seed))  # unsorted entries
    mo = label_moments(lm)
    y = np.full((lm.n_workers, lm.n_tasks), -1)
    y[lm.worker_idx, lm.task_idx] = lm.class_idx
    b = (y >= 0).astype(float)
    n = b @ b.T
    agree = sum(((y == c).astype(float) @ (y == c).astype(float).T) for c in range(lm.n_classes))
    np.fill_diagonal(n, 0)
    np.fill_diagonal(agree, 0)
    np.testing.assert_array_equal(mo.co_labels.toarray(), n)
    np.testing.assert_array_equal(mo.agreements.toarray(), agree)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(n > 0, (lm.n_classes * agree / n - 1) / (lm.n_classes - 1), 0.0)
    np.testing.assert_allclose(mo.c_hat.toarray(), c, rtol=0, atol=1e-15)
    # one canonical pattern for all three
    for mat in (mo.agreements, mo.c_hat):
        assert np.array_equal(mat.indptr, mo.co_labels.indptr) and np.array_equal(mat.indices, mo.co_labels.indices)


def test_min_pair_count_drops_rare_pairs():
    df = pd.DataFrame([(t, w, str((y + 1) // 2)) for t, w, y in HAND], columns=["task", "worker", "label"])
    lm, _ = prepare_labels(df)
    mo = label_moments(lm, min_pair_count=3)
    # N_ac = 2 is dropped, N_ab = N_bc = 3 kept with unchanged C^
    assert np.array_equal(mo.co_labels.toarray(), [[0, 3, 0], [3, 0, 3], [0, 3, 0]])
    np.testing.assert_allclose(mo.c_hat.toarray(), [[0, 1 / 3, 0], [1 / 3, 0, 1 / 3], [0, 1 / 3, 0]])
    # the remaining path a-b-c is bipartite
    res = fit_skills(df, method="pgd", min_pair_count=3)
    assert (res.skills["status"] == "bipartite_component").all()


def test_spammer_pruning_isolates_spammers():
    rng = np.random.default_rng(12)
    s = np.where(np.arange(20) < 5, 0.0, rng.uniform(0.5, 0.9, 20))  # five exact spammers
    data = synth.one_coin_labels(s, *synth.clique_assignment(20, 2000), 2, seed=12)
    lm, _ = prepare_labels(data.labels)
    mo = label_moments(lm)
    pruned, dropped = prune_spammer_edges(mo, 0.05, 1.0)
    assert dropped > 0 and pruned.co_labels.nnz == mo.co_labels.nnz - 2 * dropped
    res = fit_quiet(data.labels, method="pgd", prune_spammers=(0.05, 1.0))
    st = res.skills.set_index("worker")["status"]
    assert (st.iloc[:5] == "isolated").all() and (st.iloc[5:] == "ok").all()
    assert (res.skills["vote_weight"].iloc[:5] == 0).all()
    assert res.metadata["n_pairs_pruned"] == dropped
    plain = fit_quiet(data.labels, method="pgd")
    assert prediction_error(res.consensus, data.truth) <= prediction_error(plain.consensus, data.truth) + 0.005
