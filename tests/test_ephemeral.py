"""The CLI's embedded Prefect API (flows/ephemeral.py): started early, only when no API is configured, and the run
lands in PREFECT_HOME's database as with Prefect's own temporary server."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from flows.ephemeral import embedded_api

ROOT = Path(__file__).resolve().parents[1]


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "PREFECT_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_API_URL", None)
    return env


def test_no_server_when_an_api_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    api = embedded_api()
    assert api.process is None
    api.wait()  # nothing to wait for
    monkeypatch.delenv("PREFECT_API_URL")

    from prefect.settings import PREFECT_API_URL, temporary_settings

    # Prefect imported already (a flow test, a notebook): the settings are read before anything starts
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        api = embedded_api()
        assert api.process is None
        api.confirm()
        assert api.process is None and os.environ.get("PREFECT_API_URL") is None


def test_started_before_prefect_is_imported_and_stopped_when_the_run_does_not_go_ahead(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from flows.ephemeral import embedded_api\n"
        "api = embedded_api()\n"
        "assert 'prefect' not in sys.modules, 'prefect imported before the server started'\n"
        "proc = api.process\n"
        "assert proc is not None and proc.poll() is None\n"
        "api.stop()\n"
        "assert api.process is None and proc.poll() is not None\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def test_bad_spec_starts_no_server(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: x\njob: skills\n")  # no labels
    res = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", str(spec)],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert res.returncode == 2, res.stderr[-2000:]
    assert "temporary server" not in res.stdout + res.stderr


@pytest.mark.slow
def test_cli_run_on_the_embedded_api_records_the_run(tmp_path: Path, rte_dir: Path) -> None:
    """~30-70 s: a fresh PREFECT_HOME is migrated by the embedded server, then the run goes through it."""
    home, out = tmp_path / "home", tmp_path / "out"
    home.mkdir()
    args = ["skills", "--labels", str(rte_dir / "labels.csv"), "--method", "mv", "--out", str(out), "--name", "rte"]
    res = subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        env={**_env(home), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "300"},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (run_dir,) = (out / "rte").iterdir()
    assert (run_dir / "report.html").is_file()
    logs = res.stdout + res.stderr
    assert "Starting temporary server" in logs and "Stopping temporary server" in logs
    with sqlite3.connect(home / "prefect.db") as db:
        runs = db.execute("select id, state_name from flow_run").fetchall()
        assert [state for _, state in runs] == ["Completed"]
        run_id = runs[0][0]
        n_tasks = db.execute("select count(*) from task_run where flow_run_id = ?", (run_id,)).fetchone()[0]
        keys = {k for (k,) in db.execute("select key from artifact where flow_run_id = ?", (run_id,))}
        logs_sent = [m for (m,) in db.execute("select message from log where flow_run_id = ?", (run_id,))]
    assert n_tasks >= 5
    # the last lines too: the CLI ends the process only after Prefect's log service has sent what it held
    assert any(m.startswith("Finished in state Completed") for m in logs_sent), logs_sent
    assert {"rte-validation-labels", "rte-run-report", "rte-run-report-file"} <= keys
