"""Held-out rank selection."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from crowdflow.personal_rankings import PersonalComparisons, fit_personal_rankings, select_rank, split_holdout


def test_rank_selection_prefers_true_rank_over_extremes(
    encoded: Callable[[int, int, float, int], tuple[PersonalComparisons, np.ndarray]],
) -> None:
    enc, _ = encoded(50, 3, 8, 2)
    train, test = split_holdout(enc.pairs, 0.2, seed=0)
    assert train.n_pairs + test.n_pairs == enc.pairs.n_pairs
    assert (np.bincount(train.user, minlength=enc.m) > 0).all()
    assert (np.bincount(np.r_[train.a, train.b], minlength=enc.n) > 0).all()
    tab = select_rank(enc.pairs, [1, 3, 8])
    assert tab.loc[tab["selected"], "rank"].item() == 3
    assert tab.loc[tab["selected"], "heldout_accuracy"].item() == tab["heldout_accuracy"].max()
    res = fit_personal_rankings(enc, rank=[1, 3, 8])
    assert res.diagnostics.rank == 3 and res.rank_selection is not None
    pd.testing.assert_frame_equal(res.rank_selection, tab)
