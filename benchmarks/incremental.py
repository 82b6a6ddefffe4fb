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

``--job ranking-flow`` and ``--job skills-flow`` measure the pipeline instead (:func:`flow_main`, one code for both
jobs: :data:`FLOW_JOBS`): daily ``crowdflow run SPEC`` commands with ``<job>.incremental: true`` (a folded run:
ranking ``outliers: none``, skills ``method: mv``) against ``crowdflow run`` of a full refit and of the day alone,
each a fresh CLI process; each job's section of ``benchmarks/results/incremental.md`` is rewritten in place. The
skills-flow days are realistic: 95 % of a day's labels are on new tasks, 5 % are one more label on a task of the day
before (so the folded run re-reads those tasks' stored rows: :mod:`crowdflow.skills.folded`).

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
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.incremental_skills_ref import SkillsReference  # noqa: E402

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


#: skills-flow: share of a day's labels that are one more label on a task of the day before
LATE_SHARE = 0.05


def day_labels_late(day: int, rows: int, skills: np.ndarray) -> pd.DataFrame:
    """``rows`` labels: 95 % on new tasks (:func:`day_labels`), 5 % one more label each on distinct tasks of the day
    before, by a worker who has not labelled that task (its label uniform on the two classes)."""
    from crowdflow.synth.skills import random_assignment

    late = int(rows * LATE_SHARE) if day > 0 else 0
    fresh = day_labels(day, rows - late, skills)
    if not late:
        return fresh
    rng = np.random.default_rng(10_000 + day)
    prev_tasks = (rows - (int(rows * LATE_SHARE) if day - 1 > 0 else 0)) // PER_TASK  # the day before's new tasks
    w_prev, t_prev = random_assignment(N_WORKERS, prev_tasks, PER_TASK, seed=day - 1)
    on = np.sort(rng.choice(prev_tasks, size=min(late, prev_tasks), replace=False))
    workers = np.full((prev_tasks, PER_TASK), -1, dtype=np.int64)
    order = np.argsort(t_prev, kind="stable")
    workers[t_prev[order], np.tile(np.arange(PER_TASK), prev_tasks)] = w_prev[order]
    w = rng.integers(0, N_WORKERS, on.size)
    for _ in range(PER_TASK + 1):  # move past the task's own workers (5 of 2,000)
        clash = (workers[on] == w[:, None]).any(axis=1)
        if not clash.any():
            break
        w[clash] = (w[clash] + 1) % N_WORKERS
    extra = pd.DataFrame(
        {
            "task": [f"d{day - 1:04d}-t{k:07d}" for k in on],
            "worker": [f"w{k:04d}" for k in w],
            "label": rng.integers(0, 2, on.size).astype(str),
        }
    )
    return pd.concat([fresh, extra[fresh.columns]], ignore_index=True)


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
    ap.add_argument("--job", choices=["skills", "ranking", *FLOW_JOBS, "ds"], default="skills")
    ap.add_argument("--history", type=int, default=10_000_000, help="rows before the first day")
    ap.add_argument("--day", type=int, default=1_000_000, help="rows per daily file")
    ap.add_argument("--days", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--measure",
        type=int,
        default=None,
        help="flow jobs: the full refit on the first N days only (the daily run and the day alone run every day)",
    )
    ap.add_argument("--full-days", default=None, help="flow jobs: comma-separated days with a full refit")
    ap.add_argument("--full-every", type=int, default=None, help="flow jobs: a full refit on day 1 and every Nth day")
    ap.add_argument(
        "--full-runner",
        choices=["auto", "inline", "dask"],
        default="auto",
        help=f"flow jobs: where the full refit runs (auto: dask beyond {20_000_000:,} rows of history)",
    )
    ap.add_argument("--memory-limit", default="5GB", help="flow jobs: per Dask worker of the full refit")
    ap.add_argument("--work", default=None, help="flow jobs: work folder (a history already there is reused)")
    ap.add_argument("--keep-data", action="store_true", help="flow jobs: keep --work at the end")
    ap.add_argument("--start-day", type=int, default=1, help="flow jobs: resume an interrupted --work run here")
    ap.add_argument(
        "--full-lock",
        default=None,
        help="flow jobs: a lock file (flock) held around each full refit only (e.g. /tmp/cf-big.lock: the machine's "
        "big-run lock), so the daily runs do not hold it",
    )
    ap.add_argument("--section", default="", help="flow jobs: a tag added to the page section's key (a new section)")
    ap.add_argument(
        "--rows-file",
        default=None,
        help="flow jobs: JSON of the days measured so far, read at the start and rewritten after each day (several "
        "--start-day segments, e.g. the full-refit days under the big-run lock, write one table)",
    )
    args = ap.parse_args(argv)
    if args.job in FLOW_JOBS:
        return flow_main(args)
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


#: a full refit inline holds every row (peak RSS 7-10 GB at 10^7 comparisons, this page): beyond this many rows of
#: history ``--full-runner auto`` runs it on the Dask runner, which reads the files on its workers (docs/scale.md)
INLINE_MAX_ROWS = 20_000_000
_RANKING_SPEC = """name: {name}
job: ranking
comparisons:
  path: {data}
ranking:
  outliers: none
  incremental: {incremental}
checks:
  connectivity: warn
output:
  dir: {out}
  report: false
cache:
  enabled: false
"""
_DASK_RUNNER = """runner:
  kind: dask
  n_workers: 2
  memory_limit: {memory_limit}
  scratch_dir: {scratch}
"""


_SKILLS_SPEC = """name: {name}
job: skills
labels:
  path: {data}
skills:
  method: mv
  incremental: {incremental}
checks:
  identifiability: warn
  isolated_workers: warn
output:
  dir: {out}
  report: false
cache:
  enabled: false
"""


def _ranking_equal(inc: Any, full: Any) -> None:
    a, b = inc.tables["ranking"], full.tables["ranking"]
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    ca, cb = inc.tables["components"], full.tables["components"]
    same = ["component", "n_items", "n_rows", "n_edges", "weight", "cycle_dim", "n_undetectable"]
    pd.testing.assert_frame_equal(ca[same], cb[same], check_exact=True)


def _skills_equal(inc: Any, full: Any) -> None:
    """Every table of the folded mv run against the full mv run's (docs/methods/skills.md §4.4): bit for bit but the
    distinct-co-labeller columns (NaN with a reason in the folded run)."""
    from crowdflow.skills.reasons import PARTITIONED_MISSING

    assert sorted(inc.tables) == sorted(full.tables)
    for name, want in full.tables.items():
        got = inc.tables[name]
        same = [c for c in want.columns if c not in PARTITIONED_MISSING.get(name, ()) and c != "missing_reason"]
        pd.testing.assert_frame_equal(got[same], want[same], check_exact=True, obj=name)
        assert got[list(PARTITIONED_MISSING.get(name, ()))].isna().all().all(), name


@dataclass(frozen=True)
class FlowJob:
    """One job of the flow-level benchmark: its spec, its days, its equality check and its section's words."""

    job: str
    kind: str
    spec: str
    section: str
    data: str
    equal: Callable[[Any, Any], None]
    equal_words: str
    reads_words: str
    tables: tuple[str, ...] | None = None  # the tables read back from each run (None: every table)


FLOW_JOBS = {
    "ranking-flow": FlowJob(
        "ranking",
        "comparisons",
        _RANKING_SPEC,
        "## Folded ranking runs through the pipeline (`crowdflow run`, `ranking.incremental: true`)",
        f"winner-form comparisons (±1 outcomes, {N_ITEMS:,} items, {N_ANNOTATORS} annotators)",
        _ranking_equal,
        "the daily run's `ranking` table **equals the full refit's bit for bit** and its `components` integer "
        "columns too (the benchmark stops on a difference)",
        "the manifest shows `stored_rows_read: 0` and one file read",
        ("ranking", "components"),
    ),
    "skills-flow": FlowJob(
        "skills",
        "labels",
        _SKILLS_SPEC,
        "## Folded majority-vote skills runs through the pipeline (`crowdflow run`, `skills.incremental: true`, "
        "`method: mv`)",
        f"one-coin binary labels ({N_WORKERS:,} workers, {PER_TASK} labels a task, string ids; each day "
        f"{1 - LATE_SHARE:.0%} of its labels on new tasks, {LATE_SHARE:.0%} one more label on a task of the day "
        "before)",
        _skills_equal,
        "every table of the daily run (`consensus`, `skills`, `components`) **equals the full refit's bit for bit** "
        "but the distinct-co-labeller columns (`n_partners`; `n_edges`, `d_max`, `D_sum`), NaN with a reason "
        "(docs/methods/skills.md §4.4; the benchmark stops on a difference)",
        "one file read, and of the stored rows only those of the old tasks the day touched (column *stored rows read*)",
    ),
}


#: the CLI, writing its own peak RSS (VmHWM, kB) to argv[1] at exit
_CLI_WITH_HWM = """
import atexit, runpy, sys
out = sys.argv.pop(1)
def hwm():
    kb = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
    open(out, "w").write(str(kb))
atexit.register(hwm)
sys.argv[0] = "crowdflow"
runpy.run_module("flows.cli", run_name="__main__")
"""


def cli_run(spec: Path, env: dict[str, str], tables: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``python -m flows.cli run SPEC`` as a fresh process: its wall time, the manifest's step timings, the run.

    ``rss_gb`` is the command process's own ``VmHWM``; ``tree_gb`` the largest sum of the RSS of it and its
    children (the Dask workers of a ``runner.kind: dask`` run) over samples every 0.2 s
    (:class:`benchmarks.scale_out.TreeSampler`).
    """
    from benchmarks.scale_out import TreeSampler

    hwm = spec.with_suffix(".hwm")
    log = spec.with_suffix(".log")
    t0 = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CLI_WITH_HWM, str(hwm), "run", str(spec)], env=env, stdout=fh,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        sampler = TreeSampler(proc.pid)
        while proc.poll() is None:
            sampler.sample()
            time.sleep(sampler.interval)
    wall = time.perf_counter() - t0
    out = log.read_text()
    if proc.returncode != 0:
        raise RuntimeError(f"crowdflow run {spec} failed:\n{out[-3000:]}")
    run_dir = next(
        line.rsplit("→", 1)[1].strip() for line in out.splitlines() if "completed in" in line and "→" in line
    )
    run = _run_tables(Path(run_dir), tables)
    timings = run.manifest["timings"]
    rss = int(hwm.read_text()) / 1e6
    tree = max(sampler.tree_peak / 1e9, rss)
    return {"wall": wall, "flow": float(sum(timings.values())), "timings": timings, "run": run, "rss_gb": rss,
            "tree_gb": tree, "dir": run_dir}  # fmt: skip


class Reference:
    """An independent reference for each day's ranking: pair sums built by this script, kept in this process.

    It never touches the increment store nor crowdflow's sums code: each file is read with pyarrow, its item ids
    coded against the sorted ids seen so far (``pyarrow.compute.index_in``), every row oriented from the pair's
    first item in text order, and ``n``, ``Σy``, ``Σy²`` added into dense item × item arrays with
    ``numpy.bincount`` (the outcomes are ±1 integers, so the sums are exact in any order). Each day the fold of
    every file so far is fitted twice: with the library's fold fit (:func:`crowdflow.ranking.folded.fit_pairs`,
    whose ``ranking`` the daily run must equal bit for bit) and with a dense solve of the normal equations in
    numpy (``solve`` of ``L + 11ᵀ/K`` for the 1,000 × 1,000 Laplacian ``L`` of a connected graph: the centred
    least-squares scores; the daily scores, centred, must agree to 1e-9).
    """

    def __init__(self) -> None:
        self.items: list[str] = []
        self.sums = np.zeros((3, 0, 0))  # n, s, q per (lo, hi) code pair

    def add(self, path: Path) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        t = pq.read_table(path, columns=["item_a", "item_b", "outcome"])
        seen = set(pc.unique(t["item_a"]).to_pylist()) | set(pc.unique(t["item_b"]).to_pylist())
        if not seen <= set(self.items):  # new ids: re-code the sums so far against the sorted union
            items = sorted(set(self.items) | seen)
            pos = np.searchsorted(np.asarray(items, dtype=object), np.asarray(self.items, dtype=object))
            grown = np.zeros((3, len(items), len(items)))
            grown[:, pos[:, None], pos[None, :]] = self.sums
            self.items, self.sums = items, grown
        k = len(self.items)
        ids = pa.array(self.items)
        a = pc.index_in(t["item_a"], value_set=ids).to_numpy()
        b = pc.index_in(t["item_b"], value_set=ids).to_numpy()
        y = t["outcome"].to_numpy().astype(np.float64)
        flip = a > b
        lo, hi, y = np.where(flip, b, a), np.where(flip, a, b), np.where(flip, -y, y)
        key = lo.astype(np.int64) * k + hi
        for row, wts in enumerate((None, y, y * y)):
            self.sums[row] += np.bincount(key, weights=wts, minlength=k * k).reshape(k, k)

    def fold(self) -> pd.DataFrame:
        """The pair sums as a fold table (``lo, hi, n, w, s, q``, sorted by ``(lo, hi)``; no weights: w = n)."""
        lo, hi = np.nonzero(self.sums[0])
        items = np.asarray(self.items, dtype=object)
        n = self.sums[0][lo, hi]
        return pd.DataFrame({"lo": items[lo], "hi": items[hi], "n": n.astype(np.int64), "w": n,
                             "s": self.sums[1][lo, hi], "q": self.sums[2][lo, hi]})  # fmt: skip

    def check(self, ranking: pd.DataFrame) -> dict[str, Any]:
        from crowdflow.ranking.folded import fit_pairs

        fold = self.fold()
        ref = fit_pairs(fold).ranking
        extra = sorted(set(ranking.columns) - set(ref.columns))  # columns the export adds (none of the fit's)
        got_cols = ranking[list(ref.columns)].reset_index(drop=True)
        want = ref.reset_index(drop=True)
        # the exported table reads back with pandas' string dtype: the ids compared as text, the rest as they are
        got_cols["item"], want["item"] = (
            got_cols["item"].astype(str).astype(object),
            want["item"].astype(str).astype(object),
        )
        pd.testing.assert_frame_equal(got_cols, want, check_exact=True)
        items = np.asarray(self.items, dtype=object)
        w = self.sums[0] + self.sums[0].T  # pair weights (no weights in these files: one per row)
        lap = np.diag(w.sum(axis=1)) - w
        b = self.sums[1].sum(axis=1) - self.sums[1].sum(axis=0)  # Σ over pairs of S_e (e_lo - e_hi)
        # one component (checked below): L + 11ᵀ/K is invertible and its solution is the centred least squares
        theta = np.linalg.solve(lap + 1.0 / items.size, b)
        got = ranking.set_index("item")["score"].reindex(items).to_numpy()
        assert (ranking["component"] == 0).all()
        diff = float(np.max(np.abs((got - got.mean()) - theta)))
        assert diff <= 1e-9, f"daily scores differ from the dense least-squares solve by {diff:.3g}"
        return {"rows": int(fold["n"].sum()), "pairs": len(fold), "dense_diff": diff, "extra": extra}


def full_days(args: argparse.Namespace) -> list[int]:
    """The days (1-based) with a full refit: ``--full-days``, else ``--full-every``, else ``--measure``, else all."""
    if args.full_days:
        return sorted({int(d) for d in args.full_days.split(",")})
    if args.full_every:
        return sorted({1, *range(args.full_every, args.days + 1, args.full_every)})
    return list(range(1, (args.days if args.measure is None else args.measure) + 1))


def full_runner(args: argparse.Namespace) -> tuple[str, str]:
    """Where the full refit runs, and why (printed and written on the page)."""
    if args.full_runner != "auto":
        return args.full_runner, f"--full-runner {args.full_runner}"
    if args.history > INLINE_MAX_ROWS:
        return "dask", (f"history {args.history:,} > {INLINE_MAX_ROWS:,} rows: an inline full refit holds every row "
                        "(peak RSS 7-10 GB at 10^7), so it runs on the Dask runner (2 local workers)")  # fmt: skip
    return "inline", f"history {args.history:,} ≤ {INLINE_MAX_ROWS:,} rows: the full refit runs inline"


def _run_tables(run_dir: Path, names: tuple[str, ...] | None) -> Any:
    """A run's manifest and the tables ``names`` only (every table when None: ``read_run``; a ranking run reads
    ``ranking`` and ``components`` only, since ``read_run`` would load the full refit's 10^8 per-row
    ``residuals``: ~10 GB in pandas)."""
    from types import SimpleNamespace

    from crowdflow.storage.run_store import read_output_table
    from crowdflow.storage.runs import read_run

    if names is None:
        return read_run(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    layout = str(manifest.get("layout") or "flat")
    outputs = manifest["outputs"]
    tables = {n: read_output_table(run_dir, n, outputs[n], layout).to_pandas() for n in names}
    return SimpleNamespace(manifest=manifest, tables=tables)


def flow_main(args: argparse.Namespace) -> int:
    """Daily ``crowdflow run`` of a folded incremental pipeline (ranking or skills) vs a full refit vs the day alone.

    Every day: the daily (folded) run, the day alone and, for ranking, the independent reference check
    (:class:`Reference`);
    on the :func:`full_days`: a full refit too (inline or on Dask, :func:`full_runner`), whose ``ranking`` the
    daily run's must equal bit for bit. The page section is rewritten after every day, so an interrupted run
    leaves the days it measured.
    """
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    fj = FLOW_JOBS[args.job]
    if fj.job == "skills":
        from crowdflow.synth.skills import beta_skills

        skills = beta_skills(4.0, 1.5, N_WORKERS, seed=0)

        def make(day: int) -> pd.DataFrame:
            return day_labels_late(day, args.day, skills)

    else:
        theta = np.random.default_rng(0).normal(size=N_ITEMS)

        def make(day: int) -> pd.DataFrame:
            return day_comparisons(day, args.day, theta)

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="crowdflow-bench-flow-"))
    (work / "run").mkdir(parents=True, exist_ok=True)
    fulls = full_days(args)
    runner, why = full_runner(args)
    print(f"full refit on days {fulls}: {runner} ({why})", flush=True)
    rows: list[dict[str, Any]] = []
    rows_file = Path(args.rows_file) if args.rows_file else None
    if rows_file is not None and rows_file.exists():  # days of earlier segments of this measurement
        rows = [r for r in json.loads(rows_file.read_text()) if r["day"] < args.start_day]
    loads: list[float] = []
    # independent references, kept in this process (never the increment store): the ranking's pair sums, the skills'
    # per-task counts and per-worker agreement (benchmarks/incremental_skills_ref.py)
    ref: Any = Reference() if fj.job == "ranking" else SkillsReference(N_WORKERS)
    meta: dict[str, Any] = {"full_days": fulls, "runner": runner, "why": why}
    try:
        data, alone, out = work / "data", work / "run" / "alone", work / "run" / "out"
        n_hist = max(1, args.history // args.day)
        t0 = time.perf_counter()
        reused = 0
        for d in range(n_hist):
            if (data / f"day={d:04d}" / "part-0.parquet").exists():  # --work with a history written before
                reused += 1
            else:
                write_day(data, d, make(d))
        meta["gen"], meta["gen_reused"] = time.perf_counter() - t0, reused
        t0 = time.perf_counter()
        for d in range(n_hist if ref is not None else 0):
            ref.add(data / f"day={d:04d}" / "part-0.parquet")
        meta["ref_history_s"] = time.perf_counter() - t0
        if ref is not None:
            print(f"reference sums of the history: {meta['ref_history_s']:.1f} s", flush=True)
        specs = {}
        for name, folder, inc in (("daily", data, "true"), ("full", data, "false"), ("alone", alone, "false")):
            specs[name] = work / "run" / f"{name}.yaml"
            text = fj.spec.format(name=name, data=folder, incremental=inc, out=out)
            if name == "full" and runner == "dask":
                text += _DASK_RUNNER.format(memory_limit=args.memory_limit, scratch=work / "run" / "scratch")
            specs[name].write_text(text)
        with prefect_test_harness(server_startup_timeout=180):
            env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": str(PREFECT_API_URL.value())}

            def run(name: str) -> dict[str, Any]:
                # a skills daily run's tables are checked from its folder (arrow; 2e7 consensus rows at 10^8)
                skip = fj.job == "skills" and name != "alone"
                return cli_run(specs[name], env, () if skip else fj.tables)

            seed_file = work / "run" / "seed.json"
            if args.start_day > 1 or seed_file.exists():  # resumed: the store holds the history (and earlier days)
                meta.update(json.loads(seed_file.read_text()))
                seed = meta["seed"]
            else:
                meta["load_seed"] = os.getloadavg()[0]
                # the first run over the history: reads and sums every file (skills: its tables are not read back,
                # 2e7 consensus rows at 10^8; the days are checked)
                seed = cli_run(specs["daily"], env, () if fj.job == "skills" else fj.tables)
                meta["seed"] = seed
                keep = {k: seed[k] for k in ("wall", "flow", "timings", "rss_gb")}
                seed_file.write_text(json.dumps({"seed": keep, "load_seed": meta["load_seed"]}))
            print(f"first folded run over the history: {seed['wall']:.1f} s (flow {seed['flow']:.1f} s), peak RSS "
                  f"{seed['rss_gb']:.2f} GB; load {meta['load_seed']:.1f}", flush=True)  # fmt: skip
            if "run" in seed and fj.job == "ranking":
                ref.check(seed["run"].tables["ranking"])
            for k in range(args.start_day - 1 if ref is not None else 0):  # days a resumed run's store holds
                ref.add(data / f"day={n_hist + k:04d}" / "part-0.parquet")
            for k in range(args.start_day - 1, args.days):
                day = n_hist + k
                df = make(day)
                write_day(data, day, df)
                if alone.exists():
                    shutil.rmtree(alone)
                write_day(alone, day, df)
                del df
                loads.append(os.getloadavg()[0])
                inc = run("daily")
                rec: dict[str, Any] = {"day": k + 1, "rows": (n_hist + k + 1) * args.day, "inc": inc,
                                       "load": loads[-1]}  # fmt: skip
                rec["alone"] = run("alone")
                t0 = time.perf_counter()
                ref.add(data / f"day={day:04d}" / "part-0.parquet")
                rec["ref"] = ref.check(inc["run"].tables["ranking"] if fj.job == "ranking" else Path(inc["dir"]))
                rec["ref"]["s"] = time.perf_counter() - t0
                if k + 1 in fulls:
                    t_wait = time.perf_counter()
                    with _Held(args.full_lock):
                        rec["lock_wait_s"] = time.perf_counter() - t_wait
                        rec["load_full"] = os.getloadavg()[0]
                        rec["full"] = run("full")
                    if fj.job == "skills":
                        skills_equal_arrow(Path(inc["dir"]), Path(rec["full"]["dir"]))
                    else:
                        fj.equal(inc["run"], rec["full"]["run"])
                    rec["equal"] = True
                    rec["full"].pop("run")
                    shutil.rmtree(rec["full"].pop("dir"), ignore_errors=True)  # its residuals: ~3 GB at 10^8
                m = inc["run"].manifest["incremental"][fj.kind]
                assert len(m["files_read"]) == 1
                assert fj.job == "skills" or m["stored_rows_read"] == 0
                rec["how"] = m["fold"]["how"] + (f"/{m['fold']['workers']['how']}" if fj.job == "skills" else "")
                rec["stored_rows_read"] = m["stored_rows_read"]
                if fj.job == "skills":
                    rec["scanned"] = m["fold"]["workers"]["stored_rows_scanned"]
                for r in (inc, rec["alone"]):
                    r.pop("run", None)
                    shutil.rmtree(r.pop("dir"), ignore_errors=True)
                rows.append(rec)
                if rows_file is not None:
                    rows_file.write_text(json.dumps(rows, default=str))
                line = (f"day {k + 1}: daily {inc['wall']:.1f} s (flow {inc['flow']:.1f} s, {rec['how']}, "
                        f"{inc['rss_gb']:.2f} GB), alone {rec['alone']['wall']:.1f} s (flow "
                        f"{rec['alone']['flow']:.1f}); stored rows read {rec['stored_rows_read']:,}"
                        + (f"; reference equal (dense {rec['ref']['dense_diff']:.1e})" if "dense_diff" in rec["ref"]
                           else f"; reference equal ({rec['ref']['tasks']:,} tasks, {rec['ref']['ties']:,} tied, "
                                f"{rec['ref']['s']:.1f} s)"))  # fmt: skip
                if "full" in rec:
                    line += (f", full ({runner}) {rec['full']['wall']:.1f} s (flow {rec['full']['flow']:.1f}, "
                             f"tree {rec['full']['tree_gb']:.2f} GB); outputs equal to the full refit")  # fmt: skip
                print(line + f"; load {loads[-1]:.1f}", flush=True)
                write_flow_report(args, fj, rows, meta, ROOT / "benchmarks" / "results" / "incremental.md")
    finally:
        # what the runs wrote goes always; the history too unless --work --keep-data (only this script's folders)
        if not (args.work and args.keep_data):  # kept: the store and seed.json, so --start-day can resume
            shutil.rmtree(work / "run", ignore_errors=True)
            shutil.rmtree(work / "data", ignore_errors=True)
            if not args.work:
                shutil.rmtree(work, ignore_errors=True)
    return 0


class _Held:
    """``flock(path)`` held for a ``with`` block (no-op without a path): the same lock as ``flock(1)``."""

    def __init__(self, path: str | None) -> None:
        self.path, self.fd = path, -1

    def __enter__(self) -> None:
        if self.path:
            import fcntl

            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = -1


def skills_equal_arrow(inc: Path, full: Path) -> None:
    """Every table of the folded mv run against the full refit's, as Arrow tables read from the two run folders (no
    pandas: 2e7 consensus rows at 10^8): bit for bit but the distinct-co-labeller columns (NaN in the folded run)."""
    import pyarrow.compute as pc

    from crowdflow.skills.reasons import PARTITIONED_MISSING
    from crowdflow.storage.run_store import read_output_table

    mans = [json.loads((d / "manifest.json").read_text()) for d in (inc, full)]
    assert sorted(mans[0]["outputs"]) == sorted(mans[1]["outputs"])
    for name in mans[1]["outputs"]:
        got, want = (read_output_table(d, name, m["outputs"][name], str(m.get("layout") or "flat"))
                     for d, m in zip((inc, full), mans, strict=True))  # fmt: skip
        missing = PARTITIONED_MISSING.get(name, ())
        same = [c for c in want.column_names if c not in missing and c != "missing_reason"]
        g, w = got.select(same), want.select(same)
        w = pa_cast_like(w, g)
        assert g.num_rows == w.num_rows, name
        key = {"consensus": "task", "skills": "worker"}.get(name)
        if key and not g[key].equals(w[key]):  # a Dask refit writes its consensus bucket by bucket: align by id
            g, w = (t.take(pc.sort_indices(t, [(key, "ascending")])) for t in (g, w))
        for c in same:
            assert g[c].equals(w[c]), f"{name}.{c} differs from the full refit's"
        for c in missing:
            assert got[c].null_count == got.num_rows or bool(np.isnan(got[c].to_numpy(zero_copy_only=False)).all()), c


def pa_cast_like(table: Any, like: Any) -> Any:
    """``table`` with each column cast to ``like``'s type (dictionary and large types decoded to the same)."""
    import pyarrow as pa

    cols = []
    for c in like.column_names:
        col, t = table[c], like.schema.field(c).type
        if pa.types.is_dictionary(col.type) and not pa.types.is_dictionary(t):
            col = col.cast(col.type.value_type)
        cols.append(col if col.type == t else col.cast(t))
    return pa.table(cols, names=like.column_names)


def _section_key(args: argparse.Namespace) -> str:
    return f"{args.job} history {args.history} day {args.day}" + (f" {args.section}" if args.section else "")


def write_flow_report(
    args: argparse.Namespace, fj: FlowJob, rows: list[dict[str, Any]], meta: dict[str, Any], path: Path
) -> None:
    """Rewrite this run's section of ``incremental.md`` between its markers (everything else in the file is kept)."""
    cmd = (f"python -m benchmarks.incremental --job {args.job} --history {args.history} --day {args.day} "
           f"--days {args.days}" + (f" --measure {args.measure}" if args.measure is not None else "")
           + (f" --full-days {args.full_days}" if args.full_days else "")
           + (f" --full-every {args.full_every}" if args.full_every else "")
           + (f" --full-runner {args.full_runner}" if args.full_runner != "auto" else "")
           + (" --work DIR" if args.work else "") + (" --keep-data" if args.keep_data else "")
           + (f" --start-day {args.start_day}" if args.start_day > 1 else ""))  # fmt: skip
    seed, runner = meta["seed"], meta["runner"]
    loads = [r["load"] for r in rows]
    done = len(rows)
    status = "" if done == args.days else f" **Interrupted or in progress: {done} of {args.days} days measured.**"
    gen = (f"the history files were already in the work folder (written beforehand by the same generator, "
           f"{meta['gen_reused']} files)" if meta["gen_reused"] else f"generating the history took {meta['gen']:.0f} s")  # fmt: skip
    fulls = [r for r in rows if "full" in r]
    lines = [
        f"{fj.section} at {args.history:,} rows of history: {args.days} daily increments of {args.day:,}",
        "",
        f"`{cmd}` on {platform.machine()}, {os.cpu_count()} cores, 24 GiB (shared with other agents' jobs), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average (1 min) at the start of each day "
        f"{min(loads):.1f}-{max(loads):.1f} (column *load*).{status} History: {args.history:,} {fj.data} in daily "
        f"files of {args.day:,}; {gen}."
        + (
            f" **Resumed at day {args.start_day}:** the first folded run over the history and days 1-"
            f"{args.start_day - 1} ran in an earlier invocation of the same command on the same folder and store, "
            "which was stopped (see below); this invocation measured the days in the table."
            if args.start_day > 1
            else ""
        ),
        "",
        f"**First folded run over the history** (reads, validates and sums every file, one file's rows at a time): "
        f"wall {seed['wall']:.1f} s (flow {seed['flow']:.1f} s: "
        + ", ".join(f"{k} {v:.1f}" for k, v in seed["timings"].items())
        + f"), peak RSS {seed['rss_gb']:.2f} GB; load {meta['load_seed']:.1f}.",
        "",
        "Runs each day, each `crowdflow run SPEC` in a fresh process against one temporary Prefect API, "
        f"`report: false`, `cache.enabled: false`: the **daily** pipeline (`{fj.job}.incremental: true`, "
        + (
            "`outliers: none`: reads and validates only the new file, fits on the stored fold of per-pair sums"
            if fj.job == "ranking"
            else "`method: mv`: reads and validates only the new file, votes on the stored per-task class counts and "
            "updates the worker fold from the new rows and the stored rows of the old tasks the day touched"
        )
        + f") and a run over the **day alone** (a folder holding only the new file) on every day; a **full** refit of the "
        f"whole folder (`incremental: false`) on days {', '.join(map(str, meta['full_days']))} only, on the "
        f"{'Dask runner (`runner.kind: dask`, 2 local workers, memory_limit ' + args.memory_limit + ')' if runner == 'dask' else 'inline runner'}"
        f" ({meta['why']}). *wall*: the command's wall time (Python start-up, imports and the Prefect client "
        "included); *flow*: the sum of the manifest's step timings. Peak RSS: the command process's own `VmHWM`; "
        "for the full refit also the largest sampled sum over the process and its children (*tree*: the Dask "
        "workers).",
        "",
        (
            "**Checks, per day** (the benchmark stops on any failure): on **every** day the daily run's `ranking` "
            "table equals, bit for bit (`assert_frame_equal(check_exact=True)`), `fit_pairs` on an independent fold "
            "of the pair sums that this script builds itself (each file read with pyarrow, ids coded with "
            "`index_in`, sums by `numpy.bincount` into dense item × item arrays: no increment store, no crowdflow "
            "sums code; *ref*), and its centred scores agree with a dense numpy solve of the normal equations of "
            "those sums (largest difference in column *dense*). "
            if fj.job == "ranking"
            else "**Checks, per day** (the benchmark stops on any failure): "
        )
        + f"On the full-refit days (column *full*) {fj.equal_words}; every day the manifest shows {fj.reads_words}.",
        "",
        "| day | rows in all | load | daily wall / flow (s) | alone wall / flow (s) | daily / alone (wall, flow) | "
        "full wall / flow (s) | daily / full (wall) | peak RSS daily / alone (GB) | full RSS flow / tree (GB) | "
        "checks | dense | stored rows read |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        i, a = r["inc"], r["alone"]
        f = r.get("full")
        lines.append(
            f"| {r['day']} | {r['rows']:,} | {r['load']:.1f} | {i['wall']:.1f} / {i['flow']:.1f} | {a['wall']:.1f} / "
            f"{a['flow']:.1f} | {i['wall'] / a['wall']:.2f}, {i['flow'] / a['flow']:.2f} | "
            + (f"{f['wall']:.1f} / {f['flow']:.1f} | {i['wall'] / f['wall']:.2f} | " if f else "- | - | ")
            + f"{i['rss_gb']:.2f} / {a['rss_gb']:.2f} | "
            + (f"{f['rss_gb']:.2f} / {f['tree_gb']:.2f} | " if f else "- | ")
            + " + ".join([*(["ref"] if "ref" in r else []), *(["full"] if f else [])] or ["-"])
            + (f" | {r['ref']['dense_diff']:.1e} | " if "dense_diff" in r.get("ref", {}) else " | - | ")
            + f"{r['stored_rows_read']:,}"
            + (f" (of {r['scanned']:,} scanned) |" if "scanned" in r else " |")
        )
    ra = [r["inc"]["wall"] / r["alone"]["wall"] for r in rows]
    rf = [r["inc"]["flow"] / r["alone"]["flow"] for r in rows]
    worst = int(np.argmax(ra))
    steps = {k: float(np.median([r["inc"]["timings"].get(k, 0.0) for r in rows])) for k in rows[0]["inc"]["timings"]}
    lines += [
        "",
        f"**Daily / day alone, worst first:** wall worst {max(ra):.2f} (day {rows[worst]['day']}), median "
        f"{np.median(ra):.2f}; flow worst {max(rf):.2f}, median {np.median(rf):.2f}, over {done} days; issue #38's "
        f"target ≤ 3. Peak RSS of the daily run: {max(r['inc']['rss_gb'] for r in rows):.2f} GB at most. Median "
        "step times of the daily run (s): " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()) + ".",
    ]
    if fulls:
        lines.append(
            f"Full refits ({runner}, {len(fulls)} days): wall {min(r['full']['wall'] for r in fulls):.0f}-"
            f"{max(r['full']['wall'] for r in fulls):.0f} s, tree peak RSS up to "
            f"{max(r['full']['tree_gb'] for r in fulls):.2f} GB; daily / full wall "
            f"{min(r['inc']['wall'] / r['full']['wall'] for r in fulls):.2f}-"
            f"{max(r['inc']['wall'] / r['full']['wall'] for r in fulls):.2f}."
        )
    lines.append("")
    key = _section_key(args)
    begin, end = f"<!-- {key}:begin -->", f"<!-- {key}:end -->"
    block = "\n".join([begin, *lines, end])
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
