"""Flow-run heartbeats (flows/heartbeat.py): a run started by ``run_spec`` sends the same heartbeat event Prefect's
engine sends, once at the start, from a thread that is gone when the run returns; Prefect's own heartbeat thread is
off for that run only; any other flow run keeps Prefect's."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from prefect import flow

from crowdflow.spec import parse_spec
from flows.common import run_id_for
from flows.heartbeat import own_heartbeats
from flows.pipeline import run_spec

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

HEARTBEAT = "prefect.flow-run.heartbeat"


@pytest.fixture
def beats(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[dict[str, Any]]]:
    """Heartbeat events sent by this module's thread ("ours") and by Prefect's engine thread ("prefect")."""
    import prefect.events.utilities
    import prefect.flow_engine

    seen: dict[str, list[dict[str, Any]]] = {"ours": [], "prefect": []}

    def recorder(who: str, real: Any) -> Any:
        def emit(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("event") == HEARTBEAT:
                seen[who].append(kwargs)
                return None
            return real(*args, **kwargs)

        return emit

    monkeypatch.setattr(prefect.events.utilities, "emit_event", recorder("ours", prefect.events.utilities.emit_event))
    monkeypatch.setattr(prefect.flow_engine, "emit_event", recorder("prefect", prefect.flow_engine.emit_event))
    return seen


@flow(name="heartbeat-probe")
def probe() -> dict[str, Any]:
    """A job flow's first step (run_id_for starts the beat), and the settings the engine read for this run."""
    from prefect.runtime import flow_run
    from prefect.settings import get_current_settings

    run_id_for(None)
    return {"frequency": get_current_settings().flows.heartbeat_frequency, "flow_run_id": str(flow_run.id)}


def _beat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "crowdflow-heartbeat" and t.is_alive()]


def test_run_spec_run_beats_once_from_our_thread_and_stops_it(
    tmp_path: Path, rte_dir: Path, beats: dict[str, list[dict[str, Any]]]
) -> None:
    spec = parse_spec(
        {
            "name": "beat",
            "job": "skills",
            "labels": {"path": str(rte_dir / "labels.csv")},
            "skills": {"method": "mv"},
            "output": {"dir": str(tmp_path / "out")},
        }
    )
    summary = run_spec(spec)
    short_id = summary["run_id"].split("-", 1)[1]  # <UTC timestamp>-<flow run id's first 8 digits>
    assert beats["prefect"] == []  # Prefect's own thread was off for this run
    (event,) = beats["ours"]  # sent at the start; the next one would be due 180 s later
    assert event["resource"]["prefect.resource.id"].startswith(f"prefect.flow-run.{short_id}")
    assert event["resource"]["prefect.resource.name"]
    roles = {r["prefect.resource.role"]: r for r in event["related"]}
    assert roles["flow"]["prefect.resource.name"] == "crowdflow-skills"
    assert _beat_threads() == []  # stopped when the run returned
    from prefect.settings import get_current_settings

    assert get_current_settings().flows.heartbeat_frequency == 180  # restored after the run


def test_armed_flow_switches_prefect_thread_off_for_that_run_only(beats: dict[str, list[dict[str, Any]]]) -> None:
    with own_heartbeats():
        inside = probe()
    assert inside["frequency"] is None  # what Prefect's engine read: no thread of its own
    assert [e["resource"]["prefect.resource.id"] for e in beats["ours"]] == [
        f"prefect.flow-run.{inside['flow_run_id']}"
    ]
    assert beats["prefect"] == [] and _beat_threads() == []

    plain = probe()  # not started by run_spec: Prefect's heartbeat, ours not armed
    assert plain["frequency"] == 180
    assert len(beats["ours"]) == 1
    assert [e["resource"]["prefect.resource.id"] for e in beats["prefect"]] == [
        f"prefect.flow-run.{plain['flow_run_id']}"
    ]


def test_user_frequency_is_kept(beats: dict[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    import flows.heartbeat

    intervals: list[float] = []
    real = flows.heartbeat._Beat

    class Spy(real):  # type: ignore[misc,valid-type]
        def __init__(self, send: Any, interval: float) -> None:
            intervals.append(interval)
            super().__init__(send, interval)

    monkeypatch.setattr(flows.heartbeat, "_Beat", Spy)
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 45}), own_heartbeats():
        probe()
    assert intervals == [45] and len(beats["ours"]) == 1
