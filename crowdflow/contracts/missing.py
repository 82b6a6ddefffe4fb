"""Missing numbers in output tables: each one carries its reason (issue #18, class 7; docs/reference/outputs.md).

The rule, enforced in one place (:func:`check_explained`, called by :func:`crowdflow.storage.run_store.write_run` before
anything is written): every float in an output table is finite, or it is missing (NaN, written as null) in a
row whose ``missing_reason`` names its column. An infinity is never written. ``missing_reason`` is a string
column, null where nothing is missing, otherwise ``"<col>[,<col>…]: <why>"`` clauses joined by ``"; "``, e.g.
``"lower,upper: the feasibility box is the rank-one method's (pgd) only"``. In memory the column is
dictionary-encoded (a pandas ``category`` of its few distinct texts, :func:`reason_column`: a code a row, not a
~100–300-byte text a row, in tables with a row per worker or per task); it is written to Parquet as plain text
(:func:`reasons_as_text`, applied by every writer in :mod:`crowdflow.storage.run_store`), so a run's files hold and
read back the same ``string`` column as before (issue #36: flow memory flat in the workers). Producers call
:func:`explain_missing` where they know why a value is undefined; a value left unexplained is a defect and
:func:`check_explained` refuses the run (exit 1, naming the table, column and an example row).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

__all__ = [
    "MISSING_REASON",
    "UnexplainedMissing",
    "check_explained",
    "explain_missing",
    "explained_columns",
    "no_reasons",
    "reason_column",
    "reasons_as_text",
    "unexplained",
    "unexplained_reference",
    "with_reasons",
]

MISSING_REASON = "missing_reason"
"""Name of the column that says why a row's missing numbers are missing."""


class UnexplainedMissing(RuntimeError):
    """An output table holds a NaN without a reason, or an infinity: a defect of crowdflow, not of the input
    (so not a :class:`~crowdflow.contracts.errors.CrowdflowError`: the CLI exits 1 and asks for a report)."""


def _clauses(text: object) -> list[tuple[list[str], str]]:
    if not isinstance(text, str) or not text:
        return []
    out = []
    for clause in text.split("; "):
        cols, _, why = clause.partition(": ")
        out.append((cols.split(","), why))
    return out


def explained_columns(text: object) -> set[str]:
    """The column names a ``missing_reason`` value explains (empty for null)."""
    return {c for cols, _ in _clauses(text) for c in cols}


def explain_missing(
    df: pd.DataFrame, columns: Iterable[str], reason: str, where: np.ndarray | pd.Series | None = None
) -> pd.DataFrame:
    """Record ``reason`` for ``columns`` in the rows where one of them is NaN (and ``where``, if given).

    Parameters
    ----------
    df : pandas.DataFrame
        An output table; gets a ``missing_reason`` column (all null) if it has none. Modified in place and returned.
    columns : iterable of str
        Float columns of ``df`` that the reason explains; only those actually NaN in a row are named in it.
    reason : str
        Why, in words a reader of the table understands (no ``;`` or ``:`` separators).
    where : boolean array, optional
        Restrict to these rows.
    """
    cols = [c for c in columns if c in df.columns]
    if ";" in reason or ": " in reason:
        raise ValueError(f"a missing reason must not contain '; ' or ': ' (it is parsed): {reason!r}")
    if MISSING_REASON not in df.columns:
        df[MISSING_REASON] = no_reasons(df.index)
    elif not isinstance(df[MISSING_REASON].dtype, pd.CategoricalDtype):  # text given by the caller: encoded here
        given_codes, given = pd.factorize(df[MISSING_REASON], use_na_sentinel=True)
        df[MISSING_REASON] = reason_column([str(t) for t in given], np.asarray(given_codes), df.index)
    if not cols or df.empty:
        return df
    mask = None if where is None else np.asarray(where, dtype=bool)
    if mask is not None and not mask.any():  # no row to explain: skip the per-column NaN scan
        return df
    isna = np.column_stack([pd.isna(df[c]).to_numpy() for c in cols])
    rows = isna.any(axis=1)
    if mask is not None:
        rows &= mask
    if not rows.any():
        return df
    # a table holds a few distinct reasons over many rows: each new text is built once per (previous text, pattern of
    # missing columns) and the rows point at it by code, so no Python string is made per row (a skills table has one
    # row per worker: docs/scale.md, memory laws)
    names = np.asarray(cols, dtype=object)
    idx = np.flatnonzero(rows)
    prev_codes, prev_texts = pd.factorize(df[MISSING_REASON], use_na_sentinel=True)  # null: -1
    patterns, pattern = np.unique(isna[idx], axis=0, return_inverse=True)
    key = (np.asarray(prev_codes, dtype=np.int64)[idx] + 1) * len(patterns) + pattern.ravel()
    keys, which = np.unique(key, return_inverse=True)
    texts = [str(t) for t in prev_texts]
    for k in keys.tolist():
        p, q = divmod(k, len(patterns))
        clause = ",".join(names[patterns[q]]) + ": " + reason
        prev = texts[p - 1] if p else ""
        texts.append(f"{prev}; {clause}" if prev else clause)
    codes = np.asarray(prev_codes, dtype=np.int64).copy()
    codes[idx] = len(prev_texts) + which.ravel()
    df[MISSING_REASON] = reason_column(texts, codes, df.index)
    return df


def reason_column(texts: Sequence[str], codes: np.ndarray, index: pd.Index | None = None) -> pd.Series:
    """The ``missing_reason`` column ``texts[codes]`` (null where the code is −1), dictionary-encoded: **the one
    form of the column in memory** (a pandas ``category`` whose categories are the distinct texts used, in order of
    first use in ``texts``). Equal texts in ``texts`` become one category.

    Parameters
    ----------
    texts : sequence of str
    codes : numpy.ndarray of int
        Index into ``texts`` per row, −1 for null.
    index : pandas.Index, optional
        The table's index (default: a range index).
    """
    codes = np.asarray(codes, dtype=np.int64)
    which, distinct = pd.factorize(pd.Index(list(texts), dtype="str"))  # first-use order; equal texts merged
    which = np.asarray(which, dtype=np.int64)
    rows = np.full(codes.shape, -1, dtype=np.int64)
    has = codes >= 0
    rows[has] = which[codes[has]]
    used = np.unique(rows[rows >= 0])  # unused texts dropped here, keeping the categories text even when none is used
    remap = np.full(len(distinct), -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    rows[has] = remap[rows[has]]
    dtype = pd.CategoricalDtype(pd.Index(np.asarray(distinct, dtype=object)[used], dtype="str"))
    return pd.Series(pd.Categorical.from_codes(rows, dtype=dtype), index=index, name=MISSING_REASON)


def no_reasons(index: pd.Index) -> pd.Series:
    """An all-null ``missing_reason`` column in the form of :func:`reason_column`."""
    return reason_column([], np.full(len(index), -1, dtype=np.int64), index)


def reasons_as_text(table: pa.Table) -> pa.Table:
    """``table`` with its ``missing_reason`` column as plain text if it is dictionary-encoded (Arrow's form of the
    in-memory ``category``): the Arrow type and pandas metadata a pandas ``string`` column converts to, so every
    Parquet file of a run holds, and reads back, the same column as before the encoding (issue #36)."""
    import pyarrow as pa

    i = table.schema.get_field_index(MISSING_REASON)
    if i < 0 or not pa.types.is_dictionary(table.schema.field(i).type):
        return table
    ref = pa.Table.from_pandas(pd.DataFrame({MISSING_REASON: pd.array([], dtype="string")}), preserve_index=False)
    kind = ref.schema.field(0).type
    meta = dict(table.schema.metadata or {})
    if b"pandas" in meta:  # the column's entry as a string column's (else pandas would read back a category)
        entry = json.loads(ref.schema.metadata[b"pandas"])["columns"][0]
        pandas_meta = json.loads(meta[b"pandas"])
        for col in pandas_meta["columns"]:
            if col.get("field_name") == MISSING_REASON:
                col.update({k: entry[k] for k in ("pandas_type", "numpy_type", "metadata")})
        meta[b"pandas"] = json.dumps(pandas_meta).encode()
    out = table.set_column(i, pa.field(MISSING_REASON, kind), table.column(i).cast(kind))
    return out.replace_schema_metadata(meta)


def unexplained(df: pd.DataFrame) -> dict[str, tuple[int, int, str]]:
    """Float columns with non-finite values that no ``missing_reason`` explains.

    Each distinct ``missing_reason`` text is parsed once (a table usually holds a few texts over many rows); the
    rows then look their text's answer up by code. The same answer as :func:`unexplained_reference`.

    Returns ``{column: (count, first row position, 'inf' | 'nan')}``.
    """
    bad: dict[str, tuple[int, int, str]] = {}
    codes: np.ndarray | None = None
    parsed: list[set[str]] = []  # the columns each distinct reason text explains, parsed once for all columns
    if MISSING_REASON in df.columns:
        raw_codes, uniques = pd.factorize(df[MISSING_REASON], use_na_sentinel=True)  # null: -1
        codes, parsed = np.asarray(raw_codes), [explained_columns(t) for t in uniques]
    for c in df.columns:
        if c == MISSING_REASON or df[c].dtype.kind not in "fc":
            continue
        v = df[c].to_numpy(dtype=float)
        inf = np.isinf(v)
        nan = np.isnan(v)
        if codes is not None and nan.any():
            explains = np.array([c in cols for cols in parsed] + [False], dtype=bool)  # [-1]: null
            nan &= ~explains[codes]
        hit = inf | nan
        if hit.any():
            first = int(np.flatnonzero(hit)[0])
            bad[c] = (int(hit.sum()), first, "inf" if inf[first] else "nan")
    return bad


def unexplained_reference(df: pd.DataFrame) -> dict[str, tuple[int, int, str]]:
    """:func:`unexplained` parsing the reason of every row with a NaN (the reference of the coded version)."""
    bad: dict[str, tuple[int, int, str]] = {}
    reasons = df[MISSING_REASON].to_numpy(dtype=object) if MISSING_REASON in df.columns else None
    for c in df.columns:
        if c == MISSING_REASON or df[c].dtype.kind not in "fc":
            continue
        v = df[c].to_numpy(dtype=float)
        inf = np.isinf(v)
        nan = np.isnan(v)
        if reasons is not None and nan.any():
            nan_rows = np.flatnonzero(nan)
            ok = np.fromiter((c in explained_columns(reasons[r]) for r in nan_rows), bool, nan_rows.size)
            nan[nan_rows[ok]] = False
        hit = inf | nan
        if hit.any():
            first = int(np.flatnonzero(hit)[0])
            bad[c] = (int(hit.sum()), first, "inf" if inf[first] else "nan")
    return bad


def check_explained(tables: dict[str, pd.DataFrame]) -> None:
    """Refuse output tables with an infinity or an unexplained NaN (the rule of this module).

    Raises
    ------
    UnexplainedMissing
        Naming each table, column, count and first row.
    """
    problems = []
    for name, df in tables.items():
        for col, (n, first, kind) in unexplained(df).items():
            what = "infinite" if kind == "inf" else "missing (NaN) without a missing_reason"
            problems.append(f"{name}.{col}: {n} value(s) {what}, e.g. row {first}")
    if problems:
        raise UnexplainedMissing(
            "output tables break the rule that every number is finite or missing with a reason "
            "(a crowdflow defect; please report it): " + "; ".join(problems)
        )


def with_reasons(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The tables as written: checked by :func:`check_explained`, and every table with a float column given a
    ``missing_reason`` column (null where nothing is missing), last, so every such table has the same shape."""
    check_explained(tables)
    out = {}
    for name, df in tables.items():
        if MISSING_REASON not in df.columns and any(df[c].dtype.kind in "fc" for c in df.columns):
            df = df.assign(**{MISSING_REASON: no_reasons(df.index)})
        elif MISSING_REASON in df.columns:
            df = df[[c for c in df.columns if c != MISSING_REASON] + [MISSING_REASON]]
        out[name] = df
    return out
