"""Tests of the TVCS selection / projection API (crowdflow.assignment.projector) on every backend.

Acceptance tests T1–T8 and T10 of docs/methods/assignment.md §7.4. Every backend is checked against brute
force (enumeration of all supports), the cvxpy LP/MILP cross-check of docs/methods/assignment.md §7.3 and
closed forms. The flow backend's internals are in test_flow_backend.py, the PGD backend (T9) in
test_backends.py, the assignment entry point in test_fit.py.
"""

from __future__ import annotations

import itertools
import math
import warnings

import cvxpy as cp
import numpy as np
import pandas as pd
import pytest
from scipy.optimize import linprog

from crowdflow.assignment.backends import greedy_select
from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.assignment.projector import TVCSProjector, project_elements, tvcs_project, tvcs_select

PGD_FAST = {"accelerate": True, "max_iter": 200_000, "check_every": 25}


def cvxpy_opt(u, cons: TVCSConstraints, boolean: bool):
    """The cvxpy cross-check of docs/methods/assignment.md §7.3, with the sparse constraint matrix."""
    A, s = cons.matrix()
    x = cp.Variable(cons.p, boolean=boolean)
    constraints = [A @ x <= s]
    if not boolean:
        constraints += [x >= 0, x <= 1]
    prob = cp.Problem(cp.Maximize(u @ x), constraints)
    prob.solve(solver=cp.HIGHS)
    return prob.value, x.value


def select_all_backends(u, v1, v2, c1, c2, tot, backends=("flow", "lp", "pgd")):
    out = {}
    for bk in backends:
        opts = {"pgd_options": PGD_FAST} if bk == "pgd" else {}
        out[bk] = tvcs_select(u, v1, v2, c1, c2, tot, backend=bk, **opts)
    return out


# ---------------------------------------------------------------------------------------------
# T1 feasibility, T2 brute force, T3 LP/MILP, T10 flow
# ---------------------------------------------------------------------------------------------


def _t1(random_instance, n_inst, pgd_every):
    rng = np.random.default_rng(1)
    for i in range(n_inst):
        a, b = int(rng.integers(1, 7)), int(rng.integers(1, 11))
        inst = random_instance(
            rng,
            a,
            b,
            density=rng.uniform(0.3, 1.0),
            weights="cont" if i % 2 else "int",
            total_mode="random" if i % 3 else "frac",
            nogroup=0.2 if i % 5 == 0 else 0.0,
        )
        u, v1, v2, c1, c2, tot = inst
        cons = TVCSConstraints.build(u.size, v1, v2, c1, c2, tot)
        backends = ("flow", "lp", "pgd") if i % pgd_every == 0 else ("flow", "lp")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # PGD may fall back on tie-heavy cases
            res = select_all_backends(*inst, backends=backends)
        for bk, r in res.items():
            assert r.x.dtype == bool and r.x.shape == u.shape
            assert cons.is_feasible(r.x.astype(np.int8)), (i, bk)
            assert not np.any(r.x & (u <= 0)), (i, bk)
        assert abs(res["flow"].objective - res["lp"].objective) <= 1e-9 * max(1.0, res["lp"].objective)


def test_t1_feasibility_500_instances(random_instance):
    """500 instances for flow and LP, PGD on every 25th (all 500 in the slow variant)."""
    _t1(random_instance, 500, pgd_every=25)


@pytest.mark.slow
def test_t1_feasibility_500_instances_pgd(random_instance):
    _t1(random_instance, 500, pgd_every=1)


@pytest.mark.parametrize("weights", ["cont", "int"])
def test_t2_brute_force_optimality(weights, random_instance, brute_opt):
    rng = np.random.default_rng(2 if weights == "cont" else 3)
    n_inst = 0
    while n_inst < 100:  # 2 x 100 = 200 instances
        a, b = int(rng.integers(1, 4)), int(rng.integers(1, 6))
        inst = random_instance(rng, a, b, density=0.8, weights=weights, total_mode="random" if n_inst % 2 else "frac")
        u, v1, v2, c1, c2, tot = inst
        if u.size > 14:
            continue
        n_inst += 1
        cons = TVCSConstraints.build(u.size, v1, v2, c1, c2, tot)
        opt = brute_opt(u, cons)
        res = select_all_backends(*inst, backends=("flow", "lp", "pgd", "brute"))
        for bk, r in res.items():
            assert abs(r.objective - opt) <= 1e-9 * max(1.0, opt), (n_inst, bk, r.objective, opt)
            assert r.certified, (n_inst, bk)
            assert cons.is_feasible(r.x.astype(np.int8))


def test_flow_with_repeated_pairs_and_ungrouped_elements(generic_instance, brute_opt):
    """Generic structures: several elements share (view1, view2) keys, some have no group."""
    rng = np.random.default_rng(4)
    for i in range(150):
        u, v1, v2, c1, c2, tot, cons = generic_instance(rng, i)
        opt = brute_opt(u, cons)
        for bk in ("flow", "lp"):
            r = tvcs_select(u, v1, v2, c1, c2, tot, backend=bk)
            assert abs(r.objective - opt) <= 1e-9 * max(1.0, opt), (i, bk)
            assert cons.is_feasible(r.x.astype(np.int8)) and r.certified


def _t3_instances(random_instance, n, seed):
    rng = np.random.default_rng(seed)
    for i in range(n):
        a = int(rng.integers(5, 41))
        b = int(rng.integers(5, 61))
        inst = random_instance(
            rng,
            a,
            b,
            density=rng.uniform(0.3, 1.0),
            weights="cont" if i % 3 else "int",
            total_mode="frac" if i % 2 else "random",
        )
        yield inst


def _check_t3(inst):
    u, v1, v2, c1, c2, tot = inst
    cons = TVCSConstraints.build(u.size, v1, v2, c1, c2, tot)
    lp_val, lp_x = cvxpy_opt(u, cons, boolean=False)
    mi_val, _ = cvxpy_opt(u, cons, boolean=True)
    flow = tvcs_select(u, v1, v2, c1, c2, tot, backend="flow")
    lp = tvcs_select(u, v1, v2, c1, c2, tot, backend="lp")
    tol = 1e-7 * max(1.0, abs(lp_val))
    assert abs(flow.objective - lp_val) <= tol
    assert abs(lp.objective - lp_val) <= tol
    assert abs(mi_val - lp_val) <= tol
    assert np.max(np.abs(lp_x - np.round(lp_x))) <= 1e-7  # LP integrality (TU, docs/methods/assignment.md §2.1)
    assert flow.certified and lp.certified
    # projection identity ‖v − P(v)‖² = ‖v‖² − OPT(u = v²)
    v = np.sqrt(u) * np.where(np.arange(u.size) % 2, 1.0, -1.0)
    w = tvcs_project(v, v1, v2, c1, c2, tot)
    assert abs(np.sum((v - w) ** 2) - (np.sum(v * v) - flow.objective)) <= 1e-8 * max(1.0, np.sum(v * v))


def test_t3_lp_milp_crosscheck_quick(random_instance):
    for inst in _t3_instances(random_instance, 12, seed=5):
        _check_t3(inst)


@pytest.mark.slow
def test_t3_lp_milp_crosscheck_full(random_instance):
    for inst in _t3_instances(random_instance, 100, seed=6):
        _check_t3(inst)


# ---------------------------------------------------------------------------------------------
# T4 projection identities, T5 closed forms
# ---------------------------------------------------------------------------------------------


def _unique_instance(random_instance, seed):
    rng = np.random.default_rng(seed)
    u, v1, v2, c1, c2, tot = random_instance(rng, 6, 9, density=0.7, weights="cont", total_mode="frac")
    v = rng.standard_normal(u.size)
    return v, v1, v2, c1, c2, tot


@pytest.mark.parametrize("backend", ["flow", "lp", "pgd"])
def test_t4_projection_identities(backend, random_instance):
    opts = {"pgd_options": PGD_FAST} if backend == "pgd" else {}
    for seed in range(5):
        v, v1, v2, c1, c2, tot = _unique_instance(random_instance, 100 + seed)
        P = lambda z: tvcs_project(z, v1, v2, c1, c2, tot, backend=backend, **opts)  # noqa: E731
        w = P(v)
        supp = w != 0
        np.testing.assert_array_equal(w[supp], v[supp])  # values kept exactly
        assert np.all(w[~supp] == 0)
        np.testing.assert_array_equal(P(w), w)  # idempotent
        np.testing.assert_array_equal(P(-v) != 0, supp)
        np.testing.assert_array_equal(P(3.7 * v) != 0, supp)
        perm = np.random.default_rng(seed).permutation(v.size)
        wp = tvcs_project(v[perm], v1[perm], v2[perm], c1, c2, tot, backend=backend, **opts)
        np.testing.assert_array_equal(wp, w[perm])
        vz = v.copy()
        vz[::3] = 0.0
        wz = tvcs_project(vz, v1, v2, np.full(c1.size, 99), np.full(c2.size, 99), None, backend=backend, **opts)
        assert np.all(wz[::3] == 0) and np.array_equal(wz != 0, vz != 0)


def _sequential_top(v, groups, caps, total):
    """Reference for T5: top-cap per group by |v| (loop), then global top-total."""
    keep = []
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        idx = idx[np.argsort(-np.abs(v[idx]), kind="stable")]
        keep.extend(idx[: caps[g]].tolist())
    keep = np.array(sorted(keep), dtype=int)
    keep = keep[np.argsort(-np.abs(v[keep]), kind="stable")][:total]
    out = np.zeros(v.size, bool)
    out[keep] = True
    return out & (v != 0)


@pytest.mark.parametrize("backend", ["flow", "lp", "pgd"])
def test_t5_closed_forms(backend):
    opts = {"pgd_options": PGD_FAST} if backend == "pgd" else {}
    rng = np.random.default_rng(7)
    rows, cols = np.divmod(np.arange(48), 8)  # 6 x 8 grid
    for _ in range(4):
        v = rng.standard_normal(48)
        # only the total: top-k by |v|
        k = int(rng.integers(1, 48))
        x = tvcs_select(v * v, rows, cols, None, None, k, backend=backend, **opts).x
        np.testing.assert_array_equal(x, np.abs(v) >= np.sort(np.abs(v))[-k])
        # total + view 1: sequential projection
        c1 = rng.integers(0, 9, size=6)
        x = tvcs_select(v * v, rows, cols, c1, None, k, backend=backend, **opts).x
        np.testing.assert_array_equal(x, _sequential_top(v, rows, c1, k))
        # total + view 2 only (view 1 absent)
        c2 = rng.integers(0, 7, size=8)
        x = tvcs_select(v * v, None, cols, None, c2, k, backend=backend, **opts).x
        np.testing.assert_array_equal(x, _sequential_top(v, cols, c2, k))
        # total >= p and one view: top-cap per group
        x = tvcs_select(v * v, rows, cols, c1, None, 100, backend=backend, **opts).x
        np.testing.assert_array_equal(x, _sequential_top(v, rows, c1, 48))
    # all caps 0: empty; caps >= sizes and total >= p: every nonzero
    v[[3, 17]] = 0.0
    assert not tvcs_select(v * v, rows, cols, 0, 0, 0, backend=backend, **opts).x.any()
    assert not tvcs_select(v * v, rows, cols, 0, 5, 10, backend=backend, **opts).x.any()
    x = tvcs_select(v * v, rows, cols, 8, 6, 48, backend=backend, **opts).x
    np.testing.assert_array_equal(x, v != 0)


def test_t5_closed_form_pgd_quick():
    """PGD on the two-view-free closed form (total only) and total + one view, small p."""
    rng = np.random.default_rng(18)
    rows, cols = np.divmod(np.arange(15), 5)
    v = rng.standard_normal(15)
    x = tvcs_select(v * v, rows, cols, None, None, 6, backend="pgd", pgd_options=PGD_FAST).x
    np.testing.assert_array_equal(x, np.abs(v) >= np.sort(np.abs(v))[-6])
    x = tvcs_select(v * v, rows, cols, [1, 2, 0], None, 4, backend="pgd", pgd_options=PGD_FAST).x
    np.testing.assert_array_equal(x, _sequential_top(v, rows, np.array([1, 2, 0]), 4))


# ---------------------------------------------------------------------------------------------
# T6 structure guard, T7 monotonicity, T8 greedy counterexample
# ---------------------------------------------------------------------------------------------


def test_t6_structure_guard():
    # (i) an element with two view-1 keys = a repeated element_id: rejected by the schema
    el = pd.DataFrame(
        {
            "element_id": ["e1", "e1", "e2"],
            "value": [1.0, 1.0, 2.0],
            "view1_key": ["a", "b", "a"],
            "view2_key": [None, None, "c"],
        }
    )
    with pytest.raises(ValueError, match="duplicate element_id"):
        project_elements(el, 1, 1, 2)
    # view vectors carry exactly one key per element; a 2-D membership is refused
    with pytest.raises(ValueError, match="1-D"):
        TVCSConstraints.build(3, np.array([[0, 1], [1, 2], [0, 2]]), None, 1, None, 3)
    # (ii) three overlapping partitions break integrality: e1∈{a,b}, e2∈{b,c}, e3∈{a,c}, caps 1
    A = np.array([[1, 0, 1], [1, 1, 0], [0, 1, 1]], dtype=float)  # rows a, b, c
    res = linprog(-np.ones(3), A_ub=A, b_ub=np.ones(3), bounds=(0, 1), method="highs")
    assert abs(-res.fun - 1.5) < 1e-9 and np.allclose(res.x, 0.5)
    ilp = max(sum(x) for x in itertools.product((0, 1), repeat=3) if np.all(A @ np.array(x) <= 1))
    assert ilp == 1


def test_t7_monotonicity(random_instance):
    rng = np.random.default_rng(8)
    for _ in range(30):
        u, v1, v2, c1, c2, tot = random_instance(rng, 5, 7, density=0.7, total_mode="frac")
        base = tvcs_select(u, v1, v2, c1, c2, tot).objective
        g = int(rng.integers(0, c1.size))
        c1b = c1.copy()
        c1b[g] += 1
        assert tvcs_select(u, v1, v2, c1b, c2, tot).objective >= base - 1e-12
        h = int(rng.integers(0, c2.size))
        c2b = c2.copy()
        c2b[h] += 2
        assert tvcs_select(u, v1, v2, c1, c2b, tot).objective >= base - 1e-12
        assert tvcs_select(u, v1, v2, c1, c2, tot + 1).objective >= base - 1e-12
        if tot > 0:
            assert tvcs_select(u, v1, v2, c1, c2, tot - 1).objective <= base + 1e-12


def test_t8_greedy_counterexample():
    # elements (w1,t1)=3, (w1,t2)=2, (w2,t1)=2; caps 1 per worker and task, total 2
    u = np.array([3.0, 2.0, 2.0])
    w = np.array([0, 0, 1])
    t = np.array([0, 1, 0])
    for bk in ("flow", "lp", "pgd", "brute"):
        opts = {"pgd_options": PGD_FAST} if bk == "pgd" else {}
        r = tvcs_select(u, w, t, 1, 1, 2, backend=bk, **opts)
        assert r.objective == pytest.approx(4.0, abs=1e-12), bk
        np.testing.assert_array_equal(r.x, [False, True, True])
    assert float(u @ greedy_select(u, w, t, 1, 1, 2)) == 3.0


# ---------------------------------------------------------------------------------------------
# input validation of the selection API
# ---------------------------------------------------------------------------------------------


def test_selection_input_errors_and_empty_results():
    u = np.array([1.0, 2.0, 3.0])
    v = np.array([0, 0, 1])
    with pytest.raises(ValueError, match="finite"):
        tvcs_select(np.array([1.0, np.nan, 1.0]), v, None, 1, None, 2)
    with pytest.raises(ValueError, match=">= 0"):
        tvcs_select(u, v, None, [-1, 1], None, 2)
    with pytest.raises(ValueError, match="total"):
        tvcs_select(u, v, None, 1, None, -1)
    with pytest.raises(ValueError, match="NaN"):
        tvcs_select(u, v, None, [np.nan, 1], None, 2)
    with pytest.raises(ValueError, match="backend"):
        tvcs_select(u, v, None, 1, None, 2, backend="simplex")
    r = tvcs_select(-u, v, None, 1, None, 2)  # all weights <= 0: explicit empty, certified
    assert not r.x.any() and r.objective == 0.0 and r.certified
    r = tvcs_select(u, v, None, 1.9, None, 2.7)  # reals floored: caps 1, total 2
    assert r.objective == 5.0
    r = tvcs_select(np.zeros(0), np.zeros(0, int), None, 1, None, 1)
    assert r.x.shape == (0,) and r.objective == 0.0


def test_projector_reuse_matches_fresh_solves(random_instance):
    rng = np.random.default_rng(17)
    u, v1, v2, c1, c2, tot = random_instance(rng, 8, 12, density=0.7, total_mode="frac")
    proj = TVCSProjector(v1, v2, c1, c2, tot)
    for _ in range(5):
        w = rng.standard_normal(u.size) ** 2
        assert proj.select(w).objective == pytest.approx(
            tvcs_select(w, v1, v2, c1, c2, tot, backend="lp").objective, rel=1e-9
        )
    assert math.isfinite(proj.select(u).dual_bound)
