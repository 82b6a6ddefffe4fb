"""Errors the pipeline reports to users, and the one rule that sorts every failure.

Errors a Python caller may meet also derive from the built-in exception the same situation raises elsewhere
(:class:`MissingColumn` is a ``KeyError``, :class:`BadValue` and :class:`DegenerateInput` are ``ValueError``), so
code written for pandas or Crowd-Kit keeps catching them.

Each error class carries enough context (file, row, column, component) for a one-line CLI message. Library
functions raise ``ValueError`` for bad arguments; the pipeline layers turn bad *inputs* into these.

Two functions hold the rule every layer uses (tasks' retry conditions, the CLI's exit codes):

- :func:`is_transient`: a fault that may pass (a database or scheduler not reachable, a connection reset,
  a timeout, an I/O error): the only kind of failure a task retries;
- :func:`user_error`: the :class:`CrowdflowError` a failure means to a user (exit 2 with one line naming
  the file, column, option or path): bad input or spec, and the environment's refusals (disk full,
  read-only file system, permission denied, a symbolic link loop, out of memory, a database that stays
  down after the retries); ``None`` for anything else, which is a bug (exit 1, "unexpected error").
"""

from __future__ import annotations

import errno
from typing import Any, cast


class CrowdflowError(Exception):
    """Base class: an expected failure with a message meant for the user (CLI exit code 2)."""

    exit_code = 2

    def __reduce__(self) -> tuple[Any, ...]:
        # unpickled (a Dask worker's exception reaching the flow) with the attributes it was raised with, since
        # the subclasses' constructors take more than the message
        return (_rebuild, (type(self), str(self), dict(self.__dict__)))


def _rebuild(cls: type[CrowdflowError], message: str, state: dict[str, Any]) -> CrowdflowError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


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


class _BuiltinMessage:
    """Mixin for an error class that also derives from a built-in: ``str()`` is the plain message.

    ``KeyError.__str__`` quotes its argument (``'missing column'`` in quotes); the library's messages are
    sentences, so ``str()`` returns the message as given.
    """

    def __str__(self) -> str:
        args = cast(BaseException, self).args
        return str(args[0]) if args else ""


class MissingColumn(_BuiltinMessage, InputError, KeyError):
    """A required column is missing: also a ``KeyError``, what pandas (and a Crowd-Kit user) raise for one.

    Every reader reports a missing column with this class (the rule: :func:`crowdflow.storage.io.read_frame` and
    the estimators), so a notebook's ``except KeyError`` catches it and the CLI still exits 2.
    """


class BadValue(_BuiltinMessage, InputError, ValueError):
    """A value the fit cannot use (a worker without a skill, a gold label not among the labels): also a
    ``ValueError``, what a Crowd-Kit user catches in the same situation. CLI exit 2 like every input error."""


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


class RunnerError(CrowdflowError):
    """The compute cluster a spec names cannot take the run: the scheduler at ``runner.address`` is not reachable,
    or no worker joined it within ``runner.worker_timeout``. The message names the address."""


class TransientError(CrowdflowError):
    """A fault of the environment that may pass: a database not reachable, a timeout, an I/O error.

    Tasks retry it; once the retries are spent it is reported like any other error (exit 2).
    """


class ResourceError(CrowdflowError):
    """The machine refused: no space left, a read-only file system, permission denied, out of memory."""


# errno values a retry can fix: the device or the network hiccuped
_TRANSIENT_ERRNO = frozenset(
    getattr(errno, name)
    for name in (
        "EIO", "EAGAIN", "EBUSY", "EINTR", "ETIMEDOUT", "ECONNRESET", "ECONNREFUSED", "ECONNABORTED",
        "EHOSTUNREACH", "ENETUNREACH", "ENETDOWN", "ENETRESET", "EPIPE", "ESTALE",
    )
    if hasattr(errno, name)
)  # fmt: skip

# how a permanent fault reads when an OSError carries no errno (pyarrow's, for instance)
_PERMANENT_WORDS = (
    "no space left", "quota", "read-only file system", "permission denied", "not permitted", "no such file",
    "not a directory", "is a directory", "file exists", "too many levels of symbolic links", "file name too long",
)  # fmt: skip

_OS_MESSAGES = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ELOOP: "symbolic link loop",
    errno.ENOENT: "not found",
    errno.ENOTDIR: "a file stands where a folder is needed",
    errno.EEXIST: "already exists",
    errno.EISDIR: "is a folder, not a file",
    errno.ENAMETOOLONG: "file name too long",
    errno.EMFILE: "too many open files",
}


def _is_network_error(exc: BaseException) -> bool:
    """An HTTP client's transport failure (``httpx.TransportError``: refused, reset, timed out), by class name, so the
    library need not import the client: the orchestrator's API (Prefect talks to it with httpx) did not answer."""
    return any(c.__name__ == "TransportError" and c.__module__ == "httpx" for c in type(exc).__mro__)


def is_transient(exc: BaseException) -> bool:
    """Whether a retry can fix ``exc`` (the retry condition of every retried task).

    True for :class:`TransientError`, connection errors, timeouts and ``OSError`` of a transient kind (EIO,
    EAGAIN, ECONNREFUSED, ETIMEDOUT, …; an ``OSError`` without an errno unless its text names a permanent
    fault). False for everything else: bad input or spec, a ``ValueError`` or ``TypeError``, ``MemoryError``,
    a full or read-only disk, a missing file, a permission.
    """
    if isinstance(exc, TransientError):
        return True
    if isinstance(exc, CrowdflowError):
        return False
    if isinstance(exc, ConnectionError | TimeoutError) or _is_network_error(exc):
        return True
    if not isinstance(exc, OSError):
        return False
    if exc.errno is None:  # pyarrow and others raise OSError without errno: known permanent faults by their text
        return not any(word in str(exc).lower() for word in _PERMANENT_WORDS)
    return exc.errno in _TRANSIENT_ERRNO


def user_error(exc: BaseException) -> CrowdflowError | None:
    """The :class:`CrowdflowError` that ``exc`` means to a user, or ``None`` when it is a bug.

    Parameters
    ----------
    exc : BaseException
        A failure that reached the command line.

    Returns
    -------
    CrowdflowError or None
        ``exc`` itself when it is one; a :class:`ResourceError` for out-of-memory and for ``OSError`` (the
        message names the path and says what the system refused); a :class:`TransientError` for an HTTP
        transport failure (the orchestrator's API did not answer; the message names its URL); an
        :class:`InputError` for input nested too deeply to parse and for a feature not implemented for this input;
        ``None`` otherwise.
    """
    if isinstance(exc, CrowdflowError):
        return exc
    if isinstance(exc, MemoryError):
        return ResourceError(
            "out of memory: the input does not fit this machine's memory; run on a Dask cluster "
            "(runner: {kind: dask}) or on a machine with more memory"
        )
    if isinstance(exc, RecursionError):
        return InputError("the input is nested too deeply to read")
    if isinstance(exc, NotImplementedError):
        return InputError(str(exc) or "not supported for this input")
    if _is_network_error(exc):
        try:
            where = f" at {exc.request.url}"  # type: ignore[attr-defined]  # httpx.RequestError.request
        except (AttributeError, RuntimeError):  # raised before the request existed
            where = ""
        return TransientError(
            f"the service{where} did not answer ({type(exc).__name__}: {exc}); if it is the Prefect API, start the "
            "server PREFECT_API_URL names or unset PREFECT_API_URL to use the embedded one, then run again"
        )
    if isinstance(exc, OSError):
        what = _OS_MESSAGES.get(exc.errno or 0) or exc.strerror or str(exc) or type(exc).__name__
        paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
        where = " -> ".join(paths) if paths else "(the system did not say which file)"
        cls = TransientError if is_transient(exc) else ResourceError
        return cls(f"{where}: {what}")
    return None
