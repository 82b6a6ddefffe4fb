"""Compiled cost-scaling min-cost flow on a fixed residual pattern (the TVCS exact backend).

The TVCS projection (docs/methods/assignment.md §2.1, §3.1) is a min-cost flow on a bipartite network
with one unit-capacity arc per candidate. ``crowdflow.assignment.flow_backend._FlowNetwork`` builds the
network and reads the selection and the duals; this module holds the solver's hot loop:
successive-shortest-path *phases* under cost scaling, compiled with numba (``crowdflow.compiled``). The
only other compiled loop of the backend, the column generation's capped-greedy seed, is
``flow_backend._greedy_windows``.

The interface is two functions, :func:`residual_pattern` (the network's CSR pattern) and
:func:`cost_scaling_flow` (solve in place); nothing else of this module is used outside it, so the
kernel can be replaced behind them. See docs/methods/assignment.md §3.2.

Residual representation
-----------------------
Every arc ``a = (u → v)`` with capacity ``cap_a`` and cost ``c_a`` owns two *entries* of one CSR
pattern over the nodes: the forward entry (row ``u``, residual ``cap_a − f_a``, cost ``c_a``) and
the backward entry (row ``v``, residual ``f_a``, cost ``−c_a``); ``rev[e]`` is the partner entry.
Pushing ``δ`` along entry ``e`` is ``r[e] −= δ``, ``r[rev[e]] += δ``.

Algorithm (per cost scale ``ε``)
--------------------------------
1. Costs are rounded to multiples of ``ε`` (the last scale uses the exact costs); every residual
   entry whose reduced cost ``c_e + π(u) − π(v)`` is below ``−t`` is saturated, so the pseudo-flow
   satisfies reduced-cost optimality (``rc ≥ −t`` on residual entries) at the price of excesses.
2. Phases until no excess is left: a multi-source Dijkstra from the excess nodes on the clipped
   reduced costs ``max(rc, 0)`` (stopped once every deficit node is settled), potentials
   ``π ← π + min(d, D)`` with ``D`` the largest deficit-node distance (reduced costs stay ``≥ −t``
   and every shortest-path arc becomes admissible, ``rc ≤ t``), then a maximum flow (Dinic: BFS
   levels, then current-arc DFS augmentations) from excess to deficit nodes on the admissible
   entries. Entries created by pushes are reverses of admissible ones, hence admissible too, so the
   max flow runs on a fixed network and the invariant is kept; each phase moves at least one unit.
   That network is extracted once per phase, row by row when the BFS first reaches a node, so the
   Dinic rounds scan only admissible entries (on the dense 2 000 × 500 worker × task network a
   row has 500–2 000 entries, a handful of them admissible; full-row scans in every BFS took 75 %
   of the 10^6-candidate solve).

This is the same method the backend ran before through ``scipy.sparse.csgraph.dijkstra`` and
``maximum_flow``; compiled, a phase is one pass over the touched entries instead of ~30 full-array
numpy passes (the phases' memory traffic dominated the 10^6-candidate solve).
"""

from __future__ import annotations

import numpy as np

from crowdflow.compiled import compiled_kernel

#: kernel status codes (``>= 0`` = total number of phases)
NO_CONVERGENCE = -1
UNREACHABLE = -2
NO_PROGRESS = -3


def residual_pattern(
    tail: np.ndarray, head: np.ndarray, n_nodes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CSR pattern holding both residual entries of every arc.

    Parameters
    ----------
    tail, head : ndarray of int64, shape (m,)
        Arc end points (no parallel arcs are needed; antiparallel pairs are fine).
    n_nodes : int
        Number of nodes.

    Returns
    -------
    indptr : ndarray of int64, shape (n_nodes + 1,)
    indices : ndarray of int64, shape (2m,)
        Head node of each entry (entries of one row are contiguous; raw order within a row).
    rev : ndarray of int64, shape (2m,)
        Partner entry (forward ↔ backward).
    arc : ndarray of int64, shape (2m,)
        Arc of each entry.
    sign : ndarray of float64, shape (2m,)
        ``+1`` for forward entries (cost ``c_a``), ``−1`` for backward ones (cost ``−c_a``).
    """
    m = int(tail.shape[0])
    rows = np.concatenate([tail, head]).astype(np.int64)
    cols = np.concatenate([head, tail]).astype(np.int64)
    order = np.argsort(rows, kind="stable")
    pos = np.empty(2 * m, np.int64)
    pos[order] = np.arange(2 * m)
    raw_rev = np.concatenate([np.arange(m, 2 * m), np.arange(m)])
    indptr = np.zeros(n_nodes + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_nodes), out=indptr[1:])
    arc = order % m if m else order
    sign = np.where(order < m, 1.0, -1.0)
    return indptr, cols[order], pos[raw_rev[order]], arc, sign


@compiled_kernel
def _heap_push(keys: np.ndarray, vals: np.ndarray, size: int, key: float, val: int) -> int:
    i = size
    keys[i] = key
    vals[i] = val
    while i > 0:
        parent = (i - 1) >> 1
        if keys[parent] <= key:
            break
        keys[i] = keys[parent]
        vals[i] = vals[parent]
        i = parent
    keys[i] = key
    vals[i] = val
    return size + 1


@compiled_kernel
def _heap_pop(keys: np.ndarray, vals: np.ndarray, size: int) -> int:
    """Remove the root (the caller has read ``keys[0], vals[0]``); returns the new size."""
    size -= 1
    key = keys[size]
    val = vals[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and keys[child + 1] < keys[child]:
            child += 1
        if keys[child] >= key:
            break
        keys[i] = keys[child]
        vals[i] = vals[child]
        i = child
    if size > 0:
        keys[i] = key
        vals[i] = val
    return size


@compiled_kernel
def _dijkstra_potentials(
    indptr: np.ndarray,
    indices: np.ndarray,
    ecost: np.ndarray,
    r: np.ndarray,
    pi: np.ndarray,
    exc: np.ndarray,
    dist: np.ndarray,
    settled: np.ndarray,
    hkeys: np.ndarray,
    hvals: np.ndarray,
) -> bool:
    """Multi-source Dijkstra from the excess nodes, then ``π ← π + min(d, D)``; False if no
    deficit node is reachable."""
    n = pi.shape[0]
    size = 0
    n_deficit = 0
    for v in range(n):
        dist[v] = np.inf
        settled[v] = False
    for v in range(n):
        if exc[v] > 0:
            dist[v] = 0.0
            size = _heap_push(hkeys, hvals, size, 0.0, v)
        elif exc[v] < 0:
            n_deficit += 1
    found = 0
    big_d = 0.0
    while size > 0:
        key = hkeys[0]
        u = hvals[0]
        size = _heap_pop(hkeys, hvals, size)
        if settled[u] or key > dist[u]:
            continue
        settled[u] = True
        if exc[u] < 0:
            found += 1
            big_d = key
            if found == n_deficit:
                break
        pu = pi[u]
        for e in range(indptr[u], indptr[u + 1]):
            if r[e] > 0:
                v = indices[e]
                if settled[v]:
                    continue
                w = ecost[e] + pu - pi[v]
                if w < 0.0:
                    w = 0.0
                nd = key + w
                if nd < dist[v]:
                    dist[v] = nd
                    size = _heap_push(hkeys, hvals, size, nd, v)
    if found == 0:
        return False
    for v in range(n):
        dv = dist[v]
        pi[v] += dv if dv < big_d else big_d
    return True


@compiled_kernel
def _admissible_row(
    u: int,
    indptr: np.ndarray,
    indices: np.ndarray,
    ecost: np.ndarray,
    r: np.ndarray,
    pi: np.ndarray,
    tol: float,
    astart: np.ndarray,
    aend: np.ndarray,
    aent: np.ndarray,
    fill: int,
) -> int:
    """Append the entries of row ``u`` that the current max flow can use to ``aent[fill:]``.

    Entry ``e = (u → v)`` is kept when ``rc_e = c_e + π(u) − π(v) ≤ tol`` and it is residual now
    (``r_e > 0``) or can become residual during the max flow, which needs a push on its partner,
    so the partner must be admissible too (``−c_e + π(v) − π(u) ≤ tol``). The potentials do not
    change during a max flow, so no other entry of the row can ever be used by it. Sets
    ``astart[u], aend[u]`` (row order kept) and returns the new fill position.
    """
    k = fill
    pu = pi[u]
    for e in range(indptr[u], indptr[u + 1]):
        pv = pi[indices[e]]
        c = ecost[e]
        if c + pu - pv <= tol and (r[e] > 0 or -c + pv - pu <= tol):
            aent[k] = e
            k += 1
    astart[u] = fill
    aend[u] = k
    return k


@compiled_kernel
def _admissible_max_flow(
    indptr: np.ndarray,
    indices: np.ndarray,
    rev: np.ndarray,
    ecost: np.ndarray,
    r: np.ndarray,
    pi: np.ndarray,
    exc: np.ndarray,
    tol: float,
    astart: np.ndarray,
    aend: np.ndarray,
    aent: np.ndarray,
    level: np.ndarray,
    cursor: np.ndarray,
    queue: np.ndarray,
    path_e: np.ndarray,
    path_v: np.ndarray,
) -> int:
    """Dinic max flow from excess to deficit nodes on the entries with ``r > 0``, ``rc ≤ tol``.

    The admissible entries of a node are extracted once per call, the first time a BFS or DFS
    reaches the node (:func:`_admissible_row`); the Dinic rounds of the phase then scan only
    those (on dense networks the full rows are ~10^3 times longer). Updates ``r`` and ``exc``
    in place; returns the number of units moved.
    """
    n = pi.shape[0]
    for v in range(n):
        astart[v] = -1
    fill = 0
    moved = 0
    while True:
        head = 0
        tail = 0
        for v in range(n):
            if exc[v] > 0:
                level[v] = 0
                queue[tail] = v
                tail += 1
            else:
                level[v] = -1
        n_sources = tail
        reached = False
        last = n  # only shortest augmenting paths are used: stop below the first deficit level
        while head < tail:
            u = queue[head]
            head += 1
            lu = level[u] + 1
            if lu > last:
                break
            if astart[u] < 0:
                fill = _admissible_row(u, indptr, indices, ecost, r, pi, tol, astart, aend, aent, fill)
            for k in range(astart[u], aend[u]):
                e = aent[k]
                if r[e] > 0:
                    v = indices[e]
                    if level[v] < 0:
                        level[v] = lu
                        queue[tail] = v
                        tail += 1
                        if exc[v] < 0:
                            reached = True
                            last = lu
        if not reached:
            return moved
        for v in range(n):
            cursor[v] = astart[v]
        for i in range(n_sources):
            s = queue[i]  # BFS order: the sources come first
            while exc[s] > 0:
                depth = 0
                u = s
                path_v[0] = s
                while True:
                    if exc[u] < 0:  # reached a deficit node: augment along the path
                        delta = exc[s]
                        if -exc[u] < delta:
                            delta = -exc[u]
                        for k in range(depth):
                            if r[path_e[k]] < delta:
                                delta = r[path_e[k]]
                        for k in range(depth):
                            e = path_e[k]
                            r[e] -= delta
                            r[rev[e]] += delta
                        exc[s] -= delta
                        exc[u] += delta
                        moved += delta
                        break
                    advanced = False
                    lu = level[u] + 1
                    if lu <= last:  # no node has a level beyond the deficit level
                        if astart[u] < 0:
                            fill = _admissible_row(u, indptr, indices, ecost, r, pi, tol, astart, aend, aent, fill)
                            cursor[u] = astart[u]
                        end = aend[u]
                        while cursor[u] < end:
                            e = aent[cursor[u]]
                            v = indices[e]
                            if r[e] > 0 and level[v] == lu:
                                path_e[depth] = e
                                depth += 1
                                path_v[depth] = v
                                u = v
                                advanced = True
                                break
                            cursor[u] += 1
                    if not advanced:
                        level[u] = -1  # dead end for this level graph
                        if depth == 0:
                            break
                        depth -= 1
                        u = path_v[depth]
                        cursor[u] += 1
                if level[s] < 0:
                    break


@compiled_kernel
def _cost_scaling(
    indptr: np.ndarray,
    indices: np.ndarray,
    rev: np.ndarray,
    arc: np.ndarray,
    sign: np.ndarray,
    arc_cost: np.ndarray,
    r: np.ndarray,
    exc: np.ndarray,
    pi: np.ndarray,
    steps: np.ndarray,
    tols: np.ndarray,
    max_phases: int,
    phases_out: np.ndarray,
) -> int:
    n = pi.shape[0]
    m2 = indices.shape[0]
    ecost = np.empty(m2)
    dist = np.empty(n)
    settled = np.zeros(n, np.bool_)
    hkeys = np.empty(m2 + n + 1)
    hvals = np.empty(m2 + n + 1, np.int64)
    astart = np.empty(n, np.int64)
    aend = np.empty(n, np.int64)
    aent = np.empty(m2, np.int64)
    level = np.empty(n, np.int64)
    cursor = np.empty(n, np.int64)
    queue = np.empty(n, np.int64)
    path_e = np.empty(n + 1, np.int64)
    path_v = np.empty(n + 1, np.int64)
    total = 0
    for k in range(steps.shape[0]):
        step = steps[k]
        t = tols[k]
        for e in range(m2):
            c = arc_cost[arc[e]]
            if step > 0.0:
                c = np.rint(c / step) * step
            ecost[e] = sign[e] * c
        for u in range(n):  # saturate the entries that violate rc ≥ −t at this scale
            pu = pi[u]
            for e in range(indptr[u], indptr[u + 1]):
                if r[e] > 0:
                    v = indices[e]
                    if ecost[e] + pu - pi[v] < -t:
                        amount = r[e]
                        r[e] = 0
                        r[rev[e]] += amount
                        exc[u] -= amount
                        exc[v] += amount
        phases = 0
        while True:
            has_excess = False
            for v in range(n):
                if exc[v] > 0:
                    has_excess = True
                    break
            if not has_excess:
                break
            if total + phases >= max_phases:
                return NO_CONVERGENCE
            phases += 1
            if not _dijkstra_potentials(indptr, indices, ecost, r, pi, exc, dist, settled, hkeys, hvals):
                return UNREACHABLE
            if (
                _admissible_max_flow(
                    indptr, indices, rev, ecost, r, pi, exc, t, astart, aend, aent, level, cursor, queue, path_e, path_v
                )
                <= 0
            ):
                return NO_PROGRESS
        phases_out[k] = phases
        total += phases
    return total


def cost_scaling_flow(
    pattern: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    arc_cost: np.ndarray,
    residual: np.ndarray,
    excess: np.ndarray,
    potentials: np.ndarray,
    steps: np.ndarray,
    tols: np.ndarray,
    max_phases: int,
) -> np.ndarray:
    """Run the cost-scaling phases in place; returns the number of phases per scale.

    Parameters
    ----------
    pattern : tuple
        Output of :func:`residual_pattern`.
    arc_cost : ndarray of float64, shape (m,)
        Exact arc costs.
    residual : ndarray of int64, shape (2m,)
        Residual capacity per entry (updated in place; forward ``cap − f``, backward ``f``).
    excess : ndarray of int64, shape (n_nodes,)
        ``supply + inflow − outflow`` per node (updated in place; all zero on return).
    potentials : ndarray of float64, shape (n_nodes,)
        Node potentials ``π`` (updated in place; optimal duals on return).
    steps, tols : ndarray of float64, shape (k,)
        Cost grid per scale (``0`` = exact costs) and the reduced-cost tolerance of that scale.
    max_phases : int
        Safety cap on the total number of phases.

    Raises
    ------
    RuntimeError
        No convergence within ``max_phases``, or a numerically inconsistent phase (never
        expected; the TVCS backend then falls back to the HiGHS LP).
    """
    indptr, indices, rev, arc, sign = pattern
    phases = np.zeros(steps.shape[0], np.int64)
    status = _cost_scaling(
        indptr, indices, rev, arc, sign, arc_cost, residual, excess, potentials, steps, tols, int(max_phases), phases
    )
    if status == NO_CONVERGENCE:
        raise RuntimeError(f"flow backend: no convergence after {max_phases} phases")
    if status == UNREACHABLE:
        raise RuntimeError("flow backend: excess cannot reach any deficit node")
    if status == NO_PROGRESS:
        raise RuntimeError("flow backend: admissible network carried no flow (numerical trouble)")
    return phases
