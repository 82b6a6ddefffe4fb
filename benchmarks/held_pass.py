"""The held Dawid–Skene pass's kernel cost a label against the number of crowd workers (issue #36, docs/scale.md).

Run: ``python -m benchmarks.held_pass [--labels 5e6] [--workers 2000,20000,200000] [--repeats 5]``. Prints, per
worker count, the CPU time a label of :func:`crowdflow.skills.held.em_sums_group` (one Dask worker's task of a
pass, run here in process on 8 buckets) with the cache hint on (the library's kernels) and, for the same labels,
with the worker codes folded onto 2,000 workers (tables that stay in the second-level cache): what the tables'
size costs a label. CPU time (``time.thread_time``, best of the repeats), so a loaded host inflates it less than
wall time; the load average is printed with it.

The crowd: tasks of 3–7 labels by distinct workers drawn with log-normal(0, 1.6) activity (as
``benchmarks.scale_data``), two classes, the held codes numbered by activity as a run holds them
(:func:`crowdflow.skills.held.by_activity`), a random log π table.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

import numpy as np

from crowdflow.skills.held import EMShared, activity_order, by_activity, em_sums_group, held_codes, label_row_major


def _buckets(n_labels: int, n_workers: int, n_buckets: int, seed: int) -> list[object]:
    rng = np.random.default_rng(seed)
    act = rng.lognormal(0.0, 1.6, n_workers)
    act /= act.sum()
    k = rng.integers(3, 8, n_labels // 5 + 1)
    k = k[: np.searchsorted(np.cumsum(k), n_labels) + 1]
    task = np.repeat(np.arange(k.size), k)
    worker = rng.choice(n_workers, task.size, p=act)
    order = np.lexsort((worker, task))  # (task, worker) order; a repeated worker in a task is harmless here
    task, worker = task[order], worker[order]
    given = rng.integers(0, 2, task.size)
    n_i = np.bincount(worker, minlength=n_workers)
    rank = activity_order(n_i)
    out = []
    for part in np.array_split(np.arange(k.size), n_buckets):
        lo, hi = np.searchsorted(task, [part[0], part[-1] + 1])
        codes = held_codes("bench", task[lo:hi] - part[0], worker[lo:hi], given[lo:hi], part.size, 2, n_workers)
        out.append(by_activity(codes, rank))
    return out


def _cpu(group: list[object], shared: EMShared, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        em_sums_group(group, shared)  # type: ignore[arg-type]
        best = min(best, time.thread_time() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=float, default=5e6)
    ap.add_argument("--workers", default="2000,20000,200000")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    n = int(args.labels)
    print(f"load average {os.getloadavg()[0]:.1f}; {n:,} labels in 8 buckets, CPU ns a label (best of {args.repeats})")
    for w in (int(x) for x in args.workers.split(",")):
        group = _buckets(n, w, 8, 0)
        rng = np.random.default_rng(1)
        tab = label_row_major(np.log(rng.uniform(0.05, 0.95, (2, w * 2))))
        shared = EMShared(tab, np.log([0.4, 0.6]), False, w)
        labels = sum(c.n_labels for c in group)  # type: ignore[attr-defined]
        near = [replace(c, code=(c.code % 4000).astype(c.code.dtype)) for c in group]  # type: ignore[type-var]
        t_far, t_near = _cpu(group, shared, args.repeats), _cpu(near, shared, args.repeats)
        print(
            f"W = {w:>7,}: {1e9 * t_far / labels:5.1f} ns a label; the same labels on 2,000 workers' rows "
            f"{1e9 * t_near / labels:5.1f} ns (load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
