"""The outcome-law outlier rule for ±1 outcomes, with and without ties (docs/methods/ranking.md §3.4.2, issue #35).

Every claim is checked against a reference: the law's p-values against enumeration, the ML fit against a
generic optimiser, the flags against the oracle that knows the true scores and the generating law and
applies the same false-discovery cut (:func:`crowdflow.synth.ranking.oracle_pvalues` +
:func:`crowdflow.ranking.laws.bh_reject`), on draws from the planted family (binary Bradley–Terry, binary
Thurstone, Thurstone with ties, annotator flippers, clean data; several shapes and seeds).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit, ndtr

from crowdflow.ranking import ComparisonGraph, fit_ranking, undetectable_rows
from crowdflow.ranking.laws import (
    RIDGE,
    _row_loglik,
    bh_reject,
    fit_law,
    law_flags,
    law_probabilities,
    law_pvalues,
    outcome_law,
    reversal_mixture,
)
from crowdflow.ranking.scale import bh_threshold
from crowdflow.synth.ranking import PlantedSpec, oracle_pvalues, planted_instance

#: The issue's target: the rule's recall and precision within TOL of the oracle's, both capped at CAP.
CAP, TOL = 0.9, 0.05


def _rp(flags: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    tp = int((flags & truth).sum())
    return tp / max(int(truth.sum()), 1), (tp / int(flags.sum()) if flags.any() else 1.0)


def test_outcome_law_is_read_from_the_values() -> None:
    assert outcome_law(np.array([1.0, -1.0, 1.0])) == "binary"
    assert outcome_law(np.array([2.0, -2.0, 0.0])) == "ties"
    assert outcome_law(np.array([2.0, 2.0, 0.0])) == "ties"
    assert outcome_law(np.array([0.3, -1.0, 1.0])) == "graded"
    assert outcome_law(np.array([-2.0, -1.0, 0.0, 1.0, 2.0])) == "graded"


@pytest.mark.parametrize("link", ["logit", "probit"])
@pytest.mark.parametrize("tau", [0.0, 0.3, 1.5])
def test_pvalues_against_enumeration(link: Any, tau: float) -> None:
    """p = Σ of the outcome probabilities no larger than the observed one, by enumeration; the law sums to 1."""
    rng = np.random.default_rng(3)
    delta = rng.normal(0, 4, 400)
    outs = np.array([1.0, 0.0, -1.0]) if tau > 0 else np.array([1.0, -1.0])
    y = rng.choice(outs, delta.size)
    pw, pt, pl = law_probabilities(delta, tau, link)
    np.testing.assert_allclose(pw + pt + pl, 1.0, atol=1e-12)
    F = expit if link == "logit" else ndtr
    np.testing.assert_allclose(pw, F(delta - tau), rtol=1e-12)
    p = law_pvalues(y, delta, tau, link)
    for k in range(delta.size):
        probs = {1.0: pw[k], 0.0: pt[k], -1.0: pl[k]}
        obs = probs[float(y[k])]
        ref = sum(v for v in probs.values() if v <= obs * (1 + 1e-12))
        assert p[k] == pytest.approx(ref, rel=1e-9, abs=1e-300)
    if tau == 0.0:  # binary: σ(−|δ|) on an upset, 1 otherwise
        upset = y * delta < 0
        np.testing.assert_allclose(p[upset], F(-np.abs(delta[upset])), rtol=1e-9)
        assert np.all(p[~upset] >= 0.5 - 1e-12)


def test_bh_reject_matches_the_graded_threshold() -> None:
    """On Gaussian p-values bh_reject flags exactly the rows beyond bh_threshold (one cut, two forms); weights replicate."""
    rng = np.random.default_rng(0)
    for frac in (0.02, 0.1, 0.3):
        z = rng.standard_normal(5000)
        k = int(frac * z.size)
        z[:k] += rng.choice([-1, 1], k) * rng.uniform(3, 8, k)
        w = rng.choice([1.0, 2.0], z.size)
        flags = bh_reject(2.0 * ndtr(-np.abs(z)), w)
        assert flags.any()
        np.testing.assert_array_equal(flags, np.abs(z) >= bh_threshold(z, w) * (1 - 1e-12))
    p = rng.uniform(size=50)
    np.testing.assert_array_equal(bh_reject(p, np.full(50, 2.0)), bh_reject(np.repeat(p, 2), np.ones(100))[::2])


@pytest.mark.parametrize(("law", "link"), [("binary", "logit"), ("ties", "logit"), ("ties", "probit")])
def test_fit_law_is_the_penalised_mle(law: Any, link: Any) -> None:
    """Fisher scoring reaches the optimum a generic optimiser finds (objective within 1e-6 relative), weights included."""
    spec = PlantedSpec(
        n=25, rows_per_item=16, outcome="pm1_btl" if law == "binary" else "pm1_thurstone", sigma=0.5, frac=0.0
    )
    g = planted_instance(spec, 4).graph
    rng = np.random.default_rng(1)
    wk = rng.uniform(0.5, 2.0, g.m)
    fit = fit_law(g, wk, law=law, link=link)
    rho = RIDGE * float(np.mean(g.w))
    z = np.sign(g.y)

    def negobj(x: np.ndarray) -> float:
        tau = abs(float(x[-1])) if law == "ties" else 0.0
        s = x[:-1]
        return -float(np.sum(wk * _row_loglik(z, g.gradient(s), tau, link))) + 0.5 * rho * float(s @ s)

    ref = minimize(negobj, np.r_[np.zeros(g.n), 0.4], method="L-BFGS-B", options={"maxiter": 20000, "ftol": 1e-14})
    ours = negobj(np.r_[fit.s, fit.tau])
    assert ours <= ref.fun * (1 + 1e-6) + 1e-9, (ours, ref.fun)


def test_reversal_mixture_estimates_the_reversal_share() -> None:
    """Clean BTL data: ε̂ ≤ 0.03; 10 % of the rows reversed at random: ε̂ within 0.03 of 0.10 + the natural upsets' excess."""
    for seed in range(2):
        inst = planted_instance(PlantedSpec(n=100, rows_per_item=40, outcome="pm1_btl", sigma=0.3, frac=0.0), seed)
        g = inst.graph
        eps = reversal_mixture(g, law="binary", link="logit", by_annotator=False).eps
        assert eps <= 0.03, (seed, eps)
        rng = np.random.default_rng(seed)
        y = g.y.copy()
        rev = rng.random(g.m) < 0.1
        y[rev] = -y[rev]
        g2 = ComparisonGraph.from_arrays(g.i, g.j, y, n=g.n)
        eps2 = reversal_mixture(g2, law="binary", link="logit", by_annotator=False).eps
        assert abs(eps2 - 0.10) <= 0.03, (seed, eps2)


#: Small draws of every ±1 family of the generator: binary BTL and binary Thurstone with flips among
#: far-apart pairs (the issue's reproducer) or anywhere, Thurstone with ties, annotator flippers.
#: All cells are slow (10–17 s each with the presence test's bootstrap; the binary law is opt-in, and
#: benchmarks/results/ranking_outliers.md reports every family against the oracle); the law's own fit, p-values and
#: flags are checked in the default run by the tests above and below.
FAMILY = [
    pytest.param(
        PlantedSpec(n=150, rows_per_item=30, outcome="pm1_btl", sigma=0.2, frac=0.1, outlier_gap=5.0),
        marks=pytest.mark.slow,
    ),
    *(
        pytest.param(s, marks=pytest.mark.slow)
        for s in (
            PlantedSpec(n=150, rows_per_item=30, outcome="pm1_btl", sigma=0.3, frac=0.05),
            PlantedSpec(
                n=150, rows_per_item=30, outcome="pm1_thurstone", tie_width=0.0, sigma=0.3, frac=0.1, outlier_gap=5.0
            ),
            PlantedSpec(n=100, rows_per_item=30, outcome="pm1_thurstone", sigma=0.3, frac=0.1, outlier_gap=5.0),
            PlantedSpec(n=100, rows_per_item=30, outcome="pm1_thurstone", sigma=0.3, frac=0.0, flipper_frac=0.1),
            PlantedSpec(n=150, rows_per_item=30, outcome="pm1_btl", sigma=0.1, frac=0.0, flipper_frac=0.1),
        )
    ),
]


@pytest.mark.parametrize(
    "spec", FAMILY, ids=lambda s: f"{s.outcome}-tw{s.tie_width:g}-f{s.frac:g}-gap{s.outlier_gap:g}-ff{s.flipper_frac:g}"
)
def test_rule_within_the_target_of_the_oracle(spec: PlantedSpec) -> None:
    """Mean recall and precision over 3 draws within 0.05 of the oracle's, both capped at 0.9 (the issue's target).

    The former ±1 rule (an upset curve in the trimmed least-squares gap) had precision 0.67–0.71 on the
    first cell where the oracle has 0.99. Each draw is also held to a looser bound (0.15 below the capped
    oracle): a draw where one item has half its comparisons reversed misplaces that item.
    """
    rec, prec, orec, oprec = [], [], [], []
    for seed in range(3):
        inst = planted_instance(spec, seed)
        g = inst.graph
        truth = inst.outlier & ~undetectable_rows(g)
        r, p = _rp(law_flags(g).flags, truth)
        o_r, o_p = _rp(bh_reject(oracle_pvalues(inst), g.w), truth)
        assert min(r, CAP) >= min(o_r, CAP) - 0.15 and min(p, CAP) >= min(o_p, CAP) - 0.15, (seed, r, p, o_r, o_p)
        rec.append(r)
        prec.append(p)
        orec.append(o_r)
        oprec.append(o_p)
    assert min(np.mean(rec), CAP) >= min(np.mean(orec), CAP) - TOL, (rec, orec)
    assert min(np.mean(prec), CAP) >= min(np.mean(oprec), CAP) - TOL, (prec, oprec)


@pytest.mark.parametrize(
    "spec",
    [
        PlantedSpec(n=150, rows_per_item=20, outcome="pm1_btl", sigma=0.3, frac=0.0, design="band"),
        PlantedSpec(
            n=300, rows_per_item=8, outcome="pm1_thurstone", sigma=0.3, frac=0.0, design="zipf", n_components=2
        ),
        PlantedSpec(n=150, rows_per_item=20, outcome="pm1_thurstone", tie_width=0.0, sigma=1.0, frac=0.0),
    ],
    ids=["btl-band", "ties-zipf-2pieces", "thurstone-binary-noisy"],
)
def test_clean_pm1_data_flag_at_most_one_percent(spec: PlantedSpec) -> None:
    """Clean ±1 data (band, Zipf with two pieces, heavy noise): at most 1 % of the rows flagged in every draw."""
    for seed in range(2):
        g = planted_instance(spec, seed).graph
        assert law_flags(g).flags.mean() <= 0.01, seed


@pytest.mark.parametrize("outliers", ["lbi", "hlasso"])
def test_fit_flags_the_law_rows(outliers: str) -> None:
    """The job's fit (identical rows merged) flags exactly the rows the law flags on the unmerged rows and records the law."""
    inst = planted_instance(
        PlantedSpec(n=60, rows_per_item=30, outcome="pm1_btl", sigma=0.2, frac=0.1, outlier_gap=5.0), 0
    )
    g = inst.graph
    r = fit_ranking(g, outliers=outliers, diagnostics=False, binary_rule="law")
    flags = r.outliers.sort_values("row_id")["is_outlier"].to_numpy(bool)
    np.testing.assert_array_equal(flags, law_flags(g).flags)
    assert r.params["outcome_kind"] == "binary" and r.params["law_link"] == "logit"
    assert flags.any()
    # the robust scores are least squares without the flagged rows
    kept = fit_ranking(
        ComparisonGraph.from_arrays(g.i[~flags], g.j[~flags], g.y[~flags], n=g.n), outliers="none", diagnostics=False
    )
    s_rob = r.scores.set_index("item")["score_robust"]
    s_ls = kept.ranking.set_index("item")["score"]
    np.testing.assert_allclose(s_rob.loc[s_ls.index].to_numpy(), s_ls.to_numpy(), atol=1e-6)
