"""The run report: one self-contained static ``report.html`` per run.

:mod:`~crowdflow.report.page` lays out the page (header, figures, outputs, inputs, table previews);
one module per job draws its figures (:mod:`~crowdflow.report.skills`, :mod:`~crowdflow.report.ranking`,
:mod:`~crowdflow.report.personal`, :mod:`~crowdflow.report.assignment`) from what
:mod:`~crowdflow.report.figure` shares.
"""

from crowdflow.report.figure import INSTALL_HINT, ReportFigure
from crowdflow.report.page import (
    FIGURE_IDS,
    REPORT_FILE,
    RunReport,
    planned_outputs,
    render_report,
    render_report_holding,
    report_from_run_dir,
)

__all__ = [
    "FIGURE_IDS",
    "INSTALL_HINT",
    "REPORT_FILE",
    "ReportFigure",
    "RunReport",
    "planned_outputs",
    "render_report",
    "render_report_holding",
    "report_from_run_dir",
]
