"""Reading input tables and writing run outputs.

Readers accept CSV/TSV files, Parquet files and Parquet folders (``pyarrow.dataset``), map the user's
column names onto the canonical ones of a table contract (``crowdflow.tables``), accept Crowd-Kit's
names as they are, keep ids as strings and coerce typed columns, raising :class:`InputError` that names
the file, the column and example rows. Each file is read from disk once: its bytes are hashed and
parsed from the same buffer.

Writers are atomic at the run level: every table of a run is written into a hidden staging folder
``<out>/<pipeline>/.<run_id>.partial`` (each file under a temporary name, then renamed), the manifest
last, and the folder is renamed to ``<out>/<pipeline>/<run_id>`` only when everything is written. A
failure removes the staging folder, so a failed run leaves no table behind and never a manifest
with ``status: completed``; earlier runs are never touched.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import logging
import os
import re
import shutil
import signal
import socket
import stat
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from crowdflow.comparisons import TIE, rename_comparison_aliases, winner_outcomes
from crowdflow.errors import InputError
from crowdflow.labels import canonical_label_text
from crowdflow.manifest import json_safe
from crowdflow.missing import with_reasons
from crowdflow.names import check_name
from crowdflow.tables import TableSchema

log = logging.getLogger(__name__)

Format = Literal["auto", "csv", "parquet"]
_CSV_SUFFIXES = {".csv", ".tsv", ".txt"}
_PARQUET_SUFFIXES = {".parquet", ".pq", ".parq"}
_RUN_DATE_RE = re.compile(r"^(\d{4})(\d{2})(\d{2})T")
RUN_ID_COLUMN = "run_id"


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
    """SHA-256 of a file, or of a folder's Parquet files (sorted relative names and their hashes)."""
    p = Path(path)
    if p.is_dir():
        h = hashlib.sha256()
        for f in sorted(p.rglob("*")):
            if f.is_file() and not f.name.startswith((".", "_")):
                h.update(str(f.relative_to(p)).encode())
                h.update(_hash_file(f).encode())
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
        if p.is_dir():
            dataset = pads.dataset(str(p), format="parquet")
            _check_parts(dataset, p)
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


def _check_parts(dataset: pads.FileSystemDataset, folder: Path) -> None:
    """Every part of a Parquet folder has the same column names (else one would be read as nulls)."""
    first: tuple[str, list[str]] | None = None
    for fragment in dataset.get_fragments():
        names = list(fragment.physical_schema.names)
        if first is None:
            first = (fragment.path, names)
        elif set(names) != set(first[1]):
            missing = sorted(set(first[1]) - set(names))
            extra = sorted(set(names) - set(first[1]))
            raise InputError(
                f"the parts of this Parquet folder disagree on their columns: {fragment.path} "
                f"lacks {missing} and adds {extra} compared with {first[0]}; give every part the same columns",
                path=str(folder),
            )


def _arrow_to_frame(table: pa.Table) -> pd.DataFrame:
    # ids stay strings: dictionary/categorical columns are decoded, not kept as pandas categories
    df: pd.DataFrame = table.to_pandas(types_mapper=None, categories=None)
    for col in df.columns:
        if isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = df[col].astype(object)
    return df


def _apply_columns(
    df: pd.DataFrame, schema: TableSchema, columns: Mapping[str, str], path: str
) -> tuple[pd.DataFrame, dict[str, str]]:
    renamed: dict[str, str] = {}
    df.columns = [str(c).strip() for c in df.columns]
    for canonical, given in columns.items():
        if given not in df.columns:
            raise InputError(
                f"column '{given}' (mapped to '{canonical}' in the spec) not found; "
                f"the file has columns {list(df.columns)}",
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
                    f"{int(bad.sum())} rows name a {source} that is neither item_a, item_b nor '{TIE}'",
                    path=path,
                    column=source,
                    rows=(np.flatnonzero(bad) + 1).tolist(),
                )
            df["outcome"] = outcome
            renamed[source] = "outcome"
    missing = [c for c in schema.required if c not in df.columns]
    if missing:
        raise InputError(
            f"missing required column{'s' if len(missing) > 1 else ''} "
            + ", ".join(f"'{m}'" for m in missing)
            + f" for a {schema.name} table; the file has columns {list(df.columns)}"
            + " (map yours with `columns:` in the spec)",
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
            if s.dtype.kind == "f":  # float ids from Parquet: 3.0 -> "3"
                s = _float_ids(s, col.name, path)
            text = s.astype("string").str.strip()
            # an id (or label) that is only whitespace is missing, not the id '' shared by every such row
            text = text.mask(text == "")
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
    df: pd.DataFrame, schema: TableSchema, columns: Mapping[str, str] | None, where: str, empty: str
) -> tuple[pd.DataFrame, dict[str, str]]:
    """The one set of rules every source goes through: column mapping and aliases, no empty table, coercion.

    Files (:func:`read_table`), query results (:func:`read_query`) and DataFrames (:func:`read_frame`) all
    reach the canonical columns of ``schema`` here, so a rule cannot differ between them.
    """
    df, renamed = _apply_columns(df, schema, columns or {}, where)
    if len(df) == 0:
        raise InputError(empty, path=where)
    return _coerce(df, schema, where), renamed


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
        Contract of the table (``crowdflow.tables.INPUTS[kind]``).
    columns : mapping, optional
        Canonical column → the column's name in ``df`` (only where they differ).
    source : str, optional
        How messages name the table (default: ``"<kind> DataFrame"``).

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
    out, renamed = _canonical(frame, schema, columns, where, f"no rows in the {schema.name} table")
    log.debug("read %s: %d rows", where, len(out))
    return LoadedTable(df=out, source=where, sha256=frame_fingerprint(df), format="dataframe", renamed=renamed)


def read_table(
    path: str | os.PathLike[str],
    schema: TableSchema,
    columns: Mapping[str, str] | None = None,
    fmt: Format = "auto",
) -> LoadedTable:
    """Read a CSV/Parquet file or Parquet folder into the canonical columns of ``schema``.

    Parameters
    ----------
    path : str or PathLike
    schema : TableSchema
        Contract of the table (required columns, types, aliases).
    columns : mapping, optional
        Canonical column → the column's name in the file (from the spec's ``columns:``).
    fmt : {"auto", "csv", "parquet"}

    Returns
    -------
    LoadedTable

    Raises
    ------
    InputError
        Missing file or column, unreadable bytes, empty table, non-numeric values in numeric columns.
    """
    p = Path(path)
    _check_readable(p)
    kind = _detect_format(p, fmt)
    df, digest = _read_csv(p) if kind == "csv" else _read_parquet(p)
    _repeated_header_rows(df, str(p))
    df, renamed = _canonical(df, schema, columns, str(p), f"no data rows (header only) in a {schema.name} table")
    log.info("read %s: %d rows (%s, sha256 %s)", p, len(df), kind, digest[:12])
    return LoadedTable(df=df, source=str(p), sha256=digest, format=kind, renamed=renamed)


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
    from crowdflow.warehouse import check_connection_url, fetch_query, redact_url, table_fingerprint

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


_OWNER = ".owner"
TEST_PAUSE_ENV = "CROWDFLOW_TEST_PAUSE_EXPORT"
TEST_KILL_ENV = "CROWDFLOW_TEST_KILL_AT_STEP"


class _ExportSteps:
    """TEST-ONLY fault hooks at each file-system step of an export, inert unless an environment variable is set.

    - ``CROWDFLOW_TEST_PAUSE_EXPORT=<file>`` (tests/test_faults.py): after the first table the writer writes
      the staging folder's path into ``<file>`` and waits until the file is deleted, so a test can kill the
      whole command at that point.
    - ``CROWDFLOW_TEST_KILL_AT_STEP=<k>``: the process SIGKILLs itself right after its k-th step (1-based),
      so a test can crash a writer at every step and check what a reader sees and what the next run repairs.
    """

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.count = 0
        self.pause = os.environ.get(TEST_PAUSE_ENV)
        kill = os.environ.get(TEST_KILL_ENV)
        self.kill_at = int(kill) if kill else None

    def done(self, label: str) -> None:
        self.count += 1
        if self.kill_at is not None and self.count == self.kill_at:
            log.warning("test hook: killing the writer after step %d (%s)", self.count, label)
            os.kill(os.getpid(), signal.SIGKILL)
        if self.pause and label.startswith("table"):
            marker = Path(self.pause)
            if marker.exists():  # already paused once in this run: don't stop again
                return
            marker.write_text(str(self.staging))
            while marker.exists():
                time.sleep(0.05)
            marker.write_text("resumed")
            self.pause = None


def remove_stale_staging(base: Path) -> list[Path]:
    """Remove staging folders ``.<run_id>.partial`` left by a killed writer on this machine.

    A staging folder is stale when the process that created it (``.owner``: host and pid) is no
    longer alive on this host. Folders of live writers, of other hosts (a shared file system) or
    without an owner file are left alone; readers ignore staging folders anyway (:func:`latest_run`).
    Returns the removed folders.
    """
    removed: list[Path] = []
    host = socket.gethostname()
    for d in base.glob(".*.partial"):
        try:
            owner_host, pid = (d / _OWNER).read_text().split()
            if owner_host != host or int(pid) == os.getpid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
            log.warning("removed the staging folder %s of a killed run (pid %s)", d, pid)
        except (OSError, ValueError):
            continue
    return removed


@dataclass(frozen=True)
class WrittenRun:
    """Where a completed run landed."""

    path: Path
    outputs: dict[str, dict[str, Any]]


def _fsync_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _to_arrow(df: pd.DataFrame, schema: pa.Schema | None, run_id: str | None = None) -> pa.Table:
    table = pa.Table.from_pandas(df, preserve_index=False)
    if schema is not None:
        table = table.select(schema.names).cast(schema)
    if run_id is not None and RUN_ID_COLUMN not in table.column_names:
        table = table.append_column(RUN_ID_COLUMN, pa.array([run_id] * table.num_rows, type=pa.string()))
    return table


def written_frame(df: pd.DataFrame, schema: pa.Schema | None = None) -> pd.DataFrame:
    """``df`` as a reader of the Parquet file :func:`write_parquet` writes gets it back.

    Cast to ``schema`` the way the writer does (exactly its columns, in order, with its types), or converted
    through Arrow as it is without one; the index becomes a RangeIndex.
    """
    out: pd.DataFrame = _to_arrow(df, schema).to_pandas()
    return out


def write_parquet(df: pd.DataFrame, path: Path, schema: pa.Schema | None = None) -> int:
    """Write one table atomically (temp name + rename); returns its row count."""
    table = _to_arrow(df, schema)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return int(table.num_rows)


def run_date_of(run_id: str) -> str:
    """``YYYY-MM-DD`` of a run: the UTC start date in a crowdflow run id, else today's UTC date."""
    m = _RUN_DATE_RE.match(run_id)
    if m:
        return f"{m[1]}-{m[2]}-{m[3]}"
    return datetime.now(UTC).date().isoformat()


def hive_part(out_dir: str | os.PathLike[str], table: str, pipeline: str, run_date: str, run_id: str) -> Path:
    """``<out>/<table>/pipeline=<pipeline>/run_date=<YYYY-MM-DD>/part-<run_id>.parquet``."""
    return Path(out_dir) / table / f"pipeline={pipeline}" / f"run_date={run_date}" / f"part-{run_id}.parquet"


def write_run(
    out_dir: str | os.PathLike[str],
    pipeline: str,
    run_id: str,
    tables: Mapping[str, pd.DataFrame],
    manifest: dict[str, Any],
    schemas: Mapping[str, pa.Schema] | None = None,
    extra_files: Mapping[str, bytes] | None = None,
    layout: Literal["flat", "hive"] = "flat",
    run_date: str | None = None,
) -> WrittenRun:
    """Write all tables of a run and its manifest, atomically, to ``<out>/<pipeline>/<run_id>/``.

    The manifest gets ``outputs`` (table → path relative to the run folder, rows) and ``status:
    completed``; it is the last file written, and the staging folder is renamed into place only after
    it. On any error the staging folder is removed and the exception propagates. Before anything is
    written the tables pass :func:`crowdflow.missing.with_reasons`: a NaN without a ``missing_reason`` or
    an infinity refuses the run, and every table with a float column gets its ``missing_reason`` column.

    With ``layout="hive"`` each table is written instead as one part of a hive-partitioned dataset,
    ``<out>/<table>/pipeline=<pipeline>/run_date=<date>/part-<run_id>.parquet`` with a ``run_id``
    column (DuckDB ``read_parquet(..., hive_partitioning=true)``, ``pyarrow.dataset(...,
    partitioning="hive")``, Spark and Trino read it directly); the run folder holds the manifest.
    Parts are written under hidden names (``.part-<run_id>.parquet.pending``, which those readers skip);
    the run folder with its completed manifest is renamed into place (the commit point), and only then are
    the parts renamed to their visible names. So a reader of a dataset never sees a part of a run whose
    manifest is not completed. A failure before the commit removes every part of the run; a process killed
    before it leaves hidden parts that the next hive export of the pipeline removes, and one killed after it
    leaves hidden parts that the next export publishes (:func:`recover_hive_parts`).

    Parameters
    ----------
    out_dir : path
    pipeline, run_id : str
        Validated with :func:`check_name`.
    tables : mapping of name → DataFrame
    manifest : dict
        JSON-serialisable run metadata (``run_id``, ``spec``, ``inputs``, ``metrics``…).
    schemas : mapping of name → pyarrow.Schema, optional
        Stable output schemas to cast to.
    extra_files : mapping of file name → bytes, optional
        Other files of the run (the report): written into the staging folder before the manifest and
        listed in its ``outputs`` under the file's stem (``path``, ``bytes``).
    layout : {"flat", "hive"}
    run_date : str, optional
        Hive partition date (default: :func:`run_date_of` the run id).

    Returns
    -------
    WrittenRun
    """
    check_name(pipeline, "pipeline name")
    check_name(run_id, "run id")
    if layout not in ("flat", "hive"):
        raise ValueError(f"layout must be flat or hive, got {layout!r}")
    tables = with_reasons(dict(tables))
    base = Path(out_dir) / pipeline
    final = base / run_id
    for folder in (Path(out_dir), base):
        if folder.exists() and not folder.is_dir():
            raise InputError("the output folder is a file; choose another output dir", path=str(folder))
    if final.exists():
        raise FileExistsError(f"run directory {final} already exists; run ids must be unique")
    parts: dict[str, Path] = {}
    if layout == "hive":
        if pipeline in tables:
            raise ValueError(
                f"pipeline name {pipeline!r} is also an output table name: with layout hive the table's "
                f"dataset folder {Path(out_dir) / pipeline} would hold the run folders; rename the pipeline"
            )
        date = run_date or run_date_of(run_id)
        for name in tables:
            check_name(name, "table name")
            parts[name] = hive_part(out_dir, name, pipeline, date, run_id)
            if parts[name].exists():
                raise FileExistsError(f"dataset part {parts[name]} already exists; run ids must be unique")
    staging = base / f".{run_id}.partial"
    base.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(base)
    if layout == "hive":
        recover_hive_parts(out_dir, pipeline)
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    steps = _ExportSteps(staging)
    try:
        (staging / _OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n")
        outputs: dict[str, dict[str, Any]] = {}
        for name, df in tables.items():
            check_name(name, "table name")
            schema = (schemas or {}).get(name)
            if layout == "flat":
                rows = write_parquet(df, staging / f"{name}.parquet", schema)
                outputs[name] = {"path": f"{name}.parquet", "rows": rows}
                steps.done(f"table {name}")
                continue
            part = parts[name]
            part.parent.mkdir(parents=True, exist_ok=True)
            table = _to_arrow(df, schema, run_id)
            pq.write_table(table, _pending(part))
            outputs[name] = {
                "path": os.path.relpath(part, final),
                "rows": table.num_rows,
                "dataset": os.path.relpath(Path(out_dir) / name, final),
                "partition": {"pipeline": pipeline, "run_date": part.parent.name.split("=", 1)[1]},
            }
            steps.done(f"table {name}")
        for fname, data in (extra_files or {}).items():
            check_name(fname, "file name")
            key = Path(fname).stem
            if key in outputs:
                raise ValueError(f"extra file {fname!r} clashes with the output table {key!r}")
            _fsync_write(staging / fname, data)
            outputs[key] = {"path": fname, "bytes": len(data)}
            steps.done(f"file {fname}")
        full = dict(manifest)
        full["outputs"] = outputs
        full["layout"] = layout
        full["status"] = "completed"
        full["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")  # the age a next batch checks
        text = json.dumps(json_safe(full), indent=2, default=str, allow_nan=False)  # strict JSON: no NaN
        _fsync_write(staging / "manifest.json", text.encode())
        steps.done("manifest")
        (staging / _OWNER).unlink()
        os.rename(staging, final)  # the commit point: from here on the run is completed
    except BaseException as exc:
        for part in parts.values():
            _pending(part).unlink(missing_ok=True)
            _remove_empty_dirs(part.parent, Path(out_dir))
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError) and exc.filename is None:  # e.g. ENOSPC from a writer: say where
            raise OSError(exc.errno, exc.strerror or str(exc), str(final)) from exc
        raise
    steps.done("commit")
    # hive parts become visible only now, after the manifest says completed: a reader of a dataset never
    # sees a part of an uncommitted run; a crash from here on is finished by the next run's recovery
    for name, part in parts.items():
        os.replace(_pending(part), part)
        steps.done(f"publish {name}")
    log.info("wrote run %s (%d tables, %s layout)", final, len(outputs), layout)
    return WrittenRun(path=final, outputs=outputs)


def _pending(part: Path) -> Path:
    """The hidden name a hive part has until its run commits (``.part-<run>.parquet.pending``).

    Hidden from every reader: pyarrow datasets skip names starting with ``.``, and globs such as DuckDB's
    ``**/*.parquet`` do not match the suffix.
    """
    return part.with_name(f".{part.name}.pending")


def recover_hive_parts(out_dir: str | os.PathLike[str], pipeline: str) -> tuple[list[Path], list[Path]]:
    """Finish or undo what a killed hive export of ``pipeline`` left in the datasets under ``out_dir``.

    A pending part ``<out>/<table>/pipeline=<pipeline>/run_date=<d>/.part-<run>.parquet.pending`` is
    published (renamed to its visible name) when its run folder ``<out>/<pipeline>/<run>`` exists with a
    completed manifest: the writer was killed after the commit point. It is removed when the run never
    committed and no live writer owns it (its staging folder is gone, or belongs to a dead process on this
    host); parts of a live writer's run are left alone. Leftover temporary files (``.*.tmp``) of dead
    writers go too, and folders left empty.

    Returns
    -------
    (published, removed) : lists of Path
    """
    out = Path(out_dir)
    base = out / pipeline
    published: list[Path] = []
    removed: list[Path] = []
    for pending in sorted(out.glob(f"*/pipeline={pipeline}/run_date=*/.part-*.parquet.pending")):
        run_id = pending.name[len(".part-") : -len(".parquet.pending")]
        if _run_completed(base / run_id):
            os.replace(pending, pending.with_name(pending.name[1 : -len(".pending")]))
            published.append(pending)
            log.warning("published %s of run %s, whose export was interrupted after it committed", pending, run_id)
        elif not (base / f".{run_id}.partial").exists():
            pending.unlink(missing_ok=True)
            _remove_empty_dirs(pending.parent, out)
            removed.append(pending)
            log.warning("removed %s: a part of run %s, which never committed", pending, run_id)
    return published, removed


def _run_completed(run_dir: Path) -> bool:
    try:
        return bool(json.loads((run_dir / "manifest.json").read_text()).get("status") == "completed")
    except (OSError, json.JSONDecodeError):
        return False


def _remove_empty_dirs(folder: Path, stop: Path) -> None:
    """Remove ``folder`` and its empty parents up to (not including) ``stop``."""
    try:
        while folder != stop and stop in folder.parents:
            folder.rmdir()
            folder = folder.parent
    except OSError:
        pass


def latest_run(path: str | os.PathLike[str]) -> Path:
    """The newest completed run under a pipeline folder (``<out>/<pipeline>``), or ``path`` itself.

    A run counts when its ``manifest.json`` says ``status: completed``; run ids start with their UTC
    start time, so the lexicographically last completed run is the newest. Raises :class:`InputError`
    when there is none.
    """
    p = Path(path)
    if (p / "manifest.json").is_file():
        runs = [p]
    else:
        runs = (
            sorted(
                d
                for d in p.iterdir()
                # staging folders (.<run_id>.partial) of unfinished or killed runs are never runs
                if d.is_dir() and not d.name.startswith(".") and (d / "manifest.json").is_file()
            )
            if p.is_dir()
            else []
        )
    for run in reversed(runs):
        try:
            if json.loads((run / "manifest.json").read_text()).get("status") == "completed":
                return run
        except (OSError, json.JSONDecodeError):
            continue
    raise InputError("no completed run (manifest.json with status completed) found", path=str(p))


def read_skills_run(
    path: str | os.PathLike[str], max_age_hours: float | None = None, *, now: datetime | None = None
) -> dict[str, Any]:
    """The newest completed skills run under ``path`` (or that run): its ``skills`` and ``consensus`` tables.

    Returns ``run_dir``, ``run_id``, ``started_at``, ``finished_at``, ``age_hours`` and the two tables. Refused
    with :class:`InputError` naming the path: no completed run, a run of another job, a table the manifest lists
    that is missing on disk, and, with ``max_age_hours``, a run that finished longer ago than that (the message
    names the run and its age: a late or failed skills run is never silently replaced by an old one).
    """
    run = latest_run(path)
    manifest = json.loads((run / "manifest.json").read_text())
    if manifest.get("job") != "skills":
        raise InputError(f"run {run.name} is a '{manifest.get('job')}' run, not a skills run", path=str(run))
    age = run_age_hours(manifest, now)
    if max_age_hours is not None and (age is None or age > max_age_hours):
        shown = "of unknown age (no finished_at/started_at in its manifest)" if age is None else f"{age:.1f} h old"
        raise InputError(
            f"the newest completed skills run {manifest.get('run_id') or run.name} is {shown} "
            f"(finished {manifest.get('finished_at') or manifest.get('started_at') or '?'}), older than "
            f"max_skills_run_age_hours: {max_age_hours:g}; run the skills pipeline again or raise the limit",
            path=str(run),
        )
    outputs = manifest.get("outputs") or {}
    tables: dict[str, Any] = {}
    for name in ("skills", "consensus"):
        # flat runs hold <table>.parquet; hive runs point at their dataset parts
        part = run / outputs.get(name, {}).get("path", f"{name}.parquet")
        if not part.is_file():
            raise InputError(f"the completed run lists a '{name}' table that is not on disk", path=str(part))
        tables[name] = pq.ParquetFile(part).read().to_pandas()
    return {
        "run_dir": str(run),
        "run_id": manifest.get("run_id"),
        "started_at": manifest.get("started_at"),
        "finished_at": manifest.get("finished_at"),
        "age_hours": age,
        **tables,
    }


def run_age_hours(manifest: Mapping[str, Any], now: datetime | None = None) -> float | None:
    """Hours since a run finished (``finished_at``; runs written before it was recorded: ``started_at``)."""
    stamp = manifest.get("finished_at") or manifest.get("started_at")
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(str(stamp))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, ((now or datetime.now(UTC)) - when).total_seconds() / 3600.0)
