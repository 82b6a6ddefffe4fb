"""The exact min-cost-flow backend: the network of a TVCS instance and its closed forms.

The selection ``max ⟨u, x⟩ s.t. A x ≤ s, x ∈ {0,1}^p`` is a maximum-weight bipartite b-matching
with a global cardinality cap, i.e. a min-cost flow on ``S → view-1 node (cap s_g) → element
(cap 1, cost −u_i) → view-2 node (cap s_h) → T`` plus a bypass ``S → T`` (cap ``s_total``) with
``s_total`` units of supply. :class:`_FlowNetwork` builds that network once per structure, runs the
compiled cost-scaling kernel of :mod:`crowdflow.assignment.min_cost_flow` on it and reads back the
selection and the LP duals ``a_g = π(L_g) − π(S)``, ``b_h = π(T) − π(R_h)``, ``λ = π(S) − π(T)``.

Also here: the compiled capped-greedy seed of the column generation (:func:`_greedy_windows`), the
ε-scaling schedule of its warm-started re-solves (:func:`_warm_scale_bits`) and the exact
``O(p log p)`` closed form when one view never binds (:func:`_laminar_greedy`). The column
generation loop itself is :meth:`crowdflow.assignment.projector.TVCSProjector._solve_flow`.

See docs/methods/assignment.md §3.1–§3.4.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.assignment.min_cost_flow import cost_scaling_flow, residual_pattern
from crowdflow.compiled import compiled_kernel


class _FlowNetwork:
    """Fixed network topology + CSR patterns reused by every solve on one TVCS structure.

    Nodes: ``S=0``, ``T=1``, one node per view-1 group, one per view-2 group, a private node
    (cap 1) for every element without a view-1 (view-2) group, and a private element node for
    elements whose (left, right) node pair repeats (so that no two arcs are parallel).
    Arcs: ``S→left (cap s_g)``, ``left→right`` per element (cap 1, cost −u_i), ``right→T
    (cap s_h)``, bypass ``S→T (cap s_total)``; ``S`` supplies and ``T`` demands ``s_total``.
    """

    def __init__(self, cons: TVCSConstraints) -> None:
        p, n1, n2 = cons.p, cons.n1, cons.n2
        k = cons.total
        self.cons = cons
        self.p = p
        no1 = cons.view1 < 0
        no2 = cons.view2 < 0
        nl = n1 + int(no1.sum())
        nr = n2 + int(no2.sum())
        left = cons.view1.copy()
        left[no1] = n1 + np.arange(int(no1.sum()))
        right = cons.view2.copy()
        right[no2] = n2 + np.arange(int(no2.sum()))
        capl = np.concatenate([cons.caps1, np.ones(nl - n1, np.int64)])
        capr = np.concatenate([cons.caps2, np.ones(nr - n2, np.int64)])
        capl = np.minimum(capl, k)
        capr = np.minimum(capr, k)
        # duplicate (left, right) pairs get a private element node
        key = left * np.int64(nr) + right
        order = np.argsort(key, kind="stable")
        dup_sorted = np.zeros(p, bool)
        if p > 1:
            dup_sorted[1:] = key[order][1:] == key[order][:-1]
        dup = np.zeros(p, bool)
        dup[order] = dup_sorted
        ndup = int(dup.sum())
        S, T = 0, 1
        lnode = 2 + np.arange(nl)
        rnode = 2 + nl + np.arange(nr)
        enode = 2 + nl + nr + np.arange(ndup)
        V = 2 + nl + nr + ndup
        elem_head = rnode[right].copy()
        elem_head[dup] = enode
        self.left, self.right, self.dup = left, right, np.flatnonzero(dup)
        self.nl, self.nr = nl, nr
        tails = [np.zeros(nl, np.int64), lnode[left], rnode, np.array([S]), enode]
        heads = [lnode, elem_head, np.full(nr, T), np.array([T]), rnode[right[dup]]]
        self.tail = np.concatenate(tails).astype(np.int64)
        self.head = np.concatenate(heads).astype(np.int64)
        self.base_cap = np.concatenate(
            [capl, np.ones(p, np.int64), capr, np.array([k]), np.ones(ndup, np.int64)]
        ).astype(np.int64)
        self.elem_arc = nl + np.arange(p)  # arc index of each element arc
        self.sl_arc = np.arange(n1)  # S→view-1 group arcs
        self.rt_arc = nl + p + np.arange(n2)  # view-2 group→T arcs
        self.bypass_arc = nl + p + nr
        self.n_arcs = int(self.tail.shape[0])
        self.V = V
        self.supply = np.zeros(V, np.int64)
        self.supply[S] = k
        self.supply[T] = -k
        self._pattern: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def pattern(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The CSR residual pattern of the compiled kernel (built on first use)."""
        if self._pattern is None:
            self._pattern = residual_pattern(self.tail, self.head, self.V)
        return self._pattern

    def potentials(self, u: np.ndarray, duals: tuple[np.ndarray, np.ndarray, float], umax: float) -> np.ndarray:
        """Node potentials (costs normalised by ``umax``) whose reduced costs are given by ``duals``.

        ``π(S) = 0``, ``π(T) = −λ``, ``π(L_g) = a_g``, ``π(R_h) = −λ − b_h`` (all over ``umax``), so
        the element arc ``L_g → R_h`` (cost ``−u_i``) has reduced cost ``−(u_i − a_g − b_h − λ)``.
        A private cap-1 node takes the element's positive reduced gain as its dual
        (``[u_i − b_h − λ]₊`` on the left, ``[u_i − a_g − λ]₊`` on the right); a duplicate pair's
        element node gets the potential of its right node. Any potentials give the exact optimum
        (the first scale saturates every entry they price negatively); good ones save phases.
        """
        a, b, lam = duals
        n1, n2 = self.cons.n1, self.cons.n2
        al = np.zeros(self.nl)
        al[:n1] = np.maximum(a, 0.0)
        br = np.zeros(self.nr)
        br[:n2] = np.maximum(b, 0.0)
        lam = max(float(lam), 0.0)
        upos = np.maximum(u, 0.0)
        priv = np.flatnonzero(self.left >= n1)
        al[self.left[priv]] = np.maximum(upos[priv] - br[self.right[priv]] - lam, 0.0)
        priv = np.flatnonzero(self.right >= n2)
        br[self.right[priv]] = np.maximum(upos[priv] - al[self.left[priv]] - lam, 0.0)
        pi = np.zeros(self.V)
        pi[1] = -lam
        pi[2 : 2 + self.nl] = al
        pi[2 + self.nl : 2 + self.nl + self.nr] = -lam - br
        pi[2 + self.nl + self.nr :] = pi[2 + self.nl + self.right[self.dup]]
        return pi / umax

    def solve(
        self,
        u: np.ndarray,
        tol: float = 1e-11,
        scale_bits: tuple[int, ...] = tuple(range(0, 31, 2)),
        warm: tuple[np.ndarray, np.ndarray, float] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Cost-scaling SSP: solve with costs rounded to 2^-b·max(u) for b in ``scale_bits``,
        then with the exact costs, each time warm-started from the previous potentials/flow.

        The grids go down to 2^-30·max(u): with heavy-tailed weights most ``u`` are far below the
        maximum, and stopping at 2^-20 left hundreds of phases to the exact scale (10^6 Pareto
        weights: 457 phases, 4.3 s; with 2^-30: 10 phases, 0.6 s). An idle scale costs one pass.

        ``tol`` is the reduced-cost tolerance of the exact scale (costs normalised to max 1).
        ``warm`` = duals ``(a, b, λ)`` (units of ``u``) of a related problem, e.g. the previous
        column-generation round: the potentials start there (:meth:`potentials`) and the scales
        keep the *exact* costs, only the tolerance ``2^-b/4`` decreases over ``scale_bits``
        (ε-scaling); rounding the costs would break the warm potentials' optimality again at
        every grid. Returns the selection and stats including the duals ``(a, b, λ)`` in the
        units of ``u``.
        """
        pos = u > 0
        umax = float(u[pos].max()) if np.any(pos) else 0.0
        cap = self.base_cap.copy()
        cap[self.elem_arc] = pos.astype(np.int64)
        arc_cost = np.zeros(self.n_arcs)
        arc_cost[self.elem_arc] = -np.where(pos, u, 0.0) / (umax if umax > 0 else 1.0)
        _, _, _, arc, sign = self.pattern
        forward = sign > 0
        residual = np.where(forward, cap[arc], 0)  # the zero flow
        excess = self.supply.copy()
        pi = np.zeros(self.V) if warm is None else self.potentials(u, warm, umax if umax > 0 else 1.0)
        steps = np.array([2.0**-b if warm is None else 0.0 for b in scale_bits] + [0.0])
        tols = np.array([0.25 * 2.0**-b for b in scale_bits] + [tol])
        max_phases = 4 * (self.cons.total + self.V) + 10
        phases_per_scale = cost_scaling_flow(self.pattern, arc_cost, residual, excess, pi, steps, tols, max_phases)
        flow = np.zeros(self.n_arcs, np.int64)
        flow[arc[~forward]] = residual[~forward]
        x = flow[self.elem_arc] > 0
        # duals in original units: a_g = π(L_g) − π(S), b_h = π(T) − π(R_h), λ = π(S) − π(T)
        S, T = 0, 1
        a = (pi[self.head[self.sl_arc]] - pi[S]) * umax
        b = (pi[T] - pi[self.tail[self.rt_arc]]) * umax
        lam = (pi[S] - pi[T]) * umax
        stats = {"phases_per_scale": phases_per_scale.tolist(), "phases": int(phases_per_scale.sum())}
        stats["duals"] = (a, b, lam)
        return x, stats


@compiled_kernel
def _greedy_windows(
    g1: np.ndarray, g2: np.ndarray, caps1: np.ndarray, caps2: np.ndarray, total: int, w1: np.ndarray, w2: np.ndarray
) -> np.ndarray:
    """Candidate set of the flow backend's second column-generation seed (compiled, ``O(p)``).

    The elements are given in descending weight order by their groups ``g1[k], g2[k]`` (``−1`` =
    none). Pass 1 is the capped greedy (accept element ``k`` while its groups and the total have
    room) and records each element's rank ``r_g(k)`` among the members of its group. Pass 2 keeps
    the greedy's elements and, for every group ``g`` the greedy used, the members whose rank lies
    within ``w_g`` of the greedy's rank range ``[lo_g, hi_g]`` in that group:
    ``lo_g − w_g ≤ r_g(k) ≤ hi_g + w_g``. Returns the keep mask over positions ``k``.
    """
    p = g1.shape[0]
    room1 = caps1.copy()
    room2 = caps2.copy()
    room = total
    cnt1 = np.zeros(caps1.shape[0], np.int64)
    cnt2 = np.zeros(caps2.shape[0], np.int64)
    lo1 = np.full(caps1.shape[0], -1, np.int64)
    hi1 = np.full(caps1.shape[0], -1, np.int64)
    lo2 = np.full(caps2.shape[0], -1, np.int64)
    hi2 = np.full(caps2.shape[0], -1, np.int64)
    rank1 = np.zeros(p, np.int64)
    rank2 = np.zeros(p, np.int64)
    keep = np.zeros(p, np.bool_)
    for k in range(p):
        g = g1[k]
        h = g2[k]
        if g >= 0:
            rank1[k] = cnt1[g]
            cnt1[g] += 1
        if h >= 0:
            rank2[k] = cnt2[h]
            cnt2[h] += 1
        if room > 0 and (g < 0 or room1[g] > 0) and (h < 0 or room2[h] > 0):
            keep[k] = True
            room -= 1
            if g >= 0:
                room1[g] -= 1
                if lo1[g] < 0:
                    lo1[g] = rank1[k]
                hi1[g] = rank1[k]
            if h >= 0:
                room2[h] -= 1
                if lo2[h] < 0:
                    lo2[h] = rank2[k]
                hi2[h] = rank2[k]
    for k in range(p):
        g = g1[k]
        h = g2[k]
        if g >= 0 and lo1[g] >= 0 and lo1[g] - w1[g] <= rank1[k] <= hi1[g] + w1[g]:
            keep[k] = True
        if h >= 0 and lo2[h] >= 0 and lo2[h] - w2[h] <= rank2[k] <= hi2[h] + w2[h]:
            keep[k] = True
    return keep


def _laminar_greedy(
    u: np.ndarray, group: np.ndarray, caps: np.ndarray, total: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """Exact selection when only one view (plus the total) can bind.

    One partition view truncated at ``total`` is a (laminar) matroid, so greedy by descending
    ``u`` is optimal: keep the top-``cap_g`` of every group, then the global top-``total`` of those
    (docs/methods/assignment.md §3.4, the "sequential projection" of T5). Vectorised with sorts,
    ``O(p log p)``. Also returns the optimal duals: ``λ`` = the (total+1)-th largest kept weight (0 if none) and
    ``a_g = [u_(cap_g+1, g) − λ]₊`` (tight, see the certificate in :meth:`TVCSConstraints.dual_bound`).
    """
    p = u.shape[0]
    ng = caps.shape[0]
    pos = u > 0
    idx = np.arange(p)
    g = np.where(group >= 0, group, ng)  # no group -> pseudo-group with no cap
    order = np.lexsort((idx, -u, g))
    gs = g[order]
    starts = np.searchsorted(gs, np.arange(ng + 1))
    rank = np.empty(p, np.int64)
    rank[order] = np.arange(p) - starts[gs]
    cap_ext = np.concatenate([caps, [p]])
    kept = pos & (rank < cap_ext[g])
    a = np.zeros(ng)
    cand = np.flatnonzero(kept)
    ordk = cand[np.lexsort((cand, -u[cand]))]
    x = np.zeros(p, bool)
    x[ordk[:total]] = True
    lam = float(u[ordk[total]]) if ordk.shape[0] > total else 0.0
    # (cap+1)-th largest weight of each capped group, if the group is larger than its cap
    counts = np.diff(starts)
    over = np.flatnonzero(counts[:ng] > caps)
    if over.shape[0]:
        a[over] = np.maximum(u[order[starts[over] + caps[over]]] - lam, 0.0)
    return x, a, max(lam, 0.0)


def _warm_scale_bits(n_viol: int, eps: float) -> tuple[int, ...]:
    """Tolerance levels ``2^-b/4`` for a column-generation re-solve warm-started from the
    previous round's duals (:meth:`_FlowNetwork.solve` with ``warm``: exact costs, ε-scaling).

    The warm potentials are optimal except on the ``n_viol`` added elements, whose reduced costs
    are at worst ``−eps`` (costs normalised to max 1). The levels start at the first one whose
    tolerance covers ``eps`` (coarser levels would idle) and end at the exact tolerance. Every
    phase moves at least one unit and a level needs at least one phase when anything violates
    it, so with at most ``2·(levels + 1)`` violators the exact tolerance alone is used (``()``).
    Measured on rank-one weights: 594 violators, ``eps = 2.6·10⁻⁴``: 27 phases (rounded costs
    from the grid ``2^-10``: 244; exact tolerance only: 253).
    """
    b0 = min(30, max(0, math.floor(math.log2(0.25 / eps)))) if eps > 0 else 30
    b0 += b0 % 2
    bits = tuple(range(b0, 31, 2))
    return () if n_viol <= 2 * (len(bits) + 1) else bits
