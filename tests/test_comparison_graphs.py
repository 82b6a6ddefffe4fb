"""The comparison-graph report on codes equals the per-row reference, from a table and from a fit's graph."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.checks import check_comparison_graph
from crowdflow.comparison_graphs import (
    comparison_graph_report,
    comparison_graph_report_from_codes,
    comparison_graph_report_reference,
)
from crowdflow.ranking import build_comparison_graph


def _table(seed: int, n_items: int, m: int, n_annotators: int, blocks: int, skew: float, numeric: bool) -> pd.DataFrame:
    """Comparisons inside ``blocks`` item groups (components), item popularity ∝ rank^-skew, repeated pairs."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_items + 1) ** skew
    a = rng.choice(n_items, m, p=p / p.sum())
    size = max(n_items // blocks, 2)
    base = (a // size) * size
    width = np.minimum(size, n_items - base)
    b = base + (a - base + rng.integers(1, np.maximum(width, 2), m)) % np.maximum(width, 2)
    b = np.where(b >= n_items, base, b)
    keep = a != b
    a, b = a[keep], b[keep]
    ids = np.arange(n_items) * 7 if numeric else np.array([f"it{k}" for k in range(n_items)], dtype=object)
    return pd.DataFrame(
        {
            "annotator": rng.integers(0, n_annotators, a.size).astype(str),
            "item_a": ids[a],
            "item_b": ids[b],
            "outcome": rng.choice([-1.0, 0.0, 1.0], a.size),
        }
    )


FAMILY = [
    # seed, items, rows, annotators, blocks, skew, numeric ids
    (0, 2, 1, 1, 1, 0.0, False),
    (1, 3, 5, 2, 1, 0.0, False),
    (2, 12, 60, 3, 3, 0.0, False),
    (3, 40, 300, 1, 1, 1.5, False),
    (4, 25, 200, 50, 5, 0.5, True),
    (5, 300, 2000, 20, 7, 1.0, False),
    (6, 1000, 500, 400, 1, 0.0, False),  # sparse: many components, isolated annotators
    (7, 60, 4000, 2, 2, 2.0, True),  # heavy repeats
]


@pytest.mark.parametrize("case", FAMILY, ids=[f"case{c[0]}" for c in FAMILY])
def test_coded_report_equals_the_reference(case: tuple[int, int, int, int, int, float, bool]) -> None:
    df = _table(*case)
    ref = comparison_graph_report_reference(df)
    fast = comparison_graph_report(df)
    g = build_comparison_graph(df)  # the fit's encoding: natural item order, its own component numbers
    codes, _ = pd.factorize(g.annotator)
    for rep in (
        fast,
        comparison_graph_report_from_codes(g.i, g.j, g.items, codes),
        comparison_graph_report_from_codes(g.i, g.j, g.items, codes, component=g.component),
    ):
        pd.testing.assert_frame_equal(rep.items, ref.items)
        pd.testing.assert_frame_equal(rep.components, ref.components)
        assert rep.n_user_item_components == ref.n_user_item_components
    assert fast.n_components == g.n_components


def test_the_check_reads_a_report_as_it_reads_the_table() -> None:
    df = _table(2, 12, 60, 3, 3, 0.0, False)
    g = build_comparison_graph(df)
    codes, _ = pd.factorize(g.annotator)
    report = comparison_graph_report_from_codes(g.i, g.j, g.items, codes, component=g.component)
    verdicts = []
    for aggregate in (False, True):
        a = check_comparison_graph(df, "block", aggregate)
        b = check_comparison_graph(report, "block", aggregate)
        assert (a.summary, a.outcomes) == (b.summary, b.outcomes)
        verdicts.append(a.outcomes[0].passed)
    assert verdicts == [False, True]  # 3 item blocks; the annotators join them


def test_missing_ids() -> None:
    df = _table(2, 12, 60, 3, 1, 0.0, False)
    bad = df.assign(item_b=df["item_b"].where(df.index != 4, None))
    with pytest.raises(ValueError, match=r"column 'item_b': 1 row\(s\) at positions \[4\] have a missing item id"):
        comparison_graph_report(bad)
    # a row without an annotator joins its items but names no annotator
    anon = df.assign(annotator=df["annotator"].where(df.index != 0, None))
    rep = comparison_graph_report(anon)
    ref = comparison_graph_report_reference(df.drop(index=0))
    pd.testing.assert_frame_equal(
        rep.components.drop(columns="n_comparisons"), ref.components.drop(columns="n_comparisons")
    )
    assert rep.items["n_comparisons"].sum() == 2 * len(df)
