"""Tests of the seeded synthetic comparison generators (crowdflow.synth.ranking)."""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.ranking import canonical_comparisons
from crowdflow.synth import ranking as synth


def test_random_pairs_uniform_over_distinct_pairs():
    i, j = synth.random_pairs(np.random.default_rng(0), 5, 200_000)
    assert (i != j).all() and i.min() == 0 and max(i.max(), j.max()) == 4
    freq = np.bincount(i * 5 + j, minlength=25).reshape(5, 5) / i.size
    off = ~np.eye(5, dtype=bool)
    np.testing.assert_allclose(freq[off], 1 / 20, atol=0.002)
    assert (freq[~off] == 0).all()


@pytest.mark.parametrize(("sn", "op"), [(400, 0.1), (2000, 0.05), (1000, 0.5)])
def test_mm13_flips_exactly_op_of_the_rows(sn, op):
    inst = synth.mm13_instance(3, sn=sn, op=op)
    g, pos = inst.graph, inst.position
    assert g.m == sn and g.n == 16 and inst.outlier.sum() == round(op * sn)
    agrees = np.where(pos[g.i] < pos[g.j], 1.0, -1.0) == g.y  # +1 when the first item is truly better
    np.testing.assert_array_equal(agrees, ~inst.outlier)
    assert set(np.unique(g.y)) <= {-1.0, 1.0}
    again = synth.mm13_instance(3, sn=sn, op=op)
    np.testing.assert_array_equal(again.graph.y, g.y)  # seeded


def test_gaussian_outliers_shift_the_planted_rows_only():
    inst = synth.continuous_instance(0)
    g, th = inst.graph, inst.theta
    noise = g.y - (th[g.i] - th[g.j])
    assert inst.outlier.sum() == 150 and g.m == 3000 and g.n == 100
    assert np.abs(noise[~inst.outlier]).max() < 0.1 * 6  # N(0, 0.1²) noise only
    shift = np.abs(noise[inst.outlier])
    assert shift.min() > 3 - 0.6 and shift.max() < 5 + 0.6  # ±U(3, 5) plus the noise
    h = synth.huber_instance(1)
    hn = h.graph.y - (h.theta[h.graph.i] - h.theta[h.graph.j])
    np.testing.assert_allclose(np.abs(hn[h.outlier]), 4.0, atol=0.2 * 6)


def test_erdos_renyi_flips_one_row_per_pair():
    inst = synth.erdos_renyi_flips(0, 0.2, n=50)
    g = inst.graph
    assert g.n_edges == g.m  # one comparison per pair
    assert abs(g.m / (50 * 49 / 2) - 0.2) < 0.05
    assert inst.outlier.sum() == round(0.1 * g.m)
    agrees = np.where(inst.position[g.i] < inst.position[g.j], 1.0, -1.0) == g.y
    np.testing.assert_array_equal(agrees, ~inst.outlier)


def test_comparison_table_is_a_valid_input():
    inst = synth.mm13_instance(0, sn=30, op=0.1)
    df = synth.comparison_table(inst.graph.i, inst.graph.j, inst.graph.y, w=np.full(30, 2.0))
    can = canonical_comparisons(df)
    assert list(df.columns) == ["annotator", "item_a", "item_b", "outcome", "weight"]
    assert can["annotator"].nunique() == 7 and (can["weight"] == 2.0).all()
    assert can["item_a"].str.startswith("it").all()
