"""Parsing a comparison table into the canonical form every ranking method reads.

One row per judgement. The canonical columns are ``row_id, annotator, item_a, item_b, outcome, weight``
(``outcome > 0``: ``item_a`` preferred; ties are 0; weights are replication counts > 0). Accepted input
layouts, each mapped onto the canonical one:

* canonical ``annotator, item_a, item_b, outcome [, weight]``;
* winner form ``annotator, item_a, item_b, winner`` (``winner`` names the preferred item or is the tie
  token), converted by :func:`comparisons_from_winners`;
* Crowd-Kit pairwise ``worker, left, right, label`` (``label`` = the winner's id);
* the paper's names ``annotator_id, item_i, item_j, y``.

:func:`canonical_comparisons` is the module's entry point; its errors name the column and the offending
row positions. See docs/methods/ranking.md §1.2.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["COMPARISON_ALIASES", "canonical_comparisons", "comparisons_from_winners"]


COMPARISON_ALIASES = {
    # Crowd-Kit pairwise names
    "worker": "annotator",
    "left": "item_a",
    "right": "item_b",
    # the paper's names (docs/methods/ranking.md §1.2)
    "annotator_id": "annotator",
    "item_i": "item_a",
    "item_j": "item_b",
    "y": "outcome",
}


def _bad_rows_message(mask: np.ndarray, limit: int = 5) -> str:
    rows = np.flatnonzero(mask)
    shown = ", ".join(str(int(r)) for r in rows[:limit])
    more = f" (+{rows.size - limit} more)" if rows.size > limit else ""
    return f"{rows.size} row(s) at positions [{shown}]{more}"


def comparisons_from_winners(
    df: pd.DataFrame,
    *,
    winner: str = "winner",
    item_a: str = "item_a",
    item_b: str = "item_b",
    annotator: str = "annotator",
    tie: str = "tie",
) -> pd.DataFrame:
    """Convert winner-form comparisons to the canonical outcome form.

    Winner form is ``annotator, item_a, item_b, winner`` (``winner`` = id of the preferred item or
    ``'tie'``; this is the layout of the shared pairwise data sets and, with ``worker, left, right,
    label``, of Crowd-Kit). The canonical form (docs/methods/ranking.md §1.2) has ``outcome = +1`` if ``item_a`` won,
    ``−1`` if ``item_b`` won and ``0`` for a tie.

    Parameters
    ----------
    df : pandas.DataFrame
        Winner-form table. Extra columns are kept.
    winner, item_a, item_b, annotator : str
        Column names in ``df``.
    tie : str
        The tie token (compared case-insensitively).

    Returns
    -------
    pandas.DataFrame
        Columns ``annotator, item_a, item_b, outcome`` (+ the other columns of ``df``).

    Raises
    ------
    ValueError
        If a column is missing or a ``winner`` value is neither ``item_a``, ``item_b`` nor the tie token.
    """
    missing = [c for c in (item_a, item_b, winner) if c not in df.columns]
    if missing:
        raise ValueError(f"winner-form comparisons lack column(s) {missing}; have {list(df.columns)}")
    a = df[item_a].astype("string")
    b = df[item_b].astype("string")
    win = df[winner].astype("string")
    out = np.full(len(df), np.nan)
    out[(win == a).fillna(False).to_numpy(dtype=bool)] = 1.0
    out[(win == b).fillna(False).to_numpy(dtype=bool)] = -1.0
    out[(win.str.lower() == tie.lower()).fillna(False).to_numpy(dtype=bool)] = 0.0
    bad = np.isnan(out)
    if bad.any():
        raise ValueError(f"column '{winner}': {_bad_rows_message(bad)} name neither item_a, item_b nor '{tie}'")
    res = df.drop(columns=[winner]).rename(columns={item_a: "item_a", item_b: "item_b"})
    if annotator in res.columns and annotator != "annotator":
        res = res.rename(columns={annotator: "annotator"})
    res["outcome"] = out
    return res


def canonical_comparisons(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Validate a comparison table and return it in canonical form (docs/methods/ranking.md §1.2).

    Accepted layouts: canonical ``annotator, item_a, item_b, outcome [, weight]``; winner form
    ``annotator, item_a, item_b, winner`` (see :func:`comparisons_from_winners`); Crowd-Kit
    ``worker, left, right, label`` (``label`` = winner id); the paper's ``annotator_id, item_i, item_j, y``.

    Parameters
    ----------
    comparisons : pandas.DataFrame
        One row per individual judgement. ``annotator`` is optional (needed for per-annotator reports).

    Returns
    -------
    pandas.DataFrame
        Columns ``row_id`` (int64, position in the input), ``annotator`` (str or missing), ``item_a``,
        ``item_b`` (str), ``outcome`` (float64, finite; > 0 means ``item_a`` preferred), ``weight``
        (float64 > 0, default 1).

    Raises
    ------
    ValueError
        Missing columns, missing ids, self-comparisons, non-finite outcomes, non-positive or non-finite
        weights, or an empty table. Messages name the column and the offending row positions.
    """
    if not isinstance(comparisons, pd.DataFrame):
        raise ValueError(f"comparisons must be a pandas DataFrame, got {type(comparisons).__name__}")
    df = comparisons
    ren = {k: v for k, v in COMPARISON_ALIASES.items() if k in df.columns and v not in df.columns}
    if ren:
        df = df.rename(columns=ren)
    if "outcome" not in df.columns:
        if "winner" in df.columns:
            df = comparisons_from_winners(df)
        elif "label" in df.columns:
            df = comparisons_from_winners(df, winner="label")
    missing = [c for c in ("item_a", "item_b", "outcome") if c not in df.columns]
    if missing:
        raise ValueError(
            f"comparisons lack required column(s) {missing} (need annotator, item_a, item_b, outcome "
            f"or a 'winner' column); have {list(comparisons.columns)}"
        )
    m = len(df)
    if m == 0:
        raise ValueError("comparisons table is empty: nothing to rank")
    out = pd.DataFrame({"row_id": np.arange(m, dtype=np.int64)})
    for col in ("item_a", "item_b"):
        s = df[col]
        na = s.isna().to_numpy()
        if na.any():
            raise ValueError(f"column '{col}': {_bad_rows_message(na)} have a missing item id")
        out[col] = s.astype(str).to_numpy(dtype=object)
    same = out["item_a"].to_numpy() == out["item_b"].to_numpy()
    if same.any():
        raise ValueError(
            f"columns 'item_a'/'item_b': {_bad_rows_message(same)} compare an item with itself "
            f"(e.g. item '{out['item_a'].iloc[int(np.flatnonzero(same)[0])]}')"
        )
    y = pd.to_numeric(df["outcome"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(y)
    if bad.any():
        raise ValueError(f"column 'outcome': {_bad_rows_message(bad)} are missing, non-numeric or infinite")
    out["outcome"] = y
    if "weight" in df.columns:
        w = pd.to_numeric(df["weight"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(w) | (w <= 0)
        if bad.any():
            raise ValueError(
                f"column 'weight': {_bad_rows_message(bad)} are not finite and > 0 "
                "(weights are replication counts; drop zero-weight rows before fitting)"
            )
    else:
        w = np.ones(m)
    out["weight"] = w
    if "annotator" in df.columns:
        ann = df["annotator"]
        out["annotator"] = ann.astype(str).where(ann.notna(), None).to_numpy(dtype=object)
    else:
        out["annotator"] = np.full(m, None, dtype=object)
    return out[["row_id", "annotator", "item_a", "item_b", "outcome", "weight"]]
