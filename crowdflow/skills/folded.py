"""Majority-vote skills tables from folded counts and a per-worker fold (``skills.incremental`` with ``method: mv``).

A folded skills run (issue #38) keeps, beside the per-task class counts of :mod:`crowdflow.skills.increments`, a
**worker fold** (:class:`WorkerFold`) that makes every table of a full majority-vote run except one column exact
without reading the history's rows (docs/methods/skills.md §7.6):

- per worker: ``n_labels`` (a sum over files), ``agree`` = Σ_t 1{the worker's label on t = the vote of t}, and
  ``strength`` = Σ_{t ∋ i} (k_t − 1) (integers), and the worker graph's parity union-find forest
  (:class:`~crowdflow.graphs.parity.ParityForest`: edges are only ever added while files are only added);
- per task (in the label fold's text order): its vote, its label count ``k_t`` and one worker (the task's
  component: every worker of a task is in one component).

A run that only adds files reads the stored rows of the tasks whose contribution moves: the **old tasks the new
rows touch** (their ``k_t`` and maybe their vote change; their old workers' ``strength`` moves) and the **old tasks
whose vote moved** without new labels (a random tie-break draws by a task's position among all tasks, so a task
inserted before a tied one in the natural order can move its draw; ids that grow, e.g. dated, move none). For
those tasks the old contribution is subtracted (old vote, old ``k_t``) and the new one added; every new row is
added. Files removed or changed, an erasure, other options, or no stored worker fold: the fold is rebuilt from the
stored rows of every file (stated in the manifest). Every sum is an integer, so the result equals a full run's
whatever the order of the files.

What is not a sum: ``n_partners`` (distinct co-labellers; needs the set of worker pairs) and the component
columns made from it (``n_edges``, ``d_max``, ``D_sum``): NaN with a reason, as the partitioned (Dask) run writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from crowdflow.graphs import Components, ParityForest, WorkerGraphReport
from crowdflow.graphs.workers import worker_graph_from_components
from crowdflow.labels import natural_order
from crowdflow.skills.fit import SkillsResult, _base_status, fit_metadata, worker_table
from crowdflow.skills.identifiability import component_diagnostics_pairless
from crowdflow.skills.increments import LABEL_COUNTS, FoldedLabels, majority_from_folded
from crowdflow.skills.options import SkillsOptions
from crowdflow.skills.reasons import explain_missing_skills
from crowdflow.storage.increment_inputs import Assembled, folded_input
from crowdflow.storage.increments import State, read_state, read_table, stored_rows_of, write_table

__all__ = [
    "FoldedRun",
    "FoldedSkills",
    "WorkerFold",
    "fold_in_store",
    "folded_skills",
    "folded_skills_run",
    "update_workers",
]

#: the columns of the stored per-task table (label fold order)
TASK_COLUMNS = ("task", "winner", "k", "rep")


@dataclass(frozen=True)
class WorkerFold:
    """The per-worker and per-task statistics of a majority-vote fold (module docstring).

    Attributes
    ----------
    workers : numpy.ndarray
        (W,) worker ids (``str``) in the label encoder's natural order (a full run's worker codes).
    n_labels, agree, strength : numpy.ndarray
        (W,) int64 sums.
    parent, par, rank : numpy.ndarray
        (W,) int64 parity union-find forest over the worker codes; ``odd`` (W,) bool.
    tasks : pandas.DataFrame
        ``task, winner, k, rep`` per task of the label fold, in its (text) order.
    """

    workers: np.ndarray
    n_labels: np.ndarray
    agree: np.ndarray
    strength: np.ndarray
    parent: np.ndarray
    par: np.ndarray
    rank: np.ndarray
    odd: np.ndarray
    tasks: pd.DataFrame

    @classmethod
    def empty(cls) -> WorkerFold:
        z = np.zeros(0, dtype=np.int64)
        tasks = pd.DataFrame({"task": pd.Series([], dtype=object), "winner": pd.Series([], dtype=object),
                              "k": z.copy(), "rep": pd.Series([], dtype=object)})  # fmt: skip
        return cls(
            np.zeros(0, dtype=object), z, z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), z.astype(bool), tasks
        )

    def worker_frame(self) -> pd.DataFrame:
        """The per-worker arrays as one table (the increment store's ``mv-workers`` file)."""
        return pd.DataFrame(
            {"worker": self.workers.astype(str), "n_labels": self.n_labels, "agree": self.agree,
             "strength": self.strength, "parent": self.parent, "par": self.par, "rank": self.rank, "odd": self.odd}
        )  # fmt: skip

    @classmethod
    def from_frames(cls, workers: pd.DataFrame, tasks: pd.DataFrame) -> WorkerFold:
        def col(name: str, dtype: Any = np.int64) -> np.ndarray:
            return workers[name].to_numpy(dtype=dtype)

        return cls(
            workers["worker"].astype(str).to_numpy(dtype=object), col("n_labels"), col("agree"), col("strength"),
            col("parent"), col("par"), col("rank"), col("odd", bool), tasks.reset_index(drop=True),
        )  # fmt: skip

    def forest(self) -> ParityForest:
        return ParityForest(self.parent.copy(), self.par.copy(), self.rank.copy(), self.odd.copy())


@dataclass(frozen=True)
class WorkerUpdate:
    """What :func:`update_workers` did: the new fold and the account of the stored rows it read."""

    fold: WorkerFold
    how: str
    tasks_reread: int = 0
    rows_read: int = 0
    why: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _text(values: Any) -> np.ndarray:
    return np.asarray(pd.Series(values).astype(str).to_numpy(dtype=object), dtype=object)


def winners_in_fold_order(consensus: pd.DataFrame, folded: FoldedLabels) -> np.ndarray:
    """The vote of every task of ``folded`` in the fold's (text) order, from the consensus table (any order)."""
    at = pd.Index(consensus["task"].astype(str).to_numpy(dtype=object)).get_indexer(
        np.asarray(folded.tasks.to_pylist(), dtype=object)
    )
    out: np.ndarray = consensus["label"].astype(str).to_numpy(dtype=object)[at]
    return out


def update_workers(
    prev: WorkerFold | None,
    folded: FoldedLabels,
    winners: np.ndarray,
    new_rows: pd.DataFrame,
    read_stored: Callable[[Sequence[str] | None], pd.DataFrame],
    why_rebuild: str = "",
) -> WorkerUpdate:
    """The worker fold after a run (module docstring).

    Parameters
    ----------
    prev : WorkerFold or None
        The stored fold when it is valid for an update (files only added since, same options); None: rebuild.
    folded : FoldedLabels
        The label fold after the run (every file).
    winners : numpy.ndarray
        The vote of each task of ``folded``, in its order (:func:`winners_in_fold_order`).
    new_rows : pandas.DataFrame
        ``task, worker, label`` (text) of the files read now (erased workers dropped).
    read_stored : callable
        ``read_stored(tasks)`` → ``task, worker, label`` of the stored (reused) files' rows of those tasks;
        ``None``: every stored row (a rebuild).
    why_rebuild : str
        Why ``prev`` is None (for the manifest).

    Raises
    ------
    ValueError
        A (task, worker) pair answers twice across the files (a folded run counts every row; a full run would
        apply ``duplicates``), naming the pair.
    """
    fold_tasks = np.asarray(folded.tasks.to_pylist(), dtype=object)
    k_after = folded.counts.sum(axis=1).astype(np.int64)
    new = _as_text(new_rows)
    if prev is None:
        old = _as_text(read_stored(None))
        rows = pd.concat([old, new], ignore_index=True)
        _no_duplicates(rows)
        base = WorkerFold.empty()
        fold = _apply(base, fold_tasks, winners, k_after, rows, None, None)
        return WorkerUpdate(fold, "rebuilt", len(set(old["task"])), len(old), why_rebuild)
    prev_tasks = prev.tasks["task"].astype(str).to_numpy(dtype=object)
    at = pd.Index(prev_tasks).get_indexer(fold_tasks)  # -1: a new task
    old_winner = np.where(at >= 0, prev.tasks["winner"].to_numpy(dtype=object)[np.maximum(at, 0)], None)
    touched = pd.Index(pd.unique(new["task"].to_numpy(dtype=object)))
    is_old = at >= 0
    hit = is_old & (touched.get_indexer(fold_tasks) >= 0)
    moved = is_old & (old_winner != winners)
    reread = fold_tasks[hit | moved]
    old = _as_text(read_stored(list(reread))) if reread.size else new.iloc[:0]
    _no_duplicates(pd.concat([old, new], ignore_index=True))
    k_before = np.where(at >= 0, prev.tasks["k"].to_numpy(dtype=np.int64)[np.maximum(at, 0)], 0)
    fold = _apply(prev, fold_tasks, winners, k_after, pd.concat([old, new], ignore_index=True), old, (at, k_before))
    extra = {"tasks_touched": int(hit.sum()), "tasks_vote_moved_untouched": int((moved & ~hit).sum())}
    return WorkerUpdate(fold, "updated", int(reread.size), len(old), "", extra)


def _as_text(rows: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({c: _text(rows[c]) if len(rows) else np.zeros(0, dtype=object)
                         for c in ("task", "worker", "label")})  # fmt: skip


def _no_duplicates(rows: pd.DataFrame) -> None:
    dup = rows.duplicated(["task", "worker"], keep=False)
    if dup.any():
        first = rows.loc[dup].iloc[0]
        raise ValueError(
            f"worker {first['worker']!r} answers task {first['task']!r} more than once across the files "
            f"({int(dup.sum())} rows in repeated (task, worker) pairs): a folded majority-vote run counts every row, "
            "so it needs one answer per (task, worker); drop skills.incremental to apply skills.duplicates"
        )


def _apply(
    prev: WorkerFold,
    fold_tasks: np.ndarray,
    winners: np.ndarray,
    k_after: np.ndarray,
    rows: pd.DataFrame,
    old: pd.DataFrame | None,
    before: tuple[np.ndarray, np.ndarray] | None,
) -> WorkerFold:
    """``prev`` with the stored rows ``old`` of the re-read tasks taken out (old vote, old k) and ``rows`` (those
    tasks' rows and every new row) put in (new vote, new k)."""
    workers = prev.workers
    incoming = pd.unique(rows["worker"].to_numpy(dtype=object))
    extra = pd.Index(incoming).difference(pd.Index(workers)).to_numpy(dtype=object) if len(incoming) else incoming
    if extra.size:
        union = np.concatenate([workers, extra]).astype(object)
        union = union[natural_order(union)]
    else:
        union = workers
    n_w = union.size
    pos = pd.Index(union).get_indexer(workers)
    n_labels, agree, strength = (np.zeros(n_w, dtype=np.int64) for _ in range(3))
    parent, par, rank = np.arange(n_w, dtype=np.int64), np.zeros(n_w, dtype=np.int64), np.zeros(n_w, dtype=np.int64)
    odd = np.zeros(n_w, dtype=bool)
    n_labels[pos], agree[pos], strength[pos] = prev.n_labels, prev.agree, prev.strength
    parent[pos], par[pos], rank[pos], odd[pos] = pos[prev.parent], prev.par, prev.rank, prev.odd
    code = pd.Index(union)
    t_index = pd.Index(fold_tasks)
    if old is not None and before is not None and len(old):
        at, k_before = before
        t = t_index.get_indexer(old["task"].to_numpy(dtype=object))
        w = code.get_indexer(old["worker"].to_numpy(dtype=object))
        prev_winner = prev.tasks["winner"].to_numpy(dtype=object)[at[t]]
        np.subtract.at(agree, w, (old["label"].to_numpy(dtype=object) == prev_winner).astype(np.int64))
        np.subtract.at(strength, w, k_before[t] - 1)
        n_labels -= np.bincount(w, minlength=n_w)
    t = t_index.get_indexer(rows["task"].to_numpy(dtype=object))
    w = code.get_indexer(rows["worker"].to_numpy(dtype=object))
    if (t < 0).any():
        raise ValueError("rows of a task the label fold does not hold (the fold and the rows are out of step)")
    np.add.at(agree, w, (rows["label"].to_numpy(dtype=object) == winners[t]).astype(np.int64))
    np.add.at(strength, w, k_after[t] - 1)
    n_labels += np.bincount(w, minlength=n_w)
    forest = ParityForest(parent, par, rank, odd)
    if len(rows):
        order = np.lexsort((w, t))
        ts, ws = t[order], w[order]
        starts = np.flatnonzero(np.r_[True, ts[1:] != ts[:-1]])
        indptr = np.r_[starts, ts.size].astype(np.int64)
        forest.merge(ParityForest.from_labels(indptr, ws, n_w))
    # the per-task table in the fold's order: new tasks take one of their workers as the component's witness
    rep = np.empty(fold_tasks.size, dtype=object)
    prev_at = pd.Index(prev.tasks["task"].astype(str).to_numpy(dtype=object)).get_indexer(fold_tasks)
    have = prev_at >= 0
    rep[have] = prev.tasks["rep"].to_numpy(dtype=object)[prev_at[have]]
    if len(rows):
        rep[t] = rows["worker"].to_numpy(dtype=object)
    tasks = pd.DataFrame({"task": fold_tasks.astype(str), "winner": winners.astype(str), "k": k_after,
                          "rep": rep.astype(str)})  # fmt: skip
    return WorkerFold(union, n_labels, agree, strength, forest.parent, forest.par, forest.rank, forest.odd, tasks)


@dataclass(frozen=True)
class FoldedSkills:
    """A folded majority-vote fit: the :class:`SkillsResult` a full ``mv`` fit gives (less ``n_partners``) and the
    worker-graph report of its labels (pair-free)."""

    result: SkillsResult
    report: WorkerGraphReport


def folded_skills(
    consensus: pd.DataFrame, n_ties: int, fold: WorkerFold, classes: np.ndarray, options: SkillsOptions
) -> FoldedSkills:
    """The tables of a full ``method: mv`` fit from the consensus of the folded counts and the worker fold.

    ``consensus``: :func:`crowdflow.skills.increments.majority_from_folded`; ``classes``: the fitted label set (the
    declared ``classes`` or the observed ones, in the encoder's order). Skills, accuracy, strength, components,
    status and the per-component counts are a full run's, bit for bit (the same float64 operations on the same
    integers); ``n_partners`` and ``n_edges``/``d_max``/``D_sum`` are NaN with their reason.
    """
    o = options
    g: Components = fold.forest().components()
    n_i = fold.n_labels
    w = int(n_i.size)
    m = int(classes.size)
    accuracy = fold.agree.astype(np.float64) / np.maximum(n_i, 1)
    skill = (m * accuracy - 1.0) / (m - 1.0)
    status = _base_status(g)
    ok = status == "ok"
    partners = np.full(w, np.nan)
    strength = fold.strength.astype(np.float64)
    table = worker_table(fold.workers, skill, accuracy, np.ones(w), n_i, (partners, strength), g, status, ok)
    rep = pd.Index(fold.workers).get_indexer(fold.tasks["rep"].to_numpy(dtype=object))
    task_comp = g.labels[rep]
    n_tasks = np.bincount(task_comp, minlength=g.n_components).astype(np.int64)
    n_lab = np.bincount(g.labels, weights=n_i, minlength=g.n_components).astype(np.int64)
    diag = component_diagnostics_pairless(None, g, partners, strength, skill, status, per_component=(n_lab, n_tasks))
    n_total, n_t = int(n_i.sum()), len(fold.tasks)
    meta = fit_metadata(o, classes, w, n_t, n_total, 0, 0, "flag")
    meta.update(
        {
            "iterations": 0,
            "converged": True,
            "final_loss": float("nan"),
            "n_ties": int(n_ties),
            "fit_status": "closed_form",
            "eta": float("nan"),
            "n_fallback_tasks": 0,
            "frac_workers_identified": float(ok.mean()),
            "frac_labels_identified": float(n_i[ok].sum() / max(n_total, 1)),
            "frac_tasks_identified": float(np.count_nonzero(ok[rep]) / max(n_t, 1)),
            "folded": True,
        }
    )
    explain_missing_skills(table, diag, "mv", pairs=False)
    cons = consensus.assign(fallback=np.zeros(len(consensus), dtype=bool))
    result = SkillsResult(skills=table, consensus=cons, diagnostics=diag, metadata=meta)
    report = worker_graph_from_components(g, partners, n_i, fold.workers)
    return FoldedSkills(result, report)


def store_tasks(table: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """The stored per-task table as the fold reads it back (text columns, int64 ``k``)."""
    df = table.to_pandas() if isinstance(table, pa.Table) else table
    return pd.DataFrame({"task": _text(df["task"]), "winner": _text(df["winner"]), "k": df["k"].to_numpy(np.int64),
                         "rep": _text(df["rep"])})  # fmt: skip


#: the increment store's keys (folders) of the worker fold's two tables, beside the label fold
WORKERS_KEY, TASKS_KEY = "mv-workers", "mv-tasks"


@dataclass(frozen=True)
class FoldedRun:
    """What :func:`fold_in_store` computed for a run: the fit, the worker fold's account, the state records.

    ``records``: the two tables' entries of the next state's ``folds`` (written, committed with the run);
    ``account``: the manifest's ``fold.workers`` (how, why, tasks re-read, stored rows read and scanned);
    ``gold_rows``: the rows of the gold tasks (``task, worker, label``) when gold tasks were asked for;
    ``input``: the manifest's account of the labels input (:func:`folded_skills_run` only).
    """

    fit: FoldedSkills
    records: dict[str, dict[str, Any]]
    account: dict[str, Any]
    stored_rows_read: int
    gold_rows: pd.DataFrame | None = None
    input: dict[str, Any] = field(default_factory=dict)


def fold_in_store(
    folder: str | os.PathLike[str],
    state: State,
    assembled: Assembled,
    options: SkillsOptions,
    gold_tasks: Sequence[str] | None = None,
) -> FoldedRun:
    """A folded majority-vote run on the increment store: votes from the label fold, the worker fold updated.

    ``assembled`` is the run's labels input (:func:`crowdflow.storage.increment_inputs.assemble` with the label
    counts rule, ``rows=False``). The stored worker fold is updated when it was made from exactly the files the
    state held, with the same vote options, and files were only added since; otherwise it is rebuilt from every
    stored file's rows (``account["why"]`` says why). The new tables are written, uncommitted (the caller commits
    them with the state, after the export).

    Raises
    ------
    ValueError
        A file at more than one path, or a (task, worker) pair answering twice across the files.
    """
    o = options
    fold = assembled.fold
    assert fold is not None
    kind = "labels"
    folded = FoldedLabels.from_frame(fold.table)
    consensus, ties = majority_from_folded(folded, o.classes, o.tie_break, o.seed)
    winners = winners_in_fold_order(consensus, folded)
    twice = sorted(p for e in assembled.files.values() if len(e.paths) > 1 for p in e.paths)
    if twice:
        raise ValueError(f"the same file is at several paths of the dataset ({', '.join(twice[:4])}): a folded "
                         "majority-vote run needs one answer per (task, worker); remove the copies")  # fmt: skip
    old_files = state.files.get(kind, {})
    read_now = set(assembled.read)
    stored = [e for sha, e in assembled.files.items() if sha in old_files and not (set(e.paths) & read_now)]
    scanned = {"files": 0, "rows": 0}

    def read_stored(tasks: Sequence[str] | None) -> pd.DataFrame:
        got = stored_rows_of(folder, kind, stored, "task", tasks, ("task", "worker", "label"))
        scanned["files"] += got.files_scanned
        scanned["rows"] += got.rows_scanned
        return got.rows

    opts_key = {"tie_break": o.tie_break, "seed": int(o.seed), "classes": list(o.classes or [])}
    labels_rec = state.folds.get(kind) or {}
    rec_w, rec_t = state.folds.get(WORKERS_KEY), state.folds.get(TASKS_KEY)
    why = ""
    if rec_w is None or rec_t is None:
        why = "no stored worker fold (the first folded run, or a store written before it)"
    elif rec_w.get("digest") != labels_rec.get("digest") or rec_t.get("digest") != labels_rec.get("digest"):
        why = "the stored worker fold is not of the files the state holds (an erasure since it was made)"
    elif rec_w.get("options") != opts_key:
        why = "the vote options (tie_break, seed, classes) changed"
    elif fold.removed or assembled.dropped or any(sha in old_files for sha in _read_shas(assembled)):
        why = "files were removed, changed or re-read (a backfill) since the last run"
    prev = None
    if not why and rec_w is not None and rec_t is not None:
        prev = WorkerFold.from_frames(
            read_table(folder, WORKERS_KEY, str(rec_w["file"])), store_tasks(read_table(folder, TASKS_KEY,
                                                                                         str(rec_t["file"])))
        )  # fmt: skip
    try:
        upd = update_workers(prev, folded, winners, assembled.new_rows, read_stored, why)
    except ValueError as exc:
        raise ValueError(f"{exc} (files read now: {', '.join(assembled.read[:5]) or 'none'})") from None
    classes = (
        np.asarray([str(c) for c in o.classes], dtype=object)
        if o.classes
        else folded.classes[natural_order(folded.classes)].astype(str).astype(object)
    )
    fit = folded_skills(consensus, ties, upd.fold, classes, o)
    gold_rows = None
    rows_read = upd.rows_read
    if gold_tasks is not None:
        have = set(np.asarray(folded.tasks.to_pylist(), dtype=object)) & {str(t) for t in gold_tasks}
        old = _as_text(read_stored(sorted(have))) if have else _as_text(assembled.new_rows.iloc[:0])
        new = _as_text(assembled.new_rows)
        gold_rows = pd.concat([old, new[new["task"].isin(have)]], ignore_index=True)
        rows_read += len(old)
    version = state.version + 1
    epoch = len(state.erasures)
    records = {
        key: {"file": write_table(folder, key, f"{key}-{version}-e{epoch}.parquet", frame),
              "digest": fold.record["digest"], "options": opts_key}
        for key, frame in ((WORKERS_KEY, upd.fold.worker_frame()), (TASKS_KEY, upd.fold.tasks))
    }  # fmt: skip
    account = {"how": upd.how, "tasks_reread": upd.tasks_reread, "stored_rows_read": rows_read,
               "stored_files_scanned": scanned["files"], "stored_rows_scanned": scanned["rows"],
               **upd.extra}  # fmt: skip
    if upd.why:
        account["why"] = upd.why
    return FoldedRun(fit, records, account, rows_read, gold_rows)


def _read_shas(assembled: Assembled) -> list[str]:
    """Content hashes of the files read now."""
    now = set(assembled.read)
    return [sha for sha, e in assembled.files.items() if set(e.paths) & now]


def folded_skills_run(
    store: str | os.PathLike[str],
    source: str | os.PathLike[str],
    options: SkillsOptions | None = None,
    *,
    columns: Mapping[str, str] | None = None,
    refresh: Sequence[str] = (),
    run_id: str | None = None,
    **overrides: Any,
) -> FoldedRun:
    """A folded majority-vote skills fit over every file of ``source`` without the pipeline (the flow's fit step).

    Holds the store's lock, reads and sums the files the store has not seen
    (:func:`crowdflow.storage.increment_inputs.folded_input`), votes and updates the worker fold
    (:func:`fold_in_store`), then commits the state with both folds. ``run.fit.result`` holds the tables of a full
    ``method: mv`` fit (``output_tables(run.fit.result, run.fit.report)``), ``run.input`` the files' account.
    """
    if options is None:  # majority vote is the one folded method: the default here
        overrides = {"method": "mv", **overrides}
    o = SkillsOptions.resolve(options, **overrides)
    if o.method != "mv":
        raise ValueError(f"a folded skills run is majority vote (method mv), not {o.method}")
    more: dict[str, dict[str, Any]] = {}
    with folded_input(store, source, "labels", LABEL_COUNTS, columns, refresh, run_id, more_folds=more) as got:
        run = fold_in_store(store, read_state(store), got, o)
        more.update(run.records)
    record = got.record()
    record["fold"]["workers"] = run.account
    record["stored_rows_read"] += run.stored_rows_read
    return replace(run, input=record)
