"""The flow backend's OR-Tools solver (crowdflow.assignment.ortools_flow, docs/methods/assignment.md §3.2).

On a generated family of small instances (continuous and tie-heavy weights, non-positive weights,
binding and free budget and caps, ungrouped elements, repeated key pairs, empty candidate lists) the
selection equals brute force and the HiGHS LP optimum to 1e-9 relative, is certified, and satisfies
every cap; so it does on the benchmark family's shapes, with column generation forced. Whole-number
and common-unit weights become small integer costs (``integer_gains``). ``certified`` keeps its meaning: the integer-grid duals are refined on the float costs
when the certificate rejects them, and a selection that fails the certificate goes to the HiGHS LP.
"""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.assignment import projector
from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.assignment.flow_backend import _FlowNetwork
from crowdflow.assignment.ortools_flow import cost_bits, integer_gains, solve_ortools
from crowdflow.assignment.projector import TVCSProjector, _certified
from crowdflow.synth.assignment import SCORE_LAWS, candidate_draw


def _check(u, cons, ref: float) -> None:
    """With and without the one-view relaxation in front (so the flow path runs on every instance)."""
    for relax in (True, False):
        res = TVCSProjector(cons, prune_min_p=0, relaxation_check=relax).select(u)
        assert res.certified
        assert cons.is_feasible(res.x)
        assert not np.any(res.x & (u <= 0))
        assert abs(res.objective - ref) <= 1e-9 * max(1.0, abs(ref))
        assert _certified(res.objective, res.dual_bound)


@pytest.mark.parametrize("i", range(120))
def test_equals_brute_force_on_tiny_instances(i, generic_instance, random_instance, brute_opt):
    """Tiny structures (repeated key pairs, ungrouped elements, ties, zero weights) and worker × task
    grids with caps in [0, other side]: OR-Tools' selection equals the brute-force optimum."""
    rng = np.random.default_rng([19, i])
    if i % 2:
        u, v1, v2, c1, c2, tot, cons = generic_instance(rng, i)
    else:
        u, v1, v2, c1, c2, tot = random_instance(
            rng, 3, 4, density=0.9, weights="cont" if i % 4 else "int", total_mode="random" if i % 3 else "caps"
        )
        u = u - (0.3 if i % 8 == 0 else 0.0)  # some negative weights
        cons = TVCSConstraints.build(u.shape[0], v1, v2, c1, c2, tot)
    if cons.p > 14:
        pytest.skip("brute force limit")
    _check(u, cons, brute_opt(u, cons))


@pytest.mark.parametrize("law", SCORE_LAWS)
@pytest.mark.parametrize("lists", ["sparse", "dense"])
@pytest.mark.parametrize("shape", [("tight", "binding"), ("loose", "free"), ("tight", "free"), ("loose", "binding")])
def test_equals_highs_on_the_family(law, lists, shape, monkeypatch):
    """Every family shape of the benchmark (docs/methods/assignment.md §8.3) at ~600 candidates:
    OR-Tools equals the HiGHS LP, on the full network and with column generation forced (every
    round solved, or the full network after a quarter of the positive weights)."""
    d = candidate_draw(600, law, lists, shape[0], shape[1], seed=1, list_length=8)
    cons = d.constraints()
    lp = TVCSProjector(cons, backend="lp").select(d.score)
    assert lp.certified
    _check(d.score, cons, lp.objective)  # column generation within the default budget
    full = TVCSProjector(cons).select(d.score)
    assert full.certified and abs(full.objective - lp.objective) <= 1e-9 * lp.objective
    monkeypatch.setattr(projector, "CG_BUDGET", 100.0)
    _check(d.score, cons, lp.objective)


def test_empty_and_degenerate_inputs():
    """No candidates, budget 0, all caps 0, no positive weight: the empty selection, certified."""
    for u, v1, v2, c1, c2, tot in [
        (np.zeros(0), np.zeros(0, int), np.zeros(0, int), None, None, None),
        (np.ones(4), [0, 0, 1, 1], [0, 1, 0, 1], 2, 2, 0),
        (np.ones(4), [0, 0, 1, 1], [0, 1, 0, 1], 0, 0, 4),
        (-np.ones(4), [0, 0, 1, 1], [0, 1, 0, 1], 2, 2, 4),
    ]:
        cons = TVCSConstraints.build(len(u), v1, v2, c1, c2, tot)
        res = TVCSProjector(cons).select(np.asarray(u, float))
        assert res.certified and res.objective == 0.0 and not res.x.any()


@pytest.mark.parametrize("step", [5e-12, 1e-14])
def test_grid_duals_are_refined_on_the_floats(step):
    """When the caller's certificate rejects the 2^-40 grid's duals, the potentials are recomputed
    on the float costs. Weights a few grid steps apart (5e-12): the rounded optimum is the float
    optimum and the float duals certify to rounding error. Near-ties below the grid (1e-14): the
    rounded optimum may not be a float optimum (a negative cycle); the grid duals are returned and
    the caller's certificate decides (within 1e-9 it holds: the loss is below the grid)."""
    rng = np.random.default_rng(0)
    n, m = 12, 30
    w, t = np.divmod(np.arange(n * m), m)
    u = 1.0 + rng.permutation(n * m) * step
    cons = TVCSConstraints.build(n * m, w, t, 7, 2, 40)
    calls = []

    def strict(x, duals):  # reject the grid duals, as if near-ties had opened a gap
        calls.append(cons.dual_bound(u, *duals) - float(u[x].sum()))
        return False

    x, stats = solve_ortools(_FlowNetwork(cons), u, strict)
    obj = float(u[x].sum())
    gap = cons.dual_bound(u, *stats["duals"]) - obj
    assert len(calls) == 1 and cons.is_feasible(x)
    if step > 1e-12:
        assert stats["float_potentials"] and gap <= 1e-13 * obj
    assert _certified(obj, obj + gap)
    # HiGHS' own tolerances (1e-7) cannot resolve these weights: it is no better, and may be worse
    assert obj >= TVCSProjector(cons, backend="lp").select(u).objective - 1e-9 * obj


def test_a_failed_certificate_falls_back_to_the_lp(monkeypatch, caplog):
    """``certified`` keeps its meaning: a selection whose certificate fails is never reported as
    certified by the flow backend; the projector answers with the HiGHS LP instead."""
    rng = np.random.default_rng(3)
    n, m = 10, 20
    w, t = np.divmod(np.arange(n * m), m)
    u = rng.random(n * m)
    cons = TVCSConstraints.build(n * m, w, t, 5, 3, 30)

    def wrong(net, u, certify):  # a feasible but suboptimal flow with zero duals
        x = np.zeros(u.shape[0], bool)
        x[0] = True
        assert not certify(x, (np.zeros(cons.n1), np.zeros(cons.n2), 0.0))
        return x, {"duals": (np.zeros(cons.n1), np.zeros(cons.n2), 0.0), "phases": 0}

    monkeypatch.setattr(projector, "solve_ortools", wrong)
    res = TVCSProjector(cons, relaxation_check=False).select(u)  # the flow path, not the one-view greedy
    lp = TVCSProjector(cons, backend="lp").select(u)
    assert res.backend == "flow->lp" and res.certified
    assert abs(res.objective - lp.objective) <= 1e-9 * lp.objective
    assert "certificate gap" in caplog.text


def test_cost_bits_keeps_ortools_in_range():
    """40 bits up to ~10^6 nodes, fewer beyond, so OR-Tools never answers BAD_COST_RANGE."""
    assert cost_bits(10) == 40 and cost_bits(10**6) == 40
    assert cost_bits(2**30) == 29


def test_integer_gains_use_small_exact_units():
    """Whole numbers are used as they are and divided by their gcd; weights on a common unit that is
    not a power of two (ratings / 5) and dyadic ones share a factor on the 2^-40 grid and shrink the
    same way; generic weights keep the grid. ``gain·unit`` reproduces the weights (exactly for the
    whole numbers)."""
    rng = np.random.default_rng(0)
    ties = rng.integers(1, 5, 1000).astype(float)
    ties[:70] = 0.0  # non-positive weights enter as 0 (the gcd sample must skip them)
    gain, unit = integer_gains(ties, 40)
    assert unit == 1.0 and np.array_equal(gain, ties.astype(np.int64))
    gain, unit = integer_gains(2 * ties, 40)
    assert unit == 2.0 and np.array_equal(gain, ties.astype(np.int64))
    for scaled in (ties / 5, ties * 0.25):
        gain, unit = integer_gains(scaled, 40)
        assert gain.max() == 4 and np.allclose(gain * unit, scaled, rtol=0, atol=1e-12)
    cont = rng.random(1000)
    gain, unit = integer_gains(cont, 40)
    assert unit == cont.max() * 2.0**-40 and np.max(np.abs(gain * unit - cont)) <= unit
    big = np.array([2.0**41, 3.0])  # whole numbers beyond the grid: rounded like any weight
    gain, unit = integer_gains(big, 40)
    assert gain.max() <= 2**40


@pytest.mark.parametrize("scale", [1.0, 0.2, 1e6 + 0.5])
def test_tie_heavy_weights_on_any_unit_equal_highs(scale):
    """Integer ratings 1–5 times a unit (whole, decimal, and one that leaves generic grid costs) on a
    sparse tight instance with column generation forced: OR-Tools equals HiGHS, certified."""
    d = candidate_draw(800, "ties", "sparse", "tight", "free", seed=2, list_length=8)
    u = (np.random.default_rng(1).integers(1, 6, d.p) * scale).astype(float)
    cons = d.constraints()
    lp = TVCSProjector(cons, backend="lp").select(u)
    _check(u, cons, lp.objective)
