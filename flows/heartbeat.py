"""Flow-run heartbeats that stop as soon as the run's work ends (the flows :func:`flows.pipeline.run_spec` starts).

Prefect's flow engine sends a ``prefect.flow-run.heartbeat`` event when a flow run starts and every
``flows.heartbeat_frequency`` seconds (default 180) after it, from a thread that sleeps in one-second steps; at the
end of the run the engine joins that thread, so every run waits out the current step: 0-1 s (0.5 s on average)
added to each ``crowdflow run``, more than the whole fit of a 10^4-row run (issue #36 measured it).

The flows ``run_spec`` calls itself run with Prefect's own heartbeat thread switched off (a temporary
``flows.heartbeat_frequency: None`` around that call only) and this module's in its place: the same event, on the
same resource (``prefect.flow-run.<id>``, its name and Prefect's version) with the same related resources (the
flow, the deployment, the tags), at the same interval, sent when the flow starts and then every interval, from a
thread that waits on an event, so stopping it is immediate. Zombie-run automations
(https://docs.prefect.io/v3/advanced/detect-zombie-flows) see what they saw before. A flow run ``run_spec`` does
not start itself (a deployment's ``run_pipeline``, a flow a test calls directly) keeps Prefect's thread, and a
user setting of ``flows.heartbeat_frequency`` is kept (its value, the interval; Prefect's 30 s floor).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

MINIMUM_INTERVAL = 30  # seconds: Prefect's floor for flows.heartbeat_frequency (prefect.flow_engine)


@dataclass
class _Armed:
    """What :func:`own_heartbeats` hands to the flow run it starts: the interval, and the beat once started (a
    holder, not a context value: Prefect may run the flow function in a copy of the caller's context)."""

    interval: int
    beat: _Beat | None = None
    used: bool = False


_ARMED: contextvars.ContextVar[_Armed | None] = contextvars.ContextVar("crowdflow_heartbeat", default=None)


class _Beat:
    """A daemon thread calling ``send`` now and then every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, send: Callable[[], None], interval: float) -> None:
        self._stop = threading.Event()
        self._send = send
        self._interval = interval
        self._thread = threading.Thread(
            target=contextvars.copy_context().run,  # the caller's Prefect settings (API URL) in the thread
            args=(self._loop,),
            name="crowdflow-heartbeat",
            daemon=True,
        )
        self._thread.start()

    def _loop(self) -> None:
        while True:  # the first beat is sent even when the run is over before the thread is scheduled
            with contextlib.suppress(Exception):  # as Prefect's: a heartbeat that cannot be sent never fails a run
                self._send()
            if self._stop.wait(self._interval):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


@contextlib.contextmanager
def own_heartbeats() -> Iterator[None]:
    """Around a flow call: Prefect's heartbeat thread off for the flow run it starts, :func:`start_beating` armed.

    Does nothing when heartbeats are off in the settings. Stops the beat (at once) when the call returns or raises.
    """
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings, temporary_settings

    seconds = get_current_settings().flows.heartbeat_frequency
    if seconds is None:
        yield
        return
    armed = _Armed(max(int(seconds), MINIMUM_INTERVAL))
    token = _ARMED.set(armed)
    try:
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            yield
    finally:
        _ARMED.reset(token)
        if armed.beat is not None:
            armed.beat.stop()


def start_beating() -> bool:
    """Inside a flow run started under :func:`own_heartbeats`: send its heartbeats (now, then every interval).

    Returns whether a beat was started (False: not armed, already started, or no flow run; then Prefect's own
    thread, if any, beats).
    """
    armed = _ARMED.get()
    if armed is None or armed.used:
        return False
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return False
    armed.used = True  # one beat per armed call: a subflow started inside keeps Prefect's own thread
    resource, related = heartbeat_event(ctx.flow_run, ctx.flow.name if ctx.flow else "")

    def send() -> None:
        from prefect.events.utilities import emit_event

        emit_event(event="prefect.flow-run.heartbeat", resource=resource, related=related)

    armed.beat = _Beat(send, armed.interval)
    return True


def heartbeat_event(flow_run: Any, flow_name: str) -> tuple[dict[str, str], list[Any]]:
    """The heartbeat event's resource and related resources for ``flow_run``, as Prefect's engine builds them."""
    import prefect
    from prefect.events.related import tags_as_related_resources
    from prefect.events.schemas.events import RelatedResource

    resource = {
        "prefect.resource.id": f"prefect.flow-run.{flow_run.id}",
        "prefect.resource.name": flow_run.name or "",
        "prefect.version": prefect.__version__,
    }
    related: list[Any] = []
    if flow_run.flow_id:
        related.append(
            RelatedResource.model_validate(
                {
                    "prefect.resource.id": f"prefect.flow.{flow_run.flow_id}",
                    "prefect.resource.role": "flow",
                    "prefect.resource.name": flow_name,
                }
            )
        )
    if flow_run.deployment_id:
        related.append(
            RelatedResource.model_validate(
                {
                    "prefect.resource.id": f"prefect.deployment.{flow_run.deployment_id}",
                    "prefect.resource.role": "deployment",
                }
            )
        )
    related += tags_as_related_resources(set(flow_run.tags or []))
    return resource, related
