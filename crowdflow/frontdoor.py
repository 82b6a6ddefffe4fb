"""The steps every Python front-door function shares: DataFrames in, checked like a pipeline's inputs, tables out.

Each job's front door (``crowdflow.skills(labels)``, ``crowdflow.rank(comparisons)``, …; see
:mod:`crowdflow.api`) is a few lines over these helpers, so the five functions read, check and return their
tables by one set of rules, the pipeline's:

- :func:`read_input`: a DataFrame through the file reader's column mapping and coercion
  (:func:`crowdflow.io.read_frame`: Crowd-Kit's names accepted), then through the table contract's rules
  (:func:`crowdflow.rules.check_rules`, what the pipeline's Great Expectations suite checks) under the
  ``validation`` policy;
- :func:`check_modes`: the ``checks=`` argument (``"block"``, ``"warn"``, or a mapping of check → policy, the
  pipeline's ``checks:`` section) as the modes :mod:`crowdflow.checks` takes, with the pipeline's defaults;
- :func:`input_errors`: a bad value reported by a fit (a ``ValueError``) becomes an
  :class:`~crowdflow.errors.InputError` naming the table; option errors (pydantic's ``ValidationError``) and
  the library's own errors pass as they are;
- :func:`written_tables`: the tables as a run writes them (cast to the job's output schemas of
  :data:`crowdflow.tables.OUTPUTS`, the way the Parquet writer does), so a front-door result equals the
  tables :func:`crowdflow.read_run` reads back from a run on the same data;
- :func:`callable_package`: ``crowdflow.skills`` is the skills package *and* its front door, so
  ``crowdflow.skills(df)`` and ``crowdflow.skills.fit_skills`` both work (same for ``personal_rankings`` and
  ``personal_models``).

This module imports no job package (each job's front door imports it), so the import graph stays acyclic.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, cast

import pandas as pd
from pydantic import ValidationError

from crowdflow.errors import CrowdflowError, InputError
from crowdflow.io import LoadedTable, read_frame
from crowdflow.missing import with_reasons
from crowdflow.rules import check_rules
from crowdflow.run_store import written_frame
from crowdflow.tables import INPUTS, OUTPUTS

log = logging.getLogger(__name__)

CheckMode = Literal["block", "warn"]

#: The ``checks=`` argument of a front-door function: one policy for every check, a mapping of check name →
#: policy (the keys of a pipeline spec's ``checks:`` section), or ``None`` for the pipeline's defaults.
Checks = CheckMode | Mapping[str, CheckMode] | None

#: Table kind → canonical column → the caller's column name (``{"labels": {"task": "item_id"}}``), or, for the
#: job's main table, the inner mapping alone (``{"task": "item_id"}``).
Columns = Mapping[str, str] | Mapping[str, Mapping[str, str]] | None

#: The pipeline's default policies (``crowdflow.spec.ChecksSpec``; a test keeps the two equal).
DEFAULT_MODES: dict[str, CheckMode] = {"validation": "block", "identifiability": "block", "isolated_workers": "warn"}
CHECK_NAMES = ("validation", "identifiability", "isolated_workers", "connectivity")


def default_connectivity(job: str) -> CheckMode:
    """The pipeline's default ``connectivity`` policy: warn for ranking (scores per component), block otherwise."""
    return "warn" if job == "ranking" else "block"


def check_modes(job: str, checks: Checks = None) -> dict[str, CheckMode]:
    """The policy of each pre-fit check of ``job``: validation, identifiability, isolated_workers, connectivity.

    Parameters
    ----------
    job : str
        The job (``skills``, ``ranking``, ``personal_rankings``, ``personal_models``, ``assignment``).
    checks : {"block", "warn"}, mapping or None
        ``None``: the pipeline's defaults (every check blocks except ``isolated_workers``, and ``connectivity`` of
        a ranking, which warn); a string: that policy for every check; a mapping: those checks changed, the rest
        at their defaults. An object with a ``modes(job)`` method and a ``validation`` field (a pipeline spec's
        ``ChecksSpec``) is taken as it is.

    Returns
    -------
    dict
        Check name → ``"block"`` or ``"warn"``.

    Raises
    ------
    ValueError
        An unknown check name or policy.
    """
    modes: dict[str, CheckMode] = {**DEFAULT_MODES, "connectivity": default_connectivity(job)}
    if checks is None:
        return modes
    if hasattr(checks, "modes") and hasattr(checks, "validation"):
        return {**cast(Any, checks).modes(job), "validation": cast(Any, checks).validation}
    given: Mapping[str, Any] = dict.fromkeys(CHECK_NAMES, checks) if isinstance(checks, str) else checks
    if not isinstance(given, Mapping):
        raise TypeError(f"checks must be 'block', 'warn' or a mapping of check -> policy, got {type(checks).__name__}")
    for name, mode in given.items():
        if name not in CHECK_NAMES:
            raise ValueError(f"unknown check {name!r}; use " + ", ".join(repr(c) for c in CHECK_NAMES))
        if mode not in ("block", "warn"):
            raise ValueError(f"checks.{name} must be 'block' or 'warn', got {mode!r}")
        modes[name] = mode
    return modes


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
        A failed rule raises :class:`~crowdflow.errors.ValidationFailed` (block) or is logged (warn).
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
    """Report a ``ValueError`` raised by a fit on this input as an :class:`~crowdflow.errors.InputError` naming it.

    The library's errors (:class:`~crowdflow.errors.CrowdflowError`: ``DegenerateInput``, ``GraphCheckFailed`` …)
    and pydantic's ``ValidationError`` (an option) pass unchanged; so does anything else (a bug stays a bug).
    """
    try:
        yield
    except (CrowdflowError, ValidationError):
        raise
    except (ValueError, FloatingPointError) as exc:  # includes numpy's LinAlgError
        raise InputError(str(exc) or type(exc).__name__, path=source) from exc


def written_tables(job: str, tables: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The tables as a run of ``job`` writes them: each cast to its output schema (:data:`crowdflow.tables.OUTPUTS`).

    A table with a declared schema keeps exactly its columns, in order, with the schema's types (ids as text,
    counts as int64); the others keep their columns. Equal to what :func:`crowdflow.read_run` reads back.
    """
    schemas = OUTPUTS.get(job, {})
    checked = with_reasons(dict(tables))  # the writer's rule: finite or null with a missing_reason
    return {name: written_frame(df, schemas.get(name)) for name, df in checked.items()}


class _CallablePackage(types.ModuleType):
    """A job package that is also its front-door function (``crowdflow.skills(labels, ...)``)."""

    __front_door__: Callable[..., Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__front_door__(*args, **kwargs)


def callable_package(module_name: str, front_door: Callable[..., Any]) -> None:
    """Make the package ``module_name`` callable as ``front_door`` (its signature shows in ``help`` and IDEs).

    The package stays a package: ``crowdflow.skills.fit_skills``, ``import crowdflow.skills.fit`` and pickling
    by module name work as before; only ``crowdflow.skills(...)`` is added.
    """
    module = sys.modules[module_name]
    module.__class__ = _CallablePackage
    module.__front_door__ = front_door  # type: ignore[attr-defined]  # set on the instance, typed on the class
    module.__signature__ = inspect.signature(front_door)  # type: ignore[attr-defined]  # read by inspect.signature
