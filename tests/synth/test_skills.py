"""Tests of the seeded synthetic generators (crowdflow.synth.skills)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.graphs import components
from crowdflow.synth import skills as synth


def test_one_coin_accuracy_and_uniform_errors():
    m = 4
    p = np.array([0.9, 0.6, 0.25])
    s = (m * p - 1) / (m - 1)
    data = synth.one_coin_labels(s, *synth.clique_assignment(3, 60_000), m, seed=1)
    merged = data.labels.merge(data.truth, on="task", suffixes=("", "_true"))
    acc = (merged["label"] == merged["label_true"]).groupby(merged["worker"]).mean().to_numpy()
    np.testing.assert_allclose(acc, p, atol=0.01)
    np.testing.assert_allclose(data.accuracy, p)
    # wrong answers uniform over the other M - 1 classes
    wrong = merged[merged["label"] != merged["label_true"]]
    offset = (wrong["label"].astype(int) - wrong["label_true"].astype(int)) % m
    freq = offset.value_counts(normalize=True).sort_index().to_numpy()
    np.testing.assert_allclose(freq, [1 / 3] * 3, atol=0.01)
    # truth uniform
    np.testing.assert_allclose(data.truth["label"].value_counts(normalize=True).to_numpy(), 0.25, atol=0.01)


def test_binary_skill_meaning_and_determinism():
    wi, ti = synth.clique_assignment(2, 50_000)
    a = synth.one_coin_labels(np.array([1.0, -1.0]), wi, ti, 2, seed=3, classes=["-1", "+1"])
    merged = a.labels.merge(a.truth, on="task", suffixes=("", "_true"))
    right = merged["label"] == merged["label_true"]
    assert right[merged["worker"] == a.workers[0]].all() and not right[merged["worker"] == a.workers[1]].any()
    assert set(a.labels["label"]) == {"-1", "+1"}
    b = synth.one_coin_labels(np.array([1.0, -1.0]), wi, ti, 2, seed=3, classes=["-1", "+1"])
    pd.testing.assert_frame_equal(a.labels, b.labels)
    with pytest.raises(ValueError):
        synth.one_coin_labels(np.array([-0.6]), np.array([0]), np.array([0]), 3)  # below -1/(M-1)


def test_random_assignment_distinct_and_weighted():
    wi, ti = synth.random_assignment(20, 5000, 3, seed=2, worker_weights=np.where(np.arange(20) < 10, 1.0, 4.0))
    pairs = pd.DataFrame({"w": wi, "t": ti})
    assert not pairs.duplicated().any()
    assert (pairs.groupby("t").size() == 3).all() and pairs["t"].nunique() == 5000
    counts = np.bincount(wi, minlength=20)
    ratio = counts[10:].mean() / counts[:10].mean()
    assert 2.5 < ratio < 4.0  # 4x draw weight, damped by distinctness within a task
    u, _ = synth.random_assignment(30, 30_000, 5, seed=3)
    np.testing.assert_allclose(np.bincount(u) / u.size, 1 / 30, atol=0.003)
    with pytest.raises(ValueError):
        synth.random_assignment(3, 10, 4)


def test_graph_generators():
    def graph(edges, n):
        return components(synth.adjacency(edges, n))

    assert graph(synth.ring_edges(11), 11).bipartite.tolist() == [False]
    assert graph(synth.ring_edges(10), 10).bipartite.tolist() == [True]
    st = synth.star_triangle_edges(11)
    assert len(st) == 11 and graph(st, 11).bipartite.tolist() == [False]
    assert graph(synth.star_edges(11), 11).bipartite.tolist() == [True]
    assert graph(synth.grid_edges(5, 5), 25).bipartite.tolist() == [True]
    assert graph(synth.grid_edges(5, 5, extra=[(0, 6)]), 25).bipartite.tolist() == [False]
    assert len(synth.complete_edges(6)) == 15 and len(synth.path_edges(6)) == 5
    e = synth.random_graph_edges(50, 0.2, seed=1)
    assert np.all(e[:, 0] < e[:, 1])
    np.testing.assert_array_equal(e, synth.random_graph_edges(50, 0.2, seed=1))


def test_edge_assignment_round_robin():
    edges = synth.ring_edges(11)
    wi, ti = synth.edge_assignment(edges, 33)
    pairs = pd.DataFrame({"w": wi, "t": ti}).sort_values(["t", "w"])
    assert (pairs.groupby("t").size() == 2).all()
    # task t is labelled by the endpoints of edge t mod 11: every edge gets 3 tasks
    per_edge = pairs.groupby("t")["w"].apply(tuple).value_counts()
    assert len(per_edge) == 11 and (per_edge == 3).all()
    wc, tc = synth.clique_assignment(4, 5)
    assert len(wc) == 20 and set(zip(wc, tc, strict=True)) == {(w, t) for w in range(4) for t in range(5)}


def test_rank_one_moments_and_beta_skills():
    s = np.array([0.5, 0.4, 0.6, 0.3])
    edges = synth.ring_edges(4)
    c = synth.rank_one_moments(edges, s).toarray()
    assert np.allclose(c, c.T) and np.all(np.diag(c) == 0)
    assert c[0, 1] == pytest.approx(0.2) and c[0, 2] == 0
    noisy = synth.rank_one_moments(edges, s, noise=0.01, seed=1).toarray()
    assert np.allclose(noisy, noisy.T) and np.max(np.abs(noisy - c)) <= 0.005
    # noise 0.01·U[−1/2, 1/2] on every edge and only there: all 4 ring edges moved, non-edges stay 0
    delta = (noisy - c)[np.triu_indices(4, 1)]
    on_edge = c[np.triu_indices(4, 1)] != 0
    assert np.all(np.abs(delta[on_edge]) > 0) and np.all(delta[~on_edge] == 0)
    # and it is U[−0.005, 0.005]: mean |Δ| = 0.0025 over the 1001 edges of a large ring
    big = synth.rank_one_moments(synth.ring_edges(1001), np.full(1001, 0.5), noise=0.01, seed=2)
    assert np.mean(np.abs(big.data - 0.25)) == pytest.approx(0.0025, abs=0.0003)
    b = synth.beta_skills(5, 1, 1000, seed=0)
    assert b.min() >= -1 and b.max() <= 1 and b.mean() == pytest.approx(2 * 5 / 6 - 1, abs=0.03)


def test_ids_sort_in_generation_order():
    w = synth.worker_ids(12000)
    assert list(w) == sorted(w)
    t = synth.task_ids(100)
    assert list(t) == sorted(t) and t[0] == "t0000000"


def test_star_triangle_injected_table2():
    inst = synth.star_triangle_injected(91, seed=3, n_tasks=500)
    s = inst.data.skills
    np.testing.assert_allclose(s, np.linspace(0.8, -0.3, 91))  # hub (worker 0) is the most skilled
    assert np.array_equal(inst.edges, synth.star_triangle_edges(91))
    # C on the star+triangle support only, aligned with the unit support, noise within U[-0.2, 0.2]
    assert inst.support.nnz == 2 * 91 and np.all(inst.support.data == 1.0)
    assert np.array_equal(inst.c_hat.indptr, inst.support.indptr)
    assert np.array_equal(inst.c_hat.indices, inst.support.indices)
    c = inst.c_hat.toarray()
    assert np.allclose(c, c.T) and np.all(np.diag(c) == 0)
    i, j = inst.edges.T
    xi = c[i, j] - s[i] * s[j]
    assert np.max(np.abs(xi)) <= 0.2 and np.max(np.abs(xi)) > 0.18 and abs(xi.mean()) < 0.03
    # evaluation labels: 12 distinct workers per task, independent of the support
    per_task = inst.data.labels.groupby("task")["worker"].nunique()
    assert len(per_task) == 500 and (per_task == 12).all() and len(inst.data.truth) == 500
    again = synth.star_triangle_injected(91, seed=3, n_tasks=500)
    assert np.array_equal(again.c_hat.toarray(), c) and again.data.labels.equals(inst.data.labels)
    assert not np.array_equal(synth.star_triangle_injected(91, seed=4, n_tasks=500).c_hat.toarray(), c)
    with pytest.raises(ValueError, match="n_workers >= 3"):
        synth.star_triangle_injected(2)
    with pytest.raises(ValueError, match="length"):
        synth.star_triangle_injected(5, skills=np.zeros(4))


def test_crowd_labels_follow_their_confusion_matrices():
    """Dawid–Skene crowds (docs/methods/skills.md §5.8): each worker answers with its own confusion row,
    tasks get distinct workers, the truth follows the class prior; the same config gives the same data."""
    config = synth.CrowdConfig(3, 30_000, 10, 20, "confusion", 0.2, 0.2, "skewed", "uniform", 3)
    data = synth.crowd_labels(config)
    assert len(data.labels) == config.n_labels == 300_000
    assert not data.labels.duplicated(["task", "worker"]).any()
    assert (data.labels.groupby("task").size() == 10).all()
    np.testing.assert_allclose(data.confusion.sum(axis=2), 1.0)
    np.testing.assert_allclose(
        data.truth["label"].value_counts(normalize=True).sort_index(), data.class_prior, atol=0.01
    )
    merged = data.labels.merge(data.truth, on="task", suffixes=("", "_true"))
    empirical = pd.crosstab([merged["worker"], merged["label_true"]], merged["label"], normalize="index")
    for i, worker in enumerate(data.workers):
        np.testing.assert_allclose(empirical.loc[worker].to_numpy(), data.confusion[i], atol=0.04)
    kinds = {k: (data.kind == k).sum() for k in (synth.GOOD, synth.SPAMMER, synth.ADVERSARY)}
    assert min(kinds.values()) >= 1
    spam = data.confusion[data.kind == synth.SPAMMER]
    np.testing.assert_allclose(spam, np.repeat(spam[:, :1, :], 3, axis=1))  # the answer ignores the truth
    adv = data.confusion[data.kind == synth.ADVERSARY]
    assert (adv.argmax(axis=2) != np.arange(3)).all()  # an adversary's favourite answer is always wrong
    again = synth.crowd_labels(config)
    pd.testing.assert_frame_equal(data.labels, again.labels)


def test_crowd_family_is_seeded_and_bounded():
    family = synth.crowd_family(12, seed=5, max_labels=20_000)
    assert len(family) == 12 + 8 and family == synth.crowd_family(12, seed=5, max_labels=20_000)
    assert all(c.n_labels <= 20_000 for c in family[:12])
    assert len({c.name for c in family}) == len(family)
    assert synth.crowd_family(12, seed=6, corners=False) != family[:12]
    sparse = synth.crowd_labels(synth.CrowdConfig(2, 2000, 3, 500, "onecoin", 0.0, 0.0, "uniform", "zipf", 1))
    per_worker = sparse.labels.groupby("worker").size()
    assert per_worker.max() > 20 * per_worker.median()  # Zipf activity: a few busy workers, a long tail
