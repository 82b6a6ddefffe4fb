"""The flow backend of the TVCS selection (crowdflow.assignment.flow_backend, projector): T10 at
scale, the reduced-cost column generation (top-weight and capped-greedy seeds, later rounds, the
budget past which the full network is solved), the compiled seed and repeated-pair kernels, the
compiled one-view greedy against its reference and the one-view relaxation in front of the flow.

Column generation is forced on small instances with ``prune_min_p=0``; its budget (``CG_BUDGET``, a
quarter of the positive weights) is lifted where a test needs the rounds to run to the end. The
OR-Tools solver itself is checked in test_ortools_flow.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from crowdflow.assignment import projector
from crowdflow.assignment.backends import greedy_select
from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.assignment.flow_backend import _greedy_windows, _group_tops, _laminar_greedy, _repeated_pairs
from crowdflow.assignment.projector import TVCSProjector, tvcs_select
from crowdflow.synth.assignment import SCORE_LAWS, candidate_draw, synthetic_assignment


@pytest.fixture
def unlimited_rounds(monkeypatch):
    """Column generation runs until no violator is left, however large the candidate sets grow."""
    monkeypatch.setattr(projector, "CG_BUDGET", 100.0)


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
    assert flow.iterations == 1 and flow.trace["solver"] == "ortools"


@pytest.mark.parametrize("seed", range(6))
def test_flow_column_generation_equals_full_flow_and_lp(seed, unlimited_rounds):
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


def test_flow_column_generation_extends_or_falls_back_when_caps_bind(monkeypatch):
    """Each worker may take one task only and high weights sit on few workers: the top-weight
    candidates cannot fill the budget, so the duals price in left-out elements and the loop adds
    them (unlimited rounds), or the full network is solved once the candidate sets pass the budget
    (after the first round, or at once); the answer equals the LP every time."""
    rng = np.random.default_rng(1)
    n, m = 40, 40
    w, t = np.divmod(np.arange(n * m), m)
    u = rng.random(n * m) * 0.1 + np.where(w < 3, 1.0, 0.0)  # workers 0-2 dominate the top weights
    cons = TVCSConstraints.build(n * m, w, t, 1, 1, 30)
    lp = TVCSProjector(cons, backend="lp").select(u)
    sizes: list[int] = []
    for budget in ("unlimited", "first round only", "none"):
        share = 100.0 if budget == "unlimited" else (sizes[0] + 1) / (n * m) if budget == "first round only" else 0.0
        monkeypatch.setattr(projector, "CG_BUDGET", share)
        res = TVCSProjector(cons, prune_min_p=0, prune_factor=1.0).select(u)
        pr = res.trace.get("pruning", {})
        if budget == "unlimited":
            assert pr["rounds"] >= 2 and not pr.get("abandoned") and res.iterations == pr["rounds"]
            sizes = pr["sizes"]
        elif budget == "first round only":
            assert pr["abandoned"] and pr["sizes"] == sizes[:1] and res.iterations == 2
        else:
            assert not pr and res.iterations == 1  # the seed alone is over budget: full network
        assert abs(res.objective - lp.objective) <= 1e-9 * lp.objective
        assert res.certified and cons.is_feasible(res.x)


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
def test_flow_greedy_seed_and_later_rounds_equal_lp(seed, unlimited_rounds):
    """The capped-greedy seed of the column generation (used when the top weights cannot fill the
    budget) and its later rounds return the full problem's optimum: equal to HiGHS
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


def test_flow_many_rounds_equal_lp(monkeypatch, unlimited_rounds):
    """With no rank windows around the greedy (``SEED_WINDOW = 0``) the seed misses many optimal
    elements: several rounds add violators; the result still equals HiGHS and is certified."""
    monkeypatch.setattr(projector, "SEED_WINDOW", 0.0)
    rng = np.random.default_rng(0)
    n, m = 300, 100
    w, t = np.divmod(np.arange(n * m), m)
    u = rng.beta(5, 2, n)[w] * (1 - rng.random(m)[t] ** 2) + 0.01 * rng.standard_normal(n * m)
    c1, c2 = np.full(n, 10), np.full(m, 30)
    cons = TVCSConstraints.build(n * m, w, t, c1, c2, int(0.5 * min(c1.sum(), c2.sum())))
    pruned = TVCSProjector(cons, prune_min_p=0).select(u)
    lp = TVCSProjector(cons, backend="lp").select(u)
    assert pruned.trace["pruning"]["reseeded"] and pruned.trace["pruning"]["rounds"] >= 3
    assert pruned.certified and cons.is_feasible(pruned.x)
    assert abs(pruned.objective - lp.objective) <= 1e-9 * lp.objective


def test_repeated_pairs_matches_definition():
    """``_repeated_pairs`` marks exactly the elements whose (left, right) pair occurred at a smaller index."""
    rng = np.random.default_rng(5)
    for p, nl, nr in [(0, 0, 0), (1, 1, 1), (60, 3, 4), (500, 10, 12), (500, 40, 60)]:
        left, right = rng.integers(0, max(nl, 1), p), rng.integers(0, max(nr, 1), p)
        first: dict[tuple[int, int], int] = {}
        expect = np.array(
            [first.setdefault((int(a), int(b)), i) != i for i, (a, b) in enumerate(zip(left, right, strict=True))]
        )
        np.testing.assert_array_equal(_repeated_pairs(left, right, nl, nr), expect.astype(bool).reshape(p))


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


@pytest.mark.parametrize("i", range(60))
def test_group_tops_matches_the_reference(i, random_instance, generic_instance):
    """The compiled one-view greedy (``_group_tops``) returns exactly the selection and the duals of
    the sort-based reference ``_laminar_greedy``, on either view, over grids (ties, zero caps, budget 0
    up to p, ungrouped elements, non-positive weights) and tiny structures with repeated key pairs."""
    rng = np.random.default_rng([1919, i])
    if i % 3 == 0:
        u, v1, v2, c1, c2, tot, cons = generic_instance(rng, i)
    else:
        u, v1, v2, c1, c2, tot = random_instance(
            rng, 4 + i % 5, 6 + i % 7, density=0.7, weights="int" if i % 2 else "cont", nogroup=0.2 * (i % 4 == 1)
        )
        u = u - (0.5 if i % 5 == 0 else 0.0)
        cons = TVCSConstraints.build(u.shape[0], v1, v2, c1, c2, tot)
    for view, caps in ((cons.view1, cons.caps1), (cons.view2, cons.caps2)):
        x, a, lam = _group_tops(u, view, caps, cons.total)
        xr, ar, lamr = _laminar_greedy(u, view, caps, cons.total)
        assert np.array_equal(x, xr) and np.array_equal(a, ar) and lam == lamr


def _relaxation_cases():
    """Small and medium family draws plus hand-made degenerate ones: (name, u, constraints)."""
    cases = []
    for law in SCORE_LAWS:
        for lists, caps, budget in (
            ("sparse", "loose", "free"),
            ("sparse", "loose", "binding"),
            ("dense", "tight", "free"),
        ):
            d = candidate_draw(3000, law, lists, caps, budget, seed=5, list_length=10)  # type: ignore[arg-type]
            cases.append((d.name, d.score, d.constraints()))
    rng = np.random.default_rng(7)
    w, t = np.divmod(np.arange(20 * 30), 30)
    u = rng.random(600)
    cases += [
        ("zero budget", u, TVCSConstraints.build(600, w, t, 5, 3, 0)),
        ("all negative", -u, TVCSConstraints.build(600, w, t, 5, 3, 100)),
        ("zero caps one view", u, TVCSConstraints.build(600, w, t, 0, 3, 100)),
        ("caps of 1", u, TVCSConstraints.build(600, w, t, 1, 1, None)),
        ("ties", np.ceil(4 * u), TVCSConstraints.build(600, w, t, 12, 6, 150)),
        ("all equal", np.ones(600), TVCSConstraints.build(600, w, t, 12, 6, 150)),
        ("loose workers", u, TVCSConstraints.build(600, w, t, 30, 4, None)),
    ]
    return cases


@pytest.mark.parametrize("case", _relaxation_cases(), ids=lambda c: c[0])
def test_one_view_relaxation_equals_highs(case):
    """The one-view relaxation in front of the flow solve (``relaxation_check``): with it and without
    it the flow backend equals the HiGHS optimum (ties, degenerate caps, zero budget, all-negative
    weights included), certified and feasible; when it answers, its bound equals its objective and
    the dropped view's caps hold."""
    _name, u, cons = case
    lp = TVCSProjector(cons, backend="lp").select(u)
    on = TVCSProjector(cons, prune_min_p=0).select(u)
    off = TVCSProjector(cons, prune_min_p=0, relaxation_check=False).select(u)
    for res in (on, off):
        assert res.certified and cons.is_feasible(res.x) and not np.any(res.x & (u <= 0))
        assert abs(res.objective - lp.objective) <= 1e-9 * max(1.0, lp.objective)
    if "closed_form" in on.trace and "empty" not in on.trace:
        assert on.dual_bound - on.objective <= 1e-9 * max(1.0, on.objective)


def test_one_view_relaxation_answers_only_when_feasible():
    """Loose worker caps that the tasks' greedy never reaches: the relaxation answers (no flow solve).
    Worker caps of 1 that the tasks' greedy and the workers' greedy both break: it declines, the flow runs."""
    rng = np.random.default_rng(11)
    w, t = np.divmod(np.arange(20 * 30), 30)
    u = rng.random(600)
    loose = TVCSProjector(TVCSConstraints.build(600, w, t, 29, 4, None)).select(u)
    assert "closed_form" in loose.trace and "respected" in loose.trace["closed_form"]
    u2 = np.where(w < 2, 1.0 + u, u)  # workers 0 and 1 top every task's list and are wanted by all
    tight = TVCSProjector(TVCSConstraints.build(600, w, t, 1, 2, None)).select(u2)
    assert "closed_form" not in tight.trace and tight.trace["solver"] == "ortools"
