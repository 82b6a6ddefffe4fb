"""The compiled cost-scaling min-cost flow (crowdflow.assignment.min_cost_flow) on general networks.

Checked against the min-cost-flow LP solved by HiGHS (scipy ``linprog``): same optimal cost, a
feasible integral flow, and potentials that certify it (no residual entry with negative reduced
cost). The TVCS-specific checks (brute force, LP, column generation) are in test_projector.py and test_flow_backend.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linprog

from crowdflow.assignment import flow_backend
from crowdflow.assignment.min_cost_flow import cost_scaling_flow, residual_pattern
from crowdflow.assignment.projector import tvcs_select

SCALES = tuple(range(0, 21, 2))


def _random_network(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Random digraph (antiparallel and parallel arcs allowed) with a bypass 0 → 1 that makes the
    supply k at node 0 / demand k at node 1 always feasible; costs of both signs, so negative
    cycles must be cancelled too."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 9))
    m = int(rng.integers(1, 4 * n))
    tail = rng.integers(0, n, m)
    head = rng.integers(0, n, m)
    keep = tail != head
    tail, head = tail[keep], head[keep]
    k = int(rng.integers(1, 6))
    tail = np.concatenate([tail, [0]]).astype(np.int64)
    head = np.concatenate([head, [1]]).astype(np.int64)
    cap = np.concatenate([rng.integers(1, 4, tail.shape[0] - 1), [k]]).astype(np.int64)
    cost = np.concatenate([rng.uniform(-1.0, 1.0, tail.shape[0] - 1), [0.0]])
    if seed % 3 == 0:  # ties: costs on a coarse grid
        cost = np.round(cost * 4) / 4
    supply = np.zeros(n, np.int64)
    supply[0], supply[1] = k, -k
    return tail, head, cap, cost, supply


def _solve(tail, head, cap, cost, supply):
    n = supply.shape[0]
    pattern = residual_pattern(tail, head, n)
    _, _, _, arc, sign = pattern
    residual = np.where(sign > 0, cap[arc], 0)
    excess = supply.copy()
    pi = np.zeros(n)
    steps = np.array([2.0**-b for b in SCALES] + [0.0])
    tols = np.array([0.25 * 2.0**-b for b in SCALES] + [1e-11])
    scale = max(1.0, float(np.abs(cost).max()))
    phases = cost_scaling_flow(pattern, cost / scale, residual, excess, pi, steps, tols, 10_000)
    flow = np.zeros(tail.shape[0], np.int64)
    back = sign < 0
    flow[arc[back]] = residual[back]
    return flow, pi * scale, residual, excess, phases, pattern


@pytest.mark.parametrize("seed", range(120))
def test_equals_lp_optimum_and_certifies_itself(seed):
    tail, head, cap, cost, supply = _random_network(seed)
    n = supply.shape[0]
    flow, pi, residual, excess, phases, pattern = _solve(tail, head, cap, cost, supply)
    # feasible and integral
    assert np.all(excess == 0)
    assert np.all((flow >= 0) & (flow <= cap))
    balance = np.bincount(tail, weights=flow, minlength=n) - np.bincount(head, weights=flow, minlength=n)
    np.testing.assert_array_equal(balance, supply)
    # optimal: equals the LP (node-arc incidence, equality balances, 0 ≤ f ≤ cap)
    m = tail.shape[0]
    A = sp.coo_matrix(
        (np.r_[np.ones(m), -np.ones(m)], (np.r_[tail, head], np.r_[np.arange(m), np.arange(m)])), shape=(n, m)
    )
    lp = linprog(cost, A_eq=A.tocsr(), b_eq=supply, bounds=np.column_stack([np.zeros(m), cap]), method="highs")
    assert lp.status == 0
    assert float(cost @ flow) == pytest.approx(lp.fun, abs=1e-9)
    # certificate: every residual entry has reduced cost ≥ −tol (no negative residual cycle)
    indptr, indices, _, arc, sign = pattern
    rows = np.repeat(np.arange(n), np.diff(indptr))
    rc = sign * cost[arc] + pi[rows] - pi[indices]
    assert np.all(rc[residual > 0] >= -1e-9)
    assert phases.shape == (len(SCALES) + 1,)


def test_deterministic():
    tail, head, cap, cost, supply = _random_network(7)
    a = _solve(tail, head, cap, cost, supply)
    b = _solve(tail, head, cap, cost, supply)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_tvcs_falls_back_to_lp_when_the_kernel_fails(monkeypatch):
    """A kernel failure (never expected) must not return a wrong selection: the HiGHS LP answers."""
    rng = np.random.default_rng(0)
    w, t = np.divmod(np.arange(200), 20)
    u = rng.random(200)
    expected = tvcs_select(u, w, t, 5, 3, 30, backend="lp")

    def boom(*args, **kwargs):
        raise RuntimeError("flow backend: no convergence after 0 phases")

    monkeypatch.setattr(flow_backend, "cost_scaling_flow", boom)
    got = tvcs_select(u, w, t, 5, 3, 30, backend="flow", flow_solver="numba")
    assert got.backend == "flow->lp" and got.certified
    assert got.objective == pytest.approx(expected.objective, rel=1e-12)
