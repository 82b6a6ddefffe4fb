"""Benchmark of personal models on a graph: DJAM vs CL-ADMM (ρ grid) vs the centralised solver.

Run: ``python -m benchmarks.personal_models`` (``--instances K --seeds S`` to change the Monte Carlo
size, ``--quick`` for a smoke run). Prints markdown and writes ``benchmarks/results/personal_models.md``.
``--large`` adds the n = 10⁴ section (``--large-n``, ``--admm-cap``); ``--skip-small`` keeps the n = 30
section of the existing results file instead of rerunning it (it is labelled as reused).

Large section (n = 10⁴, :func:`crowdflow.synth.personal_models.field_estimation_instance_scaled`: the same model,
radius set for the n = 30 setup's mean degree 6.23, stray components bridged): centralised Newton
(the reference, timed in the same run), DJAM with the batched ``matching`` engine to the certified
tolerances 1e-6 and 1e-8 (3 edge seeds), the one-round-at-a-time engine timed on a few |E| rounds,
CL-ADMM over the ρ grid (matching engine, one seed, capped at ``--admm-cap``·|E| rounds), and the
partitioned mode with 2 blocks in-process vs. a Dask ``LocalCluster(n_workers=2, threads_per_worker=1)``.

Setup: the field-estimation experiment of the DJAM paper (Section IV) with the default generator of
docs/methods/personal_models.md §5.1: n = 30 agents in U[0,1]², radius 0.3, σ_ij ~ U[0.5, 1.5],
σ_ii = 0.1, σ_ν = 0.5, 10 % outliers, Huber c = 1/σ_ν², κ = 1.345σ_ν; instance seeds 100, 101, ...

Measured, all in the same run:

1. **Rounds to tolerance** (the paper's metric): mean over agents of ‖θ̂_i(t) − θ_i*‖/‖θ_i*‖ against
   the exact Newton optimum, recorded every 50 rounds, for S edge seeds per instance (vectorised
   Monte Carlo engines); the table gives the median over (instance, seed) of the first recorded round
   at which the error is ≤ 1e-3 / 1e-6 / 1e-9, and divided by |E| (column "÷ E").
2. **Wall time to a certified tolerance**: single runs with the certified stopping rule (docs/methods/personal_models.md §2.6,
   tol = 1e-8, checked every |E| rounds), median over instances × min(S, 3) seeds, reported as a
   ratio to the centralised Newton solve (median of 5 repeats) of the same instance, measured in the
   same process. DJAM/CL-ADMM here are single-process *simulations* of a distributed method (one
   Python step per edge activation), so the time ratio measures simulation cost, not what a deployed
   network of agents would see; the round counts are the portable measure.

The peer (the paper's own MATLAB code) is not public; CL-ADMM is our reconstruction (docs/methods/personal_models.md §4.2).
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

from crowdflow.personal_models import (  # noqa: E402
    RHO_GRID,
    centralized,
    cl_admm,
    cl_admm_monte_carlo,
    djam,
    djam_blocked,
    djam_monte_carlo,
    rel_errors,
    rounds_to,
)
from crowdflow.synth.personal_models import field_estimation_instance, field_estimation_instance_scaled  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "personal_models.md"
LEVELS = (1e-3, 1e-6, 1e-9)
LARGE_HEADER = "## Large graph"


def _first_round(curves: pd.DataFrame, level: float) -> pd.Series:
    """First recorded round with mean_rel_err ≤ level, per (instance, seed); NaN if never."""
    hit = curves[curves["mean_rel_err"] <= level]
    first = hit.groupby(["instance", "seed"])["round"].min()
    all_keys = curves.groupby(["instance", "seed"]).size().index
    return first.reindex(all_keys)


def _median_or_none(values: pd.Series) -> float:
    """Median over runs; NaN when fewer than half of the runs reached the level."""
    if values.notna().mean() < 0.5:
        return float("nan")
    return float(values.fillna(np.inf).median())


def _fmt(x: float, digits: int = 0) -> str:
    if not np.isfinite(x):
        return "—"
    return f"{x:,.{digits}f}"


def run(instances: int, seeds: int, n_rounds: int, timing_seeds: int) -> str:
    inst_seeds = list(range(100, 100 + instances))
    edge_seeds = list(range(seeds))
    curves: dict[str, list[pd.DataFrame]] = {"djam": []}
    curves.update({f"cl_admm ρ={r:g}": [] for r in RHO_GRID})
    times: dict[str, list[float]] = {k: [] for k in curves}
    times["djam_blocked (4 blocks)"] = []
    reached: dict[str, list[bool]] = {k: [] for k in times}
    cen_times: list[float] = []
    n_edges: list[int] = []
    for s in inst_seeds:
        prob = field_estimation_instance(s).problem()
        n_edges.append(prob.graph.n_edges)
        reps = []
        for _ in range(5):
            t0 = time.perf_counter()
            ref = centralized(prob)
            reps.append(time.perf_counter() - t0)
        t_cen = float(np.median(reps))
        cen_times.append(t_cen)
        theta = ref.theta
        curves["djam"].append(djam_monte_carlo(prob, edge_seeds, n_rounds, theta, record_every=50).assign(instance=s))
        ad = cl_admm_monte_carlo(prob, edge_seeds, n_rounds, theta, rho=RHO_GRID, record_every=50)
        for r in RHO_GRID:
            curves[f"cl_admm ρ={r:g}"].append(ad[ad["rho"] == r].assign(instance=s))
        cap = 40 * n_rounds // 20
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for e in edge_seeds[:timing_seeds]:
                t0 = time.perf_counter()
                res = djam(prob, seed=e, tol=1e-8, max_rounds=cap, engine="simulation")
                times["djam"].append((time.perf_counter() - t0) / t_cen)
                reached["djam"].append(res.converged)
                t0 = time.perf_counter()
                res = djam_blocked(prob, n_blocks=4, seed=e, tol=1e-8, engine="simulation")
                times["djam_blocked (4 blocks)"].append((time.perf_counter() - t0) / t_cen)
                reached["djam_blocked (4 blocks)"].append(res.converged)
                for r in RHO_GRID:
                    t0 = time.perf_counter()
                    res = cl_admm(prob, rho=r, seed=e, tol=1e-8, max_rounds=cap, engine="simulation")
                    key = f"cl_admm ρ={r:g}"
                    times[key].append((time.perf_counter() - t0) / t_cen)
                    reached[key].append(res.converged)

    rows = []
    m_med = float(np.median(n_edges))
    for name in times:
        row = {"method": name}
        if name in curves:
            cv = pd.concat(curves[name], ignore_index=True)
            for lv in LEVELS:
                fr = _first_round(cv, lv)
                med = _median_or_none(fr)
                row[f"rounds to {lv:g}"] = _fmt(med)
                row[f"÷ E ({lv:g})"] = _fmt(med / m_med, 1)
            final = cv[cv["round"] == n_rounds]["mean_rel_err"].median()
            row[f"err @ {n_rounds:,}"] = f"{final:.1e}"
        else:
            for lv in LEVELS:  # the blocked mode runs whole sweeps; only its certified run is timed
                row[f"rounds to {lv:g}"] = "n/a"
                row[f"÷ E ({lv:g})"] = ""
            row[f"err @ {n_rounds:,}"] = ""
        ok = np.asarray(reached[name])
        tr = np.asarray(times[name])
        row["certified 1e-8"] = f"{int(ok.sum())}/{ok.size}"
        row["time / centralized (median)"] = _fmt(float(np.median(tr[ok])), 0) + "×" if ok.any() else "—"
        rows.append(row)
    table = pd.DataFrame(rows)
    cen = float(np.median(cen_times))
    lines = [
        "# Personal models: DJAM vs CL-ADMM vs centralised (docs/methods/personal_models.md §5)",
        "",
        f"Field-estimation setup, {instances} instances (seeds {inst_seeds[0]}–{inst_seeds[-1]}), "
        f"{seeds} edge seeds each, |E| median {m_med:.0f} (range {min(n_edges)}–{max(n_edges)}), "
        f"{n_rounds:,} rounds per Monte Carlo curve. Centralised Newton: median {cen * 1e3:.1f} ms "
        "per solve (the reference θ*, KKT ≤ 1e-13).",
        "",
        "Rounds = edge activations until mean_i ‖θ̂_i − θ_i*‖/‖θ_i*‖ ≤ level (median over instances × "
        "seeds; — = not reached by at least half of the runs). Time = wall time of a single run with "
        "the certified stop (tol 1e-8, cap "
        f"{40 * n_rounds // 20:,} rounds) divided by the centralised solve time of the same instance. "
        "djam_blocked = partitioned mode, 4 BFS blocks, sequential executor (timed only).",
        "",
        _markdown(table),
        "",
        f"Host: {platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}; "
        "single-threaded BLAS. DJAM/CL-ADMM timings are sequential simulations (one Python step per "
        "activation).",
    ]
    return "\n".join(lines)


def _load() -> str:
    try:
        return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    except OSError:  # pragma: no cover - not on every platform
        return "load average unknown"


def run_large(n: int, admm_cap: int, seeds: int = 3, instance_seed: int = 0) -> str:
    """The n = 10⁴ field-estimation point (see the module docstring)."""
    loads = [_load()]
    t0 = time.perf_counter()
    inst = field_estimation_instance_scaled(instance_seed, n=n)
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    prob = inst.problem()
    t_build = time.perf_counter() - t0
    m = prob.graph.n_edges
    reps = []
    for _ in range(3):
        t0 = time.perf_counter()
        ref = centralized(prob)
        reps.append(time.perf_counter() - t0)
    t_cen = float(np.median(reps))
    theta = ref.theta
    kkt = float(np.abs(prob.kkt(theta)).max())

    def summary(res, wall: float) -> dict[str, object]:
        rel = rel_errors(res.theta, theta)
        return {
            "rounds": f"{res.iterations:,}",
            "rounds / |E|": f"{res.iterations / m:.1f}",
            "converged": res.converged,
            "mean rel err": f"{rel.mean():.1e}",
            "‖Θ−Θ*‖/‖Θ*‖": f"{np.linalg.norm(res.theta - theta) / np.linalg.norm(theta):.1e}",
            "wall s": f"{wall:.1f}",
            "× centralised": f"{wall / t_cen:.1f}",
        }

    rows: list[dict[str, object]] = []
    curves: dict[str, list[pd.DataFrame]] = {"djam": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for tol in (1e-6, 1e-8):
            for e in range(seeds):
                t0 = time.perf_counter()
                res = djam(prob, seed=e, tol=tol, engine="matching", reference=theta)
                wall = time.perf_counter() - t0
                rows.append({"method": f"djam (matching), tol {tol:g}, seed {e}", **summary(res, wall)})
                if tol == 1e-8:
                    curves["djam"].append(res.diagnostics)
        # the one-round-at-a-time engine: per-round cost on a few |E| rounds, extrapolated
        k_sim = 3 * m
        t0 = time.perf_counter()
        djam(prob, seed=0, tol=0.0, max_rounds=k_sim, engine="simulation")
        us_sim = (time.perf_counter() - t0) / k_sim * 1e6
        t0 = time.perf_counter()
        djam(prob, seed=0, tol=0.0, max_rounds=k_sim, engine="matching")
        us_mat = (time.perf_counter() - t0) / k_sim * 1e6
        admm_rows = []
        for r in RHO_GRID:
            t0 = time.perf_counter()
            res = cl_admm(prob, rho=r, seed=0, tol=1e-8, max_rounds=admm_cap * m, engine="matching", reference=theta)
            wall = time.perf_counter() - t0
            admm_rows.append({"method": f"cl_admm ρ={r:g} (matching), tol 1e-8, seed 0", **summary(res, wall)})
            curves[f"cl_admm ρ={r:g}"] = [res.diagnostics]
        loads.append(_load())
        # partitioned mode: 2 blocks in-process vs. Dask LocalCluster(2 workers × 1 thread)
        t0 = time.perf_counter()
        blk = djam_blocked(prob, n_blocks=2, seed=0, tol=1e-8, engine="matching")
        t_blk = time.perf_counter() - t0
        blk_rows = [{"method": "djam_blocked, 2 blocks, in-process", **summary(blk, t_blk)}]
        dask_note = ""
        try:
            from tasks.runners import dask_executor

            t0 = time.perf_counter()
            with dask_executor(n_workers=2) as run_on_dask:
                t_start = time.perf_counter() - t0
                t1 = time.perf_counter()
                dres = djam_blocked(prob, n_blocks=2, seed=0, tol=1e-8, engine="matching", executor=run_on_dask)
                t_dask = time.perf_counter() - t1
            blk_rows.append({"method": "djam_blocked, 2 blocks, Dask LocalCluster(2×1)", **summary(dres, t_dask)})
            same = float(np.abs(dres.theta - blk.theta).max())
            dask_note = (
                f"Dask: cluster start-up {t_start:.1f} s (not in the row), {blk.metadata['sweeps']} sweeps of 2 tasks; "
                f"max |θ_dask − θ_in-process| = {same:.1e}; cut edges {blk.metadata['cut_edges']}."
            )
        except Exception as exc:  # report, do not hide, a missing or failing Dask
            dask_note = f"Dask run failed: {type(exc).__name__}: {exc}"
    loads.append(_load())

    level_rows = []
    for name, frames in curves.items():
        row: dict[str, object] = {"method": name}
        for lv in LEVELS:
            hits = [rounds_to(f, lv) for f in frames]
            med = _median_or_none(pd.Series(hits))
            row[f"rounds to {lv:g}"] = _fmt(med)
            row[f"÷ E ({lv:g})"] = _fmt(med / m, 1)
        level_rows.append(row)
    # targets of issue 6: 1e-6 within 3× the calibrated rounds (docs/methods/personal_models.md §5.1: median 3,800 rounds at
    # |E| ≈ 94, i.e. ≈ 40·|E|; max 55·|E|), on par with the best-tuned ADMM, ≤ 60 s on 2 cores
    by_name = {r["method"]: r for r in level_rows}
    djam_e = _median_or_none(pd.Series([rounds_to(f, 1e-6) for f in curves["djam"]])) / m
    admm_e = {
        name: _median_or_none(pd.Series([rounds_to(f, 1e-6) for f in frames])) / m
        for name, frames in curves.items()
        if name != "djam"
    }
    best = min(admm_e, key=lambda k: admm_e[k] if np.isfinite(admm_e[k]) else np.inf)
    djam_walls = [float(r["wall s"]) for r in rows]
    verdict = (
        f"Targets: DJAM reaches mean relative error 1e-6 after {by_name['djam']['rounds to 1e-06']} "
        f"= {djam_e:.0f}·|E| rounds (median of {len(curves['djam'])} seeds) vs. the calibration's "
        f"≈ 40·|E| median (3·40 = 120·|E| allowed; 55·|E| was the calibration's worst case) — "
        f"{'met' if djam_e <= 120 else 'NOT met'}. Best-tuned CL-ADMM ({best}): "
        f"{admm_e[best]:.0f}·|E| rounds to 1e-6 (DJAM/best = {djam_e / admm_e[best]:.2f}, no tuning). "
        f"DJAM certified runs: {min(djam_walls):.1f}–{max(djam_walls):.1f} s wall "
        f"({'≤' if max(djam_walls) <= 60 else '>'} 60 s: {'met' if max(djam_walls) <= 60 else 'NOT met'}) "
        "on the loaded 2-core host."
    )
    cap_note = f"CL-ADMM capped at {admm_cap}·|E| = {admm_cap * m:,} rounds (one edge seed per ρ)"
    lines = [
        f"{LARGE_HEADER}: n = {n:,} agents (field estimation, scaled generator)",
        "",
        f"Instance: `field_estimation_instance_scaled(seed={instance_seed}, n={n})` — radius "
        f"{inst.radius:.4f} (expected degree 6.23, as n = 30, r = 0.3), |E| = {m:,} "
        f"(mean degree {2 * m / n:.2f}, {inst.bridges} bridge edges joining stray components), "
        f"β = {prob.beta:.4f}. Generated in {t_gen:.1f} s, validated/built in {t_build:.1f} s.",
        "",
        f"Centralised Newton (the reference θ*, measured in this run): {ref.iterations} Newton steps, "
        f"max KKT {kkt:.1e}, median {t_cen:.2f} s over 3 solves (runs: " + ", ".join(f"{x:.2f}" for x in reps) + " s).",
        "",
        "Rounds to a mean relative error level (mean_i |θ̂_i − θ_i*|/|θ_i*|, the paper's metric, traced "
        f"every |E| rounds; DJAM median over {seeds} seeds of the tol-1e-8 runs; {cap_note}):",
        "",
        _markdown(pd.DataFrame(level_rows)),
        "",
        verdict,
        "",
        "Certified runs (stop when ‖r‖₂/m_min ≤ tol·max(1, ‖Θ̂‖₂), checked every |E| rounds; DJAM and "
        "CL-ADMM use the batched `matching` engine, whose result equals the one-at-a-time engine's; "
        "times include the per-|E| trace against θ*):",
        "",
        _markdown(pd.DataFrame(rows + admm_rows + blk_rows)),
        "",
        f"Per-round cost on this instance (3·|E| rounds, seed 0): one-round-at-a-time `simulation` engine "
        f"{us_sim:.1f} µs/round, batched `matching` engine {us_mat:.2f} µs/round "
        f"({us_sim / us_mat:.0f}× faster). {dask_note}",
        "",
        "Host: shared with other jobs during this run (" + "; ".join(loads) + "), so wall times are "
        "inflated and noisy; the centralised time above was measured in the same run and is the fair "
        "reference.",
    ]
    return "\n".join(lines)


def _markdown(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        out.append("| " + " | ".join(str(r[c]) for c in cols) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instances", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=20_000)
    ap.add_argument("--timing-seeds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2 instances × 3 seeds × 8,000 rounds")
    ap.add_argument("--large", action="store_true", help="add the n = 10^4 section")
    ap.add_argument("--large-n", type=int, default=10_000)
    ap.add_argument("--admm-cap", type=int, default=200, help="CL-ADMM round cap in units of |E| (large section)")
    ap.add_argument("--skip-small", action="store_true", help="reuse the n = 30 section of the existing output file")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.quick:
        args.instances, args.seeds, args.rounds, args.timing_seeds = 2, 3, 8000, 1
    if args.skip_small:
        old = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        small = old.split(LARGE_HEADER)[0].rstrip()
        if not small:
            raise SystemExit(f"--skip-small: no n = 30 section in {args.out}")
        if "section reused from an earlier run" not in small:
            small = small.replace(
                "\n", "\n\n_(n = 30 section reused from an earlier run of this benchmark, not rerun.)_\n", 1
            )
        md = small
    else:
        md = run(args.instances, args.seeds, args.rounds, args.timing_seeds)
    if args.large:
        md = md + "\n\n" + run_large(args.large_n, args.admm_cap)
    print(md)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".md.tmp")
    tmp.write_text(md + "\n", encoding="utf-8")
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
