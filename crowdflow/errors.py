"""Errors the pipeline reports to users.

Each carries enough context (file, row, column, component) for a one-line CLI message. Library
functions raise ``ValueError`` for bad arguments; the pipeline layers turn bad *inputs* into these.
"""

from __future__ import annotations


class CrowdflowError(Exception):
    """Base class: an expected failure with a message meant for the user (CLI exit code 2)."""

    exit_code = 2


class SpecError(CrowdflowError):
    """The pipeline spec (YAML) is malformed or inconsistent."""


class InputError(CrowdflowError):
    """An input file cannot be read or does not have the expected columns / types.

    Parameters
    ----------
    message : str
        What is wrong.
    path : str, optional
        The offending file.
    column : str, optional
        The offending column.
    rows : list of int, optional
        1-based data row numbers (header excluded) of example offending rows.
    """

    def __init__(
        self,
        message: str,
        path: str | None = None,
        column: str | None = None,
        rows: list[int] | None = None,
    ) -> None:
        self.path = path
        self.column = column
        self.rows = rows or []
        parts = []
        if path:
            parts.append(f"{path}")
        if column:
            parts.append(f"column '{column}'")
        if self.rows:
            parts.append("rows " + ", ".join(str(r) for r in self.rows[:5]))
        where = ": ".join([", ".join(parts)]) if parts else ""
        super().__init__(f"{where}: {message}" if where else message)


class DegenerateInput(CrowdflowError, ValueError):
    """Valid tables that admit no fit: only ties, fewer items than the rank, an agent without data or prior.

    Raised by the models (it is a ``ValueError``, so library callers that catch bad arguments keep
    working); the CLI reports it like any input error (exit 2) and a task never retries it.

    Parameters
    ----------
    message : str
        What the data lack and which option or input change fixes it.
    reason : str
        Short machine-readable code (``no_usable_comparison``, ``rank_too_large``, …).
    """

    def __init__(self, message: str, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


class ValidationFailed(CrowdflowError):
    """A table failed its schema expectations (Great Expectations suite or Arrow schema)."""

    def __init__(self, message: str, failures: list[dict[str, object]] | None = None) -> None:
        self.failures = failures or []
        super().__init__(message)


class GraphCheckFailed(CrowdflowError):
    """A blocking graph check (identifiability, connectivity) failed."""

    def __init__(self, message: str, check: str) -> None:
        self.check = check
        super().__init__(message)


class WarehouseError(CrowdflowError):
    """A database query or load failed (bad SQL, unknown table, refused load), or a driver is missing.

    Messages name the connection with any password redacted; a failed load has been rolled back.
    """
