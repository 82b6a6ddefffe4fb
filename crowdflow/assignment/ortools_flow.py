"""The flow backend's solver: OR-Tools' min-cost flow on scaled integer costs, made exact on the floats.

The selection network of :class:`crowdflow.assignment.flow_backend._FlowNetwork` (docs/methods/assignment.md
§3.1) is handed to Google OR-Tools' ``SimpleMinCostFlow`` (a maintained C++ cost-scaling push-relabel
solver) with the element costs ``−u_i/max u`` rounded to the integer grid ``2^-K`` (``K`` = 40, fewer when
the network has so many nodes that OR-Tools' cost range would overflow, :func:`cost_bits`). OR-Tools
returns an optimal flow for the rounded costs but no node potentials, so:

1. the potentials are the shortest-path distances in the residual graph of that flow, on the same
   integer costs (:func:`residual_potentials`, a compiled queue-based Bellman–Ford from a virtual root
   joined to every node; it terminates because an optimal flow leaves no negative cycle). They give the
   duals ``a_g = π(L_g) − π(S)``, ``b_h = π(T) − π(R_h)``, ``λ = π(S) − π(T)`` (times ``2^-K·max u``);
2. the certificate of §2.2 (:meth:`TVCSConstraints.dual_bound` on the float weights, the same test as
   every backend) decides. Rounding moves each reduced gain by at most ``2^-K-1·max u``, and only the
   elements with zero rounded reduced gain can open a gap, so it holds unless the instance has
   near-ties finer than the grid;
3. if it does not hold, the same Bellman–Ford runs again on the float costs, started from those
   potentials; when the flow is optimal for the floats too this gives exact float potentials. Only
   when that fails as well (the rounded optimum is not a float optimum) does the projector fall back to
   the HiGHS LP (docs/methods/assignment.md §3.2, never observed on the benchmark family, §8.3).

See docs/methods/assignment.md §3.2.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from crowdflow.assignment.flow_backend import _FlowNetwork
from crowdflow.compiled import compiled_kernel

Duals = tuple[np.ndarray, np.ndarray, float]

#: finest cost grid, ``2^-MAX_COST_BITS·max u``: OR-Tools multiplies costs by (nodes + 1) internally
MAX_COST_BITS = 40


def cost_bits(n_nodes: int) -> int:
    """Bits of the integer cost grid: ``min(40, 60 − ⌈log2(n_nodes + 2)⌉)``.

    OR-Tools refuses (``BAD_COST_RANGE``) costs whose product with the node count overflows 63 bits;
    at 10^6 nodes this still leaves 40 bits, below 10^-12 of the largest weight.
    """
    return max(8, min(MAX_COST_BITS, 60 - math.ceil(math.log2(n_nodes + 2))))


def integer_gains(u: np.ndarray, bits: int) -> tuple[np.ndarray, float]:
    """Integer gains ``c ≥ 0`` and their unit (``u ≈ c·unit``) for weights ``u ≥ 0`` with a positive maximum.

    Whole-number weights up to ``2^bits`` are used as they are (exact: ``unit`` = 1); other weights
    are rounded to the grid ``2^-bits·max u``. Either way the gains are then divided by their greatest
    common divisor, an exact change of unit: tie-heavy weights (integers 1–4 on the grid share the
    factor ``2^38``) become small integers, and OR-Tools' cost scaling needs fewer, cheaper
    refinements (docs/methods/assignment.md §3.2).
    """
    umax = float(u.max())
    if umax <= 2.0**bits and np.array_equal(u, np.rint(u)):
        gain, unit = u.astype(np.int64), 1.0
    else:
        gain, unit = np.rint(u * (2.0**bits / umax)).astype(np.int64), umax * 2.0**-bits
    g = int(np.gcd.reduce(gain[np.flatnonzero(gain)[:64]]))  # most weights share no factor: a sample tells
    if g > 1:
        g = int(np.gcd.reduce(gain))
    if g > 1:
        gain //= g
        unit *= g
    return gain, unit


@compiled_kernel
def residual_potentials(
    tail: np.ndarray,
    head: np.ndarray,
    res_fwd: np.ndarray,
    res_bwd: np.ndarray,
    cost: np.ndarray,
    pi: np.ndarray,
    tol: float,
    max_pops: int,
) -> int:
    """Shortest-path potentials of a residual graph (queue-based Bellman–Ford, compiled), in place.

    Arc ``a`` has a forward residual entry ``tail → head`` of cost ``cost[a]`` when ``res_fwd[a] > 0``
    and a backward entry ``head → tail`` of cost ``−cost[a]`` when ``res_bwd[a] > 0``. Starting from
    ``pi`` (a virtual root at distance 0 from every node when ``pi = 0``), labels are lowered while
    some entry has ``pi[v] + c < pi[w] − tol``. On return every residual entry has reduced cost
    ``c + pi[v] − pi[w] ≥ −tol``. Returns the number of node scans, or ``−1`` after ``max_pops``
    scans (a negative cycle, i.e. the flow is not optimal for these costs).
    """
    n = pi.shape[0]
    m = tail.shape[0]
    deg = np.zeros(n + 1, np.int64)
    for a in range(m):
        if res_fwd[a] > 0:
            deg[tail[a] + 1] += 1
        if res_bwd[a] > 0:
            deg[head[a] + 1] += 1
    for v in range(n):
        deg[v + 1] += deg[v]
    fill = deg[:n].copy()
    nbr = np.empty(deg[n], np.int64)
    ec = np.empty(deg[n], cost.dtype)
    for a in range(m):
        if res_fwd[a] > 0:
            k = fill[tail[a]]
            nbr[k] = head[a]
            ec[k] = cost[a]
            fill[tail[a]] += 1
        if res_bwd[a] > 0:
            k = fill[head[a]]
            nbr[k] = tail[a]
            ec[k] = -cost[a]
            fill[head[a]] += 1
    queue = np.arange(n)
    inq = np.ones(n, np.bool_)
    first = 0
    size = n
    pops = 0
    while size > 0:
        v = queue[first]
        first = first + 1 if first + 1 < n else 0
        size -= 1
        inq[v] = False
        pops += 1
        if pops > max_pops:
            return -1
        pv = pi[v]
        for k in range(deg[v], deg[v + 1]):
            w = nbr[k]
            if pv + ec[k] < pi[w] - tol:
                pi[w] = pv + ec[k]
                if not inq[w]:
                    inq[w] = True
                    last = first + size
                    queue[last if last < n else last - n] = w
                    size += 1
    return pops


def solve_ortools(
    net: _FlowNetwork, u: np.ndarray, certify: Callable[[np.ndarray, Duals], bool]
) -> tuple[np.ndarray, dict[str, Any]]:
    """Optimal selection and duals of ``net`` for weights ``u`` (some positive) by OR-Tools.

    ``certify(x, duals)`` is the caller's certificate test (docs/methods/assignment.md §2.2): when it
    rejects the duals of the integer grid, they are refined on the float costs (step 3 of the module
    docstring). Returns ``x`` and stats holding ``duals = (a, b, λ)`` in the units of ``u`` (the last
    ones tried, so the caller's certificate decides) and ``float_potentials``.
    """
    # imported here, not with the module: every pipeline spec imports the assignment package (its options), and
    # OR-Tools' import (0.05-0.15 s) is only paid by a run that solves a flow
    from ortools.graph.python import min_cost_flow

    pos = u > 0
    umax = float(u[pos].max())
    bits = cost_bits(net.V)
    cap = net.base_cap.copy()
    cap[net.elem_arc] = pos.astype(np.int64)
    gain, unit = integer_gains(np.where(pos, u, 0.0), bits)
    icost = np.zeros(net.n_arcs, np.int64)
    icost[net.elem_arc] = -gain
    solver = min_cost_flow.SimpleMinCostFlow()
    solver.add_arcs_with_capacity_and_unit_cost(net.tail32, net.head32, cap, icost)
    solver.set_nodes_supplies(np.arange(net.V, dtype=np.int32), net.supply)
    status = solver.solve()
    if status != solver.OPTIMAL:
        raise RuntimeError(f"OR-Tools min-cost flow returned {status}")
    flow = np.asarray(solver.flows(np.arange(net.n_arcs, dtype=np.int32)), dtype=np.int64)
    res_fwd = cap - flow
    max_pops = 200 * net.V + 1000
    ipi = np.zeros(net.V, np.int64)
    scans = residual_potentials(net.tail, net.head, res_fwd, flow, icost, ipi, 0, max_pops)
    if scans < 0:  # impossible for an optimal flow of the integer costs
        raise RuntimeError("OR-Tools flow is not optimal for its integer costs")
    x = flow[net.elem_arc] > 0
    pi = ipi * unit
    duals = _duals(net, pi)
    refined = False
    if not certify(x, duals):  # near-ties below the grid: potentials of the float costs
        cost = np.zeros(net.n_arcs)
        cost[net.elem_arc] = -np.where(pos, u, 0.0)
        more = residual_potentials(net.tail, net.head, res_fwd, flow, cost, pi, 1e-15 * umax, max_pops)
        if more >= 0:
            duals, refined, scans = _duals(net, pi), True, scans + more
    stats: dict[str, Any] = {"solver": "ortools", "cost_unit": unit, "scans": scans}
    stats.update(duals=duals, float_potentials=refined)
    return x, stats


def _duals(net: _FlowNetwork, pi: np.ndarray) -> Duals:
    """``a_g = π(L_g) − π(S)``, ``b_h = π(T) − π(R_h)``, ``λ = π(S) − π(T)`` (node 0 = S, 1 = T)."""
    a = pi[net.head[net.sl_arc]] - pi[0]
    b = pi[1] - pi[net.tail[net.rt_arc]]
    return a, b, float(pi[0] - pi[1])
