"""The held Dawid–Skene pass's kernel cost a label, over classes and crowd workers (issue #36, docs/scale.md).

Run: ``python -m benchmarks.held_pass [--labels 1e7] [--classes 2,3,5] [--workers 2000,200000] [--repeats 5]
[--baseline /work/main] [--no-write]``. For every (classes, workers) of the family it times, best of the repeats after
a warm-up call, :func:`crowdflow.skills.held.em_sums_group` (one Dask worker's task of a pass: 8 held buckets in
process, the full model) and reports its wall ns a label, the GB/s of held bytes (the int32 codes and offsets) it
reaches, and its ratio to the peer measured in the same process on the same codes: numpy's sum of the int32 codes
(a streaming read of the held bytes, the bandwidth yardstick). With ``--baseline TREE`` the same measurement runs,
in turn, in child processes importing ``crowdflow`` from TREE (before) and from this checkout (after), twice each in
the order before, after, after, before, on the same generated codes (the same seed); each figure is the best of both
rounds. Writes the table to ``benchmarks/results/held_pass.md`` unless ``--no-write``; the load average is printed
before and after.

The crowd: tasks of 3–7 labels (mean 5, as ``benchmarks.scale_data``) by workers drawn with log-normal(0, 1.6)
activity, the given class uniform, the held codes numbered by activity as a run holds them
(:func:`crowdflow.skills.held.by_activity`), a random log π table (each row a random distribution).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

_HERE = Path(__file__).resolve()


def _buckets(n_labels: int, n_workers: int, m: int, n_buckets: int, seed: int) -> list[Any]:
    from crowdflow.skills.held import activity_order, by_activity, held_codes

    rng = np.random.default_rng(seed)
    act = rng.lognormal(0.0, 1.6, n_workers)
    act /= act.sum()
    k = rng.integers(3, 8, n_labels // 5 + 1)
    k = k[: np.searchsorted(np.cumsum(k), n_labels) + 1]
    task = np.repeat(np.arange(k.size), k)
    worker = rng.choice(n_workers, task.size, p=act)
    order = np.lexsort((worker, task))  # (task, worker) order; a repeated worker in a task is harmless here
    task, worker = task[order], worker[order]
    given = rng.integers(0, m, task.size)
    rank = activity_order(np.bincount(worker, minlength=n_workers))
    out = []
    for part in np.array_split(np.arange(k.size), n_buckets):
        lo, hi = np.searchsorted(task, [part[0], part[-1] + 1])
        codes = held_codes("bench", task[lo:hi] - part[0], worker[lo:hi], given[lo:hi], part.size, m, n_workers)
        out.append(by_activity(codes, rank))
    return out


def _best(fn: Any, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(n_labels: int, classes: list[int], workers: list[int], repeats: int) -> list[dict[str, Any]]:
    """One row per (M, W): the pass's and the peer's best wall seconds, labels and held bytes."""
    from crowdflow.skills.held import EMShared, em_sums_group, label_row_major

    rows = []
    for m in classes:
        for w in workers:
            group = _buckets(n_labels, w, m, 8, 0)
            rng = np.random.default_rng(1)
            log_pi = np.log(rng.dirichlet(np.ones(m), w * m).T)  # (M, W·M): log π_i[l, y] in column i·M + y
            shared = EMShared(label_row_major(log_pi), np.log(rng.dirichlet(np.ones(m))), False, w)
            codes = [c.code for c in group]
            t_pass = _best(lambda g=group, s=shared: em_sums_group(g, s), repeats)
            t_peer = _best(lambda cs=codes: [c.sum() for c in cs], repeats)
            rows.append(
                {
                    "classes": m,
                    "workers": w,
                    "labels": sum(c.n_labels for c in group),
                    "held_bytes": sum(c.nbytes for c in group),
                    "pass_s": t_pass,
                    "peer_s": t_peer,
                }
            )
    return rows


def _child(tree: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(_HERE), "--child", "--labels", str(args.labels), "--classes", args.classes]
    cmd += ["--workers", args.workers, "--repeats", str(args.repeats)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    rows: list[dict[str, Any]] = json.loads(out.strip().splitlines()[-1])
    return rows


def _best_of(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    best = [dict(r) for r in runs[0]]
    for run in runs[1:]:
        for b, r in zip(best, run, strict=True):
            b["pass_s"], b["peer_s"] = min(b["pass_s"], r["pass_s"]), min(b["peer_s"], r["peer_s"])
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=float, default=1e7)
    ap.add_argument("--classes", default="2,3,5")
    ap.add_argument("--workers", default="2000,200000")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline", type=Path, default=None, help="a checkout whose crowdflow is 'before'")
    ap.add_argument("--no-write", action="store_true", help="print, do not touch benchmarks/results")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    classes = [int(x) for x in args.classes.split(",")]
    workers = [int(x) for x in args.workers.split(",")]
    n = int(float(args.labels))
    if args.child:
        print(json.dumps(measure(n, classes, workers, args.repeats)))
        return 0
    load0 = os.getloadavg()[0]
    started = datetime.now(UTC)
    if args.baseline is None:
        after, before = measure(n, classes, workers, args.repeats), None
    else:
        here = _HERE.parents[1]
        runs = {"before": [], "after": []}  # type: dict[str, list[list[dict[str, Any]]]]
        for which in ("before", "after", "after", "before"):
            runs[which].append(_child(args.baseline if which == "before" else here, args))
        after, before = _best_of(runs["after"]), _best_of(runs["before"])
    load1 = os.getloadavg()[0]
    cmd = "python -m benchmarks.held_pass " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    lines = [
        "# The held Dawid–Skene pass's kernel, ns a label (issue #36)",
        "",
        f"{started:%Y-%m-%d %H:%M} UTC, `{cmd.strip()}` (module docstring for the method): one Dask worker's task "
        f"of a pass (`crowdflow.skills.held.em_sums_group`, 8 held buckets, full model) in process, wall time, best of "
        f"{args.repeats}{' and of two rounds' if before else ''}; load average {load0:.1f} before, {load1:.1f} after "
        "(2 cores, shared). *peer*: numpy's sum of the same int32 codes, same process (the streaming read of the held "
        "bytes); *GB/s*: held bytes (codes and offsets) over the pass's time.",
        "",
    ]
    if before is None:
        lines += [
            "| classes | workers | labels | ns a label | GB/s | peer ns a label | × peer |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in after:
            ns, peer = r["pass_s"] / r["labels"] * 1e9, r["peer_s"] / r["labels"] * 1e9
            gbs = r["held_bytes"] / r["pass_s"] / 1e9
            lines.append(
                f"| {r['classes']} | {r['workers']:,} | {r['labels']:,} | {ns:.2f} | {gbs:.2f} | {peer:.2f} | "
                f"{ns / peer:.1f} |"
            )
    else:
        lines += [
            f"*before*: `crowdflow` of `{args.baseline}`; *after*: this checkout's.",
            "",
            "| classes | workers | labels | before ns a label | after ns a label | after / before | after GB/s "
            "| peer ns a label | before × peer | after × peer |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for b, a in zip(before, after, strict=True):
            nb, na = b["pass_s"] / b["labels"] * 1e9, a["pass_s"] / a["labels"] * 1e9
            peer = min(a["peer_s"], b["peer_s"]) / a["labels"] * 1e9
            gbs = a["held_bytes"] / a["pass_s"] / 1e9
            lines.append(
                f"| {a['classes']} | {a['workers']:,} | {a['labels']:,} | {nb:.2f} | {na:.2f} | {na / nb:.2f} | "
                f"{gbs:.2f} | {peer:.2f} | {nb / peer:.1f} | {na / peer:.1f} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        (_HERE.parent / "results" / "held_pass.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
