"""The flow backend of the TVCS selection (crowdflow.assignment.flow_backend): T10 at scale,
the reduced-cost column generation (top-weight and capped-greedy seeds, warm-started rounds), warm
starts of the network from arbitrary duals, and the compiled greedy-windows seed.

The compiled min-cost-flow kernel itself is checked in test_min_cost_flow.py. Column generation and
warm starts belong to that kernel (docs/methods/assignment.md §3.3), so every test here runs with
``flow_solver="numba"``; the default OR-Tools solver is checked in test_ortools_flow.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.assignment import projector
from crowdflow.assignment.backends import greedy_select
from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.assignment.flow_backend import _FlowNetwork, _greedy_windows
from crowdflow.assignment.projector import TVCSProjector, tvcs_select
from crowdflow.synth.assignment import synthetic_assignment


@pytest.fixture(autouse=True)
def _numba_kernel(monkeypatch):
    monkeypatch.setattr(projector, "DEFAULT_FLOW_SOLVER", "numba")


def test_flow_matches_lp_on_crowd_sized_instance():
    """T10 at assignment scale (p = 4 000, both views binding)."""
    cand, wc, tc, budget = synthetic_assignment(20, 200, 0.2, seed=3)
    rng = np.random.default_rng(0)
    u = rng.random(len(cand))
    w = cand["worker"].str[1:].astype(int).to_numpy()
    t = cand["task"].str[1:].astype(int).to_numpy()
    flow = tvcs_select(u, w, t, wc, tc, budget, backend="flow")
    lp = tvcs_select(u, w, t, wc, tc, budget, backend="lp")
    assert flow.certified and lp.certified
    assert abs(flow.objective - lp.objective) <= 1e-9 * lp.objective
    assert flow.iterations > 0 and "phases_per_scale" in flow.trace


@pytest.mark.parametrize("seed", range(6))
def test_flow_column_generation_equals_full_flow_and_lp(seed):
    """The reduced-cost column generation of the flow backend (forced on small instances) returns
    the full problem's optimum, including instances where the first candidate set is too small
    (tight caps push the optimum onto low weights) and extra rounds or the full fallback run."""
    rng = np.random.default_rng(seed)
    n, m = 30, 60
    w, t = np.divmod(np.arange(n * m), m)
    keep = rng.random(n * m) < 0.6
    w, t = w[keep], t[keep]
    # seed-dependent tightness: caps of 1-2 with a large budget force low-weight elements in
    c1 = rng.integers(1, 3 if seed % 2 else 12, n)
    c2 = rng.integers(1, 3 if seed % 3 == 0 else 8, m)
    u = rng.random(w.size) ** (1 + 3 * (seed % 2)) - 0.05  # some non-positive weights
    total = int(rng.integers(20, 200))
    cons = TVCSConstraints.build(w.size, w, t, c1, c2, total)
    pruned = TVCSProjector(cons, prune_min_p=0, prune_factor=1.0).select(u)
    full = TVCSProjector(cons, prune_min_p=10**12).select(u)
    lp = TVCSProjector(cons, backend="lp").select(u)
    assert "pruning" in pruned.trace and "pruning" not in full.trace
    assert pruned.certified and cons.is_feasible(pruned.x)
    assert abs(pruned.objective - lp.objective) <= 1e-9 * max(1.0, lp.objective)
    assert abs(full.objective - lp.objective) <= 1e-9 * max(1.0, lp.objective)
    assert not np.any(pruned.x & (u <= 0))


def test_flow_column_generation_extends_or_falls_back_when_caps_bind():
    """Each worker may take one task only and high weights sit on few workers: the top-weight
    candidates cannot fill the budget, so the duals price in left-out elements and the loop adds
    them; the answer still equals the LP."""
    rng = np.random.default_rng(1)
    n, m = 40, 40
    w, t = np.divmod(np.arange(n * m), m)
    u = rng.random(n * m) * 0.1 + np.where(w < 3, 1.0, 0.0)  # workers 0-2 dominate the top weights
    cons = TVCSConstraints.build(n * m, w, t, 1, 1, 30)
    pruned = TVCSProjector(cons, prune_min_p=0, prune_factor=1.0).select(u)
    lp = TVCSProjector(cons, backend="lp").select(u)
    assert pruned.trace["pruning"].get("rounds", 0) >= 2 or pruned.trace["pruning"].get("abandoned")
    assert abs(pruned.objective - lp.objective) <= 1e-9 * lp.objective
    assert pruned.certified and cons.is_feasible(pruned.x)


def _rank_one_instance(seed):
    """Rank-one weights (worker skill × task uncertainty, the closed loop's score shape) with
    binding caps: the top weights sit on the best workers and tasks and cannot fill the budget.
    Odd seeds add noise (some weights ≤ 0), elements without a task (private nodes) and repeated
    (worker, task) pairs (duplicate-pair nodes)."""
    rng = np.random.default_rng(seed)
    n, m = 60, 40
    w, t = np.divmod(np.arange(n * m), m)
    keep = rng.random(n * m) < 0.8
    w, t = w[keep], t[keep]
    skill, unc = rng.beta(5, 2, n), 1 - rng.random(m) ** 2
    if seed % 2:
        rep = rng.random(w.size) < 0.05
        w, t = np.concatenate([w, w[rep]]), np.concatenate([t, t[rep]])
    u = skill[w] * unc[t]
    v2 = t.copy()
    if seed % 2:
        u = u + 0.02 * rng.standard_normal(u.size)
        v2[rng.random(t.size) < 0.03] = -1
    c1 = rng.integers(2, 8, n)
    c2 = rng.integers(5, 30, m)
    total = int(0.5 * min(c1.sum(), c2.sum()))
    return u, TVCSConstraints.build(w.size, w, v2, c1, c2, total)


@pytest.mark.parametrize("seed", range(8))
def test_flow_greedy_seed_and_warm_rounds_equal_lp(seed):
    """The capped-greedy seed of the column generation (used when the top weights cannot fill the
    budget) and its warm-started later rounds return the full problem's optimum: equal to HiGHS
    and to the full network, certified on the full problem, feasible."""
    u, cons = _rank_one_instance(seed)
    pruned = TVCSProjector(cons, prune_min_p=0).select(u)
    full = TVCSProjector(cons, prune_min_p=10**12).select(u)
    lp = TVCSProjector(cons, backend="lp").select(u)
    assert pruned.trace["pruning"]["reseeded"] and not pruned.trace["pruning"].get("abandoned")
    assert pruned.certified and cons.is_feasible(pruned.x)
    assert abs(pruned.objective - lp.objective) <= 1e-9 * max(1.0, lp.objective)
    assert abs(full.objective - lp.objective) <= 1e-9 * max(1.0, lp.objective)
    assert not np.any(pruned.x & (u <= 0))


@pytest.mark.parametrize("seed", [0, 2])
def test_flow_warm_rounds_both_schedules_equal_lp(seed, monkeypatch):
    """With no rank windows around the greedy (``SEED_WINDOW = 0``) the seed misses many optimal
    elements: the warm-started re-solves run with the ε-scaling schedule (many violators) and
    with the exact tolerance only (few); the result still equals HiGHS and is certified."""
    monkeypatch.setattr(projector, "SEED_WINDOW", 0.0)
    schedules = []
    real = projector._warm_scale_bits

    def spy(n_viol, eps):
        bits = real(n_viol, eps)
        schedules.append(len(bits))
        return bits

    monkeypatch.setattr(projector, "_warm_scale_bits", spy)
    rng = np.random.default_rng(seed)
    n, m = 300, 100
    w, t = np.divmod(np.arange(n * m), m)
    u = rng.beta(5, 2, n)[w] * (1 - rng.random(m)[t] ** 2) + 0.01 * rng.standard_normal(n * m)
    c1, c2 = np.full(n, 10), np.full(m, 30)
    cons = TVCSConstraints.build(n * m, w, t, c1, c2, int(0.5 * min(c1.sum(), c2.sum())))
    pruned = TVCSProjector(cons, prune_min_p=0).select(u)
    lp = TVCSProjector(cons, backend="lp").select(u)
    assert pruned.trace["pruning"]["reseeded"] and pruned.trace["pruning"]["rounds"] >= 3
    assert max(schedules) > 0 and min(schedules) == 0  # ε-scaling levels, then exact tolerance only
    assert pruned.certified and cons.is_feasible(pruned.x)
    assert abs(pruned.objective - lp.objective) <= 1e-9 * lp.objective


@pytest.mark.parametrize("bits", [(), tuple(range(0, 31, 2))])
def test_flow_network_warm_start_from_any_duals_is_exact(bits, generic_instance, brute_opt):
    """``_FlowNetwork.solve(warm=duals)`` starts from the potentials of arbitrary duals (random
    ones, far from optimal, or the optimal ones) with exact costs, on generic structures with
    private and duplicate-pair nodes; it still reaches the optimum (brute force) and its duals
    certify it."""
    rng = np.random.default_rng(11)
    for i in range(120):
        u, _, _, _, _, _, cons = generic_instance(rng, i, positive=True)
        opt = brute_opt(u, cons)
        net = _FlowNetwork(cons)
        _, cold = net.solve(u)
        random_duals = (rng.random(cons.n1) * 2, rng.random(cons.n2) * 2, float(rng.random() * 2))
        for duals in (cold["duals"], random_duals):
            x, st = net.solve(u, scale_bits=bits, warm=duals)
            assert cons.is_feasible(x.astype(np.int8))
            assert abs(float(u[x].sum()) - opt) <= 1e-9 * max(1.0, opt), (i, duals)
            assert cons.dual_bound(u, *st["duals"]) - opt <= 1e-9 * max(1.0, opt), i


def test_greedy_windows_seed_matches_definition(random_instance):
    """``_greedy_windows``: pass 1 is the capped greedy (:func:`greedy_select`); the kept set adds,
    per group the greedy used, the members ranked within ``w`` of the greedy's rank range."""
    rng = np.random.default_rng(3)
    for _ in range(30):
        u, v1, v2, c1, c2, tot = random_instance(rng, 7, 9, density=0.7, total_mode="frac", nogroup=0.1)
        cons = TVCSConstraints.build(u.size, v1, v2, c1, c2, tot)
        order = np.flatnonzero(u > 0)
        order = order[np.lexsort((order, -u[order]))]
        w1 = rng.integers(0, 3, cons.n1)
        w2 = rng.integers(0, 3, cons.n2)
        keep = np.zeros(u.size, bool)
        keep[
            order[_greedy_windows(cons.view1[order], cons.view2[order], cons.caps1, cons.caps2, cons.total, w1, w2)]
        ] = True
        greedy = greedy_select(u, v1, v2, c1, c2, tot)
        expect = greedy.copy()
        for view, wv in ((cons.view1, w1), (cons.view2, w2)):
            for g in range(wv.shape[0]):
                members = [i for i in order if view[i] == g]  # descending weight = rank order
                ranks = [r for r, i in enumerate(members) if greedy[i]]
                if ranks:
                    for r, i in enumerate(members):
                        if ranks[0] - wv[g] <= r <= ranks[-1] + wv[g]:
                            expect[i] = True
        np.testing.assert_array_equal(keep, expect)
