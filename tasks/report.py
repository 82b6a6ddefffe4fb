"""Report task: render the run's static ``report.html`` (figures + tables) before the atomic export.

A rendering failure never costs the run its data: by default it is logged as an error, recorded in the
manifest (``report.status: failed``) and the tables are exported without the page. With
``CROWDFLOW_REPORT_STRICT=1`` (the test suite sets it) the failure fails the run instead, before anything
is written, so a broken report cannot go unnoticed in tests.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.report import RunReport, render_report


def strict_reports() -> bool:
    """Whether a report failure fails the run (``CROWDFLOW_REPORT_STRICT`` set to 1/true/yes)."""
    return os.environ.get("CROWDFLOW_REPORT_STRICT", "").strip().lower() in {"1", "true", "yes"}


@dataclass
class ReportOutcome:
    """The rendered report (None when off or failed) and what goes into the manifest's ``report``."""

    report: RunReport | None
    record: dict[str, Any]


@task(name="report", cache_policy=NONE)
def render_report_task(
    manifest: dict[str, Any],
    tables: Mapping[str, pd.DataFrame],
    enabled: bool,
    history: Sequence[Mapping[str, Any]] = (),
) -> ReportOutcome:
    """Render ``report.html`` from the manifest (minus ``outputs``), the output tables and the earlier runs."""
    logger = get_run_logger()
    if not enabled:
        return ReportOutcome(None, {"status": "off"})
    try:
        report = render_report(manifest, tables, history=history)
    except Exception as exc:
        if strict_reports():
            raise
        logger.error(
            "report.html not written (the run's tables are exported as usual): %s: %s", type(exc).__name__, exc
        )
        return ReportOutcome(None, {"status": "failed", "error": f"{type(exc).__name__}: {exc}"})
    drawn = [f.id for f in report.figures if f.png is not None]
    if not report.has_plots:
        logger.warning("report.html has no plots: matplotlib is not installed (pip install 'crowdflow[report]')")
    logger.info("report rendered in %.2f s: %d figure(s) drawn of %d", report.seconds, len(drawn), len(report.figures))
    record = {
        "status": "written",
        "path": "report.html",
        "figures": [f.id for f in report.figures],
        "plots": report.has_plots,
    }
    return ReportOutcome(report, record)
