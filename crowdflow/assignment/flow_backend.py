"""The exact min-cost-flow backend: the network of a TVCS instance, the column-generation seed, the closed form.

The selection ``max ⟨u, x⟩ s.t. A x ≤ s, x ∈ {0,1}^p`` is a maximum-weight bipartite b-matching
with a global cardinality cap, i.e. a min-cost flow on ``S → view-1 node (cap s_g) → element
(cap 1, cost −u_i) → view-2 node (cap s_h) → T`` plus a bypass ``S → T`` (cap ``s_total``) with
``s_total`` units of supply. :class:`_FlowNetwork` builds that network once per structure; it is
solved by OR-Tools in :mod:`crowdflow.assignment.ortools_flow`, which reads back the selection and the
LP duals ``a_g = π(L_g) − π(S)``, ``b_h = π(T) − π(R_h)``, ``λ = π(S) − π(T)``.

Also here: the compiled capped-greedy seed of the column generation (:func:`_greedy_windows`) and the
exact greedy of one view alone (:func:`_group_tops`, compiled; :func:`_laminar_greedy` is its simple
``O(p log p)`` reference), the closed form when one view never binds and the one-view relaxation
test of :meth:`crowdflow.assignment.projector.TVCSProjector._one_view_relaxation`. The column
generation loop itself is :meth:`crowdflow.assignment.projector.TVCSProjector._solve_flow`.

See docs/methods/assignment.md §3.1–§3.4.
"""

from __future__ import annotations

import numpy as np

from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.compiled import compiled_kernel


class _FlowNetwork:
    """Fixed network topology reused by every solve on one TVCS structure.

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
        dup = _repeated_pairs(left, right, nl, nr)
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
        self.tail32 = self.tail.astype(np.int32)  # OR-Tools' node type, converted once per structure
        self.head32 = self.head.astype(np.int32)
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


@compiled_kernel
def _repeated_pairs(left: np.ndarray, right: np.ndarray, nl: int, nr: int) -> np.ndarray:
    """Mask of the elements whose ``(left, right)`` pair already occurred at a smaller index
    (compiled, ``O(p + nl + nr)``: elements bucketed by ``left``, a last-seen stamp per ``right``)."""
    p = left.shape[0]
    start = np.zeros(nl + 1, np.int64)
    for i in range(p):
        start[left[i] + 1] += 1
    for g in range(nl):
        start[g + 1] += start[g]
    fill = start[:nl].copy()
    order = np.empty(p, np.int64)
    for i in range(p):
        order[fill[left[i]]] = i
        fill[left[i]] += 1
    seen = np.full(nr, -1, np.int64)
    dup = np.zeros(p, np.bool_)
    for g in range(nl):
        for k in range(start[g], start[g + 1]):
            i = order[k]
            if seen[right[i]] == g:
                dup[i] = True
            seen[right[i]] = g
    return dup


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


@compiled_kernel
def _group_tops(u: np.ndarray, group: np.ndarray, caps: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Compiled ``O(p log(max group size))`` version of :func:`_laminar_greedy` (same selection rule, same duals).

    Members of every group (counting sort on ``group``; ``−1`` = no group, never capped) are sorted by
    descending weight, ties by index; the first ``cap_g`` positive ones are kept and ``u_(cap_g+1, g)``,
    the ``(cap_g+1)``-th largest member weight, is recorded. Of the kept elements the ``total`` largest
    are selected (ties by index), ``λ`` = the ``(total+1)``-th largest kept weight (0 if none) and
    ``a_g = [u_(cap_g+1, g) − λ]₊`` for the groups larger than their cap, 0 for the others.
    """
    p = u.shape[0]
    ng = caps.shape[0]
    start = np.zeros(ng + 2, np.int64)
    for i in range(p):
        start[group[i] + 2 if group[i] >= 0 else 1] += 1  # slot 0: ungrouped, slot g + 1: group g
    for g in range(ng + 1):
        start[g + 1] += start[g]
    fill = start[: ng + 1].copy()
    members = np.empty(p, np.int64)
    for i in range(p):
        slot = group[i] + 1 if group[i] >= 0 else 0
        members[fill[slot]] = i
        fill[slot] += 1
    kept = np.zeros(p, np.bool_)
    kth = np.full(ng, -np.inf)
    for k in range(start[0], start[1]):
        kept[members[k]] = u[members[k]] > 0
    for g in range(ng):
        lo = start[g + 1]
        n = start[g + 2] - lo
        c = caps[g]
        vals = np.empty(n)
        for k in range(n):
            vals[k] = -u[members[lo + k]]
        rank = np.argsort(vals, kind="mergesort")  # descending weight, stable: ties by index
        for r in range(min(c, n)):
            i = members[lo + rank[r]]
            kept[i] = u[i] > 0
        if n > c:
            kth[g] = -vals[rank[c]]
    cand = np.flatnonzero(kept)
    lam = 0.0
    if cand.shape[0] > total:
        cw = u[cand]
        lam = -np.partition(-cw, total)[total]  # the (total+1)-th largest kept weight
        room = total - int(np.sum(cw > lam))  # ties at λ: the first ones by index
        for r in range(cand.shape[0]):
            if cw[r] < lam:
                kept[cand[r]] = False
            elif cw[r] == lam:
                if room > 0:
                    room -= 1
                else:
                    kept[cand[r]] = False
    a = np.zeros(ng)
    for g in range(ng):
        if kth[g] > -np.inf and kth[g] - lam > 0:
            a[g] = kth[g] - lam
    return kept, a, max(lam, 0.0)


def _laminar_greedy(
    u: np.ndarray, group: np.ndarray, caps: np.ndarray, total: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """Exact selection when only one view (plus the total) can bind (reference of :func:`_group_tops`).

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
