"""Schema validation task: the table's Great Expectations suite, blocking or warning."""

from __future__ import annotations

import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.contracts.tables import INPUTS
from crowdflow.storage.io import LoadedTable
from schemas.validation import ValidationReport, require_valid, validate_frame
from tasks.artifacts import frame_to_markdown, markdown


@task(name="validate", cache_policy=NONE, task_run_name="validate-{kind}")
def validate(
    table: LoadedTable,
    kind: str,
    mode: str = "block",
    allowed: dict[str, list[str]] | None = None,
    whole_table: bool = True,
) -> ValidationReport:
    """Run the ``kind`` suite on ``table``; raise ``ValidationFailed`` if blocking and anything fails.

    ``whole_table=False``: only the rules about each row (the new files of an incremental run).
    """
    return check_table(table, kind, mode, allowed, whole_table)


def check_table(
    table: LoadedTable,
    kind: str,
    mode: str = "block",
    allowed: dict[str, list[str]] | None = None,
    whole_table: bool = True,
) -> ValidationReport:
    """The body of :func:`validate` without a task run of its own: a folded run calls it once per new file from
    inside its ingest task (a task run per file kept ~40-80 MB per 10^6 rows alive until the flow ended)."""
    logger = get_run_logger()
    report = validate_frame(table.df, INPUTS[kind], table.source, allowed, whole_table)
    status = "passed" if report.success else ("FAILED" if mode == "block" else "failed (warn only)")
    body = (
        f"# Validation of `{kind}`: {status}\n\n"
        f"Source `{table.source}` — {report.n_rows} rows, {report.n_expectations} expectations "
        f"(checks.validation: {mode}).\n\n"
    )
    if not report.success:
        body += "## Failed\n\n" + frame_to_markdown(pd.DataFrame(report.as_records())) + "\n\n"
    # what the table was held to, passed or not (a passed table lists its expectations, not "none")
    body += "## Expectations checked\n\n" + frame_to_markdown(
        pd.DataFrame(report.checked_records()), max_rows=100, empty="_(no expectation applies to these columns)_"
    )
    markdown(f"validation-{kind}", body, f"Great Expectations results for {kind}")
    if report.success:
        logger.info("%s: all %d expectations passed", kind, report.n_expectations)
    elif mode == "warn":
        logger.warning("%s", report.message())
    else:
        require_valid(report)
    return report
