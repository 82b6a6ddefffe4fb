"""Where the ±1 law rule loses its recall on sparse designs (crowdflow issue #35 item 4; docs/methods/ranking.md §8.6).

Run: ``python -m benchmarks.ranking_outliers_sparse`` (``--reps N --max-rows M``: the draws of
``python -m benchmarks.ranking_outliers --families`` with the same arguments, default 2 and 5,000). Writes
``benchmarks/results/ranking_outliers_sparse.md`` and ``ranking_outliers_sparse.csv``.

On every ±1 draw of the family grid with 8 rows per item and checkable planted outliers, the same cut
(Benjamini–Hochberg at q = 0.1 with the floor p ≤ 0.01, :func:`crowdflow.ranking.laws.bh_reject`) is applied to
the law's p-values at different gaps, each asking one question:

* ``oracle``: the true gaps and the generating law (``crowdflow.synth.ranking.oracle_pvalues``);
* ``rule``: ``law_flags`` as ``binary_rule: law`` runs it (held-out presence test first);
* ``fit``: step 1 of the rule without the presence test (the BIC-gated reversal mixture at ridge 0.01);
* ``fit_x_c``: the same gaps multiplied by ``c``, the least-squares slope of the true gaps (logit units) on them:
  the ridge's pull towards zero removed with the truth's help. If the pull lost the recall, this recovers it;
* ``leave_pair_out``: each row at the gap of the mixture fitted without its pair's rows (one Newton step of the
  M-step objective, exact leverages from the dense inverse of the information; n ≤ 2,000): the row's
  self-influence removed;
* ``truth_start``: the shared-share mixture's EM started at the true scores; ``dpen`` is the penalised mixture
  log-likelihood of the rule's start minus that of the truth-started fit (> 0: the objective prefers the
  configuration the rule found to the one near the truth);
* ``known_0.01``, ``known_1e-4``: the law fitted to the clean rows only (the reversal set known) at ridge 0.01
  (the rule's) and 10⁻⁴.

Each cell reads ``recall / precision / % of clean rows flagged``. BLAS is pinned to one thread.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from benchmarks.ranking_outliers import family_specs, md_table  # noqa: E402
from crowdflow.ranking import undetectable_rows  # noqa: E402
from crowdflow.ranking.graph import ComparisonGraph  # noqa: E402
from crowdflow.ranking.laws import (  # noqa: E402
    RIDGE,
    LawFit,
    ReversalMixture,
    annotator_gated_fit,
    bh_reject,
    fit_law,
    law_flags,
    law_pvalues,
    outcome_law,
    reversal_mixture,
)
from crowdflow.ranking.laws import _row_loglik as row_loglik  # noqa: E402
from crowdflow.ranking.laws import _score_and_info as score_and_info  # noqa: E402
from crowdflow.synth.ranking import PlantedInstance, oracle_pvalues, planted_instance  # noqa: E402

OUT = Path(__file__).parent / "results"
#: Probit-to-logit scale: the true Thurstone gaps d/σ in the logistic law's units.
PROBIT_TO_LOGIT = 1.702
METHODS = ("oracle", "rule", "fit", "fit_x_c", "leave_pair_out", "truth_start", "known_0.01", "known_1e-4")


def true_gaps(inst: PlantedInstance) -> tuple[np.ndarray, float]:
    """True scores in the logistic law's units and the tie threshold there."""
    spec = inst.spec
    k = 1.0 if spec.outcome == "pm1_btl" else PROBIT_TO_LOGIT
    tau = k * float(spec.tie_width) if spec.outcome == "pm1_thurstone" else 0.0
    return k * inst.theta / spec.sigma, tau


def leave_pair_out_gaps(g: ComparisonGraph, mix: ReversalMixture, ridge: float = RIDGE) -> np.ndarray:
    """``δ_{−pair}``: each row's gap after one Newton step of the mixture's M-step objective without its pair's rows.

    With ``H = Xᵀ diag(w·info) X + ρI`` at the fit, ``R = x_kᵀH⁻¹x_k`` and the pair's summed score ``G`` and
    information ``I``, ``δ_{−pair} = δ̂ − G·R/(1 − I·R)`` (Sherman–Morrison). Dense inverse: for n ≤ 2,000.
    """
    fit = mix.fit
    z = np.sign(g.y)
    d = g.gradient(fit.s)
    r = 1.0 - mix.reversal_posterior(g)
    gr_obs, info = score_and_info(z, d, fit.tau, fit.link)
    gr_rev, _ = score_and_info(-z, d, fit.tau, fit.link)
    gk = g.w * (r * gr_obs + (1.0 - r) * gr_rev)
    ik = g.w * info
    rho = ridge * float(np.mean(g.w))
    H = (g.X.T @ sp.diags(ik) @ g.X + rho * sp.eye(g.n)).toarray()
    Hi = np.linalg.inv(H)
    R = Hi[g.i, g.i] + Hi[g.j, g.j] - 2.0 * Hi[g.i, g.j]
    lo, hi = np.minimum(g.i, g.j), np.maximum(g.i, g.j)
    sgn = np.where(g.i == lo, 1.0, -1.0)
    _, pair = np.unique(lo.astype(np.int64) * g.n + hi, return_inverse=True)
    G = np.bincount(pair, sgn * gk)[pair] * sgn
    I_ = np.bincount(pair, ik)[pair]
    return np.asarray(d - G * R / np.maximum(1.0 - I_ * R, 1e-9))


def _penalised(mix: ReversalMixture, ridge: float, w: np.ndarray) -> float:
    return mix.loglik - 0.5 * ridge * float(np.mean(w)) * float(mix.fit.s @ mix.fit.s)


def diagnose(inst: PlantedInstance) -> dict[str, Any]:
    """Every method of the module docstring on one draw: recall, precision and share of clean rows flagged."""
    g = inst.graph
    z = np.sign(g.y)
    truth = inst.outlier & ~undetectable_rows(g)
    law = outcome_law(g.y)
    rec: dict[str, Any] = {}

    def put(name: str, flags: np.ndarray) -> None:
        tp = int((flags & truth).sum())
        rec[f"{name}_recall"] = tp / int(truth.sum())
        rec[f"{name}_precision"] = tp / int(flags.sum()) if flags.any() else np.nan
        rec[f"{name}_clean"] = float(flags[~inst.outlier].mean())

    def cut(delta: np.ndarray, tau: float) -> np.ndarray:
        return bh_reject(law_pvalues(z, delta, tau, "logit"), g.w)

    put("oracle", bh_reject(oracle_pvalues(inst), g.w))
    put("rule", law_flags(g).flags)
    fit, _, _ = annotator_gated_fit(g, law=law, link="logit")
    d = g.gradient(fit.s)
    put("fit", cut(d, fit.tau))
    s_true, tau_true = true_gaps(inst)
    d_true = g.gradient(s_true)
    c = float(d @ d_true / max(float(d @ d), 1e-12))
    rec["c"] = c
    put("fit_x_c", cut(c * d, fit.tau))
    mix = reversal_mixture(g, law=law, link="logit", by_annotator=False)
    put("leave_pair_out", cut(leave_pair_out_gaps(g, mix), mix.fit.tau))
    start = LawFit(s_true, tau_true, "logit", row_loglik(z, d_true, tau_true, "logit"), 0)
    mt = reversal_mixture(g, law=law, link="logit", by_annotator=False, start=start)
    put("truth_start", cut(g.gradient(mt.fit.s), mt.fit.tau))
    rec["dpen"] = _penalised(mix, RIDGE, g.w) - _penalised(mt, RIDGE, g.w)
    for name, ridge in (("known_0.01", RIDGE), ("known_1e-4", 1e-4)):
        fk = fit_law(g, np.where(inst.outlier, 0.0, g.w), law=law, link="logit", ridge=ridge)
        put(name, cut(g.gradient(fk.s), fk.tau))
    return rec


def run(reps: int, max_rows: int) -> pd.DataFrame:
    """The diagnosis on every sparse (8 rows per item) ±1 draw of the family grid with checkable outliers."""
    rows = []
    for fam, label, shape, spec, seed in family_specs(reps, max_rows):
        if not spec.outcome.startswith("pm1") or shape["rows_per_item"] != 8:
            continue
        inst = planted_instance(spec, seed)
        if not (inst.outlier & ~undetectable_rows(inst.graph)).any():
            continue
        t0 = time.perf_counter()
        rec = diagnose(inst)
        rows.append({"family": fam, "cell": label, **shape, "seed": seed, "m": inst.graph.m, **rec})
        print(f"{fam} {seed} done ({time.perf_counter() - t0:.1f} s)", flush=True)
    return pd.DataFrame(rows)


def _cell(r: pd.Series, name: str) -> str:
    p = r[f"{name}_precision"]
    return f"{r[f'{name}_recall']:.2f} / {'–' if np.isnan(p) else f'{p:.2f}'} / {100 * r[f'{name}_clean']:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--max-rows", type=int, default=5000)
    a = ap.parse_args()
    t0 = time.perf_counter()
    df = run(a.reps, a.max_rows)
    OUT.mkdir(exist_ok=True)
    df.to_csv(OUT / "ranking_outliers_sparse.csv", index=False)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    table = pd.DataFrame(
        {
            "draw": [
                f"{r.family} {r.seed}: n={r.n}, {r.design}, {r.n_components} piece(s), σ={r.sigma}"
                for r in df.itertuples()
            ],
            **{m: [_cell(r, m) for _, r in df.iterrows()] for m in METHODS},
            "c": df["c"].round(2),
            "dpen": df["dpen"].round(1),
        }
    )
    means = pd.DataFrame(
        {
            "method": list(METHODS),
            "recall": [df[f"{m}_recall"].mean() for m in METHODS],
            "precision": [df[f"{m}_precision"].mean() for m in METHODS],
            "clean_rows_flagged_worst": [df[f"{m}_clean"].max() for m in METHODS],
        }
    )
    text = (
        "# Where the ±1 law rule loses its recall on sparse designs (benchmarks/ranking_outliers_sparse.py)\n\n"
        f"`python -m benchmarks.ranking_outliers_sparse --reps {a.reps} --max-rows {a.max_rows}`: the ±1 draws of "
        "`ranking_outliers.md`'s grid with 8 rows per item and checkable planted outliers "
        f"({len(df)} draws); {time.perf_counter() - t0:.0f} s on {platform.machine()} Python "
        f"{platform.python_version()}, load {load:.1f} at the end. Methods: the module docstring. Every method "
        "applies the same cut (BH at q = 0.1, p ≤ 0.01) to the law's p-values at its own gaps.\n\n"
        "## Means over the draws (precision over the draws where the method flags something)\n\n"
        + md_table(means)
        + "\n\n## Per draw: recall / precision / % of clean rows flagged\n\n"
        + md_table(table)
        + "\n"
    )
    (OUT / "ranking_outliers_sparse.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
