"""The run report: one self-contained static ``report.html`` per run (see :mod:`crowdflow.report.page`)."""

from crowdflow.report.page import (
    FIGURE_IDS,
    INSTALL_HINT,
    REPORT_FILE,
    ReportFigure,
    RunReport,
    planned_outputs,
    render_report,
    report_from_run_dir,
    score_intervals,
)

__all__ = [
    "FIGURE_IDS",
    "INSTALL_HINT",
    "REPORT_FILE",
    "ReportFigure",
    "RunReport",
    "planned_outputs",
    "render_report",
    "report_from_run_dir",
    "score_intervals",
]
