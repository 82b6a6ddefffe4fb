"""Property tests of the personal rankings model (issue #9, item 2d) on random comparison tables.

The low-rank BTL personal rankings return finite scores on tiny inputs, or a ValueError that says why.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from crowdflow.models.btl import fit_personal_rankings


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


@settings(max_examples=20)
@given(df=comparison_tables(max_items=5, max_rows=12), rank=st.sampled_from([1, 2]))
def test_personal_rankings_finite(df: pd.DataFrame, rank: int) -> None:
    try:
        res = fit_personal_rankings(df, rank=rank, max_iter=50, seed=0, on_invalid="drop")
    except ValueError as exc:  # documented refusals (e.g. every row a tie): a reason, never a numpy error
        reason = str(exc)
    else:
        reason = ""
    # a refusal exactly when nothing is left to fit: no row with a winner (all ties), or a rank above
    # min(users, items) of the rows that have one
    used = df["outcome"].to_numpy() != 0
    n_users = df.loc[used, "annotator"].nunique()
    n_items = pd.unique(np.r_[df.loc[used, "item_a"].to_numpy(), df.loc[used, "item_b"].to_numpy()]).size
    assert bool(reason) == (not used.any() or rank > min(n_users, n_items)), (reason, n_users, n_items, rank)
    if reason:
        assert any(w in reason for w in ("comparison", "tie", "rank must be between")), reason
        return
    pr = res.personal_rankings
    assert np.isfinite(pr["score"]).all()
    assert np.isfinite(res.L).all() and np.isfinite(res.R).all()
    assert np.isfinite(res.diagnostics.objective)
    assert (pr.groupby("user")["rank"].min() == 1).all()
