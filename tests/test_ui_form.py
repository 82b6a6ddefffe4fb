"""The deployment's run form in the Prefect UI, as a person sees it at 1280 x 800 (issues #23, #37).

Starts a real ``prefect server`` with its UI on a free port (``PREFECT_UI_API_URL`` pointing the UI at it), serves
``run_pipeline`` with a skills spec as its default parameters, opens the deployment's "Custom run" page in headless
Chromium driven over the DevTools protocol (tests/_browser.py) and, in the rendered page:

- the job buttons all fit in the 1280 px window (none cut off, no tab strip to scroll);
- clicks each job's button: that job's inputs and options are shown, no other job's; its required inputs carry no
  "(Optional)"; the job field is a plain choice (no "const", no "(Optional)");
- in each job, clicks each source kind of its first input (File, Folder, URL, SQL query): exactly that kind's
  fields are shown (their titles), the required ones without "(Optional)", no other kind's;
- nowhere "is a const", "Property is type 'None'" or a docstring's numpy section.

A screenshot of each job's form goes to tests/artifacts/form-<job>.png, and to docs/img/ (the committed pictures of
docs/reference/form.md) with ``CROWDFLOW_UPDATE_SCREENSHOTS=1``. Skips without Chromium unless
``CROWDFLOW_REQUIRE_CHROMIUM`` is set (.ci/run installs it). Marked ``server`` (~1-2 min on 2 cores).
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
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from crowdflow.spec import JOB_INPUTS, JOB_INPUTS_ALL, JOB_MODELS, JOB_OPTIONS

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
TIMEOUT = 240.0

SPEC = {"name": "form-skills", "job": "skills", "labels": {"path": "labels.csv"}}
ARTIFACTS = ROOT / "tests" / "artifacts"
IMAGES = ROOT / "docs" / "img"


def _browser_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("crowdflow_test_browser", ROOT / "tests" / "_browser.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


# JavaScript run in the page. A choice (anyOf) is a .schema-form-property-any-of-input: its label, its buttons, and a
# fieldset with the chosen branch's fields, each a .schema-form-property with a .schema-form-property__label.
_JS = """
const own = el => el.querySelector(':scope > .p-label__header .schema-form-property__label')?.innerText.trim();
const choice = label => [...document.querySelectorAll('.schema-form-property-any-of-input')].find(c => own(c) === label);
window.cf = {
  choices: () => [...document.querySelectorAll('.schema-form-property-any-of-input')].map(c => ({
    label: own(c),
    buttons: [...c.querySelector(':scope > .p-label__body > .p-button-group').querySelectorAll('button')].map(b => ({
      text: b.innerText.trim(), right: b.getBoundingClientRect().right, selected: b.getAttribute('aria-selected')}))})),
  click: (label, text) => {
    const c = choice(label);
    const b = [...c.querySelector(':scope > .p-label__body > .p-button-group').querySelectorAll('button')]
      .find(x => x.innerText.trim() === text);
    b.click();
    return !!b;
  },
  selected: label => [...choice(label).querySelectorAll(':scope > .p-label__body > .p-button-group button')]
    .find(b => b.getAttribute('aria-selected') === 'true')?.innerText.trim(),
  fields: label => {  // the labels of the chosen branch's own fields (one level down)
    const body = choice(label).querySelector(':scope > .p-label__body > .schema-form-property__fields');
    const props = body.querySelector('.schema-form-properties');
    return [...props.children].map(f => f.querySelector('.schema-form-property__label')?.innerText.trim())
      .filter(x => x);
  },
  text: () => document.body.innerText,
  scrollTo: label => { choice(label).scrollIntoView({block: 'start'}); return true; },
};
true
"""

# the inputs of each job, as the form titles them; options blocks as pydantic titles them
INPUT_TITLES = {k: k.replace("_", " ").capitalize() for k in JOB_INPUTS_ALL}


def _plain(label: str) -> str:
    return label.removesuffix(" (Optional)").strip()


@pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CROWDFLOW_REQUIRE_CHROMIUM"),
    reason="no Chromium on this machine (.ci/run installs it with apt-get)",
)
def test_run_form_shows_the_chosen_job_and_source_kind_only(tmp_path: Path, processes: list[subprocess.Popen]) -> None:
    browser = _browser_module()
    chromium = browser.browser()
    assert chromium is not None, "CROWDFLOW_REQUIRE_CHROMIUM is set but no Chromium/Chrome was found"
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
                spec = {json.dumps(SPEC)}
                serve(run_pipeline.to_deployment(name="form-skills", parameters={{"spec": spec}}),
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
    url = f"{api}/deployments/name/crowdflow-pipeline/form-skills"
    _wait("deployment", lambda: _get_json(url) is not None, runner, serve_log)
    dep = _get_json(url)
    assert isinstance(dep, dict)

    profile = tmp_path / "chrome"
    profile.mkdir()
    chrome = browser.DevTools(chromium, profile, (1280, 800))
    shots: dict[str, bytes] = {}
    try:
        chrome.call("Emulation.setDeviceMetricsOverride", width=1280, height=800, deviceScaleFactor=1, mobile=False)
        chrome.call("Page.enable")
        chrome.call("Page.navigate", url=f"http://127.0.0.1:{port}/deployments/deployment/{dep['id']}/run")
        chrome.wait_until("document.body && document.body.innerText.includes('personal_rankings')", 120)
        chrome.evaluate(_JS)
        choices = chrome.evaluate("cf.choices()")
        jobs = next(c for c in choices if c["label"] == "spec")
        assert [b["text"] for b in jobs["buttons"]] == list(JOB_MODELS)
        assert all(b["right"] <= 1280 for b in jobs["buttons"]), f"a job button is cut off: {jobs['buttons']}"
        for job, model in JOB_MODELS.items():
            assert chrome.evaluate(f"cf.click('spec', {json.dumps(job)})")
            chrome.wait_until(f"cf.selected('spec') === {json.dumps(job)}", 30)
            time.sleep(0.3)
            fields = chrome.evaluate("cf.fields('spec')")
            plain = [_plain(f) for f in fields]
            required, optional = JOB_INPUTS[job]
            mine = {INPUT_TITLES[k] for k in required + optional}
            others = set(INPUT_TITLES.values()) - mine
            assert mine <= set(plain), f"{job}: inputs missing from the form: {mine - set(plain)} ({fields})"
            assert not others & set(plain), f"{job}: another job's inputs shown: {others & set(plain)}"
            options = {"Skills", "Ranking", "Personal Rankings", "Personal Models", "Assignment"}
            own_options = {model.model_fields[JOB_OPTIONS[job]].title or JOB_OPTIONS[job].replace("_", " ").title()}
            assert own_options <= set(plain) and not (options - own_options) & set(plain), f"{job}: {fields}"
            assert "Job" in fields, f"{job}: the job field reads {[f for f in fields if 'Job' in f]}"
            for key in required:
                assert INPUT_TITLES[key] in fields, f"{job}: required input {key} marked optional"
            text = chrome.evaluate("cf.text()")
            assert "is a const" not in text and "Property is type" not in text and "----------" not in text
            ARTIFACTS.mkdir(exist_ok=True)
            chrome.evaluate("cf.scrollTo('spec')")
            time.sleep(0.3)
            shots[job] = chrome.screenshot(ARTIFACTS / f"form-{job}.png")
            first = INPUT_TITLES[required[0]]
            kinds = next(c for c in chrome.evaluate("cf.choices()") if c["label"] == first)
            assert [b["text"] for b in kinds["buttons"]] == ["Folder", "File", "URL", "SQL query"], kinds
            for kind, (expect, needed) in SOURCE_FORMS.items():
                assert chrome.evaluate(f"cf.click({json.dumps(first)}, {json.dumps(kind)})")
                chrome.wait_until(f"cf.selected({json.dumps(first)}) === {json.dumps(kind)}", 30)
                want = json.dumps(sorted(expect), separators=(",", ":"))
                with contextlib.suppress(
                    AssertionError
                ):  # the fields re-render a moment after the button (else: below)
                    chrome.wait_until(
                        f"JSON.stringify(cf.fields({json.dumps(first)}).map(f => f.replace(' (Optional)', '')).sort())"
                        f" === {json.dumps(want)}",
                        10,
                    )
                shown = chrome.evaluate(f"cf.fields({json.dumps(first)})")
                assert sorted(_plain(f) for f in shown) == sorted(expect), f"{job}.{first} as {kind}: {shown}"
                for title in expect:
                    assert (title in shown) == (title in needed), f"{job}.{first} as {kind}: {title} ({shown})"
    finally:
        chrome.close()
    if os.environ.get("CROWDFLOW_UPDATE_SCREENSHOTS"):
        for job, png in shots.items():
            (IMAGES / f"form-{job}.png").write_bytes(png)
    assert all(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000 for png in shots.values())


# each source kind's field titles, and which of them are required (shown without "(Optional)")
SOURCE_FORMS = {
    "File": (["Path", "Format", "Columns"], ["Path"]),
    "Folder": (["Folder", "Columns"], ["Folder"]),
    "URL": (["URL", "Storage Options", "Columns"], ["URL"]),
    "SQL query": (["Sql", "Params", "Connection", "Password Env", "Password Secret", "Columns"], ["Sql", "Connection"]),
}
