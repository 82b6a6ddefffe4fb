"""Dawid–Skene EM as passes over held buckets, and what each pass cost (issue #36, docs/scale.md).

The EM map of the in-memory fit, F(θ) = M-step(Σ over buckets of the E-step's sums at θ), under the same SQUAREM
accelerator and stopping rule (:func:`crowdflow.skills.squarem.squarem`, docs/methods/skills.md §7.2): one fused
pass over the held buckets per evaluation of F (:func:`crowdflow.skills.held.em_sums_group`, one task per Dask
worker that holds buckets), the parameters, the M-step and SQUAREM in the process that calls :func:`em_fit`. The
partitioned fit calls it through :func:`fit_ds_held` run by :func:`crowdflow.executors.elsewhere`: on Dask that
process is one of the Dask workers, so the EM's W·M² arrays never reach the flow, which receives the per-worker
accuracies and weights (docs/scale.md, memory laws). Every pass is timed
(:class:`PassTiming`): the flow's wall time of each pass from the shared table's send to the summed counts, the
workers' own time (wall, CPU and kernels, returned with the sums), and the flow's work between passes, so a run's
manifest says where a pass goes (``partitioned.timing``). The EM reports its progress and a line a pass to the
caller's callback (:mod:`crowdflow.progress`; from a Dask worker through :func:`crowdflow.executors.elsewhere`).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from crowdflow.executors import (
    MapFn,
    fold,
    held_groups,
    interleaved,
    on_group_with,
    on_held_with,
    release,
    share,
    with_shared,
)
from crowdflow.progress import IterationProgress, PassLines, ProgressFn
from crowdflow.skills.buckets import ConsensusPart, ds_consensus
from crowdflow.skills.dawid_skene import EMParameters
from crowdflow.skills.held import BucketSums, EMShared, em_sums_group
from crowdflow.skills.options import SkillsOptions
from crowdflow.skills.squarem import squarem

log = logging.getLogger(__name__)


@dataclass
class PassTiming:
    """Where the EM passes of one fit went (seconds summed over the passes; timing only).

    Attributes
    ----------
    passes : int
        EM passes (the initialising one included).
    em_s : float
        The flow's wall time of the whole EM, first pass to the last parameters.
    pass_s : float
        The flow's wall time inside the passes: the table shared, the worker tasks submitted, their sums received
        and added (:func:`em_pass`).
    worker_s, worker_cpu_s, kernel_s : float
        Per pass the slowest worker task's wall time, the largest CPU time of a task, the largest time of a task's
        compiled kernels; summed over the passes.
    group_labels : list of int
        Labels of each worker task's buckets (the balance of the two workers).
    """

    passes: int = 0
    em_s: float = 0.0
    pass_s: float = 0.0
    worker_s: float = 0.0
    worker_cpu_s: float = 0.0
    kernel_s: float = 0.0
    group_labels: list[int] = field(default_factory=list)

    def add(self, pass_s: float, tasks: list[BucketSums]) -> None:
        """Count one pass: the flow's wall time of it and its worker tasks' own timing."""
        self.passes += 1
        self.pass_s += pass_s
        if tasks:
            self.worker_s += max(t.wall_s for t in tasks)
            self.worker_cpu_s += max(t.cpu_s for t in tasks)
            self.kernel_s += max(t.kernel_s for t in tasks)
            self.group_labels = [t.n_labels for t in tasks]

    def record(self) -> dict[str, Any]:
        """The manifest's ``partitioned.timing`` (seconds rounded to ms; per pass: the means)."""
        n = max(self.passes, 1)
        return {
            "em_passes": self.passes,
            "em_s": round(self.em_s, 3),
            "pass_s": round(self.pass_s, 3),
            "worker_s": round(self.worker_s, 3),
            "worker_cpu_s": round(self.worker_cpu_s, 3),
            "kernel_s": round(self.kernel_s, 3),
            "between_passes_s": round(self.em_s - self.pass_s, 3),
            "per_pass_s": round(self.em_s / n, 4),
            "group_labels": list(self.group_labels),
        }


@dataclass(frozen=True)
class EMFit:
    """The end of :func:`em_fit`: π (W×M×M), q, the log π table (class-major), the trace without the final E-step,
    evaluations of F, whether it converged, passes over the buckets, and their timing."""

    pi: np.ndarray
    q: np.ndarray
    table: np.ndarray
    trace: list[float]
    iterations: int
    converged: bool
    passes: int
    timing: PassTiming


def _add_sums(acc: list[Any] | None, s: BucketSums) -> list[Any]:
    """Fold one task's EM sums in task order (``acc += s``: the bits of numpy's sum over the stacked tasks); keep the
    task's timing (without its W·M² sums: the running sum is the only one the flow holds). The first task's sums
    become the running sum when they are writeable (a task's result is its own arrays: a copy of them was one more
    W·M² array in the flow at the pass's peak)."""
    timing = replace(s, counts=np.zeros(0), class_sums=np.zeros(0))
    if acc is None:
        counts = s.counts if s.counts.flags.writeable else s.counts.copy()
        return [counts, s.class_sums.copy(), [s.log_likelihood], [timing]]
    acc[0] += s.counts
    acc[1] += s.class_sums
    acc[2].append(s.log_likelihood)
    acc[3].append(timing)
    return acc


def em_pass(
    held: list[Any],
    executor: MapFn,
    shared: EMShared,
    n_classes: int,
    groups: list[list[int]] | None = None,
    timing: PassTiming | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """One fused E/M pass over the held buckets (:func:`crowdflow.skills.held.em_sums_group`): the summed M-step
    counts (label-major, ``[(i·M + m)·M + l]``, as the buckets add them, for
    :meth:`~crowdflow.skills.dawid_skene.EMParameters.from_lane_sums`; one-coin per worker), Σ_t T_tl and the
    log-likelihood. The flow holds one running sum (W·M² numbers) and the results that completed ahead of their
    turn. ``groups``: the buckets grouped by
    where they are held (:func:`crowdflow.executors.held_groups`), asked once per fit by :func:`em_fit` instead of
    once per pass (held codes do not move while they are held). ``timing`` counts the pass."""
    t0 = time.perf_counter()
    handle = share(executor, shared)
    found = held_groups(executor, held) if groups is None else groups
    items = [([held[i] for i in g], handle) for g in found]
    try:  # one task per worker holding buckets (em_sums_group), not one per bucket: two round trips a pass on two
        acc = fold(executor, on_group_with(em_sums_group), items, _add_sums, None, ordered=True)
    finally:
        release(executor, [handle])
    m, w = n_classes, shared.n_workers
    if acc is None:
        acc = [np.zeros(w if shared.one_coin else w * m * m), np.zeros(m), [], []]
    if timing is not None:
        timing.add(time.perf_counter() - t0, acc[3])
    return acc[0], acc[1], math.fsum(acc[2])


def em_fit(
    held: list[Any],
    executor: MapFn,
    n_workers: int,
    n_classes: int,
    n_tasks: int,
    labels_per_worker: np.ndarray,
    o: SkillsOptions,
    one_coin: bool,
    progress: ProgressFn | None = None,
) -> EMFit:
    """Dawid–Skene EM as passes over ``held`` (the module docstring): the map of the in-memory fit under SQUAREM.

    ``progress(fraction)`` (:class:`~crowdflow.progress.IterationProgress` of the evaluations against
    ``o.ds_max_iter`` and of SQUAREM's parameter move against ``o.ds_tol``, never 1.0: the caller says when its job
    is done) and, when the callback has a ``note`` method, one line per pass: its number, the log-likelihood and the
    change from the pass before (:class:`crowdflow.progress.PassLines`). Reading the run, it changes nothing in it.
    """
    t_start = time.perf_counter()
    m, w = n_classes, n_workers
    alpha, beta = float(o.ds_smoothing), 0.0 if one_coin else float(o.ds_prior)
    par = EMParameters(w, m, one_coin, alpha, beta, labels_per_worker)
    # the passes' log π, label-major (EMShared.tab), one buffer for the run: a pass's shared value is released
    # before the next pass writes it; the class-major table the consensus pass reads is written into it at the end
    lanes, log_q = np.empty(w * m * m), np.empty(m)
    timing = PassTiming()
    tracker = IterationProgress(progress, o.ds_max_iter, o.ds_tol)
    lines = PassLines(progress, o.ds_max_iter, log)

    def em_step(theta: np.ndarray) -> tuple[np.ndarray, float, float]:
        prior = par.lanes(theta, lanes, log_q)
        shared = EMShared(lanes, log_q.copy(), one_coin, w)
        counts, class_sums, ll = em_pass(held, executor, shared, m, groups, timing)
        del shared
        lines(ll)
        return par.from_lane_sums(counts, class_sums, n_tasks), ll + prior, ll

    groups = held_groups(executor, held)
    counts, class_sums, _ = em_pass(held, executor, EMShared(np.zeros(0), np.zeros(m), one_coin, w), m, groups, timing)
    theta0 = par.from_lane_sums(counts, class_sums, n_tasks)
    del counts
    run = squarem(em_step, theta0, o.ds_tol, o.ds_max_iter, *par.bounds(), monitor=tracker.update)
    del theta0
    _, q = par.split(run.theta)
    table = lanes.reshape(m, w * m)  # the passes are over: the buffer takes the class-major table
    par.tables(run.theta, table, log_q)
    timing.em_s = time.perf_counter() - t_start
    log.info(
        "EM (SQUAREM): %d evaluations, %d extrapolations kept, %d refused; passes: %s",
        run.evaluations,
        run.extrapolations,
        run.refused,
        timing.record(),
    )
    pi = par.confusion(run.theta)
    return EMFit(pi, np.array(q), table, run.trace, run.evaluations, run.converged, timing.passes, timing)


def _add_part(acc: dict[str, Any] | None, p: ConsensusPart) -> dict[str, Any]:
    """Fold one bucket's consensus sums into the caller's (per-worker arrays summed, never one per bucket kept)."""
    if acc is None:
        acc = {
            "paths": [],
            "agreements": None,
            "labels": np.zeros(0, np.int64),
            "tasks": np.zeros(0, np.int64),
            "n_ties": 0,
            "n_fallback": 0,
            "tasks_with_ok": 0,
            "reviews": [],
            "lls": [],
        }
    acc["paths"].append(p.path)
    if acc["agreements"] is None:
        acc["agreements"] = p.agreements.astype(np.float64, copy=True)
    else:
        acc["agreements"] += p.agreements
    for key, part in zip(("labels", "tasks"), p.per_component, strict=True):
        if part.size > acc[key].size:
            acc[key] = np.concatenate([acc[key], np.zeros(part.size - acc[key].size, np.int64)])
        acc[key][: part.size] += part
    acc["n_ties"] += p.n_ties
    acc["n_fallback"] += p.n_fallback
    acc["tasks_with_ok"] += p.tasks_with_ok_worker
    acc["reviews"].append(p.review)
    acc["lls"].append(p.log_likelihood)
    return acc


def _with_kwargs(fn: Callable[..., ConsensusPart], codes: Any, kwargs: dict[str, Any]) -> ConsensusPart:
    return fn(codes, **kwargs)


def consensus_pass(
    held: list[Any], executor: MapFn, fn: Callable[..., ConsensusPart], kwargs: dict[str, Any], n_comp: int
) -> dict[str, Any]:
    """One consensus pass over the held buckets: ``fn(codes, **kwargs)`` per bucket, ``kwargs`` shared once (the
    per-worker arrays, the gold table, the parameters), the buckets submitted in turn from each worker that holds
    them (:func:`crowdflow.executors.interleaved`) and folded as they complete. Every sum is exact in any order
    (counts, and agreements that are sums of 0/1), the log-likelihoods are added by ``math.fsum`` (exactly rounded,
    whatever their order) and the parts' paths and reviews are put back in bucket order: the result of a fold in
    bucket order, bit for bit."""
    order = interleaved(held_groups(executor, held))
    shared = share(executor, kwargs)
    try:
        acc = fold(
            executor,
            on_held_with(functools.partial(_with_kwargs, fn)),
            with_shared([held[i] for i in order], shared),
            _add_part,
            None,
        )
    finally:
        release(executor, [shared])
    if acc is None:
        raise ValueError("no bucket to pass over: the labels are empty")
    by_path = sorted(range(len(acc["paths"])), key=lambda k: acc["paths"][k])  # part-<bucket>: the buckets' order
    acc["paths"] = [acc["paths"][k] for k in by_path]
    acc["reviews"] = [acc["reviews"][k] for k in by_path]
    lab = np.zeros(n_comp, dtype=np.int64)
    tasks = np.zeros(n_comp, dtype=np.int64)
    lab[: min(n_comp, acc["labels"].size)] += acc["labels"][:n_comp]
    tasks[: min(n_comp, acc["tasks"].size)] += acc["tasks"][:n_comp]
    return {
        "paths": acc["paths"],
        "agreements": acc["agreements"],
        "per_component": (lab, tasks),
        "n_ties": acc["n_ties"],
        "n_fallback": acc["n_fallback"],
        "tasks_with_ok": acc["tasks_with_ok"],
        "reviews": acc["reviews"],
        "log_likelihood": math.fsum(acc["lls"]),
    }


@dataclass(frozen=True)
class HeldDS:
    """A Dawid–Skene fit over held buckets and its consensus pass, as one job (:func:`fit_ds_held`).

    Attributes
    ----------
    n_workers, n_classes, n_tasks : int
        W, M and the tasks of the buckets.
    labels_per_worker : numpy.ndarray
        Labels per worker (the M-step's smoothing, :class:`~crowdflow.skills.dawid_skene.EMParameters`).
    options : SkillsOptions
    one_coin : bool
        One-coin Dawid–Skene (``onecoin_ds``) instead of the full confusion matrices.
    consensus : dict
        The consensus pass's arguments (:func:`crowdflow.skills.buckets.ds_consensus`) but the parameters.
    n_components : int
        Components of the worker graph (the pass's per-component sums).
    """

    n_workers: int
    n_classes: int
    n_tasks: int
    labels_per_worker: np.ndarray
    options: SkillsOptions
    one_coin: bool
    consensus: dict[str, Any]
    n_components: int


@dataclass(frozen=True)
class HeldDSFit:
    """What :func:`fit_ds_held` returns: per worker the accuracy and the vote weight (W numbers each, never the
    W·M² parameters), and scalars.

    Attributes
    ----------
    accuracy : numpy.ndarray
        Σ_l q_l π_i(l, l) (full Dawid–Skene) or the coin π_i (one-coin), per worker.
    weight : numpy.ndarray
        One-coin: log((M − 1) π_i / (1 − π_i)); full: NaN (no single vote weight).
    trace : list of float
        The EM's log-likelihoods (:attr:`EMFit.trace`), then the consensus pass's.
    iterations : int
        Evaluations of the EM map.
    converged : bool
    passes : int
        Passes over the buckets, the consensus pass included.
    timing : dict
        :meth:`PassTiming.record` and the consensus pass's seconds (``consensus_s``).
    sums : dict
        :func:`consensus_pass`'s sums without the per-worker agreements (majority vote's; unused here).
    """

    accuracy: np.ndarray
    weight: np.ndarray
    trace: list[float]
    iterations: int
    converged: bool
    passes: int
    timing: dict[str, Any]
    sums: dict[str, Any]


def fit_ds_held(executor: MapFn, held: list[Any], job: HeldDS, progress: ProgressFn | None = None) -> HeldDSFit:
    """Dawid–Skene over the held buckets (:func:`em_fit`), then its consensus pass (the final E-step writing the
    consensus parts, :func:`crowdflow.skills.buckets.ds_consensus`), reduced to per-worker accuracies.

    Every W·M² array of the fit (SQUAREM's iterates, the M-step's sums, log π, π) lives in the process that runs
    this function and only the :class:`HeldDSFit` leaves it: the partitioned fit runs it through
    :func:`crowdflow.executors.elsewhere`, so with a Dask executor that process is one of the Dask workers and the
    flow receives 2 W numbers and scalars (docs/scale.md, memory laws). The operations and their order are those of
    the flow-side fit it replaced, so the skills and the consensus have the same bits.

    ``progress``: the EM's reports (:func:`em_fit`), then 1.0 once the consensus pass is done. Through
    :func:`~crowdflow.executors.elsewhere` on Dask it is the worker's sender of these reports to the flow's callback.
    """
    em = em_fit(
        held,
        executor,
        job.n_workers,
        job.n_classes,
        job.n_tasks,
        job.labels_per_worker,
        job.options,
        job.one_coin,
        progress,
    )
    timing = em.timing.record()
    t_consensus = time.perf_counter()
    kwargs = {**job.consensus, "log_pi_t": em.table, "log_q": np.log(em.q)}
    sums = consensus_pass(held, executor, ds_consensus, kwargs, job.n_components)
    timing["consensus_s"] = round(time.perf_counter() - t_consensus, 3)
    if progress is not None:
        progress(1.0)
    del kwargs, sums["agreements"]
    m, pi, q = job.n_classes, em.pi, em.q
    if job.one_coin:
        accuracy = pi[:, 0, 0].copy()
        weight = np.log((m - 1) * accuracy / (1 - accuracy))
    else:
        accuracy = np.einsum("l,ill->i", q, pi)
        weight = np.full(job.n_workers, np.nan)
    trace = [*em.trace, sums["log_likelihood"]]
    return HeldDSFit(accuracy, weight, trace, em.iterations, em.converged, em.passes + 1, timing, sums)
