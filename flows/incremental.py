"""The increment store around one run: read under the lock, the inputs assembled, committed after the export.

Every flow that supports ``incremental: true`` wraps its body in :func:`increment_session`; the session holds the
store's lock from reading the state to committing the new one (a racing run waits for it), and is handed to
:func:`flows.common.load_inputs` (which assembles the job's main input from the store) and to
:func:`flows.common.finish_run` (which records it in the manifest and commits it after the run is exported). A run
without ``incremental`` still drops the rows of erased workers (``crowdflow forget``) from what it reads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crowdflow.contracts.errors import SpecError
from crowdflow.frontdoor.increment_rules import RULES
from crowdflow.skills.folded import WORKERS_KEY
from crowdflow.spec import JOB_OPTIONS, PipelineBase
from crowdflow.storage.increment_inputs import Assembled, merge_folds
from crowdflow.storage.increments import State, SumsRule, commit_state, drop_erased, read_state, state_dir, state_lock
from crowdflow.storage.io import LoadedTable
from tasks.partitioned import DatasetInput

#: the input each job folds file by file
INCREMENTAL_KIND = {"skills": "labels", "ranking": "comparisons"}
LOCK_TIMEOUT_S = 3600.0
#: the one refusal of an incremental run that would read the stored rows on Dask workers
_NOT_ON_DASK = (
    "{options}.incremental on Dask (runner.kind: dask over a folder) runs only as a folded run, ranking with "
    "outliers: none or skills with method: mv; use runner.kind: local for this job or method"
)
#: why an incremental run that is not folded reads the stored rows (the manifest's ``incremental.<kind>.fold``)
ROWS_WHY = (
    "the fit is not a sum over files (an outlier rule or an iterative method): the stored files' rows are read "
    "and refitted with the new ones, so every table equals a full run's"
)


#: the input kinds whose folded fit needs nothing of the new files but their sums (ranking: the per-pair sums): their
#: new files are streamed, each dropped once checked and summed, so a first run over a long history holds one file's
#: rows. A folded skills run updates its worker fold from the new rows (:mod:`crowdflow.skills.folded`), so its new
#: files are streamed only when the store holds no worker fold yet (the first folded run: the fold is then rebuilt
#: file by file from the store, :mod:`crowdflow.skills.folded_stream`); a daily run keeps its day's rows.
STREAMED_KINDS = frozenset({"comparisons"})
#: the input kinds streamed while the store holds no entry of this key in ``State.folds``
STREAMED_UNTIL = {"labels": WORKERS_KEY}


@dataclass
class IncrementSession:
    """The store a run reads and (when incremental) commits; ``assembled`` is filled by the ingest step.

    ``rule``: a folded run (the kind's per-file sums and their fold; the stored files' rows are never read).
    """

    folder: Path
    state: State
    kind: str | None = None
    backfill: list[str] = field(default_factory=list)
    assembled: Assembled | None = None
    rule: SumsRule | None = None
    #: a folded run's further stored tables (the next state's ``folds`` entries) and their manifest account
    more_folds: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    fold_detail: dict[str, Any] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.kind is not None

    @property
    def streams(self) -> bool:
        """A folded run whose new files are streamed (:data:`STREAMED_KINDS`, :data:`STREAMED_UNTIL`)."""
        if self.rule is None or self.kind is None:
            return False
        until = STREAMED_UNTIL.get(self.kind)
        return self.kind in STREAMED_KINDS or (until is not None and until not in self.state.folds)

    def without_erased(self, table: LoadedTable, kind: str) -> LoadedTable:
        """``table`` less the rows of erased workers (a full read; the store's own files are already erased)."""
        df, n = drop_erased(self.state, table.df, kind)
        if not n:
            return table
        return LoadedTable(
            df.reset_index(drop=True), table.source, table.sha256, table.format, table.renamed, table.query
        )

    def record(self) -> dict[str, Any]:
        """The manifest's ``incremental`` entry: the state the run started from, files read, reused and dropped."""
        out: dict[str, Any] = {"enabled": self.enabled, "state_from": self.state.record()}
        if self.assembled is not None and self.kind is not None:
            out[self.kind] = self.assembled.record()
            out["backfill"] = list(self.backfill)
            if self.assembled.fold is None:  # the row path: every stored file's rows read, every method exact
                out[self.kind]["fold"] = {"how": "rows", "why": ROWS_WHY}
            elif self.fold_detail:  # a folded run that read some stored rows (skills mv: the worker fold)
                out[self.kind]["fold"].update(self.fold_detail)
                out[self.kind]["stored_rows_read"] += int(self.fold_detail["workers"].get("stored_rows_read", 0))
        return out

    def folded_dataset(self) -> DatasetInput:
        """The manifest's input record of a folded run's main input: the whole dataset (every file, all rows), as a
        full read would record it, though only the new files were read."""
        got = self.assembled
        assert got is not None
        rows = int(got.record()["rows"])
        return DatasetInput(got.table.source, got.table.sha256, rows, len(got.files), format="parquet")

    def commit(self, run_id: str) -> None:
        if self.kind is None or self.assembled is None:
            return
        fold = self.assembled.fold
        folds = None if fold is None else merge_folds(self.state.folds, {self.kind: fold.record, **self.more_folds})
        self.state = commit_state(
            self.folder, self.state, {**self.state.files, self.kind: self.assembled.files}, run_id, folds=folds
        )


#: per job, the options under which an incremental run is folded (its fit is a function of per-file sums)
FOLDED = {"ranking": ("outliers", "none"), "skills": ("method", "mv")}


def folded_run(spec: PipelineBase) -> bool:
    """The run folds per-file sums: ``ranking.incremental`` with ``outliers: none`` (it never reads the stored
    rows) and ``skills.incremental`` with ``method: mv`` (it reads only the stored rows of the tasks whose
    contribution moves: :mod:`crowdflow.skills.folded`).

    Every other incremental run (a skills method other than majority vote, a ranking outlier rule: fits that are
    not sums over files) takes the row path: the stored files' rows plus the new ones, refitted exactly.
    """
    rule = FOLDED.get(spec.job)
    opts = getattr(spec, JOB_OPTIONS[spec.job], None) if rule is not None else None
    return bool(rule is not None and opts is not None and opts.incremental and getattr(opts, rule[0]) == rule[1])


@contextlib.contextmanager
def increment_session(spec: PipelineBase) -> Iterator[IncrementSession]:
    """The run's :class:`IncrementSession`; with ``incremental: true`` the store's lock is held until it ends.

    A folded run (:func:`folded_run`) may run with ``runner.kind: dask``: it reads only the new files, in the flow
    process; the row path on Dask is refused.
    """
    folder = state_dir(spec.output_dir(), spec.name)
    options = getattr(spec, JOB_OPTIONS[spec.job], None)
    kind = INCREMENTAL_KIND.get(spec.job)
    if kind is None or not getattr(options, "incremental", False):
        yield IncrementSession(folder, read_state(folder))
        return
    source = spec.inputs()[kind]
    if source.is_query or source.is_url:
        raise SpecError(
            f"{JOB_OPTIONS[spec.job]}.incremental reads a local Parquet file or folder file by file; the {kind} "
            "input is a query or a URL: drop incremental or give a local folder"
        )
    folded = folded_run(spec)
    if spec.partitioned_input() is not None and not folded:
        raise SpecError(_NOT_ON_DASK.format(options=JOB_OPTIONS[spec.job]))
    rule = RULES[kind] if folded else None
    with state_lock(folder, LOCK_TIMEOUT_S):
        yield IncrementSession(folder, read_state(folder), kind, list(getattr(options, "backfill", [])), rule=rule)


def refuse_erasures_on_workers(spec: PipelineBase) -> None:
    """A partitioned (Dask) run does not drop erased workers' rows yet: refused while the store records erasures."""
    options = getattr(spec, JOB_OPTIONS[spec.job], None)
    if getattr(options, "incremental", False):
        raise SpecError(_NOT_ON_DASK.format(options=JOB_OPTIONS[spec.job]))
    state = read_state(state_dir(spec.output_dir(), spec.name))
    if state.erasures:
        raise SpecError(
            f"pipeline {spec.name} has {len(state.erasures)} erased worker(s) (crowdflow forget) and a run on Dask "
            "workers does not drop their rows yet; run it with runner.kind: local"
        )
