"""The unexplained-NaN check parses each distinct missing_reason once: the same answer as the per-row reference."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.missing import (
    MISSING_REASON,
    UnexplainedMissing,
    check_explained,
    unexplained,
    unexplained_reference,
)


def _table(seed: int, m: int, share_nan: float, texts: list[str | None], with_inf: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"x": rng.normal(size=m), "y": rng.normal(size=m), "k": rng.integers(0, 3, m)})
    for c in ("x", "y"):
        df.loc[rng.random(m) < share_nan, c] = np.nan
    if with_inf and m:
        df.loc[int(rng.integers(0, m)), "y"] = np.inf
    reasons = [texts[i] for i in rng.integers(0, len(texts), m)] if texts else []
    if texts:
        df[MISSING_REASON] = pd.array(reasons, dtype="string")
    return df


FAMILY = [
    (0, 0, 0.0, ["x: why"], False),
    (1, 50, 0.0, [None], False),
    (2, 200, 0.3, ["x,y: why"], False),  # everything explained
    (3, 200, 0.3, ["x: why"], False),  # y unexplained
    (4, 500, 0.5, ["x: a", "y: b", None, "x: a; y: c", ""], False),
    (5, 500, 0.1, ["x,y: why"], True),  # an infinity is never explained
    (6, 300, 0.4, [], False),  # no missing_reason column
    (7, 1000, 0.9, ["y: b", "z: other column", "x: a; z: c"], False),
]


@pytest.mark.parametrize("case", FAMILY, ids=[f"case{c[0]}" for c in FAMILY])
def test_unexplained_equals_the_reference(case: tuple[int, int, float, list[str | None], bool]) -> None:
    df = _table(*case)
    assert unexplained(df) == unexplained_reference(df)
    object_column = df.assign(**{MISSING_REASON: df[MISSING_REASON].astype(object)}) if MISSING_REASON in df else df
    assert unexplained(object_column) == unexplained_reference(df)


def test_check_explained_names_the_column() -> None:
    df = _table(3, 200, 0.3, ["x: why"], False)
    with pytest.raises(UnexplainedMissing, match=r"t\.y: \d+ value\(s\) missing \(NaN\) without a missing_reason"):
        check_explained({"t": df})
    check_explained({"t": _table(2, 200, 0.3, ["x,y: why"], False)})


def _explain_reference(
    df: pd.DataFrame, columns: list[str], reason: str, where: np.ndarray | None = None
) -> pd.DataFrame:
    """The former explain_missing: one clause built per row (the reference of the coded version)."""
    cols = [c for c in columns if c in df.columns]
    if MISSING_REASON not in df.columns:
        df[MISSING_REASON] = pd.Series(pd.NA, index=df.index, dtype="string")
    if not cols or df.empty:
        return df
    isna = np.column_stack([pd.isna(df[c]).to_numpy() for c in cols])
    rows = isna.any(axis=1)
    if where is not None:
        rows &= np.asarray(where, dtype=bool)
    if not rows.any():
        return df
    names = np.asarray(cols, dtype=object)
    current = df[MISSING_REASON].to_numpy(dtype=object)
    for r in np.flatnonzero(rows):
        clause = ",".join(names[isna[r]]) + ": " + reason
        prev = current[r]
        current[r] = clause if not isinstance(prev, str) or not prev else f"{prev}; {clause}"
    df[MISSING_REASON] = pd.array(current, dtype="string")
    return df


@pytest.mark.parametrize("case", FAMILY)
def test_explain_missing_equals_the_per_row_reference(case: tuple[int, int, float, list[str | None], bool]) -> None:
    """Several reasons in turn (all columns, one column, restricted by a mask, a column that is absent) give the
    same missing_reason texts, row by row, as building each row's clause in turn."""
    from crowdflow.contracts.missing import explain_missing

    seed = case[0]
    rng = np.random.default_rng(100 + seed)
    got, want = _table(*case), _table(*case)
    where = rng.random(len(got)) < 0.5
    steps: list[tuple[list[str], str, np.ndarray | None]] = [
        (["x", "y"], "first reason", None),
        (["y"], "second reason", where),
        (["x", "absent"], "third reason", ~where),
        (["x", "y", "k"], "fourth reason", None),
    ]
    for cols, why, mask in steps:
        explain_missing(got, cols, why, where=mask)
        _explain_reference(want, cols, why, where=mask)
    assert isinstance(got[MISSING_REASON].dtype, pd.CategoricalDtype)  # dictionary-encoded in memory (issue #36)
    assert got[MISSING_REASON].cat.categories.is_unique
    a = got[MISSING_REASON].to_numpy(dtype=object)
    b = want[MISSING_REASON].to_numpy(dtype=object)
    assert [None if pd.isna(x) else x for x in a] == [None if pd.isna(x) else x for x in b]
    assert (
        a.size == 0
        or any(isinstance(x, str) and "fourth reason" in x for x in a)
        or not got[["x", "y"]].isna().any().any()
    )


def _reason_column_int64(texts: list[str], codes: np.ndarray, index: pd.Index) -> pd.Series:
    """The former reason_column (an 8-byte integer a row at every step): the reference of the small-code version."""
    codes = np.asarray(codes, dtype=np.int64)
    which, distinct = pd.factorize(pd.Index(list(texts), dtype="str"))
    which = np.asarray(which, dtype=np.int64)
    rows = np.full(codes.shape, -1, dtype=np.int64)
    has = codes >= 0
    rows[has] = which[codes[has]]
    used = np.unique(rows[rows >= 0])
    remap = np.full(len(distinct), -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    rows[has] = remap[rows[has]]
    dtype = pd.CategoricalDtype(pd.Index(np.asarray(distinct, dtype=object)[used], dtype="str"))
    return pd.Series(pd.Categorical.from_codes(rows, dtype=dtype), index=index, name=MISSING_REASON)


def _explain_int64(df: pd.DataFrame, cols: list[str], reason: str, where: np.ndarray | None) -> None:
    """The former coded explain_missing (2-D masks, factorize and unique over 8-byte codes a row): the reference of
    the version with a small code a row (issue #36), categories and their order included."""
    cols = [c for c in cols if c in df.columns]
    if not cols or df.empty:
        return
    if where is not None and not where.any():
        return
    isna = np.column_stack([pd.isna(df[c]).to_numpy() for c in cols])
    rows = isna.any(axis=1)
    if where is not None:
        rows &= where
    if not rows.any():
        return
    names = np.asarray(cols, dtype=object)
    idx = np.flatnonzero(rows)
    prev_codes, prev_texts = pd.factorize(df[MISSING_REASON], use_na_sentinel=True)
    patterns, pattern = np.unique(isna[idx], axis=0, return_inverse=True)
    key = (np.asarray(prev_codes, dtype=np.int64)[idx] + 1) * len(patterns) + pattern.ravel()
    keys, which = np.unique(key, return_inverse=True)
    texts = [str(t) for t in prev_texts]
    for k in keys.tolist():
        p, q = divmod(k, len(patterns))
        clause = ",".join(names[patterns[q]]) + ": " + reason
        prev = texts[p - 1] if p else ""
        texts.append(f"{prev}; {clause}" if prev else clause)
    codes = np.asarray(prev_codes, dtype=np.int64).copy()
    codes[idx] = len(prev_texts) + which.ravel()
    df[MISSING_REASON] = _reason_column_int64(texts, codes, df.index)


def _wide_table(seed: int) -> tuple[pd.DataFrame, list[tuple[list[str], str, np.ndarray | None]]]:
    """A table drawn from a family of shapes (0–3,000 rows, 1–60 float columns, NaN shares 0–100 %, a text column,
    given reasons as categories in any order, unused and empty ones included) and a sequence of calls on it."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([0, 1, 7, 300, 3000]))
    k = int(rng.choice([1, 3, 12, 47, 60]))  # 47 and 60: past the 48 columns one integer's bits hold
    share = float(rng.choice([0.0, 0.05, 0.5, 1.0]))
    df = pd.DataFrame({f"c{j}": np.where(rng.random(n) < share, np.nan, rng.normal(size=n)) for j in range(k)})
    df["id"] = pd.array([f"w{i}" for i in range(n)], dtype="str")
    if seed % 3:
        given = ["c0: given", "", "c1: other; c2: more", "unused: never"]
        codes = rng.integers(-1, 3, n)
        order = rng.permutation(len(given))
        cats = [given[i] for i in order]
        df[MISSING_REASON] = pd.Categorical.from_codes(np.argsort(order)[codes] * (codes >= 0) - (codes < 0), cats)
    names = [*df.columns[:k], "absent"]
    steps: list[tuple[list[str], str, np.ndarray | None]] = []
    for s in range(4):
        pick = [c for c in names if rng.random() < 0.6] or [names[0]]
        where = None if s % 2 == 0 else rng.random(n) < rng.choice([0.0, 0.3, 1.0])
        steps.append((pick, f"reason {s}", where))
    steps.append((list(df.columns[:k]), "every column", None))
    return df, steps


@pytest.mark.parametrize("seed", range(24))
def test_small_codes_equal_the_8_byte_version(seed: int) -> None:
    """explain_missing with a small code a row (bit-packed masks, ranks by first use) gives the column the former
    coded version gave, step by step: every row's text, the categories and their order (a family of 24 tables)."""
    from crowdflow.contracts.missing import explain_missing

    got, steps = _wide_table(seed)
    want = got.copy()
    if MISSING_REASON not in want.columns:
        want[MISSING_REASON] = _reason_column_int64([], np.full(len(want), -1), want.index)
    for cols, why, where in steps:
        explain_missing(got, cols, why, where=where)
        _explain_int64(want, cols, why, where)
        pd.testing.assert_series_equal(got[MISSING_REASON], want[MISSING_REASON], check_exact=True)
        n_texts = len(got[MISSING_REASON].cat.categories)
        assert got[MISSING_REASON].array.codes.dtype.itemsize == (1 if n_texts < 127 else 2)  # a byte a row, or two
