"""Comparison tables → encoded comparisons: validation, column aliases, dense ids, exclusions.

:func:`encode_personal_comparisons` reads one comparison table (canonical ``annotator, item_a,
item_b, outcome [, weight]``, the winner form, or Crowd-Kit's ``worker, left, right, label``), refuses
or drops invalid rows, drops ties (they are not part of the BTL model), assigns dense user / item ids
in sorted id order and aggregates the rows into :class:`~crowdflow.personal_rankings.types.PairData`:
each used row becomes a directed comparison ``(user, winner, loser)`` with its weight, and repeated rows
are independent draws that add weight. Users and items with no usable comparison are listed, with the
reason, in :attr:`PersonalComparisons.excluded` and never fitted.

Method and input contract: docs/methods/personal_rankings.md §1.1.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from crowdflow.contracts.comparisons import describe_positions, rename_comparison_aliases, winner_outcomes
from crowdflow.contracts.errors import DegenerateInput
from crowdflow.labels import natural_sort
from crowdflow.personal_rankings.types import InvalidPolicy, PairData

logger = logging.getLogger(__name__)

__all__ = ["PersonalComparisons", "encode_personal_comparisons"]


@dataclass(frozen=True)
class PersonalComparisons:
    """Comparisons encoded for the low-rank BTL fit (docs/methods/personal_rankings.md §1.1).

    Attributes
    ----------
    users, items : numpy.ndarray
        String ids of the fitted users / items; position = dense id (sorted by id, numerically when
        every id is a number).
    pairs : PairData
        Comparisons aggregated per (user, unordered item pair).
    n_rows : int
        Rows in the input table.
    n_used : int
        Rows used (after dropping ties and, with ``on_invalid="drop"``, invalid rows).
    n_ties : int
        Tied rows dropped (ties are not part of the model).
    n_invalid : int
        Invalid rows dropped (0 with ``on_invalid="raise"``).
    invalid : pandas.DataFrame
        ``row, reason`` of every dropped invalid row.
    excluded : pandas.DataFrame
        ``kind`` (``user``/``item``), ``id``, ``reason``: entities that appear in the input (or were
        declared) but have no usable comparison, hence are not fitted.
    """

    users: np.ndarray
    items: np.ndarray
    pairs: PairData
    n_rows: int
    n_used: int
    n_ties: int
    n_invalid: int
    invalid: pd.DataFrame
    excluded: pd.DataFrame

    @property
    def m(self) -> int:
        return int(self.users.size)

    @property
    def n(self) -> int:
        return int(self.items.size)


def _id_series(df: pd.DataFrame, col: str) -> tuple[pd.Series, np.ndarray]:
    s = df[col]
    na = s.isna().to_numpy()
    out = s.astype(str).where(~na, None)
    return out, na


def encode_personal_comparisons(
    comparisons: pd.DataFrame,
    *,
    on_invalid: InvalidPolicy = "raise",
    users: Sequence[Any] | None = None,
    items: Sequence[Any] | None = None,
) -> PersonalComparisons:
    """Validate a comparison table and encode it as dense triples (docs/methods/personal_rankings.md §1.1).

    Accepted layouts (column aliases are renamed when the canonical name is absent):

    * canonical ``annotator, item_a, item_b, outcome [, weight]`` — ``outcome > 0`` means ``item_a``
      preferred, ``< 0`` ``item_b``, ``0`` a tie; graded outcomes are reduced to their sign;
    * the paper's ``user, item_i, item_j, winner`` and winner form ``annotator, item_a, item_b, winner``
      (``winner`` = id of the preferred item or ``'tie'``);
    * Crowd-Kit ``worker, left, right, label`` (``label`` = winner id).

    Each used row becomes ``(user, winner, loser)`` with weight ``weight`` (default 1); repeated rows
    are independent draws and add up.

    Parameters
    ----------
    comparisons : pandas.DataFrame
        One row per judgement.
    on_invalid : {"raise", "drop"}
        Invalid rows — missing ids, ``item_a == item_b``, a winner that is neither item, a missing or
        non-finite outcome, a weight that is not finite and > 0 — raise ``ValueError`` (default) or are
        dropped, counted and logged (docs/methods/personal_rankings.md §1.1).
    users, items : sequence, optional
        The full universe of ids. Declared ids without usable comparisons are reported in
        ``excluded`` (reason ``"no comparisons in the input"``).

    Returns
    -------
    PersonalComparisons

    Raises
    ------
    ValueError
        Missing columns, invalid rows (with ``on_invalid="raise"``), or no usable comparison at all.
    """
    if not isinstance(comparisons, pd.DataFrame):
        raise ValueError(f"comparisons must be a pandas DataFrame, got {type(comparisons).__name__}")
    if on_invalid not in ("raise", "drop"):
        raise ValueError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
    df = rename_comparison_aliases(comparisons)
    need = ["annotator", "item_a", "item_b"]
    missing = [c for c in need if c not in df.columns]
    if missing or ("outcome" not in df.columns and "winner" not in df.columns):
        raise ValueError(
            f"comparisons lack required column(s) {missing + ([] if ('outcome' in df.columns or 'winner' in df.columns) else ['outcome or winner'])}"  # noqa: E501
            f" (need annotator, item_a, item_b and outcome or winner); have {list(comparisons.columns)}"
        )
    n_rows = len(df)
    if n_rows == 0:
        raise ValueError("comparisons table is empty: nothing to fit")
    ann, ann_na = _id_series(df, "annotator")
    ia, ia_na = _id_series(df, "item_a")
    ib, ib_na = _id_series(df, "item_b")
    reasons: list[tuple[np.ndarray, str, str]] = [
        (ann_na, "annotator", "missing annotator id"),
        (ia_na, "item_a", "missing item id"),
        (ib_na, "item_b", "missing item id"),
    ]
    same = (~ia_na) & (~ib_na) & (ia.to_numpy(dtype=object) == ib.to_numpy(dtype=object))
    reasons.append((same, "item_a/item_b", "item compared with itself"))
    if "outcome" in df.columns:
        y = pd.to_numeric(df["outcome"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad_y = ~np.isfinite(y)
        reasons.append((bad_y, "outcome", "missing, non-numeric or infinite outcome"))
        y = np.where(bad_y, 0.0, y)
    else:
        y, bad_win = winner_outcomes(ia, ib, df["winner"])
        reasons.append((bad_win & ~ia_na & ~ib_na, "winner", "winner is neither item_a, item_b nor 'tie'"))
        y = np.where(bad_win, 0.0, y)
    if "weight" in df.columns:
        wt = pd.to_numeric(df["weight"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad_w = ~np.isfinite(wt) | (wt <= 0)
        reasons.append((bad_w, "weight", "weight not finite and > 0"))
    else:
        wt = np.ones(n_rows)
    invalid = np.zeros(n_rows, dtype=bool)
    reason = np.full(n_rows, "", dtype=object)
    for mask, col, why in reasons:
        new = mask & ~invalid
        reason[new] = why
        invalid |= mask
        if mask.any() and on_invalid == "raise":
            raise ValueError(f"column '{col}': {describe_positions(mask)}: {why}")
    n_invalid = int(invalid.sum())
    if n_invalid:
        logger.warning(
            "dropped %d invalid comparison row(s): %s", n_invalid, pd.Series(reason[invalid]).value_counts().to_dict()
        )
    tie_rows = (~invalid) & (y == 0)
    n_ties = int(tie_rows.sum())
    if n_ties:
        logger.info("dropped %d tied comparison row(s) (ties are not part of the BTL model)", n_ties)
    used = ~invalid & ~tie_rows
    n_used = int(used.sum())

    ann_a = ann.to_numpy(dtype=object)
    ia_a = ia.to_numpy(dtype=object)
    ib_a = ib.to_numpy(dtype=object)
    fit_users = natural_sort(cast(np.ndarray, pd.unique(ann_a[used]))) if n_used else np.array([], dtype=object)
    fit_items = (
        natural_sort(cast(np.ndarray, pd.unique(np.r_[ia_a[used], ib_a[used]])))
        if n_used
        else np.array([], dtype=object)
    )

    # entities seen or declared but not fitted, with the reason
    def _excluded(
        kind: str, seen: pd.Series, seen_tie: pd.Series, declared: Sequence[Any] | None, fitted: np.ndarray
    ) -> pd.DataFrame:
        universe = set(seen.index)
        if declared is not None:
            universe |= {str(v) for v in declared}
        rows = []
        fit_set = set(fitted)
        for e in universe - fit_set:
            n_seen = int(seen.get(e, 0))
            n_tie = int(seen_tie.get(e, 0))
            if n_seen == 0:
                why = "no comparisons in the input"
            elif n_tie == n_seen:
                why = "only tied comparisons"
            elif n_tie == 0:
                why = "only invalid rows (dropped)"
            else:
                why = "only tied or invalid rows"
            rows.append((kind, e, why))
        return pd.DataFrame(rows, columns=["kind", "id", "reason"])

    ok_u = ~ann_na
    seen_u = pd.Series(ann_a[ok_u]).value_counts()
    seen_u_tie = pd.Series(ann_a[ok_u & tie_rows]).value_counts()
    it_all = np.r_[ia_a[~ia_na], ib_a[~ib_na]]
    it_tie = np.r_[ia_a[tie_rows & ~ia_na], ib_a[tie_rows & ~ib_na]]
    seen_i = pd.Series(it_all).value_counts()
    seen_i_tie = pd.Series(it_tie).value_counts()
    excluded = pd.concat(
        [
            _excluded("user", seen_u, seen_u_tie, users, fit_users),
            _excluded("item", seen_i, seen_i_tie, items, fit_items),
        ],
        ignore_index=True,
    )
    if len(excluded):
        excluded = excluded.sort_values(["kind", "id"], kind="stable").reset_index(drop=True)
        logger.warning("%d user(s)/item(s) have no usable comparison and are excluded from the fit", len(excluded))
    if n_used == 0:
        raise DegenerateInput(
            f"no usable comparison: {n_rows} row(s), {n_ties} tie(s), {n_invalid} invalid row(s); "
            "personal rankings need comparisons with a winner",
            "no_usable_comparison",
        )
    if fit_items.size < 2:
        raise DegenerateInput("need at least two compared items", "too_few_items")
    uix = pd.Index(fit_users).get_indexer(ann_a[used])
    aix = pd.Index(fit_items).get_indexer(ia_a[used])
    bix = pd.Index(fit_items).get_indexer(ib_a[used])
    yy = y[used]
    win_ix = np.where(yy > 0, aix, bix)
    los_ix = np.where(yy > 0, bix, aix)
    pairs = PairData.from_triples(fit_users.size, fit_items.size, uix, win_ix, los_ix, wt[used])
    inv_df = pd.DataFrame({"row": np.flatnonzero(invalid).astype(np.int64), "reason": reason[invalid]})
    return PersonalComparisons(
        users=np.asarray(fit_users, dtype=object),
        items=np.asarray(fit_items, dtype=object),
        pairs=pairs,
        n_rows=n_rows,
        n_used=n_used,
        n_ties=n_ties,
        n_invalid=n_invalid,
        invalid=inv_df,
        excluded=excluded,
    )
