"""The report artifact links report.html by a URL that works off the worker (issue #33, item 7)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tasks.artifacts import REPORT_BASE_URL_ENV, report_link


def test_the_link_is_the_served_url_of_the_report_under_the_output_folder(tmp_path: Path) -> None:
    run = tmp_path / "out" / "rte skills" / "2026-11-28T17-00-00Z-ab12"
    url, where = report_link(run / "report.html", tmp_path / "out", "https://files.example.com/crowd/")
    assert url == "https://files.example.com/crowd/rte%20skills/2026-11-28T17-00-00Z-ab12/report.html"
    assert "files.example.com" in where
    url, where = report_link(run / "report.html", tmp_path / "out", "s3://bucket/crowd")
    assert url == "s3://bucket/crowd/rte%20skills/2026-11-28T17-00-00Z-ab12/report.html"
    # without a base URL: the shared folder's file:// URL, saying which host wrote it and how to do better
    url, where = report_link(run / "report.html", tmp_path / "out", "")
    assert url == (run / "report.html").resolve().as_uri()
    assert socket.gethostname() in where and REPORT_BASE_URL_ENV in where
    # a report outside the output folder is never given a made-up served URL
    url, _ = report_link(tmp_path / "elsewhere" / "report.html", tmp_path / "out", "https://files.example.com/")
    assert url.startswith("file://")


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_the_run_report_artifacts_link_the_served_report_and_embed_its_numbers(
    rte_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before #33 the link was the worker-local file:// path whatever the setting."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from crowdflow.spec import parse_spec
    from flows.deploy import run_pipeline

    monkeypatch.setenv(REPORT_BASE_URL_ENV, "https://reports.example.org/crowdflow-out")
    spec = parse_spec(
        {
            "name": "linked",
            "labels": {"path": str(rte_dir / "labels.csv")},
            "truth": {"path": str(rte_dir / "truth.csv")},
            "skills": {"method": "mv", "tie_break": "smallest"},
            "output": {"dir": str(tmp_path / "out")},
        }
    )
    result = run_pipeline(spec)
    run_dir = Path(result["run_dir"])
    man = json.loads((run_dir / "manifest.json").read_text())
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[man["flow_run_id"]]))
        )
    by_key = {a.key: a for a in arts}
    want = f"https://reports.example.org/crowdflow-out/linked/{run_dir.name}/report.html"
    assert (run_dir / "report.html").exists()
    assert str(by_key["linked-run-report-file"].data) == f"[report.html]({want})"
    md = str(by_key["linked-run-report"].data)
    assert f"]({want})" in md and "file://" not in md and str(run_dir) not in md
    assert "| consensus | consensus.parquet | 800 |" in md  # the key numbers are in the artifact itself
