"""The synthetic instances of the assignment job (crowdflow.synth.assignment) match their documented setup."""

from __future__ import annotations

import numpy as np

from crowdflow.assignment import tvcs_select
from crowdflow.synth.assignment import grid_views, synthetic_tvcs


def test_synthetic_setup_matches_spec():
    d = synthetic_tvcs(50, seed=3)
    cons = d.constraints
    assert d.X.shape == (50, 400) and d.X_test.shape == (1000, 400)
    rows, cols = grid_views(20)
    np.testing.assert_array_equal(cons.view1, rows)
    np.testing.assert_array_equal(cons.view2, cols)
    assert cons.caps1.min() >= 1 and cons.caps1.max() <= 20 and cons.caps2.max() <= 20
    assert cons.total == int(0.8 * min(cons.caps1.sum(), cons.caps2.sum()))
    assert cons.is_feasible((d.w_true != 0).astype(np.int8))
    # w̄ = P_Ω(v): its support is the exact TVCS selection for v² (HiGHS LP as the independent
    # oracle), values unchanged. v is redrawn with the generator's documented stream: seeds [51, seed],
    # then the row caps, the column caps and v ~ N(0, I).
    rng = np.random.default_rng([51, 3])
    row_caps, _col_caps = rng.integers(1, 21, size=20), rng.integers(1, 21, size=20)
    v = rng.standard_normal(400)
    np.testing.assert_array_equal(cons.caps1, row_caps)  # same stream as the generator's
    lp = tvcs_select(v * v, cons.view1, cons.view2, cons.caps1, cons.caps2, cons.total, backend="lp")
    support = d.w_true != 0
    assert support.sum() == cons.total
    np.testing.assert_allclose(float(np.sum(d.w_true**2)), lp.objective, rtol=1e-12)
    np.testing.assert_array_equal(d.w_true[support], v[support])
    np.testing.assert_allclose(d.y, d.X @ d.w_true, atol=0.06)  # noise 0.01
    dc = synthetic_tvcs(50, seed=3, task="classification")
    assert set(np.unique(dc.y)) <= {-1.0, 1.0}
