"""What the partitioned EM's progress reports cost a pass: the EM on a Dask worker with and without a callback.

Run: ``python -m benchmarks.em_progress [--labels 1e7] [--workers 2000] [--classes 2] [--passes 30] [--rounds 2]
[--no-write]``. A two-process Dask ``LocalCluster`` (one thread each) holds the labels in 8 buckets, evened out over
its workers (the codes of ``benchmarks.held_pass``: tasks of 3–7 labels, log-normal worker activity, workers ranked
by activity, as a run holds them), and :func:`crowdflow.skills.held_em.em_fit` runs as one task on a worker through
:func:`crowdflow.executors.elsewhere`, as the partitioned fit runs it, with a tolerance no pass meets (every run
makes ``--passes`` evaluations). In the order without, with, with, without (``--rounds`` times): *without*
``progress=None``; *with* a callback with ``note`` in this process (each fraction and pass line an event from the
worker, relayed here). Reported: the EM's seconds a pass, timed on the worker (``PassTiming``: ``em_s`` over the
passes), the best and the median of each arm, their ratio, and the number of reports relayed; the two arms'
log-likelihood traces are compared (equal bit for bit: the reports change nothing). The load average is printed
before and after; writes ``benchmarks/results/em_progress.md`` unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.held_pass import _buckets


def _em_job(executor: Any, held: list[Any], arg: Any, progress: Any) -> tuple[dict[str, Any], list[float]]:
    """The EM alone (no consensus pass), as :func:`crowdflow.skills.held_em.fit_ds_held` runs it: its timing and
    trace."""
    from crowdflow.skills.held_em import em_fit

    w, m, n_tasks, per_worker, options = arg
    fit = em_fit(held, executor, w, m, n_tasks, per_worker, options, False, progress)
    return fit.timing.record(), list(fit.trace)


def _report_cost(topic: str, n: int) -> float:
    """Seconds a pass's reports take the EM's thread on a worker: the stand-in's fraction and line (two events of
    the sizes a pass sends, ``tasks.runners._Sender``) and the tracker's update, ``n`` times, from a task's thread."""
    from distributed import get_worker

    from crowdflow.progress import IterationProgress, note
    from tasks.runners import _Sender

    sender = _Sender(get_worker(), topic)
    tracker = IterationProgress(sender, n, 1e-6, min_delta=0.0)
    line = "Dawid-Skene EM pass 123 of at most 1000: log-likelihood -6931471.805599 (+0.0123 since pass 122)"
    t0 = time.perf_counter()
    for k in range(1, n + 1):
        tracker.update(k, 1.0 / k)
        note(sender, line)
    return (time.perf_counter() - t0) / n


class Sink:
    """A callback with ``note`` that counts what it receives."""

    def __init__(self) -> None:
        self.fractions = 0
        self.lines = 0

    def __call__(self, fraction: float) -> None:
        self.fractions += 1

    def note(self, line: str) -> None:
        self.lines += 1


def arms_table(arms: dict[str, list[float]], unit: str, each: str, digits: int) -> tuple[dict[str, float], list[str]]:
    """The A/B page of both progress benchmarks: the best of each arm (``without``, ``with``) and the table lines
    (best and median seconds a ``unit``, and ``each`` run of the arm, in order) with the with / without ratios."""
    best = {k: min(v) for k, v in arms.items()}
    med = {k: statistics.median(v) for k, v in arms.items()}
    lines = [f"| arm | best s a {unit} | median s a {unit} | each {each}, in order |", "|---|---|---|---|"]
    for arm in ("without", "with"):
        runs = ", ".join(f"{x:.{digits}f}" for x in arms[arm])
        lines.append(f"| {arm} | {best[arm]:.{digits}f} | {med[arm]:.{digits}f} | {runs} |")
    ratio = f"with / without: {best['with'] / best['without']:.3f} (best), {med['with'] / med['without']:.3f} (median)"
    return best, [*lines, "", ratio]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=float, default=1e7)
    ap.add_argument("--workers", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=2)
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    import distributed

    from crowdflow.executors import elsewhere
    from crowdflow.skills.options import SkillsOptions
    from tasks.runners import DaskMap

    n, w, m = int(float(args.labels)), args.workers, args.classes
    load0 = os.getloadavg()[0]
    started = datetime.now(UTC)
    buckets = _buckets(n, w, m, 8, 0)
    per_worker = np.bincount(np.concatenate([b.worker_idx() for b in buckets]), minlength=w).astype(np.float64)
    n_tasks, n_labels = sum(b.n_tasks for b in buckets), sum(b.n_labels for b in buckets)
    options = SkillsOptions(method="ds", ds_max_iter=args.passes, ds_tol=1e-15)
    arms: dict[str, list[float]] = {"without": [], "with": []}
    traces: dict[str, list[list[float]]] = {"without": [], "with": []}
    relayed = (0, 0)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        executor = DaskMap(client)
        held = executor.balance(client.scatter(buckets), [b.n_labels for b in buckets])
        del buckets
        arg = (w, m, n_tasks, per_worker, options)
        elsewhere(executor, _em_job, held, arg)  # warm-up: the workers compile the kernels
        for _ in range(args.rounds):
            for arm in ("without", "with", "with", "without"):
                sink = Sink() if arm == "with" else None
                timing, trace = elsewhere(executor, _em_job, held, arg, sink)
                arms[arm].append(timing["em_s"] / timing["em_passes"])
                traces[arm].append(trace)
                if sink is not None:
                    relayed = (sink.fractions, sink.lines)
        executor.release(held)
        got: list[Any] = []
        client.subscribe_topic("em-progress-cost", got.append)
        cost = min(client.submit(_report_cost, "em-progress-cost", 10_000, pure=False).result() for _ in range(3))
        client.unsubscribe_topic("em-progress-cost")
    load1 = os.getloadavg()[0]
    same = all(t == traces["without"][0] for t in traces["without"] + traces["with"])
    best, table = arms_table(arms, "pass", "run", 4)
    cmd = "python -m benchmarks.em_progress " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        "# The partitioned EM's progress reports, seconds a pass (issue #36)",
        "",
        f"{started:%Y-%m-%d %H:%M} UTC, `{cmd.strip()}` (module docstring for the method): {n_labels:,} labels, "
        f"{n_tasks:,} tasks, {w:,} workers, {m} classes, full Dawid–Skene, 8 buckets on a two-process Dask "
        f"LocalCluster; the EM as one task on a worker, {args.passes} evaluations a run, "
        f"{2 * args.rounds} runs an arm (without, with, with, without × {args.rounds}); load average {load0:.1f} "
        f"before, {load1:.1f} after (2 cores, shared).",
        "",
        *table[:-1],
        f"{table[-1]}; "
        f"relayed a run: {relayed[0]} fractions and {relayed[1]} pass lines; log-likelihood traces of every run "
        f"{'identical' if same else 'DIFFERENT'}.",
        "",
        f"The reports' own cost on the worker (a task sending a pass's fraction and line 10,000 times, best of 3): "
        f"{cost * 1e6:.1f} µs a pass, {cost / best['without']:.1e} of the best pass without.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        (Path(__file__).resolve().parent / "results" / "em_progress.md").write_text(text)
    return 0 if same else 1


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - t0:.0f} s)")
    raise SystemExit(code)
