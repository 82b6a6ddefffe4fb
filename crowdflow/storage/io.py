"""Reading input tables: files, folders and database queries.

Readers accept CSV/TSV files, Parquet files and Parquet folders (``pyarrow.dataset``), map the user's
column names onto the canonical ones of a table contract (``crowdflow.contracts.tables``), accept Crowd-Kit's
names as they are, keep ids as strings and coerce typed columns, raising :class:`InputError` that names
the file, the column and example rows. Each file is read from disk once: its bytes are hashed and
parsed from the same buffer.

Writing runs (and finding completed ones) is :mod:`crowdflow.storage.run_store`.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import logging
import os
import stat
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from crowdflow.contracts.comparisons import TIE_WORDS, id_text, rename_comparison_aliases, winner_outcomes
from crowdflow.contracts.errors import InputError, MissingColumn
from crowdflow.contracts.tables import TableSchema
from crowdflow.labels import canonical_label_text
from crowdflow.storage.listing import list_partitions, local_path

log = logging.getLogger(__name__)

Format = Literal["auto", "csv", "parquet"]
_CSV_SUFFIXES = {".csv", ".tsv", ".txt"}
_PARQUET_SUFFIXES = {".parquet", ".pq", ".parq"}


@dataclass(frozen=True)
class LoadedTable:
    """A table read from one source, in canonical columns.

    Attributes
    ----------
    df : pandas.DataFrame
        Canonical columns; RangeIndex = 0-based data row position (row number in messages = index + 1).
    source : str
        The path it came from.
    sha256 : str
        Content fingerprint (file bytes; for a folder, a hash over its Parquet files' names and hashes).
    format : str
        ``csv`` or ``parquet`` (a database kind for a query, ``dataframe`` for :func:`read_frame`).
    renamed : dict
        Input column → canonical column for every renamed column.
    query : dict, optional
        For a table fetched from a database: ``sql`` and ``params`` (``source`` is then the connection
        URL, ``format`` the database kind and ``sha256`` a fingerprint of the fetched Arrow table).
    """

    df: pd.DataFrame
    source: str
    sha256: str
    format: str
    renamed: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] | None = None

    @property
    def n_rows(self) -> int:
        return len(self.df)


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file, or of a folder's Parquet files as listed (:mod:`crowdflow.storage.listing`): each file's
    path relative to the folder and its content hash, in order."""
    p = Path(path)
    if p.is_dir():
        h = hashlib.sha256()
        for part in list_partitions(p):
            h.update(part.rel.encode())
            h.update(_hash_file(Path(part.path)).encode())
        return h.hexdigest()
    return _hash_file(p)


def _detect_format(p: Path, fmt: Format) -> str:
    if fmt != "auto":
        return fmt
    if p.is_dir():
        return "parquet"
    suffix = p.suffix.lower()
    if suffix in _CSV_SUFFIXES:
        return "csv"
    if suffix in _PARQUET_SUFFIXES:
        return "parquet"
    raise InputError(
        f"cannot tell the format from the suffix '{suffix}'; use .csv/.tsv/.parquet or set format: csv|parquet",
        path=str(p),
    )


def _read_csv(p: Path) -> tuple[pd.DataFrame, str]:
    raw = p.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if not raw.strip():
        raise InputError("file is empty (no header, no rows)", path=str(p))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}, line {line}); "
            "re-encode the file as UTF-8",
            path=str(p),
        ) from None
    # every byte-order mark before the header is removed (utf-8-sig removes one; an export that re-encodes a
    # file already carrying one leaves two, and the second would become part of the first column's name)
    extra_boms = len(text) - len(text.lstrip("\ufeff"))
    if extra_boms:
        log.warning("%s starts with %d more byte-order mark(s) after the first; removed", p, extra_boms)
        text = text.lstrip("\ufeff")
    sep = "\t" if p.suffix.lower() == ".tsv" else ","
    try:
        with warnings.catch_warnings():
            # a row longer than the header must fail, not silently become an index or lose data
            warnings.simplefilter("error", pd.errors.ParserWarning)
            df = pd.read_csv(
                io.StringIO(text),
                sep=sep,
                dtype=str,
                keep_default_na=False,
                na_values=[""],
                quoting=csv.QUOTE_MINIMAL,
                index_col=False,
            )
    except pd.errors.ParserWarning as exc:
        raise InputError(f"cannot parse CSV: a row has more fields than the header ({exc})", path=str(p)) from None
    except pd.errors.ParserError as exc:
        raise InputError(f"cannot parse CSV: {exc}", path=str(p)) from None
    except pd.errors.EmptyDataError:
        raise InputError("file is empty (no header, no rows)", path=str(p)) from None
    try:
        header = next(csv.reader(io.StringIO(text, newline=""), delimiter=sep), [])
    except csv.Error:  # pandas parsed it; the csv module's stricter reader is only asked for the names
        header = [str(c) for c in df.columns]
    _check_header([h.strip() for h in header], str(p))
    return df, digest


def _check_header(names: list[str], path: str) -> None:
    """A column named twice is refused (pandas and Arrow would silently keep one of them)."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names, start=1):
        if name in seen:
            raise InputError(
                f"the header names column '{name}' twice (columns {seen[name]} and {i}); rename one of them",
                path=path,
                column=name,
            )
        seen[name] = i


def _repeated_header_rows(df: pd.DataFrame, path: str) -> None:
    """A data row that repeats the header (two exports concatenated) is refused, never read as data."""
    names = [str(c) for c in df.columns]
    if not len(df) or not names:
        return
    same = np.ones(len(df), dtype=bool)
    for c in names:
        col = df[c]
        if col.dtype.kind in "fiub":  # a numeric column cannot hold its own name
            return
        same &= (col.astype("string").str.strip() == c).fillna(False).to_numpy(dtype=bool)
    if same.any():
        rows = (np.flatnonzero(same) + 1).tolist()
        raise InputError(
            f"{int(same.sum())} data row(s) repeat the header (were two exports concatenated?); remove them",
            path=path,
            rows=rows,
        )


def _read_parquet(p: Path) -> tuple[pd.DataFrame, str]:
    try:
        if p.is_dir():  # the files of the one dataset listing (links, loops, empty parts: listing.py)
            files = [part.path for part in list_partitions(p)]
            if not files:
                raise InputError("no data rows: every Parquet file of this folder is empty", path=str(p))
            dataset = pads.dataset(files, format="parquet")
            _check_same_columns(((f.path, f.physical_schema.names) for f in dataset.get_fragments()), str(p))
            table = dataset.to_table()
            digest = fingerprint(p)
        else:
            raw = p.read_bytes()
            digest = hashlib.sha256(raw).hexdigest()
            table = pq.read_table(pa.BufferReader(raw))
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise InputError(f"cannot read Parquet: {exc}", path=str(p)) from None
    _check_header(list(table.column_names), str(p))
    return _arrow_to_frame(table), digest


def _check_same_columns(parts: Iterable[tuple[str, Sequence[str]]], where: str) -> None:
    """Every part of a Parquet dataset (local folder or URL) has the same column names, else one part's columns would
    be read as nulls in the others. ``parts`` are (part name, its column names) in listing order."""
    first: tuple[str, set[str]] | None = None
    for name, cols in parts:
        if first is None:
            first = (name, set(cols))
        elif set(cols) != first[1]:
            missing, extra = sorted(first[1] - set(cols)), sorted(set(cols) - first[1])
            raise InputError(
                f"the parts of this Parquet dataset disagree on their columns: {name} lacks {missing} and adds "
                f"{extra} compared with {first[0]}; give every part the same columns",
                path=where,
            )


def _arrow_to_frame(table: pa.Table) -> pd.DataFrame:
    # ids stay strings: dictionary/categorical columns are decoded, not kept as pandas categories
    df: pd.DataFrame = table.to_pandas(types_mapper=None, categories=None)
    for col in df.columns:
        if isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = df[col].astype(object)
    return df


def _mapping_hint(path: str) -> tuple[str, str, str]:
    """How a message names the column mapping: a DataFrame's (the Python API's ``columns=`` argument) or a file's
    (the spec's ``columns:``). Returns (where it was mapped, what holds the columns, how to map them)."""
    if path.endswith("DataFrame"):
        return "by columns=", "DataFrame", "columns={'task': 'your_name', ...}"
    return "in the spec", "file", "`columns:` in the spec"


def _apply_columns(
    df: pd.DataFrame, schema: TableSchema, columns: Mapping[str, str], path: str
) -> tuple[pd.DataFrame, dict[str, str]]:
    renamed: dict[str, str] = {}
    df.columns = [str(c).strip() for c in df.columns]
    for canonical, given in columns.items():
        if given not in df.columns:
            raise MissingColumn(
                f"column '{given}' (mapped to '{canonical}' {_mapping_hint(path)[0]}) not found; "
                f"the {_mapping_hint(path)[1]} has columns {list(df.columns)}",
                path=path,
                column=given,
            )
        renamed[given] = canonical
    for alias, canonical in schema.aliases.items():
        taken = canonical in df.columns or canonical in renamed.values()
        if not taken and alias in df.columns and alias not in renamed:
            renamed[alias] = canonical
    df = df.rename(columns=renamed)
    if schema.name == "comparisons" and "outcome" not in df.columns:
        named = rename_comparison_aliases(df)  # the one comparison reader: Crowd-Kit's label is the winner
        if "winner" in named.columns and {"item_a", "item_b"} <= set(df.columns):
            source = "winner" if "winner" in df.columns else "label"
            outcome, bad = winner_outcomes(df["item_a"], df["item_b"], df[source])
            bad &= df[source].notna().to_numpy()  # a missing winner is the missing outcome the contract reports
            if bad.any():
                raise InputError(
                    f"{int(bad.sum())} rows name a {source} that is neither item_a, item_b nor a tie ({TIE_WORDS})",
                    path=path,
                    column=source,
                    rows=(np.flatnonzero(bad) + 1).tolist(),
                )
            df["outcome"] = outcome
            renamed[source] = "outcome"
    missing = [c for c in schema.required if c not in df.columns]
    if missing:
        _where, what, how = _mapping_hint(path)
        raise MissingColumn(
            f"missing required column{'s' if len(missing) > 1 else ''} "
            + ", ".join(f"'{m}'" for m in missing)
            + f" for a {schema.name} table; the {what} has columns {list(df.columns)}"
            + f" (map yours with {how})",
            path=path,
            column=missing[0],
        )
    return df, renamed


def _coerce(df: pd.DataFrame, schema: TableSchema, path: str) -> pd.DataFrame:
    out: dict[str, pd.Series] = {}
    for col in schema.columns:
        if col.name not in df.columns:
            continue
        s = df[col.name]
        _reject_nested(s, col.name, path)
        if col.type in ("id", "string"):
            if s.dtype.kind == "f":  # float ids from Parquet: 3.0 -> "3" (refusing the ones float64 cannot hold)
                s = _float_ids(s, col.name, path)
            # the one id rule (also the winner column's): text, blanks stripped, only-blank text missing
            text = id_text(s)
            out[col.name] = canonical_label_text(text) if col.numbers_as_one else text
        elif col.type in ("float", "int"):
            if s.dtype.kind in "fiu":
                num = s.astype(np.float64)
            else:
                text = s.astype("string").str.strip()
                num = pd.to_numeric(text, errors="coerce").astype(np.float64)
                bad = num.isna() & text.notna() & ~text.str.lower().isin(["nan", ""])
                if bad.any():
                    rows = (np.flatnonzero(bad.to_numpy()) + 1).tolist()
                    examples = text[bad].head(3).tolist()
                    raise InputError(
                        f"{int(bad.sum())} values are not numbers, e.g. {examples}",
                        path=path,
                        column=col.name,
                        rows=rows,
                    )
            if col.type == "int":
                frac = num.notna() & (num != np.floor(num.fillna(0)))
                if frac.any():
                    rows = (np.flatnonzero(frac.to_numpy()) + 1).tolist()
                    shown = num[frac].head(3).tolist()
                    raise InputError(
                        f"{int(frac.sum())} values are not whole numbers (counts and caps are), e.g. {shown}",
                        path=path,
                        column=col.name,
                        rows=rows,
                    )
            out[col.name] = num
        elif col.type == "bool":
            out[col.name] = s.astype("boolean")
    keep = pd.DataFrame(out, index=df.index)
    if schema.extra_columns:  # e.g. feature columns of `agents`: numeric when every value parses
        for c in df.columns:
            if c in keep.columns:
                continue
            extra = df[c]
            if c == "x" and schema.name == "agents" and not _is_nested(extra).any():
                raise InputError(
                    "column 'x' is reserved for list-valued feature vectors (a Parquet list column); "
                    "rename this scalar feature column (e.g. x1)",
                    path=path,
                    column=c,
                )
            if extra.dtype.kind in "fiub" or _is_nested(extra).any():
                keep[c] = extra
                continue
            text = extra.astype("string").str.strip()
            num = pd.to_numeric(text, errors="coerce")
            bad = num.isna() & text.notna() & ~text.str.lower().isin(["nan", ""])
            if not bad.any():
                keep[c] = num.astype(np.float64)
            elif int(num.notna().sum()) <= int(bad.sum()):
                keep[c] = extra  # a text column (e.g. a name): kept as it is, never used as a feature
            else:  # mostly numbers with a few typos: never silently drop the column from the features
                rows = (np.flatnonzero(bad.to_numpy()) + 1).tolist()
                raise InputError(
                    f"{int(bad.sum())} values are not numbers in a numeric column, e.g. {text[bad].head(3).tolist()}",
                    path=path,
                    column=c,
                    rows=rows,
                )
    return keep.reset_index(drop=True)


_EXACT_INT = 2**53  # every whole float below this is exactly one integer


def _float_ids(s: pd.Series, name: str, path: str) -> pd.Series:
    """Float ids (a Parquet float column) as integers when every value is a whole number float64 holds exactly.

    ``3.0`` is the id ``3``; a non-finite value or one beyond 2**53 (where float64 no longer tells
    neighbouring integers apart, so two ids could merge) is refused, naming the rows; a column with
    fractional values keeps their shortest decimal text (``0.5``).
    """
    v = s.to_numpy(dtype=np.float64, na_value=np.nan)
    present = ~np.isnan(v)
    bad = present & ~(np.isfinite(v) & (np.abs(np.where(np.isfinite(v), v, 0.0)) < _EXACT_INT))
    if bad.any():
        raise InputError(
            f"{int(bad.sum())} float ids are infinite or too large to be exact (|id| >= 2**53), e.g. "
            f"{v[bad][:3].tolist()}; store ids as text or integers",
            path=path,
            column=name,
            rows=(np.flatnonzero(bad) + 1).tolist(),
        )
    if np.all(v[present] == np.floor(v[present])):
        return s.astype("Int64")
    return s


def _is_nested(s: pd.Series) -> pd.Series:
    """Which values are lists / arrays / mappings (Parquet list, struct or map columns)."""
    if s.dtype != object:
        return pd.Series(False, index=s.index)
    return s.map(lambda v: isinstance(v, (list, tuple, dict, np.ndarray)))


def _reject_nested(s: pd.Series, name: str, path: str) -> None:
    nested = _is_nested(s)
    if nested.any():
        rows = (np.flatnonzero(nested.to_numpy()) + 1).tolist()
        raise InputError(
            f"nested values (list/struct) where a scalar is expected, e.g. {s[nested].head(2).tolist()}; "
            "flatten the column",
            path=path,
            column=name,
            rows=rows,
        )


def _check_readable(p: Path) -> None:
    """The input is a regular file or a folder, refused up front otherwise (a FIFO would block forever)."""
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise InputError("file not found", path=str(p)) from None
    except OSError as exc:  # a symbolic link loop, a permission, a path through a file
        raise InputError(
            f"cannot open: {exc.strerror or exc}" + (" (a symbolic link loop)" if exc.errno == errno.ELOOP else ""),
            path=str(p),
        ) from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError(
            "not a regular file or folder (a FIFO, socket or device); crowdflow reads files and Parquet folders",
            path=str(p),
        )


def _canonical(
    df: pd.DataFrame, schema: TableSchema, columns: Mapping[str, str] | None, where: str, empty: str | None
) -> tuple[pd.DataFrame, dict[str, str]]:
    """The one set of rules every source goes through: column mapping and aliases, no empty table, coercion.

    Files (:func:`read_table`), query results (:func:`read_query`) and DataFrames (:func:`read_frame`) all
    reach the canonical columns of ``schema`` here, so a rule cannot differ between them.
    """
    df, renamed = _apply_columns(df, schema, columns or {}, where)
    if len(df) == 0 and empty is not None:  # None: one part of a dataset, which may hold no rows
        raise InputError(empty, path=where)
    return _coerce(df, schema, where), renamed


def canonical_names(
    names: list[str], schema: TableSchema, columns: Mapping[str, str] | None, where: str
) -> tuple[dict[str, str], dict[str, str]]:
    """The column rules of :func:`_canonical` on a header alone: canonical column → the source's column name, and
    the renamed columns (input → canonical). Raises as :func:`read_frame` does (a column named twice, a mapped
    column that is missing). For a reader that wants to apply the value rules to each column's distinct values
    only (:func:`coerce_columns`)."""
    stripped = [str(c).strip() for c in names]
    _check_header(stripped, where)
    out, renamed = _apply_columns(pd.DataFrame(columns=stripped), schema, dict(columns or {}), where)
    back = {renamed.get(c, c): names[i] for i, c in enumerate(stripped)}
    return {c: back[c] for c in out.columns if c in back}, renamed


def coerce_columns(df: pd.DataFrame, schema: TableSchema, where: str) -> pd.DataFrame:
    """The value rules of :func:`_canonical` (ids as text, blanks stripped, numbers parsed, labels' numbers written
    one way) on a frame already in canonical column names: elementwise, so they may run on a column's distinct
    values (a dictionary) and be mapped back to the rows; an error's rows are then positions in ``df``."""
    return _coerce(df, schema, where)


def frame_fingerprint(df: pd.DataFrame) -> str:
    """SHA-256 over a DataFrame's column names and values (row order included), for a table given in memory."""
    h = hashlib.sha256()
    h.update(json.dumps([str(c) for c in df.columns]).encode())
    if len(df.columns):
        try:
            hashed = pd.util.hash_pandas_object(df, index=False)
        except TypeError:  # unhashable cells (list-valued features): hash their text
            hashed = pd.util.hash_pandas_object(df.astype(str), index=False)
        h.update(hashed.to_numpy().tobytes())
    return h.hexdigest()


def read_frame(
    df: pd.DataFrame,
    schema: TableSchema,
    columns: Mapping[str, str] | None = None,
    source: str | None = None,
    fingerprint: bool = True,
    part: bool = False,
) -> LoadedTable:
    """A DataFrame in the canonical columns of ``schema``, by the rules a file goes through (:func:`read_table`).

    The same column mapping (``columns``, then the contract's aliases: Crowd-Kit's ``task, worker, label`` and
    ``worker, left, right, label`` included, a winner column turned into ``outcome``), the same refusal of an
    empty table and of a column named twice, and the same coercion (ids as text, ``3.0`` as ``3``, numbers
    parsed, whole numbers for counts, nested values refused). ``df`` itself is never modified.

    Parameters
    ----------
    df : pandas.DataFrame
    schema : TableSchema
        Contract of the table (``crowdflow.contracts.tables.INPUTS[kind]``).
    columns : mapping, optional
        Canonical column → the column's name in ``df`` (only where they differ).
    source : str, optional
        How messages name the table (default: ``"<kind> DataFrame"``).
    fingerprint : bool
        Hash the frame's content into ``sha256`` (a caller that hashed the bytes it parsed passes False;
        ``sha256`` is then empty).
    part : bool
        ``df`` is one file of a dataset (:func:`crowdflow.storage.datasets.read_partition`): zero rows are
        allowed there, as in the whole dataset read at once (an empty part adds no row).

    Returns
    -------
    LoadedTable
        ``format="dataframe"``, ``sha256`` = :func:`frame_fingerprint` of ``df``; ``df`` of the result has a
        RangeIndex (row number in messages = position + 1).

    Raises
    ------
    InputError
        Not a DataFrame, a missing or mis-mapped column, an empty table, values of the wrong type.
    """
    where = source or f"{schema.name} DataFrame"
    if not isinstance(df, pd.DataFrame):
        raise InputError(
            f"expected a pandas DataFrame for the {schema.name} table, got {type(df).__name__}", path=where
        )
    _check_header([str(c).strip() for c in df.columns], where)
    frame = df.copy(deep=False)  # the caller's frame keeps its column names
    frame.index = pd.RangeIndex(len(frame))
    empty = None if part else f"no rows in the {schema.name} table"
    out, renamed = _canonical(frame, schema, columns, where, empty)
    log.debug("read %s: %d rows", where, len(out))
    digest = frame_fingerprint(df) if fingerprint else ""
    return LoadedTable(df=out, source=where, sha256=digest, format="dataframe", renamed=renamed)


def read_table(
    path: str | os.PathLike[str],
    schema: TableSchema,
    columns: Mapping[str, str] | None = None,
    fmt: Format = "auto",
    storage_options: Mapping[str, Any] | None = None,
) -> LoadedTable:
    """Read a CSV/Parquet file or Parquet folder (a local path, or a remote fsspec URL) into the canonical columns.

    Parameters
    ----------
    path : str or PathLike
        A local path or ``file://`` URL; or a remote URL (``s3://…``) of a Parquet file or dataset, whose files
        are those of the one dataset listing (:func:`crowdflow.storage.listing.list_partitions`).
    schema : TableSchema
        Contract of the table (required columns, types, aliases).
    columns : mapping, optional
        Canonical column → the column's name in the file (from the spec's ``columns:``).
    fmt : {"auto", "csv", "parquet"}
    storage_options : mapping, optional
        Options of the fsspec file system of a remote URL.

    Returns
    -------
    LoadedTable

    Raises
    ------
    InputError
        Missing file or column, unreadable bytes, empty table, non-numeric values in numeric columns.
    """
    local = local_path(path)
    if local is None:
        return _read_remote(str(path), schema, columns, fmt, storage_options)
    p = local
    _check_readable(p)
    kind = _detect_format(p, fmt)
    df, digest = _read_csv(p) if kind == "csv" else _read_parquet(p)
    _repeated_header_rows(df, str(p))
    df, renamed = _canonical(df, schema, columns, str(p), f"no data rows (header only) in a {schema.name} table")
    log.info("read %s: %d rows (%s, sha256 %s)", p, len(df), kind, digest[:12])
    return LoadedTable(df=df, source=str(p), sha256=digest, format=kind, renamed=renamed)


def _read_remote(
    url: str,
    schema: TableSchema,
    columns: Mapping[str, str] | None,
    fmt: Format,
    storage_options: Mapping[str, Any] | None,
) -> LoadedTable:
    """A remote Parquet file or dataset read in this process: the listed files, each through fsspec."""
    import fsspec

    if fmt == "csv":
        raise InputError("a URL is read as a Parquet file or dataset; csv is for local files", path=url)
    parts = list_partitions(url, storage_options)
    if not parts:
        raise InputError("no data rows: every Parquet file of this dataset is empty", path=url)
    fs = fsspec.filesystem(parts[0].protocol, **dict(parts[0].storage_options))
    h = hashlib.sha256()
    pieces = []
    for part in parts:
        try:
            with fs.open(part.path, "rb") as fh:
                raw = fh.read()
            pieces.append(pq.read_table(pa.BufferReader(raw)))
        except (pa.ArrowException, OSError) as exc:
            raise InputError(f"cannot read Parquet: {exc}", path=part.name) from None
        h.update(part.rel.encode())
        h.update(hashlib.sha256(raw).hexdigest().encode())
    _check_same_columns(((part.name, t.column_names) for part, t in zip(parts, pieces, strict=True)), url)
    table = pa.concat_tables(pieces, promote_options="default")
    _check_header(list(table.column_names), url)
    df = _arrow_to_frame(table)
    df, renamed = _canonical(df, schema, columns, url, f"no data rows (header only) in a {schema.name} table")
    digest = h.hexdigest()
    log.info("read %s: %d rows (parquet, %d files, sha256 %s)", url, len(df), len(parts), digest[:12])
    return LoadedTable(df=df, source=url, sha256=digest, format="parquet", renamed=renamed)


def read_query(
    url: str,
    sql: str,
    schema: TableSchema,
    params: Mapping[str, Any] | list[Any] | None = None,
    columns: Mapping[str, str] | None = None,
    *,
    password: str | None = None,
    base_dir: str | os.PathLike[str] = ".",
) -> LoadedTable:
    """Run a query against DuckDB or PostgreSQL and read its result like a file (:func:`read_table`).

    The result goes through the same column mapping, aliases and type coercion as a file; errors name
    the connection (password redacted) and the query. Parameters are bound by the driver.

    Parameters
    ----------
    url : str
        ``duckdb:///file.duckdb`` or ``postgresql://user@host:port/db``, without a password.
    sql : str
        Query with ``:name`` (PostgreSQL) or ``$name`` / ``?`` (DuckDB) placeholders.
    schema : TableSchema
    params : mapping or list, optional
    columns : mapping, optional
        Canonical column → the column's name in the result.
    password : str, optional
        From the environment or a secret store, never from the spec.
    base_dir : path
        Folder a relative DuckDB file is resolved against.

    Returns
    -------
    LoadedTable
        ``source`` = the redacted URL, ``format`` = ``duckdb`` or ``postgresql``, ``sha256`` = content
        fingerprint of the fetched Arrow table, ``query`` = ``{"sql", "params"}``.
    """
    from crowdflow.storage.warehouse import check_connection_url, fetch_query, redact_url, table_fingerprint

    kind = check_connection_url(url)
    where = f"{redact_url(url)} (query of the {schema.name} source)"
    table = fetch_query(url, sql, params, password=password, base_dir=base_dir)
    digest = table_fingerprint(table)
    df, renamed = _canonical(
        _arrow_to_frame(table), schema, columns, where, f"the query returned no rows for a {schema.name} table"
    )
    log.info("fetched %s: %d rows (%s, fingerprint %s)", redact_url(url), len(df), kind, digest[:12])
    query = {"sql": sql, "params": params if params is not None else {}}
    return LoadedTable(df=df, source=redact_url(url), sha256=digest, format=kind, renamed=renamed, query=query)
