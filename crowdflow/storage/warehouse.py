"""Warehouse I/O: run a SQL query against DuckDB or PostgreSQL into Arrow, load output tables back.

Connections are URLs without a password: ``duckdb:///path/file.duckdb`` (relative to the spec's
folder; ``duckdb:////abs/path.duckdb`` for an absolute path) or ``postgresql://user@host:port/db``
(SQLAlchemy + psycopg 3; ``postgresql+psycopg://`` is the same). A URL with an inline password
(``user:secret@host`` or ``?password=``) is refused: the password is passed separately by the caller,
which reads it from an environment variable or a Prefect Secret block.

Query parameters are always bound by the driver, never formatted into the SQL: PostgreSQL takes
``:name`` placeholders (SQLAlchemy ``text()``), DuckDB ``$name`` (a mapping) or ``?`` (a list).

Loads are one transaction per run: every output table gets a ``run_id`` column; ``replace`` recreates
each table with this run's rows, ``append`` deletes the rows of the same run id (a rerun is
idempotent) and inserts this run's rows. A failure rolls back every table of the run.

``duckdb``, ``sqlalchemy`` and ``psycopg`` are imported only inside the functions that need them
(``pip install 'crowdflow[warehouse]'``).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Literal
from urllib.parse import urlsplit

import pyarrow as pa

from crowdflow.contracts.errors import SpecError, TransientError, WarehouseError
from crowdflow.storage.secrets import inline_secret, redact, refusal

log = logging.getLogger(__name__)

Kind = Literal["duckdb", "postgresql"]
Params = Mapping[str, Any] | Sequence[Any] | None
RUN_ID_COLUMN = "run_id"
_SQL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_PG_SCHEMES = {"postgresql", "postgres"}
_HINT = "pip install 'crowdflow[warehouse]'"


def _require(module: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise WarehouseError(
            f"warehouse I/O needs the optional dependency '{package}', which is not installed: {_HINT}"
        ) from None


def redact_url(url: str) -> str:
    """``url`` with any password (in the user part or a secret query parameter) replaced by ``***``.

    The redaction itself is :func:`crowdflow.storage.secrets.redact` (one rule for every recorded string); a URL
    that cannot be parsed is not echoed at all.
    """
    try:
        urlsplit(url).port  # noqa: B018 - raises ValueError on a malformed netloc
    except ValueError:
        return "<unparsable URL>"
    out: str = redact(url, secrets=[])
    return out


def check_connection_url(url: str, field: str = "connection") -> Kind:
    """The kind of database a URL names; :class:`SpecError` on an inline credential or an unknown scheme.

    The credential rule (:func:`crowdflow.storage.secrets.inline_secret`) runs on the raw text first, and no
    message ever repeats the URL or a parser's error about it: a password containing a space or ``/``
    cannot leak through either.

    Parameters
    ----------
    url : str
        ``duckdb:///file.duckdb`` or ``postgresql://user@host:port/db``.
    field : str
        Name of the spec field holding it, for the messages.

    Returns
    -------
    {"duckdb", "postgresql"}
    """
    kind_of_secret = inline_secret(url)
    if kind_of_secret is not None:
        raise SpecError(refusal(field, kind_of_secret))
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError on a malformed port)
    except ValueError:
        raise SpecError(f"{field} is not a valid URL: its host:port part cannot be read") from None
    scheme = parts.scheme.lower().split("+", 1)[0]
    if scheme == "duckdb":
        return "duckdb"
    if scheme in _PG_SCHEMES:
        return "postgresql"
    raise SpecError(
        f"{field}: unsupported scheme {parts.scheme!r}; use duckdb:///path/file.duckdb or postgresql://user@host:port/db"
    )


_DIALECT: dict[Kind, str] = {"duckdb": "duckdb", "postgresql": "postgres"}
# statements (or parts of one) that write, change settings, load code or leave the query's transaction
_WRITES = (
    "DDL", "DML", "Command", "Set", "Pragma", "Attach", "Detach", "Install", "Use", "Grant", "Into",
    "Transaction", "Commit", "Rollback", "Analyze", "Kill",
)  # fmt: skip


def check_read_only_query(sql: str, kind: Kind, field: str = "sql") -> None:
    """Refuse a source query that is not one read-only SELECT (``SpecError`` naming ``field``).

    The query is parsed with sqlglot in the database's dialect. Accepted: exactly one statement whose root is
    a SELECT (``WITH …``, ``FROM …``, ``UNION``/``INTERSECT``/``EXCEPT`` included). Refused: several
    statements, anything that does not parse, and a query holding, anywhere in its tree, a statement that
    writes or changes state (``COPY … TO``, ``INSERT``/``UPDATE``/``DELETE`` in a data-modifying CTE,
    ``SELECT … INTO``, ``CREATE``, ``ATTACH``, ``SET``, ``PRAGMA``, ``INSTALL``/``LOAD``, ``CALL``…).
    The engines enforce the same at run time (:func:`fetch_query`): PostgreSQL runs the query in a
    read-only transaction, DuckDB opens a database file read-only with external file access disabled.
    """
    sqlglot = _require("sqlglot", "sqlglot")
    exp = sqlglot.expressions
    try:
        statements = [s for s in sqlglot.parse(sql, read=_DIALECT[kind]) if s is not None]
    except sqlglot.errors.SqlglotError as exc:
        raise SpecError(f"{field}: not a query crowdflow can read ({str(exc).splitlines()[0]})") from None
    if len(statements) != 1:
        raise SpecError(f"{field}: a source is one SELECT query; this holds {len(statements)} statements")
    root = statements[0]
    writes = tuple(getattr(exp, name) for name in _WRITES if hasattr(exp, name))
    offending = next((n for n in root.walk() if isinstance(n, writes)), None)
    if offending is None and isinstance(root, exp.Select) and root.args.get("into"):
        offending = root.args["into"]
    if offending is not None or not isinstance(root, exp.Query):
        what = type(offending if offending is not None else root).__name__.upper()
        raise SpecError(f"{field}: a source query must be a read-only SELECT; it holds a {what} statement")


def password_from_env(variable: str, what: str = "connection") -> str:
    """The password held by environment variable ``variable``; :class:`SpecError` when it is unset."""
    value = os.environ.get(variable)
    if value is None:
        raise SpecError(f"{what}: environment variable {variable} (password_env) is not set")
    return value


def duckdb_path(url: str, base_dir: str | os.PathLike[str] = ".") -> str:
    """Database file of a ``duckdb:///`` URL (relative paths resolved against ``base_dir``), or ``:memory:``."""
    path = urlsplit(url).path
    path = path[1:] if path.startswith("/") else path
    if path in ("", ":memory:"):
        return ":memory:"
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else Path(base_dir) / p)


def _pg_engine(url: str, password: str | None) -> Any:
    sa = _require("sqlalchemy", "sqlalchemy")
    _require("psycopg", "psycopg[binary]")
    from sqlalchemy.pool import NullPool

    u = sa.engine.make_url(url)
    if u.drivername in _PG_SCHEMES:
        u = u.set(drivername="postgresql+psycopg")
    if password is not None:
        u = u.set(password=password)
    return sa.create_engine(u, poolclass=NullPool)


_NOT_TRANSIENT = ("authentication failed", "no password supplied", "does not exist", "permission denied")


def _first_line(exc: Exception) -> str:
    """The driver's own message, first line only, with any secret redacted."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return str(redact(text[0] if text else type(exc).__name__))


def _refused(exc: Exception) -> bool:
    """A connection error that a retry cannot fix (bad credentials, unknown database or role)."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    return any(marker in text for marker in _NOT_TRANSIENT)


def table_fingerprint(table: pa.Table) -> str:
    """SHA-256 of a table's content: Arrow IPC stream of its columns (schema metadata and chunking ignored)."""
    clean = table.replace_schema_metadata(None).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, clean.schema) as writer:
        writer.write_table(clean)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def _column_to_arrow(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):  # e.g. UUIDs, ranges: kept as text
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def fetch_query(
    url: str,
    sql: str,
    params: Params = None,
    *,
    password: str | None = None,
    base_dir: str | os.PathLike[str] = ".",
) -> pa.Table:
    """Run ``sql`` with bound ``params`` and return the result as an Arrow table.

    Parameters
    ----------
    url : str
        Connection URL without a password (see :func:`check_connection_url`).
    sql : str
        The query; placeholders ``:name`` (PostgreSQL), ``$name`` or ``?`` (DuckDB).
    params : mapping or sequence, optional
        Values bound by the driver.
    password : str, optional
        Database password (PostgreSQL), from the environment or a secret store.
    base_dir : path
        Folder a relative DuckDB file is resolved against.

    Raises
    ------
    WarehouseError
        The query failed (syntax, unknown table or column, missing parameter, missing database file).
    """
    kind = check_connection_url(url)
    where = redact_url(url)
    if kind == "duckdb":
        duckdb = _require("duckdb", "duckdb")
        path = duckdb_path(url, base_dir)
        if path != ":memory:" and not Path(path).is_file():
            raise WarehouseError(f"{where}: DuckDB database file {path} not found")
        check_read_only_query(sql, kind)
        # a database file: read-only, and no other file reachable from SQL (no COPY TO, no read_csv of the
        # host's files); an in-memory database can read data files (read_parquet) but the query is a SELECT
        config = {} if path == ":memory:" else {"enable_external_access": False}
        con = duckdb.connect(path, read_only=path != ":memory:", config=config)
        try:
            rel = con.sql(sql, params=params if params else None)
            if rel is None:
                raise WarehouseError(f"{where}: the statement returned no rows (a source needs a SELECT query)")
            # duckdb >= 2 names it to_arrow_table; 1.x fetch_arrow_table
            to_arrow = getattr(rel, "to_arrow_table", None) or rel.fetch_arrow_table
            table = to_arrow()
        except duckdb.Error as exc:
            raise WarehouseError(f"{where}: query failed: {exc}") from None
        finally:
            con.close()
        return table
    if not isinstance(params, Mapping) and params:
        raise WarehouseError(f"{where}: PostgreSQL queries take named parameters (:name), not a list")
    sa = _require("sqlalchemy", "sqlalchemy")
    check_read_only_query(sql, kind)
    engine = _pg_engine(url, password)
    try:
        with engine.connect().execution_options(postgresql_readonly=True) as conn:
            result = conn.execute(sa.text(sql), dict(params or {}))
            names = list(result.keys())
            rows = result.fetchall()
    except (sa.exc.StatementError, sa.exc.ArgumentError) as exc:
        if isinstance(exc, sa.exc.OperationalError) and not _refused(exc):  # network trouble: the caller may retry
            raise TransientError(f"{where}: cannot reach the database: {_first_line(exc)}") from None
        raise WarehouseError(f"{where}: query failed: {getattr(exc, 'orig', None) or exc}") from None
    finally:
        engine.dispose()
    columns: list[tuple[Any, ...]] = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    arrays = [_column_to_arrow(list(c)) for c in columns]
    return pa.Table.from_arrays(arrays, names=names)


def _qident(name: str) -> str:
    if not _SQL_NAME.match(name):
        raise ValueError(f"invalid SQL identifier {name!r}: use letters, digits and '_' (not starting with a digit)")
    return f'"{name}"'


def _with_run_id(table: pa.Table, run_id: str) -> pa.Table:
    table = table.replace_schema_metadata(None)
    if RUN_ID_COLUMN in table.column_names:
        return table
    return table.append_column(RUN_ID_COLUMN, pa.array([run_id] * table.num_rows, type=pa.string()))


def load_tables(
    url: str,
    tables: Mapping[str, pa.Table],
    run_id: str,
    *,
    mode: Literal["replace", "append"] = "append",
    schema: str | None = None,
    prefix: str = "",
    password: str | None = None,
    base_dir: str | os.PathLike[str] = ".",
    always_append: Collection[str] = (),
) -> dict[str, str]:
    """Load a run's output tables into DuckDB or PostgreSQL in one transaction.

    Parameters
    ----------
    url : str
        Connection URL without a password.
    tables : mapping of name → pyarrow.Table
        The run's tables (as written to Parquet); a ``run_id`` column is added when absent.
    run_id : str
    mode : {"replace", "append"}
        ``replace``: each table is recreated with this run's rows only. ``append``: rows of ``run_id``
        already in the table are deleted, then this run's rows are inserted.
    schema : str, optional
        Database schema (created if missing).
    prefix : str
        Prefix of the table names.
    password : str, optional
    base_dir : path
        Folder a relative DuckDB file is resolved against.
    always_append : collection of str
        Tables appended by run id whatever ``mode`` says (the ``runs`` log keeps every run's row).

    Returns
    -------
    dict
        Table name → qualified database table it was loaded into.

    Raises
    ------
    WarehouseError
        The database refused the load; nothing of this run is left in any table (rolled back).
    """
    if mode not in ("replace", "append"):
        raise ValueError(f"mode must be replace or append, got {mode!r}")
    kind = check_connection_url(url)
    names = {name: prefix + name for name in tables}
    for target in names.values():
        _qident(target)
    if schema is not None:
        _qident(schema)
    data = {name: _with_run_id(t, run_id) for name, t in tables.items()}
    modes = {name: "append" if name in always_append else mode for name in tables}
    if kind == "duckdb":
        _load_duckdb(url, data, names, run_id, modes, schema, base_dir)
    else:
        _load_postgresql(url, data, names, run_id, modes, schema, password)
    qualified = {n: f"{schema}.{t}" if schema else t for n, t in names.items()}
    log.info("loaded %d tables of run %s into %s (%s)", len(data), run_id, redact_url(url), mode)
    return qualified


def _load_duckdb(
    url: str,
    data: Mapping[str, pa.Table],
    names: Mapping[str, str],
    run_id: str,
    modes: Mapping[str, str],
    schema: str | None,
    base_dir: str | os.PathLike[str],
) -> None:
    duckdb = _require("duckdb", "duckdb")
    path = duckdb_path(url, base_dir)
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(path)
    view = "__crowdflow_rows"
    try:
        con.execute("BEGIN TRANSACTION")
        try:
            # Every name is qualified by the database's own catalog: a schema named like the database file
            # (crowdflow.duckdb with schema crowdflow) is otherwise ambiguous to DuckDB's binder.
            catalog = '"{}"'.format(str(con.execute("SELECT current_database()").fetchall()[0][0]).replace('"', '""'))
            space = f"{catalog}.{_qident(schema if schema is not None else 'main')}"
            if schema is not None:
                con.execute(f"CREATE SCHEMA IF NOT EXISTS {space}")
            for name, table in data.items():
                target = f"{space}.{_qident(names[name])}"
                con.register(view, table)
                if modes[name] == "replace":
                    con.execute(f"CREATE OR REPLACE TABLE {target} AS SELECT * FROM {view}")
                else:
                    con.execute(f"CREATE TABLE IF NOT EXISTS {target} AS SELECT * FROM {view} LIMIT 0")
                    con.execute(f"DELETE FROM {target} WHERE {RUN_ID_COLUMN} = ?", [run_id])
                    con.execute(f"INSERT INTO {target} BY NAME SELECT * FROM {view}")
                con.unregister(view)
            con.execute("COMMIT")
        except duckdb.Error as exc:
            con.execute("ROLLBACK")
            raise WarehouseError(f"{redact_url(url)}: loading run {run_id} failed, nothing was loaded: {exc}") from None
    finally:
        con.close()


def _pg_type(sa: ModuleType, field: pa.Field) -> Any:
    from sqlalchemy.dialects import postgresql as pg

    t = field.type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return sa.Text()
    if pa.types.is_boolean(t):
        return sa.Boolean()
    if pa.types.is_integer(t):
        return sa.BigInteger() if t.bit_width > 16 or pa.types.is_unsigned_integer(t) else sa.Integer()
    if pa.types.is_floating(t):
        return pg.DOUBLE_PRECISION() if t.bit_width == 64 else pg.REAL()
    if pa.types.is_decimal(t):
        return sa.Numeric(t.precision, t.scale)
    if pa.types.is_timestamp(t):
        return sa.DateTime(timezone=t.tz is not None)
    if pa.types.is_date(t):
        return sa.Date()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pg.ARRAY(_pg_type(sa, pa.field(field.name, t.value_type)))
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return pg.JSONB()
    raise WarehouseError(f"column '{field.name}': Arrow type {t} has no PostgreSQL mapping")


def _load_postgresql(
    url: str,
    data: Mapping[str, pa.Table],
    names: Mapping[str, str],
    run_id: str,
    modes: Mapping[str, str],
    schema: str | None,
    password: str | None,
) -> None:
    sa = _require("sqlalchemy", "sqlalchemy")
    engine = _pg_engine(url, password)
    metadata = sa.MetaData(schema=schema)
    try:
        with engine.begin() as conn:  # one transaction: commits at the end, rolls back on any error
            if schema is not None:
                conn.execute(sa.schema.CreateSchema(schema, if_not_exists=True))
            for name, table in data.items():
                cols = [sa.Column(f.name, _pg_type(sa, f)) for f in table.schema]
                target = sa.Table(names[name], metadata, *cols)
                if modes[name] == "replace":
                    target.drop(conn, checkfirst=True)
                    target.create(conn)
                else:
                    target.create(conn, checkfirst=True)
                    conn.execute(sa.delete(target).where(target.c[RUN_ID_COLUMN] == run_id))
                rows = table.to_pylist()
                if rows:
                    conn.execute(sa.insert(target), rows)
    except sa.exc.DBAPIError as exc:
        if isinstance(exc, sa.exc.OperationalError) and not _refused(exc):  # network trouble: the caller may retry
            raise TransientError(f"{redact_url(url)}: cannot reach the database: {_first_line(exc)}") from None
        raise WarehouseError(
            f"{redact_url(url)}: loading run {run_id} failed, nothing was loaded: {getattr(exc, 'orig', exc)}"
        ) from None
    finally:
        engine.dispose()
