"""Majority-vote skills tables from folded counts and a per-worker fold (``skills.incremental`` with ``method: mv``).

A folded skills run (issue #38) keeps, beside the per-task class counts of :mod:`crowdflow.skills.increments`, a
**worker fold** (:class:`WorkerFold`) that makes every table of a full majority-vote run except one column exact
without reading the history's rows (docs/methods/skills.md §4.4):

- per worker: ``n_labels`` (a sum over files), ``agree`` = Σ_t 1{the worker's label on t = the vote of t}, and
  ``strength`` = Σ_{t ∋ i} (k_t − 1) (integers), and the worker graph's parity union-find forest
  (:class:`~crowdflow.graphs.parity.ParityForest`: edges are only ever added while files are only added);
- per task (in the label fold's text order): its vote, its label count ``k_t`` and one worker (the task's
  component: every worker of a task is in one component).

A run that only adds files reads the stored rows of the tasks whose contribution moves: the **old tasks the new
rows touch** (their ``k_t`` and maybe their vote change; their old workers' ``strength`` moves) and the **old tasks
whose vote moved** without new labels (none since ties draw by task id, :mod:`crowdflow.skills.ties`; kept for a
store voted under another tie rule, e.g. the positional draw before issue #38's fix). For
those tasks the old contribution is subtracted (old vote, old ``k_t``) and the new one added; every new row is
added. Files removed or changed, an erasure, other options, or no stored worker fold: the fold is rebuilt from the
stored rows of every file (stated in the manifest). Every sum is an integer, so the result equals a full run's
whatever the order of the files.

What is not a sum: ``n_partners`` (distinct co-labellers; needs the set of worker pairs) and the component
columns made from it (``n_edges``, ``d_max``, ``D_sum``): NaN with a reason, as the partitioned (Dask) run writes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crowdflow.graphs import Components, ParityForest, WorkerGraphReport
from crowdflow.graphs.workers import worker_graph_from_components
from crowdflow.labels import answered, natural_order
from crowdflow.skills.fit import SkillsResult, _base_status, fit_metadata, worker_table
from crowdflow.skills.folded_parts import (
    PARTS_FORMAT,
    PartsIndex,
    first_is_number,
    plan_update,
    read_consensus,
    read_parts,
    split_whole,
    write_plan,
)
from crowdflow.skills.folded_stream import DuplicatePair, rebuild_streamed
from crowdflow.skills.identifiability import component_diagnostics_pairless
from crowdflow.skills.increments import LABEL_COUNTS, FoldedLabels, fold_labels, text_ids, vote_folded
from crowdflow.skills.options import SkillsOptions
from crowdflow.skills.reasons import explain_missing_skills
from crowdflow.storage.increment_inputs import Assembled, folded_input
from crowdflow.storage.increments import FileEntry, Fold, State, read_state, stored_rows_of, write_table

__all__ = [
    "FoldedRun",
    "FoldedSkills",
    "WorkerFold",
    "fold_in_store",
    "folded_skills",
    "folded_skills_run",
    "update_workers",
]


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
    tasks : pyarrow.Table
        ``task, winner, k, rep`` per task of the label fold, in its (text) order (``rep``: the code of one of its
        workers); kept in Arrow (a fold of 10^6 tasks is never turned into Python strings).
    """

    workers: np.ndarray
    n_labels: np.ndarray
    agree: np.ndarray
    strength: np.ndarray
    parent: np.ndarray
    par: np.ndarray
    rank: np.ndarray
    odd: np.ndarray
    tasks: pa.Table

    @classmethod
    def empty(cls) -> WorkerFold:
        z = np.zeros(0, dtype=np.int64)
        e = pa.array([], pa.string())
        tasks = pa.table({"task": e, "winner": e, "k": pa.array([], pa.int64()), "rep": pa.array([], pa.int64())})
        w = np.zeros(0, dtype=object)
        return cls(w, z, z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), z.astype(bool), tasks)

    def worker_frame(self, n_rep: np.ndarray | None = None) -> pd.DataFrame:
        """The per-worker arrays as one table (the increment store's ``mv-workers`` file); ``n_rep`` (the tasks each
        worker represents, a fold kept in parts: :mod:`crowdflow.skills.folded_parts`) as a last column."""
        out = pd.DataFrame(
            {"worker": self.workers.astype(str), "n_labels": self.n_labels, "agree": self.agree,
             "strength": self.strength, "parent": self.parent, "par": self.par, "rank": self.rank, "odd": self.odd}
        )  # fmt: skip
        if n_rep is not None:
            out["n_rep"] = n_rep
        return out

    @classmethod
    def from_tables(cls, workers: pa.Table, tasks: pa.Table) -> WorkerFold:
        def col(name: str) -> np.ndarray:
            return np.asarray(workers[name].to_numpy())

        ids = np.asarray(workers["worker"].cast(pa.string()).to_pylist(), dtype=object)
        text = {c: tasks[c].combine_chunks().cast(pa.string()) for c in ("task", "winner")}
        table = pa.table({"task": text["task"], "winner": text["winner"], "k": tasks["k"].cast(pa.int64()),
                          "rep": tasks["rep"].cast(pa.int64())})  # fmt: skip
        return cls(ids, col("n_labels"), col("agree"), col("strength"), col("parent"), col("par"), col("rank"),
                   col("odd").astype(bool), table)  # fmt: skip

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


Rows = dict[str, pa.Array]


def _rows(frame: pd.DataFrame) -> Rows:
    """``task, worker, label`` of a rows table as Arrow text (ids compared as text, as the encoder does)."""
    frame = answered(frame)
    if len(frame) == 0:
        return {c: pa.array([], pa.string()) for c in ("task", "worker", "label")}
    return {c: text_ids(frame[c]) for c in ("task", "worker", "label")}


def _concat(*parts: Rows) -> Rows:
    return {c: pa.concat_arrays([p[c] for p in parts]) for c in ("task", "worker", "label")}


def _positions(values: pa.Array, within: pa.Array) -> np.ndarray:
    """Position of each of ``values`` in ``within`` (an Arrow hash lookup), −1 where absent."""
    out: np.ndarray = pc.index_in(values, value_set=within).fill_null(-1).to_numpy(zero_copy_only=False)
    return out.astype(np.int64)


def update_workers(
    prev: WorkerFold | None,
    folded: FoldedLabels,
    winners: pa.Array,
    new_rows: pd.DataFrame,
    read_stored: Callable[[pa.Array | None], pd.DataFrame],
    why_rebuild: str = "",
) -> WorkerUpdate:
    """The worker fold after a run (module docstring).

    Parameters
    ----------
    prev : WorkerFold or None
        The stored fold when it is valid for an update (files only added since, same options); None: rebuild.
    folded : FoldedLabels
        The label fold after the run (every file).
    winners : pyarrow.Array
        The vote of each task of ``folded``, in its order (:func:`crowdflow.skills.increments.vote_folded`).
    new_rows : pandas.DataFrame
        ``task, worker, label`` of the files read now (erased workers dropped).
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
    tasks = folded.tasks
    n_t = len(tasks)
    k_after = folded.counts.sum(axis=1).astype(np.int64)
    new = _rows(new_rows)
    if prev is None:
        old = _rows(read_stored(None))
        none = np.full(n_t, -1, dtype=np.int64)
        fold = _apply(WorkerFold.empty(), tasks, winners, k_after, _concat(old, new), 0, none, none, np.ones(n_t, bool))
        return WorkerUpdate(fold, "rebuilt", len(pc.unique(old["task"])), len(old["task"]), why_rebuild)
    prev_tasks = prev.tasks["task"].combine_chunks()
    at = _aligned(tasks, prev_tasks)  # -1: a new task
    is_old = at >= 0
    hit = is_old & np.asarray(pc.is_in(tasks, value_set=pc.unique(new["task"])).to_numpy(zero_copy_only=False))
    old_winner = prev.tasks["winner"].combine_chunks().take(pa.array(np.maximum(at, 0)))
    moved = is_old & ~np.asarray(pc.equal(old_winner, winners).to_numpy(zero_copy_only=False), dtype=bool)
    reread = tasks.filter(pa.array(hit | moved))
    old = _rows(read_stored(reread)) if len(reread) else _rows(new_rows.iloc[:0])
    k_prev = prev.tasks["k"].to_numpy()
    k_before = np.where(is_old, k_prev[np.maximum(at, 0)] if k_prev.size else 0, 0)
    rows = _concat(old, new)
    fold = _apply(prev, tasks, winners, k_after, rows, len(old["task"]), at, k_before, ~is_old | hit | moved)
    extra = {"tasks_touched": int(hit.sum()), "tasks_vote_moved_untouched": int((moved & ~hit).sum())}
    return WorkerUpdate(fold, "updated", len(reread), len(old["task"]), "", extra)


def _aligned(tasks: pa.Array, prev_tasks: pa.Array) -> np.ndarray:
    """Position of each fold task among the previous fold's tasks (−1: new). Both are in text order; when every new
    task sorts after the old ones (ids that grow, e.g. dated) the old tasks are the fold's first ones, found by one
    buffer comparison instead of a hash lookup."""
    n = len(prev_tasks)
    if n <= len(tasks) and tasks.slice(0, n).equals(prev_tasks):
        return np.concatenate([np.arange(n, dtype=np.int64), np.full(len(tasks) - n, -1, dtype=np.int64)])
    return _positions(tasks, prev_tasks)


def _duplicate_error(rows: Rows, k: int) -> ValueError:
    task, worker = rows["task"][k].as_py(), rows["worker"][k].as_py()
    return ValueError(
        f"worker {worker!r} answers task {task!r} more than once across the files: a folded majority-vote run counts "
        "every row, so it needs one answer per (task, worker); drop skills.incremental to apply skills.duplicates"
    )


def _apply(
    prev: WorkerFold,
    tasks: pa.Array,
    winners: pa.Array,
    k_after: np.ndarray,
    rows: Rows,
    n_old: int,
    at: np.ndarray,
    k_before: np.ndarray,
    need: np.ndarray,
) -> WorkerFold:
    """``prev`` with the stored rows of the re-read tasks (the first ``n_old`` of ``rows``) taken out (old vote,
    old k) and every row put in (new vote, new k).

    ``at``: each fold task's position in ``prev.tasks`` (−1: new); ``need``: the tasks ``rows`` covers (the re-read
    and the new ones), so a row's task is looked up among those only. Raises ``ValueError`` on a repeated
    (task, worker) pair.
    """
    workers = prev.workers
    incoming = set(pc.unique(rows["worker"]).to_pylist()) - set(workers.tolist())
    if incoming:
        union = np.concatenate([workers, np.asarray(sorted(incoming), dtype=object)]).astype(object)
        union = union[natural_order(union)]
    else:
        union = workers
    n_w = union.size
    ids = pa.array(union.tolist(), pa.string())
    pos = _positions(pa.array(workers.tolist(), pa.string()), ids) if workers.size else np.zeros(0, np.int64)
    n_labels, agree, strength = (np.zeros(n_w, dtype=np.int64) for _ in range(3))
    parent, par, rank = np.arange(n_w, dtype=np.int64), np.zeros(n_w, dtype=np.int64), np.zeros(n_w, dtype=np.int64)
    odd = np.zeros(n_w, dtype=bool)
    n_labels[pos], agree[pos], strength[pos] = prev.n_labels, prev.agree, prev.strength
    parent[pos], par[pos], rank[pos], odd[pos] = pos[prev.parent], prev.par, prev.rank, prev.odd
    idx = np.flatnonzero(need)
    sub = tasks if idx.size == len(tasks) else tasks.take(pa.array(idx))
    found = _positions(rows["task"], sub)
    if (found < 0).any():
        raise ValueError("rows of a task the label fold does not hold (the fold and the rows are out of step)")
    t = idx[found]
    w = _positions(rows["worker"], ids)
    order = np.lexsort((w, t))
    ts, ws = t[order], w[order]
    same_pair = (ts[1:] == ts[:-1]) & (ws[1:] == ws[:-1])
    if same_pair.any():
        raise _duplicate_error(rows, int(order[1:][same_pair][0]))
    if n_old:  # the re-read tasks' stored rows leave with their old vote and count
        t_o, w_o = t[:n_old], w[:n_old]
        prev_winner = prev.tasks["winner"].combine_chunks().take(pa.array(at[t_o]))
        same = pc.equal(rows["label"].slice(0, n_old), prev_winner).to_numpy(zero_copy_only=False)
        np.subtract.at(agree, w_o, np.asarray(same, dtype=np.int64))
        np.subtract.at(strength, w_o, k_before[t_o] - 1)
        n_labels -= np.bincount(w_o, minlength=n_w)
    same = pc.equal(rows["label"], winners.take(pa.array(t))).to_numpy(zero_copy_only=False)
    agree += np.bincount(w, weights=np.asarray(same, dtype=np.float64), minlength=n_w).astype(np.int64)
    strength += np.bincount(w, weights=(k_after[t] - 1).astype(np.float64), minlength=n_w).astype(np.int64)
    n_labels += np.bincount(w, minlength=n_w)
    forest = ParityForest(parent, par, rank, odd)
    if t.size:
        starts = np.flatnonzero(np.r_[True, ts[1:] != ts[:-1]])
        forest.merge(ParityForest.from_labels(np.r_[starts, ts.size].astype(np.int64), ws, n_w))
    # per task of the fold, one of its workers (its component), as a code into the worker order; new tasks take one
    # from their rows
    rep = np.full(len(tasks), -1, dtype=np.int64)
    have = at >= 0
    if have.any():
        rep[have] = pos[prev.tasks["rep"].to_numpy()[at[have]]]
    rep[t] = w
    if (rep < 0).any():
        raise ValueError("a task of the label fold has no worker (the fold and the worker fold are out of step)")
    table = pa.table({"task": tasks, "winner": winners, "k": pa.array(k_after), "rep": pa.array(rep)})
    return WorkerFold(union, n_labels, agree, strength, forest.parent, forest.par, forest.rank, forest.odd, table)


@dataclass(frozen=True)
class FoldedSkills:
    """A folded majority-vote fit: the :class:`SkillsResult` a full ``mv`` fit gives (less ``n_partners``) and the
    worker-graph report of its labels (pair-free)."""

    result: SkillsResult
    report: WorkerGraphReport


def folded_skills(
    consensus: pd.DataFrame,
    n_ties: int,
    fold: WorkerFold,
    classes: np.ndarray,
    options: SkillsOptions,
    task_reps: np.ndarray | None = None,
) -> FoldedSkills:
    """The tables of a full ``method: mv`` fit from the consensus of the folded counts and the worker fold.

    ``consensus``: :func:`crowdflow.skills.increments.majority_from_folded`; ``classes``: the fitted label set (the
    declared ``classes`` or the observed ones, in the encoder's order). Skills, accuracy, strength, components,
    status and the per-component counts are a full run's, bit for bit (the same float64 operations on the same
    integers); ``n_partners`` and ``n_edges``/``d_max``/``D_sum`` are NaN with their reason. ``task_reps``: per
    worker, the tasks it represents (a fold kept in parts holds no per-task table here); default: counted from
    ``fold.tasks["rep"]``.
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
    reps = np.bincount(fold.tasks["rep"].to_numpy(), minlength=w) if task_reps is None else task_reps
    n_tasks = np.bincount(g.labels, weights=reps, minlength=g.n_components).astype(np.int64)
    n_lab = np.bincount(g.labels, weights=n_i, minlength=g.n_components).astype(np.int64)
    diag = component_diagnostics_pairless(None, g, partners, strength, skill, status, per_component=(n_lab, n_tasks))
    n_total, n_t = int(n_i.sum()), int(reps.sum())
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
            "frac_tasks_identified": float(int(reps[ok].sum()) / max(n_t, 1)),
            "folded": True,
        }
    )
    explain_missing_skills(table, diag, "mv", pairs=False)
    cons = consensus.assign(fallback=np.zeros(len(consensus), dtype=bool))
    result = SkillsResult(skills=table, consensus=cons, diagnostics=diag, metadata=meta)
    report = worker_graph_from_components(g, partners, n_i, fold.workers)
    return FoldedSkills(result, report)


#: the increment store's keys (folders) of the worker fold's two tables, beside the label fold
WORKERS_KEY, TASKS_KEY = "mv-workers", "mv-tasks"
#: the layout of those tables (a stored worker fold of another layout is rebuilt); ``/2``: the per-task table lives in
#: the label fold's parts (:mod:`crowdflow.skills.folded_parts`) and the worker table has ``n_rep``
FOLD_FORMAT = "crowdflow-mv-workers/1"
PARTED_FORMAT = "crowdflow-mv-workers/2"


@dataclass(frozen=True)
class FoldedRun:
    """What :func:`fold_in_store` computed for a run: the fit, the worker fold's account, the state records.

    ``records``: the next state's ``folds`` entries written by the run (committed with it; None: a key the new
    layout drops); ``account``: the manifest's ``fold.workers`` (how, why, tasks re-read, stored rows read and
    scanned, parts read, rewritten and reused); ``gold_rows``: the rows of the gold tasks (``task, worker, label``)
    when gold tasks were asked for; ``input``: the manifest's account of the labels input (:func:`folded_skills_run`
    only); ``parts``: the label fold's parts when it is kept in parts (the consensus is then published from their
    files, :func:`crowdflow.skills.folded_parts.link_consensus`; ``fit.result.consensus`` is the whole table only
    when asked for).
    """

    fit: FoldedSkills
    records: dict[str, dict[str, Any] | None]
    account: dict[str, Any]
    stored_rows_read: int
    gold_rows: pd.DataFrame | None = None
    input: dict[str, Any] = field(default_factory=dict)
    parts: PartsIndex | None = None


@dataclass
class _Ctx:
    """What both paths of :func:`fold_in_store` share: the store, the files, the stored-row reader and the clock."""

    folder: str | os.PathLike[str]
    state: State
    assembled: Assembled
    options: SkillsOptions
    stored: list[FileEntry]
    fresh: list[FileEntry]
    streamed: bool
    opts_key: dict[str, Any]
    clock: _Clock
    scanned: dict[str, int] = field(default_factory=lambda: {"files": 0, "rows": 0})

    def read_stored(self, tasks: pa.Array | None) -> pd.DataFrame:
        got = stored_rows_of(self.folder, "labels", self.stored, "task", tasks, ("task", "worker", "label"))
        self.scanned["files"] += got.files_scanned
        self.scanned["rows"] += got.rows_scanned
        return got.rows

    def gold(self, asked: pa.Array, new_rows: pd.DataFrame) -> tuple[pd.DataFrame, int]:
        """The rows of the gold tasks ``asked`` (those the fold holds) and how many stored rows that read."""
        if self.streamed:  # every file's rows are in the store now
            wanted = ("task", "worker", "label")
            got_old = (
                stored_rows_of(self.folder, "labels", self.stored + self.fresh, "task", asked, wanted).rows
                if len(asked) else None
            )  # fmt: skip
            old = new_rows[list(wanted)].iloc[:0] if got_old is None else got_old
            new = old.iloc[:0]
        else:
            old = self.read_stored(asked) if len(asked) else new_rows.iloc[:0]
            new = new_rows
        new = new[np.asarray(pc.is_in(text_ids(new["task"]), value_set=asked).to_numpy(zero_copy_only=False))]
        cols = ["task", "worker", "label"]
        return pd.concat([old[cols].astype(str), new[cols].astype(str)], ignore_index=True), len(old)

    def workers_record(self, frame: pd.DataFrame, fmt: str) -> dict[str, Any]:
        version, epoch = self.state.version + 1, len(self.state.erasures)
        fold = self.assembled.fold
        assert fold is not None
        name = write_table(self.folder, WORKERS_KEY, f"{WORKERS_KEY}-{version}-e{epoch}.parquet", frame)
        return {"file": name, "digest": fold.record["digest"], "options": self.opts_key, "format": fmt}


def fold_in_store(
    folder: str | os.PathLike[str],
    state: State,
    assembled: Assembled,
    options: SkillsOptions,
    gold_tasks: Sequence[str] | None = None,
    whole_consensus: bool = True,
) -> FoldedRun:
    """A folded majority-vote run on the increment store: votes from the label fold, the worker fold updated.

    ``assembled`` is the run's labels input (:func:`crowdflow.storage.increment_inputs.assemble` with the label
    counts rule, ``rows=False``). The stored worker fold is updated when it was made from exactly the files the
    state held, with the same vote options, and files were only added since; otherwise it is rebuilt from every
    stored file's rows (``account["why"]`` says why). The new tables are written, uncommitted (the caller commits
    them with the state, after the export).

    When the label fold is kept in parts (:mod:`crowdflow.skills.folded_parts`; every fold whose ids are not all
    numbers, from the first run on this layout) and the worker fold is updated, only the parts holding the run's
    tasks are read, voted and rewritten (the **parted** path); anything else (a rebuild, the migration from the
    one-table layout, ids that are numbers) reads the whole fold and writes it in parts again. ``whole_consensus``:
    put every part's consensus rows in ``fit.result.consensus`` (the library API); a run publishes the parts.

    Raises
    ------
    ValueError
        A file at more than one path, or a (task, worker) pair answering twice across the files.
    """
    o = options
    fold = assembled.fold
    assert fold is not None
    kind = "labels"
    twice = sorted(p for e in assembled.files.values() if len(e.paths) > 1 for p in e.paths)
    if twice:
        raise ValueError(f"the same file is at several paths of the dataset ({', '.join(twice[:4])}): a folded "
                         "majority-vote run needs one answer per (task, worker); remove the copies")  # fmt: skip
    old_files = state.files.get(kind, {})
    read_now = set(assembled.read)
    # streamed (assemble(check=...), rows=False): the new files' rows were checked, summed and written to the store,
    # not kept; they are read back from there, one file at a time
    streamed = assembled.rows_read is not None
    fresh = [e for sha, e in assembled.files.items() if not (sha in old_files and not (set(e.paths) & read_now))]
    stored = [e for sha, e in assembled.files.items() if sha in old_files and not (set(e.paths) & read_now)]
    opts_key = {"tie_break": o.tie_break, "seed": int(o.seed), "classes": list(o.classes or [])}
    ctx = _Ctx(folder, state, assembled, o, stored, fresh, streamed, opts_key, _Clock())
    labels_rec = state.folds.get(kind) or {}
    parted = labels_rec.get("format") == PARTS_FORMAT
    rec_w, rec_t = state.folds.get(WORKERS_KEY), state.folds.get(TASKS_KEY)
    why = ""
    if rec_w is None or (rec_t is None and not parted):
        why = "no stored worker fold (the first folded run, or a store written before it)"
    elif rec_w.get("digest") != labels_rec.get("digest") or (
        not parted and rec_t is not None and rec_t.get("digest") != labels_rec.get("digest")
    ):
        why = "the stored worker fold is not of the files the state holds (an erasure since it was made)"
    elif (parted and rec_w.get("format") != PARTED_FORMAT) or (
        not parted and (rec_w.get("format") != FOLD_FORMAT or rec_t is None or rec_t.get("format") != FOLD_FORMAT)
    ):
        why = "the stored worker fold has another layout"
    elif rec_w.get("options") != opts_key:
        why = "the vote options (tie_break, seed, classes) changed"
    elif fold.removed or assembled.dropped or any(sha in old_files for sha in _read_shas(assembled)):
        why = "files were removed, changed or re-read (a backfill) since the last run"
    new_rows = assembled.new_rows
    if streamed and not why:  # the update needs the new rows: the files read now (a day), from the store
        new_rows = stored_rows_of(folder, kind, fresh, "task", None, ("task", "worker", "label")).rows
    index = PartsIndex.from_record(labels_rec) if parted else None
    usable = fold.deferred and not why and index is not None and rec_w is not None
    if usable and index is not None and rec_w is not None and not _numbers_first(index, fold):
        return _parted(ctx, index, rec_w, new_rows, gold_tasks, whole_consensus)
    return _whole(ctx, index, rec_w, rec_t, new_rows, why, gold_tasks)


def _numbers_first(index: PartsIndex, fold: Fold) -> bool:
    """Whether the fold's first id after the run (text order) is a number: a full run then orders by value."""
    firsts = [index.parts[0].lo] if index.parts else []
    for s in (*fold.add_sums, *fold.remove_sums):
        if len(s):
            firsts.append(str(pc.min(text_ids(s["task"])).as_py()))
    return bool(firsts) and first_is_number(min(firsts))


def _parted(
    ctx: _Ctx,
    index: PartsIndex,
    rec_w: dict[str, Any],
    new_rows: pd.DataFrame,
    gold_tasks: Sequence[str] | None,
    whole_consensus: bool,
) -> FoldedRun:
    """The parted path of :func:`fold_in_store`: the touched parts read, voted and rewritten; the rest kept."""
    o, fold, clock = ctx.options, ctx.assembled.fold, ctx.clock
    assert fold is not None
    plan = plan_update(ctx.folder, index, fold.add_sums, fold.remove_sums, o.classes, o.tie_break, o.seed)
    clock.lap("vote")
    workers = pq.read_table(Path(ctx.folder) / WORKERS_KEY / str(rec_w["file"]))
    ids = pa.array(workers["worker"].cast(pa.string()).to_pylist(), pa.string())
    rep_old = _positions(plan.old_rep, ids)
    if (rep_old < 0).any():
        raise ValueError("a part names a worker the worker fold does not hold (the store is out of step)")
    k_old = plan.old.counts.sum(axis=1).astype(np.int64)
    tasks = pa.table({"task": plan.old.tasks, "winner": plan.old_winners, "k": pa.array(k_old),
                      "rep": pa.array(rep_old)})  # fmt: skip
    prev = WorkerFold.from_tables(workers, tasks)
    clock.lap("read_worker_fold")
    try:
        upd = update_workers(prev, plan.new, plan.winners, new_rows, ctx.read_stored)
    except ValueError as exc:
        raise ValueError(f"{exc} (files read now: {', '.join(ctx.assembled.read[:5]) or 'none'})") from None
    clock.lap("update")
    union = pa.array(upd.fold.workers.tolist(), pa.string())
    pos = _positions(ids, union)
    n_rep = np.zeros(len(union), dtype=np.int64)
    n_rep[pos] = workers["n_rep"].to_numpy()
    n_rep -= np.bincount(pos[rep_old], minlength=len(union)).astype(np.int64)
    rep_new = upd.fold.tasks["rep"].to_numpy()
    n_rep += np.bincount(rep_new, minlength=len(union)).astype(np.int64)
    version = ctx.state.version + 1
    new_index = write_plan(ctx.folder, plan, union.take(pa.array(rep_new)), version)
    clock.lap("write_parts")
    classes = np.asarray(plan.vote_classes, dtype=object)
    consensus = _EMPTY_CONSENSUS
    if whole_consensus or gold_tasks is not None:
        consensus = read_consensus(ctx.folder, new_index).drop(columns=["fallback"])
    fit = folded_skills(consensus, new_index.n_ties, upd.fold, classes, o, task_reps=n_rep)
    clock.lap("tables")
    gold_rows, rows_read = None, upd.rows_read
    if gold_tasks is not None:
        gold_rows, n = ctx.gold(pa.array([str(t) for t in gold_tasks], pa.string()), new_rows)
        rows_read += n
    records: dict[str, dict[str, Any] | None] = {
        "labels": new_index.record(fold.record["digest"], str(fold.record["rule"])),
        WORKERS_KEY: ctx.workers_record(upd.fold.worker_frame(n_rep), PARTED_FORMAT),
        TASKS_KEY: None,
    }
    clock.lap("write_worker_fold")
    rewritten = len(plan.groups)
    account = {"how": upd.how, "tasks_reread": upd.tasks_reread, "stored_rows_read": rows_read,
               "stored_files_scanned": ctx.scanned["files"], "stored_rows_scanned": ctx.scanned["rows"],
               **upd.extra,
               "parts": {"layout": PARTS_FORMAT, "total": len(new_index.parts), "read": len(plan.touched),
                         "rewritten": rewritten, "reused": len(new_index.parts) - rewritten,
                         "tasks_read": len(plan.old.tasks), "tasks_written": len(plan.new.tasks),
                         "tasks_total": new_index.n_tasks},
               "seconds": clock.timings}  # fmt: skip
    return FoldedRun(fit, records, account, rows_read, gold_rows, parts=new_index)


_EMPTY_CONSENSUS = pd.DataFrame(
    {"task": pd.Series([], dtype=object), "label": pd.Series([], dtype=object),
     "confidence": pd.Series([], dtype=np.float64), "n_labels": pd.Series([], dtype=np.int64)}
)  # fmt: skip


def _whole(
    ctx: _Ctx,
    index: PartsIndex | None,
    rec_w: dict[str, Any] | None,
    rec_t: dict[str, Any] | None,
    new_rows: pd.DataFrame,
    why: str,
    gold_tasks: Sequence[str] | None,
) -> FoldedRun:
    """The whole path of :func:`fold_in_store`: every task voted, the worker fold updated or rebuilt, the fold
    written in parts (or, ids that are numbers, as one table)."""
    o, fold, clock, folder = ctx.options, ctx.assembled.fold, ctx.clock, ctx.folder
    assert fold is not None
    kind = "labels"
    base_w = base_rep = None
    if fold.deferred:  # the stored fold is in parts: all of them read, the run's sums folded in
        assert index is not None
        base, base_w, base_rep = read_parts(folder, index.parts)
        folded = fold_labels(base, fold.add_sums, fold.remove_sums)[0]
    else:
        folded = FoldedLabels.from_frame(fold.table)
    consensus, ties, winners = vote_folded(folded, o.classes, o.tie_break, o.seed)
    clock.lap("vote")
    prev = None
    if not why and rec_w is not None:
        workers = pq.read_table(Path(folder) / WORKERS_KEY / str(rec_w["file"]))
        if base_w is not None and base_rep is not None:
            ids = pa.array(workers["worker"].cast(pa.string()).to_pylist(), pa.string())
            tasks = pa.table({"task": base.tasks, "winner": base_w, "k": pa.array(base.counts.sum(axis=1)),
                              "rep": pa.array(_positions(base_rep, ids))})  # fmt: skip
        else:
            assert rec_t is not None
            tasks = pq.read_table(Path(folder) / TASKS_KEY / str(rec_t["file"]))
        prev = WorkerFold.from_tables(workers, tasks)
    clock.lap("read_worker_fold")
    try:
        if prev is None:  # rebuilt file by file: memory O(tasks + workers), not O(rows)
            upd = _rebuild(folder, kind, folded, winners, ctx.stored, ctx.fresh if ctx.streamed else [], new_rows,
                           why)  # fmt: skip
        else:
            upd = update_workers(prev, folded, winners, new_rows, ctx.read_stored, why)
    except ValueError as exc:
        raise ValueError(f"{exc} (files read now: {', '.join(ctx.assembled.read[:5]) or 'none'})") from None
    clock.lap("update")
    classes = (
        np.asarray([str(c) for c in o.classes], dtype=object)
        if o.classes
        else folded.classes[natural_order(folded.classes)].astype(str).astype(object)
    )
    fit = folded_skills(consensus, ties, upd.fold, classes, o)
    clock.lap("tables")
    gold_rows = None
    rows_read = upd.rows_read
    if gold_tasks is not None:
        asked = pa.array([str(t) for t in gold_tasks], pa.string())
        gold_rows, n = ctx.gold(asked.filter(pc.is_in(asked, value_set=folded.tasks)), new_rows)
        rows_read += n
    version = ctx.state.version + 1
    epoch = len(ctx.state.erasures)
    rep = upd.fold.tasks["rep"].to_numpy()
    records: dict[str, dict[str, Any] | None]
    new_index = None
    if len(folded.tasks) and not first_is_number(str(folded.tasks[0].as_py())):  # kept in parts from now on
        ids = pa.array(upd.fold.workers.tolist(), pa.string())
        new_index = split_whole(folder, folded, winners, ids.take(pa.array(rep)), consensus, version)
        n_rep = np.bincount(rep, minlength=len(ids)).astype(np.int64)
        records = {
            kind: new_index.record(fold.record["digest"], str(fold.record["rule"])),
            WORKERS_KEY: ctx.workers_record(upd.fold.worker_frame(n_rep), PARTED_FORMAT),
            TASKS_KEY: None,
        }
    else:  # one table each (ids that are numbers: a full run orders them by value)
        records = {
            WORKERS_KEY: ctx.workers_record(upd.fold.worker_frame(), FOLD_FORMAT),
            TASKS_KEY: {"file": write_table(folder, TASKS_KEY, f"{TASKS_KEY}-{version}-e{epoch}.parquet",
                                            upd.fold.tasks),
                        "digest": fold.record["digest"], "options": ctx.opts_key, "format": FOLD_FORMAT},
        }  # fmt: skip
        if fold.deferred:  # the parts' fold as one table again
            name = write_table(folder, kind, f"fold-{version}-e{epoch}.parquet", folded.to_frame())
            records[kind] = {"file": name, "digest": fold.record["digest"], "rule": fold.record["rule"]}
    clock.lap("write_worker_fold")
    account = {"how": upd.how, "tasks_reread": upd.tasks_reread, "stored_rows_read": rows_read,
               "stored_files_scanned": ctx.scanned["files"], "stored_rows_scanned": ctx.scanned["rows"],
               **upd.extra, "seconds": clock.timings}  # fmt: skip
    if new_index is not None:
        n_parts = len(new_index.parts)
        account["parts"] = {"layout": PARTS_FORMAT, "total": n_parts, "read": len(index.parts) if index else 0,
                            "rewritten": n_parts, "reused": 0, "tasks_read": len(folded.tasks) if index else 0,
                            "tasks_written": len(folded.tasks), "tasks_total": len(folded.tasks),
                            "why_whole": why or ("the fold was one table (the migration to parts)" if index is None
                                                 else "ids that are numbers")}  # fmt: skip
    if upd.why:
        account["why"] = upd.why
    return FoldedRun(fit, records, account, rows_read, gold_rows, parts=new_index)


def _rebuild(
    folder: str | os.PathLike[str],
    kind: str,
    folded: FoldedLabels,
    winners: pa.Array,
    stored: Sequence[FileEntry],
    streamed: Sequence[FileEntry],
    new_rows: pd.DataFrame,
    why: str,
) -> WorkerUpdate:
    """The worker fold rebuilt from every file's rows, one file at a time
    (:func:`crowdflow.skills.folded_stream.rebuild_streamed`): the stored files' rows, read back from the store,
    the files read now either from ``new_rows`` (kept in memory) or, ``streamed``, read back from the store too
    (their rows in the account's ``new_rows_read_back``)."""
    cols = ("task", "worker", "label")
    back = {"rows": 0}

    def chunks() -> Iterator[tuple[Rows, bool]]:
        for e in stored:
            yield _rows(stored_rows_of(folder, kind, [e], "task", None, cols).rows), True
        for e in streamed:
            got = stored_rows_of(folder, kind, [e], "task", None, cols).rows
            back["rows"] += len(got)
            yield _rows(got), False
        if len(new_rows):
            yield _rows(new_rows), False

    tasks = folded.tasks
    k_after = folded.counts.sum(axis=1).astype(np.int64)
    try:
        got = rebuild_streamed(tasks, winners, k_after, chunks())
    except DuplicatePair as exc:
        raise ValueError(str(exc)) from None
    table = pa.table({"task": tasks, "winner": winners, "k": pa.array(k_after), "rep": pa.array(got.rep)})
    f = got.forest
    fold = WorkerFold(got.workers, got.n_labels, got.agree, got.strength, f.parent, f.par, f.rank, f.odd, table)
    extra = {"streamed": bool(streamed), "files_passed": len(stored) + len(streamed) + bool(len(new_rows)),
             "spanning_rows": got.spanning_rows, "new_rows_read_back": back["rows"]}  # fmt: skip
    return WorkerUpdate(fold, "rebuilt", got.stored_tasks, got.stored_rows + back["rows"], why, extra)


class _Clock:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.timings[step] = round(now - self._t, 3)
        self._t = now


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
    whole_consensus: bool = True,
    **overrides: Any,
) -> FoldedRun:
    """A folded majority-vote skills fit over every file of ``source`` without the pipeline (the flow's fit step).

    Holds the store's lock, reads and sums the files the store has not seen
    (:func:`crowdflow.storage.increment_inputs.folded_input`), votes and updates the worker fold
    (:func:`fold_in_store`), then commits the state with both folds. ``run.fit.result`` holds the tables of a full
    ``method: mv`` fit (``output_tables(run.fit.result, run.fit.report)``), ``run.input`` the files' account.
    ``whole_consensus=False``: a fold kept in parts leaves ``consensus`` empty (its rows are in ``run.parts``'
    files, :func:`crowdflow.skills.folded_parts.read_consensus`), so the run opens no part it does not touch.
    """
    if options is None:  # majority vote is the one folded method: the default here
        overrides = {"method": "mv", **overrides}
    o = SkillsOptions.resolve(options, **overrides)
    if o.method != "mv":
        raise ValueError(f"a folded skills run is majority vote (method mv), not {o.method}")
    more: dict[str, dict[str, Any] | None] = {}
    with folded_input(
        store,
        source,
        "labels",
        LABEL_COUNTS,
        columns,
        refresh,
        run_id,
        more_folds=more,
        stream_until=WORKERS_KEY,
        defer=True,
    ) as got:
        run = fold_in_store(store, read_state(store), got, o, whole_consensus=whole_consensus)
        more.update(run.records)
    record = got.record()
    record["fold"]["workers"] = run.account
    record["stored_rows_read"] += run.stored_rows_read
    return replace(run, input=record)
