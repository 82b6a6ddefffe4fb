"""Progress of long fits: a Prefect progress artifact per fit, plus in-process listeners (the CLI's bar).

The library's solvers call ``progress(fraction)``; :func:`fit_progress` builds that callback inside a
task run. It creates a progress artifact (shown on the run's page in the Prefect UI) and updates it at
most every ``min_interval`` seconds, and it forwards every value to the listeners registered with
:func:`add_listener` (the ``crowdflow`` CLI draws a bar on stderr with one). The lines a loop gives its ``note``
method (one per pass of the partitioned Dawid–Skene EM, sent from the Dask worker that runs it) go to the run's
log: the first, then at most one every ``line_interval`` seconds, and the last one at the end.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.context import FlowRunContext, TaskRunContext
from prefect.logging import get_run_logger

from tasks.artifacts import artifact_key

Listener = Callable[[str, float], None]

_listeners: list[Listener] = []
_lock = threading.Lock()


def add_listener(listener: Listener) -> None:
    """Call ``listener(description, fraction)`` on every progress report in this process."""
    with _lock:
        if listener not in _listeners:
            _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


class FitProgress:
    """The callback :func:`fit_progress` yields: ``progress(fraction)`` and ``progress.note(line)``
    (:mod:`crowdflow.progress`)."""

    def __init__(self, description: str, artifact_id: Any, log: Any, min_interval: float, line_interval: float) -> None:
        self.description = description
        self.artifact_id = artifact_id
        self.log = log
        self.min_interval = min_interval
        self.line_interval = line_interval
        self.sent, self.at = 0.0, time.monotonic()
        self.line_at: float | None = None
        self.unlogged: str | None = None

    def __call__(self, fraction: float) -> None:
        pct = max(0.0, min(100.0, 100.0 * float(fraction)))
        for listener in list(_listeners):
            listener(self.description, pct / 100.0)
        now = time.monotonic()
        if self.artifact_id is not None and pct > self.sent and (pct >= 100.0 or now - self.at >= self.min_interval):
            try:
                update_progress_artifact(artifact_id=self.artifact_id, progress=pct)
            except Exception:  # pragma: no cover
                return
            self.sent, self.at = pct, now

    def note(self, line: str) -> None:
        """Log ``line`` if it is the first or ``line_interval`` seconds have passed since the last one logged;
        otherwise keep it as the one :meth:`flush` logs."""
        now = time.monotonic()
        if self.line_at is None or now - self.line_at >= self.line_interval:
            self.log.info("%s", line)
            self.line_at, self.unlogged = now, None
        else:
            self.unlogged = line

    def flush(self) -> None:
        """Log the last line not logged yet (so the log ends with the loop's last pass)."""
        if self.unlogged is not None:
            self.log.info("%s", self.unlogged)
            self.unlogged = None


@contextmanager
def fit_progress(
    key: str, description: str, min_interval: float = 0.5, line_interval: float = 2.0
) -> Iterator[FitProgress]:
    """Yield a ``progress(fraction)`` callback backed by a Prefect progress artifact (0 → 100 %), whose
    ``note(line)`` writes the fit's pass lines to the run's log.

    The artifact's key is :func:`tasks.artifacts.artifact_key` of ``key`` (``<pipeline>-fit-skills-progress``).

    The artifact is created at 0 % on entry and set to 100 % when the block exits without an error.
    Artifact updates are throttled to one per ``min_interval`` seconds (each is an API call); the
    listeners see every value. Lines: the first, then at most one per ``line_interval`` seconds, and the last one
    when the block exits (also on an error), through the run's logger (the module's logger outside a run).
    Outside a flow or task run (a plain ``.fn`` call) there is no artifact.
    A failure to talk to the API never fails the fit.
    """
    artifact_id: Any = None
    log: Any = logging.getLogger(__name__)
    if TaskRunContext.get() is not None or FlowRunContext.get() is not None:  # not in plain ``.fn`` calls
        log = get_run_logger()
        try:
            artifact_id = create_progress_artifact(progress=0.0, key=artifact_key(key), description=description)
        except Exception:  # pragma: no cover - reporting must not break a fit
            artifact_id = None
    report = FitProgress(description, artifact_id, log, min_interval, line_interval)
    try:
        yield report
    finally:
        report.flush()
    report(1.0)
