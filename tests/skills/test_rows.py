"""Row-wise class-axis reductions (crowdflow/skills/rows.py) are bit-identical to numpy's.

The votes and the Dawid–Skene EM use them instead of ``a.max(axis=1)`` and friends for speed; any
difference, even one ulp in a posterior, could change a tie-break and so an output table. Checked
on arrays with ties, ±inf, NaN and booleans, for every class count from 1 to 20 (the sum switches
to numpy's own at 8 columns).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from crowdflow.skills.rows import row_argmax, row_max, row_sum, softmax_rows

# few distinct values so that ties within a row are common; ±inf and NaN included
VALUES = st.sampled_from([0.0, -0.0, 1.0, 1.0 + 2**-52, -3.5, 0.1, 0.2, 0.3, 1e300, -1e-300, np.inf, -np.inf, np.nan])
ARRAYS = st.integers(1, 20).flatmap(
    lambda m: hnp.arrays(np.float64, st.tuples(st.integers(1, 30), st.just(m)), elements=VALUES)
)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@given(ARRAYS)
def test_max_argmax_sum_bit_identical_to_numpy(a: np.ndarray) -> None:
    with np.errstate(invalid="ignore", over="ignore"):
        assert _same(row_max(a), a.max(axis=1))
        assert _same(row_argmax(a), a.argmax(axis=1).astype(np.int64))
        assert _same(row_sum(a), a.sum(axis=1))


@given(st.integers(1, 20).flatmap(lambda m: hnp.arrays(np.bool_, st.tuples(st.integers(1, 30), st.just(m)))))
def test_boolean_rows_count_and_first_true(a: np.ndarray) -> None:
    assert _same(row_sum(a), a.sum(axis=1))
    assert _same(row_argmax(a), a.argmax(axis=1).astype(np.int64))


@pytest.mark.parametrize("m", [1, 2, 3, 4, 7, 8, 9, 20])
def test_softmax_rows_equals_the_numpy_expression(m: int) -> None:
    rng = np.random.default_rng(m)
    logp = rng.normal(scale=30.0, size=(500, m))
    if m > 1:
        logp[::7, 0] = -np.inf  # a class with probability 0 (never a whole row)
    top = logp.max(axis=1, keepdims=True)
    e = np.exp(logp - top)
    z = e.sum(axis=1, keepdims=True)
    post, ll = softmax_rows(logp)
    assert _same(post, e / z)
    assert ll == float(np.sum(np.log(z) + top))
    np.testing.assert_allclose(post.sum(axis=1), 1.0, rtol=1e-12)


def test_non_contiguous_input_and_no_aliasing() -> None:
    base = np.arange(24, dtype=np.float64).reshape(6, 4)[:, ::2]  # strided view
    before = base.copy()
    assert _same(row_max(base), base.max(axis=1))
    assert _same(row_sum(base), base.sum(axis=1))
    out = row_max(base)
    out[:] = -1.0  # the result is a fresh array, never a view of the input
    assert np.array_equal(base, before)
