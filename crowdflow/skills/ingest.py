"""The one read of a labels file as codes: contract on the dictionaries, buckets from the distinct tasks (issue #36).

:func:`read_coded` is what a partitioned skills run does with each input file where a worker reads it
(:func:`crowdflow.skills.pieces.read_and_keep`), without a Python object or a pandas string a row:

1. the Parquet file is read with the worker and label columns dictionary-encoded (as the file stores them) and the
   task column dictionary-encoded by Arrow (one hash a row);
2. the contract's value rules (:func:`crowdflow.storage.io.coerce_columns`: ids as text, blanks stripped, blank text
   missing, labels' numbers written one way) run on each column's **distinct values** and are mapped back to the
   rows by their codes (values the rule makes equal share a code; a value it makes missing drops its rows, as
   before); a rule that refuses a value sends the file through the row-by-row reader, whose error names the row;
3. the run's check (Great Expectations, :func:`schemas.validation.validate_loaded`) gets the columns as pandas
   categoricals built from those codes;
4. each distinct task is hashed once (:func:`crowdflow.skills.coded.text_hashes`: ``pandas.util.hash_array``'s
   64-bit hash of the text, so a task lands in the bucket it landed in before, from every file), the rows are
   ordered by bucket with a counting sort (stable: a bucket's rows keep the file's order), and each bucket's piece
   gets its own small dictionaries (:class:`crowdflow.skills.buckets.CodedPiece`: three int32 codes and an int64 row
   number a label, plus the piece's distinct texts).

A file whose columns are not text or integers (float ids, nested values), or that the header rules refuse, is read
by the row-by-row reader (:func:`crowdflow.storage.datasets.read_partition` and
:func:`crowdflow.skills.buckets.bucket_order`); both give the same pieces (``tests/skills/test_ingest.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.contracts.errors import InputError
from crowdflow.contracts.tables import TableSchema
from crowdflow.skills.buckets import CodedPiece, SplitSummary
from crowdflow.skills.coded import counting_order, local_codes, may_strip, text_hashes
from crowdflow.storage.datasets import Partition, partition_bytes
from crowdflow.storage.io import LoadedTable, canonical_names, coerce_columns

log = logging.getLogger(__name__)

__all__ = ["CodedColumn", "CodedFile", "coded_file", "read_coded"]

_ID_COLUMNS = ("task", "worker", "label")


@dataclass(frozen=True)
class CodedColumn:
    """One column as codes: ``codes`` (int32 a row, -1 where missing) into ``values`` (Arrow strings, distinct)."""

    codes: np.ndarray
    values: Any

    def categorical(self, index: pd.Index) -> pd.Series:
        """The column as a pandas categorical (the form Great Expectations gets), built from the codes: the
        categories are the Arrow values without a copy (``str`` dtype, as Arrow's own conversion gives them); they
        are distinct by construction, so pandas' check of that (a hash of every category) is skipped where pandas
        offers it."""
        categories = pd.Index(self.values.to_pandas())
        fast = getattr(pd.CategoricalDtype, "_from_fastpath", None)
        dtype = fast(categories, False) if fast is not None else pd.CategoricalDtype(categories)
        return pd.Series(pd.Categorical.from_codes(self.codes, dtype=dtype), index=index)


@dataclass(frozen=True)
class CodedFile:
    """A labels file as codes: its columns, rows and the pieces of each task bucket (None where empty)."""

    columns: dict[str, CodedColumn]
    n_rows: int
    summary: SplitSummary
    pieces: list[CodedPiece | None]


def _chunked_dictionary_codes(column: Any) -> tuple[np.ndarray, Any] | None:
    """Codes and distinct values of a dictionary-encoded Arrow column read in chunks (a Parquet file's row groups, each
    with its own dictionary): the chunks' dictionaries laid end to end (a chunk that repeats the previous one's
    dictionary, as a row group's batches do, adds nothing) and encoded once, each row's code read through that map.
    The values in the order of their first appearance in the dictionaries, as Arrow's unification of the chunks gives
    them, and distinct by construction (a repeated value maps to one code). None for a dictionary holding a missing
    value (:func:`_column_codes` encodes the rows again).

    Issue #36: the unification of ``combine_chunks`` and the check that its dictionary is distinct hashed every id of
    the file's dictionaries twice (≈ 60 ms a 10⁶-label file with 1.3·10⁵ distinct workers; ≈ 19 ms this way)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    dictionaries: list[Any] = []
    offsets: list[int] = []
    total = 0
    for chunk in column.chunks:
        d = chunk.dictionary
        if d.null_count:
            return None
        if dictionaries and len(d) == len(dictionaries[-1]) and d.equals(dictionaries[-1]):
            offsets.append(offsets[-1])
            continue
        offsets.append(total)
        dictionaries.append(d)
        total += len(d)
    enc = pc.dictionary_encode(pa.concat_arrays(dictionaries))
    remap = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int32)
    parts = []
    for chunk, offset in zip(column.chunks, offsets, strict=True):
        at = np.asarray(chunk.indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
        if not remap.size:  # no value at all: every row is missing
            parts.append(np.full(at.size, -1, dtype=np.int32))
        elif chunk.indices.null_count:
            parts.append(np.where(at >= 0, remap[offset + np.maximum(at, 0)], -1).astype(np.int32))
        else:
            parts.append(remap[offset + at])
    return np.concatenate(parts), enc.dictionary


def _column_codes(column: Any) -> tuple[np.ndarray, Any]:
    """Codes (int32, -1 null) and distinct values of an Arrow column (dictionary-encoded or not)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray) and column.num_chunks and pa.types.is_dictionary(column.type):
        got = _chunked_dictionary_codes(column)
        if got is not None:
            return got
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_dictionary(column.type):  # a file's own dictionary: distinct and without nulls, or encoded again
        values = column.dictionary
        if values.null_count or pc.count_distinct(values).as_py() != len(values):
            column = pc.dictionary_encode(column.cast(values.type))
    else:
        column = pc.dictionary_encode(column)
    indices = column.indices
    codes = np.asarray(indices.to_numpy(zero_copy_only=False) if indices.null_count == 0 else indices.fill_null(-1))
    return codes.astype(np.int32, copy=False), column.dictionary


def _ruled(name: str, codes: np.ndarray, values: Any, schema: TableSchema, where: str) -> CodedColumn:
    """The contract's value rules on a column's distinct values, mapped back to the rows' codes."""
    import pyarrow as pa

    col = schema.column(name)
    text = pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
    if text and not col.numbers_as_one and not may_strip(values):
        return CodedColumn(codes, values.cast(pa.string()))  # the rule leaves every value as it is
    frame = pa.table({name: values}).to_pandas()
    ruled = coerce_columns(frame, schema, where)[name]
    remap, uniques = pd.factorize(ruled, use_na_sentinel=True)
    remap = np.asarray(remap, dtype=np.int32)
    out = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1).astype(np.int32) if len(remap) else codes
    return CodedColumn(out, pa.array(np.asarray(uniques, dtype=object), pa.string()))


def coded_file(
    table: Any, partition: int, n_buckets: int, schema: TableSchema, where: str, sha256: str = ""
) -> CodedFile:
    """A file's canonical columns (an Arrow table of ``task, worker, label``) as codes and bucket pieces."""
    import pyarrow as pa

    n_rows = int(table.num_rows)
    cols: dict[str, CodedColumn] = {}
    for name in _ID_COLUMNS:
        codes, values = _column_codes(table.column(name))
        cols[name] = _ruled(name, codes, values, schema, where)
    keep = (cols["task"].codes >= 0) & (cols["worker"].codes >= 0) & (cols["label"].codes >= 0)
    kept = np.flatnonzero(keep) if not keep.all() else np.arange(n_rows)
    task = cols["task"]
    bucket_of_task = (text_hashes(task.values) % np.uint64(n_buckets)).astype(np.int64)
    order, bounds = counting_order(bucket_of_task[task.codes[kept]].astype(np.int32), n_buckets)
    rows = kept[order].astype(np.int32 if n_rows < 2**31 - 1 else np.int64)
    local: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for name in _ID_COLUMNS:
        c = cols[name]
        local[name] = local_codes(c.codes[rows], bounds, len(c.values))
    pieces: list[CodedPiece | None] = [None] * n_buckets
    for b in range(n_buckets):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        if hi == lo:
            continue
        parts: dict[str, Any] = {}
        for name in _ID_COLUMNS:
            loc, used, ub = local[name]
            parts[name + "s"] = cols[name].values.take(pa.array(used[ub[b] : ub[b + 1]]))
            parts[name + "_idx"] = loc[lo:hi].copy()
        pieces[b] = CodedPiece(partition=partition, rows=rows[lo:hi] + 1, **parts)
    summary = SplitSummary(
        partition=partition,
        n_rows=n_rows,
        n_dropped_null=n_rows - int(kept.size),
        workers=_used(cols["worker"], local["worker"][1]),
        labels=_used(cols["label"], local["label"][1]),
        sha256=sha256,
    )
    return CodedFile(cols, n_rows, summary, pieces)


def _used(col: CodedColumn, used: np.ndarray) -> Any:
    """The distinct values the kept rows use (``used``: the codes each bucket uses), in dictionary order."""
    import pyarrow as pa

    seen = np.zeros(len(col.values), dtype=bool)
    seen[used] = True
    return col.values.take(pa.array(np.flatnonzero(seen))) if not seen.all() else col.values


def _arrow_columns(raw: Any, schema: TableSchema, columns: Mapping[str, str] | None, where: str) -> Any:
    """The file's ``task, worker, label`` as an Arrow table (worker and label read dictionary-encoded), or None when
    a column is not text or integers or the header rules refuse it (the row-by-row reader then says why)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        file_schema = pq.read_schema(pa.BufferReader(raw))
        names = list(file_schema.names)
        source, _ = canonical_names(names, schema, columns, where)
    except (InputError, pa.ArrowException, OSError):
        return None
    if any(c not in source for c in _ID_COLUMNS) or len(set(source.values())) != len(source):
        return None
    kinds = {c: file_schema.field(source[c]).type for c in _ID_COLUMNS}
    if not all(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t) for t in kinds.values()):
        return None
    wanted = [source[c] for c in _ID_COLUMNS]
    dictionary = [source[c] for c in ("worker", "label") if not pa.types.is_integer(kinds[c])]
    try:
        table = pq.read_table(pa.BufferReader(raw), columns=wanted, read_dictionary=dictionary)
    except (pa.ArrowException, OSError):
        return None
    return table.rename_columns(list(_ID_COLUMNS))


def read_coded(
    part: Partition,
    schema: TableSchema,
    n_buckets: int,
    columns: Mapping[str, str] | None = None,
    check: Callable[[LoadedTable], Any] | None = None,
) -> tuple[CodedFile, Any, str] | None:
    """One labels file read as codes (module docstring), its check run, its bucket pieces; None when the file must
    go through the row-by-row reader. Returns the coded file, what ``check`` returned and the file's SHA-256."""
    import pyarrow as pa

    raw, digest = partition_bytes(part)
    table = _arrow_columns(raw, schema, columns, part.name)
    del raw
    if table is None:
        return None
    try:
        coded = coded_file(table, part.index, n_buckets, schema, part.name, digest)
    except (InputError, pa.ArrowException):
        return None  # a value the rules refuse: the row reader names its row
    found = None
    if check is not None:
        index = pd.RangeIndex(coded.n_rows)
        df = pd.DataFrame({c: coded.columns[c].categorical(index) for c in _ID_COLUMNS}, index=index)
        found = check(LoadedTable(df=df, source=part.name, sha256=digest, format="parquet"))
    return coded, found, digest
