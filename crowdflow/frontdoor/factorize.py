"""Dense codes of a DataFrame column in order of first appearance, fast for the shapes the estimators meet.

``pd.factorize(values, sort=False)`` gives the codes and the distinct values in order of first appearance; it hashes
every value. Integer columns whose values span a range not much larger than their length (the usual 0..N−1 or
offset ids) are coded instead by one compiled pass over a lookup table indexed by ``value − min`` (no hashing);
every other column (strings, Arrow strings, categoricals, sparse integers, floats, mixed objects) goes to pandas.
Both give the same codes and the same distinct values, in the same dtype (``tests/test_estimators_fast_path.py``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from crowdflow.compiled import compiled_kernel

__all__ = ["factorize_appearance", "first_seen_order", "no_missing"]

#: The lookup table of the integer pass may be at most this many times the column's length (plus a constant).
_SPAN_FACTOR = 4


@compiled_kernel
def _dense_codes(values: np.ndarray, low: int, span: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes in order of first appearance of integer ``values`` in [low, low + span), and the first row of each."""
    table = np.full(span, -1, dtype=np.int64)
    codes = np.empty(values.size, dtype=np.int64)
    first = np.empty(values.size, dtype=np.int64)
    n_seen = 0
    for k in range(values.size):
        slot = values[k] - low
        code = table[slot]
        if code < 0:
            code = n_seen
            table[slot] = code
            first[code] = k
            n_seen += 1
        codes[k] = code
    return codes, first[:n_seen].copy()


def factorize_appearance(values: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """``values``'s codes (int64) and distinct values (an Index of the column's dtype), both in order of first
    appearance: ``pd.factorize(values, sort=False)``, with a hash-free pass for dense integer columns."""
    dtype = values.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iu" and values.size:
        raw = values.to_numpy()
        low, high = int(raw.min()), int(raw.max())
        span = high - low + 1
        if span <= _SPAN_FACTOR * raw.size + 1024 and high < 2**63:  # uint64 past int64 goes to pandas
            codes, first = _dense_codes(raw.astype(np.int64, copy=False), low, span)
            return codes, pd.Index(raw[first])
    codes, uniques = pd.factorize(values, sort=False)
    return np.asarray(codes, dtype=np.int64), pd.Index(uniques)


@compiled_kernel
def _first_rows(codes: np.ndarray, size: int) -> np.ndarray:
    """The first row at which each code in 0..size−1 occurs (``codes.size`` when it never does)."""
    first = np.full(size, codes.size, dtype=np.int64)
    for k in range(codes.size - 1, -1, -1):
        first[codes[k]] = k
    return first


def first_seen_order(codes: np.ndarray, size: int) -> np.ndarray:
    """The distinct values of ``codes`` (integers in 0..size−1) in order of first appearance
    (``pd.unique(codes)``, with one pass over a table of ``size`` entries instead of a hash)."""
    first = _first_rows(np.asarray(codes, dtype=np.int64), size)
    seen = np.flatnonzero(first < codes.size)
    return np.asarray(seen[np.argsort(first[seen], kind="stable")], dtype=np.int64)


def no_missing(values: pd.Series) -> np.ndarray | None:
    """``None`` when ``values`` has no missing value (numpy integer and boolean columns cannot), else the mask."""
    dtype = values.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iub":
        return None
    null = values.isna().to_numpy(dtype=bool)
    return null if null.any() else None
