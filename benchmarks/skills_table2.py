"""Paper Table 2 (docs/methods/skills.md §5.3): graph size at fixed noise, star plus one triangle.

Run: ``python -m benchmarks.skills_table2`` (``--runs 50``, ``--alt-runs 20``, ``--no-write``); also
run by ``python -m benchmarks.skills``. Writes its section of ``benchmarks/results/skills.md``
(between the ``table2`` markers; the rest of that file is left as it is).

Setup (``crowdflow.synth.star_triangle_injected``): W ∈ {21, 51, 71, 91}; star (hub = worker 0)
plus the leaf–leaf edge (1, 2); C_ij = s_i s_j + ξ_ij, ξ_ij ~ U[−0.2, 0.2] on the edges. PGD sees
only that C on that support (N = 1 per edge, so every weighting is the same); everything else is
``fit_skills`` with the paper's solver (``gd``, η = 1/(4 max r_i), x^0 = 0.5, tol 1e-7, 5000 iterations,
τ = 1 box from the evaluation labels' n_i, sum rule, MAP vote with seeded random tie-break).
Bayes = the same vote with the true skills. The paper leaves open how the evaluation labels are made
(docs/methods/skills.md §5.3); the reading used here, chosen because its Bayes column matches the paper's level:

- skills on the evenly spaced grid over [−0.3, 0.8] listed from the top (hub = most skilled worker,
  triangle closed by the next two);
- T = 3000 evaluation tasks, each labelled by 12 distinct uniformly random workers.

Diagnostic columns: the same fit with ``solver="scaled"`` and 100 000 iterations (converged; shows
whether stopping ``gd`` at 5000 iterations matters) and the "star floor", which puts the true hub
skill s_0 in and estimates every other worker as C_0j/s_0 (clipped to the same box), i.e. the best
a star can do when its scale is known: how much of the gap the noise on the star edges alone causes.
The second table puts the two readings of the noise side by side (issue #20, decision 1: the paper's
text states ξ ∈ [−0.2, 0.2] and that reading stands; the paper's own notation for its other injected
noise, Figs. 4–5, would make it U[−0.1, 0.1]); the third repeats the run (fewer runs, no diagnostics)
under alternative readings of the evaluation setup.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from crowdflow.skills import (  # noqa: E402
    LabelMoments,
    SkillsResult,
    fit_skills,
    prediction_error,
    prepare_labels,
    vote_weights,
    weighted_consensus,
)
from crowdflow.synth import skills as synth  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "skills.md"
START, END = "<!-- table2:start -->", "<!-- table2:end -->"
WORKERS = (21, 51, 71, 91)
# paper Table 2 (mean ± std over 50 runs)
PAPER = {
    21: ((0.0425, 0.0042), (0.0425, 0.0042)),
    51: ((0.0622, 0.0040), (0.0641, 0.0126)),
    71: ((0.0634, 0.0033), (0.0662, 0.0072)),
    91: ((0.0574, 0.0030), (0.0618, 0.0063)),
}
SkillsFn = Callable[[int, int], np.ndarray | None]


def _iid(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng([n, seed, 2]).uniform(-0.3, 0.8, n)


HALF_WIDTH = 0.2  # the stated ξ ~ U[−0.2, 0.2] (docs/methods/skills.md §5.3)
# The same paper writes its other injected noise as "0.01 · U[−1/2, 1/2]" (Figs. 4–5, docs/methods/skills.md §5.7); read
# that way, Table 2's noise level 0.2 would be U[−0.1, 0.1]. The paper states U[−0.2, 0.2]: shown as an
# alternative, not used by the tests.
NOISE_AS_FIG45 = (
    "grid from the top, 12 per task, noise 0.2·U[−1/2, 1/2] = U[−0.1, 0.1] (the paper's Figs. 4–5 notation)"
)
# alternative readings: name -> (skills(W, seed), None = the default grid; labels per task; fit_skills
# options; noise half-width h of ξ ~ U[−h, h])
ALTERNATIVES: dict[str, tuple[SkillsFn, int, dict[str, object], float]] = {
    "chosen: grid from the top (hub s = 0.8), 12 per task": (lambda n, seed: None, 12, {}, HALF_WIDTH),
    "grid from the top, 13 per task": (lambda n, seed: None, 13, {}, HALF_WIDTH),
    "grid from the top, 12 per task, tau = 0 (box [-1, 1])": (lambda n, seed: None, 12, {"tau": 0.0}, HALF_WIDTH),
    "grid from the bottom (hub s = -0.3, triangle -0.3+d, -0.3+2d), 12 per task": (
        lambda n, seed: np.linspace(-0.3, 0.8, n),
        12,
        {},
        HALF_WIDTH,
    ),
    "i.i.d. U[-0.3, 0.8], hub = worker 0 (random skill), 12 per task": (_iid, 12, {}, HALF_WIDTH),
    "i.i.d. U[-0.3, 0.8] sorted from the top (hub = most skilled), 12 per task": (
        lambda n, seed: np.sort(_iid(n, seed))[::-1].copy(),
        12,
        {},
        HALF_WIDTH,
    ),
    NOISE_AS_FIG45: (lambda n, seed: None, 12, {}, 0.1),
}


# the fit these tables were made with: PGD with the paper's solver, no spectral diagnostics (the library
# defaults until #24; SkillsOptions now defaults to method "ds" and, for pgd, solver "scaled" with spectra,
# so they are passed explicitly)
PGD_BASE: dict[str, object] = {"method": "pgd", "solver": "gd", "spectral": False}


def injected_moments(inst: synth.InjectedNoiseInstance) -> LabelMoments:
    """The injected C as label moments: N = 1 per edge, agreement rate (1 + C)/2 (so C^ = C)."""
    agree = inst.support.copy()
    agree.data = (1.0 + inst.c_hat.data) / 2.0
    return LabelMoments(co_labels=inst.support, agreements=agree, c_hat=inst.c_hat, n_classes=2)


def one_run(
    n_workers: int,
    seed: int,
    skills: np.ndarray | None = None,
    per_task: int = 12,
    fit_options: dict[str, object] | None = None,
    diagnostics: bool = True,
    half_width: float = HALF_WIDTH,
) -> dict[str, float]:
    """Errors of one seeded run: Bayes, PGD (``PGD_BASE`` + ``fit_options``) and, with
    ``diagnostics``, PGD with ``solver="scaled"`` (converges on these graphs) and the star floor."""
    inst = synth.star_triangle_injected(n_workers, seed, per_task=per_task, skills=skills, half_width=half_width)
    data = inst.data
    mo = injected_moments(inst)

    def fit(**options: object) -> SkillsResult:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # gd may stop at max_iter (flag kept)
            return fit_skills(data.labels, classes=data.classes, moments=mo, **{**PGD_BASE, **options})

    res = fit(**(fit_options or {}))
    lm, _ = prepare_labels(data.labels, classes=data.classes)
    if list(lm.workers) != list(data.workers):
        raise RuntimeError("some worker has no evaluation label; raise n_tasks")
    s = data.skills
    sk = res.skills.set_index("worker").loc[list(lm.workers)]
    out = {
        "bayes": prediction_error(weighted_consensus(lm, vote_weights(s, 2), seed=0).consensus, data.truth),
        "pgd": prediction_error(res.consensus, data.truth),
        "converged": float(res.metadata["converged"]),
        "max_skill_err": float(np.max(np.abs(sk["skill"].to_numpy() - s))),
    }
    if diagnostics:
        scaled = fit(solver="scaled", max_iter=100_000)
        out["scaled"] = prediction_error(scaled.consensus, data.truth)
        out["scaled_converged"] = float(scaled.metadata["converged"])
        lo, hi = sk["lower"].to_numpy(), sk["upper"].to_numpy()
        floor = np.clip(inst.c_hat.getrow(0).toarray().ravel() / s[0], lo, hi)
        floor[0] = s[0]
        out["floor"] = prediction_error(
            weighted_consensus(lm, vote_weights(floor, 2, lo, hi), seed=0).consensus, data.truth
        )
    return out


def runs(
    n_workers: int,
    n_runs: int,
    skills_fn: SkillsFn | None = None,
    per_task: int = 12,
    fit_options: dict[str, object] | None = None,
    diagnostics: bool = True,
    half_width: float = HALF_WIDTH,
) -> dict[str, np.ndarray]:
    rows = [
        one_run(
            n_workers,
            seed,
            None if skills_fn is None else skills_fn(n_workers, seed),
            per_task,
            fit_options,
            diagnostics,
            half_width,
        )
        for seed in range(n_runs)
    ]
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def _ms(x: np.ndarray) -> str:
    return f"{x.mean():.4f} ± {x.std():.4f}"


def report(n_runs: int, alt_runs: int) -> str:
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    main = {w: runs(w, n_runs) for w in WORKERS}
    t_main = time.perf_counter() - t0
    fig45 = {w: runs(w, n_runs, half_width=0.1) for w in WORKERS}
    alts: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    if alt_runs > 0:
        for name, (fn, k, options, h) in ALTERNATIVES.items():
            alts[name] = {w: runs(w, alt_runs, fn, k, options, diagnostics=False, half_width=h) for w in WORKERS}
    t_all = time.perf_counter() - t0
    lines = [
        START,
        "## Table 2 — graph size at fixed noise (star + one triangle), issue #3",
        "",
        f"`python -m benchmarks.skills_table2 --runs {n_runs} --alt-runs {alt_runs}` (also run by "
        "`python -m benchmarks.skills`); regenerates only this section. Setup and reading: docstring of "
        "`benchmarks/skills_table2.py` and `crowdflow.synth.star_triangle_injected` (docs/methods/skills.md §5.3). "
        f'{n_runs} seeded runs per W; mean ± std over runs; PGD = `fit_skills(method="pgd", solver="gd")` on the injected C. '
        f"Machine: {platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}; shared "
        f"2-core host (load average {load0:.1f} at start); {t_main:.0f} s for this table, {t_all:.0f} s in all.",
        "",
        "| W | Bayes (ours) | PGD (ours) | PGD − Bayes | paper Bayes | paper PGD | paper gap | "
        "gd converged | median max abs(ŝ − s) | scaled − Bayes | star floor − Bayes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in WORKERS:
        r = main[w]
        (pb, pbs), (pp, pps) = PAPER[w]
        lines.append(
            f"| {w} | {_ms(r['bayes'])} | {_ms(r['pgd'])} | {r['pgd'].mean() - r['bayes'].mean():+.4f} | "
            f"{pb:.4f} ± {pbs:.4f} | {pp:.4f} ± {pps:.4f} | {pp - pb:+.4f} | "
            f"{int(r['converged'].sum())}/{n_runs} | {np.median(r['max_skill_err']):.2f} | "
            f"{r['scaled'].mean() - r['bayes'].mean():+.4f} | {r['floor'].mean() - r['bayes'].mean():+.4f} |"
        )

    def gap(key: str) -> list[float]:
        return [float(main[w][key].mean() - main[w]["bayes"].mean()) for w in WORKERS]

    gaps, floors, scaled = gap("pgd"), gap("floor"), gap("scaled")
    n_scaled_conv = int(sum(main[w]["scaled_converged"].sum() for w in WORKERS))
    rms = float(np.sqrt(np.mean([(main[w]["bayes"].mean() - PAPER[w][0][0]) ** 2 for w in WORKERS])))
    verdict = "reproduced" if max(gaps) <= 0.01 else "**not reproducible**"
    lines += [
        "",
        "Columns: *scaled* = the same fit with `solver='scaled', max_iter=100000` (same objective; "
        f"converged on {n_scaled_conv}/{n_runs * len(WORKERS)} runs), to separate optimisation from estimation; "
        "*star floor* = true hub skill s_0 and every other worker C_0j/s_0 clipped to the same box, i.e. the "
        "best a star can do when its scale is known.",
        "",
        "The paper's text states ξ ∈ [−0.2, 0.2] and that reading stands (issue #20, decision 1). The paper's "
        f"result under it, PGD within 0.01 of Bayes, is {verdict}: PGD − Bayes is "
        f"{min(gaps):+.4f} to {max(gaps):+.4f} (paper: +0.0000 to +0.0044); converged fits give "
        f"{min(scaled):+.4f} to {max(scaled):+.4f}, so stopping `gd` at 5000 iterations is not the cause. "
        f"The star floor is {min(floors):+.4f} to {max(floors):+.4f}: with ξ ~ U[−0.2, 0.2] on the star edges "
        "each leaf skill carries an error up to ±0.2/s_0 (±0.25 for s_0 = 0.8) that no estimator on this "
        "support removes, so even the true hub skill leaves most of the gap. The Bayes column is at the "
        f"paper's level (RMS difference to the paper's means {rms:.4f}). The gap does not grow with W, as in "
        "the paper.",
        "",
        f"Both readings of the noise ({n_runs} runs per W each; mean Bayes, then mean PGD − Bayes and star "
        "floor − Bayes):",
        "",
        "| W | stated ξ ~ U[−0.2, 0.2]: Bayes | PGD − Bayes | star floor − Bayes | Figs. 4–5 notation "
        "ξ ~ 0.2·U[−1/2, 1/2] = U[−0.1, 0.1]: Bayes | PGD − Bayes | star floor − Bayes |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in WORKERS:
        a, b = main[w], fig45[w]
        lines.append(
            f"| {w} | {a['bayes'].mean():.4f} | {a['pgd'].mean() - a['bayes'].mean():+.4f} | "
            f"{a['floor'].mean() - a['bayes'].mean():+.4f} | {b['bayes'].mean():.4f} | "
            f"{b['pgd'].mean() - b['bayes'].mean():+.4f} | {b['floor'].mean() - b['bayes'].mean():+.4f} |"
        )
    g45_main = [float(fig45[w]["pgd"].mean() - fig45[w]["bayes"].mean()) for w in WORKERS]
    lines += [
        "",
        f"Under the stated noise the paper's 0.01 is out of reach (PGD {min(gaps):+.4f} to {max(gaps):+.4f}, "
        f"star floor {min(floors):+.4f} to {max(floors):+.4f}); under U[−0.1, 0.1] PGD is "
        f"{min(g45_main):+.4f} to {max(g45_main):+.4f}, within 0.01 and near the paper's gaps. The tests "
        "(`tests/skills/test_fit.py::test_table2_*`, W = 21 and 91, 10 seeds) keep a regression guard at +0.03 "
        "under the stated reading and the 0.01 under the U[−0.1, 0.1] reading; no test asserts the unreachable "
        "0.01 under the stated noise (the strict expected failure that did was removed in issue #20: a test that "
        "always fails guards nothing).",
    ]
    if alts:
        lines += [
            "",
            f"Alternative readings ({alt_runs} runs per W; mean Bayes / mean PGD − Bayes):",
            "",
            "| reading | " + " | ".join(f"W = {w}" for w in WORKERS) + " |",
            "|---|" + "---|" * len(WORKERS),
        ]
        for name, by_w in alts.items():
            cells = [
                f"{by_w[w]['bayes'].mean():.4f} / {by_w[w]['pgd'].mean() - by_w[w]['bayes'].mean():+.4f}"
                for w in WORKERS
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if NOISE_AS_FIG45 in alts:
            g45 = [
                float(alts[NOISE_AS_FIG45][w]["pgd"].mean() - alts[NOISE_AS_FIG45][w]["bayes"].mean()) for w in WORKERS
            ]
            lines += [
                "",
                "The last row reads the noise as the paper writes its other injected noise (Figs. 4–5: "
                '"0.01 · U[−1/2, 1/2]", docs/methods/skills.md §5.7), i.e. noise level 0.2 = U[−0.1, 0.1]. There PGD − Bayes is '
                f"{min(g45):+.4f} to {max(g45):+.4f}: within 0.01, and near the paper's +0.0000 to +0.0044, where the "
                f"stated U[−0.2, 0.2] gives the flat {min(gaps):+.4f} to {max(gaps):+.4f} above. The paper's text "
                "states U[−0.2, 0.2]; "
                "that reading stands, and both are reported.",
            ]
        lines += [
            "",
            "Not rerun by this script (throwaway scratch runs while choosing the reading, 10–20 runs per W, "
            "grid from the top): 9 / 11 / 15 labels per task give Bayes ≈ 0.08–0.09 / 0.06–0.07 / 0.034–0.044; "
            "every worker labelling every task (T = 300) gives Bayes 0.016 at W = 21 and ≈ 0 from W = 51 on; "
            "each task labelled by the two ends of one edge gives Bayes ≈ 0.10 (the hub decides almost every "
            "task; gap +0.013 at W = 21, < 0.005 from W = 51).",
        ]
    lines.append(END)
    return "\n".join(lines)


def write_section(section: str, path: Path = OUT) -> None:
    """Replace the table2 section of ``path`` (append it if the markers are missing)."""
    text = path.read_text() if path.exists() else ""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--alt-runs", type=int, default=20, help="runs per W for the alternative readings (0: skip)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    section = report(args.runs, args.alt_runs)
    print(section)
    if not args.no_write:
        write_section(section)
    return section


if __name__ == "__main__":
    main()
