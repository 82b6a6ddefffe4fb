"""The deployment's run form in the Prefect UI shows one job's inputs and options, in plain words (issue #23).

Starts a real ``prefect server`` with its UI on a free port (``PREFECT_UI_API_URL`` pointing the UI at it),
serves ``run_pipeline`` twice (default parameters: a skills spec and a ranking spec), opens each deployment's
"Custom run" page in headless Chromium and reads the rendered page: the chosen job's inputs and option
blocks are there with their descriptions; the other jobs' inputs are not; no field reads "Property is type
'None'"; the class docstrings' numpy sections are gone. Also writes a screenshot of the skills form. Skips
without Chromium (``.ci/run`` installs it). Marked ``server`` (~40-90 s on 2 cores).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
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

import pytest

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
TIMEOUT = 240.0

FORMS = {
    "form-skills": ({"name": "form-skills", "job": "skills", "labels": {"path": "labels.csv"}}, "skills"),
    "form-ranking": ({"name": "form-ranking", "job": "ranking", "comparisons": {"path": "c.csv"}}, "ranking"),
}
# words of each job's own form (field titles and descriptions as the UI renders them)
OWN = {
    "skills": ["Labels", "The workers' answers", "Truth", "Skills", "How the answers are combined"],
    "ranking": ["Comparisons", "Pairwise judgements", "Ranking", "How the ranking is fitted"],
}
OTHERS = {
    "skills": ["Comparisons", "Agents", "Edges", "Candidates", "Open Tasks", "Personal Models"],
    "ranking": ["Labels", "Truth", "Agents", "Candidates", "How the answers are combined"],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get_json(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return None


def _wait(what: str, check: object, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what}: exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        if check():  # type: ignore[operator]
            return
        time.sleep(0.5)
    raise AssertionError(f"{what}: not ready after {TIMEOUT:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)


def _page_text(url: str, profile: Path, screenshot: Path | None = None) -> str:
    """The rendered page's text (Chromium runs the app until the virtual-time budget is spent)."""
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=20000",
        "--window-size=1280,1600",
        "--hide-scrollbars",
    ]
    if screenshot is not None:
        subprocess.run([CHROMIUM, *flags, f"--screenshot={screenshot}", url], capture_output=True, timeout=120)  # type: ignore[list-item]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)  # type: ignore[list-item]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom.stdout))


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (.ci/run installs it with apt-get)")
def test_run_form_shows_the_chosen_jobs_inputs_only(tmp_path: Path, processes: list[subprocess.Popen]) -> None:
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        {
            "PREFECT_HOME": str(tmp_path / "home"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_UI_API_URL": api,  # the UI asks this API (default: port 4200)
            "PYTHONPATH": str(ROOT),
        }
    )
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("prefect")),
                "server",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            start_new_session=True,
        )
    processes.append(server)
    _wait("server", lambda: _get_json(f"{api}/health") is True, server, log)

    script = tmp_path / "serve.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from prefect import serve
            from flows.deploy import run_pipeline

            if __name__ == "__main__":
                forms = {json.dumps({k: v[0] for k, v in FORMS.items()})}
                serve(*[run_pipeline.to_deployment(name=k, parameters={{"spec": s}}) for k, s in forms.items()],
                      print_starting_message=False)
            """
        )
    )
    serve_log = tmp_path / "serve.log"
    with serve_log.open("w") as out:
        runner = subprocess.Popen(
            [sys.executable, str(script)],
            env={**env, "PREFECT_API_URL": api},
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
    processes.append(runner)
    ids = {}
    for name in FORMS:
        url = f"{api}/deployments/name/crowdflow-pipeline/{name}"
        _wait(f"deployment {name}", lambda url=url: _get_json(url) is not None, runner, serve_log)
        dep = _get_json(url)
        assert isinstance(dep, dict)
        ids[name] = dep["id"]

    for name, (_, job) in FORMS.items():
        shot = tmp_path / f"{name}.png" if job == "skills" else None
        text = _page_text(
            f"http://127.0.0.1:{port}/deployments/deployment/{ids[name]}/run", tmp_path / f"chrome-{name}", shot
        )
        assert "Parameters" in text, f"{name}: the run form did not render:\n{text[:2000]}"
        for word in OWN[job]:
            assert word in text, f"{name}: {word!r} missing from the form"
        fields = text[text.find("Parameters") :]
        for word in OTHERS[job]:
            assert f" {word} " not in fields and f" {word} (Optional)" not in fields, f"{name}: {word!r} shown"
        assert "Property is type" not in text, f"{name}: a field still offers a 'None' type"
        assert "----------" not in text and "Attributes" not in text
        if shot is not None:
            assert shot.is_file() and shot.stat().st_size > 10_000
