"""Progress of long fits: a Prefect progress artifact per fit, plus in-process listeners (the CLI's bar).

The library's solvers call ``progress(fraction)``; :func:`fit_progress` builds that callback inside a
task run. It creates a progress artifact (shown on the run's page in the Prefect UI) and updates it at
most every ``min_interval`` seconds, and it forwards every value to the listeners registered with
:func:`add_listener` (the ``crowdflow`` CLI draws a bar on stderr with one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.context import FlowRunContext, TaskRunContext

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


@contextmanager
def fit_progress(key: str, description: str, min_interval: float = 0.5) -> Iterator[Callable[[float], None]]:
    """Yield a ``progress(fraction)`` callback backed by a Prefect progress artifact (0 → 100 %).

    The artifact's key is :func:`tasks.artifacts.artifact_key` of ``key`` (``<pipeline>-fit-skills-progress``).

    The artifact is created at 0 % on entry and set to 100 % when the block exits without an error.
    Artifact updates are throttled to one per ``min_interval`` seconds (each is an API call); the
    listeners see every value. Outside a flow or task run (a plain ``.fn`` call) there is no artifact.
    A failure to talk to the API never fails the fit.
    """
    artifact_id: Any = None
    if TaskRunContext.get() is not None or FlowRunContext.get() is not None:  # not in plain ``.fn`` calls
        try:
            artifact_id = create_progress_artifact(progress=0.0, key=artifact_key(key), description=description)
        except Exception:  # pragma: no cover - reporting must not break a fit
            artifact_id = None
    state = {"sent": 0.0, "at": time.monotonic()}

    def report(fraction: float) -> None:
        pct = max(0.0, min(100.0, 100.0 * float(fraction)))
        for listener in list(_listeners):
            listener(description, pct / 100.0)
        now = time.monotonic()
        if artifact_id is not None and pct > state["sent"] and (pct >= 100.0 or now - state["at"] >= min_interval):
            try:
                update_progress_artifact(artifact_id=artifact_id, progress=pct)
            except Exception:  # pragma: no cover
                return
            state["sent"], state["at"] = pct, now

    yield report
    report(1.0)
