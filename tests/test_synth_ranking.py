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


@pytest.mark.parametrize("design", ["uniform", "band", "zipf"])
def test_planted_family_graded_rows(design):
    """Graded row outliers: the planted share, shifted against the true order by size·σ; seeded."""
    spec = synth.PlantedSpec(n=200, rows_per_item=10, design=design, frac=0.1, size=4.0, sigma=0.3)
    inst = synth.planted_instance(spec, 5)
    g = inst.graph
    assert g.m == 1000 and g.n == 200 and inst.outlier.sum() == 100
    d = inst.theta[g.i] - inst.theta[g.j]
    noise = g.y - d
    shift = noise[inst.outlier] * -np.sign(d[inst.outlier])
    assert np.abs(shift / 0.3 - 4.0).max() < 6  # 4σ against the order, plus N(0, σ²)
    assert abs(noise[~inst.outlier].std() / 0.3 - 1) < 0.1
    np.testing.assert_allclose(inst.size[inst.outlier], 4.0)
    np.testing.assert_array_equal(synth.planted_instance(spec, 5).graph.y, g.y)


def test_planted_family_components_ties_flippers_and_pm1():
    ties = synth.planted_instance(synth.PlantedSpec(n=300, outcome="graded_ties", n_components=3, frac=0.0), 0)
    assert ties.graph.n_components >= 3 and np.allclose(ties.graph.y / 0.3, np.round(ties.graph.y / 0.3))
    assert ties.sigma_eff == pytest.approx(0.3 * np.sqrt(13 / 12))
    fl = synth.planted_instance(synth.PlantedSpec(n=200, frac=0.0, flipper_frac=0.2), 1)
    ann = np.array([int(a[1:]) for a in fl.graph.annotator])
    assert fl.flipper.sum() == round(0.2 * fl.flipper.size)
    assert fl.outlier[~fl.flipper[ann]].sum() == 0  # only flippers' rows are outliers
    assert fl.outlier[fl.flipper[ann]].mean() == pytest.approx(0.8, abs=0.08)
    for outcome in ("pm1_btl", "pm1_thurstone"):
        pm = synth.planted_instance(synth.PlantedSpec(n=100, outcome=outcome, sigma=0.5, frac=0.1), 2)
        assert set(np.unique(pm.graph.y)) <= {-1.0, 0.0, 1.0}
        d = pm.theta[pm.graph.i] - pm.theta[pm.graph.j]
        assert (pm.graph.y[pm.outlier] == -np.sign(d[pm.outlier])).all()
        assert pm.outlier.sum() <= 0.1 * pm.graph.m + 1 and (pm.size[pm.outlier] > 0).all()


def test_issue_instance_replaces_a_tenth_of_the_rows():
    inst = synth.issue_instance(0)
    g, d = inst.graph, inst.theta[inst.graph.i] - inst.theta[inst.graph.j]
    assert g.m == 3000 and g.n == 60 and inst.outlier.sum() == 300
    mag = -g.y[inst.outlier] * np.sign(d[inst.outlier])
    assert mag.min() >= 2.0 and mag.max() <= 4.0
