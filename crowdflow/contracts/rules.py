"""The row rules of a table contract, checked with pandas: what a pipeline's Great Expectations suite checks.

A pipeline validates each input table with the suite ``schemas.validation`` builds from its
:class:`~crowdflow.contracts.tables.TableSchema`; the library may not import Great Expectations, so the Python front
door (:mod:`crowdflow.frontdoor.api`) checks a DataFrame against the same contract here, with the same rules, the same
rule texts and the same message (one line per failed rule, its count and up to 5 example rows):

- a non-nullable column has no null/NaN;
- an entity id is not text that spells a missing value (:data:`~crowdflow.contracts.tables.NA_SPELLINGS`, any case);
- a number is finite and within its column's bounds, and ``|value| <= max_abs``;
- a value is in the declared set (the skills ``classes``), or the column has at least ``min_distinct`` values;
- the contract's key is unique and its two ``distinct`` columns differ on every row.

Nulls are left to the null rule, as in the suite. ``tests/test_api.py`` checks that this module and the
Great Expectations suite fail the same rules with the same counts on the same bad tables.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.contracts.errors import ValidationFailed
from crowdflow.contracts.tables import NA_SPELLINGS_ANY_CASE, TableSchema

log = logging.getLogger(__name__)

MAX_EXAMPLES = 5
_FLOAT_MAX = 1.7976931348623157e308


@dataclass(frozen=True)
class RuleFailure:
    """One failed rule: the column(s), the rule in words, how many rows fail and example rows (1-based)."""

    column: str
    rule: str
    count: int
    rows: tuple[int, ...] = ()
    values: tuple[Any, ...] = ()

    def line(self) -> str:
        """The line of the pipeline's validation message for this rule."""
        ex = ", ".join(f"row {r} ({self.column}={v!r})" for r, v in zip(self.rows, self.values, strict=False))
        return f"  - column '{self.column}': {self.rule}: {self.count} rows fail" + (f"; e.g. {ex}" if ex else "")


@dataclass(frozen=True)
class RulesReport:
    """The rules of one table: how many were checked and which failed."""

    table: str
    source: str
    n_rows: int
    n_rules: int
    failures: tuple[RuleFailure, ...]

    @property
    def success(self) -> bool:
        return not self.failures

    def message(self) -> str:
        """The pipeline's validation message (``schemas.validation.ValidationReport.message``)."""
        head = (
            f"{self.source}: {self.table} table failed {len(self.failures)} of {self.n_rules} expectations "
            f"({self.n_rows} rows)"
        )
        return "\n".join([head, *(f.line() for f in self.failures)])

    def raise_if_failed(self) -> None:
        """Raise :class:`~crowdflow.contracts.errors.ValidationFailed` listing every failed rule."""
        if self.failures:
            records: list[dict[str, object]] = [
                {"table": self.table, "source": self.source, "column": f.column, "rule": f.rule, "count": f.count}
                for f in self.failures
            ]
            raise ValidationFailed(self.message(), failures=records)


def _failure(column: str, rule: str, bad: np.ndarray, values: pd.Series | pd.DataFrame) -> RuleFailure | None:
    if not bad.any():
        return None
    idx = np.flatnonzero(bad)[:MAX_EXAMPLES]
    if isinstance(values, pd.DataFrame):
        shown: tuple[Any, ...] = tuple(tuple(row) for row in values.iloc[idx].itertuples(index=False, name=None))
    else:
        shown = tuple(values.iloc[idx].tolist())
    return RuleFailure(column, rule, int(bad.sum()), tuple(int(i) + 1 for i in idx), shown)


def check_rules(
    df: pd.DataFrame,
    schema: TableSchema,
    source: str,
    allowed: Mapping[str, Sequence[str]] | None = None,
) -> RulesReport:
    """Check a canonical table (after :func:`crowdflow.storage.io.read_frame`) against the rules of its contract.

    Parameters
    ----------
    df : pandas.DataFrame
        Canonical columns; row ``i`` (0-based position) is reported as row ``i + 1``.
    schema : TableSchema
    source : str
        How the message names the table.
    allowed : mapping, optional
        Column → the allowed values (e.g. ``{"label": classes}``).

    Returns
    -------
    RulesReport
    """
    allowed = dict(allowed or {})
    present = [c for c in schema.columns if c.name in df.columns]
    failures: list[RuleFailure | None] = []
    n_rules = 0
    for col in present:
        s = df[col.name].reset_index(drop=True)
        missing = s.isna().to_numpy(dtype=bool)
        if not col.nullable:
            n_rules += 1
            failures.append(_failure(col.name, "must not be null/NaN", missing, s))
        if col.type == "id" and not col.na_spelling_ok:
            n_rules += 1
            spelled = s.astype("string").isin(NA_SPELLINGS_ANY_CASE).fillna(False).to_numpy(dtype=bool)
            failures.append(
                _failure(
                    col.name,
                    "must be a real id, not text for a missing value (#N/A, NA, NULL, nan, None, ...): those "
                    f"rows would be fitted as one {col.name}; drop them or give them ids",
                    spelled & ~missing,
                    s,
                )
            )
        if col.type in ("float", "int"):
            v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            known = ~np.isnan(v)
            if col.min_value is not None or col.max_value is not None or col.finite:
                n_rules += 1
                lo = col.min_value if col.min_value is not None else -_FLOAT_MAX
                hi = col.max_value if col.max_value is not None else _FLOAT_MAX
                inside = ((v > lo) if col.strict_min else (v >= lo)) & (v <= hi)
                rule = (
                    f"must be {'>' if col.strict_min else '>='} {lo}" if col.min_value is not None else "must be finite"
                )
                failures.append(_failure(col.name, rule, known & ~inside, s))
            if col.max_abs is not None:
                n_rules += 1
                failures.append(
                    _failure(
                        col.name,
                        f"|value| must be <= {col.max_abs:g} (squares must stay finite)",
                        known & ~(np.abs(v) <= col.max_abs),
                        s,
                    )
                )
        if col.name in allowed:
            n_rules += 1
            values = list(allowed[col.name])
            inside_set = s.astype("string").isin(values).fillna(False).to_numpy(dtype=bool)
            failures.append(_failure(col.name, f"must be one of {values}", ~inside_set & ~missing, s))
    for col in present:
        if col.min_distinct and col.name not in allowed:
            n_rules += 1
            found = int(df[col.name].nunique(dropna=True))
            if found < col.min_distinct:
                rule = (
                    f"must have at least {col.min_distinct} distinct values (a single-class batch needs the label "
                    f"set declared: skills.classes in the spec); found {found}"
                )
                failures.append(RuleFailure(col.name, rule, len(df)))
    if schema.unique and all(c in df.columns for c in schema.unique):
        n_rules += 1
        key = df[list(schema.unique)].reset_index(drop=True)
        considered = ~key.isna().all(axis=1).to_numpy(dtype=bool)
        if len(schema.unique) == 1:
            considered = ~key.iloc[:, 0].isna().to_numpy(dtype=bool)
        dup = key.duplicated(keep=False).to_numpy(dtype=bool) & considered
        shown = key.iloc[:, 0] if len(schema.unique) == 1 else key
        failures.append(_failure(",".join(schema.unique), f"({', '.join(schema.unique)}) must be unique", dup, shown))
    if schema.distinct and all(c in df.columns for c in schema.distinct):
        n_rules += 1
        a, b = schema.distinct
        pair = df[[a, b]].reset_index(drop=True)
        same = (pair[a] == pair[b]).fillna(False).to_numpy(dtype=bool)
        failures.append(_failure(f"{a},{b}", f"{a} must differ from {b}", same, pair))
    report = RulesReport(
        table=schema.name,
        source=source,
        n_rows=len(df),
        n_rules=n_rules,
        failures=tuple(f for f in failures if f is not None),
    )
    log.debug(
        "checked %s against the %s contract: %d of %d rules failed", source, schema.name, len(report.failures), n_rules
    )
    return report
