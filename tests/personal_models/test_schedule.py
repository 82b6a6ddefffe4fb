"""The batched ``matching`` engine of DJAM / CL-ADMM and the scaled field-estimation generator.

``matching_batches`` must split an activation sequence into matchings whose in-order application is
the sequence itself; the engines built on it must reproduce the one-round-at-a-time engines exactly
and still converge to the centralised optimum (spec personal-models-djam.md §6, AT-18).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from crowdflow.personal_models import (
    build_problem,
    centralized,
    cl_admm,
    djam,
    djam_blocked,
    matching_batches,
    rel_errors,
)
from crowdflow.personal_models.djam import _apply_rounds, serial_rounds
from crowdflow.synth.personal_models import (
    field_estimation_instance,
    field_estimation_instance_scaled,
    geometric_radius,
)


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kwargs)


@pytest.fixture(scope="module")
def scaled():
    inst = field_estimation_instance_scaled(5, n=400)
    prob = inst.problem()
    return inst, prob, centralized(prob).theta


def _quadratic_problem(seed: int, n: int = 200, p: int = 3):
    inst = field_estimation_instance_scaled(seed, n=n)
    rng = np.random.default_rng(seed)
    rows = []
    for a in inst.agents["agent"]:
        th = rng.standard_normal(p)
        for _ in range(int(rng.integers(1, 5))):
            x = rng.standard_normal(p)
            rows.append({"agent": a, **{f"f{k}": x[k] for k in range(p)}, "y": float(x @ th)})
    return build_problem(pd.DataFrame(rows), inst.edges, reg=0.1)


def _levels_by_recursion(seq, u, v, n):
    last = [0] * n
    out = []
    for e in seq.tolist():
        lv = max(last[u[e]], last[v[e]]) + 1
        last[u[e]] = last[v[e]] = lv
        out.append(lv)
    return np.asarray(out)


def _star_and_path():
    # a hub agent (every round conflicts) and a path (long dependency chains)
    star_u, star_v = np.zeros(9, dtype=np.int64), np.arange(1, 10)
    path_u, path_v = np.arange(9), np.arange(1, 10)
    return [(star_u, star_v), (path_u, path_v)]


def test_matching_batches_are_matchings_in_sequence_order(scaled):
    _inst, prob, _ref = scaled
    g = prob.graph
    cases = [(g.u, g.v, g.n, np.random.default_rng(0).integers(0, g.n_edges, 5 * g.n_edges))]
    for u, v in _star_and_path():
        cases.append((u, v, 10, np.random.default_rng(1).integers(0, u.size, 300)))
    for u, v, n, seq in cases:
        batches = matching_batches(seq, u, v)
        pos = np.concatenate(batches)
        assert np.array_equal(np.sort(pos), np.arange(seq.size))  # every round exactly once
        level = np.empty(seq.size, dtype=np.int64)
        for q, b in enumerate(batches, start=1):
            assert np.all(np.diff(b) > 0)
            ends = np.concatenate([u[seq[b]], v[seq[b]]])
            assert np.unique(ends).size == ends.size  # a matching
            level[b] = q
        np.testing.assert_array_equal(level, _levels_by_recursion(seq, u, v, n))
        # every agent receives its rounds in the original order
        for x in range(min(n, 50)):
            touching = np.flatnonzero((u[seq] == x) | (v[seq] == x))
            assert np.all(np.diff(level[touching]) > 0)
    assert matching_batches(np.zeros(0, dtype=np.int64), g.u, g.v) == []
    # on the field graph the batches are large: far fewer batches than rounds
    assert len(matching_batches(cases[0][3], g.u, g.v)) < cases[0][3].size / 20


def test_one_batch_equals_its_rounds_one_by_one(scaled):
    _inst, prob, _ref = scaled
    g = prob.graph
    rng = np.random.default_rng(4)
    solver = prob.losses.solver(g.degree)
    C0 = rng.standard_normal((g.nbr.size, 1))
    b0 = np.asarray(g.holder_matrix() @ C0)
    th0 = solver.solve(np.arange(g.n), b0, b0)
    seq = rng.integers(0, g.n_edges, g.n_edges)
    batch = seq[matching_batches(seq, g.u, g.v)[0]]
    assert batch.size > 20
    i, j = g.u[batch], g.v[batch]
    args = (i, j, g.a_uv[batch], g.a_vu[batch], g.w[batch], i, j)
    C1, b1, th1 = C0.copy(), b0.copy(), th0.copy()
    serial_rounds(solver, C1, b1, th1, *args)
    C2, b2, th2 = C0[None].copy(), b0[None].copy(), th0[None].copy()
    _apply_rounds(solver, C2, b2, th2, np.zeros(batch.size, dtype=np.int64), *args)
    np.testing.assert_array_equal(C1, C2[0])
    np.testing.assert_array_equal(b1, b2[0])
    np.testing.assert_array_equal(th1, th2[0])


@pytest.mark.parametrize("kind", ["huber", "quadratic"])
def test_matching_engine_equals_simulation_on_large_batches(kind, scaled):
    prob = scaled[1] if kind == "huber" else _quadratic_problem(6)
    m = prob.graph.n_edges
    sched = np.random.default_rng(9).integers(0, m, 8 * m)
    a = quiet(djam, prob, schedule=sched, tol=0.0, engine="simulation", check_every=5 * m)
    b = quiet(djam, prob, schedule=sched, tol=0.0, engine="matching", check_every=5 * m)
    assert a.iterations == b.iterations == sched.size
    if kind == "huber":  # same per-element arithmetic: the same bits
        np.testing.assert_array_equal(a.copies, b.copies)
        np.testing.assert_array_equal(a.theta, b.theta)
    else:  # batched p×p mat-vecs may round differently
        assert np.abs(a.copies - b.copies).max() <= 1e-14
        assert np.abs(a.theta - b.theta).max() <= 1e-14
    # random draws (seeded, not a schedule): same rounds, same stop, same result
    c = quiet(djam, prob, seed=3, tol=1e-6, engine="simulation")
    d = quiet(djam, prob, seed=3, tol=1e-6, engine="matching")
    assert c.converged and d.converged and c.iterations == d.iterations
    assert np.abs(c.theta - d.theta).max() <= 1e-14


@pytest.mark.parametrize("kind", ["huber", "quadratic"])
def test_matching_engine_fixed_point_is_centralized_optimum(kind, scaled):
    if kind == "huber":
        _inst, prob, ref = scaled
    else:
        prob = _quadratic_problem(7, n=400)
        ref = centralized(prob).theta
    res = djam(prob, seed=1, tol=1e-10, engine="matching")
    assert res.converged
    assert np.linalg.norm(res.theta - ref) <= 1e-10 * max(1.0, np.linalg.norm(res.theta))
    # started at the optimum, the engine stays there
    fixed = quiet(djam, prob, seed=2, tol=0.0, max_rounds=5 * prob.graph.n_edges, engine="matching", init=ref)
    assert np.abs(fixed.theta - ref).max() <= 1e-12 * max(1.0, np.abs(ref).max())


def test_cl_admm_matching_equals_simulation(scaled):
    _inst, prob, ref = scaled
    m = prob.graph.n_edges
    for rho in (0.316, 3.16):
        a = quiet(cl_admm, prob, rho=rho, seed=4, tol=0.0, max_rounds=4 * m, engine="simulation")
        b = quiet(cl_admm, prob, rho=rho, seed=4, tol=0.0, max_rounds=4 * m, engine="matching")
        np.testing.assert_array_equal(a.theta, b.theta)
    c = cl_admm(prob, rho=0.316, seed=4, tol=1e-9, engine="matching")
    assert c.converged and rel_errors(c.theta, ref).mean() <= 1e-6
    with pytest.raises(ValueError, match="unknown engine"):
        cl_admm(prob, engine="threads")


def test_blocked_matching_equals_blocked_simulation(scaled):
    _inst, prob, ref = scaled
    a = djam_blocked(prob, n_blocks=3, seed=2, tol=1e-8, engine="simulation")
    b = djam_blocked(prob, n_blocks=3, seed=2, tol=1e-8, engine="matching")
    assert a.converged and b.converged and a.iterations == b.iterations
    np.testing.assert_array_equal(a.theta, b.theta)
    assert np.linalg.norm(b.theta - ref) <= 1e-8 * max(1.0, np.linalg.norm(b.theta))


def test_scaled_generator():
    assert geometric_radius(30, 6.23) == pytest.approx(0.3, abs=2e-3)
    inst = field_estimation_instance_scaled(11, n=3000)
    again = field_estimation_instance_scaled(11, n=3000)
    pd.testing.assert_frame_equal(inst.agents, again.agents)
    pd.testing.assert_frame_equal(inst.edges, again.edges)
    prob = inst.problem()  # validated: connected, positive symmetric weights
    assert prob.n == 3000 and inst.bridges > 0
    assert 2 * prob.graph.n_edges / prob.n == pytest.approx(6.23, rel=0.06)
    assert inst.agents["agent"].is_monotonic_increasing
    w = inst.edges["weight"].to_numpy()
    assert w.min() >= 0.5 and w.max() <= 1.5
    # field ~ N(0, Q⁻¹): the whitened field Rᵀθ has unit variance (Q = L_σ + sI)
    lap = prob.graph.laplacian().toarray() + inst.s * np.eye(prob.n)
    white = np.linalg.cholesky(lap).T @ inst.field
    assert white.var() == pytest.approx(1.0, abs=0.08)
    with pytest.raises(ValueError, match="mean_degree"):
        geometric_radius(10, 20.0)


def test_paper_size_instance_unchanged():
    # the n = 30 generator is untouched (its radius is now recorded)
    inst = field_estimation_instance(3)
    assert inst.radius == 0.3 and inst.bridges == 0
