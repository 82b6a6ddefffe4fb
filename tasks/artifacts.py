"""Markdown and table artifacts for the Prefect UI (what was validated, what the checks found, results)."""

from __future__ import annotations

import math
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Any, cast

import pandas as pd
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from crowdflow.report import RunReport

# Images of the report embedded in its markdown artifact, at most this many bytes in all (base64 included):
# the artifact is stored in Prefect's database.
MAX_ARTIFACT_IMAGE_BYTES = 1_500_000


# The pipeline whose run is in progress in this context (set by the flows when a run starts reading its inputs).
_PIPELINE: ContextVar[str | None] = ContextVar("crowdflow_pipeline", default=None)


def _key(text: str) -> str:
    """Artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:100] or "artifact"


def set_pipeline(name: str) -> None:
    """Name the pipeline of the run in progress: every artifact key from here on starts with it."""
    _PIPELINE.set(name)


def artifact_key(what: str) -> str:
    """The key of a run's artifact: ``<pipeline>-<what>`` (e.g. ``rte-skills-run-report``), sanitised.

    The one rule for every artifact of a run (validation, graph checks, fit progress, report, outputs, warehouse
    load): a key's versions in the Prefect UI are the runs of one pipeline, never a mix of pipelines. Pipeline
    names are folder names (letters, digits, ``_ - .``); in a key they are lower-cased with other characters
    turned into dashes. Outside a run (no pipeline named) the key is ``what`` alone.
    """
    pipeline = _PIPELINE.get()
    return _key(f"{pipeline}-{what}" if pipeline else what)


def markdown(what: str, body: str, description: str) -> None:
    """Publish a markdown artifact under :func:`artifact_key` of ``what``."""
    create_markdown_artifact(key=artifact_key(what), markdown=body, description=description)


def table(what: str, df: pd.DataFrame, description: str, max_rows: int = 200) -> None:
    """Publish the first ``max_rows`` rows of ``df`` as a table artifact under :func:`artifact_key` of ``what``."""
    head = df.head(max_rows).astype(object)
    # column names are strings here; pandas-stubs types record keys as Hashable
    records = cast(list[dict[str, Any]], head.where(head.notna(), None).to_dict("records"))
    create_table_artifact(key=artifact_key(what), table=records, description=description)


def _cell(v: Any) -> str:
    """A table cell: missing values (None, NaN, NA) are empty, never ``nan``; floats with 4 significant digits."""
    if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def frame_to_markdown(df: pd.DataFrame, max_rows: int = 20, empty: str = "_(none)_") -> str:
    """A small pipe table (no tabulate dependency); ``empty`` when ``df`` has no rows."""
    if df.empty:
        return empty
    head = df.head(max_rows)
    cols = [str(c) for c in head.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in head.itertuples(index=False):
        cells = [_cell(v) for v in row]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if len(df) > max_rows:
        lines.append(f"\n… {len(df) - max_rows} more rows")
    return "\n".join(lines)


#: Where the output folder is served for browsers elsewhere (``https://files.example.com/crowdflow-out``, an
#: ``s3://`` console URL…), set on the worker: the report's link is this URL plus the report's path under the folder.
REPORT_BASE_URL_ENV = "CROWDFLOW_REPORT_BASE_URL"


def report_link(path: Path, root: Path | None, base_url: str | None = None) -> tuple[str, str]:
    """The URL of ``report.html`` for a browser on another machine, and a sentence saying where it is.

    With ``base_url`` (default: :data:`REPORT_BASE_URL_ENV` of the environment) and the report under ``root`` (the
    spec's output folder): ``base_url/<path under root>``, which works wherever that URL is served. Otherwise the
    ``file://`` URL of the run folder, which opens only where that folder is mounted at the same path (a shared
    folder); the sentence names the host that wrote it so a reader elsewhere knows where to look.
    """
    import os
    import socket
    from urllib.parse import quote

    base = (os.environ.get(REPORT_BASE_URL_ENV, "") if base_url is None else base_url).strip()
    full = path.resolve()
    if base and root is not None and full.is_relative_to(root.resolve()):
        rel = full.relative_to(root.resolve()).as_posix()
        return f"{base.rstrip('/')}/{quote(rel)}", f"served from {base.rstrip('/')}"
    return full.as_uri(), (
        f"a file on {socket.gethostname()}: opens where the run folder is shared at the same path; "
        f"set {REPORT_BASE_URL_ENV} on the worker to link it by a URL that works anywhere"
    )


def report_artifacts(report: RunReport, path: Path, root: Path | None = None) -> None:
    """Publish the run report's key figures as a markdown artifact, and a link artifact to ``report.html``.

    The link is :func:`report_link`'s URL (the output folder's served URL when configured, else the shared run
    folder's ``file://`` URL); the markdown artifact embeds the report's key numbers, so the UI shows them even where
    the link cannot be opened.

    Each figure becomes a markdown image with a ``data:image/png;base64`` URI (the Prefect UI's markdown
    renderer does not strip ``data:`` image sources), its caption and a small table of the plotted
    numbers; past :data:`MAX_ARTIFACT_IMAGE_BYTES` only the tables are kept.
    """
    uri, where = report_link(path, root)
    lines = [
        "# Run report\n",
        f"Full page (static, self-contained): [{path.name}]({uri}) — {where}\n",
        frame_to_markdown(report.summary, max_rows=50),
    ]
    if report.actions:
        lines.append("\n## What to act on\n")
        for act in report.actions:
            lines.append(f"\n### {act.title}\n\n{act.text}\n")
            if act.table is not None and not act.table.empty:
                lines.append(frame_to_markdown(act.table, max_rows=10))
    budget = MAX_ARTIFACT_IMAGE_BYTES
    for fig in report.figures:
        lines.append(f"\n## {fig.title}\n")
        if fig.sentence:
            lines.append(f"**{fig.sentence}**\n")
        data_uri = fig.data_uri()
        if data_uri is not None and len(data_uri) <= budget:
            budget -= len(data_uri)
            lines.append(f"![{fig.alt}]({data_uri})\n")
        elif data_uri is not None:
            lines.append(f"_(image left out of the artifact to keep it small: see {path.name})_\n")
        elif fig.note:
            lines.append(f"_{fig.note}_\n")
        lines.append(fig.caption + "\n")
        if fig.data is not None and not fig.data.empty:
            lines.append(frame_to_markdown(fig.data, max_rows=10))
    markdown("run-report", "\n".join(lines), "key figures of the run report")
    create_link_artifact(
        key=artifact_key("run-report-file"),
        link=uri,
        link_text=path.name,
        description=f"the run's static report.html ({where})",
    )
