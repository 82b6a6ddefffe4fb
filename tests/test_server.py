"""Integration: a real ``prefect server start`` + a served deployment + a run triggered through the API.

Starts the server on 127.0.0.1 with a random free port and a temporary PREFECT_HOME, serves
``flows/deploy.py:run_pipeline`` from a second process (``flow.serve``), creates a flow run of that
deployment through the client (``run_deployment``, with the spec as a JSON parameter, as the UI's form
would), waits for it to finish and reads the Parquet outputs. Every process is started in its own
process group and killed at the end, pass or fail. About 40-70 s on 2 cores (mostly the server's
first start: migrations). Deselect with ``-m 'not server'``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 240.0  # server health + deployment registration, each (a loaded 2-core box: ~40 s)
RUN_TIMEOUT = 240.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path, api_url: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PREFECT_API_URL", None)
    env.update(
        {
            "PREFECT_HOME": str(home),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_UI_ENABLED": "false",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
            "OPENBLAS_NUM_THREADS": "1",
        }
    )
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


def _get_json(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return None


def _wait_for(what: str, check: object, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what}: process exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        if check():  # type: ignore[operator]
            return
        time.sleep(0.5)
    raise AssertionError(f"{what}: not ready after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL what is left (a served runner may ignore one signal)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # children of the group (flow-run subprocesses) too
    proc.wait(timeout=10)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    finally:
        for p in reversed(procs):  # the served runner first, then the server
            _stop(p)


def test_served_deployment_runs_through_the_api(
    tmp_path: Path, processes: list[subprocess.Popen], rte_dir: Path
) -> None:
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    prefect = Path(sys.executable).with_name("prefect")
    server_log = tmp_path / "server.log"
    with server_log.open("w") as out:
        server = subprocess.Popen(
            [str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=_env(tmp_path / "server-home", None),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            start_new_session=True,
        )
    processes.append(server)
    _wait_for("server", lambda: _get_json(f"{api}/health") is True, server, server_log, START_TIMEOUT)
    timings["server_healthy"] = time.monotonic() - t0

    serve_script = tmp_path / "serve.py"
    serve_script.write_text(
        textwrap.dedent(
            """
            from flows.deploy import run_pipeline

            if __name__ == "__main__":
                run_pipeline.serve(name="it", limit=1, pause_on_shutdown=False, print_starting_message=False)
            """
        )
    )
    serve_log = tmp_path / "serve.log"
    with serve_log.open("w") as out:
        runner = subprocess.Popen(
            [sys.executable, str(serve_script)],
            env=_env(tmp_path / "client-home", api),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
    processes.append(runner)
    deployment_url = f"{api}/deployments/name/crowdflow-pipeline/it"
    _wait_for("served deployment", lambda: _get_json(deployment_url) is not None, runner, serve_log, START_TIMEOUT)
    timings["deployment_registered"] = time.monotonic() - t0

    deployment = _get_json(deployment_url)
    assert isinstance(deployment, dict)
    schema = deployment["parameter_openapi_schema"]
    # the UI builds its run form from this: spec is one of the jobs' models, each with its own inputs and options
    assert schema["required"] == ["spec"]
    refs = [b["$ref"] for b in schema["properties"]["spec"]["anyOf"]]
    assert refs[0] == "#/definitions/SkillsPipeline" and len(refs) == 6  # one form per job
    assert {"skills", "runner", "checks"} <= set(schema["definitions"]["SkillsPipeline"]["properties"])

    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    out_dir = tmp_path / "out"
    spec = {
        "name": "served-rte",
        "job": "skills",
        "labels": {"path": str(rte_dir / "labels.csv")},
        "truth": {"path": str(rte_dir / "truth.csv")},
        "skills": {"method": "mv", "tie_break": "smallest"},
        "output": {"dir": str(out_dir)},
    }
    with temporary_settings(updates={PREFECT_API_URL: api}):
        flow_run = run_deployment("crowdflow-pipeline/it", parameters={"spec": spec}, timeout=RUN_TIMEOUT)
    timings["run_finished"] = time.monotonic() - t0
    assert flow_run.state is not None
    assert flow_run.state.is_completed(), f"{flow_run.state!r}\n{serve_log.read_text()[-3000:]}"

    (manifest_path,) = sorted(out_dir.rglob("manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    assert manifest["status"] == "completed" and manifest["flow_run_id"] is not None
    consensus = pd.read_parquet(manifest_path.parent / "consensus.parquet")
    truth = pd.read_csv(rte_dir / "truth.csv", dtype=str)
    assert len(consensus) == 800 and set(consensus["task"].astype(str)) == set(truth["task"])
    acc = consensus.merge(truth, on="task", suffixes=("", "_true")).eval("label == label_true").mean()
    assert acc == pytest.approx(manifest["metrics"]["accuracy"]) and acc > 0.85
    print("server test timings (s from start): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
