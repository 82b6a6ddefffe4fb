"""Incremental Dawid–Skene (crowdflow.skills.incremental_em) vs a full DS refit vs DS on the day alone (issue #38).

Run: ``python -m benchmarks.incremental --job ds`` (or ``python -m benchmarks.incremental_ds``); ``--history``,
``--day``, ``--days``, ``--tol-prob``. Library level, one process: the labels are generated in memory, the history is
held as codes (:class:`crowdflow.skills.incremental_em.CodedHistory`), nothing is read from disk. Writes the section
between ``<!-- ds:begin -->`` and ``<!-- ds:end -->`` of ``benchmarks/results/incremental.md``.

Data: binary one-coin crowd, 2,000 workers with accuracy ~ U[0.6, 0.95], 5 distinct workers per task, string ids;
every day's tasks are new. Per day, back to back:

- **incremental**: ``ds_update(state, day, history)`` (default rules: tol 1e-9, tol_prob 1e-4, suspects → full passes
  from the majority start);
- **full refit**: ``dawid_skene(encode_labels(all rows so far), tol=1e-9)`` (the same fixed-point precision), and the
  pipeline's default tol 1e-6 for reference;
- **day alone**: ``dawid_skene(encode_labels(day), tol=1e-9)``.

Agreement: the incremental posteriors against the tol-1e-9 refit's (label share that differs, largest probability
difference on tasks the run did not list). Wall and CPU seconds per run; the load average at each day.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from crowdflow.labels import encode_labels
from crowdflow.skills.dawid_skene import dawid_skene
from crowdflow.skills.incremental_em import CodedHistory, DSState, ds_update

ROOT = Path(__file__).resolve().parents[1]
N_WORKERS = 2000
PER_TASK = 5
STEPS = np.array([s for s in range(1, 400, 2) if s % 5])  # odd, not a multiple of 5: coprime with 2,000
T = TypeVar("T")


def labels(first_task: int, rows: int, seed: int, acc: np.ndarray) -> pd.DataFrame:
    """``rows`` labels on new tasks ``first_task``…: each task's 5 workers are base + k·step (mod 2,000), distinct."""
    rng = np.random.default_rng(seed)
    n = rows // PER_TASK
    base = rng.integers(0, N_WORKERS, n)
    step = rng.choice(STEPS, n)
    w = ((base[:, None] + np.arange(PER_TASK)[None, :] * step[:, None]) % N_WORKERS).ravel()
    truth = rng.integers(0, 2, n)
    t = np.repeat(np.arange(n), PER_TASK)
    right = rng.random(w.size) < acc[w]
    y = np.where(right, truth[t], 1 - truth[t])
    return pd.DataFrame(
        {
            "task": pd.Series(np.arange(first_task, first_task + n).astype(str))[t].to_numpy(),
            "worker": np.char.add("w", w.astype(str)).astype(object),
            "label": y.astype(str).astype(object),
        }
    )


def timed(fn: Callable[[], T]) -> tuple[float, float, T]:
    u0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    out = fn()
    u1 = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter() - t0, (u1.ru_utime + u1.ru_stime) - (u0.ru_utime + u0.ru_stime), out


def refit(rows: pd.DataFrame, tol: float) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lm = encode_labels(rows, ["0", "1"])
        return lm, dawid_skene(lm, tol=tol, max_iter=20_000, tie_break="smallest")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--history", type=int, default=10_000_000)
    ap.add_argument("--day", type=int, nargs="+", default=[1_000_000, 100_000])
    ap.add_argument("--days", type=int, default=2, help="days per day size")
    ap.add_argument("--tol-prob", type=float, default=1e-4)
    ap.add_argument("--max-rounds", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "incremental.md"))
    args = ap.parse_args(argv)
    acc = np.random.default_rng(0).uniform(0.6, 0.95, N_WORKERS)
    hist_rows = labels(0, args.history, 1, acc)
    next_task = args.history // PER_TASK
    g, gc, first = timed(lambda: ds_update(DSState.empty(["0", "1"]), hist_rows))
    history = CodedHistory([first.codes])
    state = first.state
    seen = [hist_rows]
    out: list[dict[str, Any]] = []
    day_no = 0
    for size in args.day:
        for _ in range(args.days):
            day_no += 1
            day = labels(next_task, size, 100 + day_no, acc)
            next_task += size // PER_TASK
            load = os.getloadavg()[0]
            w_inc, c_inc, up = timed(
                lambda: ds_update(state, day, history, tol_prob=args.tol_prob, max_rounds=args.max_rounds)
            )
            history.extend(up.codes)
            state = up.state
            seen.append(day)
            every = pd.concat(seen, ignore_index=True)
            w_full, c_full, (lm, ref) = timed(lambda: refit(every, 1e-9))
            w_def, c_def, _ = timed(lambda: refit(every, 1e-6))
            w_day, c_day, _ = timed(lambda: refit(day, 1e-9))
            p = pd.DataFrame(ref.posteriors, index=lm.tasks).loc[state.tasks.astype(str)].to_numpy()
            unlisted = ~np.isin(state.tasks, up.listed["task"].to_numpy())
            diff = np.abs(p - state.posteriors).max(axis=1)
            out.append(
                {
                    "day": day_no,
                    "rows": size,
                    "total": len(every),
                    "load": load,
                    "mode": up.mode,
                    "passes": up.passes,
                    "ref_passes": ref.iterations,
                    "inc": (w_inc, c_inc),
                    "full": (w_full, c_full),
                    "full6": (w_def, c_def),
                    "alone": (w_day, c_day),
                    "labels_differ": float((p.argmax(axis=1) != state.posteriors.argmax(axis=1)).mean()),
                    "max_diff": float(diff[unlisted].max(initial=0.0)),
                    "listed": len(up.listed),
                }
            )
            print(out[-1], flush=True)
    write(args, out, (g, gc), first.passes)
    return 0


def write(args: argparse.Namespace, rows: list[dict[str, Any]], seed: tuple[float, float], seed_passes: int) -> None:
    cmd = (
        f"python -m benchmarks.incremental --job ds --history {args.history} --day {' '.join(map(str, args.day))} "
        f"--days {args.days}"
        + (f" --tol-prob {args.tol_prob:g}" if args.tol_prob != 1e-4 else "")
        + (f" --max-rounds {args.max_rounds}" if args.max_rounds != 1 else "")
    )
    tag = f"ds tol_prob {args.tol_prob:g}"
    lines = [
        f"<!-- {tag}:begin -->",
        f"## Dawid–Skene: incremental EM vs a full refit vs the day alone (library level, tol_prob {args.tol_prob:g})",
        "",
        f"`{cmd}` on {platform.machine()}, {os.cpu_count()} cores (shared), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"Binary one-coin crowd, {N_WORKERS:,} workers, {PER_TASK} labels a task, every day's tasks new; history "
        f"{args.history:,} labels (its first fit, from an empty state: {seed[0]:.1f} s wall, {seed_passes} passes). "
        "Generated in memory, history held as codes (no reads). Incremental: `ds_update` with the default rules "
        f"(tol 1e-9, tol_prob {args.tol_prob:g}, max_rounds {args.max_rounds}; full passes from the majority start). "
        "Full refit: "
        "`dawid_skene` on all rows so far at tol 1e-9 (the same fixed-point precision; the pipeline's default tol 1e-6 "
        "in its own column). Day alone: `dawid_skene` on the day at tol 1e-9. Each cell: wall s / CPU s. Agreement "
        "against the tol-1e-9 refit.",
        "",
        "| day | rows | total | load | mode | passes (inc / refit) | incremental | full refit 1e-9 | full refit 1e-6 "
        "| day alone | inc / full | inc / alone | labels differ | max prob diff (unlisted) | listed |",
        "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:

        def cell(k: str, r: dict[str, Any] = r) -> str:
            return f"{r[k][0]:.1f} / {r[k][1]:.1f}"

        lines.append(
            f"| {r['day']} | {r['rows']:,} | {r['total']:,} | {r['load']:.1f} | {r['mode']} | {r['passes']} / "
            f"{r['ref_passes']} | {cell('inc')} | {cell('full')} | {cell('full6')} | {cell('alone')} | "
            f"{r['inc'][1] / r['full'][1]:.2f} | {r['inc'][1] / r['alone'][1]:.1f} | {r['labels_differ']:.2e} | "
            f"{r['max_diff']:.1e} | {r['listed']} |"
        )
    lines += [
        "",
        "Ratios are of CPU seconds (the host is shared; wall times vary with the load).",
        f"<!-- {tag}:end -->",
    ]
    path = Path(args.out)
    text = path.read_text() if path.exists() else ""
    if f"<!-- {tag}:begin -->" in text:
        head, rest = text.split(f"<!-- {tag}:begin -->", 1)
        tail = rest.split(f"<!-- {tag}:end -->", 1)[1]
        text = head + "\n".join(lines) + tail
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    path.write_text(text)


if __name__ == "__main__":
    raise SystemExit(main())
