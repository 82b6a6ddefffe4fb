"""A bucket's labels held as integer codes in a worker's memory, and the fused Dawid–Skene pass over them.

A partitioned skills fit (:mod:`crowdflow.skills.partitioned`, docs/scale.md) encodes each task bucket once and
keeps it where it was encoded (:func:`crowdflow.executors.hold`: persisted futures in a Dask worker's memory,
values in this process with :class:`~crowdflow.executors.InlineMemory`, or read again from the bucket's codes file
on every pass with any other executor). What is held is :class:`HeldCodes`: per task an ``int32`` offset, per
label one ``int32`` code ``r = worker · M + class``, about ``4 + 4/k̄`` bytes a label (k̄ labels per task) instead of
the 9 of separate task, worker and class columns, and nothing per task beyond the offset.

Every EM iteration is one compiled sweep per bucket (:func:`em_sums`): for each task the E-step
ℓ_l = log q_l + Σ_{labels (i, m)} log π_i[l, m], its posterior T_t· (in a block buffer of 256 tasks, never stored),
and the M-step's sums G_i[l, m] += T_tl (or, one-coin, p_i += T_{t,m}), Σ_t T_tl and the log-likelihood. Only the
W·M² (or W) sums, M class sums and one float go back to the flow (docs/methods/skills.md §7.2).

The sweep is the in-memory EM map's (:func:`crowdflow.skills.fused_em.fused_pass`, one rule in one place) with its
default, vectorised exponential: a bucket's posteriors, G, p, class sums and log-likelihood are the bits of the
in-memory map's sweep on the same labels (``tests/skills/test_held_binary.py``), each sum in the same order (per
task the labels in (task, worker) order, per cell of G the labels in bucket order, Σ_t T_tl in task order). Until
session 22 the held passes had their own kernels with libm's ``exp`` (the in-memory ``exact`` mode's posteriors)
and took the class sums by numpy's pairwise sum over stored posteriors: their fits differ from these in the last
bits (docs/scale.md).

Bytes per pass: ``4·(labels + tasks + 1)`` read per bucket, plus the W·M² tables, which stay in cache for
W·M² ≲ 10⁶ (:func:`pass_bytes`; docs/scale.md, the bandwidth limit); no posterior is written.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from crowdflow.compiled import compiled_kernel
from crowdflow.skills.fused_em import fused_pass, paired_counts, paired_table, pairs_past_cache

__all__ = [
    "EMShared",
    "HeldCodes",
    "activity_order",
    "by_activity",
    "em_sums",
    "em_sums_group",
    "held_codes",
    "pass_bytes",
    "posteriors",
    "read_codes",
]

_CODES = "codes.parquet"


@dataclass(frozen=True)
class HeldCodes:
    """One bucket's labels grouped by task, as held across the passes.

    Attributes
    ----------
    path : str
        The bucket's folder (its ``tasks.parquet`` names the local tasks; consensus parts are named after it).
    indptr : numpy.ndarray
        (T_b + 1,) int32 offsets (int64 past 2³¹ labels): the labels of local task t are ``indptr[t]:indptr[t+1]``.
    code : numpy.ndarray
        (L_b,) int32 ``worker · M + class`` (int64 when W·M ≥ 2³¹), in (task, worker) order.
    n_classes : int
        M.
    order : numpy.ndarray or None
        None: ``code`` holds ``worker · M + class`` with the run's worker codes. Else the codes number the workers by
        rank of activity (:func:`by_activity`): ``code`` holds ``rank · M + class`` and ``order[rank]`` is the
        worker; the labels keep their order, so every sum of a pass runs in the same order and gives the same bits.
    """

    path: str
    indptr: np.ndarray
    code: np.ndarray
    n_classes: int
    order: np.ndarray | None = None

    @property
    def n_tasks(self) -> int:
        return int(self.indptr.size - 1)

    @property
    def n_labels(self) -> int:
        return int(self.code.size)

    @property
    def nbytes(self) -> int:
        """Bytes held (what one pass reads, besides the W·M² tables)."""
        return int(self.indptr.nbytes + self.code.nbytes)

    def worker_idx(self) -> np.ndarray:
        """The run's worker code of every label."""
        local = (self.code // self.n_classes).astype(np.int64)
        return local if self.order is None else self.order[local].astype(np.int64)

    def class_idx(self) -> np.ndarray:
        return (self.code % self.n_classes).astype(np.int64)

    def task_idx(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_tasks, dtype=np.int64), np.diff(self.indptr))


def held_codes(
    path: str, task_idx: np.ndarray, worker_idx: np.ndarray, class_idx: np.ndarray, n_tasks: int, m: int, n_workers: int
) -> HeldCodes:
    """:class:`HeldCodes` of labels already in (task, worker) order with every local task present."""
    big = n_workers * m >= 2**31
    code = worker_idx.astype(np.int64) * m + class_idx.astype(np.int64)
    counts = np.bincount(task_idx, minlength=n_tasks)
    indptr = np.zeros(n_tasks + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    small = indptr[-1] < 2**31
    return HeldCodes(
        path=str(path),
        indptr=indptr.astype(np.int32) if small else indptr,
        code=code if big else code.astype(np.int32),
        n_classes=int(m),
    )


def read_codes(path: str, n_workers: int, n_classes: int) -> HeldCodes:
    """The codes a disk-writing encode left in ``path`` (``codes.parquet``), as :class:`HeldCodes`: what an
    executor that holds nothing reads again on every pass (the recompute fallback)."""
    import pyarrow.parquet as pq

    codes = pq.read_table(Path(path) / _CODES)
    n_tasks = int(pq.read_metadata(Path(path) / "tasks.parquet").num_rows)
    task = codes.column("task").to_numpy().astype(np.int64)
    worker = codes.column("worker").to_numpy()
    label = codes.column("label").to_numpy()
    return held_codes(path, task, worker, label, n_tasks, n_classes, n_workers)


def activity_order(labels_per_worker: np.ndarray) -> np.ndarray:
    """The workers by decreasing label count (ties by code): ``order[rank]`` is a worker (:func:`by_activity`)."""
    n_i = np.asarray(labels_per_worker)
    dtype = np.int32 if n_i.size < 2**31 else np.int64
    return np.argsort(-n_i.astype(np.int64), kind="stable").astype(dtype)


def by_activity(codes: HeldCodes, order: np.ndarray) -> HeldCodes:
    """``codes`` with the workers numbered by rank of activity (``order`` from :func:`activity_order`; the labels
    keep their order).

    Why: a pass reads log π and adds to the counts at ``code · M`` for every label, in W·M² tables (6.4 MB each at
    W = 2·10⁵, M = 2: past the 1 MB second-level cache of a core here). Activity is skewed (at 10⁸ labels over
    2·10⁵ workers 5 % of the workers give half the labels), so with the busiest workers first the rows most labels
    touch share cache lines and pages. A pass translates the tables once per worker task (:func:`em_sums_group`),
    the consensus once per bucket (:func:`posteriors`); the sums are those of the unranked codes, bit for bit.
    """
    if codes.order is not None:
        raise ValueError("the codes are already ranked")
    m = codes.n_classes
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size, dtype=np.int64)
    local = rank[codes.code // m] * m + codes.code % m
    return replace(codes, code=local.astype(codes.code.dtype), order=order)


def _local_table(tab: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """The label-row-major table ``tab`` (``tab[(i·M + m)·M + l]``, M² entries a worker) in rank order."""
    if order is None or tab.size == 0:
        return tab
    local: np.ndarray = tab.reshape(order.size, -1)[order].ravel()
    return local


def _global_counts(local: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """Counts summed in rank order (M² a worker, or one a worker one-coin) back in the run's worker order."""
    if order is None:
        return local
    out = np.empty_like(local)
    out.reshape(order.size, -1)[order] = local.reshape(order.size, -1)
    return out


def pass_bytes(n_labels: int, n_tasks: int, n_buckets: int) -> int:
    """Bytes one EM pass reads: an int32 code a label and an int32 offset a task (+1 a bucket).

    The posteriors stay in the sweep's block buffer (nothing a task is written; until session 22 the pass wrote
    and read M float64 a task for the class sums, which this counted). The W·M² tables (read and added to) are not
    counted: they stay in cache for W·M² ≲ 10⁶. The bandwidth limit of a pass is this over the measured read
    bandwidth (docs/scale.md). The bytes do not depend on the class count.
    """
    return 4 * int(n_labels) + 4 * (int(n_tasks) + int(n_buckets))


@dataclass(frozen=True)
class EMShared:
    """What every bucket of one EM pass gets (shared once per pass, not once per bucket).

    ``tab`` is log π laid out label-row-major, ``tab[r·M + l] = log π_i[l, m]`` for ``r = i·M + m`` (one cache line
    per label), empty on the initialising pass (majority-vote fractions); ``log_q`` the log class prior.
    """

    tab: np.ndarray
    log_q: np.ndarray
    one_coin: bool
    n_workers: int


@compiled_kernel
def _init_kernel(
    indptr: np.ndarray, code: np.ndarray, m: int, one_coin: bool, counts: np.ndarray, post_t: np.ndarray
) -> None:
    """The initialising pass: each task's posteriors the majority-vote fractions of its labels (as the in-memory
    start) into ``post_t`` (M × T_b), the M-step's sums added to ``counts`` in label order."""
    post = np.empty(m)
    for t in range(indptr.size - 1):
        lo, hi = indptr[t], indptr[t + 1]
        for c in range(m):
            post[c] = 0.0
        for k in range(lo, hi):
            post[code[k] % m] += 1.0
        n = float(hi - lo)
        for c in range(m):
            post[c] = post[c] / n
        for k in range(lo, hi):
            r = code[k]
            if one_coin:
                counts[r // m] += post[r % m]
            else:
                for c in range(m):
                    counts[r * m + c] += post[c]
        for c in range(m):
            post_t[c, t] = post[c]


@dataclass(frozen=True)
class BucketSums:
    """One bucket's pass (:func:`em_sums`): ``counts`` label-row-major (``counts[r·M + l]``, r = i·M + m; one-coin:
    per worker), ``class_sums`` Σ_t T_tl, the bucket's tasks and its log-likelihood (0 on the initialising pass).

    A worker's task over its buckets (:func:`em_sums_group`) also says what it cost: ``n_labels``, its wall and CPU
    seconds from its start to its return value, and the seconds of the compiled kernels among them (the rest: the
    tables put in rank order and back, the work arrays, the class sums). Timing only: no sum depends on them.
    """

    counts: np.ndarray
    class_sums: np.ndarray
    n_tasks: int
    log_likelihood: float
    n_labels: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    kernel_s: float = 0.0


def _em_local(
    codes: HeldCodes,
    tab: np.ndarray,
    shared: EMShared,
    counts: np.ndarray,
    scratch: np.ndarray | None,
    paired: bool = False,
) -> BucketSums:
    """The fused pass with ``tab`` and ``counts`` in the codes' own worker numbering, adding to ``counts`` (with
    ``paired``, to the counts pairs of ``tab``: :func:`~crowdflow.skills.fused_em.fused_pass`)."""
    m = codes.n_classes
    if tab.size == 0:  # majority-vote fractions; their class sums by numpy's (pairwise) sum
        if scratch is None or scratch.size < m * codes.n_tasks:
            scratch = np.empty(m * codes.n_tasks)
        post_t = scratch[: m * codes.n_tasks].reshape(m, codes.n_tasks)
        _init_kernel(codes.indptr, codes.code, m, shared.one_coin, counts, post_t)
        return BucketSums(counts, post_t.sum(axis=1), codes.n_tasks, 0.0)
    class_sums = np.empty(m)
    none = np.empty(0, dtype=np.int64)
    ll = fused_pass(
        codes.indptr,
        codes.code,
        tab,
        shared.log_q,
        none,
        shared.one_coin,
        counts,
        class_sums,
        np.empty(0),
        np.empty((m, 0)),
        add=True,
        paired=paired,
    )
    return BucketSums(counts, class_sums, codes.n_tasks, float(ll))


def _counts_size(shared: EMShared, m: int) -> int:
    return shared.n_workers if shared.one_coin else shared.n_workers * m * m


def em_sums(codes: HeldCodes, shared: EMShared, scratch: np.ndarray | None = None) -> BucketSums:
    """One fused E- and M-step pass over a held bucket (module docstring), its sums from zero in the run's worker
    order (ranked codes, :func:`by_activity`, run on the table in rank order and give the same bits): the pass of
    :func:`em_sums_group` over this one bucket.

    ``scratch`` (at least M·T_b floats) is a work array to reuse on the initialising pass (the majority-vote
    fractions' class sums are taken over a C-contiguous (M, T_b) view of it: the same bits as over a new array).
    """
    s = em_sums_group([codes], shared, scratch)
    return replace(s, n_labels=0, wall_s=0.0, cpu_s=0.0, kernel_s=0.0)


def em_sums_group(group: list[HeldCodes], shared: EMShared, scratch: np.ndarray | None = None) -> BucketSums:
    """:func:`em_sums` over the buckets one worker holds: one task per worker and pass instead of one per bucket
    (:func:`crowdflow.executors.held_groups`).

    Every bucket adds its label terms to one counts array (W·M²), zeroed once a pass: each cell of G is the sum of
    its labels' terms in the order of the group's buckets, as one pass over the buckets laid end to end would give
    (``tests/skills/test_held_binary.py``); the class sums are each bucket's added in order, the
    log-likelihood ``math.fsum`` of the buckets'. (Until issue #36's pass work each bucket's counts were made from
    zero and added to the total: at W = 2·10⁵ that zeroing and adding moved ~25 MB a bucket, more than its 6 MB of
    codes, and pushed the log π table out of the cache; the cells now differ from those sums in the last bits.)
    Ranked buckets (:func:`by_activity`, one order for the group) run on the table put in rank order once, and
    their counts are put back in the run's worker order once. Two classes, the full model, past the cache
    (:func:`~crowdflow.skills.fused_em.pairs_past_cache`, e.g. W = 2·10⁵): that table is a paired one
    (:func:`~crowdflow.skills.fused_em.paired_table`: a (worker, answer)'s log π pair and its counts pair in one
    32-byte record, so a label reads and adds to one cache line, not two), built once a task as the rank-order copy
    was, its counts put back in the run's worker order once; the same operations in the same order, the same bits.
    ``scratch``: as :func:`em_sums`.
    """
    if not group:
        raise ValueError("an EM pass over no bucket")
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    m, order = group[0].n_classes, group[0].order
    size = -1 if order is None else order.size
    if any((-1 if c.order is None else c.order.size) != size for c in group):
        raise ValueError("the buckets of one EM task must share one worker numbering")
    paired = pairs_past_cache(m, shared.one_coin, shared.tab.size)
    if paired:  # the table in rank order and paired with zero counts, one copy
        tab = np.empty(2 * shared.tab.size)
        paired_table(shared.tab, np.empty(0, np.int64) if order is None else order, tab)
        counts = np.empty(0)
    else:
        tab = _local_table(shared.tab, order)
        counts = np.zeros(_counts_size(shared, m))
    if shared.tab.size == 0 and (scratch is None or scratch.size < m * max(codes.n_tasks for codes in group)):
        scratch = np.empty(m * max(codes.n_tasks for codes in group))
    class_sums, n_tasks, lls, kernel_s = np.zeros(m), 0, [], 0.0
    for k, codes in enumerate(group):
        t0 = time.perf_counter()
        s = _em_local(codes, tab, shared, counts, scratch, paired)
        kernel_s += time.perf_counter() - t0
        class_sums = s.class_sums if k == 0 else class_sums + s.class_sums
        n_tasks += s.n_tasks
        lls.append(s.log_likelihood)
    if paired:
        out = np.empty(shared.tab.size)
        paired_counts(tab, np.empty(0, np.int64) if order is None else order, out)
    else:
        out = _global_counts(counts, order)
    wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    n_labels = sum(codes.n_labels for codes in group)
    return BucketSums(out, class_sums, n_tasks, math.fsum(lls), n_labels, wall, cpu, kernel_s)


def posteriors(codes: HeldCodes, tab: np.ndarray, log_q: np.ndarray) -> tuple[np.ndarray, float]:
    """The E-step's posteriors (T_b × M) of a held bucket and its log-likelihood (the final, consensus pass): the
    sweep of the EM passes without the M-step's sums."""
    m = codes.n_classes
    post_t = np.empty((m, codes.n_tasks))
    none = np.empty(0, dtype=np.int64)
    tab = _local_table(tab, codes.order)
    ll = fused_pass(
        codes.indptr, codes.code, tab, log_q, none, False, np.empty(0), np.empty(m), np.empty(0), post_t, sums=False
    )
    return np.ascontiguousarray(post_t.T), float(ll)


def label_row_major(log_pi_t: np.ndarray) -> np.ndarray:
    """``log_pi_t[l, r]`` (class-major, the in-memory kernels' layout) as the flat ``tab[r·M + l]`` of
    :class:`EMShared`."""
    return np.ascontiguousarray(log_pi_t.T).ravel()
