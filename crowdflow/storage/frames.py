"""DataFrames as sources and sinks: a frame read like a file of the pipeline, tables shaped as a run writes them.

Each job's Python front door (``crowdflow.skills(labels)``, ``crowdflow.rank(comparisons)``, …; see
:mod:`crowdflow.frontdoor.api`) is a few lines over these helpers, so the five functions read, check and return
their tables by one set of rules, the pipeline's:

- :func:`read_input`: a DataFrame through the file reader's column mapping and coercion
  (:func:`crowdflow.storage.io.read_frame`: Crowd-Kit's names accepted), then through the table contract's rules
  (:func:`crowdflow.contracts.rules.check_rules`, what the pipeline's Great Expectations suite checks) under the
  ``validation`` policy (the policies themselves: :func:`crowdflow.checks.check_modes`);
- :func:`input_errors`: a bad value reported by a fit (a ``ValueError``) becomes an
  :class:`~crowdflow.contracts.errors.InputError` naming the table; option errors (pydantic's ``ValidationError``)
  and the library's own errors pass as they are;
- :func:`written_tables`: the tables as a run writes them (cast to the job's output schemas of
  :data:`crowdflow.contracts.tables.OUTPUTS`, the way the Parquet writer does), so a front-door result equals the
  tables :func:`crowdflow.read_run` reads back from a run on the same data.

This module imports no job package (each job's front door imports it), so the import graph stays acyclic.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import cast

import pandas as pd
from pydantic import ValidationError

from crowdflow.checks import CheckMode
from crowdflow.contracts.errors import CrowdflowError, InputError
from crowdflow.contracts.missing import with_reasons
from crowdflow.contracts.rules import check_rules
from crowdflow.contracts.tables import INPUTS, OUTPUTS
from crowdflow.storage.io import LoadedTable, read_frame
from crowdflow.storage.run_store import written_frame

log = logging.getLogger(__name__)

#: Table kind → canonical column → the caller's column name (``{"labels": {"task": "item_id"}}``), or, for the
#: job's main table, the inner mapping alone (``{"task": "item_id"}``).
Columns = Mapping[str, str] | Mapping[str, Mapping[str, str]] | None


def columns_for(kind: str, columns: Columns, main: str) -> dict[str, str]:
    """The column mapping of table ``kind`` in a front door's ``columns=`` argument (see :data:`Columns`)."""
    if not columns:
        return {}
    if all(isinstance(v, str) for v in columns.values()):
        return dict(cast(Mapping[str, str], columns)) if kind == main else {}
    nested = cast(Mapping[str, Mapping[str, str]], columns)
    return dict(nested.get(kind) or {})


def read_input(
    df: pd.DataFrame,
    kind: str,
    columns: Mapping[str, str] | None = None,
    *,
    validation: CheckMode = "block",
    allowed: Mapping[str, list[str]] | None = None,
    prepare: Callable[[LoadedTable], LoadedTable] | None = None,
) -> LoadedTable:
    """Read a DataFrame as a ``kind`` input table and check its contract, as a pipeline does with a file.

    Parameters
    ----------
    df : pandas.DataFrame
    kind : str
        The table contract (``labels``, ``truth``, ``comparisons``, ``agents``, ``edges``, ``candidates``,
        ``worker_caps``, ``task_caps``).
    columns : mapping, optional
        Canonical column → the column's name in ``df``.
    validation : {"block", "warn"}
        A failed rule raises :class:`~crowdflow.contracts.errors.ValidationFailed` (block) or is logged (warn).
    allowed : mapping, optional
        Column → allowed values (the skills ``classes``).
    prepare : callable, optional
        A step between reading and checking (the skills job's duplicate policy), as in the pipeline.

    Returns
    -------
    LoadedTable
    """
    table = read_frame(df, INPUTS[kind], columns, source=f"{kind} DataFrame")
    if prepare is not None:
        table = prepare(table)
    report = check_rules(table.df, INPUTS[kind], table.source, allowed)
    if not report.success:
        if validation == "block":
            report.raise_if_failed()
        log.warning("%s", report.message())
    return table


@contextlib.contextmanager
def input_errors(source: str) -> Iterator[None]:
    """Report a ``ValueError`` raised by a fit on this input as an :class:`~crowdflow.contracts.errors.InputError`
    naming it.

    The library's errors (:class:`~crowdflow.contracts.errors.CrowdflowError`: ``DegenerateInput``,
    ``GraphCheckFailed`` …)
    and pydantic's ``ValidationError`` (an option) pass unchanged; so does anything else (a bug stays a bug).
    """
    try:
        yield
    except (CrowdflowError, ValidationError):
        raise
    except (ValueError, FloatingPointError) as exc:  # includes numpy's LinAlgError
        raise InputError(str(exc) or type(exc).__name__, path=source) from exc


def written_tables(job: str, tables: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The tables as a run of ``job`` writes them: each cast to its output schema
    (:data:`crowdflow.contracts.tables.OUTPUTS`).

    A table with a declared schema keeps exactly its columns, in order, with the schema's types (ids as text,
    counts as int64); the others keep their columns. Equal to what :func:`crowdflow.read_run` reads back.
    """
    schemas = OUTPUTS.get(job, {})
    checked = with_reasons(dict(tables))  # the writer's rule: finite or null with a missing_reason
    return {name: written_frame(df, schemas.get(name)) for name, df in checked.items()}
