"""Property tests of the ranking fits on random comparison tables (issue #9, items 2c-2d).

HodgeRank scores are finite and sum to zero in every component, and the components are those of a
brute-force union-find over the compared pairs; LBI / HLASSO return finite scores and γ.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crowdflow.ranking import fit_hlasso, fit_hodgerank, fit_lbi


@st.composite
def comparison_tables(draw: st.DrawFn, max_items: int = 8, max_rows: int = 20) -> pd.DataFrame:
    n_items = draw(st.integers(2, max_items))
    n_rows = draw(st.integers(1, max_rows))
    pairs = draw(
        st.lists(
            st.tuples(st.integers(0, n_items - 1), st.integers(0, n_items - 1)).filter(lambda p: p[0] != p[1]),
            min_size=n_rows,
            max_size=n_rows,
        )
    )
    outcome = st.one_of(st.sampled_from([-1.0, 0.0, 1.0]), st.floats(-3, 3, allow_nan=False))
    y = draw(st.lists(outcome, min_size=n_rows, max_size=n_rows))
    if draw(st.booleans()):  # all-equal comparisons: every row says the same
        y = [y[0]] * n_rows
    annot = draw(st.lists(st.integers(0, 3), min_size=n_rows, max_size=n_rows))
    return pd.DataFrame(
        {
            "annotator": [f"u{a}" for a in annot],
            "item_a": [f"i{a:02d}" for a, _ in pairs],
            "item_b": [f"i{b:02d}" for _, b in pairs],
            "outcome": y,
        }
    )


def union_find_components(df: pd.DataFrame) -> set[frozenset[str]]:
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in zip(df["item_a"], df["item_b"], strict=True):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
    groups: dict[str, set[str]] = {}
    for x in list(parent):
        groups.setdefault(find(x), set()).add(x)
    return {frozenset(g) for g in groups.values()}


def _partition(ranking: pd.DataFrame) -> set[frozenset[str]]:
    return {frozenset(g["item"]) for _, g in ranking.groupby("component")}


@settings(max_examples=50)
@given(df=comparison_tables())
@example(df=pd.DataFrame({"annotator": ["u"], "item_a": ["a"], "item_b": ["b"], "outcome": [0.0]}))
def test_hodgerank_finite_centred_components(df: pd.DataFrame) -> None:
    res = fit_hodgerank(df, allow_disconnected=True)
    r = res.ranking
    assert np.isfinite(r["score"]).all()
    sums = r.groupby("component")["score"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 0.0, atol=1e-9)
    assert _partition(r) == union_find_components(df)
    assert res.params["n_components"] == len(union_find_components(df))
    assert np.isfinite(res.residuals[["fitted", "residual"]].to_numpy()).all()
    if len(union_find_components(df)) > 1:
        with pytest.raises(ValueError, match="not connected"):
            fit_hodgerank(df, allow_disconnected=False)


@settings(max_examples=30)
@given(df=comparison_tables(), method=st.sampled_from(["lbi", "hlasso"]), budget=st.sampled_from([0.05, 0.3]))
def test_robust_rankings_finite(df: pd.DataFrame, method: str, budget: float) -> None:
    if method == "lbi":
        res = fit_lbi(df, allow_disconnected=True, budget=budget)
    else:
        res = fit_hlasso(df, allow_disconnected=True, budget=budget)
    assert np.isfinite(res.ranking["score"]).all()
    assert np.isfinite(res.scores[["score_ls", "score_robust", "score_debiased"]].to_numpy()).all()
    assert np.isfinite(res.outliers["gamma"]).all()
    assert len(res.outliers) == len(df)
    assert _partition(res.ranking) == union_find_components(df)
    sums = res.ranking.groupby("component")["score"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 0.0, atol=1e-8)
