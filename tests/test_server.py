"""Integration: a real ``prefect server start``, the shipped deployments, a process worker elsewhere, chained runs.

One server (random free port, temporary PREFECT_HOME, the UI and the services these tests do not use turned off:
the scheduler would only add runs of the cron deployments) serves the whole module:

- ``test_deployments_travel_and_chain_by_events``: ``prefect deploy --all`` from this working copy, as the README
  says; a process worker started in an empty folder on a *second* working copy of the project (the Prefect
  Variable ``crowdflow_project_dir`` names it, the deployments' pull step reads it at run time); the shipped
  ``rte-skills`` deployment is run through the API, and the shipped ``next-batch`` deployment must start by
  itself from the skills run's completion (its deployment trigger). Both runs' outputs land in the second copy,
  their run pages (flow runs) hold their task runs and artifacts keyed by the pipeline name, and the install
  extra every deployment needs is the one the README documents.
- ``test_served_deployment_runs_a_custom_spec``: ``flow.serve`` (what ``crowdflow serve`` runs) and a run with a
  custom spec as the JSON parameter the UI's form sends.

Every process is started in its own process group and killed at the end, pass or fail; flow-run processes a
worker started are killed by their id. About 2-3 minutes on a busy 2-core box (mostly the server's first start
and the flow-run processes' imports). Deselect with ``-m 'not server'``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 240.0  # server health, deployment registration, each (a loaded 2-core box: ~40 s)
RUN_TIMEOUT = 300.0
PREFECT = Path(sys.executable).with_name("prefect")
# services the tests need: events (persister, triggers, actions: the chained run), task-run recorder (run pages)
OFF_SERVICES = ("SCHEDULER", "LATE_RUNS", "FOREMAN", "CANCELLATION_CLEANUP", "PAUSE_EXPIRATIONS", "REPOSSESSOR")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path, api_url: str | None, **extra: str) -> dict[str, str]:
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
    env.update(extra)
    return env


def _get_json(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return None


def _wait_for(what: str, check: Callable[[], Any], proc: subprocess.Popen, log: Path, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what}: process exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not ready after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL what is left (a worker or served runner may ignore one signal)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # children of the group (flow-run subprocesses) too
    proc.wait(timeout=10)


@dataclass
class Server:
    api: str
    tmp: Path
    procs: list[subprocess.Popen] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)  # flow-run processes started by a worker (own sessions)

    def start(self, name: str, argv: list[str], cwd: Path, **env: str) -> tuple[subprocess.Popen, Path]:
        log = self.tmp / f"{name}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                argv,
                env=_env(self.tmp / f"{name}-home", self.api, **env),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc, log


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    srv = Server(api=f"http://127.0.0.1:{port}/api", tmp=tmp)
    log = tmp / "server.log"
    off = {f"PREFECT_SERVER_SERVICES_{name}_ENABLED": "false" for name in OFF_SERVICES}
    t0 = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(PREFECT), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=_env(tmp / "server-home", None, **off),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp,
            start_new_session=True,
        )
    try:
        _wait_for("server", lambda: _get_json(f"{srv.api}/health") is True, proc, log, START_TIMEOUT)
        print(f"server healthy after {time.monotonic() - t0:.1f} s")
        yield srv
    finally:
        for p in reversed(srv.procs):  # workers and served runners first, then the server
            _stop(p)
        for pid in srv.pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _stop(proc)


@contextlib.contextmanager
def _client(api: str) -> Iterator[Any]:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        yield client


def _working_copy(dest: Path) -> Path:
    """A second working copy of the project: the files git knows (as on disk, edits included), nothing else."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.decode().split("\0")):
            src = ROOT / name
            if src.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)
    else:  # not a git checkout (an unpacked sdist): the project minus its local state
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(".venv", ".git", "*cache*", "crowdflow-out"))
    return dest


def _final(client: Any, run_id: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.read_flow_run(run_id)
        if run.state is not None and run.state.is_final():
            return run
        time.sleep(1.0)
    raise AssertionError(f"flow run {run_id} not finished after {timeout:.0f} s: {run.state!r}")


def _task_names(client: Any, flow_run_id: Any) -> set[str]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {r.name for r in runs}


def _artifact_keys(client: Any, flow_run_id: Any) -> set[str]:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    arts = client.read_artifacts(
        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
    )
    return {a.key for a in arts if a.key}


def _run_page(client: Any, flow_run_id: Any, tasks: set[str], keys: set[str], timeout: float = 60.0) -> set[str]:
    """Wait until the run page holds these task runs and artifact keys (events are recorded asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        names, have = _task_names(client, flow_run_id), _artifact_keys(client, flow_run_id)
        if all(any(n == t or n.startswith(f"{t}-") for n in names) for t in tasks) and keys <= have:
            return have
        if time.monotonic() > deadline:
            raise AssertionError(f"run {flow_run_id}: task runs {sorted(names)}, artifacts {sorted(have)}")
        time.sleep(1.0)


def _deploy_extra() -> set[str]:
    import re

    reqs = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["deploy"]
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in reqs}


def test_deployments_travel_and_chain_by_events(server: Server, tmp_path: Path) -> None:
    from prefect.client.schemas.actions import VariableCreate, WorkPoolCreate
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.workers.process import ProcessWorker

    from crowdflow.spec import parse_spec
    from flows.pipeline import EXTRA_MODULES

    t0 = time.monotonic()
    timings: dict[str, float] = {}
    copy = _working_copy(tmp_path / "second-copy")
    worker_dir = tmp_path / "worker-cwd"  # the worker starts here: neither working copy
    worker_dir.mkdir()
    with _client(server.api) as client:
        client.create_work_pool(
            WorkPoolCreate(
                name="crowdflow", type="process", base_job_template=ProcessWorker.get_default_base_job_template()
            )
        )
        client.create_variable(VariableCreate(name="crowdflow_project_dir", value=str(copy)))

    # the README's deploy command, from the first working copy
    deploy = subprocess.run(
        [str(PREFECT), "--no-prompt", "deploy", "--all", "--prefect-file", "deployments/prefect.yaml"],
        cwd=ROOT,
        env=_env(tmp_path / "deploy-home", server.api),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )
    assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
    timings["deployed"] = time.monotonic() - t0

    with _client(server.api) as client:
        deployments = {d.name: d for d in client.read_deployments()}
        shipped = [d["name"] for d in yaml.safe_load((ROOT / "deployments/prefect.yaml").read_text())["deployments"]]
        assert set(shipped) <= set(deployments) and "rte-skills-dask" in shipped
        needed: set[str] = set()
        for name in shipped:
            dep = deployments[name]
            # what the worker runs: the project folder named by the Variable, resolved when a run starts
            assert dep.pull_steps == [
                {"flows.operator.enter_project": {"directory": "{{ prefect.variables.crowdflow_project_dir }}"}}
            ], (name, dep.pull_steps)
            if "spec" in dep.parameters:
                needed |= set(parse_spec(dep.parameters["spec"], base_dir=None).extras())
        # every deployed spec's needs are in the README's one install for workers, and that install is here
        assert needed == {"report", "dask"}  # rte-skills-dask: dask
        assert {"matplotlib", "dask", "duckdb", "psycopg", "sqlglot"} <= _deploy_extra()
        assert all(importlib.util.find_spec(m) for extra in needed for m in EXTRA_MODULES[extra])
        assert deployments["next-batch"].schedules == []  # chained by its trigger, not by a clock

    # a process worker in another folder, whose project copy (and code: PYTHONPATH) is the second working copy
    worker, worker_log = server.start(
        "worker",
        [str(PREFECT), "worker", "start", "--pool", "crowdflow", "--name", "elsewhere"],
        worker_dir,
        PYTHONPATH=str(copy),
        PREFECT_WORKER_QUERY_SECONDS="2",
        PREFECT_WORKER_PREFETCH_SECONDS="2",
    )
    with temporary_settings(updates={PREFECT_API_URL: server.api}):
        skills_run = run_deployment("crowdflow-pipeline/rte-skills", timeout=0)  # the shipped parameters
    with _client(server.api) as client:
        skills_run = _final(client, skills_run.id, RUN_TIMEOUT)
        timings["skills_run_finished"] = time.monotonic() - t0
        assert skills_run.state.is_completed(), f"{skills_run.state!r}\n{worker_log.read_text()[-4000:]}"
        if skills_run.infrastructure_pid:
            server.pids.append(int(str(skills_run.infrastructure_pid).rsplit(":", 1)[-1]))

        # the chained run: created by the trigger on the skills run's completion, nobody asked for it
        loop_filter = DeploymentFilter(id=DeploymentFilterId(any_=[deployments["next-batch"].id]))

        def chained() -> Any:
            runs = client.read_flow_runs(deployment_filter=loop_filter)
            return runs[0] if runs else None

        loop = _wait_for("chained next-batch run", chained, worker, worker_log, RUN_TIMEOUT)
        timings["chained_run_created"] = time.monotonic() - t0
        loop = _final(client, loop.id, RUN_TIMEOUT)
        timings["chained_run_finished"] = time.monotonic() - t0
        assert loop.state.is_completed(), f"{loop.state!r}\n{worker_log.read_text()[-4000:]}"
        assert loop.created_by is not None and loop.created_by.type == "AUTOMATION", loop.created_by
        assert loop.created >= skills_run.state.timestamp  # after the skills run completed
        if loop.infrastructure_pid:
            server.pids.append(int(str(loop.infrastructure_pid).rsplit(":", 1)[-1]))

        # one run page per pipeline run: its tasks and its artifacts, under keys that carry the pipeline name
        keys = _run_page(
            client,
            skills_run.id,
            {"ingest-labels", "validate-labels", "check-graph-skills", "fit-skills", "report", "export"},
            {"rte-skills-run-report", "rte-skills-run-report-file", "rte-skills-run-outputs"},
        )
        assert all(k.startswith("rte-skills-") for k in keys), keys
        assert {"rte-skills-validation-labels", "rte-skills-validation-truth", "rte-skills-skills-graph"} <= keys
        loop_keys = _run_page(client, loop.id, {"load-skills-run", "fit-next-batch", "export"}, set())
        assert loop_keys and all(k.startswith("sample-next-batch-") for k in loop_keys), loop_keys

    # outputs: where the second copy's specs say (its crowdflow-out), none in the copy the deployments came from
    out = copy / "crowdflow-out"
    (skills_manifest,) = sorted((out / "rte-skills").glob("*/manifest.json"))
    manifest = json.loads(skills_manifest.read_text())
    assert manifest["status"] == "completed" and manifest["flow_run_id"] == str(skills_run.id)
    assert manifest["inputs"][0]["path"] == str(copy / "crowdflow/data/snow_rte/labels.csv")  # resolved, no ../
    consensus = pd.read_parquet(skills_manifest.parent / "consensus.parquet")
    assert len(consensus) == 800 and manifest["metrics"]["accuracy"] > 0.85
    (loop_manifest,) = sorted((out / "sample-next-batch").glob("*/manifest.json"))
    chained_run = json.loads(loop_manifest.read_text())
    assert chained_run["flow_run_id"] == str(loop.id) and chained_run["metrics"]["n_assigned"] == 40
    assert chained_run["skills_run"]["run_id"] == manifest["run_id"]  # the run whose completion started it
    assert chained_run["skills_run"]["age_hours"] < 1
    # logged paths are resolved (the worker streams its flow runs' logs): no deployments/specs/../../
    logged = [line for line in worker_log.read_text().splitlines() if "ingested" in line or "exported run" in line]
    assert logged and not [line for line in logged if "../" in line], logged
    assert any(str(copy / "crowdflow/data/snow_rte/labels.csv") in line for line in logged), logged
    for run_id in (str(skills_run.id), str(loop.id)):
        assert not list((ROOT / "crowdflow-out").glob(f"*/*{run_id[:8]}/manifest.json"))
    print("server test timings (s from start): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))


def test_served_deployment_runs_a_custom_spec(server: Server, tmp_path: Path, rte_dir: Path) -> None:
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    t0 = time.monotonic()
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
    runner, serve_log = server.start("serve", [sys.executable, str(serve_script)], ROOT, PYTHONPATH=str(ROOT))
    deployment_url = f"{server.api}/deployments/name/crowdflow-pipeline/it"
    _wait_for("served deployment", lambda: _get_json(deployment_url) is not None, runner, serve_log, START_TIMEOUT)

    deployment = _get_json(deployment_url)
    assert isinstance(deployment, dict)
    schema = deployment["parameter_openapi_schema"]
    # the UI builds its run form from this: spec is one of the jobs' models, each with its own inputs and options
    assert schema["required"] == ["spec"]
    refs = [b["$ref"] for b in schema["properties"]["spec"]["anyOf"]]
    assert refs[0] == "#/definitions/SkillsPipeline" and len(refs) == 6  # one form per job
    assert {"skills", "runner", "checks"} <= set(schema["definitions"]["SkillsPipeline"]["properties"])

    out_dir = tmp_path / "out"
    spec = {
        "name": "served-rte",
        "job": "skills",
        "labels": {"path": str(rte_dir / "labels.csv")},
        "truth": {"path": str(rte_dir / "truth.csv")},
        "skills": {"method": "mv", "tie_break": "smallest"},
        "output": {"dir": str(out_dir)},
    }
    with temporary_settings(updates={PREFECT_API_URL: server.api}):
        flow_run = run_deployment("crowdflow-pipeline/it", parameters={"spec": spec}, timeout=RUN_TIMEOUT)
    assert flow_run.state is not None
    assert flow_run.state.is_completed(), f"{flow_run.state!r}\n{serve_log.read_text()[-3000:]}"
    (manifest_path,) = sorted(out_dir.rglob("manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    assert manifest["status"] == "completed" and manifest["flow_run_id"] == str(flow_run.id)
    consensus = pd.read_parquet(manifest_path.parent / "consensus.parquet")
    truth = pd.read_csv(rte_dir / "truth.csv", dtype=str)
    assert len(consensus) == 800 and set(consensus["task"].astype(str)) == set(truth["task"])
    acc = consensus.merge(truth, on="task", suffixes=("", "_true")).eval("label == label_true").mean()
    assert acc == pytest.approx(manifest["metrics"]["accuracy"]) and acc > 0.85
    print(f"served run finished after {time.monotonic() - t0:.1f} s")


def test_operator_errors_end_failed_with_one_line(server: Server, tmp_path: Path, rte_dir: Path) -> None:
    """Issue #33 item 6: what an operator gets wrong ends the flow run ``Failed`` (never ``Crashed``) with a one-line
    state message that names what to fix, in the API (the UI's run page) and in ``prefect flow-run inspect``.

    One deployment per mistake, on a process worker of their own pool: the project folder missing on the worker or
    not a project (the pull step, before the flow is loaded), and inside the flow an unreachable Dask scheduler, a
    missing Prefect Secret block and an unreachable warehouse.
    """
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.workers.process import ProcessWorker

    base = {
        "name": "ops",
        "job": "skills",
        "labels": {"path": str(rte_dir / "labels.csv")},
        "skills": {"method": "mv", "tie_break": "smallest"},
        "output": {"dir": str(tmp_path / "out")},
    }
    closed = f"127.0.0.1:{_free_port()}"  # nothing listens there
    cases: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
        "missing-project": (str(tmp_path / "no-such-project"), base, ("project folder not found", "no-such-project")),
        "not-a-project": (str(tmp_path), base, ("is not a crowdflow project folder", "flows/deploy.py")),
        "no-scheduler": (
            str(ROOT),
            {**base, "runner": {"kind": "dask", "address": f"tcp://{closed}", "worker_timeout": 2}},
            ("RunnerError", f"tcp://{closed}"),
        ),
        "no-secret": (
            str(ROOT),
            {
                **base,
                "labels": {
                    "sql": "select task, worker, label from labels",
                    "connection": f"postgresql://crowd@{closed}/db",
                    "password_secret": "no-such-block",
                },
            },
            ("no-such-block", "not found"),
        ),
        "no-warehouse": (
            str(ROOT),
            {
                **base,
                "output": {
                    "dir": str(tmp_path / "out"),
                    "warehouse": {"connection": f"postgresql://crowd@{closed}/db", "password_env": "PGPASSWORD_CF"},
                },
            },
            ("cannot reach the database", closed),
        ),
    }
    with _client(server.api) as client:
        client.create_work_pool(
            WorkPoolCreate(
                name="crowdflow-ops", type="process", base_job_template=ProcessWorker.get_default_base_job_template()
            )
        )
        flow_id = client.create_flow_from_name("crowdflow-pipeline")
        for name, (directory, _, _) in cases.items():
            client.create_deployment(
                flow_id=flow_id,
                name=name,
                entrypoint="flows/deploy.py:run_pipeline",
                work_pool_name="crowdflow-ops",
                pull_steps=[{"flows.operator.enter_project": {"directory": directory}}],
                enforce_parameter_schema=False,
            )
    worker, worker_log = server.start(
        "worker-ops",
        [str(PREFECT), "worker", "start", "--pool", "crowdflow-ops", "--name", "ops"],
        tmp_path,
        PYTHONPATH=str(ROOT),
        PGPASSWORD_CF="x",
        PREFECT_WORKER_QUERY_SECONDS="2",
        PREFECT_WORKER_PREFETCH_SECONDS="2",
    )
    with temporary_settings(updates={PREFECT_API_URL: server.api}):
        started = {
            name: run_deployment(f"crowdflow-pipeline/{name}", parameters={"spec": spec}, timeout=0).id
            for name, (_, spec, _) in cases.items()
        }
    with _client(server.api) as client:
        for name, run_id in started.items():
            run = _final(client, run_id, RUN_TIMEOUT)
            if run.infrastructure_pid:
                server.pids.append(int(str(run.infrastructure_pid).rsplit(":", 1)[-1]))
            message = run.state.message or ""
            assert run.state.is_failed(), f"{name}: {run.state!r}\n{worker_log.read_text()[-3000:]}"
            assert "\n" not in message and all(w in message for w in cases[name][2]), (name, message)
    inspect = subprocess.run(
        [str(PREFECT), "flow-run", "inspect", str(started["missing-project"])],
        env=_env(tmp_path / "inspect-home", server.api),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )
    assert inspect.returncode == 0, inspect.stderr[-2000:]
    assert "FAILED" in inspect.stdout and "project folder not found" in inspect.stdout, inspect.stdout[-2000:]
    assert worker.poll() is None  # the worker outlived every failed run
