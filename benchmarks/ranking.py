"""Benchmark of robust global ranking (HodgeRank / HLASSO / LBI), docs/methods/ranking.md §8, §9.

Run: ``python -m benchmarks.ranking`` (flags: ``--reps N`` repetitions per cell of the MM13 table,
default 20 as in the paper; ``--quick`` = 3 repetitions, smaller scale points and no 10⁷ point, ``--large``
adds it back; ``--skip-mm13`` / ``--skip-scale`` / ``--skip-data`` keep that section of the existing result
file, labelled as carried over; ``--heldout-only`` and ``--scale-only`` are shorthands). Prints markdown and
writes ``benchmarks/results/ranking.md``. Peers (choix, Evalica) come from the ``bench`` extra.

1. **MM13 simulation (docs/methods/ranking.md §8.2, MM13 Table 1).** n = 16 items, a random total order,
   SN ∈ {1000..5000} uniform ±1 comparisons (multigraph), a random OP fraction reversed. Every comparison is scored by its
   entry order on the regularisation path and the ROC-AUC against the true reversals is averaged over the
   repetitions. Two paths: the HLASSO (LASSO) path as in the paper (100-point geometric λ grid from
   λ_max down to 10⁻³λ_max, interpolated entry λ) and LBI Algorithm 3 (κ = 100, Δt = 1/κ, t ≤ 10, i.e.
   1,000 steps). Identical rows are merged (docs/methods/ranking.md §1.3; exact). The paper's numbers are
   printed alongside.
2. **Scale.** (a) HodgeRank least squares with our sparse solver (``ComparisonGraph.from_arrays`` +
   grounded-Laplacian LU/CG + solve) versus the dense peer ``numpy.linalg.lstsq`` on the dense m×n
   incidence (construction included on both sides), same data, same run; medians of 3 repeats, ratio =
   dense / sparse. (b) The same LS fit versus choix ILSR and Evalica Bradley–Terry / Elo on identical
   Bradley–Terry comparisons at 10⁵, 10⁶ (n = 1,000) and 10⁷ (n = 10⁵) rows, one subprocess per cell
   (peak RSS, address-space limit, wall-time cap). (c) LBI: ``fit_lbi`` and the full Algorithm 3 path on
   10⁵ comparisons; per-iteration cost of Algorithm 2 vs Sync-LBI (1 and 2 threads) and Algorithm 3 at
   m = 10⁶.
3. **Held-out prediction on public pairwise data** (``/work/shared/data``; skipped with a message if
   absent): 5 random 80/20 splits of the comparison rows; fit on 80 %, predict the sign of the held-out
   non-tie comparisons whose two items lie in the same training component; accuracy of LS HodgeRank,
   HLASSO (5 % budget, debiased), LBI (Alg. 3, 5 % budget, debiased), choix ILSR, a Bradley–Terry MLE
   (``choix.opt_pairwise``), Evalica BT / Elo and the per-item win-rate baseline, with fit times.
   For the Urbano music-similarity set every item is keyed by (query, item), since similarity is
   relative to the query melody (11 queries = 11 components).

BLAS is pinned to one thread (must precede the numpy import): on the shared 2-core host a
multi-threaded OpenBLAS spin-waits under contention and dense LAPACK calls become 10–100× slower.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.stats import rankdata  # noqa: E402

from crowdflow.ranking import (  # noqa: E402
    ComparisonGraph,
    LaplacianSolver,
    build_comparison_graph,
    canonical_comparisons,
    fit_hlasso,
    fit_hodgerank,
    fit_lbi,
    group_identical_rows,
    hlasso_path,
    hodgerank_scores,
    laplacian_lambda_max,
    lbi_alg2,
    lbi_alg3,
    shrink,
    sync_lbi,
)
from crowdflow.synth.ranking import mm13_instance, random_pairs  # noqa: E402

DATA = Path("/work/shared/data")
OUT = Path(__file__).resolve().parent / "results" / "ranking.md"

SN_GRID = [1000, 2000, 3000, 4000, 5000]
OP_GRID = [0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50]
# MM13 Table 1, AUC mean (sd) of the LASSO path, 20 repetitions
PAPER = {
    1000: [
        ".999(0)",
        ".999(.001)",
        ".998(.001)",
        ".996(.003)",
        ".992(.005)",
        ".983(.010)",
        ".962(.016)",
        ".903(.038)",
        ".782(.050)",
        ".503(.065)",
    ],
    2000: [
        ".999(0)",
        ".999(0)",
        ".999(0)",
        ".998(.001)",
        ".997(.001)",
        ".992(.004)",
        ".986(.007)",
        ".956(.019)",
        ".849(.052)",
        ".493(.086)",
    ],
    3000: [
        ".999(0)",
        ".999(0)",
        ".999(0)",
        ".999(0)",
        ".998(0)",
        ".996(.002)",
        ".990(.004)",
        ".971(.013)",
        ".885(.032)",
        ".479(.058)",
    ],
    4000: [
        ".999(0)",
        ".999(0)",
        ".999(0)",
        ".999(0)",
        ".999(0)",
        ".997(.001)",
        ".994(.002)",
        ".980(.008)",
        ".903(.028)",
        ".519(.055)",
    ],
    5000: [
        ".999(0)",
        ".999(0)",
        ".999(0)",
        ".999(0)",
        ".999(0)",
        ".998(.001)",
        ".994(.002)",
        ".984(.009)",
        ".933(.022)",
        ".501(.066)",
    ],
}


def auc(score: np.ndarray, truth: np.ndarray) -> float:
    """ROC-AUC (Mann–Whitney, ties averaged); larger score = predicted outlier."""
    r = rankdata(score)
    n1 = int(truth.sum())
    n0 = truth.size - n1
    return float((r[truth].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def bench_mm13(reps: int) -> str:
    rows_l, rows_h = [], []
    t0 = time.perf_counter()
    for sn in SN_GRID:
        cells_l, cells_h = [], []
        for op in OP_GRID:
            a_l, a_h = [], []
            for rep in range(reps):
                inst = mm13_instance(1000 * sn + rep, sn, op)
                g, flip = inst.graph, inst.outlier
                gf, grp, _ = group_identical_rows(g)
                p = lbi_alg3(gf, kappa=100.0, stop_rule="none", t_max=10.0)
                a_l.append(auc(p.order_key[grp], flip))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    q = hlasso_path(gf, n_lambdas=100, lambda_min_ratio=1e-3, max_iter=5000)
                a_h.append(auc(q.order_key[grp], flip))
            sd = lambda a: np.std(a, ddof=1) if len(a) > 1 else 0.0  # noqa: E731
            cells_l.append(f"{np.mean(a_l):.3f}({sd(a_l):.3f})")
            cells_h.append(f"{np.mean(a_h):.3f}({sd(a_h):.3f})")
        rows_l.append(cells_l)
        rows_h.append(cells_h)
    elapsed = time.perf_counter() - t0
    head = (
        "| SN \\ OP | " + " | ".join(f"{int(op * 100)}%" for op in OP_GRID) + " |\n|---|" + "---|" * len(OP_GRID) + "\n"
    )
    out = [
        "## 1. MM13 simulation: ROC-AUC of the path entry order (docs/methods/ranking.md §8.2, MM13 Table 1)\n\n",
        f"n = 16, mean(sd) over **{reps} repetitions** per cell (the paper used 20); total {elapsed:.0f} s.\n\n",
        "### Paper (MM13 Table 1, LASSO path via R quadrupen)\n\n",
        head + "".join(f"| {sn} | " + " | ".join(PAPER[sn]) + " |\n" for sn in SN_GRID),
        "\n### Ours: HLASSO path (Algorithm 1 path, 100-point λ grid)\n\n",
        head + "".join(f"| {sn} | " + " | ".join(c) + " |\n" for sn, c in zip(SN_GRID, rows_h, strict=False)),
        "\n### Ours: LBI Algorithm 3 (κ = 100, Δt = 1/κ, 1,000 steps)\n\n",
        head + "".join(f"| {sn} | " + " | ".join(c) + " |\n" for sn, c in zip(SN_GRID, rows_l, strict=False)),
    ]
    return "".join(out)


def _median_time(fn, repeats: int = 3) -> tuple[float, object]:
    ts, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)), out


def _random_problem(n: int, m: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    i, j = random_pairs(rng, n, m)
    th = rng.standard_normal(n)
    y = th[i] - th[j] + 0.5 * rng.standard_normal(m)
    return i, j, y


def bench_scale(quick: bool) -> str:
    pts_dense = (
        [(100, 1_000), (300, 3_000), (1_000, 10_000)]
        if quick
        else [(100, 1_000), (300, 3_000), (1_000, 10_000), (1_500, 30_000)]
    )
    pts_sparse = [(10_000, 100_000)] if quick else [(10_000, 100_000), (10_000, 1_000_000), (100_000, 1_000_000)]
    lines = [
        "## 2. Scale\n\n### 2a. HodgeRank least squares, sparse (ours) vs dense `numpy.linalg.lstsq` (peer)\n\n",
        "Random uniform pairs, y = θ_i − θ_j + N(0, 0.5²). Times include building the operator from the "
        "index arrays on both sides; medians of 3 repeats; ratio = dense / sparse.\n\n",
        "| n | m | solver | sparse (s) | dense lstsq (s) | ratio | max abs diff θ |\n|---|---|---|---|---|---|---|\n",
    ]

    def sparse_fit(i, j, y, n):
        g = ComparisonGraph.from_arrays(i, j, y, n=n)
        s = LaplacianSolver.from_graph(g)
        return hodgerank_scores(g, s), s.method

    def dense_fit(i, j, y, n):
        X = np.zeros((y.size, n))
        r = np.arange(y.size)
        X[r, i] = 1.0
        X[r, j] = -1.0
        th = np.linalg.lstsq(X, y, rcond=None)[0]
        return th - th.mean()

    for n, m in pts_dense:
        i, j, y = _random_problem(n, m)
        ts, (th_s, meth) = _median_time(lambda: sparse_fit(i, j, y, n))
        td, th_d = _median_time(lambda: dense_fit(i, j, y, n))
        lines.append(
            f"| {n:,} | {m:,} | {meth} | {ts:.4f} | {td:.4f} | {td / ts:.1f}× | {np.abs(th_s - th_d).max():.1e} |\n"
        )
    for n, m in pts_sparse:
        i, j, y = _random_problem(n, m)
        ts, (th_s, meth) = _median_time(lambda: sparse_fit(i, j, y, n))
        lines.append(f"| {n:,} | {m:,} | {meth} | {ts:.3f} | — (dense X would be {8 * n * m / 1e9:.0f} GB) | — | — |\n")
    return "".join(lines)


# ---------------------------------------------------------------------------------------------------
# Scale vs peers (choix ILSR, Evalica): one subprocess per cell, for peak RSS and a hard time cap
# ---------------------------------------------------------------------------------------------------

CHOIX_ALPHA = 0.01  # ILSR regulariser (a small prior; keeps the LSR chain irreducible on sparse data)
MEM_LIMIT_GB = 12  # address-space cap of every scale cell (shared host: a dense n×n peer fails fast)


def _load() -> str:
    """The host's 1/5/15-minute load averages (the machine is shared)."""
    a, b, c = os.getloadavg()
    return f"load average {a:.1f} / {b:.1f} / {c:.1f} (1/5/15 min)"


def _bt_problem(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Uniform random pairs with Bradley–Terry outcomes, θ ~ N(0, 1); ``win`` = first item preferred."""
    rng = np.random.default_rng(seed)
    i, j = random_pairs(rng, n, m)
    th = rng.standard_normal(n)
    win = rng.random(m) < 1.0 / (1.0 + np.exp(-(th[i] - th[j])))
    return i, j, win, th


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _emit(**kw) -> None:
    import json

    print("CELL " + json.dumps(kw), flush=True)


def _cell_main(method: str, n: int, m: int, repeats: int) -> None:
    """Run one scale cell (called in a subprocess); prints ``CELL {json}`` lines as results arrive."""
    from scipy.stats import spearmanr

    i, j, win, th = _bt_problem(n, m)
    if method == "ours":
        y = np.where(win, 1.0, -1.0)
        prep = None
    elif method == "choix_ilsr":
        import choix

        wl = np.where(win[:, None], np.column_stack([i, j]), np.column_stack([j, i]))
        prep = [tuple(p) for p in wl.tolist()]  # choix's input format, built outside the timer
        del wl
    else:
        import evalica

        prep = [evalica.Winner.X if w else evalica.Winner.Y for w in win.tolist()]
        index = pd.Index(range(n))
    base = _peak_rss_mb()
    _emit(kind="base", rss_mb=base)

    def fit() -> np.ndarray:
        if method == "ours":
            g = ComparisonGraph.from_arrays(i, j, y, n=n)
            return hodgerank_scores(g, LaplacianSolver.from_graph(g))
        if method == "choix_ilsr":
            return choix.ilsr_pairwise(n, prep, alpha=CHOIX_ALPHA, max_iter=10_000)
        fn = evalica.bradley_terry if method == "evalica_bt" else evalica.elo
        return fn(i, j, prep, index=index).scores.reindex(range(n)).to_numpy()

    if method == "choix_ilsr":  # one LSR step = one ILSR iteration: a measured lower bound if capped
        t0, c0 = time.perf_counter(), time.process_time()
        choix.lsr_pairwise(n, prep, alpha=CHOIX_ALPHA)
        _emit(kind="one_step", wall=time.perf_counter() - t0, cpu=time.process_time() - c0)
    for r in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        est = fit()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rho = float(spearmanr(np.log(est) if method == "evalica_bt" else est, th)[0])
        _emit(kind="run", wall=wall, cpu=cpu, rss_mb=_peak_rss_mb(), rho=rho)
        if wall > 40 and r == 0:  # slow peer: one run only
            break


def _run_cell(method: str, n: int, m: int, repeats: int, cap: float) -> dict:
    """Run :func:`_cell_main` in a subprocess with a wall-time cap and an address-space limit."""
    import json
    import resource
    import subprocess
    import sys

    def limit() -> None:
        lim = MEM_LIMIT_GB * 1024**3
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))

    code = f"from benchmarks.ranking import _cell_main; _cell_main({method!r}, {n}, {m}, {repeats})"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    root = Path(__file__).resolve().parent.parent
    status, out, err = "ok", "", ""
    try:
        p = subprocess.run(
            [sys.executable, "-c", code],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=cap,
            preexec_fn=limit,
        )
        out, err = p.stdout, p.stderr
        if p.returncode != 0:
            status = "error"
    except subprocess.TimeoutExpired as e:
        status = "capped"
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    recs = [json.loads(line[5:]) for line in out.splitlines() if line.startswith("CELL ")]
    runs = [r for r in recs if r["kind"] == "run"]
    err_lines = [ln for ln in err.strip().splitlines() if "failed" in ln or "Error" in ln] or err.strip().splitlines()
    res = {"status": status, "runs": runs, "error": err_lines[0] if status == "error" and err_lines else ""}
    for r in recs:
        if r["kind"] == "base":
            res["base_mb"] = r["rss_mb"]
        if r["kind"] == "one_step":
            res["one_step"] = r["wall"]
    if runs:
        res["wall"] = float(np.median([r["wall"] for r in runs]))
        res["cpu"] = float(np.median([r["cpu"] for r in runs]))
        res["peak_mb"] = max(r["rss_mb"] for r in runs)
        res["rho"] = runs[-1]["rho"]
    return res


def bench_peers(quick: bool, large: bool) -> tuple[str, dict]:
    """HodgeRank LS (ours) vs choix ILSR and Evalica BT / Elo on the same BT comparisons."""
    pts = [(1_000, 100_000), (1_000, 1_000_000)]
    if quick:
        pts = [(1_000, 100_000)]
    if large or not quick:
        pts.append((100_000, 10_000_000))
    cap = 150.0
    peers = [("ours", "HodgeRank LS (ours)"), ("choix_ilsr", f"choix ILSR (α={CHOIX_ALPHA})")]
    peers += [("evalica_bt", "Evalica BT"), ("evalica_elo", "Evalica Elo")]
    lines = [
        "### 2b. HodgeRank LS vs choix ILSR and Evalica on the same comparisons\n\n",
        "Uniform random pairs over n items with Bradley–Terry outcomes (θ ~ N(0,1)), ±1 to HodgeRank, "
        "(winner, loser) tuples to choix (built outside the timer), `Winner` lists to Evalica (pyo3 solver). "
        f"Every cell runs in its own subprocess (peak RSS = `ru_maxrss`; 'data' = RSS after building the "
        f"inputs; address space capped at {MEM_LIMIT_GB} GB; wall-time cap {cap:.0f} s per cell). Wall and "
        "process-CPU times are medians of 3 runs (1 run when a run takes > 40 s). 'ratio' = peer wall / ours. "
        "ρ = Spearman correlation of the estimate with the true θ. **The host was shared with other jobs "
        f"({_load()} at the start of this section, 2 cores) — absolute times can be inflated; compare within a "
        "row block.**\n\n",
        "| n | m | method | wall (s) | CPU (s) | ratio | peak RSS / data (MB) | ρ | note |\n",
        "|---|---|---|---|---|---|---|---|---|\n",
    ]
    summary: dict = {}
    for n, m in pts:
        ours_wall = None
        for key, label in peers:
            if key == "choix_ilsr" and n * n * 8 > MEM_LIMIT_GB * 1024**3:
                # choix/lsr.py allocates the LSR chain as a dense n×n float array (np.ones((n, n)))
                lines.append(
                    f"| {n:,} | {m:,} | {label} | — | — | — | — | — | not run: its dense n×n LSR chain needs "
                    f"{n * n * 8 / 1e9:.0f} GB |\n"
                )
                continue
            res = _run_cell(key, n, m, 3, cap)
            summary[(key, n, m)] = res
            note = ""
            if res["status"] == "capped":
                note = f"**capped at {cap:.0f} s**"
                if "one_step" in res:
                    note += f"; one ILSR iteration alone took {res['one_step']:.1f} s"
            elif res["status"] == "error":
                note = f"failed (RLIMIT_AS {MEM_LIMIT_GB} GB): `{res['error'][:70]}`"
            elif "one_step" in res:
                note = f"one ILSR iteration {res['one_step']:.1f} s"
            if "wall" in res:
                if key == "ours":
                    ours_wall = res["wall"]
                ratio = f"{res['wall'] / ours_wall:.1f}×" if ours_wall and key != "ours" else "1"
                lines.append(
                    f"| {n:,} | {m:,} | {label} | {res['wall']:.2f} | {res['cpu']:.2f} | {ratio} | "
                    f"{res['peak_mb']:.0f} / {res.get('base_mb', float('nan')):.0f} | {res['rho']:.3f} | {note} |\n"
                )
            else:
                lb = cap if res["status"] == "capped" else None
                ratio = f"> {lb / ours_wall:.0f}×" if lb and ours_wall else "—"
                wall = f"> {cap:.0f}" if lb else "—"
                lines.append(f"| {n:,} | {m:,} | {label} | {wall} | — | {ratio} | — | — | {note} |\n")
    return "".join(lines), summary


def _gil_released(fn, calls: int = 40) -> tuple[bool, float, float]:
    """Does ``fn`` release the GIL? With a 5 s switch interval, a thread waiting for the GIL gets it back
    within milliseconds only if the worker thread drops it inside ``fn``; otherwise after all calls."""
    import sys
    import threading

    def work() -> None:
        for _ in range(calls):
            fn()

    t0 = time.perf_counter()
    work()
    solo = time.perf_counter() - t0
    old = sys.getswitchinterval()
    sys.setswitchinterval(5.0)
    try:
        th = threading.Thread(target=work)
        t0 = time.perf_counter()
        th.start()
        time.sleep(0.001)
        back = time.perf_counter() - t0
        th.join()
    finally:
        sys.setswitchinterval(old)
    return back < 0.5 * solo, back, solo


def bench_lbi(quick: bool) -> tuple[str, dict]:
    """LBI path on 10^5 comparisons, and Algorithm 2 vs Sync-LBI per-iteration cost at 10^6."""
    lines = ["### 2c. LBI timings\n\n"]
    n, m, op = 1_000, 100_000, 0.10
    i, j, win, _ = _bt_problem(n, m, seed=3)
    rng = np.random.default_rng(4)
    y = np.where(win, 1.0, -1.0)
    flip = rng.random(m) < op
    y[flip] *= -1
    out: dict = {}
    t0 = time.perf_counter()
    g = ComparisonGraph.from_arrays(i, j, y, n=n)
    fit = fit_lbi(g, diagnostics=False)
    out["fit_lbi"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    gf, _, _ = group_identical_rows(g)
    path = lbi_alg3(gf, stop_rule="none", t_max=10.0)
    out["alg3_path"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    p2 = lbi_alg2(g, stop_rule="budget", budget=0.10)
    out["alg2_budget"] = time.perf_counter() - t0
    lines.append(
        f"LBI on m = {m:,} comparisons over n = {n:,} items ({op:.0%} of the BT outcomes flipped), wall time "
        "including graph construction:\n\n"
        "| run | iterations | wall (s) |\n|---|---|---|\n"
        f"| `fit_lbi` (Algorithm 3, 5 % budget stop, debiased refit, no diagnostics) | {fit.params['n_iter']:,} | "
        f"{out['fit_lbi']:.2f} |\n"
        f"| Algorithm 3 full path to t = 10 (κ = 100, Δt = 1/κ) | {path.n_iter:,} | {out['alg3_path']:.2f} |\n"
        f"| Algorithm 2 (θ gradient steps, LS warm start) to a 10 % budget | {p2.n_iter:,} | {out['alg2_budget']:.2f} |\n\n"
    )
    # Alg. 2 vs Sync-LBI per iteration
    n, m = (10_000, 200_000) if quick else (10_000, 1_000_000)
    i, j, y = _random_problem(n, m, seed=1)
    g = ComparisonGraph.from_arrays(i, j, np.sign(y))
    g.X, g.XT  # noqa: B018 - build the lazily created operators outside the timers
    lm = laplacian_lambda_max(g.L)
    k = 20
    kw = {"kappa": 100.0, "theta0": "zero", "stop_rule": "none", "max_iter": k, "lam_max": lm}
    res = {}
    for name, fn in [
        ("Algorithm 2", lambda: lbi_alg2(g, **kw)),
        ("Sync-LBI, 1 thread", lambda: sync_lbi(g, n_workers=1, **kw)),
        ("Sync-LBI, 2 threads", lambda: sync_lbi(g, n_workers=2, **kw)),
    ]:
        walls, cpus = [], []
        for _ in range(3):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        res[name] = (float(np.median(walls)) / k, float(np.median(cpus)) / k)
    s3 = LaplacianSolver.from_graph(g)
    t3, _ = _median_time(lambda: lbi_alg3(g, solver=s3, stop_rule="none", max_iter=k))
    base = res["Algorithm 2"][0]
    lines.append(
        f"Per-iteration cost at n = {n:,}, m = {m:,} ({k} iterations, median of 3; CPU = process CPU time, "
        "which exceeds wall time only when both cores work):\n\n| algorithm | ms / iteration (wall) | "
        "ms / iteration (CPU) | speed-up vs Algorithm 2 |\n|---|---|---|---|\n"
    )
    for name, (wt, ct) in res.items():
        lines.append(f"| {name} | {wt * 1e3:.1f} | {ct * 1e3:.1f} | {base / wt:.2f}× |\n")
    lines.append(f"| Algorithm 3 ({s3.method} solves) | {t3 / k * 1e3:.1f} | — | {base / (t3 / k):.2f}× |\n")
    xb = g.X[: m // 2]
    v = np.ones(m // 2)
    checks = [("`X_b @ θ` (CSR)", lambda: xb @ np.ones(n)), ("`X_bᵀ @ v` (CSC view)", lambda: xb.T @ v)]
    checks.append(("`shrink` (numpy ufuncs)", lambda: shrink(v)))
    gil = "; ".join(
        f"{name}: {'released' if ok else '**held**'} (waiting thread resumed after {back * 1e3:.1f} ms of {solo * 1e3:.0f} ms)"
        for name, (ok, back, solo) in ((nm, _gil_released(fn)) for nm, fn in checks)
    )
    lines.append(
        f"\nGIL check of the Sync-LBI block kernels (switch interval 5 s, 40 calls in a worker thread): {gil}. "
        "Both threads can therefore run at once; the speed-up of Sync-LBI is bounded by the cores the host "
        "leaves free (CPU ≈ wall time for 2 threads means they did not overlap) and by memory bandwidth "
        "(the block kernels are streaming, bandwidth-bound loops).\n"
    )
    out["sync"] = res
    return "".join(lines), out


def _winrate(train: pd.DataFrame) -> pd.Series:
    a = pd.concat([train["item_a"], train["item_b"]])
    s = pd.concat([np.sign(train["outcome"]), -np.sign(train["outcome"])])
    return pd.Series(s.to_numpy(), index=a.to_numpy()).groupby(level=0).mean()


def _peer_scores(train: pd.DataFrame, method: str) -> pd.Series:
    """Scores of a peer fitted on the training rows (ties: dropped for choix, draws for Evalica)."""
    codes, items = pd.factorize(pd.concat([train["item_a"], train["item_b"]]), sort=True)
    n, mt = items.size, len(train)
    a, b = codes[:mt], codes[mt:]
    out = train["outcome"].to_numpy()
    if method.startswith("choix"):
        import choix

        keep = out != 0
        wl = np.where(
            (out[keep] > 0)[:, None], np.column_stack([a[keep], b[keep]]), np.column_stack([b[keep], a[keep]])
        )
        pairs = [tuple(p) for p in wl.tolist()]
        if method == "choix_ilsr":
            est = choix.ilsr_pairwise(n, pairs, alpha=CHOIX_ALPHA, max_iter=10_000)
        else:
            est = choix.opt_pairwise(n, pairs, alpha=BT_ALPHA)
    else:
        import evalica

        win = [evalica.Winner.X if o > 0 else evalica.Winner.Y if o < 0 else evalica.Winner.Draw for o in out]
        fn = evalica.bradley_terry if method == "evalica_bt" else evalica.elo
        est = fn(a, b, win, index=pd.Index(range(n))).scores.reindex(range(n)).to_numpy()
    return pd.Series(est, index=items)


BT_ALPHA = 1e-6  # choix.opt_pairwise's default: a vanishing ridge that keeps the MLE finite


def _holdout(df: pd.DataFrame, name: str, splits: int = 5) -> list[str]:
    ours = {
        "LS HodgeRank": lambda tr: fit_hodgerank(tr, allow_disconnected=True, diagnostics=False).ranking,
        "HLASSO 5% (debiased)": lambda tr: fit_hlasso(tr, allow_disconnected=True, diagnostics=False).ranking,
        "LBI Alg. 3 5% (debiased)": lambda tr: fit_lbi(tr, allow_disconnected=True, diagnostics=False).ranking,
    }
    peers = {
        f"choix ILSR (α={CHOIX_ALPHA})": "choix_ilsr",
        f"BT MLE (choix.opt_pairwise, α={BT_ALPHA:g})": "choix_bt",
        "Evalica BT": "evalica_bt",
        "Evalica Elo": "evalica_elo",
    }
    names = [*ours, *peers, "win rate"]
    accs: dict[str, list[float]] = {k: [] for k in names}
    secs: dict[str, list[float]] = {k: [] for k in names}
    n_test = []
    for seed in range(splits):
        rng = np.random.default_rng(seed)
        test_mask = rng.random(len(df)) < 0.2
        train, test = df[~test_mask].reset_index(drop=True), df[test_mask]
        scores: dict[str, pd.Series] = {}
        ref = None
        for k, fn in ours.items():
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                rk = fn(train)
            secs[k].append(time.perf_counter() - t0)
            ref = rk.set_index("item") if ref is None else ref
            scores[k] = rk.set_index("item")["score"]
        for k, key in peers.items():
            t0 = time.perf_counter()
            scores[k] = _peer_scores(train, key)
            secs[k].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        scores["win rate"] = _winrate(train)
        secs["win rate"].append(time.perf_counter() - t0)
        ok = test["item_a"].isin(ref.index) & test["item_b"].isin(ref.index) & (test["outcome"] != 0)
        tt = test[ok]
        same = ref.loc[tt["item_a"], "component"].to_numpy() == ref.loc[tt["item_b"], "component"].to_numpy()
        tt = tt[same]
        n_test.append(len(tt))
        truth = np.sign(tt["outcome"].to_numpy())
        for k, sc in scores.items():
            pred = np.sign(sc.loc[tt["item_a"]].to_numpy() - sc.loc[tt["item_b"]].to_numpy())
            accs[k].append(float(np.mean(np.where(pred == 0, 0.5, pred == truth))))
    return [
        f"| {name} | {k} | {np.mean(accs[k]):.4f} ± {np.std(accs[k], ddof=1):.4f} | {np.mean(secs[k]):.3f} | "
        f"{int(np.mean(n_test))} |\n"
        for k in names
    ]


def bench_data() -> str:
    lines = [
        "## 3. Held-out prediction on public pairwise data\n\n",
        "5 seeded random 80/20 splits of the rows (seeds 0–4); every method is fitted on the same 80 % and "
        "scored on the same held-out rows in the same run: accuracy (mean ± sd over splits) of the predicted "
        "winner on held-out non-tie comparisons whose items lie in one training component (score ties count "
        "1/2). Ties in the training rows: outcome 0 for HodgeRank / HLASSO / LBI, draws for Evalica, dropped "
        "for choix (no tie model). 'fit (s)' = mean wall time of one fit from the training table (ours: "
        "canonicalisation + graph + fit; peers: integer coding + fit). The pairwise sets in "
        "`/work/shared/data` are these two (its README lists no others). Host shared with other jobs.\n\n",
    ]
    table = ["| data set | method | accuracy | fit (s) | held-out rows / split |\n|---|---|---|---|---|\n"]
    diag_lines = []
    sets = {
        "urbano_music_similarity_pairwise": "Urbano music similarity (items keyed by query)",
        "zappos5_pairwise": "Zappos 5 shoes",
    }
    for key, label in sets.items():
        path = DATA / key / "comparisons.csv"
        if not path.exists():
            lines.append(f"\n*{key}: {path} not found — skipped.*\n")
            continue
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
        if key.startswith("urbano"):
            raw["item_a"] = raw["query"] + "|" + raw["item_a"]
            raw["item_b"] = raw["query"] + "|" + raw["item_b"]
            raw["winner"] = np.where(raw["winner"] == "tie", "tie", raw["query"] + "|" + raw["winner"])
        canon = canonical_comparisons(raw[["annotator", "item_a", "item_b", "winner"]]).drop(
            columns=["row_id", "weight"]
        )
        df = build_comparison_graph(canon)
        table += _holdout(canon, label)
        full = fit_lbi(canon, allow_disconnected=True)
        d = full.diagnostics
        w = d["weight"].to_numpy()
        agg = lambda c: float(np.nansum(d[c].to_numpy() * w) / w.sum())  # noqa: E731
        ann = full.annotators
        top = ann[ann.n_comparisons >= 10].sort_values("outlier_rate", ascending=False)
        diag_lines.append(
            f"| {label} | {len(canon):,} | {df.n:,} | {df.n_components} | {agg('total_inconsistency'):.3f} | "
            f"{agg('bicycle_share'):.3f} | {agg('curl_share'):.3f} | {agg('harmonic_share'):.3f} | "
            f"{full.params['n_outliers']:,} | {float(top['outlier_rate'].iloc[0]) if len(top) else float('nan'):.2f} |\n"
        )
    lines += table
    if diag_lines:
        lines.append(
            "\nHodge diagnostics of the full data (weighted mean over components) and the LBI 5 % fit:\n\n"
            "| data set | rows | items | components | total inconsistency | bi-cycle | curl | harmonic | flagged rows | max annotator flag rate (≥10 rows) |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n"
        )
        lines += diag_lines
    return "".join(lines)


def _old_sections(path: Path) -> tuple[dict[str, str], str]:
    """Sections ``'1'..'4'`` of a previous result file and the command recorded in its header."""
    import re

    if not path.exists():
        return {}, ""
    text = path.read_text()
    cmd = re.search(r"Command: `([^`]*)`", text)
    parts = re.split(r"(?m)^(?=## \d+\. )", text)
    secs = {m.group(1): part for part in parts if (m := re.match(r"## (\d+)\. ", part))}
    return secs, cmd.group(1).strip() if cmd else "?"


def _carry(sec: str, cmd: str, path: Path) -> str:
    """A section of the previous file, labelled as not re-run (kept once: an existing label is reused)."""
    import subprocess

    if "*Carried over from" in sec:
        return sec
    try:
        date = subprocess.run(
            ["git", "log", "-1", "--format=%ad", "--date=short", "--", str(path)],
            cwd=path.parent,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        date = ""
    head, _, body = sec.partition("\n")
    note = f"*Carried over from an earlier run (`{cmd}`{', committed ' + date if date else ''}); not re-run by this command.*\n"
    return f"{head}\n\n{note}{body}"


def _mm13_min_auc(section: str) -> dict[str, float]:
    """Smallest mean AUC at 5–20 % outliers in each of our MM13 tables (parsed from the section text)."""
    import re

    out = {}
    for label, key in (("HLASSO path", "HLASSO"), ("LBI Algorithm 3", "LBI Alg. 3")):
        part = section.split(f"### Ours: {label}", 1)
        if len(part) < 2:
            continue
        table = part[1].split("###", 1)[0]
        vals = [
            float(v) for row in re.findall(r"(?m)^\| \d+ \|(.*)$", table) for v in re.findall(r"([\d.]+)\(", row)[:4]
        ]
        if vals:
            out[key] = min(vals)
    return out


def _targets(peer: dict, lbi_out: dict, mm13: dict[str, float] | None = None) -> str:
    rows = []
    for key, val in (mm13 or {}).items():
        rows.append(
            f"| Outlier AUC ≥ 0.99 at 5–20 % outliers (MM13 setup) | {key}: min mean AUC {val:.3f} over SN × OP ≤ 20 % | "
            f"{'met' if val >= 0.99 else '**not met**'} |\n"
        )
    r = peer.get(("ours", 100_000, 10_000_000))
    if r and "wall" in r:
        ok = "met" if r["wall"] <= 5 else "**not met** on this loaded host"
        rows.append(
            f"| LS on 10⁷ comparisons / 10⁵ items ≤ 5 s (2 cores) | {r['wall']:.2f} s wall, {r['cpu']:.2f} s CPU | {ok} |\n"
        )
    o, c = peer.get(("ours", 1_000, 1_000_000)), peer.get(("choix_ilsr", 1_000, 1_000_000))
    if o and c and "wall" in o:
        if "wall" in c:
            ratio = c["wall"] / o["wall"]
            rows.append(
                f"| ≥ 10× faster than choix ILSR at 10⁶ | {ratio:.0f}× ({o['wall']:.2f} s vs {c['wall']:.1f} s) | "
                f"{'met' if ratio >= 10 else '**not met**'} |\n"
            )
        elif c["status"] == "capped":
            lb = 150.0 / o["wall"]
            step = f", one ILSR iteration {c['one_step']:.1f} s" if "one_step" in c else ""
            rows.append(
                f"| ≥ 10× faster than choix ILSR at 10⁶ | > {lb:.0f}× (ours {o['wall']:.2f} s; choix capped at "
                f"150 s{step}) | met |\n"
            )
    if "fit_lbi" in lbi_out:
        worst = max(lbi_out["fit_lbi"], lbi_out["alg3_path"])
        rows.append(
            f"| LBI path on 10⁵ comparisons ≤ 30 s | `fit_lbi` {lbi_out['fit_lbi']:.1f} s, full Alg. 3 path "
            f"{lbi_out['alg3_path']:.1f} s (Algorithm 2, not the default, {lbi_out['alg2_budget']:.1f} s to a 10 % "
            f"budget) | {'met' if worst <= 30 else '**not met**'} (Algorithm 3, the default) |\n"
        )
    if not rows:
        return ""
    return (
        f"## 4. Issue targets (from this run; host shared with other jobs, {_load()} at the end of the run)\n\n"
        "| target | measured | status |\n|---|---|---|\n" + "".join(rows)
    )


def main(argv: list[str] | None = None) -> str:
    import sys

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20, help="repetitions per MM13 cell (paper: 20)")
    ap.add_argument("--quick", action="store_true", help="3 MM13 repetitions, smaller scale points, no 10^7 point")
    ap.add_argument("--large", action="store_true", help="with --quick: still run the 10^7-comparison point")
    ap.add_argument("--skip-mm13", action="store_true", help="keep section 1 of the existing result file")
    ap.add_argument("--skip-scale", action="store_true", help="keep sections 2 and 4 of the existing file")
    ap.add_argument("--skip-data", action="store_true", help="keep section 3 of the existing file")
    ap.add_argument("--heldout-only", action="store_true", help="= --skip-mm13 --skip-scale")
    ap.add_argument("--scale-only", action="store_true", help="= --skip-mm13 --skip-data")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.heldout_only:
        args.skip_mm13 = args.skip_scale = True
    if args.scale_only:
        args.skip_mm13 = args.skip_data = True
    reps = 3 if args.quick else args.reps
    old, old_cmd = _old_sections(args.out)
    cmd = " ".join(argv if argv is not None else sys.argv[1:])
    parts = [
        "# Robust ranking benchmark (HodgeRank / HLASSO / LBI)\n\n",
        f"Host: {platform.platform()}, Python {platform.python_version()}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPUs (shared; {_load()} at start); BLAS threads = {os.environ.get('OPENBLAS_NUM_THREADS')}. "
        f"Command: `python -m benchmarks.ranking {cmd}`\n\n",
    ]
    mm13 = None
    if not args.skip_mm13:
        sec1 = bench_mm13(reps) + "\n"
        parts.append(sec1)
        mm13 = _mm13_min_auc(sec1)
    elif "1" in old:
        parts.append(_carry(old["1"], old_cmd, args.out))
        mm13 = _mm13_min_auc(old["1"])
    targets = ""
    if not args.skip_scale:
        peer_text, peer = bench_peers(args.quick, args.large)
        lbi_text, lbi_out = bench_lbi(args.quick)
        parts.append(bench_scale(args.quick) + "\n" + peer_text + "\n" + lbi_text + "\n")
        targets = _targets(peer, lbi_out, mm13)
    elif "2" in old:
        parts.append(_carry(old["2"], old_cmd, args.out))
        targets = _carry(old["4"], old_cmd, args.out) if "4" in old else ""
    if not args.skip_data:
        parts.append(bench_data() + "\n")
    elif "3" in old:
        parts.append(_carry(old["3"], old_cmd, args.out))
    if targets:
        parts.append(targets.rstrip("\n") + "\n")
    text = "".join(parts)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    return text


if __name__ == "__main__":
    main()
