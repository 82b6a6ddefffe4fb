"""Daily incremental skills runs against a full refit and against a run over the day alone (issue #38).

Run: ``python -m benchmarks.incremental`` (defaults: a history of 10^7 labels in 100 daily Parquet files of 10^5,
then 10 daily increments of 10^5, method mv; ``--history``, ``--day``, ``--days``, ``--method``; writes
``benchmarks/results/incremental.md``). Smaller than the issue's 10^8 + 30 × 10^6, so that it runs in minutes on
this 2-core machine.

Data: one-coin binary labels (:mod:`crowdflow.synth.skills`), 2,000 workers, 5 labels per task, each day's tasks
new that day. Each day a new file lands in the date-partitioned folder and three pipelines run the same spec
in this process (``flows.pipeline.run_spec``, embedded Prefect API started by an untimed warm-up; fit cache off;
report off, identical in all three):

- **incremental**: ``skills.incremental: true`` over the folder, against its increment store (seeded by one
  untimed incremental run over the history);
- **full refit**: the same folder, no store (what every scheduled run costs today);
- **day alone**: a folder holding only the new day's file.

Every day the incremental run's ``skills`` and ``consensus`` tables are compared with the full refit's, exactly
(``pandas.testing.assert_frame_equal(check_exact=True)``). Wall times are per run; ``steps`` are the manifest's
timings. Peak RSS is not measured (the three runs share one process).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

import argparse  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "incremental.md"
N_WORKERS = 2000
PER_TASK = 5


def day_labels(day: int, rows: int, skills: np.ndarray) -> pd.DataFrame:
    """``rows`` labels on ``rows / 5`` tasks new on ``day`` (task ids carry the day)."""
    from crowdflow.synth.skills import one_coin_labels, random_assignment

    n_tasks = rows // PER_TASK
    w, t = random_assignment(N_WORKERS, n_tasks, PER_TASK, seed=day)
    lab = one_coin_labels(skills, w, t, n_classes=2, seed=day).labels
    lab["task"] = f"d{day:04d}-" + lab["task"].astype(str)
    return lab


def write_day(folder: Path, day: int, df: pd.DataFrame) -> None:
    d = folder / f"day={day:04d}"
    d.mkdir(parents=True, exist_ok=True)
    df.to_parquet(d / "part-0.parquet", index=False)


def spec(folder: Path, out: Path, name: str, method: str, incremental: bool) -> Any:
    from crowdflow.spec import parse_spec

    return parse_spec(
        {
            "name": name,
            "job": "skills",
            "labels": {"path": str(folder)},
            "skills": {"method": method, "incremental": incremental},
            "checks": {"identifiability": "warn", "isolated_workers": "warn"},
            "output": {"dir": str(out), "report": False},
            "cache": {"enabled": False},
        }
    )


def timed(s: Any) -> tuple[float, Any]:
    from crowdflow.storage.runs import read_run
    from flows.pipeline import run_spec

    t0 = time.perf_counter()
    summary = run_spec(s)
    wall = time.perf_counter() - t0
    return wall, read_run(summary["run_dir"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--history", type=int, default=10_000_000, help="labels before the first day")
    ap.add_argument("--day", type=int, default=100_000, help="labels per daily file")
    ap.add_argument("--days", type=int, default=10)
    ap.add_argument("--method", default="mv")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    from crowdflow.synth.skills import beta_skills

    skills = beta_skills(4.0, 1.5, N_WORKERS, seed=0)
    work = Path(tempfile.mkdtemp(prefix="crowdflow-bench-incr-"))
    try:
        data, alone, out = work / "data", work / "alone", work / "out"
        n_hist = max(1, args.history // args.day)
        t0 = time.perf_counter()
        for d in range(n_hist):
            write_day(data, d, day_labels(d, args.day, skills))
        gen = time.perf_counter() - t0
        write_day(work / "warm", 0, day_labels(0, 10_000, skills))
        timed(spec(work / "warm", out, "warmup", args.method, False))  # starts the embedded API
        seed_wall, _ = timed(spec(data, out, "incremental", args.method, True))
        rows: list[dict[str, Any]] = []
        for k in range(args.days):
            day = n_hist + k
            df = day_labels(day, args.day, skills)
            write_day(data, day, df)
            if alone.exists():
                shutil.rmtree(alone)
            write_day(alone, day, df)
            inc_wall, inc = timed(spec(data, out, "incremental", args.method, True))
            full_wall, full = timed(spec(data, out, f"full{k}", args.method, False))
            day_wall, _ = timed(spec(alone, out, f"alone{k}", args.method, False))
            for name in ("skills", "consensus"):
                pd.testing.assert_frame_equal(inc[name], full[name], check_exact=True)
            rec = inc.manifest["incremental"]["labels"]
            rows.append(
                {
                    "day": k + 1,
                    "rows": rec["rows"],
                    "read": len(rec["files_read"]),
                    "reused": len(rec["files_reused"]),
                    "inc": inc_wall,
                    "full": full_wall,
                    "alone": day_wall,
                    "inc_steps": inc.manifest["timings"],
                    "full_steps": full.manifest["timings"],
                }
            )
            print(
                f"day {k + 1}: {rec['rows']:,} rows; incremental {inc_wall:.1f} s, full {full_wall:.1f} s, "
                f"day alone {day_wall:.1f} s; tables equal",
                flush=True,
            )
            shutil.rmtree(out / f"full{k}")
        write_report(args, rows, gen, seed_wall, Path(args.out))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def write_report(args: argparse.Namespace, rows: list[dict[str, Any]], gen: float, seed: float, path: Path) -> None:
    def step(r: dict[str, Any], key: str, name: str) -> str:
        return f"{r[key].get(name, 0):.1f}"

    lines = [
        "# Incremental skills runs: daily run vs full refit vs the day alone",
        "",
        f"`python -m benchmarks.incremental --history {args.history} --day {args.day} --days {args.days} "
        f"--method {args.method}` on {platform.machine()}, {os.cpu_count()} cores (shared), "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}. Smaller than issue #38's target (10^8 history + 30 daily "
        f"increments of 10^6): {args.history:,} labels of history in daily files of {args.day:,}, then "
        f"{args.days} daily files of {args.day:,}. Generating the history took {gen:.0f} s; the first incremental "
        f"run over it (which seeds the store) {seed:.1f} s.",
        "",
        "Wall times vary with the machine's load (a shared 2-core machine); the three runs of a day run back to back.",
        "",
        "Every day: the incremental run's `skills` and `consensus` tables **equal the full refit's exactly** "
        "(checked with `assert_frame_equal(check_exact=True)`; the benchmark stops on a difference).",
        "",
        "| day | rows | files read / reused | incremental (s) | full refit (s) | day alone (s) | inc / full | "
        "inc / alone | inc ingest+validate / fit (s) | full ingest+validate / fit (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['day']} | {r['rows']:,} | {r['read']} / {r['reused']} | {r['inc']:.1f} | {r['full']:.1f} | "
            f"{r['alone']:.1f} | {r['inc'] / r['full']:.2f} | {r['inc'] / r['alone']:.1f} | "
            f"{step(r, 'inc_steps', 'ingest_validate')} / {step(r, 'inc_steps', 'fit')} | "
            f"{step(r, 'full_steps', 'ingest_validate')} / {step(r, 'full_steps', 'fit')} |"
        )
    med = {k: float(np.median([r[k] for r in rows])) for k in ("inc", "full", "alone")}
    lines += [
        "",
        f"Medians: incremental {med['inc']:.1f} s, full refit {med['full']:.1f} s, day alone {med['alone']:.1f} s "
        f"(incremental / full {med['inc'] / med['full']:.2f}, incremental / day alone {med['inc'] / med['alone']:.1f}).",
        "",
        "What the incremental run saves is reading and validating the history: it hashes every file (to find the "
        "new and changed ones), reads the stored rows of the others from the increment store, and reads and "
        "validates only the new file. It still refits on every row (the store holds each file's rows, so every "
        "method refits exactly), so its cost grows with the history; the issue's target of at most 3× a run over "
        "the day alone is **not met** at this scale (see the inc / alone column). Folding per-file sums "
        "(majority-vote counts, co-label moments, edge sums) instead of rows is the next step "
        "(docs/how-to/incremental.md, *Limits*).",
        "",
    ]
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
