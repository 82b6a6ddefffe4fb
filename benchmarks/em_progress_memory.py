"""What the in-memory Dawid–Skene EM's progress reports cost a fit: the same fit with and without a callback.

Run: ``python -m benchmarks.em_progress_memory [--tasks 200000] [--per-task 5] [--workers 2000] [--classes 3]
[--passes 30] [--rounds 5] [--no-write]``. One crowd of the Dawid–Skene family (:func:`crowdflow.synth.skills.
crowd_labels`: confusion workers, 10 % spammers, 5 % adversaries, Zipf activity; 10⁶ labels by default) encoded
once; :func:`crowdflow.skills.dawid_skene` (full model, SQUAREM, the fused in-memory passes) with a tolerance no
pass meets, so every run makes ``--passes`` evaluations. Each round runs both arms, in alternating order (without
first in even rounds): *without* ``progress=None``; *with* a callback with ``note`` (each fraction and pass line
counted, as :class:`tasks.progress.FitProgress` receives them before its throttle). Reported: each arm's wall
seconds a fit (best and median over ``--rounds``), their ratio, the reports a fit, and whether the two arms'
posteriors and traces are the same bits. Load average before and after; writes
``benchmarks/results/em_progress_memory.md`` unless ``--no-write``. Run it under ``flock /tmp/cf-big.lock``. The
reports' own cost is timed apart too (:func:`_report_cost`): the arms' difference is within the noise of a shared
host.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.em_progress import Sink, arms_table


def _report_cost(n: int) -> float:
    """Seconds a pass's reports take the EM's thread: the tracker's update (the fraction, every pass: ``min_delta``
    0) and the pass line (:class:`crowdflow.progress.PassLines`, formatted, logged at DEBUG, given to ``note``),
    ``n`` times, best of 3."""
    import logging

    from crowdflow.progress import IterationProgress, PassLines

    best = float("inf")
    for _ in range(3):
        sink = Sink()
        tracker = IterationProgress(sink, n, 1e-6, min_delta=0.0)
        lines = PassLines(sink, n, logging.getLogger("crowdflow.skills.dawid_skene"), logging.DEBUG)
        t0 = time.perf_counter()
        for k in range(1, n + 1):
            lines(-6931471.805599 + k)
            tracker.update(k, 1.0 / k)
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200_000)
    ap.add_argument("--per-task", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    from crowdflow.skills import prepare_labels
    from crowdflow.skills.dawid_skene import dawid_skene
    from crowdflow.synth import skills as synth

    cfg = synth.CrowdConfig(
        args.classes, args.tasks, args.per_task, args.workers, "confusion", 0.1, 0.05, "uniform", "zipf", 0
    )
    data = synth.crowd_labels(cfg)
    lm, _ = prepare_labels(data.labels, data.classes, "error")
    del data
    load0 = os.getloadavg()[0]
    started = datetime.now(UTC)
    arms: dict[str, list[float]] = {"without": [], "with": []}
    results: dict[str, list[Any]] = {"without": [], "with": []}
    reports = (0, 0)
    warnings.simplefilter("ignore", RuntimeWarning)  # the cap is the point: every run makes --passes evaluations

    def fit(progress: Any) -> tuple[float, Any]:
        t0 = time.perf_counter()
        r = dawid_skene(lm, tol=1e-15, max_iter=args.passes, tie_break="smallest", progress=progress)
        return time.perf_counter() - t0, r

    fit(None)  # warm-up: the kernels compile
    for k in range(args.rounds):
        for arm in ("without", "with") if k % 2 == 0 else ("with", "without"):
            sink = Sink() if arm == "with" else None
            seconds, r = fit(sink)
            arms[arm].append(seconds)
            results[arm].append((r.posteriors, r.log_likelihood, r.iterations))
            if sink is not None:
                reports = (sink.fractions, sink.lines)
    cost = _report_cost(10_000)
    load1 = os.getloadavg()[0]
    ref = results["without"][0]
    same = all(
        np.array_equal(p, ref[0]) and np.array_equal(t, ref[1]) and i == ref[2]
        for p, t, i in results["without"] + results["with"]
    )
    best, table = arms_table(arms, "fit", "fit", 3)
    cmd = "python -m benchmarks.em_progress_memory " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        "# The in-memory Dawid–Skene EM's progress reports, seconds a fit (issue #36)",
        "",
        f"{started:%Y-%m-%d %H:%M} UTC, `{cmd.strip()}` (module docstring for the method): {lm.n_labels:,} labels, "
        f"{lm.n_tasks:,} tasks, {lm.n_workers:,} workers, {lm.n_classes} classes, full Dawid–Skene in memory "
        f"(SQUAREM, fused passes), {ref[2]} evaluations a fit, {args.rounds} fits an arm in alternating order; load "
        f"average {load0:.1f} before, {load1:.1f} after (2 cores, shared).",
        "",
        *table[:-1],
        f"{table[-1]}; "
        f"reports a fit: {reports[0]} fractions and {reports[1]} pass lines; posteriors and log-likelihood traces "
        f"of every fit {'identical' if same else 'DIFFERENT'}.",
        "",
        f"The reports' own cost (a pass's fraction and line 10,000 times, best of 3): {cost * 1e6:.1f} µs a pass, "
        f"{cost * ref[2] / best['without']:.1e} of the best fit without.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        (Path(__file__).resolve().parent / "results" / "em_progress_memory.md").write_text(text)
    return 0 if same else 1


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - t0:.0f} s)")
    raise SystemExit(code)
