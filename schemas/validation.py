"""Great Expectations 1.x suites built from the table contracts, run in an ephemeral context.

GX is imported lazily (it costs ~4 s), so importing this module is cheap.

**What one validation costs, and what is built once.** The ephemeral context, each suite and its validation
definition are built once per process and per distinct suite (:func:`_suite_for`: the contract, the columns
present, the allowed values and ``whole_table`` decide the expectations), then reused for every table the
process validates (a Dask worker validates one file of a dataset after another: ~0.04 s of building per file at
load 2, more on a loaded host, before). Each run hands GX only the columns the suite checks, the id columns as
pandas categoricals built from Arrow's dictionary encoding (:func:`_gx_frame`: one code a row and each distinct id
once, instead of a string a row, which GX's map metrics and its batch fingerprint, a hash of every cell, walked
row by row). Every expectation still runs on every row of every column it names; a failure still names the
file, the column and the rows in that file (the frame keeps its row index).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from crowdflow.contracts.errors import ValidationFailed
from crowdflow.contracts.tables import NA_SPELLINGS_ANY_CASE, TableSchema
from crowdflow.storage.io import LoadedTable

log = logging.getLogger(__name__)

MAX_EXAMPLES = 5
_DISTINCT = "__distinct_pair__"


@dataclass(frozen=True)
class Failure:
    """One failed expectation.

    Attributes
    ----------
    expectation : str
        GX expectation type, e.g. ``expect_column_values_to_not_be_null``.
    column : str
        Column (or comma-joined columns) it applies to.
    rule : str
        The constraint in words.
    unexpected_count : int
    rows : list of int
        Up to 5 example 1-based data row numbers (header excluded).
    values : list
        The offending values at those rows.
    """

    expectation: str
    column: str
    rule: str
    unexpected_count: int
    rows: list[int]
    values: list[Any]


@dataclass(frozen=True)
class Checked:
    """One expectation that was run on the table, and whether it held.

    Attributes
    ----------
    expectation : str
        GX expectation type.
    column : str
        Column (or comma-joined columns) it applies to.
    rule : str
        The constraint in words.
    passed : bool
    """

    expectation: str
    column: str
    rule: str
    passed: bool


@dataclass(frozen=True)
class ValidationReport:
    """Result of validating one table: what failed, and every expectation that was checked."""

    table: str
    source: str
    n_rows: int
    n_expectations: int
    failures: list[Failure]
    checked: list[Checked] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return not self.failures

    def message(self) -> str:
        """Multi-line message: one line per failed expectation with counts and example rows."""
        head = (
            f"{self.source}: {self.table} table failed {len(self.failures)} of "
            f"{self.n_expectations} expectations ({self.n_rows} rows)"
        )
        lines = [head]
        for f in self.failures:
            ex = ", ".join(f"row {r} ({f.column}={v!r})" for r, v in zip(f.rows, f.values, strict=False))
            lines.append(
                f"  - column '{f.column}': {f.rule}: {f.unexpected_count} rows fail" + (f"; e.g. {ex}" if ex else "")
            )
        return "\n".join(lines)

    def as_records(self) -> list[dict[str, Any]]:
        return [
            {
                "table": self.table,
                "source": self.source,
                "expectation": f.expectation,
                "column": f.column,
                "rule": f.rule,
                "unexpected_count": f.unexpected_count,
                "example_rows": ",".join(str(r) for r in f.rows),
            }
            for f in self.failures
        ]

    def checked_records(self) -> list[dict[str, Any]]:
        """Every expectation that was run: column, rule, ``passed`` or ``FAILED`` (what a passed table was held to)."""
        return [
            {"column": c.column, "rule": c.rule, "result": "passed" if c.passed else "FAILED"} for c in self.checked
        ]


def _expectations(
    schema: TableSchema, present: list[str], allowed: dict[str, list[str]], whole_table: bool = True
) -> list[tuple[Any, str]]:
    import great_expectations.expectations as gxe

    out: list[tuple[Any, str]] = []
    for col in schema.columns:
        if col.name not in present:
            continue
        if not col.nullable:
            out.append((gxe.ExpectColumnValuesToNotBeNull(column=col.name), "must not be null/NaN"))
        if col.type == "id" and not col.na_spelling_ok:
            out.append(
                (
                    gxe.ExpectColumnValuesToNotBeInSet(column=col.name, value_set=sorted(NA_SPELLINGS_ANY_CASE)),
                    "must be a real id, not text for a missing value (#N/A, NA, NULL, nan, None, ...): those "
                    f"rows would be fitted as one {col.name}; drop them or give them ids",
                )
            )
        if col.type in ("float", "int") and (col.min_value is not None or col.max_value is not None or col.finite):
            lo = col.min_value if col.min_value is not None else -1.7976931348623157e308
            hi = col.max_value if col.max_value is not None else 1.7976931348623157e308
            rule = f"must be {'>' if col.strict_min else '>='} {lo}" if col.min_value is not None else "must be finite"
            out.append(
                (
                    gxe.ExpectColumnValuesToBeBetween(
                        column=col.name, min_value=lo, max_value=hi, strict_min=col.strict_min
                    ),
                    rule,
                )
            )
        if col.type in ("float", "int") and col.max_abs is not None:
            # finite but huge values overflow when squared (losses, Laplacians): a silent inf/NaN fit
            out.append(
                (
                    gxe.ExpectColumnValuesToBeBetween(column=col.name, min_value=-col.max_abs, max_value=col.max_abs),
                    f"|value| must be <= {col.max_abs:g} (squares must stay finite)",
                )
            )
        if col.name in allowed:
            out.append(
                (
                    gxe.ExpectColumnValuesToBeInSet(column=col.name, value_set=list(allowed[col.name])),
                    f"must be one of {list(allowed[col.name])}",
                )
            )
    for col in schema.columns:
        if whole_table and col.name in present and col.min_distinct and col.name not in allowed:
            out.append(
                (
                    gxe.ExpectColumnUniqueValueCountToBeBetween(column=col.name, min_value=col.min_distinct),
                    f"must have at least {col.min_distinct} distinct values (a single-class batch needs "
                    "the label set declared: skills.classes in the spec)",
                )
            )
    if whole_table and schema.unique and all(c in present for c in schema.unique):
        if len(schema.unique) == 1:
            exp = gxe.ExpectColumnValuesToBeUnique(column=schema.unique[0])
        else:
            exp = gxe.ExpectCompoundColumnsToBeUnique(column_list=list(schema.unique))
        out.append((exp, f"({', '.join(schema.unique)}) must be unique"))
    if schema.distinct and all(c in present for c in schema.distinct):
        a, b = schema.distinct
        # GX 1.24 has no "column pair values differ" expectation (column-to-column row conditions
        # arrive in 1.25): validate a derived boolean column, reported under "a,b".
        out.append(
            (
                gxe.ExpectColumnValuesToBeInSet(column=_DISTINCT, value_set=[True]),
                f"{a} must differ from {b}",
            )
        )
    return out


@dataclass(frozen=True)
class _Suite:
    """A suite built once per process: its validation definition, each expectation's rule in words (by id)."""

    definition: Any
    rules: dict[str, str]
    n_expectations: int
    value_level: bool = False


#: Expectations that judge each value on its own (the same verdict for every row holding that value), so a column's
#: distinct values stand for its rows (:func:`_distinct_frame`).
_VALUE_LEVEL = frozenset(
    {
        "ExpectColumnValuesToNotBeNull",
        "ExpectColumnValuesToNotBeInSet",
        "ExpectColumnValuesToBeInSet",
        "ExpectColumnValuesToBeBetween",
    }
)

#: Suites kept per process (a long-lived process that validates many shapes starts a fresh context past it).
MAX_SUITES = 64
_LOCK = threading.RLock()
_SUITES: OrderedDict[tuple[Any, ...], _Suite] = OrderedDict()
_CONTEXT: list[Any] = []  # [context, its pandas data source] once built


def _context() -> tuple[Any, Any]:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    if not _CONTEXT:
        logging.getLogger("great_expectations").setLevel(logging.WARNING)
        ctx = gx.get_context(mode="ephemeral")
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        _CONTEXT[:] = [ctx, ctx.data_sources.add_pandas("crowdflow")]
    return _CONTEXT[0], _CONTEXT[1]


def _suite_for(schema: TableSchema, present: list[str], allowed: dict[str, list[str]], whole_table: bool) -> _Suite:
    """The suite of ``schema`` on the ``present`` columns, built on first use in this process and then reused.

    Keyed by everything the expectations depend on (the contract, the columns present, the allowed values,
    ``whole_table``), so a reused suite is the suite :func:`_expectations` would build now.
    """
    import great_expectations as gx

    key = (repr(schema), tuple(present), tuple((k, tuple(v)) for k, v in sorted(allowed.items())), whole_table)
    with _LOCK:
        hit = _SUITES.get(key)
        if hit is not None:
            _SUITES.move_to_end(key)
            return hit
        if len(_SUITES) >= MAX_SUITES:
            _SUITES.clear()
            _CONTEXT.clear()
        ctx, source = _context()
        name = f"{schema.name}_{len(_SUITES)}_{id(key)}"
        bd = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("whole")
        suite = ctx.suites.add(gx.ExpectationSuite(name=f"{name}_suite"))
        rules: dict[str, str] = {}
        expectations = _expectations(schema, present, allowed, whole_table)
        for exp, rule in expectations:
            added = suite.add_expectation(exp)
            rules[str(added.id)] = rule
        vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=f"{name}_validation", data=bd, suite=suite))
        value_level = all(
            type(exp).__name__ in _VALUE_LEVEL and getattr(exp, "column", None) != _DISTINCT for exp, _ in expectations
        )
        built = _Suite(vd, rules, len(expectations), value_level)
        _SUITES[key] = built
        return built


def _categorical(col: pd.Series) -> pd.Series:
    """A string column as a pandas categorical from Arrow's dictionary encoding (nulls stay null), same index."""
    import pyarrow as pa
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(pa.array(col, from_pandas=True))
    out: pd.Series = enc.to_pandas()
    out.index = col.index
    return out


def _gx_frame(df: pd.DataFrame, schema: TableSchema, present: list[str]) -> pd.DataFrame:
    """What GX is handed: the checked columns only, string id columns as categoricals (:func:`_categorical`), the
    derived column of the ``distinct`` rule computed on the original values; the row index kept."""
    cols: dict[str, Any] = {}
    kinds = {c.name: c.type for c in schema.columns}
    for c in present:
        col = df[c]
        cols[c] = _categorical(col) if kinds[c] == "id" and isinstance(col.dtype, pd.StringDtype) else col
    if schema.distinct and all(c in present for c in schema.distinct):
        a, b = schema.distinct
        cols[_DISTINCT] = (df[a] != df[b]).fillna(True).astype(bool)
    return pd.DataFrame(cols, index=df.index)


def _distinct_frame(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Each categorical column's distinct values (one row holding each value the column holds, the missing value
    included), the shorter columns padded by repeating their first such row; None unless every column is
    categorical. A value-level expectation holds on every row iff it holds on this frame."""
    if not len(frame) or not all(isinstance(frame[c].dtype, pd.CategoricalDtype) for c in frame.columns):
        return None
    import numpy as np

    rows: dict[str, np.ndarray] = {}
    for c in frame.columns:
        codes = frame[c].cat.codes.to_numpy().astype(np.int64) + 1  # 0: missing
        first = np.full(len(frame[c].cat.categories) + 1, -1, dtype=np.int64)
        first[codes[::-1]] = np.arange(codes.size - 1, -1, -1)  # the last write per code is its first row
        rows[c] = first[first >= 0]
    n = max(v.size for v in rows.values())
    out = {}
    for c, v in rows.items():  # a take keeps the column's categorical dtype as it is
        out[c] = frame[c].array.take(np.concatenate([v, np.full(n - v.size, v[0])]))
    return pd.DataFrame(out)


def validate_frame(
    df: pd.DataFrame,
    schema: TableSchema,
    source: str,
    allowed: dict[str, list[str]] | None = None,
    whole_table: bool = True,
) -> ValidationReport:
    """Run the schema's GX suite on ``df`` in an ephemeral data context.

    Parameters
    ----------
    df : pandas.DataFrame
        Canonical columns; the index must be the 0-based data row position (row number = index + 1).
    schema : TableSchema
    source : str
        File (or query) the table came from, used in messages.
    allowed : dict, optional
        Column → allowed values (e.g. the declared label set).
    whole_table : bool
        Include the rules about the table as a whole (distinct values of a column, unique keys). ``False`` for one
        file of a dataset: a file may hold one class, and a key repeated across files is only seen when the files
        meet (the partitioned run checks both on what it sums: ``crowdflow.skills.partitioned.dictionaries`` and the
        duplicate policy of ``crowdflow.skills.buckets.encode_bucket``).

    Returns
    -------
    ValidationReport
    """
    present = [c for c in schema.names if c in df.columns]
    suite = _suite_for(schema, present, allowed or {}, whole_table)
    frame = _gx_frame(df, schema, present)
    distinct = _distinct_frame(frame) if suite.value_level else None
    res = None
    if distinct is not None:  # GX on each column's distinct values: every row's value is among them
        with _LOCK:
            res = suite.definition.run(batch_parameters={"dataframe": distinct}, result_format="BOOLEAN_ONLY")
        if not all(r.success for r in res.results):
            res = None  # a value fails: GX again on the rows, for the report's counts and rows
    if res is None:
        with _LOCK:  # one GX run at a time in a process: the context and its definitions are shared
            res = suite.definition.run(batch_parameters={"dataframe": frame}, result_format="SUMMARY")
    rules = suite.rules
    failures: list[Failure] = []
    checked: list[Checked] = []
    for r in res.results:
        cfg = r.expectation_config
        kw = cfg.kwargs
        column = kw.get("column") or ",".join(kw.get("column_list", []))
        shown = ",".join(schema.distinct) if column == _DISTINCT else column
        checked.append(Checked(cfg.type, shown, rules.get(str(cfg.id), cfg.type), bool(r.success)))
        if r.success:
            continue
        idx = list(r.result.get("partial_unexpected_index_list") or [])[:MAX_EXAMPLES]
        vals = list(r.result.get("partial_unexpected_list") or [])[:MAX_EXAMPLES]
        if cfg.type == "expect_compound_columns_to_be_unique" and idx:
            vals = [tuple(df.loc[i, kw["column_list"]].tolist()) for i in idx]
        if column == _DISTINCT:
            column = ",".join(schema.distinct)
            vals = [tuple(df.loc[i, list(schema.distinct)].tolist()) for i in idx]
        count = r.result.get("unexpected_count")
        if count is None and "observed_value" in r.result and not (r.exception_info or {}).get("raised_exception"):
            # an aggregate expectation (e.g. distinct-value count): no rows to point at, report what was seen
            observed = r.result["observed_value"]
            rule = rules.get(str(cfg.id), cfg.type)
            failures.append(Failure(cfg.type, column, f"{rule}; found {observed}", len(df), [], []))
            continue
        if count is None:  # an exception inside the expectation: report it, never pass silently
            msg = (r.exception_info or {}).get("exception_message", "expectation could not run")
            failures.append(Failure(cfg.type, column, f"could not be checked ({msg})", len(df), [], []))
            continue
        failures.append(
            Failure(
                expectation=cfg.type,
                column=column,
                rule=rules.get(str(cfg.id), cfg.type),
                unexpected_count=int(count),
                rows=[int(i) + 1 for i in idx],
                values=vals,
            )
        )
    report = ValidationReport(
        table=schema.name,
        source=source,
        n_rows=len(df),
        n_expectations=suite.n_expectations,
        failures=failures,
        checked=checked,
    )
    log.info("validated %s (%d rows): %d failures", source, len(df), len(failures))
    return report


def require_valid(report: ValidationReport) -> None:
    """Raise :class:`ValidationFailed` listing every failed expectation."""
    if not report.success:
        raise ValidationFailed(report.message(), failures=report.as_records())


def validate_loaded(table: LoadedTable, kind: str, allowed: dict[str, list[str]] | None = None) -> ValidationReport:
    """The ``kind`` contract's row rules on one file of a dataset, where a Dask worker read it (no whole-table rule)."""
    from crowdflow.contracts.tables import INPUTS

    return validate_frame(table.df, INPUTS[kind], table.source, allowed, whole_table=False)


def combined_message(reports: list[ValidationReport], dataset: str, limit: int = 10) -> str:
    """One message for the files of a dataset that failed: each file's failures with its own row numbers."""
    failed = [r for r in reports if not r.success]
    head = f"{dataset}: {len(failed)} of {len(reports)} files failed validation"
    body = [r.message() for r in failed[:limit]]
    more = [f"... and {len(failed) - limit} more files"] if len(failed) > limit else []
    return "\n".join([head, *body, *more])


def require_all_valid(reports: list[ValidationReport], dataset: str) -> None:
    """Raise :class:`ValidationFailed` naming every failing file of ``dataset`` (its rows counted in that file)."""
    if any(not r.success for r in reports):
        records = [rec for r in reports for rec in r.as_records()]
        raise ValidationFailed(combined_message(reports, dataset), failures=records)
