"""The run report (report.html): structure, figures per job, intervals, the atomic export, a real browser."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import crowdflow.report.page as report_mod
from crowdflow.io import write_run
from crowdflow.report import FIGURE_IDS, REPORT_FILE, render_report, report_from_run_dir

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Page(HTMLParser):
    """Checks that every element is closed in order and collects ids, images and links."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: list[str] = []
        self.images: list[dict[str, str]] = []
        self.links: list[str] = []
        self.figure_imgs: dict[str, list[dict[str, str]]] = {}
        self.doctype = False

    def handle_decl(self, decl: str) -> None:
        self.doctype = self.doctype or decl.lower() == "doctype html"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "img":
            self.images.append(a)
            fig = next((s for s in reversed(self.stack) if s.startswith("figure#")), None)
            if fig:
                self.figure_imgs.setdefault(fig.split("#", 1)[1], []).append(a)
        if "href" in a:
            self.links.append(a["href"])
        if tag not in VOID:
            self.stack.append(f"figure#{a['id']}" if tag == "figure" and "id" in a else tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack:
            self.errors.append(f"</{tag}> without an open element")
            return
        top = self.stack.pop()
        if top.split("#", 1)[0] != tag:
            self.errors.append(f"</{tag}> closes <{top}>")


def parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    assert page.doctype, "no <!DOCTYPE html>"
    assert not page.errors, page.errors[:5]
    assert page.stack == [], f"unclosed elements: {page.stack}"
    assert len(page.ids) == len(set(page.ids)), "duplicate ids"
    return page


def check_self_contained(page: _Page) -> None:
    for img in page.images:
        assert img["src"].startswith("data:image/png;base64,"), img["src"][:60]
        assert base64.b64decode(img["src"].split(",", 1)[1])[:8] == PNG_MAGIC
        assert img.get("alt")
    for href in page.links:
        assert "://" not in href and not href.startswith("//"), f"external link {href}"


def assert_figures(page: _Page, job: str, drawn: set[str] | None = None) -> None:
    ids = set(page.ids)
    for fig_id in FIGURE_IDS[job]:
        assert fig_id in ids, f"{fig_id} missing"
    for fig_id in drawn if drawn is not None else FIGURE_IDS[job]:
        (img,) = page.figure_imgs[fig_id]
        assert fig_id in img["alt"]


# ------------------------------------------------------------------------------------------------
# library: one page per job, without Prefect


def _manifest(job: str, **extra: object) -> dict:
    return {
        "run_id": "20260101T000000Z-abcdef12",
        "pipeline": "test",
        "job": job,
        "inputs": [{"name": "labels", "path": "/data/in.csv", "sha256": "ab" * 32, "rows": 10, "format": "csv"}],
        "timings": {"ingest_validate": 0.5, "fit": 0.25},
        "checks": {"validation": "block"},
        **extra,
    }


@pytest.fixture(scope="module")
def skills_tables(rte_dir: Path) -> dict[str, pd.DataFrame]:
    from crowdflow.graphs import worker_graph_report
    from crowdflow.labels import encode_labels
    from crowdflow.skills import fit_skills

    lm = encode_labels(pd.read_csv(rte_dir / "labels.csv", dtype=str))
    graph = worker_graph_report(lm)
    res = fit_skills(lm, method="pgd", solver="scaled", graph_report=graph)
    return {"consensus": res.consensus, "skills": res.skills, "components": res.diagnostics}


def test_skills_page_is_valid_and_self_contained(skills_tables: dict[str, pd.DataFrame]) -> None:
    rep = render_report(_manifest("skills", method="pgd", metrics={"accuracy": 0.9275, "n_gold": 800}), skills_tables)
    page = parse(rep.html)
    check_self_contained(page)
    assert_figures(page, "skills")
    assert {"run-header", "figures", "outputs", "inputs", "outputs-table", "inputs-table", "timings-table"} <= set(
        page.ids
    )
    for name in skills_tables:
        assert f"{name}.parquet" in page.links
    assert "manifest.json" in page.links and REPORT_FILE in page.links
    assert "20260101T000000Z-abcdef12" in rep.html and "abababababababab" in rep.html  # run id, fingerprint
    assert rep.has_plots and [f.id for f in rep.figures] == list(FIGURE_IDS["skills"])
    assert "164 workers" in rep.figure("fig-skill-distribution").caption
    assert "Accuracy on 800 gold tasks: 0.9275" in rep.figure("fig-consensus-confidence").caption


def test_without_matplotlib_the_page_keeps_figures_as_tables(
    skills_tables: dict[str, pd.DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_mod, "matplotlib_figure", lambda: None)
    rep = render_report(_manifest("skills"), skills_tables)
    page = parse(rep.html)
    assert not page.images and not rep.has_plots
    assert "no-matplotlib" in page.ids and "pip install &#x27;crowdflow[report]&#x27;" in rep.html
    for fig_id in FIGURE_IDS["skills"]:
        assert fig_id in page.ids
    assert "fig-worker-label-counts" in rep.html and "<table" in rep.html


def test_ranking_page(tmp_path: Path) -> None:
    from crowdflow.ranking import fit_lbi

    rng = np.random.default_rng(0)
    n, m = 12, 600
    theta = np.linspace(2, -2, n)
    a = rng.integers(0, n, m)
    b = (a + rng.integers(1, n, m)) % n
    y = np.sign(theta[a] - theta[b] + rng.normal(0, 0.5, m))
    flip = rng.random(m) < 0.1
    y[flip] = -y[flip]
    items = np.array([f"item{k:02d}" for k in range(n)])
    cmp = pd.DataFrame({"annotator": rng.integers(0, 8, m).astype(str), "item_a": items[a], "item_b": items[b]})
    cmp["outcome"] = y
    res = fit_lbi(cmp, budget=0.1)
    tables = {
        "ranking": res.ranking,
        "outliers": res.outliers,
        "annotators": res.annotators,
        "components": res.diagnostics,
        "path": res.path,
    }
    rep = render_report(_manifest("ranking", fit=dict(res.params)), tables)
    page = parse(rep.html)
    check_self_contained(page)
    assert_figures(page, "ranking")
    fig = rep.figure("fig-ranking-intervals")
    assert "95 % normal-theory intervals" in fig.caption
    assert fig.data is not None and (fig.data["lower"] < fig.data["score"]).all()
    assert (fig.data["score"] < fig.data["upper"]).all()
    assert fig.data["score"].is_monotonic_decreasing and "item00" in set(fig.data["item"].head(2))  # best first
    # outlier detection off: the figure id stays, with a note instead of an image
    rep = render_report(
        _manifest("ranking", spec={"ranking": {"outliers": "none"}}), {"ranking": res.ranking}, plots=True
    )
    page = parse(rep.html)
    assert_figures(page, "ranking", drawn={"fig-ranking-intervals"})
    assert "ranking.outliers: none" in rep.figure("fig-outlier-path").caption


def test_personal_rankings_and_models_pages() -> None:
    from crowdflow.personal_models import fit_personal_models
    from crowdflow.personal_rankings import fit_personal_rankings
    from crowdflow.synth.personal_models import field_estimation_instance
    from crowdflow.synth.personal_rankings import synthetic_personal_comparisons

    syn = synthetic_personal_comparisons(20, 2, 6.0, seed=1)
    pr = fit_personal_rankings(syn.comparisons, rank=2, seed=0)
    tables = {"personal_rankings": pr.personal_rankings, "user_factors": pr.user_factors, "fit": pr.diagnostics_table()}
    rep = render_report(_manifest("personal_rankings"), tables)
    page = parse(rep.html)
    check_self_contained(page)
    assert_figures(page, "personal_rankings")

    inst = field_estimation_instance(3, n=12)
    pm = fit_personal_models(inst.agents, inst.edges, loss="quadratic", reg=0.1, method="djam")
    metrics = {"converged": bool(pm.converged), "iterations": int(pm.iterations)}
    tables = {"personal_models": pm.personal_models, "convergence": pm.diagnostics}
    rep = render_report(_manifest("personal_models", metrics=metrics), tables)
    page = parse(rep.html)
    check_self_contained(page)
    assert_figures(page, "personal_models")
    assert f"after {int(pm.iterations)} rounds" in rep.figure("fig-convergence").caption


def test_assignment_and_next_batch_pages() -> None:
    from crowdflow.assignment import assign_tasks

    rng = np.random.default_rng(1)
    cand = pd.DataFrame([(f"t{t}", f"w{w}") for t in range(30) for w in range(6)], columns=["task", "worker"])
    cand["score"] = rng.uniform(0, 1, len(cand))
    res = assign_tasks(cand, budget=40, worker_cap=8, task_cap=2)
    tables = {"assignment": res.assignment, "worker_load": res.worker_load, "task_load": res.task_load}
    rep = render_report(_manifest("assignment", metrics={"objective": float(res.objective), "certified": True}), tables)
    page = parse(rep.html)
    check_self_contained(page)
    assert_figures(page, "assignment")
    assert "40 assignments" in rep.figure("fig-worker-load").caption

    rep = render_report(_manifest("next_batch"), {**tables, "candidates": cand})
    page = parse(rep.html)
    assert_figures(page, "next_batch")
    assert "40 selected" in rep.figure("fig-candidate-scores").caption


def test_write_run_lists_extra_files_and_refuses_clashes(tmp_path: Path) -> None:
    df = pd.DataFrame({"task": ["t"], "label": ["a"]})
    written = write_run(tmp_path, "p", "r1", {"consensus": df}, {"job": "skills"}, extra_files={"report.html": b"<x>"})
    man = json.loads((written.path / "manifest.json").read_text())
    assert man["outputs"]["report"] == {"path": "report.html", "bytes": 3}
    with pytest.raises(ValueError, match="clashes"):
        write_run(tmp_path, "p", "r2", {"report": df}, {"job": "skills"}, extra_files={"report.html": b"<x>"})
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["r1"]  # nothing half-written


# ------------------------------------------------------------------------------------------------
# the demo run (CLI → flow → atomic export) and a real browser


@pytest.fixture(scope="module")
def demo_run(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from flows.cli import main

    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--out", str(out)]) == 0
    (manifest,) = sorted(out.rglob("manifest.json"))
    return manifest.parent


@pytest.mark.flow
def test_demo_run_writes_report(demo_run: Path) -> None:
    man = json.loads((demo_run / "manifest.json").read_text())
    assert man["status"] == "completed"
    assert man["outputs"]["report"]["path"] == REPORT_FILE
    assert man["report"]["status"] == "written" and man["report"]["figures"] == list(FIGURE_IDS["skills"])
    html = (demo_run / REPORT_FILE).read_text(encoding="utf-8")
    assert len(html.encode()) == man["outputs"]["report"]["bytes"]
    page = parse(html)
    check_self_contained(page)
    assert_figures(page, "skills")
    for name, info in man["outputs"].items():
        assert info["path"] in page.links and (demo_run / info["path"]).is_file(), name
    assert man["run_id"] in html and man["inputs"][0]["sha256"][:16] in html
    # the same page comes back from the exported files
    again = report_from_run_dir(demo_run, plots=False)
    assert [f.id for f in again.figures] == list(FIGURE_IDS["skills"])


@pytest.mark.flow
def test_report_failure_strict_blocks_lenient_keeps_data(
    prefect_harness: None, tmp_path: Path, rte_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tasks.report
    from crowdflow.spec import parse_spec
    from flows.skills import skills_flow

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("plotting exploded (injected)")

    monkeypatch.setattr(tasks.report, "render_report", broken)
    spec = parse_spec(
        {
            "name": "rep",
            "labels": {"path": str(rte_dir / "labels.csv")},
            "skills": {"method": "mv"},
            "output": {"dir": str(tmp_path)},
        }
    )
    with pytest.raises(RuntimeError, match="plotting exploded"):
        skills_flow(spec)
    assert not (tmp_path / "rep").exists() or not any((tmp_path / "rep").iterdir())
    monkeypatch.setenv("CROWDFLOW_REPORT_STRICT", "0")
    summary = skills_flow(spec)
    run = Path(summary["run_dir"])
    man = json.loads((run / "manifest.json").read_text())
    assert man["status"] == "completed" and man["report"]["status"] == "failed"
    assert "plotting exploded" in man["report"]["error"] and "report" not in man["outputs"]
    assert not (run / REPORT_FILE).exists() and len(pd.read_parquet(run / "consensus.parquet")) == 800


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


@pytest.mark.flow
def test_demo_report_renders_in_headless_chromium(demo_run: Path, tmp_path: Path) -> None:
    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium/Chrome on this machine (.ci/run installs it with apt-get where it can)")
    shot = tmp_path / "report-demo.png"
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        proc = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                f"--screenshot={shot}",
                "--window-size=1280,2000",
                (demo_run / REPORT_FILE).resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(shot, ARTIFACTS / shot.name)
    data = shot.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 50_000  # a blank 1280×2000 page compresses to a few kB
    import matplotlib.image as mpimg

    img = mpimg.imread(str(shot))
    assert img.shape[:2] == (2000, 1280)
    gray = img[..., :3].mean(axis=2)
    assert gray.std() > 0.05  # not blank
    # the figures were painted: rows below the header hold many non-background (plot) pixels
    assert (np.abs(gray[300:1800] - np.median(gray)) > 0.2).mean() > 0.01


@pytest.mark.flow
def test_other_jobs_write_their_report(prefect_harness: None, tmp_path: Path) -> None:
    from flows.cli import main

    rng = np.random.default_rng(5)
    cand = pd.DataFrame([(f"t{t}", f"w{w}") for t in range(10) for w in range(4)], columns=["task", "worker"])
    cand["score"] = rng.uniform(0, 1, len(cand)).round(4)
    cand.to_csv(tmp_path / "cand.csv", index=False)
    items = np.array(list("abcdefgh"))
    a = rng.integers(0, 8, 300)
    b = (a + rng.integers(1, 8, 300)) % 8
    cmp = pd.DataFrame({"annotator": "u", "item_a": items[a], "item_b": items[b], "outcome": np.sign(b - a)})
    cmp.to_csv(tmp_path / "cmp.csv", index=False)
    runs = {
        "assignment": ["assign", "--candidates", str(tmp_path / "cand.csv"), "--budget", "12", "--worker-cap", "4"],
        "ranking": ["rank", "--comparisons", str(tmp_path / "cmp.csv"), "--outliers", "none"],
    }
    for job, argv in runs.items():
        out = tmp_path / job
        assert main([*argv, "--out", str(out)]) == 0
        (manifest,) = sorted(out.rglob("manifest.json"))
        man = json.loads(manifest.read_text())
        assert man["report"]["figures"] == list(FIGURE_IDS[job]) and "report" in man["outputs"]
        page = parse((manifest.parent / REPORT_FILE).read_text(encoding="utf-8"))
        check_self_contained(page)
        drawn = {"fig-ranking-intervals"} if job == "ranking" else None  # outliers: none → no path to plot
        assert_figures(page, job, drawn=drawn)


@pytest.mark.flow
def test_demo_run_publishes_report_artifacts(demo_run: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    man = json.loads((demo_run / "manifest.json").read_text())
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["run-report", "run-report-file"]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[man["flow_run_id"]]),
            )
        )
    by_key = {a.key: a for a in arts}
    md = str(by_key["run-report"].data)
    assert md.count("](data:image/png;base64,") == len(FIGURE_IDS["skills"])
    assert "Worker skill distribution" in md and "| consensus | consensus.parquet | 800 |" in md
    assert (demo_run / REPORT_FILE).resolve().as_uri() in str(by_key["run-report-file"].data)
