"""Tests for crowdflow.ranking.comparisons: input layouts, aliases, errors that name rows (docs/methods/ranking.md §1.2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.ranking.comparisons import canonical_comparisons, comparisons_from_winners
from crowdflow.ranking.graph import build_comparison_graph


def test_winner_form_and_aliases():
    df = pd.DataFrame(
        {
            "annotator": ["u1", "u2", "u3", "u4"],
            "item_a": ["x", "x", "y", "z"],
            "item_b": ["y", "z", "z", "x"],
            "winner": ["x", "z", "TIE", "x"],
        }
    )
    out = comparisons_from_winners(df)
    np.testing.assert_array_equal(out["outcome"].to_numpy(), [1.0, -1.0, 0.0, -1.0])
    crowdkit = pd.DataFrame({"worker": ["u1"], "left": ["a"], "right": ["b"], "label": ["b"]})
    can = canonical_comparisons(crowdkit)
    assert can.loc[0, "outcome"] == -1.0 and can.loc[0, "annotator"] == "u1"
    # integer ids become strings, natural sort for numeric ids
    g = build_comparison_graph(pd.DataFrame({"item_a": [2, 10], "item_b": [10, 1], "outcome": [1, 1]}))
    assert list(g.items) == ["1", "2", "10"]


@pytest.mark.parametrize(
    ("df", "match"),
    [
        (pd.DataFrame({"item_a": ["a"], "item_b": ["a"], "outcome": [1.0]}), "itself"),
        (pd.DataFrame({"item_a": ["a"], "item_b": ["b"]}), "outcome"),
        (pd.DataFrame({"item_a": ["a", None], "item_b": ["b", "c"], "outcome": [1.0, 1.0]}), "item_a"),
        (pd.DataFrame({"item_a": ["a"], "item_b": ["b"], "outcome": [np.inf]}), "outcome"),
        (pd.DataFrame({"item_a": ["a"], "item_b": ["b"], "outcome": [1.0], "weight": [0.0]}), "weight"),
        (pd.DataFrame({"item_a": ["a"], "item_b": ["b"], "winner": ["c"]}), "winner"),
        (pd.DataFrame({"item_a": [], "item_b": [], "outcome": []}), "empty"),
    ],
)
def test_bad_input_raises(df, match):
    with pytest.raises(ValueError, match=match):
        canonical_comparisons(df)
