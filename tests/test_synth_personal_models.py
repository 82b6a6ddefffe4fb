"""Tests of the seeded personal-models generators (crowdflow.synth.personal_models).

The scaled field-estimation generator, the n = 30 instance, and the crowdsourcing tables (worker
calibration from few gold answers, personalised Bradley–Terry preferences) fitted end to end
(docs/methods/personal_models.md §1.4, §5).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.personal_models import (
    fit_personal_models,
)
from crowdflow.synth.personal_models import (
    field_estimation_instance,
    field_estimation_instance_scaled,
    geometric_radius,
    preference_tables,
    worker_calibration_tables,
)


def test_scaled_generator():
    assert geometric_radius(30, 6.23) == pytest.approx(0.3, abs=2e-3)
    inst = field_estimation_instance_scaled(11, n=3000)
    again = field_estimation_instance_scaled(11, n=3000)
    pd.testing.assert_frame_equal(inst.agents, again.agents)
    pd.testing.assert_frame_equal(inst.edges, again.edges)
    prob = inst.problem()  # validated: connected, positive symmetric weights
    assert prob.n == 3000 and inst.bridges > 0
    assert 2 * prob.graph.n_edges / prob.n == pytest.approx(6.23, rel=0.06)
    assert inst.agents["agent"].is_monotonic_increasing
    w = inst.edges["weight"].to_numpy()
    assert w.min() >= 0.5 and w.max() <= 1.5
    # field ~ N(0, Q⁻¹): the whitened field Rᵀθ has unit variance (Q = L_σ + sI)
    lap = prob.graph.laplacian().toarray() + inst.s * np.eye(prob.n)
    white = np.linalg.cholesky(lap).T @ inst.field
    assert white.var() == pytest.approx(1.0, abs=0.08)
    with pytest.raises(ValueError, match="mean_degree"):
        geometric_radius(10, 20.0)


def test_paper_size_instance_unchanged():
    # the n = 30 generator is untouched (its radius is now recorded)
    inst = field_estimation_instance(3)
    assert inst.radius == 0.3 and inst.bridges == 0


def _team_labels(seed: int):
    """Three teams of workers; each team labels its own tasks (binary), accuracy set per worker."""
    rng = np.random.default_rng(seed)
    team_acc = [0.92, 0.75, 0.6]
    rows, gold, acc = [], [], {}
    for t, base in enumerate(team_acc):
        workers = [f"t{t}w{k:02d}" for k in range(10)]
        for w in workers:
            acc[w] = float(np.clip(base + 0.03 * rng.standard_normal(), 0.5, 0.99))
        for task in range(60):
            tid = f"t{t}q{task:03d}"
            truth = int(rng.integers(0, 2))
            gold.append((tid, truth))
            for w in rng.choice(workers, 6, replace=False):
                lab = truth if rng.random() < acc[w] else 1 - truth
                rows.append((tid, w, lab))
    labels = pd.DataFrame(rows, columns=["task", "worker", "label"])
    truth = pd.DataFrame(gold, columns=["task", "label"])
    return labels, truth, acc


def test_worker_calibration_smooths_few_gold_answers():
    labels, truth, acc = _team_labels(0)
    # only 4 gold answers per worker
    rng = np.random.default_rng(1)
    gold_tasks = set()
    for _w, grp in labels.groupby("worker"):
        gold_tasks.update(rng.choice(grp["task"].to_numpy(), 4, replace=False).tolist())
    gold = truth[truth["task"].isin(gold_tasks)]
    agents, edges = worker_calibration_tables(labels, gold, k=4, min_overlap=3, strength=2.0, reg=1.0)
    assert set(agents.columns) >= {"agent", "y", "intercept", "reg", "prior_mean"}
    assert agents["y"].dropna().isin([0.0, 1.0]).all()
    assert (edges["weight"] > 0).all() and (edges["source"] < edges["target"]).all()
    # edges stay within teams (co-labels only happen inside a team)
    assert (edges["source"].str[:2] == edges["target"].str[:2]).all()
    res = fit_personal_models(agents, edges, loss="logistic", method="djam", tol=1e-7, allow_disconnected=True)
    cen = fit_personal_models(agents, edges, loss="logistic", method="centralized", allow_disconnected=True)
    assert res.converged and np.linalg.norm(res.theta - cen.theta) <= res.error_bound
    smooth = 1 / (1 + np.exp(-res.personal_models.set_index("agent")["theta_intercept"]))
    # graph-free baseline: same loss and prior, no edges
    alone = fit_personal_models(agents, edges.iloc[:0], loss="logistic", method="centralized", allow_disconnected=True)
    indep = 1 / (1 + np.exp(-alone.personal_models.set_index("agent")["theta_intercept"]))
    true = pd.Series(acc).reindex(smooth.index)
    err_smooth = float(np.mean((smooth - true) ** 2))
    err_indep = float(np.mean((indep - true) ** 2))
    assert err_smooth < 0.6 * err_indep, (err_smooth, err_indep)


def test_worker_bias_tables_numeric():
    rng = np.random.default_rng(2)
    bias = {f"w{k}": (0.5 if k < 5 else -0.5) + 0.05 * rng.standard_normal() for k in range(10)}
    rows, gold = [], []
    for task in range(80):
        g = float(rng.normal(3, 1))
        gold.append((f"q{task}", g))
        group = [f"w{k}" for k in range(5)] if task % 2 == 0 else [f"w{k}" for k in range(5, 10)]
        for w in group:
            rows.append((f"q{task}", w, g + bias[w] + 0.3 * rng.standard_normal()))
    labels = pd.DataFrame(rows, columns=["task", "worker", "label"])
    truth = pd.DataFrame(gold, columns=["task", "label"]).iloc[:6]  # 3 gold tasks per group
    agents, edges = worker_calibration_tables(labels, truth, target="bias", k=3, reg=1.0)
    res = fit_personal_models(agents, edges, loss="quadratic", method="djam", tol=1e-10, allow_disconnected=True)
    est = res.personal_models.set_index("agent")["theta_intercept"]
    assert np.abs(est - pd.Series(bias)).max() < 0.3


def test_preference_tables_recover_personal_tastes():
    rng = np.random.default_rng(4)
    items = pd.DataFrame(
        {"item": [f"i{k}" for k in range(15)], "f0": rng.standard_normal(15), "f1": rng.standard_normal(15)}
    )
    X = items[["f0", "f1"]].to_numpy()
    users = [f"u{k}" for k in range(12)]
    taste = {u: (np.array([2.0, 0.0]) if k < 6 else np.array([0.0, -2.0])) for k, u in enumerate(users)}
    rows = []
    for u in users:
        for _ in range(40):
            a, b = rng.choice(15, 2, replace=False)
            p = 1 / (1 + np.exp(-(X[a] - X[b]) @ taste[u]))
            rows.append((u, f"i{a}", f"i{b}", 1 if rng.random() < p else -1))
    comps = pd.DataFrame(rows, columns=["annotator", "item_a", "item_b", "outcome"])
    comps.loc[:3, "outcome"] = 0  # a few ties
    agents = preference_tables(comps, items)
    assert len(agents) == len(comps) + 4 and agents["weight"].sum() == pytest.approx(len(comps))
    # similarity graph: a ring inside each taste group
    grp = [users[:6], users[6:]]
    edges = pd.DataFrame(
        [(g[k], g[(k + 1) % 6], 1.0) for g in grp for k in range(6)], columns=["source", "target", "weight"]
    )
    res = fit_personal_models(agents, edges, loss="logistic", reg=0.1, method="djam", tol=1e-8, allow_disconnected=True)
    cen = fit_personal_models(agents, edges, loss="logistic", reg=0.1, method="centralized", allow_disconnected=True)
    assert res.converged and np.linalg.norm(res.theta - cen.theta) <= res.error_bound
    th = res.personal_models.set_index("agent")[["theta_x_0", "theta_x_1"]]
    for u in users:
        t = th.loc[u].to_numpy()
        cos = t @ taste[u] / (np.linalg.norm(t) * np.linalg.norm(taste[u]))
        assert cos > 0.9, (u, t)
    with pytest.raises(ValueError, match=r"unknown item id\(s\) \[zz\]"):
        preference_tables(comps.assign(item_b="zz"), items)
