"""Comparison tables → encoded comparisons: layouts, invalid rows, ties, exclusions, id order."""

from __future__ import annotations

import pandas as pd
import pytest

from crowdflow.personal_rankings import encode_personal_comparisons, fit_personal_rankings
from crowdflow.synth.personal_rankings import synthetic_personal_comparisons


def test_ingestion_winner_form_maps_labels() -> None:
    df = pd.DataFrame({"user": ["u1", "u1"], "item_i": ["A", "A"], "item_j": ["B", "B"], "winner": ["A", "B"]})
    enc = encode_personal_comparisons(df)
    p = enc.pairs
    assert (enc.m, enc.n, p.n_pairs) == (1, 2, 1)
    # (u1, A, B) with one win for A (y = +1) and one for B (y = −1)
    assert p.user.tolist() == [0] and p.a.tolist() == [0] and p.b.tolist() == [1]
    assert p.w_pos.tolist() == [1.0] and p.w_neg.tolist() == [1.0]


def test_ingestion_outcome_form_sign_and_weights() -> None:
    df = pd.DataFrame(
        {
            "annotator": ["x", "x", "y", "y"],
            "item_a": ["b", "a", "a", "c"],
            "item_b": ["a", "b", "c", "a"],
            "outcome": [1, -2.5, 0.3, 1],
            "weight": [1.0, 2.0, 1.0, 3.0],
        }
    )
    enc = encode_personal_comparisons(df)
    p = enc.pairs
    assert list(enc.users) == ["x", "y"] and list(enc.items) == ["a", "b", "c"]
    got = {
        (int(u), int(a), int(b)): (wp, wn) for u, a, b, wp, wn in zip(p.user, p.a, p.b, p.w_pos, p.w_neg, strict=False)
    }
    # x: b beat a (w 1) and b beat a again (outcome −2.5 on (a, b), w 2) → pair (a, b): a won 0, b won 3
    # y: a beat c (w 1), c beat a (w 3)
    assert got == {(0, 0, 1): (0.0, 3.0), (1, 0, 2): (1.0, 3.0)}
    assert enc.n_used == 4 and enc.n_ties == 0


def test_ingestion_crowdkit_alias() -> None:
    df = pd.DataFrame({"worker": ["w", "w"], "left": ["p", "q"], "right": ["q", "r"], "label": ["q", "q"]})
    enc = encode_personal_comparisons(df)
    assert enc.pairs.w_pos.tolist() == [0.0, 1.0] and enc.pairs.w_neg.tolist() == [1.0, 0.0]


def test_ingestion_invalid_rows_rejected_or_counted() -> None:
    df = pd.DataFrame(
        {
            "annotator": ["u1", "u1", "u1", "u2", None],
            "item_a": ["A", "A", "C", "A", "A"],
            "item_b": ["B", "A", "B", "B", "B"],
            "winner": ["A", "A", "Z", "B", "A"],
        }
    )
    with pytest.raises(ValueError, match="item_a/item_b"):
        encode_personal_comparisons(df.drop(index=[2, 4]))
    with pytest.raises(ValueError, match="winner"):
        encode_personal_comparisons(df.drop(index=[1, 4]))
    with pytest.raises(ValueError, match="annotator"):
        encode_personal_comparisons(df)
    enc = encode_personal_comparisons(df, on_invalid="drop")
    assert enc.n_invalid == 3 and enc.n_used == 2
    assert enc.invalid["row"].tolist() == [1, 2, 4]
    assert set(enc.invalid["reason"]) == {
        "item compared with itself",
        "winner is neither item_a, item_b nor 'tie'",
        "missing annotator id",
    }
    # C only occurs in a dropped row: excluded with its reason, never ranked
    ex = enc.excluded.set_index(["kind", "id"])["reason"].to_dict()
    assert ex == {("item", "C"): "only invalid rows (dropped)"}


def test_ingestion_ties_and_declared_entities_excluded() -> None:
    df = pd.DataFrame(
        {
            "annotator": ["u1", "u1", "u2"],
            "item_a": ["A", "B", "A"],
            "item_b": ["B", "C", "C"],
            "winner": ["A", "tie", "TIE"],
        }
    )
    enc = encode_personal_comparisons(df, users=["u1", "u2", "u3"], items=["A", "B", "C", "D"])
    assert enc.n_ties == 2 and enc.n_used == 1
    ex = enc.excluded.set_index(["kind", "id"])["reason"].to_dict()
    assert ex == {
        ("item", "C"): "only tied comparisons",
        ("item", "D"): "no comparisons in the input",
        ("user", "u2"): "only tied comparisons",
        ("user", "u3"): "no comparisons in the input",
    }
    res = fit_personal_rankings(df, rank=1, users=["u1", "u2", "u3"], items=["A", "B", "C", "D"])
    assert set(res.personal_rankings["user"]) == {"u1"}
    assert set(res.personal_rankings["item"]) == {"A", "B"}
    assert res.diagnostics.n_excluded == 4 and len(res.excluded) == 4


def test_ingestion_errors() -> None:
    with pytest.raises(ValueError, match="lack required column"):
        encode_personal_comparisons(pd.DataFrame({"annotator": ["u"], "item_a": ["a"], "item_b": ["b"]}))
    with pytest.raises(ValueError, match="empty"):
        encode_personal_comparisons(pd.DataFrame(columns=["annotator", "item_a", "item_b", "outcome"]))
    with pytest.raises(ValueError, match="no usable comparison"):
        encode_personal_comparisons(
            pd.DataFrame({"annotator": ["u"], "item_a": ["a"], "item_b": ["b"], "outcome": [0]})
        )
    with pytest.raises(ValueError, match="weight"):
        encode_personal_comparisons(
            pd.DataFrame({"annotator": ["u"], "item_a": ["a"], "item_b": ["b"], "outcome": [1], "weight": [-1.0]})
        )


def test_ids_sorted_numerically_and_results_independent_of_row_order() -> None:
    syn = synthetic_personal_comparisons(20, 2, 5, seed=3)
    df = syn.comparisons.copy()
    df["annotator"] = df["annotator"].str[1:].astype(int).astype(str)  # "0".."19"
    enc = encode_personal_comparisons(df)
    assert list(enc.users) == [str(i) for i in range(20)]
    a = fit_personal_rankings(df, rank=2)
    b = fit_personal_rankings(df.sample(frac=1.0, random_state=0), rank=2)
    pd.testing.assert_frame_equal(a.personal_rankings, b.personal_rankings)
