"""Markdown and table artifacts for the Prefect UI (what was validated, what the checks found, results)."""

from __future__ import annotations

import re
from typing import Any, cast

import pandas as pd
from prefect.artifacts import create_markdown_artifact, create_table_artifact


def _key(text: str) -> str:
    """Artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:100] or "artifact"


def markdown(key: str, body: str, description: str) -> None:
    """Publish a markdown artifact under a sanitised key."""
    create_markdown_artifact(key=_key(key), markdown=body, description=description)


def table(key: str, df: pd.DataFrame, description: str, max_rows: int = 200) -> None:
    """Publish the first ``max_rows`` rows of ``df`` as a table artifact."""
    head = df.head(max_rows).astype(object)
    # column names are strings here; pandas-stubs types record keys as Hashable
    records = cast(list[dict[str, Any]], head.where(head.notna(), None).to_dict("records"))
    create_table_artifact(key=_key(key), table=records, description=description)


def frame_to_markdown(df: pd.DataFrame, max_rows: int = 20) -> str:
    """A small pipe table (no tabulate dependency)."""
    if df.empty:
        return "_(none)_"
    head = df.head(max_rows)
    cols = [str(c) for c in head.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in head.itertuples(index=False):
        cells = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if len(df) > max_rows:
        lines.append(f"\n… {len(df) - max_rows} more rows")
    return "\n".join(lines)
