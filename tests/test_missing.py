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
