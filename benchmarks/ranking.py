"""Benchmark of robust global ranking (HodgeRank / HLASSO / LBI), spec robust-hodgerank.md §6, §9.

Run: ``python -m benchmarks.ranking`` (flags: ``--reps N`` repetitions per cell of the MM13 table,
default 20 as in the paper; ``--quick`` = 3 repetitions and smaller scale points; ``--skip-mm13``,
``--skip-scale``, ``--skip-data``). Prints markdown and writes ``benchmarks/results/ranking.md``.

1. **MM13 simulation (spec §6.2, Table 1).** n = 16 items, a random total order, SN ∈ {1000..5000}
   uniform ±1 comparisons (multigraph), a random OP fraction reversed. Every comparison is scored by its
   entry order on the regularisation path and the ROC-AUC against the true reversals is averaged over the
   repetitions. Two paths: the HLASSO (LASSO) path as in the paper (100-point geometric λ grid from
   λ_max down to 10⁻³λ_max, interpolated entry λ) and LBI Algorithm 3 (κ = 100, Δt = 1/κ, t ≤ 10, i.e.
   1,000 steps). Identical rows are merged (spec §1.3; exact). The paper's numbers are printed alongside.
2. **Scale.** HodgeRank least squares with our sparse solver (``ComparisonGraph.from_arrays`` +
   grounded-Laplacian LU/CG + solve) versus the dense peer ``numpy.linalg.lstsq`` on the dense m×n
   incidence (construction included on both sides), same data, same run; medians of 3 repeats, ratio =
   dense / sparse. Larger points run the sparse solver only. Also: wall time of Algorithm 2 iterations
   and of Sync-LBI (Algorithm 4, thread pool) at m = 10⁶.
3. **Held-out prediction on public pairwise data** (``/work/shared/data``; skipped with a message if
   absent): 5 random 80/20 splits of the comparison rows; fit on 80 %, predict the sign of the held-out
   non-tie comparisons whose two items lie in the same training component; accuracy of LS HodgeRank,
   HLASSO (5 % budget, debiased), LBI (Alg. 3, 5 % budget, debiased) and the per-item win-rate baseline.
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

from crowdflow.models.hodgerank import (  # noqa: E402
    ComparisonGraph,
    LaplacianSolver,
    build_comparison_graph,
    canonical_comparisons,
    fit_hlasso,
    fit_hodgerank,
    group_identical_rows,
    hlasso_path,
    hodgerank_scores,
    laplacian_lambda_max,
)
from crowdflow.models.lbi import fit_lbi, lbi_alg2, lbi_alg3, sync_lbi  # noqa: E402

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


def mm13_instance(seed: int, sn: int, op: float, n: int = 16) -> tuple[ComparisonGraph, np.ndarray]:
    rng = np.random.default_rng(seed)
    pos = rng.permutation(n)
    i = rng.integers(0, n, sn)
    j = rng.integers(0, n - 1, sn)
    j[j >= i] += 1
    y = np.where(pos[i] < pos[j], 1.0, -1.0)
    flip = np.zeros(sn, dtype=bool)
    flip[rng.choice(sn, round(op * sn), replace=False)] = True
    y[flip] *= -1
    return ComparisonGraph.from_arrays(i, j, y, n=n), flip


def bench_mm13(reps: int) -> str:
    rows_l, rows_h = [], []
    t0 = time.perf_counter()
    for sn in SN_GRID:
        cells_l, cells_h = [], []
        for op in OP_GRID:
            a_l, a_h = [], []
            for rep in range(reps):
                g, flip = mm13_instance(1000 * sn + rep, sn, op)
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
        "## 1. MM13 simulation: ROC-AUC of the path entry order (spec §6.2, Table 1)\n\n",
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
    i = rng.integers(0, n, m)
    j = rng.integers(0, n - 1, m)
    j[j >= i] += 1
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
        "## 2. Scale: HodgeRank least squares, sparse (ours) vs dense `numpy.linalg.lstsq` (peer)\n\n",
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
    # LBI iterations at scale
    n, m = (10_000, 200_000) if quick else (10_000, 1_000_000)
    i, j, y = _random_problem(n, m, seed=1)
    g = ComparisonGraph.from_arrays(i, j, np.sign(y))
    lm = laplacian_lambda_max(g.L)
    k = 20
    kw = {"kappa": 100.0, "theta0": "zero", "stop_rule": "none", "max_iter": k, "lam_max": lm}
    t2, _ = _median_time(lambda: lbi_alg2(g, **kw))
    tp, _ = _median_time(lambda: sync_lbi(g, n_workers=2, **kw))
    s3 = LaplacianSolver.from_graph(g)
    t3, _ = _median_time(lambda: lbi_alg3(g, solver=s3, stop_rule="none", max_iter=k))
    lines.append(
        f"\nLBI at n = {n:,}, m = {m:,} ({k} iterations, median of 3): Algorithm 2 {t2 / k * 1e3:.1f} ms/iter; "
        f"Sync-LBI (Algorithm 4, 2 threads) {tp / k * 1e3:.1f} ms/iter (speed-up {t2 / tp:.2f}× on this shared "
        f"2-core host); Algorithm 3 ({s3.method} solves) {t3 / k * 1e3:.1f} ms/iter.\n"
    )
    return "".join(lines)


def _winrate(train: pd.DataFrame) -> pd.Series:
    a = pd.concat([train["item_a"], train["item_b"]])
    s = pd.concat([np.sign(train["outcome"]), -np.sign(train["outcome"])])
    return pd.Series(s.to_numpy(), index=a.to_numpy()).groupby(level=0).mean()


def _holdout(df: pd.DataFrame, name: str, splits: int = 5) -> list[str]:
    accs: dict[str, list[float]] = {
        "LS HodgeRank": [],
        "HLASSO 5% (debiased)": [],
        "LBI Alg. 3 5% (debiased)": [],
        "win rate": [],
    }
    n_test = []
    for seed in range(splits):
        rng = np.random.default_rng(seed)
        test_mask = rng.random(len(df)) < 0.2
        train, test = df[~test_mask].reset_index(drop=True), df[test_mask]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            fits = {
                "LS HodgeRank": fit_hodgerank(train, allow_disconnected=True, diagnostics=False).ranking,
                "HLASSO 5% (debiased)": fit_hlasso(train, allow_disconnected=True, diagnostics=False).ranking,
                "LBI Alg. 3 5% (debiased)": fit_lbi(train, allow_disconnected=True, diagnostics=False).ranking,
            }
        ref = fits["LS HodgeRank"].set_index("item")
        ok = test["item_a"].isin(ref.index) & test["item_b"].isin(ref.index) & (test["outcome"] != 0)
        tt = test[ok]
        same = ref.loc[tt["item_a"], "component"].to_numpy() == ref.loc[tt["item_b"], "component"].to_numpy()
        tt = tt[same]
        n_test.append(len(tt))
        truth = np.sign(tt["outcome"].to_numpy())
        for k, rk in fits.items():
            sc = rk.set_index("item")["score"]
            pred = np.sign(sc.loc[tt["item_a"]].to_numpy() - sc.loc[tt["item_b"]].to_numpy())
            accs[k].append(float(np.mean(np.where(pred == 0, 0.5, pred == truth))))
        wr = _winrate(train)
        pred = np.sign(wr.loc[tt["item_a"]].to_numpy() - wr.loc[tt["item_b"]].to_numpy())
        accs["win rate"].append(float(np.mean(np.where(pred == 0, 0.5, pred == truth))))
    out = [
        f"| {name} | {k} | {np.mean(v):.4f} ± {np.std(v, ddof=1):.4f} | {int(np.mean(n_test))} |\n"
        for k, v in accs.items()
    ]
    return out


def bench_data() -> str:
    lines = [
        "## 3. Held-out prediction on public pairwise data\n\n",
        "5 random 80/20 splits of the rows; accuracy (mean ± sd over splits) of the predicted sign on held-out "
        "non-tie comparisons within a training component (score ties count 1/2).\n\n",
    ]
    table = ["| data set | method | accuracy | held-out rows / split |\n|---|---|---|---|\n"]
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


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20, help="repetitions per MM13 cell (paper: 20)")
    ap.add_argument("--quick", action="store_true", help="3 repetitions, smaller scale points")
    ap.add_argument("--skip-mm13", action="store_true")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--skip-data", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    reps = 3 if args.quick else args.reps
    parts = [
        "# Robust ranking benchmark (HodgeRank / HLASSO / LBI)\n\n",
        f"Host: {platform.platform()}, Python {platform.python_version()}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPUs (shared); BLAS threads = {os.environ.get('OPENBLAS_NUM_THREADS')}. "
        f"Command: `python -m benchmarks.ranking {' '.join(argv if argv is not None else __import__('sys').argv[1:])}`\n\n",
    ]
    if not args.skip_mm13:
        parts.append(bench_mm13(reps) + "\n")
    if not args.skip_scale:
        parts.append(bench_scale(args.quick) + "\n")
    if not args.skip_data:
        parts.append(bench_data() + "\n")
    text = "".join(parts)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    return text


if __name__ == "__main__":
    main()
