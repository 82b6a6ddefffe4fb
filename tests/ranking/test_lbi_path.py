"""Tests for crowdflow.ranking.lbi_path: the LBI stop rules (docs/methods/ranking.md §4.4)."""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.ranking.lbi import lbi, lbi_alg3
from crowdflow.synth.ranking import huber_instance


def test_stop_rules():
    inst = huber_instance(0)
    g, truth = inst.graph, inst.outlier
    a = lbi_alg3(g)  # the default: the adaptive rule's time 1/λ*
    assert a.stop_fired and a.stop_rule == "time"
    assert (a.gamma[truth] != 0).all() and np.count_nonzero(a.gamma) <= 1.5 * truth.sum()  # 20σ outliers
    b = lbi_alg3(g, stop_rule="budget", budget=0.05)
    assert b.stop_fired and g.w[b.gamma != 0].sum() >= 0.05 * g.m
    assert b.trace["support_weight"].iloc[-2] < 0.05 * g.m  # first iterate that reaches the budget
    d = lbi_alg3(g, stop_rule="discrepancy", sigma=0.2)
    assert d.stop_fired and set(np.flatnonzero(d.gamma)) == set(np.flatnonzero(truth))
    assert d.trace["residual_norm"].iloc[-1] ** 2 <= 0.2**2 * g.cycle_dim
    t = lbi_alg3(g, stop_rule="time", t_stop=0.5, t_max=2.0)
    assert t.stop_time == pytest.approx(0.5) and t.n_iter == 200
    assert t.checkpoint_iters.max() == 200
    with pytest.warns(RuntimeWarning, match="did not fire"):
        lbi_alg3(g, stop_rule="budget", budget=0.5, max_iter=50)
    with pytest.raises(ValueError, match="t_stop"):
        lbi(g, algorithm=3, stop_rule="time")
