"""Skills: the fit's peak memory as the workers grow at fixed labels (issue #36, part 1).

Run: ``python -m benchmarks.skills_memory --labels 1000000 --workers 1000,10000,100000,200000`` (writes
``benchmarks/results/skills_memory.md``).

Data (seeded): labels/5 tasks, 5 distinct workers per task drawn uniformly from W, 3 classes, one-coin workers
with accuracy U[0.5, 0.95]; integer ids. Each cell runs in a fresh subprocess: the labels are generated and
encoded, the kernel's high-water mark is reset (``/proc/self/clear_refs`` = 5), then one step runs and the
step's peak RSS (``VmHWM``) is read, together with its increment over the RSS before the step. Steps: the
worker-graph check by the W×W pair graph (``crowdflow.graphs.worker_graph_report``) and by the pair-free
parity union-find (``crowdflow.worker_parity.worker_graph_parity``), and the whole in-memory ``fit_skills``
for ``mv``, ``onecoin_ds``, ``ds`` and ``pgd``. The pair bound min(Σ_t k_t(k_t − 1), W(W − 1)) is listed.
Dask (partitioned) runs are not measured by this script (benchmarks/scale_out.py measures them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

STEPS = ("check_pairs", "check_parity", "mv", "onecoin_ds", "ds", "pgd")


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _cell(n_labels: int, n_workers: int, step: str) -> dict[str, float]:
    import numpy as np
    import pandas as pd

    from crowdflow.graphs import worker_graph_report
    from crowdflow.labels import encode_labels
    from crowdflow.skills.fit import fit_skills
    from crowdflow.skills.options import SkillsOptions
    from crowdflow.worker_parity import pair_bound, worker_graph_parity

    rng = np.random.default_rng(36)
    k = 5
    n_tasks = n_labels // k
    workers = np.empty((n_tasks, k), dtype=np.int64)
    for j in range(k):  # distinct workers per task: k draws without replacement by offsets
        workers[:, j] = rng.integers(0, n_workers, n_tasks)
    workers = np.sort(workers, axis=1)
    workers += np.arange(k)  # strictly increasing after the shift, then wrap into [0, W)
    workers %= n_workers
    truth = rng.integers(0, 3, n_tasks)
    acc = rng.uniform(0.5, 0.95, n_workers)
    w = workers.ravel()
    t = np.repeat(np.arange(n_tasks), k)
    right = rng.random(w.size) < acc[w]
    lab = np.where(right, truth[t], (truth[t] + rng.integers(1, 3, w.size)) % 3)
    df = pd.DataFrame({"task": t, "worker": w, "label": lab}).drop_duplicates(["task", "worker"])
    lm = encode_labels(df)
    bound = pair_bound(np.bincount(lm.task_idx), lm.n_workers)
    Path("/proc/self/clear_refs").write_text("5")
    before = _status("VmRSS")
    clock = time.perf_counter()
    if step == "check_pairs":
        worker_graph_report(lm)
    elif step == "check_parity":
        worker_graph_parity(lm)
    else:
        fit_skills(df, SkillsOptions(method=step, pair_memory_budget=None))
    return {
        "seconds": time.perf_counter() - clock,
        "peak": _status("VmHWM"),
        "before": before,
        "labels": float(lm.n_labels),
        "workers": float(lm.n_workers),
        "pair_bound": float(bound),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=int, default=1_000_000)
    ap.add_argument("--workers", default="1000,10000,100000,200000")
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--out", default="benchmarks/results/skills_memory.md")
    ap.add_argument("--cell", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cell:
        print(json.dumps(_cell(int(a.cell[0]), int(a.cell[1]), a.cell[2])))
        return
    rows = []
    started = time.strftime("%H:%M UTC", time.gmtime())
    load0 = os.getloadavg()[0]
    for w in [int(x) for x in a.workers.split(",")]:
        for step in a.steps.split(","):
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.skills_memory", "--cell", str(a.labels), str(w), step],
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r["step"], r["W"] = step, w
            rows.append(r)
            print(
                f"W={w} {step}: peak {r['peak'] / 1e9:.3f} GB (+{(r['peak'] - r['before']) / 1e9:.3f}) "
                f"{r['seconds']:.1f} s",
                flush=True,
            )
    lines = [
        "# Skills: peak memory as the workers grow at fixed labels (issue #36)",
        "",
        f"`python -m benchmarks.skills_memory --labels {a.labels} --workers {a.workers}` (started {started}, load "
        f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; shared 2-core host). Method in the module "
        "docstring. Each cell: a fresh process; *peak* is the process's VmHWM during the step (the labels frame and "
        "its encoding included, ~the same in every cell), *step +* the peak over the RSS just before the step.",
        "",
        "| labels | workers | pair bound | step | peak GB | step + GB | s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {int(r['labels']):,} | {int(r['workers']):,} | {int(r['pair_bound']):,} | {r['step']} | "
            f"{r['peak'] / 1e9:.3f} | {(r['peak'] - r['before']) / 1e9:.3f} | {r['seconds']:.1f} |"
        )
    Path(a.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
