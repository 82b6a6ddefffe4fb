"""Skills: the flow's peak memory as the workers grow at fixed labels, inline and on Dask (issue #36, part 1).

Run: ``python -m benchmarks.skills_memory --labels 1000000 --workers 1000,10000,100000,200000`` (writes
``benchmarks/results/skills_memory.md``).

Data (seeded): labels/5 tasks, 5 distinct workers per task drawn uniformly from W, 3 classes, one-coin workers
with accuracy U[0.5, 0.95]; integer ids. For each W a separate process writes the labels as 8 Parquet files (text
columns, as a pipeline reads them). Each cell runs in a fresh process; the kernel's high-water mark is reset
(``/proc/self/clear_refs`` = 5) just before the step, which then runs alone, and the step's peak RSS (``VmHWM``)
is read with its increment over the RSS before the step:

* ``inline``: the labels read into a DataFrame (before the reset), then the worker-graph check by the W×W pair
  graph (``crowdflow.graphs.worker_graph_report_pairs``, what every run called before this branch) or by the
  pair-free parity union-find (``crowdflow.graphs.worker_graph_report``, what the runs call now), or the whole
  in-memory ``fit_skills`` for ``mv``, ``onecoin_ds``, ``ds`` and ``pgd``;
* ``dask``: the driver ("flow") process of ``fit_skills_partitioned`` on the folder with a ``distributed``
  LocalCluster of 2 worker processes (1 thread each) started before the reset, through the pipeline's executor
  (``tasks.runners.DaskMap``: the buckets' codes held on the workers, the per-pass arguments shared once, the sums
  folded as they arrive): the flow never reads the labels; its peak is what it holds (the run's dictionaries, the
  merged per-worker statistics or, for pgd, the summed pair counts and the fit) plus the in-process scheduler; the
  Dask workers' memory is not counted.

``--ds-max-iter`` caps the EM (default 100: at ~5 labels a worker and 2·10^5 workers DS does not converge within
hundreds of iterations; memory does not depend on the count).

The pair bound min(Σ_t k_t(k_t − 1), W(W − 1)) and the stored pairs nnz(N) are listed per W.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INLINE = ("check_pairs", "check_parity", "mv", "onecoin_ds", "ds", "pgd")
DASK = ("mv", "onecoin_ds", "ds", "pgd")


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _prepare(n_labels: int, n_workers: int, folder: Path) -> dict[str, float]:
    import numpy as np
    import pandas as pd

    from crowdflow.graphs import co_label_counts, pair_bound
    from crowdflow.labels import encode_labels

    rng = np.random.default_rng(36)
    k = 5
    n_tasks = n_labels // k
    workers = np.empty((n_tasks, k), dtype=np.int64)
    for j in range(k):  # distinct workers per task: k draws, sorted, shifted apart, wrapped into [0, W)
        workers[:, j] = rng.integers(0, n_workers, n_tasks)
    workers = np.sort(workers, axis=1)
    workers += np.arange(k)
    workers %= n_workers
    truth = rng.integers(0, 3, n_tasks)
    acc = rng.uniform(0.5, 0.95, n_workers)
    w = workers.ravel()
    t = np.repeat(np.arange(n_tasks), k)
    right = rng.random(w.size) < acc[w]
    lab = np.where(right, truth[t], (truth[t] + rng.integers(1, 3, w.size)) % 3)
    df = pd.DataFrame({"task": t, "worker": w, "label": lab}).drop_duplicates(["task", "worker"])
    folder.mkdir(parents=True, exist_ok=True)
    text = df.astype(str)
    for p, rows in enumerate(np.array_split(np.arange(len(text)), 8)):
        text.iloc[rows].to_parquet(folder / f"part-{p}.parquet", index=False)
    lm = encode_labels(df)
    return {
        "labels": float(lm.n_labels),
        "workers": float(lm.n_workers),
        "pair_bound": float(pair_bound(np.bincount(lm.task_idx), lm.n_workers)),
        "nnz": float(co_label_counts(lm).nnz),
    }


def _cell(folder: Path, runner: str, step: str, ds_max_iter: int = 100) -> dict[str, float]:
    import pandas as pd

    from crowdflow.graphs import worker_graph_report, worker_graph_report_pairs
    from crowdflow.labels import encode_labels
    from crowdflow.skills import SkillsOptions, fit_skills, fit_skills_partitioned

    opts = SkillsOptions(
        method=step if step in ("mv", "onecoin_ds", "ds", "pgd") else "mv",
        pair_memory_budget=None,
        ds_max_iter=ds_max_iter,
    )
    if runner == "inline":
        df = pd.read_parquet(folder)
        lm = encode_labels(df) if step.startswith("check") else None
        Path("/proc/self/clear_refs").write_text("5")
        before = _status("VmRSS")
        clock = time.perf_counter()
        if step == "check_pairs":
            worker_graph_report_pairs(lm)  # type: ignore[arg-type]
        elif step == "check_parity":
            worker_graph_report(lm)  # type: ignore[arg-type]
        else:
            fit_skills(df, opts)
        seconds = time.perf_counter() - clock
    else:
        import distributed

        from tasks.runners import DaskMap

        with (
            distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit="3GB"
            ) as cluster,
            distributed.Client(cluster) as client,
            tempfile.TemporaryDirectory(prefix="skills-memory-") as out,
        ):
            run = DaskMap(client)
            Path("/proc/self/clear_refs").write_text("5")
            before = _status("VmRSS")
            clock = time.perf_counter()
            fit_skills_partitioned(folder, opts, out_folder=out, executor=run, n_buckets=8, work_dir=out)
            seconds = time.perf_counter() - clock
    return {"seconds": seconds, "peak": _status("VmHWM"), "before": before}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=int, default=1_000_000)
    ap.add_argument("--workers", default="1000,10000,100000,200000")
    ap.add_argument("--inline", default=",".join(INLINE))
    ap.add_argument("--dask", default=",".join(DASK))
    ap.add_argument("--out", default="benchmarks/results/skills_memory.md")
    ap.add_argument("--ds-max-iter", type=int, default=100)
    ap.add_argument("--prepare", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--cell", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.prepare:
        print(json.dumps(_prepare(int(a.prepare[0]), int(a.prepare[1]), Path(a.prepare[2]))))
        return
    if a.cell:
        print(json.dumps(_cell(Path(a.cell[0]), a.cell[1], a.cell[2], a.ds_max_iter)))
        return

    def sub(*args: str) -> dict[str, float]:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.skills_memory", *args], capture_output=True, text=True, check=False
        )
        if out.returncode:
            raise RuntimeError(out.stderr[-3000:])
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))

    rows = []
    started = time.strftime("%H:%M UTC", time.gmtime())
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="skills-memory-data-") as tmp:
        for w in [int(x) for x in a.workers.split(",")]:
            folder = Path(tmp) / f"w{w}"
            shape = sub("--prepare", str(a.labels), str(w), str(folder))
            cells = [("inline", s) for s in a.inline.split(",") if s] + [("dask", s) for s in a.dask.split(",") if s]
            for runner, step in cells:
                got = sub("--cell", str(folder), runner, step, "--ds-max-iter", str(a.ds_max_iter))
                r = {**shape, **got, "runner": runner, "step": step, "W": w}
                rows.append(r)
                print(
                    f"W={w} {runner} {step}: peak {r['peak'] / 1e9:.3f} GB "
                    f"(+{(r['peak'] - r['before']) / 1e9:.3f}) {r['seconds']:.1f} s",
                    flush=True,
                )
    Path(a.out + ".json").write_text(json.dumps(rows, indent=1))
    write_table(rows, a, started, load0)


def write_table(rows: list[dict], a: argparse.Namespace, started: str, load0: float) -> None:  # type: ignore[type-arg]
    lines = [
        "# Skills: the flow's peak memory as the workers grow at fixed labels (issue #36)",
        "",
        f"`python -m benchmarks.skills_memory --labels {a.labels} --workers {a.workers} --inline '{a.inline}' "
        f"--dask '{a.dask}' --ds-max-iter {a.ds_max_iter}` (started {started}, load "
        f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; shared 2-core host). Method in the module "
        "docstring. Each cell: a fresh process; *peak* is the process's VmHWM during the step (inline: the labels "
        "frame read before it included; dask: the driver process only), *step +* the peak over the RSS just before "
        "the step.",
        "",
        "| labels | workers | pair bound | nnz(N) | runner | step | peak GB | step + GB | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {int(r['labels']):,} | {int(r['workers']):,} | {int(r['pair_bound']):,} | {int(r['nnz']):,} | "
            f"{r['runner']} | {r['step']} | {r['peak'] / 1e9:.3f} | {(r['peak'] - r['before']) / 1e9:.3f} | "
            f"{r['seconds']:.1f} |"
        )
    Path(a.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
