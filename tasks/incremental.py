"""Thin task of an incremental run: assemble an input from the increment store plus the files it has not seen."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from crowdflow.spec import PipelineBase, SourceSpec
from crowdflow.storage.increment_inputs import Assembled, assemble
from crowdflow.storage.increments import State, SumsRule


@task(name="ingest-incremental", cache_policy=NONE, task_run_name="ingest-incremental-{kind}")
def ingest_incremental(
    spec: PipelineBase,
    source: SourceSpec,
    kind: str,
    folder: str,
    state: State,
    refresh: list[str],
    rule: SumsRule | None = None,
    check: Callable[[pd.DataFrame, str], object] | None = None,
) -> Assembled:
    """The ``kind`` input from the store in ``folder`` (state ``state``) and the dataset's new files.

    With a sums ``rule`` (a folded run) the stored files' rows are not read: ``table`` holds the new rows and
    ``fold`` the sums of every file; with a ``check`` as well, each new file is checked as it is read and its rows
    dropped once summed (:func:`crowdflow.storage.increment_inputs.assemble`), so a first run over a long history
    holds one file's rows at a time.
    """
    got = assemble(
        folder,
        state,
        spec.path_of(source),
        kind,
        source.columns,
        refresh,
        rule=rule,
        rows=rule is None,
        check=check,
        defer=rule is not None,
    )
    get_run_logger().info(
        "incremental %s: read %d files (%d rows), reused %d, dropped %d; %d rows in all (store version %d%s)",
        kind, len(got.read), got.n_new_rows, len(got.reused), len(got.dropped), got.record()["rows"],
        state.version, "" if got.fold is None else f"; fold {got.fold.how}",
    )  # fmt: skip
    return got
