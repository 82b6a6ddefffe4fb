"""Skills speed vs Crowd-Kit over a family of shapes at 10^6 and 10^7 labels (issue #19, skills rows).

Run: ``python -m benchmarks.skills_speed`` (writes ``benchmarks/results/skills_speed.md``; ``--sizes 6`` for 10^6
only, ``--configs N`` configurations per size and id kind, ``--reps`` runs per cell, best kept).

Family (seeded, drawn per configuration, not tuned to one shape): ids of one kind (``string``: Arrow-backed
strings, what crowdflow's readers give; ``object``: Python ``str`` objects; ``int``: dense int64 (tasks 0..T−1,
workers an offset range); ``sparse``: int64 ids drawn over 2^40, in no order, labels 1..M; ``categorical``: pandas
categoricals of the string ids), 2–5 classes, labels
per task uniform in [2, k_max] with k_max ∈ {4, 10, 20}, 300–3,000 workers whose activity is skewed (Zipf
weights with exponent 0.8–1.3, a worker drawn per label, repeated (task, worker) pairs dropped), one-coin
workers with accuracy U[0.35, 0.95] (a few below chance).

Per configuration, in one process, each call a whole ``fit_skills(df, method=...)`` (encoding, co-label
counts, graph, fit, consensus, diagnostics; library defaults otherwise) and its Crowd-Kit peer on the same
rows: ours MV / Crowd-Kit ``MajorityVote``, ours DS and one-coin DS / Crowd-Kit ``DawidSkene``, ours PGD /
Crowd-Kit ``DawidSkene``. Crowd-Kit gets Python objects for string and categorical ids (it fails on Arrow-backed
columns in pandas 3: ``bool[pyarrow]`` in its accuracy step); the conversion is not timed. Issue #36's same-arguments
row: crowdflow's estimator ``crowdflow.DawidSkene(n_iter=...)`` against Crowd-Kit's with the same arguments, each
fitted on the frame it is given (ours: the ids as generated).

Cap (stated rule): at 10^7 labels Crowd-Kit ``DawidSkene`` runs ``n_iter=5`` EM iterations (its default is up
to 100, and ours run to convergence), so its time there is a lower bound of its full time and the ratios
against it at 10^7 are upper bounds (they favour Crowd-Kit). The EM iterations each side ran are recorded:
Crowd-Kit's (``len(loss_history_)``; it stops when the per-label ELBO gains less than 1e-5) and ours (EM
passes, ``metadata["iterations"]``; ours stop when no parameter moves by 1e-6 in one EM step).

Before/after (``--before PATH``): the DS and one-coin DS of another checkout (e.g. ``/work/main``) are timed
on the same rows, in a subprocess with that checkout first on ``sys.path`` (the rows are regenerated there by
the same seeded generator, untimed), for the sizes in ``--before-sizes``.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Mapping  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.timing import best_of  # noqa: E402
from crowdflow.skills import fit_skills  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "skills_speed.md"
IDS = ("string", "object", "int", "sparse", "categorical")
OURS = ("mv", "ds", "onecoin_ds", "pgd")


def family_config(rng: np.random.Generator) -> dict[str, float]:
    return {
        "classes": int(rng.integers(2, 6)),
        "k_max": int(rng.choice([4, 10, 20])),
        "workers": int(rng.choice([300, 1000, 3000])),
        "zipf": float(rng.uniform(0.8, 1.3)),
    }


def make_labels(n_labels: int, ids: str, cfg: dict[str, float], seed: int) -> pd.DataFrame:
    """About ``n_labels`` labels of the configuration, ids of kind ``ids``."""
    rng = np.random.default_rng(seed)
    m, k_max, w = int(cfg["classes"]), int(cfg["k_max"]), int(cfg["workers"])
    k = rng.integers(2, k_max + 1, size=max(1, int(n_labels / ((2 + k_max) / 2))))
    task = np.repeat(np.arange(k.size), k)
    weight = 1.0 / np.arange(1, w + 1) ** cfg["zipf"]
    worker = rng.choice(w, size=task.size, p=weight / weight.sum())
    keep = ~pd.DataFrame({"t": task, "w": worker}).duplicated().to_numpy()
    task, worker = task[keep], worker[keep]
    truth = rng.integers(0, m, k.size)
    acc = rng.uniform(0.35, 0.95, w)
    right = rng.random(task.size) < acc[worker]
    wrong = (truth[task] + rng.integers(1, m, task.size)) % m
    label = np.where(right, truth[task], wrong)
    if ids == "int":  # dense ids: 0..T-1 and an offset range
        return pd.DataFrame({"task": task, "worker": worker + 10_000, "label": label})
    if ids == "sparse":  # integer ids spread over 2^40 (hashes, database keys), in no order
        t_ids = rng.choice(2**40, size=k.size, replace=False)
        w_ids = rng.choice(2**40, size=w, replace=False)
        return pd.DataFrame({"task": t_ids[task], "worker": w_ids[worker], "label": label + 1})
    t_names = np.array([f"task-{i}" for i in range(k.size)], dtype=object)
    w_names = np.array([f"worker-{i}" for i in range(w)], dtype=object)
    l_names = np.array([f"class-{i}" for i in range(m)], dtype=object)
    cols = {"task": t_names[task], "worker": w_names[worker], "label": l_names[label]}
    if ids == "object":
        return pd.DataFrame({c: pd.Series(v, dtype=object) for c, v in cols.items()})
    if ids == "categorical":
        return pd.DataFrame({c: pd.Series(v, dtype="category") for c, v in cols.items()})
    return pd.DataFrame({c: pd.Series(v, dtype="string[pyarrow]") for c, v in cols.items()})


_BEFORE = """
import json, sys, time, warnings
sys.path.insert(0, sys.argv[1])
from benchmarks.skills_speed import make_labels
from crowdflow.skills import fit_skills
n, ids, cfg, seed, reps = int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
warnings.simplefilter("ignore")
fit_skills(make_labels(5_000, ids, cfg, 0), method="ds")
fit_skills(make_labels(5_000, ids, cfg, 0), method="onecoin_ds")
df = make_labels(n, ids, cfg, seed)
out = {}
for method in ("ds", "onecoin_ds"):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        res = fit_skills(df, method=method)
        best = min(best, time.perf_counter() - t0)
    out[method] = best
    out[method + "_iter"] = int(res.metadata["iterations"])
print(json.dumps(out))
"""


def time_before(root: str, n_labels: int, ids: str, cfg: dict[str, float], seed: int, reps: int) -> dict[str, float]:
    """DS and one-coin DS of the checkout at ``root`` on the same rows (see the module docstring)."""
    env = {**os.environ, "PYTHONPATH": root}
    args = [sys.executable, "-c", _BEFORE, root, str(n_labels), ids, json.dumps(cfg), str(seed), str(reps)]
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=env, cwd=root).stdout
    return {f"before_{k}": v for k, v in json.loads(out.strip().splitlines()[-1]).items()}


def run_config(
    n_labels: int,
    ids: str,
    cfg: dict[str, float],
    seed: int,
    reps: int,
    methods: tuple[str, ...] = OURS,
    before: str | None = None,
) -> dict[str, object]:
    from crowdkit.aggregation import DawidSkene, MajorityVote

    df = make_labels(n_labels, ids, cfg, seed)
    peer = df.astype(object) if ids in ("string", "categorical") else df
    n_iter = 5 if n_labels >= 5 * 10**6 else 100
    reps = 1 if n_labels >= 5 * 10**6 else reps  # one run of each at 10^7
    row: dict[str, object] = {"labels": len(df), "ids": ids, **cfg}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in OURS:
            run = method in methods
            row[method] = best_of(lambda method=method: fit_skills(df, method=method), reps) if run else float("nan")
            if method in ("ds", "onecoin_ds") and run:
                row[f"{method}_iter"] = int(fit_skills(df, method=method).metadata["iterations"])
        row["ck_mv"] = best_of(lambda: MajorityVote().fit_predict(peer), reps)
        with_ds = bool(set(methods) - {"mv"})
        ck = DawidSkene(n_iter=n_iter)
        row["ck_ds"] = best_of(lambda: ck.fit_predict(peer), 1) if with_ds else float("nan")
        row["ck_ds_ran"] = len(ck.loss_history_) if with_ds else 0
        # issue #36: the same arguments on both sides, crowdflow's Crowd-Kit-compatible estimator, its runs
        # interleaved with Crowd-Kit's (best of each) when a Crowd-Kit fit takes under 20 s, so a change of the
        # host's load between the two is less likely to decide the ratio
        if "ds" in methods:
            import crowdflow

            ours_est = crowdflow.DawidSkene(n_iter=n_iter)
            row["ds_est"] = best_of(lambda: ours_est.fit_predict(df), reps)
            for _ in range(reps - 1 if row["ck_ds"] < 20.0 else 0):
                row["ck_ds"] = min(row["ck_ds"], best_of(lambda: ck.fit_predict(peer), 1))
                row["ds_est"] = min(row["ds_est"], best_of(lambda: ours_est.fit_predict(df), 1))
        else:
            row["ds_est"] = float("nan")
    row["ck_ds_iter"] = n_iter
    if before is not None:
        row.update(time_before(before, n_labels, ids, cfg, seed, reps))
    print(row, flush=True)
    return row


def _warm_up() -> None:
    """Load every compiled kernel once (numba's on-disk cache) on a small table of each id kind."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ids in IDS:
            df = make_labels(5_000, ids, {"classes": 3, "k_max": 10, "workers": 300, "zipf": 1.0}, 0)
            for method in OURS:
                fit_skills(df, method=method)


def summary(rows: pd.DataFrame) -> list[str]:
    ratios = {
        "DS / Crowd-Kit DS": rows["ds"] / rows["ck_ds"],
        "DS estimator / Crowd-Kit DS, same arguments": rows["ds_est"] / rows["ck_ds"],
        "one-coin DS / Crowd-Kit DS": rows["onecoin_ds"] / rows["ck_ds"],
        "MV / Crowd-Kit MV": rows["mv"] / rows["ck_mv"],
        "PGD / Crowd-Kit DS": rows["pgd"] / rows["ck_ds"],
    }
    if "before_ds" in rows:
        ratios["before: DS / Crowd-Kit DS"] = rows["before_ds"] / rows["ck_ds"]
        ratios["before: one-coin DS / Crowd-Kit DS"] = rows["before_onecoin_ds"] / rows["ck_ds"]
    out = ["| labels | ratio | min | median | max (worst) | target |", "|---|---|---|---|---|---|"]
    target = {
        "MV / Crowd-Kit MV": "≤ 1",
        "DS / Crowd-Kit DS": "≤ 0.33 (converged vs its early stop)",
        "DS estimator / Crowd-Kit DS, same arguments": "≤ 0.1",
        "PGD / Crowd-Kit DS": "≤ 0.2",
    }
    target["before: DS / Crowd-Kit DS"] = "≤ 0.1"
    for size, grp in rows.groupby(rows["size"]):
        for name, r in ratios.items():
            v = r[grp.index].dropna()
            if v.empty:
                continue
            out.append(
                f"| 10^{size} | {name} | {v.min():.3f} | {v.median():.3f} | {v.max():.3f} | {target.get(name, '')} |"
            )
    return out


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="6,7", help="comma-separated exponents (default 6,7)")
    ap.add_argument("--configs", default="3,1", help="configurations per id kind, per size (default 3,1)")
    ap.add_argument("--reps", type=int, default=2, help="runs of each of ours and Crowd-Kit MV; best kept")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--methods", default=",".join(OURS), help="ours to time (Crowd-Kit DS only with a non-mv one)")
    ap.add_argument("--ids", default=",".join(IDS), help="id kinds to run (default string,object,int)")
    ap.add_argument("--before", default=None, help="another checkout whose DS is timed on the same rows")
    ap.add_argument("--before-sizes", default="6", help="sizes (exponents) at which --before is timed")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--combine",
        nargs="+",
        default=None,
        help="render one page from the printed rows of earlier runs (their logs; --note gives their commands)",
    )
    ap.add_argument("--note", default="", help="with --combine: the commands and load averages of the runs")
    args = ap.parse_args(argv)
    if args.combine:
        rows = [_logged_row(line) for log in args.combine for line in Path(log).read_text("utf-8").splitlines()]
        text = render(pd.DataFrame([r for r in rows if r is not None]), args.note)
        args.out.write_text(text, encoding="utf-8")
        print(text)
        return text
    sizes = [int(s) for s in args.sizes.split(",")]
    n_cfg = [int(c) for c in args.configs.split(",")]
    rng = np.random.default_rng(args.seed)
    _warm_up()
    rows = []
    methods = tuple(args.methods.split(","))
    command = f"--sizes {args.sizes} --configs {args.configs} --reps {args.reps} --seed {args.seed}"
    command += "" if methods == OURS else f" --methods {args.methods}"
    id_kinds = tuple(args.ids.split(","))
    command += "" if id_kinds == IDS else f" --ids {args.ids}"
    before_sizes = {int(x) for x in args.before_sizes.split(",")} if args.before else set()
    command += f" --before {args.before} --before-sizes {args.before_sizes}" if args.before else ""
    started = time.strftime("%H:%M UTC", time.gmtime())
    load0 = os.getloadavg()
    for size, nc in zip(sizes, n_cfg, strict=False):
        for _ in range(nc):
            cfg = family_config(rng)
            for ids in IDS:
                seed = int(rng.integers(2**31))  # drawn for every kind, so --ids keeps the family's rows
                if ids not in id_kinds:
                    continue
                before = args.before if size in before_sizes else None
                rows.append({"size": size, **run_config(10**size, ids, cfg, seed, args.reps, methods, before)})
                args.out.write_text(render(pd.DataFrame(rows), command + " (partial: run still going)"), "utf-8")
    table = pd.DataFrame(rows)
    load1 = os.getloadavg()
    command += (
        f" (started {started}; load average 1/5/15 min {load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f} at the start, "
        f"{load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f} at the end)"
    )
    text = render(table, command)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return text


def _logged_row(line: str) -> dict[str, object] | None:
    """A row as :func:`run_config` prints it (a dict literal), with its size (exponent); None for other lines."""
    import ast
    import math

    if not line.startswith("{'labels'"):
        return None
    row = ast.literal_eval(line.replace("nan", "None"))
    row = {k: (float("nan") if v is None else v) for k, v in row.items()}
    return {"size": round(math.log10(float(row["labels"]))), **row}


def _passes(r: Mapping[Any, Any], key: str) -> str:
    """`` (n)`` for a method that ran (its EM passes), nothing for one left out by ``--methods``."""
    n = r.get(key, float("nan"))
    return f" ({int(n)})" if pd.notna(n) else ""


def render(table: pd.DataFrame, command: str) -> str:
    """The results page: the ratios over the family, then every configuration."""
    lines = [
        "# Skills speed vs Crowd-Kit over a family of shapes (issue #19)\n",
        f"`python -m benchmarks.skills_speed {command}` on "
        f"{platform.machine()}, Python {platform.python_version()}, a shared 2-core host, single-threaded BLAS; "
        "one process. Ours: whole `fit_skills(df, method=...)`, best of the reps (one run at 10^7); Crowd-Kit MV "
        "the same, "
        "Crowd-Kit DS one run (at 10^7 capped to 5 EM iterations: a lower bound of its time, see the module "
        "docstring). Family and rules: `benchmarks/skills_speed.py`.\n",
        "## Ratios ours / Crowd-Kit over the family (lower is faster)\n",
        *summary(table),
        "\n## Every configuration (seconds; worst DS / Crowd-Kit DS first within each size)\n",
        "| labels | ids | classes | k_max | workers | zipf | ours MV | CK MV | ours DS (EM passes) | ours 1-coin DS "
        "(passes) | ours PGD | CK DS (iters run / cap) | ours DS estimator, same arguments | before DS (passes) "
        "| before 1-coin DS | DS/CK DS | estimator/CK DS | 1-coin/CK DS | before DS/CK DS | PGD/CK DS | MV/CK MV |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    table = table.sort_values(["size", "ids"], kind="stable")
    order = (table["ds"] / table["ck_ds"]).groupby(table["size"]).rank(ascending=False, method="first")
    table = table.assign(_order=order).sort_values(["size", "_order"], kind="stable")
    for r in table.to_dict("records"):
        before = (
            f"{r['before_ds']:.3f} ({int(r['before_ds_iter'])}) | {r['before_onecoin_ds']:.3f}"
            if pd.notna(r.get("before_ds", float("nan")))
            else "— | —"
        )
        b_ratio = f"{r['before_ds'] / r['ck_ds']:.3f}" if pd.notna(r.get("before_ds", float("nan"))) else "—"
        lines.append(
            f"| {r['labels']:,} | {r['ids']} | {r['classes']} | {r['k_max']} | {r['workers']:,} | {r['zipf']:.2f} | "
            f"{r['mv']:.3f} | {r['ck_mv']:.3f} | {r['ds']:.3f}{_passes(r, 'ds_iter')} | "
            f"{r['onecoin_ds']:.3f}{_passes(r, 'onecoin_ds_iter')} | {r['pgd']:.3f} | "
            f"{r['ck_ds']:.2f} ({int(r['ck_ds_ran'])} / {int(r['ck_ds_iter'])}) | {r['ds_est']:.3f} | {before} | "
            f"{r['ds'] / r['ck_ds']:.3f} | {r['ds_est'] / r['ck_ds']:.3f} | {r['onecoin_ds'] / r['ck_ds']:.3f} | "
            f"{b_ratio} | "
            f"{r['pgd'] / r['ck_ds']:.3f} | {r['mv'] / r['ck_mv']:.2f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
