"""Every job's report.html from a real run, read in headless Chromium as a person reads it (issue #37).

Runs each shipped example spec of deployments/specs/ (skills, ranking twice so its trends are drawn, personal
rankings, personal models, assignment, next batch) into a temporary folder through the CLI, opens each run's page
in headless Chromium (tests/_browser.py) and checks the rendered page: no literal backtick, no empty card, every
drawn figure with a legend and a one-line reading, a sentence-only figure spanning its row, and the baseline beside
the method's number where the job has one (skills: majority vote; ranking: plain least squares). A screenshot of
each page goes to tests/artifacts/report-<job>.png. Skips without Chromium unless CROWDFLOW_REQUIRE_CHROMIUM is set.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
import yaml

from crowdflow.report import FIGURE_IDS, REPORT_FILE
from crowdflow.storage.run_store import latest_run

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "deployments" / "specs"
ARTIFACTS = ROOT / "tests" / "artifacts"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# spec file → job; the order matters: next-batch reads the newest rte-skills run
RUNS = [
    ("rte-skills.yaml", "skills"),
    ("ranking.yaml", "ranking"),
    ("ranking.yaml", "ranking"),
    ("personal-rankings.yaml", "personal_rankings"),
    ("personal-models.yaml", "personal_models"),
    ("assignment.yaml", "assignment"),
    ("next-batch.yaml", "next_batch"),
]

# what the header shows beside the method's number, by job
BASELINE = {
    "skills": ("accuracy vs baseline", "(majority vote)"),
    "ranking": ("ranking vs baseline", "plain least squares"),
    "personal_rankings": ("personal vs global ranking", "Spearman"),
    "next_batch": ("vs random picks", "drawn at random"),
}


def _browser_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("crowdflow_test_browser", ROOT / "tests" / "_browser.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spec(name: str, out: Path, tmp: Path) -> Path:
    """The example spec with absolute input paths, its output in ``out``."""
    spec = yaml.safe_load((SPECS / name).read_text())
    for value in spec.values():
        if isinstance(value, dict) and "path" in value:
            value["path"] = str((SPECS / value["path"]).resolve())
    if "skills_run" in spec:
        spec["skills_run"] = str(out / "rte-skills")
    spec["output"] = {**spec.get("output", {}), "dir": str(out)}
    path = tmp / name
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.flow
def test_every_jobs_report_reads_as_text_with_legends_and_baselines(prefect_harness: None, tmp_path: Path) -> None:
    from flows.cli import main

    module = _browser_module()
    chromium = module.browser()
    if chromium is None:
        if os.environ.get("CROWDFLOW_REQUIRE_CHROMIUM"):
            pytest.fail("CROWDFLOW_REQUIRE_CHROMIUM is set but no Chromium/Chrome was found")
        pytest.skip("no Chromium/Chrome on this machine (.ci/run installs it with apt-get where it can)")
    out = tmp_path / "out"
    pages: dict[str, Path] = {}  # job → its newest run's report
    for name, job in RUNS:
        assert main(["run", str(_spec(name, out, tmp_path))]) == 0, name
        # the newest run by the run store's one rule (two runs in one second sort by their commit, not their ids)
        newest = latest_run(out / yaml.safe_load((SPECS / name).read_text())["name"])
        assert json.loads((newest / "manifest.json").read_text())["job"] == job
        pages[job] = newest / REPORT_FILE
    profile = tmp_path / "profile"
    profile.mkdir()
    chrome = module.DevTools(chromium, profile, (1280, 1000))
    read: dict[str, dict] = {}
    try:
        chrome.call("Page.enable")
        ARTIFACTS.mkdir(exist_ok=True)
        for job, page in pages.items():
            chrome.events.clear()
            chrome.call("Page.navigate", url=page.resolve().as_uri())
            chrome.wait_for("Page.loadEventFired")
            read[job] = json.loads(chrome.evaluate(module.READ_REPORT_JS))  # type: ignore[arg-type]
            shot = chrome.screenshot(ARTIFACTS / f"report-{job}.png")
            assert shot[:8] == PNG_MAGIC and len(shot) > 50_000, job
    finally:
        chrome.close()
    for job, page in read.items():
        assert "`" not in page["text"], f"{job}: a literal backtick on the page"
        assert [f["id"] for f in page["figures"]] == list(FIGURE_IDS[job]), job
        drawn = 0
        for f in page["figures"]:
            assert f["h"] > 40 and f["body"], f"{job} {f['id']}: an empty card"
            if f["imgs"]:
                drawn += 1
                assert f["imgs"] == [True], f"{job} {f['id']}: an image that does not decode"
                assert f["legend"] and all(label and colour for label, colour in f["legend"]), (
                    f"{job} {f['id']}: no legend"
                )
                assert f["reading"], f"{job} {f['id']}: no one-line reading"
            elif f["fact"]:  # a sentence instead of a one-bar chart: it spans the row, never half a row
                assert f["sentence"] and f["w"] > 0.95 * page["grid"], f"{job} {f['id']}"
            else:  # nothing to plot: the card says why
                assert "nothing to plot" in f["body"] or "no " in f["body"].lower(), f"{job} {f['id']}: {f['body']}"
        assert drawn >= 2, f"{job}: only {drawn} figure(s) drawn"
        for card in page["cards"]:
            assert card["body"], f"{job} {card['id']}: an empty card"
        if job in BASELINE:
            label, what = BASELINE[job]
            assert label in page["header"] and what in page["header"], f"{job}: no baseline in {page['header']}"
    # the ranking's robust fit beside plain least squares, and its second run's trends count annotators and items
    rank = {f["id"]: f for f in read["ranking"]["figures"]}
    assert rank["fig-ranking-baseline"]["imgs"] == [True]
    assert (
        "Kendall τ" in rank["fig-ranking-baseline"]["reading"]
        and "rows flagged" in rank["fig-ranking-baseline"]["reading"]
    )
    trend = rank["fig-run-trends"]
    assert trend["imgs"] == [True] and "0 annotators joined, 0 left" in trend["reading"]
    assert "0 items joined, 0 left" in trend["reading"]
    assert any("comparisons flagged as outliers" in label for label, _ in trend["legend"])
