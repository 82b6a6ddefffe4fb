"""What any data-only rule can reach on the ±1 families: the Bayes detector under the generator's own model
(crowdflow issue #35 item 4; docs/methods/ranking.md §8.6).

Run: ``python -m benchmarks.ranking_outliers_bayes`` (``--reps N --max-rows M``: the draws of
``python -m benchmarks.ranking_outliers --families`` with the same arguments, default 4 and 5,000; ``--rows-per-item
8`` the sparse draws, ``0`` every density; ``--warmup``, ``--draws``, ``--temps``: the sampler). Writes
``benchmarks/results/ranking_outliers_bayes.md`` and ``ranking_outliers_bayes.csv``.

The oracle of ``ranking_outliers.md`` knows the true scores; a rule that sees only the data does not. The best
such a rule can do in expectation over the generator is to rank the rows by ``P(outlier_k | data)`` computed
under the generator's prior (θ ~ N(0, I)), its law (BTL, Thurstone, Thurstone with ties) and its outlier rates
(:mod:`crowdflow.synth.ranking_posterior`, which also states the two places it simplifies the generator), and to
cut the ranking. Methods, each on every ±1 draw of the grid with the chosen density and checkable outliers:

* ``oracle``: BH at q = 0.1 with the floor p ≤ 0.01 on the true law's p-values (as ``ranking_outliers.md``);
* ``rule``: ``law_flags`` (``binary_rule: law``, as ``ranking_outliers_sparse.md``);
* ``bayes_q05``, ``bayes_q10``: the Bayesian FDR cut at q = 0.1 on the posterior reversal probabilities
  (:func:`crowdflow.ranking.laws.bayes_fdr_flags`): the largest set, by posterior, whose mean posterior of no
  reversal is ≤ 0.1 — the most rows any rule can flag at an expected false discovery rate of 0.1 (q = 0.05: a
  stricter cut, for families where the oracle's precision is the harder half of the target);
* ``bayes_q15``: the same at q = 0.15: the target asks for precision within 0.05 of the oracle's (capped at 0.9),
  so a rule may trade precision down to 0.85 for recall; this is the most recall any rule can buy that way;
* ``bayes_pcut``: the oracle's own cut (BH at q = 0.1, p ≤ 0.01) on the posterior mean of the law's p-value:
  the oracle's rule with the posterior in place of the truth.

Every cut is applied to four estimates of the posterior (``bayes``: two runs pooled; ``zero``, ``truth``: each
run alone; ``weighted``: the runs weighted by their thermodynamic integrals); a family's verdict takes, for each
estimate, the cut with the smallest shortfall (:func:`family_table`). The posterior comes from replica-exchange HMC, two runs per draw, one started at θ = 0 and one at the true
scores; ``rhat`` is the largest split R̂ over the scores and the log density, ``diff`` the largest difference
between the two runs' reversal probabilities, ``disagree`` the share of the union of the two runs' ``bayes_q10``
sets flagged by only one. BLAS is pinned to one thread.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.ranking_outliers import CAP, TOL, family_specs, md_table  # noqa: E402
from crowdflow.ranking import undetectable_rows  # noqa: E402
from crowdflow.ranking.laws import bayes_fdr_flags, bh_reject, law_flags  # noqa: E402
from crowdflow.synth.ranking import PlantedInstance, oracle_pvalues, planted_instance  # noqa: E402
from crowdflow.synth.ranking_posterior import GeneratorModel, reversal_posterior  # noqa: E402

OUT = Path(__file__).parent / "results"
METHODS = ("oracle", "rule", "bayes_q10", "bayes_q15", "bayes_pcut")
#: The Bayesian FDR cuts applied to every estimate of the posterior (label -> q).
CUTS = {"q05": 0.05, "q10": 0.1, "q15": 0.15}


def ladder(temps: int, beta_min: float) -> tuple[float, ...]:
    """``temps`` inverse temperatures from 1 down to ``beta_min``, geometric."""
    return (1.0,) if temps <= 1 else tuple(float(b) for b in np.geomspace(1.0, beta_min, temps))


def temps_for(n: int, per_sqrt_n: float) -> int:
    """Temperatures for ``n`` items: ``⌈per_sqrt_n·√n⌉`` (the log likelihood's spread grows like √n, and
    neighbouring replicas must overlap; 16 at n = 100 gives swap rates ≥ 0.3 on the sparse BTL draws)."""
    return max(1, int(np.ceil(per_sqrt_n * np.sqrt(n))))


def bound_draw(
    inst: PlantedInstance, *, warmup: int, draws: int, betas: tuple[float, ...], seed: int
) -> dict[str, Any]:
    """Every method of the module docstring on one draw: recall, precision, share of clean rows flagged."""
    g = inst.graph
    truth = inst.outlier & ~undetectable_rows(g)
    rec: dict[str, Any] = {}

    def put(name: str, flags: np.ndarray) -> None:
        tp = int((flags & truth).sum())
        rec[f"{name}_recall"] = tp / int(truth.sum())
        rec[f"{name}_precision"] = tp / int(flags.sum()) if flags.any() else np.nan
        rec[f"{name}_clean"] = float(flags[~inst.outlier].mean())

    put("oracle", bh_reject(oracle_pvalues(inst), g.w))
    t0 = time.perf_counter()
    put("rule", law_flags(g).flags)
    rec["rule_seconds"] = time.perf_counter() - t0
    model = GeneratorModel.of(inst)
    t0 = time.perf_counter()
    post = reversal_posterior(inst, model, seed=seed, warmup=warmup, draws=draws, betas=betas)
    rec["bayes_seconds"] = time.perf_counter() - t0
    put("bayes_pcut", bh_reject(post.pval, g.w))
    a, b = (bayes_fdr_flags(ch.post, g.w, q=0.1) for ch in post.chains[:2])
    rec["disagree"] = float((a ^ b).sum() / max(int((a | b).sum()), 1))
    rec["log_mass_truth_minus_zero"] = float(post.log_mass[1] - post.log_mass[0])
    rec["lik_low_beta_diff"] = float(post.chains[1].lik_mean[-1] - post.chains[0].lik_mean[-1])
    posts = {
        "bayes": post.post,
        "weighted": post.post_weighted,
        "zero": post.chains[0].post,
        "truth": post.chains[1].post,
    }
    for est, pr in posts.items():
        for label, q in CUTS.items():
            put(f"{est}_{label}", bayes_fdr_flags(pr, g.w, q=q))
    for start, ch in zip(("zero", "truth"), post.chains[:2], strict=True):
        rec[f"{start}_logp"] = float(np.mean(ch.logp))
    rec["rhat"] = post.rhat_max
    rec["diff"] = post.post_diff_max
    rec["accept"] = min(ch.accept for ch in post.chains)
    rec["swap_min"] = min((float(ch.swap.min()) for ch in post.chains if ch.swap.size), default=np.nan)
    rec["eps"] = model.eps
    rec["rho"] = model.rho
    rec["expected_outliers"] = float(post.post.sum())
    rec["n_outliers"] = int(truth.sum())
    return rec


def run(
    reps: int,
    max_rows: int,
    rpi: float,
    warmup: int,
    draws: int,
    per_sqrt_n: float,
    beta_min: float,
    max_n: int,
    partial: Path | None = None,
    seeds: set[int] | None = None,
) -> pd.DataFrame:
    """The bound on every ±1 draw of the family grid with ``rpi`` rows per item (0: all), at most ``max_n``
    items and checkable outliers; the records so far are written to ``partial`` after each draw."""
    rows = []
    for fam, label, shape, spec, seed in family_specs(reps, max_rows):
        if not spec.outcome.startswith("pm1") or (rpi and shape["rows_per_item"] != rpi) or shape["n"] > max_n:
            continue
        if seeds and seed not in seeds:
            continue
        inst = planted_instance(spec, seed)
        if not (inst.outlier & ~undetectable_rows(inst.graph)).any():
            continue
        t0 = time.perf_counter()
        betas = ladder(temps_for(shape["n"], per_sqrt_n), beta_min)
        rec = bound_draw(inst, warmup=warmup, draws=draws, betas=betas, seed=seed)
        rec["temps"] = len(betas)
        rows.append({"family": fam, "cell": label, **shape, "seed": seed, "m": inst.graph.m, **rec})
        if partial is not None:
            pd.DataFrame(rows).to_csv(partial, index=False)
        print(
            f"{fam} {seed} n={shape['n']} {shape['design']}: oracle {rec['oracle_recall']:.2f}, bayes "
            f"{rec['bayes_q10_recall']:.2f}/{rec['bayes_q10_precision']:.2f}, rhat {rec['rhat']:.2f}, "
            f"diff {rec['diff']:.2f} ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    return pd.DataFrame(rows)


def _short(bound: float, oracle: float) -> float:
    if np.isnan(bound) or np.isnan(oracle):
        return np.nan
    return float(min(oracle, CAP) - min(bound, CAP))


def _best_short(r: dict[str, Any], prefix: str) -> float:
    """The smallest, over the Bayesian cuts recorded (q = 0.05, 0.1, 0.15), of the larger capped shortfall
    (recall, precision) from the oracle."""
    shorts = []
    for q in CUTS:
        if f"{prefix}_{q}_recall" not in r or np.isnan(r[f"{prefix}_{q}_recall"]):
            continue
        rs = _short(r[f"{prefix}_{q}_recall"], r["oracle_recall"])
        ps = _short(r[f"{prefix}_{q}_precision"], r["oracle_precision"])
        shorts.append(max(rs, 0.0 if np.isnan(ps) else ps))
    return float(min(shorts)) if shorts else float("nan")


def family_table(df: pd.DataFrame, by: str = "family") -> pd.DataFrame:
    """Means over the draws of each group, the bound's capped shortfalls from the oracle and the verdict.

    Four estimates of the bound: ``bayes`` (the two runs pooled), ``zero`` (the run started at θ = 0),
    ``truth`` (the run started at the true scores) and ``weighted`` (the runs weighted by their thermodynamic
    integrals, :attr:`crowdflow.synth.ranking_posterior.ReversalPosterior.log_mass`). Where the runs do not mix, the truth-started one stays in
    the mode around the truth and is the optimistic estimate, the zero-started one the pessimistic. The
    target is ``UNREACHABLE`` when even the optimistic estimate falls short by more than 0.05, ``reachable``
    when even the pessimistic one does not, else ``undecided``.
    """
    out = []
    if df.empty:
        return pd.DataFrame({by: [], "draws": []})
    for key, d in df.groupby(by):
        r: dict[str, Any] = {by: key, "draws": len(d)}
        for m in (*METHODS, *(f"{e}_{q}" for e in ("bayes", "zero", "truth", "weighted") for q in CUTS)):
            if f"{m}_recall" in d:
                r[f"{m}_recall"] = d[f"{m}_recall"].mean()
                r[f"{m}_precision"] = d[f"{m}_precision"].mean()
        for est in ("bayes", "zero", "truth", "weighted"):
            r[f"short_{est}"] = _best_short(r, est)
        r["rule_short"] = max(
            _short(r["rule_recall"], r["oracle_recall"]),
            0.0 if np.isnan(r["rule_precision"]) else _short(r["rule_precision"], r["oracle_precision"]),
        )
        tol = TOL + 1e-12
        r["target"] = (
            "UNREACHABLE" if r["short_truth"] > tol else "reachable" if r["short_zero"] <= tol else "undecided"
        )
        out.append(r)
    t = pd.DataFrame(out)
    keep = [
        by,
        "draws",
        *(f"{m}_{k}" for m in METHODS for k in ("recall", "precision")),
        "short_zero",
        "short_bayes",
        "short_weighted",
        "short_truth",
        "rule_short",
        "target",
    ]
    return t[keep].sort_values("short_truth", ascending=False).reset_index(drop=True)


def _cell(r: pd.Series, name: str) -> str:
    p = r[f"{name}_precision"]
    return f"{r[f'{name}_recall']:.2f} / {'–' if np.isnan(p) else f'{p:.2f}'} / {100 * r[f'{name}_clean']:.1f}"


def section(df: pd.DataFrame) -> str:
    """Per-family, per-design and per-draw tables of one run."""
    per_draw = pd.DataFrame(
        {
            "draw": [
                f"{r.family} {r.seed}: n={r.n}, {r.rows_per_item:g}/item, {r.design}, {r.n_components} piece(s), "
                f"σ={r.sigma}, {r.n_outliers} outliers"
                for r in df.itertuples()
            ],
            **{m: [_cell(r, m) for _, r in df.iterrows()] for m in (*METHODS, "zero_q15", "truth_q15", "weighted_q15")},
            "logp truth − zero": (df["truth_logp"] - df["zero_logp"]).round(1),
            "log mass truth − zero": df["log_mass_truth_minus_zero"].round(1),
            "ℓ(β_min) truth − zero": df["lik_low_beta_diff"].round(1),
            "rhat": df["rhat"].round(2),
            "diff": df["diff"].round(2),
            "disagree": df["disagree"].round(2),
            "temps": df["temps"],
            "seconds": df["bayes_seconds"].round(0),
        }
    )
    exact = df[df["design"] != "band"]
    return (
        "### Per family, uniform and Zipf designs (means over the draws; precision over the draws where the "
        "method flags something)\n\n"
        + md_table(family_table(exact))
        + "\n\n### Band designs (not a bound: the pairs depend on the true order, the posterior here ignores "
        "that)\n\n"
        + md_table(family_table(df[df["design"] == "band"]))
        + "\n\n### Per draw: recall / precision / % of clean rows flagged\n\n"
        + md_table(per_draw)
        + "\n"
    )


def report() -> None:
    """``--report``: ranking_outliers_bayes.md from the runs' records (replica exchange, then plain HMC); the
    hand-written Reading of the page, if it has one, is kept."""
    page = OUT / "ranking_outliers_bayes.md"
    reading = "READING\n"
    if page.exists():
        old = page.read_text()
        head = "## Reading (written by hand from the tables below after the runs)\n\n"
        if head in old:
            reading = old.split(head, 1)[1].split("\n## ", 1)[0].rstrip("\n") + "\n"
    parts = [
        "# What any data-only rule can reach on the ±1 families: the Bayes detector "
        "(benchmarks/ranking_outliers_bayes.py)\n\nMethods and columns: the module docstring. The sparse (8 rows "
        "per item) ±1 draws with checkable outliers of `python -m benchmarks.ranking_outliers_sparse --reps 4 "
        "--max-rows 5000` (`ranking_outliers_sparse.md`), same seeds and shapes.\n\n## Reading (written by hand "
        "from the tables below after the runs)\n\n" + reading
    ]
    runs = [
        ("ranking_outliers_bayes", "Replica exchange (the bound), 100 items"),
        ("ranking_outliers_bayes_300", "Replica exchange, two uniform draws of 300 items"),
        ("ranking_outliers_bayes_hmc", "Plain HMC (no replica exchange), every size"),
    ]
    frames = {}
    for name, title in runs:
        if not (OUT / f"{name}.csv").exists():
            continue
        df = pd.read_csv(OUT / f"{name}.csv")
        frames[name] = df
        meta = json.loads((OUT / f"{name}.json").read_text()) if (OUT / f"{name}.json").exists() else {}
        parts.append(
            f"\n## {title}: {len(df)} draws\n\n`{meta.get('command', '?')}`; {meta.get('seconds', float('nan')):.0f} s "
            f"on {meta.get('machine', '?')} Python {meta.get('python', '?')}, load {meta.get('load', float('nan')):.1f} "
            "at the end (one process, one core; not under the lock: no timing here is a benchmark).\n\n" + section(df)
        )
    if "ranking_outliers_bayes_hmc" in frames and len(frames) > 1:
        rx = pd.concat([f for k, f in frames.items() if k != "ranking_outliers_bayes_hmc"])
        both = rx.merge(frames["ranking_outliers_bayes_hmc"], on="seed", suffixes=("_rx", "_hmc"))
        cmp = pd.DataFrame(
            {
                "draw": [f"{r.family_rx} {r.seed}" for r in both.itertuples()],
                **{
                    f"{m} {k}": both[f"{m}_recall_{k}"].round(3)
                    for m in ("bayes_q10", "truth_q10", "zero_q10")
                    for k in ("rx", "hmc")
                },
                "rhat rx / hmc": [f"{r.rhat_rx:.2f} / {r.rhat_hmc:.2f}" for r in both.itertuples()],
            }
        )
        parts.append("\n## The two samplers on the same draws (recall at q = 0.1)\n\n" + md_table(cmp) + "\n")
    (OUT / "ranking_outliers_bayes.md").write_text("".join(parts))
    print("".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--max-rows", type=int, default=5000)
    ap.add_argument("--rows-per-item", type=float, default=8.0, help="draws with this density (0: all)")
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--temps", type=float, default=1.6, help="temperatures per √n items (0: plain HMC)")
    ap.add_argument("--beta-min", type=float, default=0.05)
    ap.add_argument("--max-n", type=int, default=300, help="draws with at most this many items")
    ap.add_argument("--out", default="ranking_outliers_bayes", help="records: results/OUT.csv and OUT.json")
    ap.add_argument("--seeds", default="", help="only these draws (comma-separated seeds)")
    ap.add_argument("--report", action="store_true", help="write ranking_outliers_bayes.md from the records")
    a = ap.parse_args()
    if a.report:
        report()
        return
    t0 = time.perf_counter()
    OUT.mkdir(exist_ok=True)
    df = run(
        a.reps,
        a.max_rows,
        a.rows_per_item,
        a.warmup,
        a.draws,
        a.temps,
        a.beta_min,
        a.max_n,
        partial=OUT / f"{a.out}.csv",
        seeds={int(x) for x in a.seeds.split(",") if x},
    )
    df.to_csv(OUT / f"{a.out}.csv", index=False)
    meta = {
        "command": f"python -m benchmarks.ranking_outliers_bayes --reps {a.reps} --max-rows {a.max_rows} "
        f"--rows-per-item {a.rows_per_item:g} --max-n {a.max_n} --warmup {a.warmup} --draws {a.draws} "
        f"--temps {a.temps:g} --beta-min {a.beta_min} --out {a.out}" + (f" --seeds {a.seeds}" if a.seeds else ""),
        "seconds": time.perf_counter() - t0,
        "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan"),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
    (OUT / f"{a.out}.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(section(df))


if __name__ == "__main__":
    main()
