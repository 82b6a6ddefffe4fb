"""Skills from labels that no single process holds: the flow keeps per-worker statistics, the workers the labels.

The labels are split into task buckets (:func:`crowdflow.skills.buckets.split_labels`, one pass over the input
files) and every later step is a pass over the buckets through an executor (``executor(fn, items)``, e.g. a
Dask client's map), returning sums over tasks (docs/scale.md, docs/methods/skills.md §4.3):

1. :func:`encode_buckets` — the codes of every bucket written once; labels per worker, task counts and the
   worker-graph report (for the pre-fit check) summed over the buckets: without pairs (every method but ``pgd``) from
   each bucket's parity union-find forest and worker strengths (O(W) a bucket), for ``pgd`` from the packed co-label
   counts (N, agreements and C^, W×W sparse);
2. :func:`fit_buckets` — the fit on those statistics, by method:

   * ``pgd``: the rank-one fit of docs/methods/skills.md §2.8 in the flow (it needs only N and C^), then one
     weighted-vote pass writing the consensus;
   * ``ds`` / ``onecoin_ds``: Dawid–Skene EM, one pass per iteration: the workers run the E-step with the
     broadcast parameters (W·M² numbers) and return the M-step's sums, which are normalised into the next
     parameters; the same stopping rule as the in-memory EM, then a final E-step pass writing the consensus. The
     EM loop (M-step, SQUAREM) and that pass run as one job where the buckets are
     (:func:`crowdflow.skills.held_em.fit_ds_held` through :func:`crowdflow.executors.elsewhere`: on Dask, one
     worker drives the passes), the flow receiving the per-worker accuracies and weights;
   * ``mv``: one majority-vote pass (agreements per worker summed for the accuracy).

Memory in the flow: O(W·M²) without pairs (on Dask, Dawid–Skene's W·M² arrays in a worker and O(W) in the flow),
O(nnz(N) + W·M²) for ``pgd`` — never O(labels) or O(tasks)
(docs/scale.md, memory laws). Bytes moved per pass:
the parameters out, the sums back. The results equal an in-memory :func:`~crowdflow.skills.fit_skills` on the
same labels: the counts and the graph exactly, PGD and majority vote exactly (the same statistics and the same
per-task votes), Dawid–Skene to floating-point summation order (the M-step sums are added bucket by bucket).
Tie-breaks draw by (task id, class, seed) only (:mod:`crowdflow.skills.ties`), so the buckets pick the same winners
as an in-memory vote, ties included.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.contracts.errors import InputError
from crowdflow.contracts.tables import INPUTS
from crowdflow.executors import (
    MapFn,
    balance,
    elsewhere,
    fold,
    hold,
    holds,
    inline_executor,
    on_held,
    on_held_with,
    release,
    share,
    with_shared,
)
from crowdflow.graphs import (
    Components,
    ParityForest,
    WorkerGraphReport,
    graph_structure,
    worker_graph_from_counts,
    worker_graph_from_forest,
)
from crowdflow.labels import id_text, natural_sort, natural_sort_text
from crowdflow.metrics import ReviewPart, SkillsReview, merge_review_parts
from crowdflow.progress import ProgressFn
from crowdflow.skills.buckets import (
    BucketStats,
    EncodeArgs,
    SplitSummary,
    codes_by_activity,
    encode_shared,
    mv_consensus,
    split_labels,
    stats_only,
    weighted_consensus_pass,
)
from crowdflow.skills.consensus import vote_weights
from crowdflow.skills.fit import (
    SkillsResult,
    diagnostics_table,
    fit_metadata,
    fit_rank_one_options,
    needs_pairs,
    pair_row_stats,
    worker_table,
)
from crowdflow.skills.held import activity_order, pass_bytes, read_codes
from crowdflow.skills.held_em import HeldDS, consensus_pass, fit_ds_held
from crowdflow.skills.identifiability import active_workers, witness_cycles
from crowdflow.skills.moments import (
    LabelMoments,
    co_labels_from_packed,
    edge_weights,
    moments_from_packed,
    prune_spammer_edges,
)
from crowdflow.skills.options import SkillsOptions
from crowdflow.skills.pieces import chunk_items, chunk_of, encode_chunk, item_at, kept_summary, read_and_keep
from crowdflow.skills.reasons import explain_missing_components, explain_missing_workers
from crowdflow.storage.datasets import Partition, list_partitions, read_partition
from crowdflow.storage.held_tables import HeldTable, held_or_built
from crowdflow.storage.io import LoadedTable

log = logging.getLogger(__name__)


def read_and_split(
    part: Partition,
    folder: str,
    n_buckets: int,
    columns: dict[str, str] | None = None,
    check: Callable[[LoadedTable], Any] | None = None,
) -> tuple[SplitSummary, Any]:
    """Pass 1 on one input file, where it is read: canonical columns, the optional ``check`` (the run's table
    validation, injected by the orchestration layer), then the task buckets (:func:`split_labels`).

    Returns the file's summary and what ``check`` returned (None without one).
    """
    loaded = read_partition(part, INPUTS["labels"], columns)
    found = check(loaded) if check is not None else None
    return replace(split_labels(loaded.df, part.index, folder, n_buckets), sha256=loaded.sha256), found


def read_and_keep_all(
    executor: MapFn,
    parts: list[Partition],
    folder: str,
    n_buckets: int,
    columns: dict[str, str] | None = None,
    check: Callable[[LoadedTable], Any] | None = None,
) -> tuple[IdUnion, dict[int, Any], dict[str, list[Any]]]:
    """Pass 1 on an executor that holds: every file read, checked and split once, its bucket pieces held where it was
    read (:mod:`crowdflow.skills.pieces`); nothing written.

    Returns the files' id union, what ``check`` returned per file index, and per bucket folder (``<folder>/bucket-<b>``,
    as :func:`read_and_split` names them) the handles that hold its pieces in file order (each file's pieces of a run
    of consecutive buckets held as one item, :data:`crowdflow.skills.pieces.PIECE_CHUNKS` runs: the buckets of a run
    share the list), for :func:`encode_buckets` (``pieces=``), which frees them.
    """
    read = functools.partial(read_and_keep, n_buckets=n_buckets, columns=columns, check=check)
    files = hold(executor, read, parts)
    try:
        union, found, nonempty = fold(executor, on_held(kept_summary), files, _add_kept, (IdUnion(), {}, {}))
        items, where = chunk_items(files, [nonempty[p.index] for p in parts], n_buckets)
        held = hold(executor, chunk_of, items)
    finally:
        release(executor, files)  # the pieces keep what they need of each file's table
    pieces = {str(Path(folder) / f"bucket-{b:05d}"): [held[i] for i in where[b]] for b in sorted(where)}
    return union, found, pieces


def _add_kept(
    acc: tuple[IdUnion, dict[int, Any], dict[int, list[int]]], got: tuple[SplitSummary, Any, list[int]]
) -> tuple[IdUnion, dict[int, Any], dict[int, list[int]]]:
    union, found, nonempty = acc
    summary, report, buckets = got
    union.add(summary)
    found[summary.partition] = report
    nonempty[summary.partition] = buckets
    return union, found, nonempty


def release_pieces(executor: MapFn, pieces: dict[str, list[Any]] | None) -> None:
    """Free the held pieces of :func:`read_and_keep_all` (after the encode, or when the run stops before it)."""
    seen: set[int] = set()
    for handles in (pieces or {}).values():  # the buckets of a run share their handles: each is released once
        fresh = [h for h in handles if id(h) not in seen]
        seen.update(id(h) for h in fresh)
        release(executor, fresh)


def _distinct_union(acc: Any, *values: Any) -> Any:
    """The distinct values of ``acc`` and every one of ``values`` as one Arrow ``string`` array, in the order of
    their first appearance, by one ``unique`` (None entries are skipped; None when there is nothing)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = [] if acc is None else [acc]
    for v in values:
        if v is not None:
            text = _as_string(v)
            chunks.extend(text.chunks if isinstance(text, pa.ChunkedArray) else [text])
    if len(chunks) <= (0 if acc is None else 1):
        return acc
    found = pc.unique(pa.chunked_array(chunks, pa.string()))
    return found.combine_chunks() if isinstance(found, pa.ChunkedArray) else found


#: The ids of the files folded into an :class:`IdUnion` wait, as they came, until they number this many times the
#: distinct ids found so far (and at least :data:`UNION_MIN_PENDING`); one ``unique`` then takes them all. Each file's
#: ids are hashed about twice instead of the whole union once per file (at 2·10⁵ workers a file brings ~1.3·10⁵ ids,
#: most of them already in the union); the pending ids stay O(W) (docs/scale.md, memory laws).
UNION_PENDING_FACTOR = 4
UNION_MIN_PENDING = 1 << 18


@dataclass
class IdUnion:
    """The run's distinct worker ids and labels, folded file by file as the split results arrive.

    The flow keeps one Arrow array of distinct ids (≈ 4 bytes + the id's text a worker) and the files' ids not yet
    merged into it (at most :data:`UNION_PENDING_FACTOR` times as many, or :data:`UNION_MIN_PENDING`), merged as the
    files complete (:func:`crowdflow.executors.fold`), and the files' scalars: never one id list per file kept to the
    end (O(workers × files)) nor a Python ``str`` per id until :meth:`finish` (docs/scale.md, memory laws).
    """

    workers: Any = None
    labels: Any = None
    n_rows: int = 0
    n_dropped_null: int = 0
    digests: dict[int, str] = field(default_factory=dict)
    pending: list[Any] = field(default_factory=list)
    n_pending: int = 0

    def add(self, s: SplitSummary) -> IdUnion:
        """Fold one file's summary in (the order of the files does not matter)."""
        if s.workers is not None:
            self.pending.append(s.workers)
            self.n_pending += len(s.workers)
            if self.n_pending >= max(
                UNION_PENDING_FACTOR * (0 if self.workers is None else len(self.workers)), UNION_MIN_PENDING
            ):
                self._merge()
        self.labels = _distinct_union(self.labels, s.labels)
        self.n_rows += s.n_rows
        self.n_dropped_null += s.n_dropped_null
        self.digests[s.partition] = s.sha256
        return self

    def _merge(self) -> None:
        """The pending ids united with the distinct ones: one ``unique`` over all of them."""
        if self.pending:
            self.workers = _distinct_union(self.workers, *self.pending)
            self.pending, self.n_pending = [], 0

    def finish(self, classes: list[str] | None) -> tuple[Any, np.ndarray]:
        """The sorted worker ids (an Arrow ``string`` array, no Python ``str`` per id) and classes
        (:func:`dictionaries`)."""
        self._merge()
        return natural_sort_text(self.workers), _sorted_classes(_as_text(self.labels), classes)


def _as_string(values: Any) -> Any:
    """Ids as an Arrow ``string`` array (an Arrow array cast, anything else as the text of each value)."""
    import pyarrow as pa

    if not isinstance(values, (pa.Array, pa.ChunkedArray)):
        return pa.array(np.asarray(values, dtype=object).astype(str), pa.string())
    return values.cast(pa.string())


def _as_text(values: Any) -> np.ndarray:
    if values is None:
        return np.zeros(0, dtype=object)
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=object)


def _add_split(union: IdUnion, result: tuple[SplitSummary, Any]) -> IdUnion:
    return union.add(result[0])


def dictionaries(summaries: list[SplitSummary], classes: list[str] | None) -> tuple[Any, np.ndarray]:
    """The run's sorted worker ids (Arrow strings, :func:`~crowdflow.labels.natural_sort_text`) and classes from the
    files' distinct values (as :func:`encode_labels` sorts them).

    Raises :class:`~crowdflow.contracts.errors.InputError` for labels outside a declared label set. (A pass that
    gets the summaries one at a time folds them into an :class:`IdUnion` instead of keeping them all.)
    """
    union = IdUnion()
    for s in summaries:
        union.add(s)
    return union.finish(classes)


def _sorted_classes(seen_labels: np.ndarray, classes: list[str] | None) -> np.ndarray:
    seen = natural_sort(np.unique(seen_labels.astype(str)))
    if classes is None:
        if seen.size < 2:  # the labels contract's distinct-values rule, on the whole dataset (each file may hold one)
            raise InputError(
                f"column 'label' must have at least 2 distinct values (a single-class batch needs the label set "
                f"declared: skills.classes in the spec); found {seen.size}: {seen.tolist()}",
                column="label",
            )
        return seen
    declared = np.asarray([str(c) for c in classes], dtype=object)
    unknown = sorted(set(seen.tolist()) - set(declared.tolist()))
    if unknown:
        raise InputError(f"labels outside the declared label set {declared.tolist()}: {unknown[:5]}", column="label")
    return declared


_Acc = tuple[sp.csr_matrix | None, ParityForest | None, np.ndarray | None, list[BucketStats], np.ndarray | None]


def _add_bucket(acc: _Acc, s: BucketStats) -> _Acc:
    """Fold one bucket's sums into the flow's and keep only its scalars: the flow holds one running sum of every
    per-worker array, never one per bucket (docs/scale.md, memory laws)."""
    packed, forest, strength, kept, n_i = acc
    n_i = s.labels_per_worker.copy() if n_i is None else n_i + s.labels_per_worker
    kept.append(
        replace(s, packed=None, forest=None, strength=None, labels_per_worker=np.zeros(0, np.int64), codes=None)
    )
    if s.packed is not None:
        packed = s.packed if packed is None else packed + s.packed
    if s.forest is not None:
        if forest is None:
            forest = s.forest
        else:
            forest.merge(s.forest)
    if s.strength is not None:
        strength = s.strength if strength is None else strength + s.strength
    return packed, forest, strength, kept, n_i


def _sum_bucket_stats(executor: MapFn, held: list[Any], _: Any, progress: ProgressFn | None = None) -> _Acc:
    """The held buckets' per-worker sums folded into one (:func:`_add_bucket`), run through
    :func:`crowdflow.executors.elsewhere`: on Dask the fold runs on a worker and the flow receives the one sum, not
    the results in flight (each bucket's labels, strengths and parity forest: ~40 bytes a worker each, up to two per
    worker thread; issue #36, docs/scale.md memory laws). Integer sums and a union-find merge: the same result."""
    acc: _Acc = fold(executor, on_held(stats_only), held, _add_bucket, (None, None, None, [], None))
    return acc


@dataclass(frozen=True)
class EncodedBuckets:
    """The buckets after :func:`encode_buckets`: their folders and the statistics summed over them.

    Attributes
    ----------
    buckets : list of str
        Bucket folders (each holds its codes).
    workers : pyarrow.Array or numpy.ndarray
        The run's sorted worker ids: an Arrow ``string`` array from :meth:`IdUnion.finish` (no Python ``str`` per
        worker; :func:`~crowdflow.labels.id_text` gives the few a user sees), or what the caller passed.
    classes : numpy.ndarray
        The run's sorted classes.
    packed : scipy.sparse.csr_matrix or None
        Σ P = N + 2³²·Agree (W×W int64) when the run forms pairs (``pairs=True``: method pgd), else None.
    labels_per_worker : numpy.ndarray
    n_tasks, n_labels, n_dropped : int
    report : WorkerGraphReport
        The worker interaction graph of all the labels (for the pre-fit check).
    strength : numpy.ndarray or None
        Σ_{t∋i} (k_t − 1) per worker over all buckets (the row sums of N) when the run forms no pair.
    held : list
        One handle per bucket (in ``buckets`` order) of its codes held by the executor
        (:func:`crowdflow.executors.hold`; :class:`~crowdflow.skills.held.HeldCodes` in a worker's or this process's
        memory, or a :class:`~crowdflow.executors.Recompute` that reads the codes file again each pass). Freed by
        :func:`fit_buckets` when it ends (:func:`release_buckets`).
    """

    buckets: list[str]
    workers: Any
    classes: np.ndarray
    packed: sp.csr_matrix | None
    labels_per_worker: np.ndarray
    n_tasks: int
    n_labels: int
    n_dropped: int
    report: WorkerGraphReport
    strength: np.ndarray | None = None
    held: list[Any] = field(default_factory=list)


def release_buckets(enc: EncodedBuckets, executor: MapFn) -> None:
    """Free the held codes of ``enc`` (nothing to do for recomputed handles)."""
    release(executor, enc.held)


def encode_buckets(
    buckets: list[str],
    executor: MapFn,
    workers: Any,
    classes: np.ndarray,
    duplicates: Any,
    file_names: list[str],
    pairs: bool = False,
    pieces: dict[str, list[Any]] | None = None,
) -> EncodedBuckets:
    """Encode every bucket once (:func:`~crowdflow.skills.buckets.encode_bucket`) and sum their statistics.

    ``pairs`` False (every method but ``pgd``, and the pre-fit check alone): each bucket returns its parity forest
    and worker strengths, merged here in O(W) per bucket; the report's ``n_partners`` is then missing (not a sum
    over buckets). ``pairs`` True: each bucket's packed co-label counts are summed (O(nnz(N)) in the flow).

    ``pieces`` (an executor that holds, :func:`read_and_keep_all`): each bucket folder's held pieces, encoded where
    the executor runs the bucket (the pieces another worker holds move through memory) and freed here; without
    them each bucket's pieces are read from its folder (:func:`read_and_split`).
    """
    try:
        return _encode_buckets(buckets, executor, workers, classes, duplicates, file_names, pairs, pieces)
    finally:
        release_pieces(executor, pieces)


def _encode_buckets(
    buckets: list[str],
    executor: MapFn,
    workers: Any,
    classes: np.ndarray,
    duplicates: Any,
    file_names: list[str],
    pairs: bool,
    pieces: dict[str, list[Any]] | None,
) -> EncodedBuckets:
    import pyarrow as pa

    keep = holds(executor)
    if pieces is not None and not keep:
        raise ValueError("held pieces need the executor that holds them")
    buckets = sorted(buckets)
    # the dictionaries go out once (shared), not once per bucket: W worker ids are the large part
    args = share(
        executor,
        EncodeArgs(
            workers if isinstance(workers, pa.Array) else _as_string(workers),
            classes,
            duplicates,
            list(file_names),
            pairs,
            keep,
        ),
    )
    # each bucket's statistics are folded in as they arrive and dropped: integer sums and a union-find merge, so the
    # order of arrival changes nothing
    start: _Acc = (None, None, None, [], None)
    w, m = len(workers), int(classes.size)
    try:
        if keep:  # encode where the bucket is held, bring back its sums, keep only its codes there
            if pieces is not None:  # one task a run of buckets (they share their pieces' handles), then each bucket's
                runs: dict[tuple[int, ...], list[str]] = {}  # result held on its own where it was made
                for b in buckets:
                    runs.setdefault(tuple(id(h) for h in pieces[b]), []).append(b)
                done = hold(executor, encode_chunk, [(run, pieces[run[0]], args) for run in runs.values()])
                at = {b: (done[i], k) for i, run in enumerate(runs.values()) for k, b in enumerate(run)}
                try:
                    full = hold(executor, item_at, [at[b] for b in buckets])
                finally:
                    release(executor, done)
            else:
                full = hold(executor, on_held_with(encode_shared), with_shared(buckets, args))
            try:
                if pairs:
                    packed, forest, strength, stats, n_i = fold(executor, on_held(stats_only), full, _add_bucket, start)
                else:  # summed where the buckets are: the flow receives the sums, no bucket's W-sized ones in flight
                    packed, forest, strength, stats, n_i = elsewhere(executor, _sum_bucket_stats, full, None)
                # the held codes number the workers by activity (the passes' tables then stay in cache; same bits)
                order = share(executor, activity_order(n_i if n_i is not None else np.zeros(w, np.int64)))
                try:
                    held = hold(executor, on_held_with(codes_by_activity), with_shared(full, order))
                finally:
                    release(executor, [order])
            finally:
                release(executor, full)
        else:  # the codes are written; every pass reads them again (one bucket in memory at a time)
            packed, forest, strength, stats, n_i = fold(
                executor, on_held_with(encode_shared), with_shared(buckets, args), _add_bucket, start
            )
            held = hold(executor, functools.partial(read_codes, n_workers=w, n_classes=m), buckets)
    finally:
        release(executor, [args])
    stats.sort(key=lambda s: s.path)  # the order of ``buckets`` (sorted folders), so of ``held``
    held = balance(executor, held, [s.n_labels for s in stats])  # each Dask worker as many labels a pass
    if n_i is None:
        n_i = np.zeros(w, dtype=np.int64)
    if pairs:
        if packed is None:
            empty = np.zeros(0, dtype=np.int64)
            packed = sp.csr_matrix((empty, empty.astype(np.int32), np.zeros(w + 1, np.int32)), shape=(w, w))
        packed.sum_duplicates()
        packed.sort_indices()
        report = worker_graph_from_counts(co_labels_from_packed(packed), n_i, workers)
    else:
        if forest is None:
            forest = ParityForest.from_labels(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64), w)
        report = worker_graph_from_forest(forest, n_i, workers)
    enc = EncodedBuckets(
        buckets=[s.path for s in stats],
        workers=workers,
        classes=classes,
        packed=packed,
        labels_per_worker=n_i,
        n_tasks=sum(s.n_tasks for s in stats),
        n_labels=sum(s.n_labels for s in stats),
        n_dropped=sum(s.n_dropped for s in stats),
        report=report,
        strength=None if pairs else (strength if strength is not None else np.zeros(w)),
        held=held,
    )
    log.info(
        "encoded %d buckets: %d labels, %d tasks, %d workers, %d classes (%s)",
        len(stats),
        enc.n_labels,
        enc.n_tasks,
        len(workers),
        classes.size,
        "worker pairs summed" if pairs else "no worker pair formed",
    )
    return enc


@dataclass(frozen=True)
class PartitionedSkills:
    """A partitioned skills fit: the in-memory tables but the consensus, which is written as parts.

    Attributes
    ----------
    result : SkillsResult
        Skills, diagnostics, metadata and loss trace as :func:`~crowdflow.skills.fit_skills` gives them; its
        ``consensus`` is empty (the consensus is ``consensus_parts``).
    consensus_parts : list of str
        The consensus as Parquet parts, one per bucket (columns of ``OUTPUTS["skills"]["consensus"]``).
    passes : int
        Passes over the buckets after encoding.
    review : SkillsReview
        What :func:`crowdflow.metrics.review_skills` gives on all the labels (gold tables with gold labels, the
        changes against majority vote), summed over the buckets.
    gold : dict
        :func:`crowdflow.metrics.gold_metrics` of the consensus (empty without gold labels).
    timing : dict
        Where the passes went (``ds`` / ``onecoin_ds``: :meth:`crowdflow.skills.held_em.PassTiming.record`, the
        consensus pass and the bytes one pass reads); empty for the other methods.
    held_skills : HeldTable or None
        The skills table where a Dask worker built and holds it (``fit_buckets(hold_tables=...)``): then
        ``result.skills`` is empty and this is the run's ``skills`` output (docs/scale.md, memory laws).
    """

    result: SkillsResult
    consensus_parts: list[str]
    passes: int
    review: SkillsReview
    gold: dict[str, float | int] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)
    held_skills: HeldTable | None = None


@dataclass(frozen=True)
class SkillsTableArgs:
    """The per-worker arrays the skills table of a partitioned fit is made of (:func:`skills_table`), sent once to
    the Dask worker that builds and holds the table when the fit is asked to (``hold_tables``)."""

    workers: Any
    skill: np.ndarray
    accuracy: np.ndarray
    weight: np.ndarray
    n_labels: np.ndarray
    row_stats: tuple[np.ndarray, np.ndarray]
    graph: Components
    status: np.ndarray
    identifiable: np.ndarray
    box: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    method: str
    pairs: bool


def skills_table(a: SkillsTableArgs) -> pd.DataFrame:
    """The skills table (:func:`crowdflow.skills.fit.worker_table`) with its missing reasons
    (:func:`crowdflow.skills.reasons.explain_missing_workers`): the one rule, run in the flow or on a Dask worker."""
    table = worker_table(
        a.workers, a.skill, a.accuracy, a.weight, a.n_labels, a.row_stats, a.graph, a.status, a.identifiable, a.box
    )
    explain_missing_workers(table, a.method, pairs=a.pairs)
    return table


def fit_buckets(
    enc: EncodedBuckets,
    executor: MapFn,
    options: SkillsOptions,
    out_folder: str,
    *,
    truth: pd.DataFrame | None = None,
    progress: ProgressFn | None = None,
    hold_tables: str | None = None,
) -> PartitionedSkills:
    """Skills and consensus of encoded buckets (see the module docstring for the passes of each method).

    Every pass runs on the codes ``enc`` holds (:attr:`EncodedBuckets.held`), which are released when the fit ends
    (also on an error): an :class:`EncodedBuckets` is fitted once.

    Parameters
    ----------
    enc : EncodedBuckets
    executor : callable
        ``executor(fn, items) -> results``; ``fn`` and its arguments are picklable. The executor that encoded
        ``enc`` (its held codes live there).
    options : SkillsOptions
    out_folder : str
        Where the consensus parts are written (visible to the workers).
    truth : pandas.DataFrame, optional
        Gold labels (``task``, ``label``): the consensus passes review their tasks against them.
    progress : callable, optional
        ``progress(fraction)`` during the PGD iterations and the Dawid–Skene EM; the EM also gives a callback with a
        ``note`` method one line per pass (:mod:`crowdflow.progress`), sent from the Dask worker that runs it.
    hold_tables : str, optional
        A folder the workers and this process both see: with an executor that holds remotely (the pipeline's Dask
        executor) the skills table is built and kept on a Dask worker (:attr:`PartitionedSkills.held_skills`,
        written from there into this folder by the export), so this process never holds its rows. Otherwise (and
        by default) it is built here, in ``result.skills``.
    """
    try:
        return _fit_buckets(enc, executor, options, out_folder, truth=truth, progress=progress, hold_tables=hold_tables)
    finally:
        release_buckets(enc, executor)


def _fit_buckets(
    enc: EncodedBuckets,
    executor: MapFn,
    options: SkillsOptions,
    out_folder: str,
    *,
    truth: pd.DataFrame | None = None,
    progress: ProgressFn | None = None,
    hold_tables: str | None = None,
) -> PartitionedSkills:
    """:func:`fit_buckets` without the release of the held codes."""
    o = options
    if o.method == "ebcc":
        raise ValueError(
            "method ebcc fits in memory only (its subtype posteriors are one row per task); use method ds for "
            "a partitioned run, or run ebcc without partitions"
        )
    if o.method.startswith("crowdkit:"):
        raise ValueError(
            f"method {o.method} runs crowd-kit on every label in one process, never in passes: use fit_skills"
        )
    auto = o.method == "auto"
    if auto:
        # the held-out comparison needs the labels in one place; in passes over buckets auto is ds (docs/scale.md)
        o = SkillsOptions.resolve(o, method="ds")
        log.info("method auto on a partitioned input: fitting ds (no held-out comparison in passes over buckets)")
    m, w = int(enc.classes.size), len(enc.workers)
    if enc.packed is None and needs_pairs(o):
        raise ValueError(
            f"method {o.method} with these options needs the worker pairs: encode the buckets with pairs=True"
        )
    n_pruned = 0
    moments: LabelMoments | None = None
    n_mat: sp.csr_matrix | None = None
    w_all: sp.csr_matrix | None = None
    witnesses: dict[int, np.ndarray] | None = None
    if enc.packed is not None:
        moments = moments_from_packed(enc.packed, m, o.min_pair_count)
        if o.prune_spammers is not None:
            moments, n_pruned = prune_spammer_edges(moments, *o.prune_spammers)
        n_mat = moments.co_labels
        structure = graph_structure(n_mat, symmetric=True)
        graph: Components = structure.graph
        w_all = edge_weights(n_mat, o.weighting)
        row_stats = pair_row_stats(n_mat)
        witnesses = witness_cycles(structure) if o.witness else None
    else:  # no pair: the graph of the merged bucket forests, the summed strengths (docs/scale.md, memory laws)
        graph = enc.report.graph
        partners = enc.report.workers["n_partners"].to_numpy(dtype=np.float64)
        row_stats = (partners, enc.strength if enc.strength is not None else np.zeros(w))
    n_i = enc.labels_per_worker
    base = np.where(graph.bipartite, "bipartite_component", "ok").astype(object)
    base[graph.sizes == 1] = "isolated"
    status = base[graph.labels].copy()
    ok = status == "ok"
    box: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    common: dict[str, Any] = {"n_workers": w, "classes": enc.classes, "component": graph.labels, "truth": truth}
    meta = fit_metadata(o, enc.classes, w, enc.n_tasks, enc.n_labels, enc.n_dropped, n_pruned, "flag")
    meta["partitions"] = len(enc.buckets)
    if auto:
        meta["auto_choice"] = "ds"
        meta["auto"] = {"choice": "ds", "note": "partitioned input: ds without a held-out comparison", "candidates": []}
    trace = np.empty(0)
    timing: dict[str, Any] = {}
    if o.method == "pgd":
        assert moments is not None and w_all is not None  # needs_pairs
        status, active, lo, hi, ag, _ = active_workers(graph, base, w_all, n_i, m, o.tau)
        skill, fit_comp, fit = fit_rank_one_options(active, ag, w_all, moments.c_hat, lo, hi, o, progress)
        box = (lo, hi, fit_comp)
        weight = vote_weights(skill, m, lo, hi).astype(np.float64)
        kwargs = {
            "out_folder": out_folder,
            "weights": weight,
            "identified": active,
            "fallback": o.fallback,
            "tie_break": o.tie_break,
            "seed": o.seed,
            "ok": active,
            **common,
        }
        sums = consensus_pass(enc.held, executor, weighted_consensus_pass, kwargs, graph.n_components)
        accuracy = ((m - 1) * skill + 1) / m
        ok = active
        passes = 1
        trace = fit.loss_trace if fit else np.empty(0)
        meta.update(
            {
                "iterations": fit.iterations if fit else 0,
                "converged": fit.converged if fit else True,
                "final_loss": fit.final_loss if fit else 0.0,
                "eta": fit.eta if fit else float("nan"),
                "last_step": fit.last_step if fit else 0.0,
                "n_fallback_steps": fit.n_fallback_steps if fit else 0,
                "fit_status": "no_identifiable_worker"
                if fit is None
                else ("converged" if fit.converged else "not_converged"),
            }
        )
    elif o.method == "mv":
        kwargs = {"out_folder": out_folder, "tie_break": o.tie_break, "seed": o.seed, "ok": ok, **common}
        sums = consensus_pass(enc.held, executor, mv_consensus, kwargs, graph.n_components)
        accuracy = sums["agreements"] / np.maximum(n_i, 1)
        skill = (m * accuracy - 1.0) / (m - 1.0)
        weight = np.ones(w)
        passes = 1
        meta.update(
            {
                "iterations": 0,
                "converged": True,
                "final_loss": float("nan"),
                "eta": float("nan"),
                "fit_status": "closed_form",
            }
        )
    else:
        one_coin = o.method == "onecoin_ds"
        consensus = {"out_folder": out_folder, "tie_break": o.tie_break, "seed": o.seed, "ok": ok, **common}
        job = HeldDS(w, m, enc.n_tasks, enc.labels_per_worker, o, one_coin, consensus, graph.n_components)
        # the EM and its consensus pass run where the buckets are (a Dask worker): the flow receives W accuracies
        # and weights, never the fit's W·M² arrays (docs/scale.md, memory laws)
        ds = elsewhere(executor, fit_ds_held, enc.held, job, progress)
        del job, consensus
        accuracy, weight, sums, it, converged = ds.accuracy, ds.weight, ds.sums, ds.iterations, ds.converged
        timing, passes, trace = ds.timing, ds.passes, -np.asarray(ds.trace)
        timing["held_bytes"] = pass_bytes(enc.n_labels, enc.n_tasks, len(enc.buckets))
        log.info("%s EM: %d evaluations, converged %s, passes %d: %s", o.method, it, converged, passes, timing)
        skill = (m * accuracy - 1.0) / (m - 1.0)
        if not converged:
            warnings.warn(
                f"{o.method} EM stopped after {it} iterations without converging (parameter change >= tol)",
                RuntimeWarning,
                stacklevel=2,
            )
        meta.update(
            {
                "ds_tol": float(o.ds_tol),
                "ds_max_iter": int(o.ds_max_iter),
                "ds_smoothing": float(o.ds_smoothing),
                "ds_prior": float(o.ds_prior) if o.method == "ds" else 0.0,
                "iterations": it,
                "converged": converged,
                "final_loss": float(trace[-1]),
                "eta": float("nan"),
                "fit_status": "converged" if converged else "not_converged",
            }
        )
    pairs = n_mat is not None
    args = SkillsTableArgs(
        enc.workers, skill, accuracy, weight, n_i, row_stats, graph, status, ok, box, o.method, pairs
    )
    # the table's rows where the buckets are (a Dask worker) when asked: the flow keeps a handle (issue #36)
    table_ = held_or_built(executor, skills_table, args, "skills", w, hold_tables)
    del args
    if isinstance(table_, HeldTable):
        log.info("the skills table (%d rows) is built and held on a worker, written from there by the export", w)
    diag = diagnostics_table(None, n_mat, w_all, graph, skill, status, o, witnesses, sums["per_component"], row_stats)
    meta.update(
        {
            "n_ties": sums["n_ties"],
            "n_fallback_tasks": sums["n_fallback"],
            "frac_workers_identified": float(ok.mean()),
            "frac_labels_identified": float(n_i[ok].sum() / max(enc.n_labels, 1)),
            "frac_tasks_identified": float(
                (1.0 - sums["n_fallback"] / enc.n_tasks) if o.method == "pgd" else sums["tasks_with_ok"] / enc.n_tasks
            ),
        }
    )
    explain_missing_components(diag, o.method, pairs=pairs)
    empty = pd.DataFrame({c: [] for c in ("task", "label", "confidence", "n_labels", "fallback")})
    held = table_ if isinstance(table_, HeldTable) else None
    skills = table_ if isinstance(table_, pd.DataFrame) else pd.DataFrame()
    result = SkillsResult(skills=skills, consensus=empty, diagnostics=diag, metadata=meta, loss_trace=trace)
    reviews = [_worker_ids(r, enc.workers) for r in sums["reviews"]]
    review, gold = merge_review_parts(reviews, truth)
    return PartitionedSkills(
        result=result,
        consensus_parts=sums["paths"],
        passes=passes,
        review=review,
        gold=gold,
        timing=timing,
        held_skills=held,
    )


def _worker_ids(part: ReviewPart, workers: Any) -> ReviewPart:
    if part.gold_workers is None or not len(part.gold_workers):
        return part
    ids = id_text(workers, part.gold_workers["worker"].astype(np.int64).to_numpy())
    return replace(part, gold_workers=part.gold_workers.assign(worker=ids))


def fit_skills_partitioned(
    source: str | os.PathLike[str],
    options: SkillsOptions | None = None,
    *,
    out_folder: str | os.PathLike[str],
    executor: MapFn | None = None,
    n_buckets: int | None = None,
    columns: dict[str, str] | None = None,
    truth: pd.DataFrame | None = None,
    storage_options: dict[str, Any] | None = None,
    work_dir: str | None = None,
    progress: ProgressFn | None = None,
    hold_tables: str | None = None,
    **overrides: Any,
) -> PartitionedSkills:
    """Skills and consensus of a Parquet dataset larger than memory, in passes over its files (no Prefect).

    The library form of a partitioned run (docs/scale.md): :func:`read_and_split` on every file, the dictionaries,
    :func:`encode_buckets`, :func:`fit_buckets`. With the default in-process executor one file or one bucket is
    in memory at a time (the single-machine path for inputs larger than memory); with a Dask client's map the
    passes run on its workers. Nothing is validated beyond the table contract (the pipeline adds Great
    Expectations per file and the worker-graph check).

    Parameters
    ----------
    source : str or PathLike
        A folder of Parquet files, one file, or an fsspec URL.
    options : SkillsOptions, optional
    out_folder : path
        Where the consensus parts are written (created).
    executor : callable, optional
        ``executor(fn, items) -> results``; default: one item after the other in this process.
    n_buckets : int, optional
        Task buckets (default: the number of files, at least 2).
    columns : dict, optional
        Canonical column → the files' column name.
    truth : pandas.DataFrame, optional
        Gold labels (``task``, ``label``) for the review.
    storage_options : dict, optional
        fsspec options of a URL.
    work_dir : str, optional
        Folder for the buckets (a temporary folder inside it, removed at the end).
    progress : callable, optional
        The fit's progress (:func:`fit_buckets`).
    hold_tables : str, optional
        A folder the workers see: the skills table stays where a Dask worker builds it (:func:`fit_buckets`).
    **overrides
        Fields of :class:`SkillsOptions`.
    """
    o = SkillsOptions.resolve(options, **overrides)
    run = executor or inline_executor
    parts = list_partitions(source, storage_options)
    out = Path(out_folder)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="crowdflow-buckets-", dir=work_dir) as tmp:
        nb = n_buckets or max(2, len(parts))
        pieces: dict[str, list[Any]] | None = None
        if holds(run):  # one read: the pieces stay in memory (crowdflow.skills.pieces)
            union, _, pieces = read_and_keep_all(run, parts, tmp, nb, columns)
            buckets = sorted(pieces)
        else:
            split = functools.partial(read_and_split, folder=tmp, n_buckets=nb, columns=columns)
            union = fold(run, split, parts, _add_split, IdUnion())
            buckets = sorted(str(p) for p in Path(tmp).glob("bucket-*"))
        try:
            workers, classes = union.finish(o.classes)
        except BaseException:
            release_pieces(run, pieces)
            raise
        files = [p.name for p in parts]
        enc = encode_buckets(buckets, run, workers, classes, o.duplicates, files, needs_pairs(o), pieces=pieces)
        return fit_buckets(enc, run, o, str(out), truth=truth, progress=progress, hold_tables=hold_tables)
