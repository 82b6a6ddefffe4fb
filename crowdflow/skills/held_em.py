"""Dawid–Skene EM as passes over held buckets, and what each pass cost (issue #36, docs/scale.md).

The EM map of the in-memory fit, F(θ) = M-step(Σ over buckets of the E-step's sums at θ), under the same SQUAREM
accelerator and stopping rule (:func:`crowdflow.skills.squarem.squarem`, docs/methods/skills.md §7.2): one fused
pass over the held buckets per evaluation of F (:func:`crowdflow.skills.held.em_sums_group`, one task per Dask
worker that holds buckets), the parameters, the M-step and SQUAREM in the flow. Every pass is timed
(:class:`PassTiming`): the flow's wall time of each pass from the shared table's send to the summed counts, the
workers' own time (wall, CPU and kernels, returned with the sums), and the flow's work between passes, so a run's
manifest says where a pass goes (``partitioned.timing``).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from crowdflow.executors import MapFn, fold, held_groups, on_group_with, release, share
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
) -> EMFit:
    """Dawid–Skene EM as passes over ``held`` (the module docstring): the map of the in-memory fit under SQUAREM."""
    t_start = time.perf_counter()
    m, w = n_classes, n_workers
    alpha, beta = float(o.ds_smoothing), 0.0 if one_coin else float(o.ds_prior)
    par = EMParameters(w, m, one_coin, alpha, beta, labels_per_worker)
    # the passes' log π, label-major (EMShared.tab), one buffer for the run: a pass's shared value is released
    # before the next pass writes it; the class-major table the consensus pass reads is written into it at the end
    lanes, log_q = np.empty(w * m * m), np.empty(m)
    timing = PassTiming()

    def em_step(theta: np.ndarray) -> tuple[np.ndarray, float, float]:
        prior = par.lanes(theta, lanes, log_q)
        shared = EMShared(lanes, log_q.copy(), one_coin, w)
        counts, class_sums, ll = em_pass(held, executor, shared, m, groups, timing)
        del shared
        log.info("Dawid-Skene EM pass %d: log-likelihood %.6f", timing.passes - 1, ll)
        return par.from_lane_sums(counts, class_sums, n_tasks), ll + prior, ll

    groups = held_groups(executor, held)
    counts, class_sums, _ = em_pass(held, executor, EMShared(np.zeros(0), np.zeros(m), one_coin, w), m, groups, timing)
    theta0 = par.from_lane_sums(counts, class_sums, n_tasks)
    del counts
    run = squarem(em_step, theta0, o.ds_tol, o.ds_max_iter, *par.bounds())
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
