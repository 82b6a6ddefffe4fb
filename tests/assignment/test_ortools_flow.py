"""The flow backend's OR-Tools solver (crowdflow.assignment.ortools_flow, docs/methods/assignment.md §3.2).

On a generated family of small instances (continuous and tie-heavy weights, non-positive weights,
binding and free budget and caps, ungrouped elements, repeated key pairs, empty candidate lists) the
selection equals brute force and the HiGHS LP optimum to 1e-9 relative, is certified, and satisfies
every cap. ``certified`` keeps its meaning: the integer-grid duals are refined on the float costs
when the certificate rejects them, and a selection that fails the certificate goes to the HiGHS LP.
"""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.assignment import projector
from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.assignment.flow_backend import _FlowNetwork
from crowdflow.assignment.ortools_flow import cost_bits, solve_ortools
from crowdflow.assignment.projector import TVCSProjector, _certified
from crowdflow.synth.assignment import SCORE_LAWS, candidate_draw


def _check(u, cons, ref: float) -> None:
    res = TVCSProjector(cons, flow_solver="ortools", prune_min_p=0).select(u)
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
def test_equals_highs_on_the_family(law, lists, shape):
    """Every family shape of the benchmark (docs/methods/assignment.md §8.3) at ~600 candidates:
    OR-Tools equals the HiGHS LP and the numba kernel."""
    d = candidate_draw(600, law, lists, shape[0], shape[1], seed=1, list_length=8)
    cons = d.constraints()
    lp = TVCSProjector(cons, backend="lp").select(d.score)
    assert lp.certified
    _check(d.score, cons, lp.objective)
    numba = TVCSProjector(cons, flow_solver="numba").select(d.score)
    assert abs(numba.objective - lp.objective) <= 1e-9 * lp.objective


def test_empty_and_degenerate_inputs():
    """No candidates, budget 0, all caps 0, no positive weight: the empty selection, certified."""
    for u, v1, v2, c1, c2, tot in [
        (np.zeros(0), np.zeros(0, int), np.zeros(0, int), None, None, None),
        (np.ones(4), [0, 0, 1, 1], [0, 1, 0, 1], 2, 2, 0),
        (np.ones(4), [0, 0, 1, 1], [0, 1, 0, 1], 0, 0, 4),
        (-np.ones(4), [0, 0, 1, 1], [0, 1, 0, 1], 2, 2, 4),
    ]:
        cons = TVCSConstraints.build(len(u), v1, v2, c1, c2, tot)
        res = TVCSProjector(cons, flow_solver="ortools").select(np.asarray(u, float))
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
    res = TVCSProjector(cons, flow_solver="ortools").select(u)
    lp = TVCSProjector(cons, backend="lp").select(u)
    assert res.backend == "flow->lp" and res.certified
    assert abs(res.objective - lp.objective) <= 1e-9 * lp.objective
    assert "certificate gap" in caplog.text


def test_cost_bits_keeps_ortools_in_range():
    """40 bits up to ~10^6 nodes, fewer beyond, so OR-Tools never answers BAD_COST_RANGE."""
    assert cost_bits(10) == 40 and cost_bits(10**6) == 40
    assert cost_bits(2**30) == 29
