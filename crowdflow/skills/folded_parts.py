"""The folded majority-vote state kept in parts: a daily run that costs the tasks it touches (issue #38, part 2).

A folded ``method: mv`` run (:mod:`crowdflow.skills.folded`) needs, per task, its class counts ``C_t``, its vote and
one of its workers; per worker, sums of integers. Kept as one table each, a run that adds a day to a history of
``T`` tasks reads, votes and rewrites all ``T`` of them (and writes ``T`` consensus rows), though a task's vote
depends on its own counts only (the one tie rule, :mod:`crowdflow.skills.ties`), so an untouched task keeps its
vote and its consensus row. Here the per-task state is kept in **parts**: disjoint ranges of task ids in text
(code-point) order, each a file of ``task, n:<label>…, winner, rep`` (``rep``: the id of one of its workers) and
the part's consensus rows in their final output form. Part ``j`` holds the tasks in ``[lo_j, lo_{j+1})`` (part 0
from the smallest id), so the part of any task is found from the few boundaries without reading a part.

**Keying.** Tasks that sort after every stored task (ids that grow: dated, sequential) start a part of their own,
keyed by the file that first names them, once the last part holds :data:`NEW_PART_MIN` tasks; with such ids (the
daily benchmark: 95 % of a day's labels on new tasks, 5 % on the day before) a day touches the newest part or two.
Hash buckets would make every day touch every bucket (new tasks land everywhere); ranges in id order do that only
for ids that do not grow (random ids), where new tasks land in every part's range: still exact, as costly as one
table; a part grown past :data:`SPLIT_OVER` tasks is split. A whole fold (the first parted run, a rebuild, the
migration from the one-table layout) is cut into parts of :data:`SPLIT_TASKS` tasks.

**A run on parts.** The day's per-file sums (and those of removed files) give the touched tasks; their parts are
read, the signed sums folded in (:func:`crowdflow.skills.increments.fold_labels` on the parts' tasks only), those
parts voted and written under new names, with their consensus parts; every other part is carried over by name,
never opened. Per worker, the number of tasks it represents (``n_rep``) replaces the per-task ``rep`` column in the
per-component task counts, so the skills and components tables stay O(workers). The consensus a run publishes is
the parts in order (each in text order: the order of a full run's table when ids are not all numbers), the
untouched ones hard-linked from the store into the run (the same files the previous run published).

What stays whole: ids that are all numbers (a full run orders them by value, not text): the one-table layout is
kept (:mod:`crowdflow.skills.folded`). Atomic as every stored table: new parts get new names, the state names the
parts of a commit (a record with ``dir`` and ``files``), the parts no state names are garbage of the next commit.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crowdflow.contracts.tables import OUTPUTS
from crowdflow.labels import natural_order
from crowdflow.skills.increments import FoldedLabels, _delta, fold_labels, vote_folded
from crowdflow.skills.types import TieBreak
from crowdflow.storage.increments import step_done
from crowdflow.storage.run_store import write_final_part

__all__ = [
    "PARTS_FORMAT",
    "PARTS_KEY",
    "Part",
    "PartsIndex",
    "PartsPlan",
    "first_is_number",
    "link_consensus",
    "plan_update",
    "read_consensus",
    "read_parts",
    "split_whole",
    "write_plan",
]

#: the store folder of the parts and the layout of their record (a record of another format is not used)
PARTS_KEY = "mv-parts"
PARTS_FORMAT = "crowdflow-mv-parts/1"
#: tasks per part when a whole fold is cut into parts
SPLIT_TASKS = 1_000_000
#: new tasks that sort after every part start their own part once the last part holds this many tasks
NEW_PART_MIN = 65_536
#: a part holding more tasks than this after a run is cut into parts of :data:`SPLIT_TASKS`
SPLIT_OVER = 4_000_000


@dataclass(frozen=True)
class Part:
    """One part: its first and last task id, its task and tie counts, its classes, its fold and consensus files."""

    lo: str
    hi: str
    n: int
    ties: int
    classes: tuple[str, ...]
    fold: str
    consensus: str

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Part:
        return cls(str(raw["lo"]), str(raw["hi"]), int(raw["n"]), int(raw["ties"]),
                   tuple(str(c) for c in raw["classes"]), str(raw["fold"]), str(raw["consensus"]))  # fmt: skip


@dataclass(frozen=True)
class PartsIndex:
    """The parts of a fold in id order (the state's ``folds["labels"]`` record of format :data:`PARTS_FORMAT`)."""

    parts: tuple[Part, ...]

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PartsIndex:
        return cls(tuple(Part.from_json(p) for p in record.get("parts") or ()))

    def record(self, digest: str, rule: str) -> dict[str, Any]:
        files = [f for p in self.parts for f in (p.fold, p.consensus)]
        return {"format": PARTS_FORMAT, "digest": digest, "rule": rule, "dir": PARTS_KEY, "files": files,
                "parts": [asdict(p) for p in self.parts]}  # fmt: skip

    @property
    def n_tasks(self) -> int:
        return sum(p.n for p in self.parts)

    @property
    def n_ties(self) -> int:
        return sum(p.ties for p in self.parts)

    def classes(self) -> list[str]:
        """The labels some task of the fold holds (text order)."""
        return sorted({c for p in self.parts for c in p.classes})

    def locate(self, tasks: pa.Array, is_sorted: bool = False) -> np.ndarray:
        """The part of each id (part ``j`` covers ``[lo_j, lo_{j+1})``, part 0 everything below ``lo_1``).

        The ids are sorted in Arrow (unless ``is_sorted``) and each boundary is found by bisection, a few scalar
        reads per part: no id becomes a Python object."""
        n = len(tasks)
        if len(self.parts) <= 1 or n == 0:
            return np.zeros(n, dtype=np.int64)
        order = None if is_sorted else pc.sort_indices(tasks).to_numpy()
        ids = tasks if order is None else tasks.take(pa.array(order))
        cuts = [_first_at_or_after(ids, p.lo) for p in self.parts[1:]]
        where = np.repeat(np.arange(len(self.parts), dtype=np.int64), np.diff([0, *cuts, n]))
        if order is None:
            return where
        out = np.empty(n, dtype=np.int64)
        out[order] = where
        return out


def _first_at_or_after(ids: pa.Array, key: str) -> int:
    """The first position of the sorted ``ids`` whose id is ``key`` or after it (code-point order)."""
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if str(ids[mid].as_py()) < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


def first_is_number(task: str) -> bool:
    """Whether an id parses as a number: a fold whose first id (text order) does is ordered by value by a full run
    (:func:`crowdflow.skills.increments._natural_task_order`), so it is not kept in parts."""
    try:
        float(task)
    except (TypeError, ValueError):
        return False
    return True


def _ties(counts: np.ndarray) -> int:
    """Tasks with two or more top classes (a class with no label never ties at the top: every task has one)."""
    if counts.shape[0] == 0 or counts.shape[1] == 0:
        return 0
    top = counts == counts.max(axis=1, keepdims=True)
    return int((top.sum(axis=1) > 1).sum())


def read_parts(folder: str | os.PathLike[str], parts: Sequence[Part]) -> tuple[FoldedLabels, pa.Array, pa.Array]:
    """The fold of ``parts`` (in their order), their votes and their ``rep`` worker ids."""
    d = Path(folder) / PARTS_KEY
    tables = [pq.read_table(d / p.fold) for p in parts]
    classes = sorted({c for p in parts for c in p.classes})
    if not tables:
        e = pa.array([], pa.string())
        return FoldedLabels(e, np.asarray(classes, dtype=object), np.zeros((0, len(classes)), np.int64)), e, e
    n = sum(t.num_rows for t in tables)
    counts = np.zeros((n, len(classes)), dtype=np.int64)
    at = 0
    for t in tables:
        for k, c in enumerate(classes):
            if f"n:{c}" in t.column_names:
                counts[at : at + t.num_rows, k] = t[f"n:{c}"].to_numpy()
        at += t.num_rows

    def col(name: str) -> pa.Array:
        chunks = [c.cast(pa.string()) for t in tables for c in t[name].chunks]
        return pa.chunked_array(chunks, type=pa.string()).combine_chunks()

    return FoldedLabels(col("task"), np.asarray(classes, dtype=object), counts), col("winner"), col("rep")


@dataclass(frozen=True)
class PartsPlan:
    """A run on parts before its files are written (:func:`plan_update`).

    ``old``: the fold, votes and ``rep`` ids of the touched parts as stored; ``new``: their fold after the run and
    its votes (text order); ``groups``: per new part, its ``[start, end)`` rows of ``new``; ``slots``: where the new
    parts go among the kept ones (the index of the first touched part each replaces); ``touched``: the stored parts
    re-read; ``consensus``: per new part, its consensus rows (``task, label, confidence, n_labels``).
    """

    index: PartsIndex
    touched: list[int]
    old: FoldedLabels
    old_winners: pa.Array
    old_rep: pa.Array
    new: FoldedLabels
    winners: pa.Array
    groups: list[tuple[int, int]]
    consensus: list[pd.DataFrame]
    ties: list[int]
    slots: list[int]
    vote_classes: list[str]


def plan_update(
    folder: str | os.PathLike[str],
    index: PartsIndex,
    add: Sequence[pd.DataFrame],
    remove: Sequence[pd.DataFrame],
    classes: Sequence[str] | None,
    tie_break: TieBreak,
    seed: int,
) -> PartsPlan:
    """Fold the added and removed files' label sums into the parts holding their tasks, and vote those parts.

    Reads only the touched parts. Tasks that sort after the last part's last task start a new part when the last
    part holds :data:`NEW_PART_MIN` tasks or more (else they join it); a part over :data:`SPLIT_OVER` tasks is cut.

    Raises
    ------
    ValueError
        A count would become negative (the store is out of step), or a label is outside the declared ``classes``.
    """
    delta = _delta(add, remove)
    d_tasks = pc.unique(delta["task"].combine_chunks()) if delta.num_rows else pa.array([], pa.string())
    parts = index.parts
    loc = index.locate(d_tasks)
    last = len(parts) - 1
    if parts:
        beyond = (loc == last) & np.asarray(
            pc.greater(d_tasks, parts[last].hi).to_numpy(zero_copy_only=False), dtype=bool
        )
        own = bool(beyond.any()) and parts[last].n >= NEW_PART_MIN
        touched = sorted({int(j) for j in np.unique(loc[~beyond] if own else loc)})
    else:
        own, touched = True, []
    old, old_winners, old_rep = read_parts(folder, [parts[j] for j in touched])
    cells = delta.to_pandas(types_mapper=pd.ArrowDtype)  # the ids stay Arrow text (text_ids reads them as they are)
    new, _ = fold_labels(old, [cells] if len(cells) else [], ())
    # the new fold's rows, by part: the touched parts in order, then (own) the tasks after every part
    where = index.locate(new.tasks, is_sorted=True) if parts else np.zeros(len(new.tasks), dtype=np.int64)
    if own and parts:
        after = np.asarray(pc.greater(new.tasks, parts[last].hi).to_numpy(zero_copy_only=False), dtype=bool)
        where = np.where(after & (where == last), len(parts), where)
    groups: list[tuple[int, int]] = []
    slots: list[int] = []
    keys = [*touched, len(parts)] if own else touched
    for j in keys:
        on = np.flatnonzero(where == j)
        if on.size == 0:
            continue
        start, end = int(on[0]), int(on[-1]) + 1
        size = end - start
        pieces = range(start, end, SPLIT_TASKS) if size > SPLIT_OVER else range(start, end, max(size, 1))
        for s in pieces:
            groups.append((s, min(end, s + (SPLIT_TASKS if size > SPLIT_OVER else size))))
            slots.append(j)
    kept = {c for j, p in enumerate(parts) if j not in set(touched) for c in p.classes}
    now = kept | set(new.classes[new.counts.sum(axis=0) > 0].astype(str).tolist()) if new.counts.size else kept
    observed = np.asarray(sorted(now), dtype=object)
    vote_classes = list(classes) if classes else observed[natural_order(observed)].astype(str).tolist()
    consensus: list[pd.DataFrame] = []
    ties: list[int] = []
    votes: list[pa.Array] = []
    for s, e in groups:
        piece = FoldedLabels(new.tasks.slice(s, e - s), new.classes, new.counts[s:e])
        table, n_ties, won = vote_folded(piece, vote_classes, tie_break, seed, text_order=True)
        consensus.append(table)
        ties.append(n_ties)
        votes.append(won)
    winners = pa.concat_arrays(votes) if votes else pa.array([], pa.string())
    return PartsPlan(index, touched, old, old_winners, old_rep, new, winners, groups, consensus, ties, slots,
                     vote_classes)  # fmt: skip


def _write_part(
    folder: Path, name: str, fold: FoldedLabels, winners: pa.Array, rep: pa.Array, consensus: pd.DataFrame, ties: int
) -> Part:
    """Write one part's fold file and consensus file (temp + rename each); nothing is committed here."""
    d = folder / PARTS_KEY
    d.mkdir(parents=True, exist_ok=True)
    have = fold.counts.sum(axis=0) > 0 if fold.counts.size else np.zeros(fold.classes.size, dtype=bool)
    classes = tuple(str(c) for c in fold.classes[have])
    data: dict[str, Any] = {"task": fold.tasks}
    for k in np.flatnonzero(have):
        data[f"n:{fold.classes[k]}"] = pa.array(fold.counts[:, k])
    data["winner"], data["rep"] = winners, rep
    fname, cname = f"fold-{name}.parquet", f"cons-{name}.parquet"
    for target, write in (
        (fname, lambda p: pq.write_table(pa.table(data), p)),
        (cname, lambda p: write_final_part(
            consensus.assign(fallback=np.zeros(len(consensus), dtype=bool)), str(p), "consensus",
            OUTPUTS["skills"].get("consensus"), None)),
    ):  # fmt: skip
        tmp = d / f".{target}.{os.getpid()}.tmp"
        write(tmp)
        os.replace(tmp, d / target)
        step_done(f"part {PARTS_KEY}/{target}")  # a kill point of the store's tests
    n = len(fold.tasks)
    lo, hi = (str(fold.tasks[0].as_py()), str(fold.tasks[n - 1].as_py())) if n else ("", "")
    return Part(lo, hi, n, int(ties), classes, fname, cname)


def write_plan(folder: str | os.PathLike[str], plan: PartsPlan, rep: pa.Array, version: int) -> PartsIndex:
    """Write the plan's new parts (``rep``: a worker id per row of ``plan.new``) and return the new index: the
    stored parts not touched kept as they are, each touched one replaced by the new parts of its slot."""
    made: dict[int, list[Part]] = {}
    for k, ((s, e), slot) in enumerate(zip(plan.groups, plan.slots, strict=True)):
        piece = FoldedLabels(plan.new.tasks.slice(s, e - s), plan.new.classes, plan.new.counts[s:e])
        part = _write_part(
            Path(folder), f"{version}-{k:05d}", piece, plan.winners.slice(s, e - s), rep.slice(s, e - s),
            plan.consensus[k], plan.ties[k],
        )  # fmt: skip
        made.setdefault(slot, []).append(part)
    out: list[Part] = []
    touched = set(plan.touched)
    for j, p in enumerate(plan.index.parts):
        out.extend(made.get(j, []) if j in touched else [p])
    out.extend(made.get(len(plan.index.parts), []))
    return PartsIndex(tuple(out))


def split_whole(
    folder: str | os.PathLike[str],
    folded: FoldedLabels,
    winners: pa.Array,
    rep: pa.Array,
    consensus: pd.DataFrame,
    version: int,
) -> PartsIndex:
    """A whole fold (text order), its votes, ``rep`` ids and consensus (same order) cut into parts of
    :data:`SPLIT_TASKS` tasks and written (the first parted run, a rebuild, the migration from one table)."""
    n = len(folded.tasks)
    parts = []
    for k, s in enumerate(range(0, n, SPLIT_TASKS)):
        e = min(n, s + SPLIT_TASKS)
        piece = FoldedLabels(folded.tasks.slice(s, e - s), folded.classes, folded.counts[s:e])
        cons = consensus.iloc[s:e].reset_index(drop=True)
        parts.append(_write_part(Path(folder), f"{version}-{k:05d}", piece, winners.slice(s, e - s),
                                 rep.slice(s, e - s), cons, _ties(folded.counts[s:e])))  # fmt: skip
    return PartsIndex(tuple(parts))


def link_consensus(folder: str | os.PathLike[str], index: PartsIndex, dest: str | os.PathLike[str]) -> list[str]:
    """Hard-link every part's consensus file into ``dest`` (``part-<k>.parquet``), for the export to move into
    the run; a copy where a link cannot be made (another file system). Returns the paths in part order."""
    d = Path(folder) / PARTS_KEY
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, p in enumerate(index.parts):
        target = out / f"part-{k:05d}.parquet"
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
        try:
            os.link(d / p.consensus, target)
        except OSError:
            import shutil

            shutil.copyfile(d / p.consensus, target)
        paths.append(str(target))
    return paths


def read_consensus(folder: str | os.PathLike[str], index: PartsIndex) -> pd.DataFrame:
    """Every part's consensus rows as one table (``task, label, confidence, n_labels, fallback``): what a caller
    that wants the whole table in memory gets (the library API); a run publishes the parts instead."""
    d = Path(folder) / PARTS_KEY
    cols = ["task", "label", "confidence", "n_labels", "fallback"]
    tables = [pq.read_table(d / p.consensus, columns=cols) for p in index.parts]
    if not tables:
        return pd.DataFrame({c: [] for c in cols})
    out: pd.DataFrame = pa.concat_tables(tables).to_pandas()
    return out
