"""The Bayes detector of the planted ±1 family (crowdflow.synth.ranking_posterior) against brute force.

The posterior reversal probabilities ``P(outlier_k | data)`` from the sampler (replica-exchange HMC with the
reversal indicators summed out and refraction at the density's jumps) must equal those from summing the same
density over a fine grid, on 3 items and 6 rows, for each part of the model: Bradley–Terry rows with reversals
anywhere, with reversals only among far-apart pairs (the density jumps at ``|d| = gσ``), Thurstone with ties,
and flipping annotators. The density's gradient must match finite differences where it is smooth, and the
model read from a draw must carry the generator's rates. (benchmarks/ranking_outliers_bayes.py uses it.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from crowdflow.ranking import ComparisonGraph
from crowdflow.synth.ranking import PlantedInstance, PlantedSpec, planted_instance
from crowdflow.synth.ranking_posterior import (
    GeneratorModel,
    brute_force_posterior,
    log_density,
    reversal_posterior,
)

I = np.array([0, 0, 1, 1, 2, 0])
J = np.array([1, 2, 2, 0, 0, 1])


def _tiny(outcome: str, y: list[float], annotators: list[int] | None = None, **spec: Any) -> PlantedInstance:
    ann = None if annotators is None else np.array([f"a{a}" for a in annotators], dtype=object)
    g = ComparisonGraph.from_arrays(I, J, np.array(y, dtype=float), n=3, annotator=ann)
    sp = PlantedSpec(n=3, outcome=outcome, sigma=0.7, **spec)  # type: ignore[arg-type]
    return PlantedInstance(g, np.zeros(6, bool), np.zeros(6), np.zeros(3), 1.0, np.zeros(2, bool), sp, 0)


CASES = {
    "btl_anywhere": (
        _tiny("pm1_btl", [1, 1, 1, 1, -1, -1], frac=0.1),
        GeneratorModel(probit=False, tie_width=0.0, sigma=0.7, eps=0.15, gap=0.0),
    ),
    "btl_far_apart": (
        _tiny("pm1_btl", [1, 1, 1, 1, -1, -1], frac=0.1, outlier_gap=1.0),
        GeneratorModel(probit=False, tie_width=0.0, sigma=0.7, eps=0.2, gap=0.7),
    ),
    "thurstone_ties": (
        _tiny("pm1_thurstone", [1, 1, 0, 1, -1, -1], frac=0.1, tie_width=0.25, outlier_gap=0.5),
        GeneratorModel(probit=True, tie_width=0.25, sigma=0.7, eps=0.2, gap=0.35),
    ),
    "flippers": (
        _tiny("pm1_thurstone", [1, 1, 0, 1, -1, -1], [0, 0, 1, 1, 0, 1], frac=0.0, flipper_frac=0.2),
        GeneratorModel(probit=True, tie_width=0.25, sigma=0.7, rho=0.3, flip_prob=0.8),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sampler_matches_grid_quadrature(case: str) -> None:
    """Two chains (θ = 0 and a prior draw; 20,000 draws each) within 0.02 of the grid (161³ points) on every row
    (measured: within 0.01), and a tie, which no reversal produces, at exactly 0."""
    inst, model = CASES[case]
    ref = brute_force_posterior(inst, model, points=161, half_width=4.5)
    got = reversal_posterior(inst, model, seed=3, warmup=1000, draws=20_000, starts=("zero", "prior"))
    assert np.max(np.abs(got.post - ref)) < 0.02, (got.post, ref)
    assert got.rhat_max < 1.01
    assert ref.max() > 0.1  # the case has rows that could be outliers
    ties = inst.graph.y == 0
    assert not got.post[ties].any() and not ref[ties].any()


def test_tempered_sampler_matches_grid_quadrature() -> None:
    """The same with three temperatures (replica exchange): the β = 1 replica still samples the posterior."""
    inst, model = CASES["btl_far_apart"]
    ref = brute_force_posterior(inst, model, points=161, half_width=4.5)
    got = reversal_posterior(inst, model, seed=4, warmup=1000, draws=10_000, starts=("zero",), betas=(1.0, 0.5, 0.25))
    assert np.max(np.abs(got.post - ref)) < 0.02, (got.post, ref)
    assert got.chains[0].swap.min() > 0.3


@pytest.mark.parametrize("case", ["btl_anywhere", "thurstone_ties", "flippers"])
def test_gradient_matches_finite_differences(case: str) -> None:
    """Central differences at a point away from the jumps agree with the analytic gradient to 1e-5."""
    inst, model = CASES[case]
    theta = np.array([0.3, -0.4, 0.9])
    _, grad, _ = log_density(inst, model, theta)
    h = 1e-6
    num = [
        (log_density(inst, model, theta + h * e)[0] - log_density(inst, model, theta - h * e)[0]) / (2 * h)
        for e in np.eye(3)
    ]
    np.testing.assert_allclose(grad, num, atol=1e-5)


def test_model_carries_the_generators_rates() -> None:
    """ε = planted rows / rows at least gσ apart (true gaps); ρ = flippers / annotators; graded draws refused."""
    spec = PlantedSpec(n=300, rows_per_item=8, outcome="pm1_btl", sigma=0.1, frac=0.1, outlier_gap=5.0)
    inst = planted_instance(spec, 0)
    g = inst.graph
    eligible = np.abs(inst.theta[g.i] - inst.theta[g.j]) >= 0.5
    model = GeneratorModel.of(inst)
    assert model.eps == pytest.approx(round(0.1 * g.m) / eligible.sum())
    assert inst.outlier.sum() == round(0.1 * g.m) and not (inst.outlier & ~eligible).any()
    flip = planted_instance(PlantedSpec(n=100, outcome="pm1_btl", frac=0.0, flipper_frac=0.2), 1)
    assert GeneratorModel.of(flip).rho == pytest.approx(flip.flipper.mean())
    with pytest.raises(ValueError):
        GeneratorModel.of(planted_instance(PlantedSpec(n=50, outcome="graded"), 0))


def test_tempered_replicas_sample_their_temperatures() -> None:
    """Each replica's mean log likelihood equals ``E_β[log p(y | θ)]`` under ``N(θ; 0, I)·p(y | θ)^β`` by grid
    quadrature (121³ points), within 0.1 nats (measured 0.007), so the thermodynamic integral ``log_mass`` integrates the right
    curve; and that integral equals the trapezoid rule on the quadrature values within 0.05."""
    from crowdflow.synth.ranking_posterior import _arrays, _grid

    inst, model = CASES["btl_far_apart"]
    betas = (1.0, 0.6, 0.3)
    axis = np.linspace(-4.5, 4.5, 121)
    mesh = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1).reshape(-1, 3)
    i, j, y, ann, n_ann = _arrays(inst)
    lps, _ = _grid(mesh, i, j, y, ann, model.params(n_ann))
    prior = -0.5 * np.sum(mesh * mesh, axis=1)
    lik = lps - prior
    expect = []
    for b in betas:
        lw = prior + b * lik
        w = np.exp(lw - lw.max())
        expect.append(float(w @ lik / w.sum()))
    got = reversal_posterior(inst, model, seed=5, warmup=1000, draws=20_000, starts=("zero",), betas=betas)
    np.testing.assert_allclose(got.chains[0].lik_mean, expect, atol=0.1)
    trap = float(np.sum(0.5 * (np.array(expect[:-1]) + np.array(expect[1:])) * -np.diff(betas)))
    assert got.log_mass[0] == pytest.approx(trap, abs=0.05)
