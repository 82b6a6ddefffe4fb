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
from collections.abc import Callable, Iterable, Sequence
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
    # a table holds a few distinct reasons over many rows: each new text is built once per (previous text, pattern of
    # missing columns) and the rows point at it by a small code, so no Python string and no 8-byte integer is made per
    # row (a skills table has one row per worker: docs/scale.md, memory laws)
    pattern, n_bits, mask_of = _missing_patterns(df, cols)  # 0: none of cols missing
    rows = pattern != 0
    if mask is not None:
        rows &= mask
    if not rows.any():
        return df
    reasons = df[MISSING_REASON].array
    prev_texts, prev_rank = _by_first_use(np.asarray(reasons.codes), list(reasons.categories))  # null: −1
    width = n_bits + (len(prev_texts) + 1).bit_length()  # (previous text, pattern) as one key: both orders kept
    kind = np.int32 if width < 31 else np.int64
    key = prev_rank.astype(kind)
    np.add(key, 1, out=key)
    np.left_shift(key, n_bits, out=key)
    np.bitwise_or(key, pattern.astype(kind, copy=False), out=key)
    keys, new_code = _distinct_keys(key[rows], width)
    texts = list(prev_texts)
    names = np.asarray(cols, dtype=object)
    for k in keys.tolist():
        p, q = k >> n_bits, k & ((1 << n_bits) - 1)
        clause = ",".join(names[mask_of(q)]) + ": " + reason
        prev = texts[p - 1] if p else ""
        texts.append(f"{prev}; {clause}" if prev else clause)
    codes = prev_rank.astype(_code_dtype(len(texts)))
    codes[rows] = new_code.astype(codes.dtype) + len(prev_texts)
    df[MISSING_REASON] = reason_column(texts, codes, df.index)
    return df


#: columns whose missing-mask is packed into one integer's bits (with the previous text's rank above them)
_PATTERN_BITS = 48


def _missing_patterns(df: pd.DataFrame, cols: list[str]) -> tuple[np.ndarray, int, Callable[[int], np.ndarray]]:
    """Per row, which of ``cols`` are missing, as one integer code that sorts as the rows' missing-masks do
    lexicographically (0: none missing); the codes' bit width; the mask of a code.

    Up to :data:`_PATTERN_BITS` columns the code is the mask's bits (column j at bit len(cols) − 1 − j), in the
    smallest unsigned type: one byte a row for a skills table, no 2-D mask. A wider table (a row per component)
    ranks its distinct masks instead.
    """
    n = len(cols)
    if n <= _PATTERN_BITS:
        kind = np.uint8 if n <= 8 else np.uint16 if n <= 16 else np.uint32 if n <= 32 else np.uint64
        pattern = np.zeros(len(df), dtype=kind)
        for j, c in enumerate(cols):
            bit = pd.isna(df[c]).to_numpy().astype(kind)
            np.left_shift(bit, kind(n - 1 - j), out=bit)
            np.bitwise_or(pattern, bit, out=pattern)

        def bits(q: int) -> np.ndarray:
            return np.array([(q >> (n - 1 - j)) & 1 == 1 for j in range(n)], dtype=bool)

        return pattern.astype(np.int64) if n > 32 else pattern, n, bits
    isna = np.column_stack([pd.isna(df[c]).to_numpy() for c in cols])
    masks, inv = np.unique(isna, axis=0, return_inverse=True)  # lexicographic: the all-False mask first if present
    offset = 0 if not masks[0].any() else 1
    masks = masks if offset == 0 else np.vstack([np.zeros((1, n), dtype=bool), masks])
    return inv.ravel().astype(np.int64) + offset, len(masks).bit_length(), lambda q: masks[q]


#: keys below this many are looked up in a table, not sorted
_KEY_TABLE = 1 << 20


def _distinct_keys(key: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values of ``key`` (non-negative, below 2**width) and each one's rank in them, in the
    smallest integer type (a presence table when the keys are few bits, else a sort)."""
    if width <= _KEY_TABLE.bit_length() - 1:
        seen = np.zeros(1 << width, dtype=bool)
        seen[key] = True
        keys = np.flatnonzero(seen)
        rank = np.zeros(seen.size, dtype=_code_dtype(keys.size))
        rank[keys] = np.arange(keys.size)
        return keys, rank[key]
    keys = np.unique(key)
    return keys, np.searchsorted(keys, key).astype(_code_dtype(keys.size))


def _code_dtype(n: int) -> type[np.signedinteger]:
    """The smallest signed integer type that holds the codes −1 … n − 1."""
    return np.int8 if n < 2**7 else np.int16 if n < 2**15 else np.int32 if n < 2**31 else np.int64


def _by_first_use(codes: np.ndarray, categories: list[object]) -> tuple[list[str], np.ndarray]:
    """The texts the rows use, in the order of their first row, and every row's rank in that list (−1: null), in
    the codes' own small integer type (``pandas.factorize`` of the column, without its 8-byte code a row)."""
    first = []
    for c in range(len(categories)):
        hit = codes == c
        if hit.any():
            first.append((int(hit.argmax()), c))
    first.sort()
    rank = np.full(len(categories) + 1, -1, dtype=_code_dtype(len(categories)))  # [-1]: null stays −1
    for r, (_, c) in enumerate(first):
        rank[c] = r
    return [str(categories[c]) for _, c in first], rank[codes]


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
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        codes = codes.astype(np.int64)
    which, distinct = pd.factorize(pd.Index(list(texts), dtype="str"))  # first-use order; equal texts merged
    # every per-row array in the codes' smallest type (a code a row, no 8-byte integer: docs/scale.md, memory laws)
    kind = _code_dtype(max(len(texts), len(distinct)))
    to_text = np.append(np.asarray(which, dtype=kind), kind(-1))  # [-1]: null stays null
    rows = to_text[codes]
    present = np.zeros(len(distinct) + 1, dtype=bool)  # [-1]: null
    if len(distinct) <= 64:  # a few texts: one byte-mask pass each, no sort
        for t in range(len(distinct)):
            present[t] = bool((rows == t).any())
    else:
        present[np.unique(rows)] = True
        present[-1] = False
    used = np.flatnonzero(present)  # unused texts dropped, keeping the categories text even when none is used
    remap = np.full(len(distinct) + 1, -1, dtype=_code_dtype(used.size))
    remap[used] = np.arange(used.size)
    dtype = pd.CategoricalDtype(pd.Index(np.asarray(distinct, dtype=object)[used], dtype="str"))
    return pd.Series(pd.Categorical.from_codes(remap[rows], dtype=dtype), index=index, name=MISSING_REASON)


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
