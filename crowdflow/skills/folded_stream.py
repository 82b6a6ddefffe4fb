"""The majority-vote worker fold rebuilt file by file: memory O(tasks + workers), not O(rows) (issue #38).

A folded skills run whose worker fold must be rebuilt (the first folded run over a long history, files removed or
changed, an erasure: :func:`crowdflow.skills.folded.fold_in_store`) needs, per worker, ``n_labels``,
``agree`` = Σ_t 1{label = vote of t} and ``strength`` = Σ_{t ∋ i} (k_t − 1), and the worker graph's parity forest
(docs/methods/skills.md §4.4). The votes and the label counts ``k_t`` come from the label fold (the per-file class
counts, summed), so the worker fold is one more pass over the files, one file's rows at a time:

- the three sums are sums over rows: each file adds its rows' terms (``numpy.bincount`` on the worker codes);
- the parity forest needs each task's workers together (a task with ``k ≥ 3`` workers closes an odd cycle; a
  repeated (task, worker) pair must be found): a task whose every label is in the file (``k`` in the file equals
  ``k_t``) is joined there; the rows of a task that spans files are kept, as two integer codes a row, and joined
  once after the pass. Memory: the fold's tasks and workers plus 8 bytes per row of the tasks that span files.

Worker codes are given in order of first sight and renumbered to the label encoder's natural order at the end
(the forest by the same permutation: its components, numbered by smallest worker, are the in-memory rebuild's).
Every sum is an integer, so the fold equals :func:`crowdflow.skills.folded.update_workers`'s rebuild bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crowdflow.graphs import ParityForest
from crowdflow.labels import natural_order

__all__ = ["StreamedWorkers", "TaskIndex", "rebuild_streamed"]

#: rows per block when the fold's task ids are laid out as fixed-width bytes
_BLOCK = 1 << 18
#: above this many bytes (tasks × widest id) the task lookup hashes each file's ids instead
_MAX_FIXED_BYTES = 2_000_000_000


def _fixed_width(arr: pa.Array, width: int) -> np.ndarray:
    """``arr`` (``string``, no nulls) as a numpy ``S{width}`` array (UTF-8 bytes, zero padded), built in blocks."""
    arr = pa.concat_arrays([arr.cast(pa.string())])  # offset 0, one chunk
    n = len(arr)
    out = np.zeros((n, max(width, 1)), dtype=np.uint8)
    if n and width:
        bufs = arr.buffers()
        offsets = np.frombuffer(bufs[1], dtype=np.int32)[: n + 1]
        data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
        cols = np.arange(width, dtype=np.int64)
        for s in range(0, n, _BLOCK):
            o = offsets[s : s + _BLOCK + 1].astype(np.int64)
            start, length = o[:-1], o[1:] - o[:-1]
            mask = cols[None, :] < length[:, None]
            out[s : s + start.size][mask] = data[(start[:, None] + cols[None, :])[mask]]
    return out.view(f"S{max(width, 1)}").ravel()


class TaskIndex:
    """Positions of task ids among the label fold's tasks, looked up once per file.

    The fold's ids (text order) are laid out once as fixed-width bytes and each file's ids found by binary search
    (``numpy.searchsorted``, memcmp order = code-point order of UTF-8): a hash lookup against 10^7 ids would rebuild
    its table for every file. Ids holding a NUL byte, or a layout over ``_MAX_FIXED_BYTES``, fall back to the hash
    lookup (``pyarrow.compute.index_in``).
    """

    def __init__(self, tasks: pa.Array) -> None:
        self.tasks = tasks
        n = len(tasks)
        width = int(pc.max(pc.binary_length(tasks)).as_py() or 0) if n else 0
        nul = bool(pc.any(pc.match_substring(tasks, "\x00")).as_py()) if n else False
        self.width = width
        self.keys: np.ndarray | None = None
        self.order: np.ndarray | None = None
        if n and not nul and n * max(width, 1) <= _MAX_FIXED_BYTES:
            keys = _fixed_width(tasks, width)
            if keys.size > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
                self.order = np.argsort(keys, kind="stable")
                keys = keys[self.order]
            self.keys = keys

    def positions(self, values: pa.Array) -> np.ndarray:
        """Position of each of ``values`` among the fold's tasks, −1 where absent."""
        if self.keys is None:
            got: np.ndarray = pc.index_in(values, value_set=self.tasks).fill_null(-1).to_numpy(zero_copy_only=False)
            return got.astype(np.int64)
        if len(values) == 0:
            return np.zeros(0, dtype=np.int64)
        # an id longer than every fold id, or holding a NUL byte (the fold holds none), is not in the fold
        short = pc.less_equal(pc.binary_length(values), self.width)
        fits = np.asarray(pc.and_(short, pc.invert(pc.match_substring(values, "\x00"))).to_numpy(False), bool)
        out = np.full(len(values), -1, dtype=np.int64)
        inside = values if fits.all() else values.filter(pa.array(fits))
        if len(inside) == 0:
            return out
        q = _fixed_width(inside, self.width)
        at = np.minimum(np.searchsorted(self.keys, q), self.keys.size - 1)
        hit = self.keys[at] == q
        pos = at if self.order is None else self.order[at]
        out[fits] = np.where(hit, pos, -1)
        return out


@dataclass(frozen=True)
class StreamedWorkers:
    """The worker fold's arrays after a streamed rebuild (worker codes in natural order) and its account.

    ``rows``: rows passed; ``spanning_rows``: rows of tasks that span files (kept as codes until the end);
    ``stored_rows``, ``stored_tasks``: rows read back from the store and the tasks they hold.
    """

    workers: np.ndarray
    n_labels: np.ndarray
    agree: np.ndarray
    strength: np.ndarray
    forest: ParityForest
    rep: np.ndarray
    rows: int
    spanning_rows: int
    stored_rows: int
    stored_tasks: int


class DuplicatePair(ValueError):
    """A (task, worker) pair answers twice across the files."""


def _grow(a: np.ndarray, n: int, fill: int | bool = 0) -> np.ndarray:
    if a.size >= n:
        return a
    return np.concatenate([a, np.full(n - a.size, fill, dtype=a.dtype)])


def _join_tasks(forest: ParityForest, t: np.ndarray, w: np.ndarray, n_w: int) -> tuple[int, int] | None:
    """Join the workers of each task (rows ``t``, ``w``; every row of each task) into ``forest``; the first repeated
    (task, worker) pair as codes, or None."""
    if t.size == 0:
        return None
    order = np.lexsort((w, t))
    ts, ws = t[order], w[order]
    same = (ts[1:] == ts[:-1]) & (ws[1:] == ws[:-1])
    if same.any():
        k = int(np.flatnonzero(same)[0])
        return int(ts[k]), int(ws[k])
    starts = np.flatnonzero(np.r_[True, ts[1:] != ts[:-1]])
    forest.merge(ParityForest.from_labels(np.r_[starts, ts.size].astype(np.int64), ws.astype(np.int64), n_w))
    return None


def rebuild_streamed(
    tasks: pa.Array, winners: pa.Array, k_after: np.ndarray, chunks: Iterable[tuple[dict[str, pa.Array], bool]]
) -> StreamedWorkers:
    """The worker fold of every row in ``chunks`` (one file's ``task, worker, label`` as Arrow text each).

    Parameters
    ----------
    tasks, winners, k_after
        The label fold's tasks (text order), each task's vote and label count ``k_t``.
    chunks
        ``(rows, stored)`` per file: its ``task, worker, label`` as Arrow text (module docstring) and whether they
        were read back from the store (counted in ``stored_rows``, ``stored_tasks``); every row's task is one of
        ``tasks``.

    Raises
    ------
    DuplicatePair
        A (task, worker) pair answers twice (naming it).
    ValueError
        A row's task is not in the fold, or a task of the fold has no row (fold and rows out of step).
    """
    index = TaskIndex(tasks)
    n_t = len(tasks)
    known = pa.array([], pa.string())
    n_labels = agree = strength = np.zeros(0, dtype=np.int64)
    z = np.zeros(0, dtype=np.int64)
    forest = ParityForest(z, z.copy(), z.copy(), np.zeros(0, dtype=bool))
    rep = np.full(n_t, -1, dtype=np.int64)
    span_t: list[np.ndarray] = []
    span_w: list[np.ndarray] = []
    rows = stored_rows = 0
    from_store = np.zeros(n_t, dtype=bool)
    for chunk, stored in chunks:
        n = len(chunk["task"])
        if n == 0:
            continue
        rows += n
        u = pc.unique(chunk["worker"])
        fresh = u.filter(pc.invert(pc.is_in(u, value_set=known)))
        if len(fresh):
            known = pa.concat_arrays([known, fresh])
            n_w = len(known)
            n_labels, agree, strength = (_grow(a, n_w) for a in (n_labels, agree, strength))
            forest = ParityForest(
                np.concatenate([forest.parent, np.arange(forest.parent.size, n_w, dtype=np.int64)]),
                _grow(forest.par, n_w), _grow(forest.rank, n_w), _grow(forest.odd, n_w, False),
            )  # fmt: skip
        n_w = len(known)
        w = pc.index_in(chunk["worker"], value_set=known).to_numpy(zero_copy_only=False).astype(np.int64)
        t = index.positions(chunk["task"])
        if (t < 0).any():
            bad = chunk["task"][int(np.flatnonzero(t < 0)[0])].as_py()
            raise ValueError(f"rows of task {bad!r}, which the label fold does not hold (the fold and the rows are "
                             "out of step)")  # fmt: skip
        same = pc.equal(chunk["label"], winners.take(pa.array(t))).to_numpy(zero_copy_only=False)
        agree += np.bincount(w, weights=np.asarray(same, dtype=np.float64), minlength=n_w).astype(np.int64)
        strength += np.bincount(w, weights=(k_after[t] - 1).astype(np.float64), minlength=n_w).astype(np.int64)
        n_labels += np.bincount(w, minlength=n_w)
        rep[t] = w
        if stored:
            stored_rows += n
            from_store[t] = True
        ut, inv, cnt = np.unique(t, return_inverse=True, return_counts=True)
        whole = (cnt == k_after[ut])[inv]  # every label of the task is in this file
        dup = _join_tasks(forest, t[whole], w[whole], n_w)
        if dup is not None:
            raise _duplicate(tasks, known, dup)
        if not whole.all():
            span_t.append(t[~whole].astype(np.int32 if n_t < 2**31 else np.int64))
            span_w.append(w[~whole].astype(np.int32))
    n_w = len(known)
    spanning = int(sum(a.size for a in span_t))
    if span_t:
        ts = np.concatenate(span_t).astype(np.int64)
        span_t.clear()
        ws = np.concatenate(span_w).astype(np.int64)
        span_w.clear()
        dup = _join_tasks(forest, ts, ws, n_w)
        if dup is not None:
            raise _duplicate(tasks, known, dup)
        del ts, ws
    if (rep < 0).any():
        bad = tasks[int(np.flatnonzero(rep < 0)[0])].as_py()
        raise ValueError(f"task {bad!r} of the label fold has no row in the files (the fold and the rows are out of "
                         "step)")  # fmt: skip
    ids = np.asarray(known.to_pylist(), dtype=object)
    order = natural_order(ids) if ids.size else np.zeros(0, dtype=np.int64)
    pos = np.empty(n_w, dtype=np.int64)
    pos[order] = np.arange(n_w, dtype=np.int64)

    def moved(a: np.ndarray) -> np.ndarray:
        out = np.empty_like(a)
        out[pos] = a
        return out

    parent = moved(pos[forest.parent])
    sorted_forest = ParityForest(parent, moved(forest.par), moved(forest.rank), moved(forest.odd))
    return StreamedWorkers(ids[order], moved(n_labels), moved(agree), moved(strength), sorted_forest, pos[rep], rows,
                           spanning, stored_rows, int(from_store.sum()))  # fmt: skip


def _duplicate(tasks: pa.Array, known: pa.Array, pair: tuple[int, int]) -> DuplicatePair:
    task, worker = tasks[pair[0]].as_py(), known[pair[1]].as_py()
    return DuplicatePair(
        f"worker {worker!r} answers task {task!r} more than once across the files: a folded majority-vote run counts "
        "every row, so it needs one answer per (task, worker); drop skills.incremental to apply skills.duplicates"
    )
