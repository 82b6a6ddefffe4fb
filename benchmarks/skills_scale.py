"""Scale benchmark of the rank-one PGD skills fit: time and peak memory per step.

Run: ``python -m benchmarks.skills_scale`` (``--sizes 5 6 7`` = 10^5, 10^6, 10^7 labels; writes
``benchmarks/results/skills_scale.md``).

Synthetic one-coin binary data (``crowdflow.synth.skills``): 10 labels per task, 2,000 workers, 10^(k−1)
tasks; 30 % near-spammers (s ~ U[−0.05, 0.05]), the rest s ~ U[0.3, 0.9]. Each size runs in its
own subprocess so peak memory is that size's own:

1. ``fit_skills(labels_df, method="pgd", solver="scaled", spectral=False)`` as a whole (the library
   defaults when this was measured: diagnostics without eigenvalues), its per-step wall times (``SkillsResult.timings``: encode,
   moments, graph, fit, consensus, diagnostics) and the process's peak RSS
   (``resource.getrusage``; includes the input DataFrame, reported separately as ``input RSS``);
2. the same steps called one by one with a sampling thread reading /proc/self/statm every 2 ms:
   peak RSS while each step runs (a sampler can miss a peak shorter than 2 ms; the getrusage
   peak above cannot);
3. the spectral diagnostics on their own (``spectral=True, spectral_max_nnz=None``: eigsh on the
   one 2,000-worker component), their price (on by default in `SkillsOptions`);
4. the larger-than-memory path: the labels written as Parquet files of 10^6 rows, then
   ``fit_skills_partitioned`` (PGD, passes over task buckets in this process, docs/methods/skills.md §4.2);
5. the other methods as whole ``fit_skills`` calls on the same labels: majority vote, one-coin DS,
   classic DS (``ds_prior=0``) and the default (``fit_skills`` defaults: DS with ``ds_prior=1``,
   docs/methods/skills.md §7.3): time, EM iterations and error.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "skills_scale.md"
PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


class _Sampler:
    def __init__(self) -> None:
        self.peak = _rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.002)

    def __enter__(self) -> _Sampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _rss())


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(exp: int, n_workers: int) -> dict:

    from crowdflow import skills as sk
    from crowdflow.graphs import graph_structure
    from crowdflow.synth import skills as synth

    warnings.simplefilter("ignore", RuntimeWarning)
    n_labels = 10**exp
    per_task = 10
    n_tasks = n_labels // per_task
    rng = np.random.default_rng(exp)
    s = np.where(rng.random(n_workers) < 0.3, rng.uniform(-0.05, 0.05, n_workers), rng.uniform(0.3, 0.9, n_workers))
    wi, ti = synth.random_assignment(n_workers, n_tasks, per_task, seed=exp)
    data = synth.one_coin_labels(s, wi, ti, 2, seed=exp)
    labels = data.labels
    del wi, ti
    out: dict = {"labels": n_labels, "tasks": n_tasks, "workers": n_workers, "input RSS": _rss()}

    # 1. whole call
    t0 = time.perf_counter()
    res = sk.fit_skills(labels, method="pgd", solver="scaled", spectral=False)
    out["fit_skills s"] = time.perf_counter() - t0
    out["peak RSS (whole run)"] = _peak_rss()
    out["steps s"] = res.timings
    out["iterations"] = res.metadata["iterations"]
    out["error"] = sk.prediction_error(res.consensus, data.truth)
    del res
    # the first EM call of a process loads the compiled kernel from numba's on-disk cache: timed
    # once on a tiny input and reported on its own, so that the rows below compare the methods
    tiny = labels.iloc[: per_task * 20]
    t0 = time.perf_counter()
    sk.fit_skills(tiny, method="ds", spectral=False)
    out["kernel load s"] = time.perf_counter() - t0
    baselines = {}
    others: dict[str, dict[str, object]] = {
        "mv": {"method": "mv"},
        "onecoin_ds": {"method": "onecoin_ds"},
        "ds β=0": {"method": "ds", "ds_prior": 0.0},
        "default (ds β=1)": {},
    }
    for method, options in others.items():
        t0 = time.perf_counter()
        res = sk.fit_skills(labels, spectral=False, **options)
        secs = time.perf_counter() - t0
        baselines[method] = {
            "s": secs,
            "fit s": res.timings.get("fit", float("nan")),
            "iterations": res.metadata["iterations"],
            "converged": bool(res.metadata["converged"]),
            "error": sk.prediction_error(res.consensus, data.truth),
        }
        del res
    out["baselines"] = baselines
    out["MV error"] = baselines["mv"]["error"]

    # 2. step by step with an RSS sampler
    steps: dict[str, tuple[float, int]] = {}

    def step(name: str, fn):
        with _Sampler() as smp:
            t = time.perf_counter()
            val = fn()
            dt = time.perf_counter() - t
        steps[name] = (dt, smp.peak)
        return val

    lm, _ = step("encode", lambda: sk.prepare_labels(labels))
    mo = step("moments", lambda: sk.label_moments(lm))
    st = step("graph", lambda: graph_structure(mo.co_labels, symmetric=True))

    def fit():
        w = sk.edge_weights(mo.co_labels)
        base = np.where(st.graph.bipartite, "bipartite_component", "ok").astype(object)
        status, active, lo, hi, ag, _ = sk.active_workers(st.graph, base, w, lm.labels_per_worker(), 2, 1.0)
        x, _, _ = sk.fit_active(
            active,
            ag,
            w,
            mo.c_hat,
            lo,
            hi,
            x0=0.5,
            eta=None,
            tol=1e-7,
            max_iter=5000,
            solver="scaled",
            sign_mode="sum_rule",
        )
        return w, x, active, lo, hi, status

    w, x, active, lo, hi, status = step("fit", fit)
    step("consensus", lambda: sk.weighted_consensus(lm, sk.vote_weights(x, 2, lo, hi), identified=active))
    step(
        "diagnostics",
        lambda: sk.component_diagnostics(lm, mo.co_labels, w, st.graph, x, status.astype(str), spectral=False),
    )
    out["step peak RSS"] = {k: v[1] for k, v in steps.items()}
    out["step s (separate)"] = {k: v[0] for k, v in steps.items()}
    t = time.perf_counter()
    sk.component_diagnostics(lm, mo.co_labels, w, st.graph, x, status.astype(str), spectral=True, spectral_max_nnz=None)
    out["spectral diagnostics s"] = time.perf_counter() - t
    out["N nnz"] = int(mo.co_labels.nnz)

    # 4. larger than memory: Parquet files of 10^6 rows, passes over task buckets in this process
    import tempfile

    batch_rows = min(10**6, max(n_labels // 10, 1))
    with tempfile.TemporaryDirectory(prefix="skills-scale-") as tmp:
        folder = os.path.join(tmp, "labels")
        os.mkdir(folder)
        for k, start in enumerate(range(0, n_labels, batch_rows)):
            labels.iloc[start : start + batch_rows].to_parquet(os.path.join(folder, f"part-{k:04d}.parquet"))
        t = time.perf_counter()
        part = sk.fit_skills_partitioned(folder, out_folder=os.path.join(tmp, "out"), method="pgd", spectral=False)
        out["stream pass 1 s"] = time.perf_counter() - t
        import pandas as pd

        cons = pd.concat([pd.read_parquet(p) for p in part.consensus_parts], ignore_index=True)
    out["stream error"] = sk.prediction_error(cons, data.truth)
    out["stream batches"] = len(part.consensus_parts)
    out["peak RSS (incl. partitioned)"] = _peak_rss()
    return out


def _gb(b: float) -> str:
    return f"{b / 2**30:.2f}"


def report(results: list[dict]) -> str:
    lines = [
        "# Skills at scale: rank-one PGD time and peak memory per step",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}; shared "
        "2-core host (other jobs running: timings are indicative), single-threaded BLAS. Synthetic binary "
        "one-coin labels, 10 labels/task, 30 % near-spammers; string ids. One subprocess per size.",
        "",
        '## Whole `fit_skills(labels_df, method="pgd", solver="scaled", spectral=False)`',
        "",
        "| labels | tasks | workers | N nnz | total s | encode | moments | graph | fit | consensus | "
        "diagnostics | iterations | input RSS GB | peak RSS GB | PGD error | MV error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r["steps s"]
        lines.append(
            f"| {r['labels']:.0e} | {r['tasks']} | {r['workers']} | {r['N nnz']} | {r['fit_skills s']:.2f} | "
            + " | ".join(
                f"{s.get(k, float('nan')):.2f}"
                for k in ("encode", "moments", "graph", "fit", "consensus", "diagnostics")
            )
            + f" | {r['iterations']} | {_gb(r['input RSS'])} | {_gb(r['peak RSS (whole run)'])} | "
            f"{r['error']:.4f} | {r['MV error']:.4f} |"
        )
    lines += [
        "",
        "## The default and the other methods: whole `fit_skills(labels_df, ..., spectral=False)` on the same labels",
        "",
        "Dawid–Skene EM with the classic stop rule (parameter change < 1e-6 or 100 iterations), compiled "
        "loop; `fit` is the EM (or vote) step alone, the rest is the shared encoding, N and diagnostics. "
        "The first EM call of a process loads the compiled kernel from numba's on-disk cache, a one-time "
        "cost measured on 200 labels before these rows: "
        + ", ".join(f"{r.get('kernel load s', float('nan')):.2f} s" for r in results)
        + " (one process per size).",
        "",
        "| labels | method | total s | fit s | iterations | converged | error |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for method, b in r.get("baselines", {}).items():
            lines.append(
                f"| {r['labels']:.0e} | {method} | {b['s']:.2f} | {b['fit s']:.2f} | {b['iterations']} | "
                f"{'yes' if b['converged'] else 'no'} | {b['error']:.4f} |"
            )
    lines += [
        "",
        "## Step by step: seconds / peak RSS (GB) while the step runs (sampled every 2 ms)",
        "",
        "| labels | encode | moments | graph | fit | consensus | diagnostics | spectral diagnostics s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s, p = r["step s (separate)"], r["step peak RSS"]
        cells = [
            f"{s[k]:.2f} s / {_gb(p[k])}" for k in ("encode", "moments", "graph", "fit", "consensus", "diagnostics")
        ]
        lines.append(f"| {r['labels']:.0e} | " + " | ".join(cells) + f" | {r['spectral diagnostics s']:.2f} |")
    lines += [
        "",
        "## Larger than memory (Parquet files of 10^6 rows, passes over task buckets in this process)",
        "",
        "| labels | buckets | fit_skills_partitioned s (all passes) | error (= in-memory) | "
        "peak RSS GB (process, incl. everything above) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['labels']:.0e} | {r['stream batches']} | {r['stream pass 1 s']:.2f} | "
            f"{r['stream error']:.4f} | {_gb(r['peak RSS (incl. partitioned)'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[5, 6, 7], help="exponents of the label count")
    ap.add_argument("--workers", type=int, default=2000)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.workers)))
        return ""
    results = []
    for exp in args.sizes:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.skills_scale", "--child", str(exp), "--workers", str(args.workers)],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"  10^{exp} labels done", flush=True)
    text = report(results)
    print(text)
    if not args.no_write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text)
    return text


if __name__ == "__main__":
    main()
