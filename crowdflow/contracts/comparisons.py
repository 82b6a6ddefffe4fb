"""Comparison tables, read one way by every job: aliases, winner → outcome, row checks, row messages.

One row per judgement. The canonical columns are ``annotator, item_a, item_b, outcome [, weight]``
(``outcome > 0``: ``item_a`` preferred; ties are 0; weights are replication counts > 0). Accepted input
layouts, each mapped onto the canonical one by the same functions wherever a comparison table is read
(the file reader :mod:`crowdflow.storage.io`, the ranking job, the personal-rankings job):

* canonical ``annotator, item_a, item_b, outcome [, weight]``;
* winner form ``annotator, item_a, item_b, winner`` (``winner`` names the preferred item or is the tie
  token ``tie``, any case), converted by :func:`winner_outcomes`;
* Crowd-Kit pairwise ``worker, left, right, label`` (``label`` = the winner's id);
* the papers' names ``user`` / ``annotator_id``, ``item_i, item_j`` and ``y`` (:data:`COMPARISON_ALIASES`).

Two shapes that are not tables, as the ranking libraries take them, become the canonical table by
:func:`comparisons_from_shapes` (the front door ``crowdflow.rank`` calls it): Evalica's ``xs, ys, winners``
(``winners`` items of ``evalica.Winner``: ``X``, ``Y`` or ``Draw``) and choix's list of ``(winner, loser)``
index pairs.

:func:`canonical_comparisons` is the strict reader the ranking job uses (every bad row is an error);
the personal-rankings job applies the same aliases and winner rule and may drop bad rows instead. Errors
name the column and the offending row positions (:func:`describe_positions`). See docs/methods/ranking.md
§1.2.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from crowdflow.contracts.errors import InputError

__all__ = [
    "COMPARISON_ALIASES",
    "TIE",
    "TIE_SPELLINGS",
    "TIE_WORDS",
    "ComparisonTableError",
    "canonical_comparisons",
    "comparison_layout",
    "comparisons_from_shapes",
    "comparisons_from_winners",
    "describe_positions",
    "id_text",
    "missing_ids_error",
    "outcomes_and_weights",
    "rename_comparison_aliases",
    "self_comparison_error",
    "text_ids",
    "winner_outcomes",
]

#: The tie token of the winner form (compared case-insensitively).
TIE = "tie"

#: How a tie is written in a winner column (compared without case or surrounding blanks): the canonical
#: :data:`TIE` and the words other tools and exports use (Evalica's ``Winner.Draw``, "draw", "tied", "equal",
#: "same", "both", "neither" for no preference, "="). A winner that is one of the row's own item ids is that item.
TIE_SPELLINGS = frozenset({TIE, "draw", "tied", "equal", "same", "both", "neither", "=", "winner.draw"})
TIE_WORDS = ", ".join(repr(w) for w in sorted(TIE_SPELLINGS))
#: Evalica's winners (``evalica.Winner`` members by name, or the same words as text, any case) → outcome.
EVALICA_WINNERS = {"x": 1.0, "y": -1.0, "draw": 0.0, TIE: 0.0}
#: The annotator of comparisons given without one (Evalica's and choix's shapes have none).
ONE_ANNOTATOR = "all"

#: Alternative column name → canonical name; applied only when the canonical name is absent.
COMPARISON_ALIASES = {
    # Crowd-Kit pairwise names (its `label` is the winner's id: see rename_comparison_aliases)
    "worker": "annotator",
    "left": "item_a",
    "right": "item_b",
    # the papers' names (docs/methods/ranking.md §1.2, docs/methods/personal_rankings.md §1.1)
    "user": "annotator",
    "annotator_id": "annotator",
    "item_i": "item_a",
    "item_j": "item_b",
    "y": "outcome",
}


class ComparisonTableError(InputError, ValueError):
    """A comparisons table breaks one of this module's rules (missing or self-compared ids, bad outcomes, …).

    An :class:`~crowdflow.contracts.errors.InputError` (the command line exits 2 on it, also when the table reached
    the fit
    under ``checks.validation: warn``) that is still a ``ValueError`` for library callers.
    """


def describe_positions(mask: np.ndarray, limit: int = 5) -> str:
    """``"3 row(s) at positions [0, 4, 7]"``: the rows a message is about (0-based positions in the table)."""
    rows = np.flatnonzero(mask)
    shown = ", ".join(str(int(r)) for r in rows[:limit])
    more = f" (+{rows.size - limit} more)" if rows.size > limit else ""
    return f"{rows.size} row(s) at positions [{shown}]{more}"


def rename_comparison_aliases(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with :data:`COMPARISON_ALIASES` renamed, and Crowd-Kit's ``label`` read as ``winner``.

    An alias is renamed only when its canonical name is absent; ``label`` becomes ``winner`` only when the
    table has neither an ``outcome`` nor a ``winner``. The input is never modified.
    """
    ren = {k: v for k, v in COMPARISON_ALIASES.items() if k in df.columns and v not in df.columns}
    no_outcome = "outcome" not in df.columns and "outcome" not in ren.values()
    if no_outcome and "winner" not in df.columns and "label" in df.columns:
        ren["label"] = "winner"
    return df.rename(columns=ren) if ren else df


def winner_outcomes(item_a: pd.Series, item_b: pd.Series, winner: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Outcomes of winner-form rows: ``+1`` if the winner is ``item_a``, ``−1`` if ``item_b``, ``0`` for a tie.

    Parameters
    ----------
    item_a, item_b, winner : pandas.Series
        The compared ids and the winner's id or the tie token :data:`TIE` (any case).

    Returns
    -------
    outcome : numpy.ndarray
        float64, NaN where the row has no valid winner.
    bad : numpy.ndarray
        bool, the rows whose ``winner`` is missing or names neither item nor a tie.
    """
    a, b, win = id_text(item_a), id_text(item_b), id_text(winner)
    out = np.full(len(win), np.nan)
    out[win.str.lower().isin(TIE_SPELLINGS).fillna(False).to_numpy(dtype=bool)] = 0.0
    # an item's own id wins over a tie word: an item named "draw" is that item
    out[(win == a).fillna(False).to_numpy(dtype=bool)] = 1.0
    out[(win == b).fillna(False).to_numpy(dtype=bool)] = -1.0
    return out, np.isnan(out)


def id_text(s: pd.Series) -> pd.Series:
    """An id column written as every reader writes ids: the one rule for ids, item names and winners alike.

    Whole-number floats (a Parquet float column, ``3.0``) are the integer id ``3``; every value is text with the
    surrounding blanks removed, and text that is only blanks is missing. So a ``winner`` column compares with
    ``item_a``/``item_b`` the way the ids themselves are canonicalised (``crowdflow.storage.io``'s coercion uses
    this function for every id column), whatever types the file gave each column.
    """
    values = s
    if values.dtype.kind == "f":
        v = values.to_numpy(dtype=np.float64, na_value=np.nan)
        present = ~np.isnan(v)
        if np.all(np.isfinite(v[present]) & (v[present] == np.floor(v[present])) & (np.abs(v[present]) < 2.0**53)):
            values = values.astype("Int64")
    text = values.astype("string").str.strip()
    return text.mask(text == "")


def comparisons_from_winners(
    df: pd.DataFrame,
    *,
    winner: str = "winner",
    item_a: str = "item_a",
    item_b: str = "item_b",
    annotator: str = "annotator",
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
        raise ComparisonTableError(f"winner-form comparisons lack column(s) {missing}; have {list(df.columns)}")
    out, bad = winner_outcomes(df[item_a], df[item_b], df[winner])
    if bad.any():
        raise ComparisonTableError(
            f"column '{winner}': {describe_positions(bad)} name neither item_a, item_b nor a tie ({TIE_WORDS})"
        )
    res = df.drop(columns=[winner]).rename(columns={item_a: "item_a", item_b: "item_b"})
    if annotator in res.columns and annotator != "annotator":
        res = res.rename(columns={annotator: "annotator"})
    res["outcome"] = out
    return res


def _evalica_outcomes(winners: Sequence[Any]) -> np.ndarray:
    names = [str(getattr(w, "name", w)).strip().lower() for w in winners]
    out = np.array([EVALICA_WINNERS.get(n, np.nan) for n in names], dtype=np.float64)
    bad = np.isnan(out)
    if bad.any():
        first = winners[int(np.flatnonzero(bad)[0])]
        raise ComparisonTableError(
            f"winners: {describe_positions(bad)} are not evalica.Winner X, Y or Draw (e.g. {first!r}); a plain number "
            "is refused because Evalica's Winner values (Draw 0, X 1, Y 2) and outcomes (+1, -1, 0) differ"
        )
    return out


def _choix_pairs(pairs: Sequence[Any], items: Sequence[Any] | None) -> tuple[np.ndarray, np.ndarray]:
    arr = np.asarray(pairs, dtype=object)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ComparisonTableError(
            f"choix-style comparisons are (winner, loser) index pairs; got an array of shape {arr.shape}"
        )
    try:
        idx = arr.astype(np.int64)
    except (TypeError, ValueError):
        raise ComparisonTableError(
            "choix-style comparisons are (winner, loser) pairs of integer item indices"
        ) from None
    if (idx != arr).any() or (idx < 0).any():
        bad = ((idx != arr) | (idx < 0)).any(axis=1)
        raise ComparisonTableError(f"choix pairs: {describe_positions(bad)} are not item indices >= 0")
    if items is None:
        return idx[:, 0], idx[:, 1]
    names = np.asarray(items, dtype=object)
    out_of_range = np.asarray((idx >= names.size).any(axis=1), dtype=bool)
    if out_of_range.any():
        raise ComparisonTableError(f"choix pairs: {describe_positions(out_of_range)} index past the {names.size} items")
    return names[idx[:, 0]], names[idx[:, 1]]


def comparisons_from_shapes(
    comparisons: Any,
    ys: Sequence[Any] | None = None,
    winners: Sequence[Any] | None = None,
    *,
    weights: Sequence[float] | None = None,
    annotators: Sequence[Any] | None = None,
    items: Sequence[Any] | None = None,
) -> pd.DataFrame:
    """The comparisons, in any shape the ranking libraries take, as a table :func:`canonical_comparisons` reads.

    Three shapes (docs/how-to/rank.md shows one example of each):

    * a table (``pandas.DataFrame``) in any layout of this module: returned as it is;
    * Evalica's ``xs, ys, winners`` (``evalica.bradley_terry(xs, ys, winners)``): row k compares ``xs[k]`` (item_a)
      with ``ys[k]`` (item_b); ``winners[k]`` is ``Winner.X`` (outcome +1), ``Winner.Y`` (−1) or ``Winner.Draw``
      (0), or the same names as text; Evalica's optional ``weights`` become the ``weight`` column;
    * choix's ``[(winner, loser), ...]`` index pairs (``choix.ilsr_pairwise(n_items, data)``): ``item_a`` is the
      winner, outcome +1; ``items`` names the indices (``items[i]`` is item ``i``), else the index is the id.

    Parameters
    ----------
    comparisons : DataFrame, sequence of item ids (Evalica's ``xs``) or sequence of (winner, loser) pairs
    ys, winners : sequence, optional
        Evalica's second items and winners; both or neither.
    weights : sequence of float, optional
        One weight (> 0) per comparison (Evalica's shape).
    annotators : sequence, optional
        Who judged each comparison; default: one annotator, ``"all"``.
    items : sequence, optional
        choix: the item id of each index.

    Returns
    -------
    pandas.DataFrame
        ``annotator, item_a, item_b, outcome [, weight]`` (a table given is returned unchanged).

    Raises
    ------
    ComparisonTableError
        Lengths that differ, a winner that is not X, Y or Draw, pairs that are not index pairs; an argument of
        another shape (``ys`` with a table or pairs).
    """
    if isinstance(comparisons, pd.DataFrame):
        if any(a is not None for a in (ys, winners, weights, annotators, items)):
            raise ComparisonTableError("a comparisons table carries its own columns: give no ys, winners or items")
        return comparisons
    if (ys is None) != (winners is None):
        raise ComparisonTableError("Evalica's shape is xs, ys, winners: give both ys and winners")
    if ys is not None and winners is not None:
        if items is not None:
            raise ComparisonTableError("items names choix's indices; Evalica's xs and ys are the item ids")
        xs = list(comparisons)
        if not len(xs) == len(ys) == len(winners):
            raise ComparisonTableError(f"xs, ys and winners differ in length: {len(xs)}, {len(ys)}, {len(winners)}")
        a, b, outcome = np.asarray(xs, dtype=object), np.asarray(list(ys), dtype=object), _evalica_outcomes(winners)
    else:
        if weights is not None:
            raise ComparisonTableError("weights go with Evalica's xs, ys, winners (repeat a choix pair instead)")
        a, b = _choix_pairs(list(comparisons), items)
        outcome = np.ones(a.size)
    table = pd.DataFrame({"item_a": a, "item_b": b, "outcome": outcome})
    if annotators is not None:
        if len(annotators) != len(table):
            raise ComparisonTableError(f"{len(annotators)} annotators for {len(table)} comparisons")
        table.insert(0, "annotator", np.asarray(list(annotators), dtype=object))
    else:
        table.insert(0, "annotator", ONE_ANNOTATOR)
    if weights is not None:
        if len(weights) != len(table):
            raise ComparisonTableError(f"{len(weights)} weights for {len(table)} comparisons")
        table["weight"] = np.asarray(list(weights), dtype=np.float64)
    return table


def text_ids(s: pd.Series) -> pd.Series:
    """An id column as text without a round trip through Python objects (missing stays missing).

    A column that already holds strings (Arrow-backed or pandas ``string``, what the readers give) is kept as
    it is: at 10^7 rows converting it to Python ``str`` objects and back cost seconds (issue #19). Other
    columns (numbers, mixed objects) are hashed as they are, their distinct values written with ``str`` and
    the text gathered by code in Arrow (issue #19: no per-row Python objects), the same text as ``str`` per
    row, so ``7`` and ``"7"`` are one id.
    """
    values = s.reset_index(drop=True)
    if isinstance(values.dtype, pd.StringDtype):
        return values
    # hash the raw values first (integers and Python objects alike), write only the distinct ones with `str`,
    # then gather the text by code in Arrow: no Python object per row
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    text = pa.array(pd.Series(uniques, dtype=object).astype(str).to_numpy(dtype=object), type=pa.large_string())
    idx = pa.array(np.asarray(codes, dtype=np.int64), mask=np.asarray(codes) < 0)
    return pd.Series(pd.arrays.ArrowStringArray(text.take(idx)), dtype="string")


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
    df = comparison_layout(comparisons)
    m = len(df)
    out = pd.DataFrame({"row_id": np.arange(m, dtype=np.int64)})
    for col in ("item_a", "item_b"):
        s = df[col]
        na = s.isna().to_numpy()
        if na.any():
            raise missing_ids_error(col, na)
        out[col] = text_ids(s)
    same = (out["item_a"] == out["item_b"]).to_numpy(dtype=bool)
    if same.any():
        raise self_comparison_error(same, out["item_a"].iloc[int(np.flatnonzero(same)[0])])
    y, w = outcomes_and_weights(df)
    out["outcome"] = y
    out["weight"] = w
    if "annotator" in df.columns:
        out["annotator"] = text_ids(df["annotator"])
    else:
        out["annotator"] = np.full(m, None, dtype=object)
    return out[["row_id", "annotator", "item_a", "item_b", "outcome", "weight"]]


def comparison_layout(comparisons: pd.DataFrame) -> pd.DataFrame:
    """The first checks of :func:`canonical_comparisons`: aliases renamed, winner form converted, required columns
    present, at least one row. Id, outcome and weight values are not checked yet (the columns are as given).

    Raises
    ------
    ValueError
        Not a DataFrame, a required column missing, or an empty table.
    """
    if not isinstance(comparisons, pd.DataFrame):
        raise ComparisonTableError(f"comparisons must be a pandas DataFrame, got {type(comparisons).__name__}")
    df = rename_comparison_aliases(comparisons)
    if "outcome" not in df.columns and "winner" in df.columns:
        df = comparisons_from_winners(df)
    missing = [c for c in ("item_a", "item_b", "outcome") if c not in df.columns]
    if missing:
        raise ComparisonTableError(
            f"comparisons lack required column(s) {missing} (need annotator, item_a, item_b, outcome "
            f"or a 'winner' column); have {list(comparisons.columns)}"
        )
    if len(df) == 0:
        raise ComparisonTableError("comparisons table is empty: nothing to rank")
    return df


def missing_ids_error(col: str, missing: np.ndarray) -> ComparisonTableError:
    """The error for rows of id column ``col`` without an id (``missing``: bool per row)."""
    return ComparisonTableError(f"column '{col}': {describe_positions(missing)} have a missing item id")


def self_comparison_error(same: np.ndarray, example: object) -> ComparisonTableError:
    """The error for rows comparing an item with itself (``same``: bool per row; ``example``: the first such id)."""
    return ComparisonTableError(
        f"columns 'item_a'/'item_b': {describe_positions(same)} compare an item with itself (e.g. item '{example}')"
    )


def _float_column(s: pd.Series) -> np.ndarray:
    """A column as float64, NaN where a value is missing or not a number (numpy numbers and bools as they are)."""
    if isinstance(s.dtype, np.dtype) and s.dtype.kind in "fiub":
        return np.array(s.to_numpy(), dtype=np.float64)
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def outcomes_and_weights(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The ``outcome`` and ``weight`` columns of a :func:`comparison_layout` table as float64, checked.

    Returns
    -------
    outcome, weight : numpy.ndarray
        Finite outcomes; weights finite and > 0 (1 when the table has no ``weight`` column).

    Raises
    ------
    ValueError
        Missing, non-numeric or infinite outcomes; weights not finite and > 0. Messages name the rows.
    """
    y = _float_column(df["outcome"])
    bad = ~np.isfinite(y)
    if bad.any():
        raise ComparisonTableError(f"column 'outcome': {describe_positions(bad)} are missing, non-numeric or infinite")
    if "weight" not in df.columns:
        return y, np.ones(len(df))
    w = _float_column(df["weight"])
    bad = ~np.isfinite(w) | (w <= 0)
    if bad.any():
        raise ComparisonTableError(
            f"column 'weight': {describe_positions(bad)} are not finite and > 0 "
            "(weights are replication counts; drop zero-weight rows before fitting)"
        )
    return y, w
