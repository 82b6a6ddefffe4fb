"""Daily folded runs against a full refit and against a run over the day alone (issue #38).

Run: ``python -m benchmarks.incremental --job skills`` (and ``--job ranking``); ``--history``, ``--day``,
``--days``; writes ``benchmarks/results/incremental_<job>.md``. ``--job ds`` runs :mod:`benchmarks.incremental_ds`
(Dawid–Skene's incremental EM, library level; its section of ``benchmarks/results/incremental.md``). Every run is a fresh child process (so its peak RSS
is its own ``VmHWM``); wall time is measured inside the child from before its first read to after its output is written
(the imports, ~1-2 s of Python start-up common to all three, are not counted).

Data (date-partitioned Parquet folder, one file a day, each day's tasks or comparisons new that day):

- skills: one-coin binary labels (:mod:`crowdflow.synth.skills`), 2,000 workers, 5 labels per task, string ids;
- ranking: winner-form comparisons (±1 outcomes) over 1,000 items with Bradley–Terry-like noise, 50 annotators.

Three runs per day, over the same folder:

- **folded** (``crowdflow.skills.increments.majority_run`` / ``crowdflow.ranking.increments.hodgerank_run``):
  hashes every file, reads and sums only the new one, folds its sums into the store's fold, votes / fits on the
  fold, writes the consensus (every task) or the ranking (every item);
- **full refit**: the library over a full read of the folder (``crowdflow.storage.io.read_table`` as every run
  reads, then ``majority_vote(encode_labels(...))`` / ``fit_ranking(..., outliers="none")``), writing the same
  table;
- **day alone**: the same as the full refit on a folder holding only the new day's file.

Every day the folded output is compared with the full refit's: skills exactly (``assert_frame_equal``,
``check_exact=True``); ranking exactly as well (the outcomes are integers, so the fold is exact). The benchmark
stops on a difference.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
N_WORKERS = 2000
PER_TASK = 5
N_ITEMS = 1000
N_ANNOTATORS = 50

_CHILD = """
import json, resource, sys, time
job, mode, folder, store, out = sys.argv[1:6]
from pathlib import Path
if job == "skills":
    from crowdflow.contracts.tables import INPUTS
    from crowdflow.labels import encode_labels
    from crowdflow.skills import majority_vote
    from crowdflow.skills.increments import majority_run
    from crowdflow.storage.io import read_table
else:
    from crowdflow.contracts.tables import INPUTS
    from crowdflow.ranking import fit_ranking
    from crowdflow.ranking.increments import hodgerank_run
    from crowdflow.storage.io import read_table
info = {}
_u = resource.getrusage(resource.RUSAGE_SELF)
cpu0 = _u.ru_utime + _u.ru_stime
t0 = time.perf_counter()
if mode == "folded":
    if job == "skills":
        run = majority_run(store, folder, out=out)
    else:
        run = hodgerank_run(store, folder, out=out)
    info = {"read": len(run.input["files_read"]), "reused": len(run.input["files_reused"]),
            "how": run.input["fold"]["how"]}
else:
    if job == "skills":
        df = read_table(folder, INPUTS["labels"]).df
        table = majority_vote(encode_labels(df)).consensus
    else:
        df = read_table(folder, INPUTS["comparisons"]).df
        table = fit_ranking(df, outliers="none", diagnostics=False).tables["ranking"]
    table.to_parquet(out, index=False)
wall = time.perf_counter() - t0
use = resource.getrusage(resource.RUSAGE_SELF)
cpu = use.ru_utime + use.ru_stime - cpu0
# VmHWM: the peak RSS of this process's own memory (ru_maxrss would also count the parent's, copied at the fork)
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print(json.dumps({"wall": wall, "cpu": cpu, "rss_gb": hwm / 1e6, **info}))
"""


def day_labels(day: int, rows: int, skills: np.ndarray) -> pd.DataFrame:
    """``rows`` labels on ``rows / 5`` tasks new on ``day`` (task ids carry the day)."""
    from crowdflow.synth.skills import one_coin_labels, random_assignment

    n_tasks = rows // PER_TASK
    w, t = random_assignment(N_WORKERS, n_tasks, PER_TASK, seed=day)
    lab = one_coin_labels(skills, w, t, n_classes=2, seed=day).labels
    lab["task"] = f"d{day:04d}-" + lab["task"].astype(str)
    return lab


def day_comparisons(day: int, rows: int, theta: np.ndarray) -> pd.DataFrame:
    """``rows`` winner-form comparisons (``item_a``, ``item_b``, ``winner``) drawn on ``day``."""
    rng = np.random.default_rng(1000 + day)
    i = rng.integers(0, N_ITEMS, rows)
    j = (i + 1 + rng.integers(0, N_ITEMS - 1, rows)) % N_ITEMS
    p = 1.0 / (1.0 + np.exp(-(theta[i] - theta[j])))
    a_wins = rng.random(rows) < p
    ids = np.asarray([f"item{k:05d}" for k in range(N_ITEMS)], dtype=object)
    return pd.DataFrame(
        {
            "annotator": np.asarray([f"a{k}" for k in range(N_ANNOTATORS)], dtype=object)[
                rng.integers(0, N_ANNOTATORS, rows)
            ],
            "item_a": ids[i],
            "item_b": ids[j],
            "outcome": np.where(a_wins, 1, -1).astype(np.int64),
        }
    )


def write_day(folder: Path, day: int, df: pd.DataFrame) -> None:
    d = folder / f"day={day:04d}"
    d.mkdir(parents=True, exist_ok=True)
    df.to_parquet(d / "part-0.parquet", index=False)


def child(job: str, mode: str, folder: Path, store: Path, out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, job, mode, str(folder), str(store), str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} run failed:\n{proc.stderr[-3000:]}")
    rec: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return rec


def main(argv: list[str] | None = None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--job", default="skills")
    known, rest = pre.parse_known_args(argv)
    if known.job == "ds":  # Dawid-Skene's incremental EM: library level, its own options (benchmarks/incremental_ds.py)
        from benchmarks.incremental_ds import main as ds_main

        return ds_main(rest)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--job", choices=["skills", "ranking", "ds"], default="skills")
    ap.add_argument("--history", type=int, default=10_000_000, help="rows before the first day")
    ap.add_argument("--day", type=int, default=1_000_000, help="rows per daily file")
    ap.add_argument("--days", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out_md = Path(args.out or ROOT / "benchmarks" / "results" / f"incremental_{args.job}.md")
    from crowdflow.synth.skills import beta_skills

    skills = beta_skills(4.0, 1.5, N_WORKERS, seed=0)
    theta = np.random.default_rng(0).normal(size=N_ITEMS)

    def make(day: int) -> pd.DataFrame:
        return day_labels(day, args.day, skills) if args.job == "skills" else day_comparisons(day, args.day, theta)

    work = Path(tempfile.mkdtemp(prefix="crowdflow-bench-incr-"))
    loads: list[float] = []
    try:
        data, alone, store = work / "data", work / "alone", work / "store"
        n_hist = max(1, args.history // args.day)
        t0 = time.perf_counter()
        for d in range(n_hist):
            write_day(data, d, make(d))
        gen = time.perf_counter() - t0
        seed = child(args.job, "folded", data, store, work / "seed.parquet")  # the first run: sums every file
        rows: list[dict[str, Any]] = []
        for k in range(args.days):
            day = n_hist + k
            df = make(day)
            write_day(data, day, df)
            if alone.exists():
                shutil.rmtree(alone)
            write_day(alone, day, df)
            loads.append(os.getloadavg()[0])
            inc = child(args.job, "folded", data, store, work / "inc.parquet")
            full = child(args.job, "full", data, store, work / "full.parquet")
            one = child(args.job, "full", alone, store, work / "alone.parquet")
            a, b = pd.read_parquet(work / "inc.parquet"), pd.read_parquet(work / "full.parquet")
            pd.testing.assert_frame_equal(a, b, check_exact=True)
            rows.append({"day": k + 1, "rows": (n_hist + k + 1) * args.day, "inc": inc, "full": full, "alone": one,
                         "tables": len(b)})  # fmt: skip
            print(
                f"day {k + 1}: folded {inc['wall']:.2f} s ({inc['how']}), full {full['wall']:.2f} s, "
                f"day alone {one['wall']:.2f} s (CPU {inc['cpu']:.2f} / {full['cpu']:.2f} / {one['cpu']:.2f}); outputs equal ({len(b):,} rows); load {loads[-1]:.1f}",
                flush=True,
            )
        write_report(args, rows, gen, seed, loads, out_md)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def write_report(
    args: argparse.Namespace, rows: list[dict[str, Any]], gen: float, seed: dict[str, Any], loads: list[float],
    path: Path,
) -> None:  # fmt: skip
    what = "labels" if args.job == "skills" else "comparisons"
    out_name = "consensus (every task)" if args.job == "skills" else "ranking (every item)"
    lines = [
        f"# Folded daily {args.job} runs: daily run vs full refit vs the day alone",
        "",
        f"`python -m benchmarks.incremental --job {args.job} --history {args.history} --day {args.day} "
        f"--days {args.days}` on {platform.machine()}, {os.cpu_count()} cores (shared with other jobs), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average (1 min) during the days "
        f"{min(loads):.1f}-{max(loads):.1f}. Smaller than issue #38's target (10^8 history + 30 daily increments "
        f"of 10^6): {args.history:,} {what} of history in daily files of {args.day:,}, then {args.days} daily "
        f"files of {args.day:,}. Generating the history took {gen:.0f} s; the first folded run over it (which sums "
        f"every file) {seed['wall']:.1f} s, peak RSS {seed['rss_gb']:.2f} GB.",
        "",
        "Each run is a fresh process (peak RSS is its `VmHWM`); wall time from before its first read to after its "
        f"output ({out_name}) is written, imports excluded. Every day the folded run's output **equals the full "
        "refit's exactly** (`assert_frame_equal(check_exact=True)`; the benchmark stops on a difference).",
        "",
        "Wall time on this shared host swings with the other jobs' load, so each run's CPU time (user + system, "
        "its own process) is given beside it; the ratios are given for both.",
        "",
        "| day | rows in all | output rows | folded wall / CPU (s) | full refit wall / CPU (s) | "
        "day alone wall / CPU (s) | folded / full (wall, CPU) | folded / alone (wall, CPU) | "
        "peak RSS folded / full / alone (GB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        i, f, a = r["inc"], r["full"], r["alone"]
        lines.append(
            f"| {r['day']} | {r['rows']:,} | {r['tables']:,} | {i['wall']:.2f} / {i['cpu']:.2f} | "
            f"{f['wall']:.2f} / {f['cpu']:.2f} | {a['wall']:.2f} / {a['cpu']:.2f} | "
            f"{i['wall'] / f['wall']:.2f}, {i['cpu'] / f['cpu']:.2f} | {i['wall'] / a['wall']:.2f}, "
            f"{i['cpu'] / a['cpu']:.2f} | {i['rss_gb']:.2f} / {f['rss_gb']:.2f} / {a['rss_gb']:.2f} |"
        )

    def med(key: str, what: str) -> float:
        return float(np.median([r[key][what] for r in rows]))

    def ratio(what: str) -> tuple[float, float]:
        x = [r["inc"][what] / r["alone"][what] for r in rows]
        return float(np.median(x)), float(max(x))

    lines += [
        "",
        f"Medians (wall / CPU): folded {med('inc', 'wall'):.2f} / {med('inc', 'cpu'):.2f} s, full refit "
        f"{med('full', 'wall'):.2f} / {med('full', 'cpu'):.2f} s, day alone {med('alone', 'wall'):.2f} / "
        f"{med('alone', 'cpu'):.2f} s. Folded / day alone: wall median {ratio('wall')[0]:.2f} (worst "
        f"{ratio('wall')[1]:.2f}), CPU median {ratio('cpu')[0]:.2f} (worst {ratio('cpu')[1]:.2f}); target ≤ 3.",
        "",
    ]
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
