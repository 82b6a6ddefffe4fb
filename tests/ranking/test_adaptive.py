"""The adaptive outlier rule, the default of the ranking job (docs/methods/ranking.md §3.4.2, §8.6).

Families, not shapes: every test draws several seeded instances from the planted family
(crowdflow.synth.ranking.planted_instance) and holds the rule to the bound on each draw or on the mean.
Every test runs the job's defaults (``OPTIONS`` is empty): with the old defaults (``lambda_rule: budget``,
``stop_rule: budget``, budget 0.05) each of them fails (docs/methods/ranking.md §8.6 lists what the old
rule gave). The whole grid is the benchmark's (``python -m benchmarks.ranking_outliers``); a reduced grid
runs under ``-m slow``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from crowdflow.ranking import ComparisonGraph, fit_ranking
from crowdflow.ranking.scale import adaptive_lambda, bh_threshold, is_plus_minus_one, trimmed_scale, upset_gap_cut
from crowdflow.synth.ranking import PlantedSpec, issue_instance, planted_instance

#: The options every test runs with: the defaults.
OPTIONS: dict[str, Any] = {}


def _flags(g: ComparisonGraph, **kw: Any) -> tuple[np.ndarray, dict[str, Any]]:
    r = fit_ranking(g, **{"diagnostics": False, **OPTIONS, **kw})
    t = r.outliers.sort_values("row_id")
    assert len(t) == g.m
    return t["is_outlier"].to_numpy(bool), r.params


def _recall_precision(flags: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    tp = int((flags & truth).sum())
    return tp / max(int(truth.sum()), 1), (tp / int(flags.sum()) if flags.any() else 1.0)


CLEAN = [
    PlantedSpec(n=150, rows_per_item=20, frac=0.0),
    PlantedSpec(n=300, rows_per_item=8, design="band", outcome="graded_ties", frac=0.0),
    PlantedSpec(n=300, rows_per_item=6, design="zipf", n_components=2, frac=0.0),
    # ±1 outcomes: tests/ranking/test_laws.py checks clean binary data under their own law in the default run
    pytest.param(PlantedSpec(n=150, rows_per_item=20, outcome="pm1_btl", sigma=0.5, frac=0.0), marks=pytest.mark.slow),
    pytest.param(
        PlantedSpec(n=150, rows_per_item=20, outcome="pm1_thurstone", sigma=0.5, frac=0.0), marks=pytest.mark.slow
    ),
]


@pytest.mark.parametrize("spec", CLEAN, ids=lambda s: f"{s.outcome}-{s.design}-{s.rows_per_item:g}")
@pytest.mark.parametrize("outliers", ["lbi", "hlasso"])
def test_clean_data_flags_at_most_one_percent(spec: PlantedSpec, outliers: str) -> None:
    """Without outliers, at most 1 % of the rows are flagged in every draw (budget 0.05 flags 5 % by design)."""
    for seed in range(3):
        inst = planted_instance(spec, seed)
        flags, _ = _flags(inst.graph, outliers=outliers)
        assert flags.mean() <= 0.01, (seed, flags.mean())


def test_issue_instance() -> None:
    """Issue #20's instance: recall ≥ 0.95 and precision ≥ 0.85 on each of 3 draws, by both methods (budget: recall 0.5)."""
    for seed in range(3):
        inst = issue_instance(seed)
        for outliers in ("lbi", "hlasso"):
            flags, _ = _flags(inst.graph, outliers=outliers)
            rec, prec = _recall_precision(flags, inst.outlier)
            assert rec >= 0.95 and prec >= 0.85, (seed, outliers, rec, prec)


@pytest.mark.parametrize(
    "spec",
    [
        PlantedSpec(n=150, rows_per_item=30, frac=0.01, size=5.0),
        PlantedSpec(n=150, rows_per_item=30, frac=0.1, size=5.0),
        PlantedSpec(n=150, rows_per_item=30, frac=0.1, size=5.0, outcome="graded_ties"),
        PlantedSpec(n=200, rows_per_item=20, frac=0.1, size=5.0, design="band"),
    ],
    ids=lambda s: f"{s.outcome}-{s.design}-{s.frac:g}",
)
def test_well_connected_five_sigma(spec: PlantedSpec) -> None:
    """Well-connected graphs (≥ 20 rows per item), 5σ row outliers: mean recall ≥ 0.9, precision ≥ 0.85 over 3 draws."""
    rec, prec = [], []
    for seed in range(3):
        inst = planted_instance(spec, seed)
        flags, _ = _flags(inst.graph)
        r, p = _recall_precision(flags, inst.outlier)
        rec.append(r)
        prec.append(p)
    assert np.mean(rec) >= 0.9 and np.mean(prec) >= 0.85, (rec, prec)


@pytest.mark.parametrize("frac", [0.0, 0.1, 0.25])
def test_noise_level_on_dense_graphs(frac: float) -> None:
    """σ̂/σ ∈ [0.9, 1.1] on dense graphs (30 rows per item) with 0, 10 % and 25 % of 5σ one-sided outliers.

    The run records σ̂ in its parameters; Huber's concomitant scale (the library's former σ̂) is 1.2σ at
    10 % and 1.6σ or more at 25 %.
    """
    for seed in range(2):
        inst = planted_instance(PlantedSpec(n=150, rows_per_item=30, frac=frac, size=5.0), seed)
        _, params = _flags(inst.graph, outliers="hlasso")
        assert 0.9 <= params["sigma"] / inst.sigma_eff <= 1.1, (seed, params["sigma"])


def test_noise_level_on_sparse_graphs() -> None:
    """The degrees-of-freedom correction keeps σ̂/σ within [0.8, 1.2] at 4–8 rows per item (a plain trimmed rms is ≈ 0.6σ)."""
    for spec in (
        PlantedSpec(n=400, rows_per_item=4, frac=0.0),
        PlantedSpec(n=400, rows_per_item=8, design="band", frac=0.05, size=5.0),
    ):
        for seed in range(2):
            inst = planted_instance(spec, seed)
            sc = trimmed_scale(inst.graph)
            assert 0.8 <= sc.sigma / inst.sigma_eff <= 1.2, (spec, seed, sc.sigma)


@pytest.mark.parametrize(
    "spec",
    [
        PlantedSpec(n=150, rows_per_item=20, frac=0.1, size=4.0),
        PlantedSpec(n=200, rows_per_item=10, frac=0.05, size=5.0, design="band"),
        PlantedSpec(n=150, rows_per_item=20, frac=0.0, flipper_frac=0.1),
    ],
    ids=["uniform", "band", "flippers"],
)
def test_lbi_stop_matches_hlasso(spec: PlantedSpec) -> None:
    """LBI (κ = 100) stopped at t = 1/λ* flags the rows the HLASSO flags at λ*: Jaccard overlap ≥ 0.9 on every draw.

    With the old defaults both stop at the 5 % budget and agree too, but on a different, fixed share; the
    test also requires the LBI run to record the adaptive λ* it stopped at.
    """
    for seed in range(2):
        g = planted_instance(spec, seed).graph
        f_lbi, p_lbi = _flags(g, outliers="lbi", kappa=100.0)
        f_hl, p_hl = _flags(g, outliers="hlasso")
        union = int((f_lbi | f_hl).sum())
        overlap = (f_lbi & f_hl).sum() / union if union else 1.0
        assert overlap >= 0.9, (seed, overlap)
        assert p_lbi["adaptive_lambda"] == pytest.approx(p_hl["lambda_star"])
        assert p_lbi["t_stop"] == pytest.approx(1.0 / p_hl["lambda_star"], rel=0.02)


def test_bh_threshold_on_clean_and_contaminated_residuals() -> None:
    """t* is the Bonferroni point Φ̄⁻¹(q/2W) on clean residuals and falls to the floor under many large outliers."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal(10_000)
    t_clean = bh_threshold(z, np.ones(z.size))
    assert t_clean == pytest.approx(4.417, abs=0.01)  # Φ̄⁻¹(0.1 / 20,000)
    z[:1000] += 8.0
    assert bh_threshold(z, np.ones(z.size)) == pytest.approx(2.576)
    # weights count as replications: one row of weight 2 is two rows
    assert bh_threshold(z[:10], np.full(10, 2.0)) == pytest.approx(bh_threshold(np.repeat(z[:10], 2), np.ones(20)))


def test_upset_curve_cut() -> None:
    """±1: no cut without a contamination floor; with 10 % flips at every gap the cut is finite."""
    rng = np.random.default_rng(1)
    gap = rng.uniform(0, 3, 20_000)
    clean = rng.random(gap.size) < 1 / (1 + np.exp(3 * gap))
    cut, eps, _ = upset_gap_cut(gap, clean, np.ones(gap.size))
    assert math.isinf(cut) and eps < 0.01
    flipped = clean ^ (rng.random(gap.size) < 0.1)
    cut, eps, _ = upset_gap_cut(gap, flipped, np.ones(gap.size))
    assert 0.05 <= eps <= 0.15 and 0.5 <= cut <= 2.0
    assert is_plus_minus_one(np.array([1.0, -1.0, 0.0])) and not is_plus_minus_one(np.array([0.3, -1.0]))


def test_exact_data_flag_nothing() -> None:
    """Data a ranking fits exactly: σ̂ = 0, λ* = ∞, nothing flagged and the scores are least squares."""
    rng = np.random.default_rng(2)
    th = rng.standard_normal(20)
    i, j = rng.integers(0, 20, 200), rng.integers(0, 19, 200)
    j[j >= i] += 1
    g = ComparisonGraph.from_arrays(i, j, th[i] - th[j], n=20)
    ad = adaptive_lambda(g)
    assert ad.sigma == 0 and math.isinf(ad.lam) and ad.t_stop == 0.0
    for outliers in ("lbi", "hlasso"):
        flags, _ = _flags(g, outliers=outliers)
        assert not flags.any()


@pytest.mark.slow
def test_family_grid_reduced() -> None:
    """A reduced grid of the benchmark: 3–5σ graded cells on well-connected uniform graphs (30 rows per item), ≤ 10 %.

    Mean precision ≥ 0.85 over the cells, mean recall ≥ 0.6 over all sizes and ≥ 0.9 at 5σ (measured: 0.91,
    0.68, 0.96). The oracle's recall at 3σ is about 0.5 per row: docs/methods/ranking.md §8.6 says where 0.9
    cannot be reached.
    """
    rec, prec, rec5 = [], [], []
    for size in (3.0, 4.0, 5.0):
        for frac in (0.01, 0.05, 0.1):
            for outcome in ("graded", "graded_ties"):
                inst = planted_instance(PlantedSpec(n=300, rows_per_item=30, frac=frac, size=size, outcome=outcome), 7)
                flags, _ = _flags(inst.graph)
                r, p = _recall_precision(flags, inst.outlier)
                rec.append(r)
                prec.append(p)
                if size == 5.0:
                    rec5.append(r)
    assert np.mean(prec) >= 0.85 and np.mean(rec) >= 0.6 and np.mean(rec5) >= 0.9, (rec, prec)


def test_a_budget_the_rule_does_not_read_is_named(caplog: pytest.LogCaptureFixture) -> None:
    """A spec that still sets ``budget`` (the former default's knob) is told that the adaptive rule ignores it."""
    g = issue_instance(0).graph
    with caplog.at_level("WARNING", logger="crowdflow.ranking.fit"):
        fit_ranking(g, budget=0.1, diagnostics=False)
    assert "budget=0.1 is ignored" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="crowdflow.ranking.fit"):
        fit_ranking(g, budget=0.1, stop_rule="budget", diagnostics=False)
    assert "ignored" not in caplog.text
