"""Tests for crowdflow.contracts.comparisons (the one comparison-table reader): input layouts, aliases, errors that name rows (docs/methods/ranking.md §1.2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.comparisons import canonical_comparisons, comparisons_from_winners
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


@pytest.mark.parametrize(
    "columns",
    [
        ("annotator", "item_a", "item_b", "outcome"),
        ("user", "item_i", "item_j", "y"),  # the papers' names: `y` was refused by the reader and by personal rankings
        ("annotator_id", "item_i", "item_j", "y"),
        ("worker", "left", "right", "label"),  # Crowd-Kit: label = the winner's id
        ("annotator", "item_a", "item_b", "winner"),
    ],
)
def test_every_reader_of_comparisons_accepts_the_same_layouts(tmp_path, columns) -> None:
    """The file reader, the ranking job and the personal-rankings job read one table the same way."""
    from crowdflow.contracts.tables import COMPARISONS
    from crowdflow.personal_rankings import encode_personal_comparisons
    from crowdflow.storage.io import read_table

    rows = [("u1", "a", "b", 1.0), ("u1", "b", "c", -1.0), ("u2", "a", "c", 1.0), ("u2", "b", "c", 0.0)]
    last = columns[3]
    if last in ("label", "winner"):
        rows = [(u, a, b, a if y > 0 else (b if y < 0 else "TIE")) for u, a, b, y in rows]
    df = pd.DataFrame(rows, columns=list(columns))
    want = [1.0, -1.0, 1.0, 0.0]
    path = tmp_path / "c.csv"
    df.to_csv(path, index=False)
    read = read_table(path, COMPARISONS).df
    assert read["outcome"].tolist() == want and read["annotator"].tolist() == ["u1", "u1", "u2", "u2"]
    assert canonical_comparisons(df)["outcome"].tolist() == want
    enc = encode_personal_comparisons(df)
    assert (enc.n_rows, enc.n_ties, enc.n_used) == (4, 1, 3)
    assert sorted(enc.users.tolist()) == ["u1", "u2"] and sorted(enc.items.tolist()) == ["a", "b", "c"]
