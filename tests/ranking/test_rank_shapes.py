"""``crowdflow.rank`` takes Evalica's ``xs, ys, winners`` and choix's ``(winner, loser)`` pairs as well as the
comparisons table (issue #34 item 4; crowdflow.contracts.comparisons.comparisons_from_shapes).

On a generated family of Bradley-Terry comparisons with a known true order (sizes, comparison counts, draws,
weights): the three shapes give the same scores; crowdflow's least-squares order and Evalica's Bradley-Terry
order (and choix's ILSR order) both recover the true order; docs/how-to/rank.md runs as written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import crowdflow as cf
from crowdflow.contracts.comparisons import ComparisonTableError, comparisons_from_shapes

evalica = pytest.importorskip("evalica")
choix = pytest.importorskip("choix")
W = evalica.Winner

ROOT = Path(__file__).resolve().parents[2]


def _family() -> list[dict[str, Any]]:
    """Bradley-Terry draws: n items with true scores spaced ``gap`` apart (item ``i{k}`` has score -k·gap), each
    pair compared ``per_pair`` times; a share of close calls becomes a draw."""
    out = []
    for seed, (n, per_pair, gap, draws) in enumerate([(5, 60, 0.6, 0.0), (8, 80, 0.5, 0.1), (12, 50, 0.6, 0.2)]):
        rng = np.random.default_rng(seed)
        theta = -gap * np.arange(n)
        a, b = np.triu_indices(n, 1)
        a, b = np.repeat(a, per_pair), np.repeat(b, per_pair)
        swap = rng.random(a.size) < 0.5  # either item may come first
        a, b = np.where(swap, b, a), np.where(swap, a, b)
        p = 1.0 / (1.0 + np.exp(-(theta[a] - theta[b])))
        u = rng.random(a.size)
        draw = np.abs(u - p) < draws / 2
        outcome = np.where(draw, 0.0, np.where(u < p, 1.0, -1.0))
        names = np.array([f"i{k}" for k in range(n)], dtype=object)
        out.append({"n": n, "names": names, "a": a, "b": b, "outcome": outcome, "seed": seed})
    return out


FAMILY = _family()
TRUE_ORDER = {c["seed"]: [f"i{k}" for k in range(c["n"])] for c in FAMILY}


def _scores(fit: cf.RankingFit) -> pd.Series:
    return fit.ranking.set_index("item")["score"].sort_index()


@pytest.mark.parametrize("case", FAMILY, ids=lambda c: f"n{c['n']}-seed{c['seed']}")
def test_the_three_shapes_give_the_same_scores_and_recover_the_true_order(case: dict[str, Any]) -> None:
    names, a, b, y = case["names"], case["a"], case["b"], case["outcome"]
    table = pd.DataFrame({"annotator": "all", "item_a": names[a], "item_b": names[b], "outcome": y})
    by_table = _scores(cf.rank(table, outliers="none"))
    winners = [W.X if v > 0 else W.Y if v < 0 else W.Draw for v in y]
    by_evalica = _scores(cf.rank(list(names[a]), list(names[b]), winners, outliers="none"))
    pd.testing.assert_series_equal(by_table, by_evalica, rtol=0, atol=1e-12)
    # choix has no draws: the decided comparisons as (winner, loser) index pairs, against the same table
    decided = y != 0
    pairs = [
        (int(w), int(lo)) for w, lo in zip(np.where(y > 0, a, b)[decided], np.where(y > 0, b, a)[decided], strict=True)
    ]
    by_choix = _scores(cf.rank(pairs, items=list(names), outliers="none"))
    decided_table = table[decided]
    pd.testing.assert_series_equal(by_choix, _scores(cf.rank(decided_table, outliers="none")), rtol=0, atol=1e-9)
    # both recover the true order: crowdflow's least squares and Evalica's Bradley-Terry (and choix's ILSR)
    truth = TRUE_ORDER[case["seed"]]
    assert by_table.sort_values(ascending=False).index.tolist() == truth
    bt = evalica.bradley_terry(list(names[a]), list(names[b]), winners)
    assert bt.scores.sort_values(ascending=False).index.tolist() == truth
    ilsr = choix.ilsr_pairwise(case["n"], pairs, alpha=1e-3)
    assert [names[i] for i in np.argsort(-ilsr)] == truth
    # scores on one scale up to an affine map: least squares of ±1 outcomes vs BT log-strengths track each other
    bt_log = np.log(bt.scores.reindex(by_table.index).to_numpy())
    assert np.corrcoef(by_table.to_numpy(), bt_log)[0, 1] > 0.99


def test_weights_and_annotators_reach_the_table() -> None:
    """Evalica's weights are the weight column (a weight of 2 is the row twice); annotators, when given, are kept."""
    xs, ys = ["a", "b", "a"], ["b", "c", "c"]
    winners = [W.X, W.X, W.Y]
    twice = cf.rank([*xs, "a"], [*ys, "b"], [*winners, W.X], outliers="none")
    weighted = cf.rank(xs, ys, winners, weights=[2.0, 1.0, 1.0], outliers="none")
    pd.testing.assert_series_equal(_scores(twice), _scores(weighted), rtol=0, atol=1e-12)
    table = comparisons_from_shapes(xs, ys, winners, annotators=["u1", "u2", "u1"])
    assert table["annotator"].tolist() == ["u1", "u2", "u1"] and table["outcome"].tolist() == [1.0, 1.0, -1.0]
    assert comparisons_from_shapes(xs, ys, ["x", "Y", "draw"])["outcome"].tolist() == [1.0, -1.0, 0.0]
    df = pd.DataFrame({"annotator": ["u"], "item_a": ["a"], "item_b": ["b"], "outcome": [1]})
    assert comparisons_from_shapes(df) is df


@pytest.mark.parametrize(
    ("args", "kwargs", "words"),
    [
        ((["a", "b"], ["b", "c"], [W.X]), {}, "differ in length: 2, 2, 1"),
        ((["a"], ["b"], [1]), {}, "not evalica.Winner X, Y or Draw"),
        ((["a"], ["b"]), {}, "give both ys and winners"),
        (([(0, 1), (1, 2.5)],), {}, "not item indices"),
        (([(0, 1), (1, -1)],), {}, "1 row(s) at positions [1]"),
        (([(0, 1), (1, 3)],), {"items": ["a", "b", "c"]}, "index past the 3 items"),
        (([(0, 1, 2)],), {}, "(winner, loser) index pairs"),
        (([(0, 1)],), {"weights": [1.0]}, "weights go with Evalica"),
        ((pd.DataFrame({"item_a": ["a"]}), ["b"], [W.X]), {}, "carries its own columns"),
    ],
)
def test_bad_shapes_are_named(args: tuple[Any, ...], kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ComparisonTableError) as err:
        cf.rank(*args, outliers="none", **kwargs)
    assert words in str(err.value)
    assert isinstance(err.value, ValueError)


def test_the_how_to_page_runs() -> None:
    """docs/how-to/rank.md, its section on input shapes: every python block, in order, in one namespace."""
    page = (ROOT / "docs" / "how-to" / "rank.md").read_text()
    text = page[page.index("## Rank from the shape") :]
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    namespace: dict[str, Any] = {}
    for block in blocks:
        exec(compile(block, "docs/how-to/rank.md", "exec"), namespace)
    assert {"fit", "fit_evalica", "fit_choix"} <= set(namespace)
