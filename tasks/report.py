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

from crowdflow.report import RunReport, render_report, render_report_holding
from crowdflow.storage.held_tables import HeldTable


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
    tables: Mapping[str, pd.DataFrame | HeldTable],
    enabled: bool,
    history: Sequence[Mapping[str, Any]] = (),
) -> ReportOutcome:
    """Render ``report.html`` from the manifest (minus ``outputs``), the output tables and the earlier runs.

    A table a Dask worker holds (:class:`~crowdflow.storage.held_tables.HeldTable`, a partitioned run's skills table):
    the page is rendered on that worker (:func:`crowdflow.report.render_report_holding`, the other tables and the
    manifest sent there), so the flow never holds the table's rows; the same page either way."""
    logger = get_run_logger()
    if not enabled:
        return ReportOutcome(None, {"status": "off"})
    try:
        held = [t for t in tables.values() if isinstance(t, HeldTable)]
        if len(held) > 1:
            raise ValueError("a report renders beside one held table at most")
        if held:
            rest = {n: None if isinstance(t, HeldTable) else t for n, t in tables.items()}
            report = held[0].apply(render_report_holding, (dict(manifest), rest, held[0].name, list(history)))
        else:
            report = render_report(
                manifest, {n: t for n, t in tables.items() if isinstance(t, pd.DataFrame)}, history=history
            )
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
