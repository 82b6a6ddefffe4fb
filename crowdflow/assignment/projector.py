"""Projection onto a Three-view Cardinality Constrained Set (TVCS) and task–worker assignment.

Spec: /work/shared/specs/assignment-tvcs.md (Yang, Gui, Ke, Stefankovic, Fujimaki, Liu, "On The
Projection Operator to A Three-view Cardinality Constrained Set", ICML 2017).

Elements ``i ∈ [p]`` carry a weight ``u_i ≥ 0`` and belong to at most one view-1 group (e.g. a
worker) and at most one view-2 group (e.g. a task). The selection problem (spec §1.2, Lemma 1)

    maximize ⟨u, x⟩   s.t.  Σ_i x_i ≤ s_total,  Σ_{i∈g} x_i ≤ s_g (g ∈ 𝒢1 ∪ 𝒢2),  x ∈ {0,1}^p

is a maximum-weight bipartite b-matching with a global cardinality cap; its LP relaxation is exact
(totally unimodular constraint matrix, spec §2.1). The Euclidean projection of ``v`` onto
``Ω = {w : ‖w_g‖₀ ≤ s_g ∀g}`` is ``v ⊙ x*`` with ``x*`` the selection for ``u = v²``.

Backends of :func:`tvcs_select` (all return a feasible 0/1 ``x`` and a dual certificate):

``flow`` (default)
    Exact combinatorial min-cost flow (spec §2.1 "flow view"): cost-scaling successive shortest
    paths on the network ``S → view-1 node → element → view-2 node → T`` plus a ``S → T``
    bypass, ``s_total`` units of supply. See :class:`TVCSProjector` for the algorithm and its
    complexity.
``lp``
    The HiGHS LP reference (``scipy.optimize.linprog``, interior point + crossover by default)
    on the sparse constraint matrix; integrality is checked and ``scipy.optimize.milp`` is the
    fallback (spec §2.4).
``pgd``
    The paper's projected-gradient method on the primal–dual penalty function with the
    duality-gap certificate as stopping rule (spec §2.3).
``brute``
    Enumeration of all 2^p supports (p ≤ 20), the test oracle.

The crowdsourcing part (spec §4) builds the worker × task instance from pandas tables:
:func:`assign_tasks` maximises the total candidate score, :func:`assign_siht` maximises the expected
accuracy of Bayes-weighted voting by stochastic IHT, :func:`candidate_scores` derives candidate
scores from worker skills and task confidences.

Invalid and degenerate inputs (never a silent wrong result):

- ``ValueError`` (message names the column / offending ids or rows): NaN/inf weights, scores,
  qualities or caps; negative caps or budget; duplicate (task, worker) pairs; duplicate ids in a
  cap table; a candidate's worker/task missing from a cap table; missing columns or ids;
  ``quality`` outside (0, 1); a task's ``prior`` differing between rows; unknown backend.
- Explicit empty results (``n_selected = 0``, ``objective = 0``, ``certified = True`` — the empty
  set is then provably optimal): no candidates, budget 0, all caps 0, all weights ≤ 0.
- Weights/scores ≤ 0 are never selected (they cannot increase the objective; spec §1.2, §2.4);
  :class:`AssignmentResult` reports how many in ``n_excluded``.
- Non-integer caps and budgets are floored (spec §1.3); ``None``/``inf`` means unlimited.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from crowdflow._typing import SparseMatrix
from crowdflow.assignment.min_cost_flow import cost_scaling_flow, residual_pattern
from crowdflow.compiled import compiled_kernel

log = logging.getLogger(__name__)

Backend = Literal["flow", "lp", "pgd", "brute"]
BACKENDS: tuple[str, ...] = ("flow", "lp", "pgd", "brute")

_CERT_RTOL = 1e-9  # spec §2.4 / T2: objective agreement tolerance used for the certificate
PRUNE_MIN_P = 50_000  # flow backend: reduced-cost column generation from this many elements on
SEED_WINDOW = 0.25  # flow backend: half-width of the greedy seed's rank windows, as a fraction of the cap
_BRUTE_MAX_P = 20


# ---------------------------------------------------------------------------------------------
# Constraint structure
# ---------------------------------------------------------------------------------------------


def _as_view(view: Any, p: int, name: str) -> tuple[np.ndarray, int]:
    """Validate a view membership vector: int group index per element, negative = no group."""
    if view is None:
        return np.full(p, -1, dtype=np.int64), 0
    arr = np.asarray(view)
    if arr.ndim != 1 or arr.shape[0] != p:
        raise ValueError(f"{name} must be a 1-D array of length p={p}, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
            raise ValueError(f"{name} must hold integer group indices (negative = no group)")
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"{name} must hold integer group indices, got dtype {arr.dtype}")
    idx = arr.astype(np.int64)
    idx[idx < 0] = -1
    n = int(idx.max()) + 1 if p and idx.max() >= 0 else 0
    return idx, n


def _as_caps(caps: Any, n: int, sizes: np.ndarray, name: str) -> np.ndarray:
    """Caps per group as int64; ``None``/``inf`` = unlimited (the group size). Floors reals."""
    if caps is None:
        return sizes.astype(np.int64).copy()
    arr = np.asarray(caps, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.ndim != 1 or arr.shape[0] < n:
        raise ValueError(f"{name} must be a scalar or have one entry per group ({n}), got shape {arr.shape}")
    arr = arr[:n]
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} contains NaN at groups {np.flatnonzero(np.isnan(arr))[:10].tolist()}")
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0; negative at groups {np.flatnonzero(arr < 0)[:10].tolist()}")
    out = np.where(np.isinf(arr), sizes, np.minimum(np.floor(arr), sizes))  # floor: spec §1.3 / §2.1
    return out.astype(np.int64)


@dataclass(frozen=True)
class TVCSConstraints:
    """A validated TVCS structure (spec §1.1).

    Attributes
    ----------
    view1, view2 : ndarray of int64, shape (p,)
        Group index of each element in view 1 / view 2, ``-1`` when the element has no group.
        Groups of one view are disjoint by construction (one key per element).
    caps1, caps2 : ndarray of int64
        Cap per group (already floored and clipped to the group size; unlimited = group size).
    total : int
        Global cap ``s_total`` (clipped to ``p``).
    """

    view1: np.ndarray
    view2: np.ndarray
    caps1: np.ndarray
    caps2: np.ndarray
    total: int

    @classmethod
    def build(
        cls,
        p: int,
        view1: Any = None,
        view2: Any = None,
        caps1: Any = None,
        caps2: Any = None,
        total: float | None = None,
    ) -> TVCSConstraints:
        """Validate and normalise a TVCS structure.

        Parameters
        ----------
        p : int
            Number of elements.
        view1, view2 : array-like of int or None
            Group index per element (negative = no group); ``None`` = the view is absent.
        caps1, caps2 : scalar, array-like or None
            Per-group caps (scalar broadcasts). ``None`` or ``inf`` = unlimited. Reals are floored
            (flooring does not change the integer feasible set, spec §2.1); negative or NaN caps
            raise ``ValueError``.
        total : float or None
            Global cap; ``None``/``inf`` = unlimited (``p``). Floored; negative raises.
        """
        p = int(p)
        if p < 0:
            raise ValueError("p must be >= 0")
        v1, n1 = _as_view(view1, p, "view1")
        v2, n2 = _as_view(view2, p, "view2")
        size1 = np.bincount(v1[v1 >= 0], minlength=n1)
        size2 = np.bincount(v2[v2 >= 0], minlength=n2)
        c1 = _as_caps(caps1, n1, size1, "caps1")
        c2 = _as_caps(caps2, n2, size2, "caps2")
        if total is None or (isinstance(total, float) and math.isinf(total) and total > 0):
            tot = p
        else:
            t = float(total)
            if math.isnan(t) or t < 0:
                raise ValueError(f"total must be >= 0 (or None for unlimited), got {total!r}")
            tot = int(min(math.floor(t), p))
        for a in (v1, v2, c1, c2):
            a.setflags(write=False)
        return cls(view1=v1, view2=v2, caps1=c1, caps2=c2, total=tot)

    @property
    def p(self) -> int:
        return int(self.view1.shape[0])

    @property
    def n1(self) -> int:
        return int(self.caps1.shape[0])

    @property
    def n2(self) -> int:
        return int(self.caps2.shape[0])

    def scaled(self, factor: int) -> TVCSConstraints:
        """Every cap (total included) multiplied by ``factor`` — ``P_{2s}`` of GradMP (spec §3)."""
        return TVCSConstraints.build(
            self.p, self.view1, self.view2, self.caps1 * factor, self.caps2 * factor, self.total * factor
        )

    def matrix(self) -> tuple[sp.csr_matrix, np.ndarray]:
        """Constraint matrix ``A`` (rows: total, view-1 groups, view-2 groups) and caps ``s`` (§1.2)."""
        p = self.p
        cols = [np.arange(p)]
        rows = [np.zeros(p, dtype=np.int64)]
        m1 = self.view1 >= 0
        cols.append(np.flatnonzero(m1))
        rows.append(1 + self.view1[m1])
        m2 = self.view2 >= 0
        cols.append(np.flatnonzero(m2))
        rows.append(1 + self.n1 + self.view2[m2])
        r = np.concatenate(rows)
        c = np.concatenate(cols)
        A = sp.csr_matrix((np.ones(r.shape[0]), (r, c)), shape=(1 + self.n1 + self.n2, p))
        s = np.concatenate([[self.total], self.caps1, self.caps2]).astype(np.float64)
        return A, s

    def counts(self, x: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """Total, per-view-1-group and per-view-2-group counts of a selection ``x``."""
        xb = np.asarray(x).astype(np.float64)
        c1 = np.bincount(self.view1[self.view1 >= 0], weights=xb[self.view1 >= 0], minlength=self.n1)
        c2 = np.bincount(self.view2[self.view2 >= 0], weights=xb[self.view2 >= 0], minlength=self.n2)
        return round(float(xb.sum())), c1, c2

    def is_feasible(self, x: np.ndarray) -> bool:
        """``x`` binary and ``A x ≤ s``."""
        x = np.asarray(x)
        if x.shape != (self.p,) or not np.all((x == 0) | (x == 1)):
            return False
        tot, c1, c2 = self.counts(x)
        return bool(tot <= self.total and np.all(c1 <= self.caps1) and np.all(c2 <= self.caps2))

    def fill_bound(self, idx: np.ndarray) -> int:
        """Upper bound on ``|x|`` over selections inside the elements ``idx``:
        ``min(s_total, Σ_g min(|idx ∩ g|, s_g) + |idx without view-1 group|, same for view 2)``."""
        bound = self.total
        for view, caps in ((self.view1, self.caps1), (self.view2, self.caps2)):
            g = view[idx]
            grouped = g >= 0
            cnt = np.bincount(g[grouped], minlength=caps.shape[0])
            bound = min(bound, int(np.minimum(cnt, caps).sum()) + int(idx.shape[0] - grouped.sum()))
        return bound

    def reduced_gain(self, u: np.ndarray, a: np.ndarray, b: np.ndarray, lam: float) -> np.ndarray:
        """``u_i − a_{g(i)} − b_{h(i)} − λ`` per element (a missing group contributes 0)."""
        red = np.asarray(u, dtype=np.float64) - lam
        if self.n1:
            red = red - np.where(self.view1 >= 0, a[np.maximum(self.view1, 0)], 0.0)
        if self.n2:
            red = red - np.where(self.view2 >= 0, b[np.maximum(self.view2, 0)], 0.0)
        return cast(np.ndarray, red)

    def dual_bound(self, u: np.ndarray, a: np.ndarray, b: np.ndarray, lam: float) -> float:
        """Weak-duality upper bound on OPT (spec §2.2) for any duals ``a, b, λ`` (clipped at 0).

        ``UB = s_total·λ + Σ_g s_g a_g + Σ_h s_h b_h + Σ_i [u_i − a_{g(i)} − b_{h(i)} − λ]₊``, where
        the bracket is the optimal ``y_B`` for these group duals.
        """
        a = np.maximum(np.asarray(a, dtype=np.float64), 0.0)
        b = np.maximum(np.asarray(b, dtype=np.float64), 0.0)
        lam = max(float(lam), 0.0)
        red = self.reduced_gain(u, a, b, lam)
        # caps clipped at s_total: Σ_{i∈g} x_i ≤ s_total is implied by the total row (same LP)
        c1 = np.minimum(self.caps1, self.total)
        c2 = np.minimum(self.caps2, self.total)
        return float(self.total * lam + c1 @ a + c2 @ b + np.maximum(red, 0.0).sum())


# ---------------------------------------------------------------------------------------------
# Result
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelectResult:
    """Result of :func:`tvcs_select`.

    Attributes
    ----------
    x : ndarray of bool, shape (p,)
        Selected elements (feasible; never an element with ``u_i ≤ 0``).
    objective : float
        ``⟨u, x⟩``.
    dual_bound : float
        Upper bound on the optimum from a dual-feasible point (weak duality, spec §2.2).
    certified : bool
        ``dual_bound − objective ≤ 1e-9·max(1, |dual_bound|)``, i.e. ``x`` is provably optimal.
    backend : str
        Backend that produced ``x`` (``"pgd->lp"`` when PGD fell back to the LP).
    iterations : int
        Flow: augmentation phases (summed over column-generation rounds); LP: simplex/IPM
        iterations; PGD: gradient steps.
    trace : dict
        Backend-specific convergence trace (flow: phases per cost scale; PGD: gap history).
    """

    x: np.ndarray
    objective: float
    dual_bound: float
    certified: bool
    backend: str
    iterations: int
    trace: dict[str, Any] = field(default_factory=dict)

    @property
    def gap(self) -> float:
        return self.dual_bound - self.objective


def _certified(obj: float, ub: float) -> bool:
    return ub - obj <= _CERT_RTOL * max(1.0, abs(ub))


# ---------------------------------------------------------------------------------------------
# Exact min-cost-flow backend
# ---------------------------------------------------------------------------------------------


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
        self.pattern = residual_pattern(self.tail, self.head, V)

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
    (spec T5 "sequential projection"). Vectorised with sorts, ``O(p log p)``. Also returns the
    optimal duals: ``λ`` = the (total+1)-th largest kept weight (0 if none) and
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


# ---------------------------------------------------------------------------------------------
# LP backend (HiGHS)
# ---------------------------------------------------------------------------------------------


def _lp_select(
    u: np.ndarray, A: sp.csr_matrix, s: np.ndarray, method: str = "highs-ipm"
) -> tuple[np.ndarray, np.ndarray | None, int, str]:
    """Solve the LP relaxation on the columns with u > 0; returns (x, y_G or None, iters, how)."""
    p = u.shape[0]
    keep = np.flatnonzero(u > 0)
    x = np.zeros(p, bool)
    if keep.shape[0] == 0:
        return x, np.zeros(A.shape[0]), 0, "empty"
    Ak = A[:, keep]
    # scipy-stubs: A_ub dense only and method a Literal; HiGHS takes a sparse A_ub and `method` is checked by scipy
    res = linprog(-u[keep], A_ub=Ak, b_ub=s, bounds=(0.0, 1.0), method=method)  # type: ignore[call-overload]
    if res.status != 0:
        raise RuntimeError(f"HiGHS LP failed: {res.message}")
    xr = np.asarray(res.x)
    how = "lp"
    yG = None
    marg = getattr(getattr(res, "ineqlin", None), "marginals", None)
    if marg is not None:
        yG = -np.asarray(marg, dtype=np.float64)
    if np.all(np.abs(xr - np.round(xr)) <= 1e-6):
        xk = np.round(xr) > 0.5
        xx = np.zeros(p, bool)
        xx[keep] = xk
        if np.all(Ak @ xk.astype(np.float64) <= s + 1e-9):
            return xx, yG, int(getattr(res, "nit", 0)), how
    # spec §2.4: fractional vertex (e.g. IPM without crossover) -> MILP
    log.warning("LP solution not integral within 1e-6; re-solving with scipy.optimize.milp")
    res2 = milp(
        -u[keep],
        constraints=LinearConstraint(Ak, -np.inf, s),
        integrality=np.ones(keep.shape[0], dtype=np.int64),
        bounds=Bounds(0, 1),
    )
    if res2.status != 0:
        raise RuntimeError(f"HiGHS MILP failed: {res2.message}")
    xx = np.zeros(p, bool)
    xx[keep] = np.round(res2.x) > 0.5
    return xx, yG, int(getattr(res, "nit", 0)), "milp"


# ---------------------------------------------------------------------------------------------
# Paper's projection method: PGD on the primal–dual penalty (spec §2.2–2.3)
# ---------------------------------------------------------------------------------------------


def tvcs_penalty(
    u: np.ndarray, A: SparseMatrix, s: np.ndarray, x: np.ndarray, yG: np.ndarray, yB: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Penalty ``F(x, y)`` of spec §2.2 and its gradient.

    ``F = ½ r² + ½‖[u − Aᵀy_G − y_B]₊‖² + ½‖[A x − s]₊‖²`` with the duality gap
    ``r = sᵀy_G + 1ᵀy_B − uᵀx``; with ``d = [u − Aᵀy_G − y_B]₊`` and ``e = [A x − s]₊``:
    ``∇_x F = −r u + Aᵀe``, ``∇_{y_G} F = r s − A d``, ``∇_{y_B} F = r 1 − d``.

    Returns
    -------
    (F, grad_x, grad_yG, grad_yB)
    """
    r = float(s @ yG + yB.sum() - u @ x)
    d = np.maximum(u - A.T @ yG - yB, 0.0)
    e = np.maximum(A @ x - s, 0.0)
    F = 0.5 * r * r + 0.5 * float(d @ d) + 0.5 * float(e @ e)
    return F, -r * u + A.T @ e, r * s - A @ d, r - d


def _power_lipschitz(u: np.ndarray, A: sp.csr_matrix, s: np.ndarray, iters: int, seed: int) -> float:
    """``L = ‖J‖₂²`` by power iteration on ``JᵀJ`` (spec §2.2), times 1.01."""
    p: int = u.shape[0]
    G = A.shape[0]
    AT = A.T.tocsr()
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(2 * p + G)
    z /= np.linalg.norm(z)
    lam = 0.0
    for _ in range(iters):
        x, yG, yB = z[:p], z[p : p + G], z[p + G :]
        r = -u @ x + s @ yG + yB.sum()
        d = -(AT @ yG) - yB
        e = A @ x
        gx = -r * u + AT @ e
        gy = r * s - A @ d
        gb = r - d
        w = np.concatenate([gx, gy, gb])
        lam = float(np.linalg.norm(w))
        if lam == 0.0:
            break
        z = w / lam
    bound = float(u @ u + s @ s + p) + (math.sqrt(3.0 * p) + 1.0) ** 2 + 3.0 * p  # closed form §2.2
    return min(1.01 * lam, bound) if lam > 0 else bound


def _greedy_fill(order: np.ndarray, cons: TVCSConstraints) -> np.ndarray:
    """Visit the elements listed in ``order``; add one when every group containing it has room."""
    p = cons.p
    x = np.zeros(p, bool)
    room1 = cons.caps1.copy()
    room2 = cons.caps2.copy()
    room = cons.total
    v1, v2 = cons.view1, cons.view2
    for i in order.tolist():  # sequential by nature (greedy/repair helper, not a hot path)
        if room <= 0:
            break
        g, h = v1[i], v2[i]
        if (g >= 0 and room1[g] <= 0) or (h >= 0 and room2[h] <= 0):
            continue
        x[i] = True
        room -= 1
        if g >= 0:
            room1[g] -= 1
        if h >= 0:
            room2[h] -= 1
    return x


def greedy_select(
    u: np.ndarray,
    view1: Any = None,
    view2: Any = None,
    caps1: Any = None,
    caps2: Any = None,
    total: float | None = None,
) -> np.ndarray:
    """Greedy selection by descending ``u`` (NOT exact, spec §2.1 counterexample; baseline only)."""
    u = np.asarray(u, dtype=np.float64)
    cons = TVCSConstraints.build(u.shape[0], view1, view2, caps1, caps2, total)
    order = np.lexsort((np.arange(u.shape[0]), -u))
    return _greedy_fill(order[u[order] > 0], cons)


def _pgd_round(x: np.ndarray, u: np.ndarray, cons: TVCSConstraints, ub: float | None, tol: float) -> np.ndarray:
    """Rounding of a PGD iterate (spec §2.3): ``1[x > ½]`` if feasible, else the greedy repair
    (visit ``x_i > 10⁻³`` by descending ``x``, then ``u``; add an element while all its groups have
    room). Our addition [C]: the repair also runs when the rounding is feasible but not yet
    certified against the dual bound ``ub`` (on ties PGD converges to e.g. ``x = (⅓, ⅓, ⅓)`` and
    rounding gives ∅); the better feasible candidate is returned."""
    xh = x > 0.5
    feasible = cons.is_feasible(xh.astype(np.int8))
    lb = float(u @ xh)
    if feasible and ub is not None and ub - lb <= tol * max(1.0, ub):
        return xh
    cand = np.flatnonzero(x > 1e-3)
    xg = _greedy_fill(cand[np.lexsort((-u[cand], -x[cand]))], cons)
    if feasible and lb >= float(u @ xg):
        return xh
    return xg


def _kth_by_group(w: np.ndarray, group: np.ndarray, n_groups: int, k: np.ndarray) -> np.ndarray:
    """``(k_g + 1)``-th largest ``w`` in every group ``g`` (−inf when the group has ≤ k_g members);
    elements with ``group < 0`` are ignored. Vectorised with one sort."""
    m = group >= 0
    wg, gg = w[m], group[m]
    order = np.lexsort((-wg, gg))
    counts = np.bincount(gg, minlength=n_groups)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    out = np.full(n_groups, -np.inf)
    ok = counts > k
    out[ok] = wg[order[starts[ok] + k[ok]]]
    return out


def _polish_duals(
    u: np.ndarray, cons: TVCSConstraints, a: np.ndarray, b: np.ndarray, lam: float, sweeps: int = 2
) -> tuple[float, tuple[np.ndarray, np.ndarray, float]]:
    """Tighten a dual bound by exact block-coordinate minimisation of the weak-duality bound
    ``UB(a, b, λ)`` of :meth:`TVCSConstraints.dual_bound` (our certificate addition [C]).

    Each block has a closed form: ``λ = [(s_total+1)-th largest of u − a − b]₊``,
    ``a_g = [(s_g+1)-th largest of u − b − λ in g]₊`` (same for ``b_h``). Every step keeps the
    duals feasible and cannot increase ``UB``; the PGD iterate itself is not changed.
    Returns the best bound and its duals.
    """
    c1 = np.minimum(cons.caps1, cons.total)
    c2 = np.minimum(cons.caps2, cons.total)
    v1, v2 = cons.view1, cons.view2
    a = np.maximum(a, 0.0)
    b = np.maximum(b, 0.0)
    lam = max(lam, 0.0)
    best = cons.dual_bound(u, a, b, lam)
    best_duals = (a.copy(), b.copy(), lam)

    no_a, no_b = np.zeros(cons.n1), np.zeros(cons.n2)
    for _ in range(sweeps):
        w = cons.reduced_gain(u, a, b, 0.0)
        lam = (
            float(np.partition(w, w.shape[0] - cons.total - 1)[w.shape[0] - cons.total - 1])
            if cons.total < w.shape[0]
            else 0.0
        )
        lam = max(lam, 0.0)
        if cons.n1:
            a = np.maximum(_kth_by_group(cons.reduced_gain(u, no_a, b, lam), v1, cons.n1, c1), 0.0)
        if cons.n2:
            b = np.maximum(_kth_by_group(cons.reduced_gain(u, a, no_b, lam), v2, cons.n2, c2), 0.0)
        ub = cons.dual_bound(u, a, b, lam)
        if ub < best:
            best, best_duals = ub, (a.copy(), b.copy(), lam)
    return best, best_duals


def _dual_guided_fill(u: np.ndarray, cons: TVCSConstraints, duals: tuple[np.ndarray, np.ndarray, float]) -> np.ndarray:
    """Primal candidate from duals (complementary slackness, our addition [C]): greedy fill by
    descending reduced gain ``u_i − a_g − b_h − λ`` over the elements with gain > −0.05 (``u``
    scaled to max 1)."""
    rc = cons.reduced_gain(u, *duals)
    cand = np.flatnonzero(rc > -0.05)
    return _greedy_fill(cand[np.lexsort((-u[cand], -rc[cand]))], cons)


def _pgd_select(
    u: np.ndarray,
    cons: TVCSConstraints,
    *,
    tol: float,
    max_iter: int,
    check_every: int,
    seed: int,
    delta: float,
    accelerate: bool,
    power_iters: int,
    max_seconds: float | None = None,
    polish: bool = True,
) -> tuple[np.ndarray, bool, int, dict[str, Any], float]:
    """TVCS-PGD (spec §2.3). Returns (x, certified, iterations, trace, dual bound in u units).

    ``polish``: at each certificate check, also try the block-coordinate polished dual bound
    (:func:`_polish_duals`) — a tighter valid upper bound from the same ``y_G`` — and the primal
    candidate guided by those duals (:func:`_dual_guided_fill`) [C]. The iterate is unchanged.
    """
    p = cons.p
    keep = np.flatnonzero(u > 0)
    x_full = np.zeros(p, bool)
    if keep.shape[0] == 0 or cons.total == 0:
        return x_full, True, 0, {"gap": []}, 0.0
    A_full, s = cons.matrix()
    A = A_full[:, keep].tocsr()
    AT = A.T.tocsr()
    u0 = u[keep]
    scale = float(u0.max())
    u0s = u0 / scale
    rng = np.random.default_rng(seed)
    up = u0s * (1.0 + delta * rng.random(u0s.shape[0]))
    L = _power_lipschitz(up, A, s, power_iters, seed)
    gamma = 1.0 / L
    n, G = u0s.shape[0], A.shape[0]
    x = np.zeros(n)
    yG = np.zeros(G)
    yB = np.zeros(n)
    # FISTA state (accelerate=True): extrapolated point (xe, ye, be), momentum t
    xe, ye, be = x.copy(), yG.copy(), yB.copy()
    tk = 1.0
    # same groups as ``cons`` (rows of A), restricted to the elements with u > 0
    sub_cons = TVCSConstraints(cons.view1[keep], cons.view2[keep], cons.caps1, cons.caps2, cons.total)
    gaps: list[float] = []
    best_ub = np.inf
    it = 0
    t_start = time.perf_counter()
    for it in range(1, max_iter + 1):
        px, py, pb = (xe, ye, be) if accelerate else (x, yG, yB)
        r = float(s @ py + pb.sum() - up @ px)
        d = np.maximum(up - AT @ py - pb, 0.0)
        e = np.maximum(A @ px - s, 0.0)
        xn = np.clip(px - gamma * (-r * up + AT @ e), 0.0, 1.0)
        yn = np.maximum(py - gamma * (r * s - A @ d), 0.0)
        bn = np.maximum(pb - gamma * (r - d), 0.0)
        if accelerate:
            # gradient-based adaptive restart (O'Donoghue & Candès)
            if (np.dot(px - xn, xn - x) + np.dot(py - yn, yn - yG) + np.dot(pb - bn, bn - yB)) > 0:
                tk = 1.0
            t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * tk * tk))
            mom = (tk - 1.0) / t_next
            xe = xn + mom * (xn - x)
            ye = yn + mom * (yn - yG)
            be = bn + mom * (bn - yB)
            tk = t_next
        x, yG, yB = xn, yn, bn
        if it % check_every == 0 or it == max_iter:
            ub = float(s @ yG + np.maximum(u0s - AT @ yG, 0.0).sum())
            duals = None
            if polish:
                ub_p, duals = _polish_duals(u0s, sub_cons, yG[1 : 1 + sub_cons.n1], yG[1 + sub_cons.n1 :], yG[0])
                ub = min(ub, ub_p)
            best_ub = min(best_ub, ub)
            xh = _pgd_round(x, u0s, sub_cons, best_ub, tol)
            lb = float(u0s @ xh)
            if duals is not None and best_ub - lb > tol * max(1.0, best_ub):
                xd = _dual_guided_fill(u0s, sub_cons, duals)
                if float(u0s @ xd) > lb:
                    xh, lb = xd, float(u0s @ xd)
            gaps.append(best_ub - lb)
            if best_ub - lb <= tol * max(1.0, best_ub):
                x_full[keep] = xh
                return x_full, True, it, {"gap": gaps, "L": L}, best_ub * scale
            if max_seconds is not None and time.perf_counter() - t_start > max_seconds:
                break
    xh = _pgd_round(x, u0s, sub_cons, None, tol)
    x_full[keep] = xh
    return x_full, False, it, {"gap": gaps, "L": L}, best_ub * scale


# ---------------------------------------------------------------------------------------------
# Brute force (test oracle)
# ---------------------------------------------------------------------------------------------


def _brute_select(u: np.ndarray, cons: TVCSConstraints) -> np.ndarray:
    p = cons.p
    keep = np.flatnonzero(u > 0)
    n = keep.shape[0]
    x = np.zeros(p, bool)
    if n == 0:
        return x
    if n > _BRUTE_MAX_P:
        raise ValueError(f"brute force enumerates 2^p supports; p={n} > {_BRUTE_MAX_P}")
    A, s = cons.matrix()
    Ak = A[:, keep].toarray()
    masks = ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1).astype(np.float64)
    feas = np.all(masks @ Ak.T <= s[None, :] + 1e-9, axis=1)
    vals = np.where(feas, masks @ u[keep], -np.inf)
    best = int(np.argmax(vals))
    x[keep] = masks[best] > 0.5
    return x


# ---------------------------------------------------------------------------------------------
# Public selection / projection API
# ---------------------------------------------------------------------------------------------


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


class TVCSProjector:
    """Reusable selector/projector for one TVCS structure (spec §1–§2).

    Builds the structure once (flow network and CSR patterns, LP matrix) so that IHT/GradMP and
    stochastic IHT can call :meth:`select` / :meth:`project` every iteration.

    Flow backend algorithm (exact). Min-cost flow on the network of :class:`_FlowNetwork` by
    *cost-scaling successive shortest paths*: the costs ``−u/max(u)`` are rounded to the grids
    ``2^-b`` for ``b = 0, 2, …, 30`` and finally used exactly. At each scale the previous
    potentials ``π`` define a pseudo-flow (arcs with negative reduced cost saturated, positive
    ones emptied), whose node imbalances are removed by phases of multi-source Dijkstra (reduced
    costs ≥ 0) followed by a maximum flow on the zero-reduced-cost arcs (Dinic on shortest
    augmenting paths), compiled with numba in :mod:`crowdflow.models.min_cost_flow`. At
    termination the flow is conservative and every residual arc has reduced cost ≥ 0 — the
    classical optimality condition — and the potentials give the LP dual
    ``a_g = π(L_g) − π(S)``, ``b_h = π(T) − π(R_h)``, ``λ = π(S) − π(T)`` used for the certificate.
    Complexity: each phase costs ``O(E log V)`` (Dijkstra) plus a Dinic max flow on the
    admissible subgraph, with ``E = p + n1 + n2 + 1`` and ``V = n1 + n2 + 2`` (+ private nodes);
    every phase moves ≥ 1 unit so there are at most ``O(s_total + V)`` phases per scale (worst
    case = plain SSP, ``O(s_total·E log V)``). In practice coarse scales have many ties, so phases
    move many units, and finer scales start near-optimal: a few dozen phases in total for
    ``p = 10^5`` over the 16 grids plus the exact scale (see ``benchmarks/assignment.py``). When one view can never
    bind (every cap ≥ its group size, or the view is absent) the problem is a laminar matroid
    and the flow backend uses the exact ``O(p log p)`` greedy closed form instead
    (:func:`_laminar_greedy`). Every flow result carries the weak-duality certificate; if it
    ever failed numerically (not observed) the LP backend would be used and a warning logged.

    Parameters
    ----------
    view1, view2, caps1, caps2, total
        See :meth:`TVCSConstraints.build`. ``view1`` may also be a :class:`TVCSConstraints`.
    p : int, optional
        Number of elements (needed only when both views are ``None``).
    backend : {"flow", "lp", "pgd", "brute"}
    lp_method : str
        ``linprog`` method for the LP backend (``"highs-ipm"`` = IPM + crossover, ``"highs-ds"``,
        ``"highs"``).
    pgd_options : dict
        Options of the PGD backend: ``tol`` (1e-9), ``max_iter`` (200 000), ``check_every`` (50),
        ``seed`` (0), ``delta`` (1e-9), ``accelerate`` (False = the paper's plain PGD),
        ``power_iters`` (100), ``fallback`` ("lp" | "raise" | "none"), ``max_seconds`` (None:
        wall-clock cap checked at every certificate check), ``polish_dual`` (True: the
        certificate also tries a block-coordinate-polished dual bound; False = spec bound only).
    prune_factor, prune_min_p : float, int
        Flow backend on ``p ≥ prune_min_p`` (default ``PRUNE_MIN_P``) elements: the first reduced problem keeps the
        ``prune_factor·s_total`` largest weights, or a capped-greedy seed when the caps bind hard
        (see :meth:`_solve_flow`; the result is exact whatever the value, which only trades
        first-solve size against extra rounds).
    """

    def __init__(
        self,
        view1: Any = None,
        view2: Any = None,
        caps1: Any = None,
        caps2: Any = None,
        total: float | None = None,
        *,
        p: int | None = None,
        backend: str = "flow",
        lp_method: str = "highs-ipm",
        pgd_options: dict[str, Any] | None = None,
        prune_factor: float = 1.25,
        prune_min_p: int = PRUNE_MIN_P,
    ) -> None:
        if not prune_factor >= 1.0:
            raise ValueError(f"prune_factor must be >= 1, got {prune_factor!r}")
        self.prune_factor = float(prune_factor)
        self.prune_min_p = int(prune_min_p)
        if isinstance(view1, TVCSConstraints):
            cons = view1
        else:
            if p is None:
                if view1 is not None:
                    p = len(view1)
                elif view2 is not None:
                    p = len(view2)
                else:
                    raise ValueError("p is required when both views are None")
            cons = TVCSConstraints.build(p, view1, view2, caps1, caps2, total)
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
        self.cons = cons
        self.backend = backend
        self.lp_method = lp_method
        opts: dict[str, Any] = {
            "tol": 1e-9,
            "max_iter": 200_000,
            "check_every": 50,
            "seed": 0,
            "delta": 1e-9,
            "accelerate": False,
            "power_iters": 100,
            "fallback": "lp",
            "max_seconds": None,
            "polish_dual": True,
        }
        if pgd_options:
            unknown = set(pgd_options) - set(opts)
            if unknown:
                raise ValueError(f"unknown pgd_options {sorted(unknown)}")
            opts.update(pgd_options)
        self.pgd_options = opts
        self._net: _FlowNetwork | None = None
        self._matrix: tuple[sp.csr_matrix, np.ndarray] | None = None
        # a view whose every cap is >= its group size (or that is absent) never binds; then the
        # problem is a matroid and the flow backend uses the exact greedy closed form
        size1 = np.bincount(cons.view1[cons.view1 >= 0], minlength=cons.n1)
        size2 = np.bincount(cons.view2[cons.view2 >= 0], minlength=cons.n2)
        free2 = bool(np.all(cons.caps2 >= size2))
        free1 = bool(np.all(cons.caps1 >= size1))
        self._free_view: int | None = 2 if free2 else (1 if free1 else None)

    @property
    def p(self) -> int:
        return self.cons.p

    def _lp_matrix(self) -> tuple[sp.csr_matrix, np.ndarray]:
        if self._matrix is None:
            self._matrix = self.cons.matrix()
        return self._matrix

    def select(self, u: np.ndarray) -> SelectResult:
        """Exact maximiser of ``⟨u, x⟩`` over the TVCS selections (spec §1.2 ILP).

        Elements with ``u_i ≤ 0`` are never selected (spec §2.4). ``u`` must be finite.
        """
        u = np.asarray(u, dtype=np.float64)
        if u.shape != (self.p,):
            raise ValueError(f"u must have shape ({self.p},), got {u.shape}")
        if not np.all(np.isfinite(u)):
            bad = np.flatnonzero(~np.isfinite(u))[:10].tolist()
            raise ValueError(f"u must be finite; NaN/inf at elements {bad}")
        cons = self.cons
        backend = self.backend
        trace: dict[str, Any] = {}
        if cons.total == 0 or not np.any(u > 0):
            x = np.zeros(self.p, bool)
            return SelectResult(x, 0.0, 0.0, True, backend, 0, {"empty": True})
        t0 = time.perf_counter()
        iters = 0
        if backend == "flow" and self._free_view is not None:
            if self._free_view == 2:
                x, a, lam = _laminar_greedy(u, cons.view1, cons.caps1, cons.total)
                ub = cons.dual_bound(u, a, np.zeros(cons.n2), lam)
            else:
                x, b, lam = _laminar_greedy(u, cons.view2, cons.caps2, cons.total)
                ub = cons.dual_bound(u, np.zeros(cons.n1), b, lam)
            obj = float(u[x].sum())
            trace = {"closed_form": f"view {self._free_view} never binds: laminar-matroid greedy"}
        elif backend == "flow":
            try:
                x, stats = self._solve_flow(u)
            except RuntimeError as exc:  # numerical safety net; never expected
                log.warning("flow backend failed (%s); falling back to the HiGHS LP", exc)
                return self._select_lp(u, "flow->lp")
            a, b, lam = stats.pop("duals")
            obj = float(u[x].sum())
            ub = cons.dual_bound(u, a, b, lam)
            iters = stats["phases"]
            trace = stats
            if not _certified(obj, ub):
                log.warning("flow backend: certificate gap %.3g too large; using the HiGHS LP", ub - obj)
                return self._select_lp(u, "flow->lp")
        elif backend == "lp":
            return self._select_lp(u, "lp")
        elif backend == "brute":
            x = _brute_select(u, cons)
            obj = float(u[x].sum())
            ub = obj  # exhaustive enumeration
        else:  # pgd
            o = self.pgd_options
            x, cert, iters, trace, ub = _pgd_select(
                u,
                cons,
                tol=o["tol"],
                max_iter=int(o["max_iter"]),
                check_every=int(o["check_every"]),
                seed=int(o["seed"]),
                delta=float(o["delta"]),
                accelerate=bool(o["accelerate"]),
                power_iters=int(o["power_iters"]),
                max_seconds=o["max_seconds"],
                polish=bool(o["polish_dual"]),
            )
            obj = float(u[x].sum())
            if not cert:
                msg = f"TVCS-PGD not certified after {iters} iterations (gap {ub - obj:.3g}); fallback={o['fallback']}"
                warnings.warn(msg, RuntimeWarning, stacklevel=2)
                if o["fallback"] == "raise":
                    raise RuntimeError(msg)
                if o["fallback"] == "lp":
                    res = self._select_lp(u, "pgd->lp")
                    tr = dict(res.trace)
                    tr.update(pgd=trace, pgd_iterations=iters)
                    return SelectResult(res.x, res.objective, res.dual_bound, res.certified, "pgd->lp", iters, tr)
                return SelectResult(x, obj, ub, False, "pgd", iters, trace)
            trace["seconds"] = time.perf_counter() - t0
            # certified by PGD's own (relative, scaled-units) duality-gap test
            return SelectResult(x, obj, ub, True, "pgd", iters, trace)
        trace["seconds"] = time.perf_counter() - t0
        return SelectResult(x, obj, ub, _certified(obj, ub), backend, iters, trace)

    def _solve_full_network(self, u: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """The flow solve on every element (network built once per projector, reused across calls)."""
        if self._net is None:
            self._net = _FlowNetwork(self.cons)
        return self._net.solve(u)

    def _solve_flow(self, u: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """Exact flow solve, on a reduced candidate set when that is provably enough.

        Large instances (``p ≥ prune_min_p``) are solved by *reduced-cost column generation*: the
        flow is solved on a candidate set ``C`` only; its optimal duals ``(a, b, λ)`` are
        dual-feasible for the full LP exactly when no left-out element has a positive reduced gain
        ``u_i − a_{g(i)} − b_{h(i)} − λ`` (then ``y_i = 0`` for all of them and the full bound
        equals the reduced optimum, so the reduced selection is optimal for the full problem).
        Violators are added and the reduced problem re-solved until none is left; each re-solve
        is warm-started from the previous duals (:meth:`_FlowNetwork.solve`, ``warm``), on the
        cost scales given by :func:`_warm_scale_bits`. The weak-duality certificate is always
        evaluated on the full problem.

        Seeds: the ``⌈prune_factor·s_total⌉`` largest positive weights, unless the caps bind so
        hard that this set is dominated by a few groups: then almost every left-out element is a
        violator (e.g. rank-one weights ``u = skill_w · uncertainty_t``: the full network, 134
        phases, was solved). The seed is then the capped greedy's selection plus, per group, the
        elements whose rank in the group lies within ``⌈SEED_WINDOW·cap⌉`` of the greedy's rank
        range there (:func:`_greedy_windows`; one ``O(p log p)`` sort). It is used when the top
        weights cannot fill as many slots as all positive weights
        (:meth:`TVCSConstraints.fill_bound`, ``O(q)``), or, once, when the set would grow past
        ``0.7·p``. If the greedy seed too would grow past ``0.7·p``, the full network is solved.
        """
        cons = self.cons
        pos = np.flatnonzero(u > 0)
        q = math.ceil(self.prune_factor * cons.total) + 1
        if cons.p < self.prune_min_p or q >= 0.7 * pos.shape[0]:
            return self._solve_full_network(u)
        kth = pos.shape[0] - q
        sub = pos[u[pos] >= np.partition(u[pos], kth)[kth]]
        top_fill = cons.fill_bound(sub)
        reseeded = top_fill < cons.total and top_fill < cons.fill_bound(pos)
        if reseeded:  # the caps leave the top weights unable to fill what the full set can
            sub = self._greedy_seed(u, pos)
        umax = float(u[pos].max())
        duals: tuple[np.ndarray, np.ndarray, float] | None = None
        bits: tuple[int, ...] = tuple(range(0, 31, 2))
        phases: list[int] = []
        while True:
            sc = TVCSConstraints(
                view1=cons.view1[sub], view2=cons.view2[sub], caps1=cons.caps1, caps2=cons.caps2, total=cons.total
            )
            xs, stats = _FlowNetwork(sc).solve(u[sub], scale_bits=bits, warm=duals)
            phases.append(stats["phases"])
            duals = stats["duals"]
            a, b, lam = duals
            red = cons.reduced_gain(u, np.maximum(a, 0.0), np.maximum(b, 0.0), max(lam, 0.0))
            red[sub] = 0.0
            viol = np.flatnonzero(red > 1e-12 * umax)
            if viol.shape[0] == 0:
                break
            if sub.shape[0] + viol.shape[0] < 0.7 * pos.shape[0]:
                bits = _warm_scale_bits(viol.shape[0], float(red[viol].max()) / umax)
                sub = np.union1d(sub, viol)
            elif not reseeded:
                reseeded, duals, bits = True, None, tuple(range(0, 31, 2))
                sub = self._greedy_seed(u, pos)
            else:  # reduction no longer pays: solve the full network once
                x, stats = self._solve_full_network(u)
                stats["pruning"] = {"rounds": len(phases), "reseeded": reseeded, "abandoned": True}
                stats["phases"] += sum(phases)
                return x, stats
        x = np.zeros(cons.p, bool)
        x[sub[xs]] = True
        stats["pruning"] = {
            "rounds": len(phases),
            "reseeded": reseeded,
            "candidates": int(sub.shape[0]),
            "phases_per_round": phases,
        }
        stats["phases"] = sum(phases)
        return x, stats

    def _greedy_seed(self, u: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Sorted candidate set of :func:`_greedy_windows` over the positive weights ``pos``."""
        cons = self.cons
        order = pos[np.argsort(-u[pos])]
        w1 = np.ceil(SEED_WINDOW * np.minimum(cons.caps1, cons.total)).astype(np.int64)
        w2 = np.ceil(SEED_WINDOW * np.minimum(cons.caps2, cons.total)).astype(np.int64)
        keep = _greedy_windows(cons.view1[order], cons.view2[order], cons.caps1, cons.caps2, cons.total, w1, w2)
        return np.sort(order[keep])

    def _select_lp(self, u: np.ndarray, label: str) -> SelectResult:
        t0 = time.perf_counter()
        A, s = self._lp_matrix()
        x, yG, nit, how = _lp_select(u, A, s, self.lp_method)
        obj = float(u[x].sum())
        if yG is not None:
            n1 = self.cons.n1
            ub = self.cons.dual_bound(u, yG[1 : 1 + n1], yG[1 + n1 :], yG[0])
        else:
            ub = obj
        trace = {"solver": how, "lp_method": self.lp_method, "seconds": time.perf_counter() - t0}
        return SelectResult(x, obj, ub, _certified(obj, ub), label, nit, trace)

    def project(self, v: np.ndarray) -> np.ndarray:
        """Euclidean projection ``P_Ω(v) = v ⊙ x*`` with ``x*`` the selection for ``u = v²``."""
        v = np.asarray(v, dtype=np.float64)
        x = self.select(v * v).x
        return np.where(x, v, 0.0)


def tvcs_select(
    u: np.ndarray,
    view1: Any = None,
    view2: Any = None,
    caps1: Any = None,
    caps2: Any = None,
    total: float | None = None,
    *,
    backend: str = "flow",
    **options: Any,
) -> SelectResult:
    """Maximum-weight TVCS selection (spec §0.1, §1.2).

    Solves ``max ⟨u, x⟩ s.t. Σx ≤ total, per-view-1-group counts ≤ caps1, per-view-2-group counts
    ≤ caps2, x ∈ {0,1}^p`` exactly (the LP relaxation is integral, spec §2.1).

    Parameters
    ----------
    u : ndarray, shape (p,)
        Finite weights; elements with ``u_i ≤ 0`` are never selected.
    view1, view2 : array-like of int or None
        Group index of every element per view, negative = no group (spec §1.1).
    caps1, caps2 : scalar, array-like or None
        Caps per group (``None``/``inf`` = unlimited; reals floored; negative → ``ValueError``).
    total : float or None
        Global cap (``None`` = unlimited).
    backend : {"flow", "lp", "pgd", "brute"}
        See the module docstring.
    **options
        Passed to :class:`TVCSProjector` (``lp_method``, ``pgd_options``).

    Returns
    -------
    SelectResult
    """
    u = np.asarray(u, dtype=np.float64)
    proj = TVCSProjector(view1, view2, caps1, caps2, total, p=u.shape[0], backend=backend, **options)
    return proj.select(u)


def tvcs_project(
    v: np.ndarray,
    view1: Any = None,
    view2: Any = None,
    caps1: Any = None,
    caps2: Any = None,
    total: float | None = None,
    *,
    backend: str = "flow",
    **options: Any,
) -> np.ndarray:
    """Euclidean projection onto ``Ω(𝒢, s)`` (spec §1.2, Lemma 1): ``v ⊙ tvcs_select(v²).x``.

    Values on the support are kept exactly; zeros of ``v`` are never selected.
    """
    v = np.asarray(v, dtype=np.float64)
    proj = TVCSProjector(view1, view2, caps1, caps2, total, p=v.shape[0], backend=backend, **options)
    return proj.project(v)


def project_elements(
    elements: pd.DataFrame,
    view1_caps: pd.DataFrame | float | None = None,
    view2_caps: pd.DataFrame | float | None = None,
    total: float | None = None,
    *,
    backend: str = "flow",
) -> tuple[pd.DataFrame, SelectResult]:
    """Generic TVCS projection of a table of elements (spec §1.3 "generic use").

    Parameters
    ----------
    elements : DataFrame
        ``element_id, value, view1_key, view2_key``; keys may be null (element in no group of
        that view). One row per element: a repeated ``element_id`` is rejected, so an element
        can never carry two keys of one view (the TVCS structure is enforced by the schema,
        spec T6). ``value`` must be finite.
    view1_caps, view2_caps : DataFrame (key, cap), number or None
        Cap per key (a table must list every key used); scalar = same cap for every key;
        ``None`` = unlimited. Reals floored; negative → ``ValueError``.
    total : float or None
        Global cap (``None`` = unlimited).

    Returns
    -------
    (table, result)
        ``table`` = ``elements`` plus ``selected`` (bool) and ``projected`` (= value if selected
        else 0), i.e. ``P_Ω(value)`` with ``u = value²``; ``result`` = the :class:`SelectResult`.
    """
    for col in ("element_id", "value", "view1_key", "view2_key"):
        if col not in elements.columns:
            raise ValueError(f"elements: missing column '{col}' (columns: {list(elements.columns)})")
    el = elements.reset_index(drop=True)
    ids = _ids_as_str(el["element_id"], "elements", "element_id")
    d = pd.Index(ids).duplicated(keep=False)
    if d.any():
        raise ValueError(
            f"elements: duplicate element_id {sorted(set(ids[d].tolist()))[:10]} "
            "(an element belongs to at most one group per view)"
        )
    v = _float_column(el, "value", "elements")
    views = []
    caps = []
    for view_name, ctab in (("view1", view1_caps), ("view2", view2_caps)):
        key_col = el[f"{view_name}_key"]
        has = key_col.notna().to_numpy()
        keys = key_col[has].astype(str).to_numpy(dtype=object)
        all_keys, capv = _caps_vector(ctab, keys, view_name, "key", "cap", {})
        idx = np.full(el.shape[0], -1, np.int64)
        idx[has] = np.searchsorted(all_keys.astype(str), keys.astype(str))
        views.append(idx)
        caps.append(capv)
    proj = TVCSProjector(views[0], views[1], caps[0], caps[1], total, p=el.shape[0], backend=backend)
    res = proj.select(v * v)
    out = el.copy()
    out["selected"] = res.x
    out["projected"] = np.where(res.x, v, 0.0)
    return out, res


# ---------------------------------------------------------------------------------------------
# Crowdsourcing assignment: tables -> TVCS instance (spec §1.3, §4)
# ---------------------------------------------------------------------------------------------

_CAND_ALIASES = {"task_id": "task", "worker_id": "worker", "value": "score"}
_WORKER_CAP_ALIASES = {"worker_id": "worker", "max_tasks": "capacity", "worker_capacity": "capacity"}
_TASK_CAP_ALIASES = {"task_id": "task", "max_workers": "cap", "task_cap": "cap"}


def _rename_aliases(df: pd.DataFrame, aliases: dict[str, str]) -> pd.DataFrame:
    ren = {a: c for a, c in aliases.items() if a in df.columns and c not in df.columns}
    return df.rename(columns=ren) if ren else df


def _ids_as_str(col: pd.Series, table: str, name: str) -> np.ndarray:
    if col.isna().any():
        rows = np.flatnonzero(col.isna().to_numpy())[:10].tolist()
        raise ValueError(f"{table}: column '{name}' has missing ids at rows {rows}")
    return col.astype(str).to_numpy(dtype=object)


def _float_column(df: pd.DataFrame, name: str, table: str) -> np.ndarray:
    try:
        vals = pd.to_numeric(df[name], errors="raise").to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{table}: column '{name}' must be numeric ({exc})") from None
    bad = ~np.isfinite(vals)
    if bad.any():
        rows = np.flatnonzero(bad)[:10].tolist()
        raise ValueError(f"{table}: column '{name}' has NaN/inf values at rows {rows}")
    return vals


@dataclass(frozen=True)
class _Instance:
    """Worker × task TVCS instance with dense ids (sorted string ids)."""

    workers: np.ndarray  # sorted worker ids (object/str)
    tasks: np.ndarray  # sorted task ids
    w_idx: np.ndarray  # worker index per candidate
    t_idx: np.ndarray  # task index per candidate
    worker_cap: np.ndarray  # float, inf = unlimited
    task_cap: np.ndarray  # float, inf = unlimited
    budget: int | None
    cand: pd.DataFrame  # normalised candidates (task, worker, ... ) in input order

    @property
    def p(self) -> int:
        return int(self.w_idx.shape[0])

    def constraints(self) -> TVCSConstraints:
        return TVCSConstraints.build(self.p, self.w_idx, self.t_idx, self.worker_cap, self.task_cap, self.budget)


def _caps_vector(
    caps: Any,
    ids_in_candidates: np.ndarray,
    entity: str,
    id_col: str,
    cap_col: str,
    aliases: dict[str, str],
) -> tuple[np.ndarray, np.ndarray]:
    """Return (all ids sorted, cap per id as float with inf = unlimited)."""
    cand_ids = np.unique(ids_in_candidates.astype(str)) if ids_in_candidates.size else np.array([], dtype=object)
    if caps is None:
        return cand_ids.astype(object), np.full(cand_ids.shape[0], np.inf)
    if isinstance(caps, pd.DataFrame):
        df = _rename_aliases(caps, aliases)
        table = f"{entity} caps"
        for col in (id_col, cap_col):
            if col not in df.columns:
                raise ValueError(f"{table}: missing column '{col}' (columns: {list(caps.columns)})")
        ids = _ids_as_str(df[id_col], table, id_col)
        vals = pd.to_numeric(df[cap_col], errors="coerce").to_numpy(dtype=np.float64)
        if np.isnan(vals).any():
            bad = ids[np.isnan(vals)][:10].tolist()
            raise ValueError(f"{table}: column '{cap_col}' is missing or non-numeric for {entity}s {bad}")
        if (vals < 0).any():
            bad = ids[vals < 0][:10].tolist()
            raise ValueError(f"{table}: negative '{cap_col}' for {entity}s {bad}")
        uniq, counts = np.unique(ids.astype(str), return_counts=True)
        if (counts > 1).any():
            raise ValueError(f"{table}: duplicate {entity} ids {uniq[counts > 1][:10].tolist()}")
        missing = np.setdiff1d(cand_ids.astype(str), uniq)
        if missing.size:
            raise ValueError(
                f"{table}: {missing.size} {entity}(s) in candidates have no '{cap_col}' row, "
                f"e.g. {missing[:10].tolist()}"
            )
        if np.any(np.isfinite(vals) & (vals != np.floor(vals))):
            log.info("%s: non-integer caps floored (spec §1.3)", table)
        all_ids = np.union1d(cand_ids.astype(str), uniq).astype(object)
        order = np.argsort(ids.astype(str))
        pos = np.searchsorted(ids.astype(str)[order], all_ids.astype(str))
        return all_ids, np.floor(vals[order][pos])
    try:
        val = float(caps)
    except (TypeError, ValueError):
        raise ValueError(f"{entity} caps must be None, a number or a DataFrame ({id_col}, {cap_col})") from None
    if math.isnan(val) or val < 0:
        raise ValueError(f"{entity} cap must be >= 0, got {caps!r}")
    return cand_ids.astype(object), np.full(cand_ids.shape[0], math.floor(val) if math.isfinite(val) else np.inf)


def caps_with_default(
    caps: pd.DataFrame | None, ids: Any, id_col: str, cap_col: str, default: float | None
) -> pd.DataFrame | float | None:
    """Per-entity caps from a caps table, with a scalar default for the ids the table omits.

    ``caps`` is the user's (id, cap) table (or ``None``); ``ids`` are the entities that need a cap
    (e.g. the candidates' workers). Without a table the scalar ``default`` is returned as is (None =
    unlimited). With a table, ids without a row get ``default`` when it is given; when it is not,
    the table is returned unchanged and :func:`assign_tasks` reports the missing rows by id.
    """
    if caps is None:
        return default
    if default is None:
        return caps
    table = caps[[id_col, cap_col]].copy()
    table[id_col] = table[id_col].astype(str)
    wanted = np.unique(pd.Series(ids, dtype=object).astype(str).to_numpy(dtype=str))
    missing = np.setdiff1d(wanted, table[id_col].to_numpy(dtype=str))
    if missing.size == 0:
        return table
    fill = pd.DataFrame({id_col: missing.astype(object), cap_col: float(default)})
    return pd.concat([table, fill], ignore_index=True)


def _check_budget(budget: Any) -> int | None:
    if budget is None:
        return None
    if isinstance(budget, bool):
        raise ValueError("budget must be a non-negative integer or None (unlimited)")
    try:
        b = float(budget)
    except (TypeError, ValueError):
        raise ValueError(f"budget must be a non-negative integer or None, got {budget!r}") from None
    if math.isnan(b) or b < 0:
        raise ValueError(f"budget must be >= 0 (or None for unlimited), got {budget!r}")
    return None if math.isinf(b) else math.floor(b)


def _build_instance(
    candidates: pd.DataFrame,
    budget: Any,
    worker_caps: Any,
    task_caps: Any,
    value_cols: tuple[str, ...],
) -> _Instance:
    if not isinstance(candidates, pd.DataFrame):
        raise ValueError("candidates must be a pandas DataFrame with columns task, worker, ...")
    cand = _rename_aliases(candidates, _CAND_ALIASES)
    for col in ("task", "worker", *value_cols):
        if col not in cand.columns:
            raise ValueError(f"candidates: missing column '{col}' (columns: {list(candidates.columns)})")
    cand = cand.reset_index(drop=True)
    tasks_c = _ids_as_str(cand["task"], "candidates", "task")
    workers_c = _ids_as_str(cand["worker"], "candidates", "worker")
    cand = cand.assign(task=tasks_c, worker=workers_c)
    for col in value_cols:
        cand[col] = _float_column(cand, col, "candidates")
    dup = cand.duplicated(["task", "worker"], keep=False)
    if dup.any():
        pairs = list(cand.loc[dup, ["task", "worker"]].drop_duplicates().itertuples(index=False, name=None))
        raise ValueError(f"candidates: duplicate (task, worker) pairs, e.g. {pairs[:10]}")
    b = _check_budget(budget)
    workers, wcap = _caps_vector(worker_caps, workers_c, "worker", "worker", "capacity", _WORKER_CAP_ALIASES)
    tasks, tcap = _caps_vector(task_caps, tasks_c, "task", "task", "cap", _TASK_CAP_ALIASES)
    w_idx = np.searchsorted(workers.astype(str), workers_c.astype(str)).astype(np.int64)
    t_idx = np.searchsorted(tasks.astype(str), tasks_c.astype(str)).astype(np.int64)
    return _Instance(workers, tasks, w_idx, t_idx, wcap, tcap, b, cand)


@dataclass(frozen=True)
class AssignmentResult:
    """Task–worker assignment (spec §1.4, design §3 ``assignment`` table).

    Attributes
    ----------
    assignment : DataFrame
        One row per selected pair: ``task, worker, score`` (plus ``quality`` and ``rank_in_task``
        for the expected-accuracy methods), sorted by task then descending score.
    worker_load : DataFrame
        ``worker, n_assigned, capacity, slack`` for every worker (capacity ``<NA>`` = unlimited).
    task_load : DataFrame
        ``task, n_assigned, cap, slack`` for every task (cap ``<NA>`` = unlimited).
    objective : float
        ``"score"``: total score of the assignment. Expected-accuracy methods: Monte-Carlo
        expected accuracy of the MAP vote on independent samples (spec §4.2 evaluation).
    budget : int or None
        Global cap used (``None`` = unlimited).
    n_selected : int
    dual_bound : float
        ``"score"``: certified upper bound on the best total score (NaN for heuristics).
    certified : bool
        ``"score"``: the assignment is provably optimal. Heuristics: False.
    method : str
        ``"score" | "siht" | "qlp" | "random"``.
    backend : str
        Projection backend.
    iterations : int
    n_excluded : int
        Candidates that can never be selected because their weight is ≤ 0 (e.g. negative score).
    trace : dict
        Convergence facts (SIHT: smoothed objective per iteration, support changes).
    """

    assignment: pd.DataFrame
    worker_load: pd.DataFrame
    task_load: pd.DataFrame
    objective: float
    budget: int | None
    n_selected: int
    dual_bound: float
    certified: bool
    method: str
    backend: str
    iterations: int
    n_excluded: int
    trace: dict[str, Any] = field(default_factory=dict)


def _nullable_caps(cap: np.ndarray) -> pd.Series:
    return pd.Series(np.where(np.isfinite(cap), cap, 0).astype(np.int64), dtype="Int64").mask(~np.isfinite(cap))


def _loads(inst: _Instance, x: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    nw = np.bincount(inst.w_idx[x], minlength=inst.workers.shape[0]).astype(np.int64)
    nt = np.bincount(inst.t_idx[x], minlength=inst.tasks.shape[0]).astype(np.int64)
    wcap = _nullable_caps(inst.worker_cap)
    tcap = _nullable_caps(inst.task_cap)
    wl = pd.DataFrame({"worker": pd.Series(inst.workers.astype(str), dtype=object), "n_assigned": nw, "capacity": wcap})
    wl["slack"] = wl["capacity"] - wl["n_assigned"]
    tl = pd.DataFrame({"task": pd.Series(inst.tasks.astype(str), dtype=object), "n_assigned": nt, "cap": tcap})
    tl["slack"] = tl["cap"] - tl["n_assigned"]
    return wl, tl


def _assignment_table(inst: _Instance, x: np.ndarray, score: np.ndarray, extra: dict[str, np.ndarray]) -> pd.DataFrame:
    sel = np.flatnonzero(x)
    df = pd.DataFrame(
        {
            "task": pd.Series(inst.cand["task"].to_numpy()[sel], dtype=object),
            "worker": pd.Series(inst.cand["worker"].to_numpy()[sel], dtype=object),
            "score": score[sel].astype(np.float64),
        }
    )
    for k, v in extra.items():
        df[k] = v[sel]
    df = df.sort_values(["task", "score", "worker"], ascending=[True, False, True], kind="stable")
    return df.reset_index(drop=True)


def assign_tasks(
    candidates: pd.DataFrame,
    budget: int | None,
    worker_caps: pd.DataFrame | float | None = None,
    task_caps: pd.DataFrame | float | None = None,
    *,
    backend: str = "flow",
) -> AssignmentResult:
    """Maximum-total-score assignment under worker loads, task redundancy caps and a budget.

    Solves (spec §1.2 with ``u = score``, §4.1 constraints)::

        max Σ_{(j,i) ∈ candidates} score_ij X_ij   s.t.  Σ_j X_ij ≤ capacity_i  (worker i),
            Σ_i X_ij ≤ cap_j (task j),  Σ X_ij ≤ budget,  X ∈ {0,1}

    exactly (TU constraint matrix, spec §2.1) with the chosen ``backend`` of :func:`tvcs_select`.

    Parameters
    ----------
    candidates : DataFrame
        Columns ``task, worker, score`` (aliases ``task_id, worker_id, value``). Pairs must be
        unique; scores finite. Pairs with ``score ≤ 0`` are valid input but are never assigned
        (they cannot increase the objective; counted in ``n_excluded``).
    budget : int or None
        Global number of assignments (``None`` = unlimited). ``0`` gives an empty assignment.
    worker_caps : DataFrame (worker, capacity), number or None
        Max tasks per worker (view 1). A table must list every worker of ``candidates``; reals
        are floored; ``None`` = unlimited.
    task_caps : DataFrame (task, cap), number or None
        Max workers per task (view 2), same rules.
    backend : {"flow", "lp", "pgd", "brute"}

    Returns
    -------
    AssignmentResult
        ``objective`` = total score; ``certified`` = optimality proved by a dual bound.

    Raises
    ------
    ValueError
        Missing columns, missing/duplicate ids, duplicate pairs, NaN/inf scores, negative or NaN
        caps/budget, caps table without a row for a candidate's worker/task.

    Notes
    -----
    Degenerate inputs give explicit empty results (never errors): no candidates, budget 0,
    all caps 0, or all scores ≤ 0 → ``assignment`` has zero rows, ``objective = 0`` and
    ``certified = True`` (the empty set is optimal).
    """
    inst = _build_instance(candidates, budget, worker_caps, task_caps, ("score",))
    score = inst.cand["score"].to_numpy(dtype=np.float64)
    n_excl = int(np.sum(score <= 0))
    if n_excl:
        log.info("assign_tasks: %d candidate(s) with score <= 0 are never assigned", n_excl)
    if inst.p == 0:
        x = np.zeros(0, bool)
        res = SelectResult(x, 0.0, 0.0, True, backend, 0, {"empty": True})
    else:
        res = TVCSProjector(inst.constraints(), backend=backend).select(score)
    wl, tl = _loads(inst, res.x)
    table = _assignment_table(inst, res.x, score, {})
    return AssignmentResult(
        assignment=table,
        worker_load=wl,
        task_load=tl,
        objective=res.objective,
        budget=inst.budget,
        n_selected=int(res.x.sum()),
        dual_bound=res.dual_bound,
        certified=res.certified,
        method="score",
        backend=res.backend,
        iterations=res.iterations,
        n_excluded=n_excl,
        trace=res.trace,
    )


# ---------------------------------------------------------------------------------------------
# Expected accuracy of Bayes-weighted voting (spec §4.1) and its evaluation
# ---------------------------------------------------------------------------------------------

_Q_CLIP = (1e-3, 1.0 - 1e-3)
# independent random streams per purpose, so that equal user seeds never correlate e.g. the
# synthetic qualities with the vote samples or the random baseline
_TAG_SYNTH, _TAG_RANDOM, _TAG_SIHT, _TAG_EVAL = 11, 12, 13, 14


def _rng(seed: int, tag: int) -> np.random.Generator:
    return np.random.default_rng([tag, int(seed)])


def _sigmoid(t: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * t))


def map_accuracy_exact(
    quality: np.ndarray, task_index: np.ndarray, prior: np.ndarray, max_workers: int = 12
) -> np.ndarray:
    """Exact expected accuracy of the MAP weighted vote per task (spec §4.1, T14 oracle).

    For task ``j`` with assigned workers of quality ``Q`` (log-odds ``ℓ``) and prior ``π_j``:
    ``score_j = Σ (2Ŷ−1)ℓ − r_j`` with ``r_j = ln((1−π_j)/π_j)``, ``ŷ = 1[score ≥ 0]`` and
    ``E_acc,j = π_j P(score ≥ 0 | y=1) + (1−π_j) P(score < 0 | y=0)``, by enumerating all
    ``2^k`` vote patterns. A task with no worker gets ``π_j`` if ``π_j ≥ ½`` else ``1 − π_j``.

    Parameters
    ----------
    quality : ndarray (q,)
        ``Q`` of the assigned (task, worker) pairs (clipped to [1e-3, 1 − 1e-3]).
    task_index : ndarray of int (q,)
        Task of each pair, in ``[0, m)`` with ``m = len(prior)``.
    prior : ndarray (m,)
        ``π_j = P(y_j = 1)``.
    max_workers : int
        Refuse tasks with more assigned workers (2^k patterns).
    """
    prior = np.asarray(prior, dtype=np.float64)
    m = prior.shape[0]
    q = np.clip(np.asarray(quality, dtype=np.float64), *_Q_CLIP)
    t = np.asarray(task_index, dtype=np.int64)
    r = np.log((1.0 - prior) / prior)
    acc = np.where(-r >= 0, prior, 1.0 - prior)
    if q.size == 0:
        return acc
    order = np.argsort(t, kind="stable")
    ts, qs = t[order], q[order]
    counts = np.bincount(ts, minlength=m)
    if counts.max() > max_workers:
        raise ValueError(f"exact accuracy enumerates 2^k patterns; a task has {counts.max()} > {max_workers} workers")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    for k in np.unique(counts[counts > 0]):
        tj = np.flatnonzero(counts == k)
        Qk = qs[starts[tj][:, None] + np.arange(k)[None, :]]  # (n_k, k)
        lk = np.log(Qk / (1.0 - Qk))
        pat = ((np.arange(2**k)[:, None] >> np.arange(k)[None, :]) & 1).astype(np.float64)  # 1 = vote "1"
        sgn = 2.0 * pat - 1.0
        score = sgn @ lk.T - r[tj][None, :]  # (2^k, n_k)
        # P(pattern | y=1) = Π Q^{vote=1} (1−Q)^{vote=0};  given y=0 the roles swap
        logq, log1q = np.log(Qk), np.log1p(-Qk)
        lp1 = pat @ logq.T + (1.0 - pat) @ log1q.T
        lp0 = pat @ log1q.T + (1.0 - pat) @ logq.T
        pi = prior[tj]
        acc[tj] = pi * np.sum(np.exp(lp1) * (score >= 0), axis=0) + (1.0 - pi) * np.sum(
            np.exp(lp0) * (score < 0), axis=0
        )
    return acc


def map_accuracy_mc(
    quality: np.ndarray,
    task_index: np.ndarray,
    prior: np.ndarray,
    samples: int = 1000,
    seed: int = 0,
    chunk: int = 256,
) -> np.ndarray:
    """Monte-Carlo expected accuracy of the MAP vote per task (spec §4.2 "sampled accuracy").

    For each of ``samples`` draws: ``y_j ~ Bern(π_j)``, each assigned worker votes correctly with
    probability ``Q``, the MAP rule of :func:`map_accuracy_exact` predicts ``ŷ_j``; returns the
    per-task hit rate.
    """
    prior = np.asarray(prior, dtype=np.float64)
    m = prior.shape[0]
    q = np.clip(np.asarray(quality, dtype=np.float64), *_Q_CLIP)
    t = np.asarray(task_index, dtype=np.int64)
    ell = np.log(q / (1.0 - q))
    r = np.log((1.0 - prior) / prior)
    rng = _rng(seed, _TAG_EVAL)
    hits = np.zeros(m)
    P = sp.csr_matrix((np.ones(t.shape[0]), (np.arange(t.shape[0]), t)), shape=(t.shape[0], m))
    done = 0
    while done < samples:
        b = min(chunk, samples - done)
        y = rng.random((b, m)) < prior[None, :]
        correct = rng.random((b, t.shape[0])) < q[None, :]
        vote1 = np.where(correct, y[:, t], ~y[:, t])
        s = (P.T @ ((2.0 * vote1 - 1.0) * ell[None, :]).T).T - r[None, :]
        yhat = s >= 0
        hits += np.sum(yhat == y, axis=0)
        done += b
    return hits / samples


def smoothed_accuracy(
    W: np.ndarray,
    Z1: np.ndarray,
    Z0: np.ndarray,
    task_index: np.ndarray,
    prior: np.ndarray,
) -> tuple[float, np.ndarray]:
    """Sampled smoothed objective ``Ẽ`` and its corrected gradient (spec §4.1), without the 1/m.

    With ``a_j(Z) = Σ_{i∈j} Z_i W_i − r_j`` and fixed vote samples ``Z¹`` (drawn given ``y=1``)
    and ``Z⁰`` (given ``y=0``), each of shape (B, p):
    ``Ẽ·m = mean_b Σ_j [π_j S(a_j(Z¹_b)) + (1−π_j) S(−a_j(Z⁰_b))]`` and
    ``g_i = mean_b [π_j S'(a_j(Z¹_b)) Z¹_bi − (1−π_j) S'(a_j(Z⁰_b)) Z⁰_bi]`` (sign erratum: the
    paper prints ``+``; ``d/dW S(−a) = −S'(a) Z``).

    Returns
    -------
    (value, gradient) with ``value = Ẽ`` (mean over tasks) and ``gradient = m·∇Ẽ``.
    """
    prior = np.asarray(prior, dtype=np.float64)
    m = prior.shape[0]
    t = np.asarray(task_index, dtype=np.int64)
    r = np.log((1.0 - prior) / prior)
    P = sp.csr_matrix((np.ones(t.shape[0]), (np.arange(t.shape[0]), t)), shape=(t.shape[0], m))
    a1 = np.asarray(P.T @ (Z1 * W[None, :]).T).T - r[None, :]
    a0 = np.asarray(P.T @ (Z0 * W[None, :]).T).T - r[None, :]
    s1, s0 = _sigmoid(a1), _sigmoid(a0)
    value = float(np.mean(np.sum(prior[None, :] * s1 + (1.0 - prior[None, :]) * (1.0 - s0), axis=1)) / m)
    d1 = (s1 * (1.0 - s1))[:, t]
    d0 = (s0 * (1.0 - s0))[:, t]
    g = np.mean(prior[t][None, :] * d1 * Z1 - (1.0 - prior[t])[None, :] * d0 * Z0, axis=0)
    return value, g


def sample_votes(quality: np.ndarray, batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``Z¹`` and ``Z⁰`` (shape (batch, p)): ``Z = (2Ŷ−1)·ℓ`` for votes drawn given ``y=1``
    and given ``y=0`` (each worker correct with probability ``Q``)."""
    q = np.clip(np.asarray(quality, dtype=np.float64), *_Q_CLIP)
    ell = np.log(q / (1.0 - q))
    c1 = rng.random((batch, q.shape[0])) < q[None, :]
    c0 = rng.random((batch, q.shape[0])) < q[None, :]
    return np.where(c1, ell, -ell), np.where(c0, -ell, ell)


def _quality_instance(
    candidates: pd.DataFrame, budget: Any, worker_caps: Any, task_caps: Any
) -> tuple[_Instance, np.ndarray, np.ndarray]:
    inst = _build_instance(candidates, budget, worker_caps, task_caps, ("quality",))
    q = inst.cand["quality"].to_numpy(dtype=np.float64)
    bad = (q <= 0) | (q >= 1)
    if bad.any():
        rows = np.flatnonzero(bad)[:10].tolist()
        raise ValueError(f"candidates: 'quality' must lie in (0, 1); offending rows {rows}")
    low = q < 0.5
    if low.any():
        log.warning("%d candidate pair(s) have quality < 0.5: their votes count inverted, not ignored", int(low.sum()))
    q = np.clip(q, *_Q_CLIP)
    m = inst.tasks.shape[0]
    prior = np.full(m, 0.5)
    if "prior" in inst.cand.columns:
        pr = _float_column(inst.cand, "prior", "candidates")
        if np.any((pr <= 0) | (pr >= 1)):
            raise ValueError("candidates: 'prior' must lie in (0, 1)")
        first = np.full(m, np.nan)
        first[inst.t_idx[::-1]] = pr[::-1]
        # a task's prior must be constant over its candidate rows
        if np.any(np.abs(pr - first[inst.t_idx]) > 1e-12):
            raise ValueError("candidates: 'prior' differs between rows of the same task")
        prior = np.where(np.isnan(first), 0.5, first)
    return inst, q, prior


def _accuracy_result(
    inst: _Instance,
    x: np.ndarray,
    q: np.ndarray,
    prior: np.ndarray,
    score: np.ndarray,
    *,
    method: str,
    backend: str,
    iterations: int,
    eval_samples: int,
    eval_seed: int,
    trace: dict[str, Any],
) -> AssignmentResult:
    acc = map_accuracy_mc(q[x], inst.t_idx[x], prior, samples=eval_samples, seed=eval_seed)
    objective = float(acc.mean()) if acc.size else float("nan")
    table = _assignment_table(inst, x, score, {"quality": q})
    table["rank_in_task"] = table.groupby("task", sort=False).cumcount().astype(np.int64) + 1
    wl, tl = _loads(inst, x)
    tl["expected_accuracy"] = acc
    trace = dict(trace)
    trace.update(eval_samples=eval_samples, eval_seed=eval_seed)
    return AssignmentResult(
        assignment=table,
        worker_load=wl,
        task_load=tl,
        objective=objective,
        budget=inst.budget,
        n_selected=int(x.sum()),
        dual_bound=float("nan"),
        certified=False,
        method=method,
        backend=backend,
        iterations=iterations,
        n_excluded=0,
        trace=trace,
    )


def assign_siht(
    candidates: pd.DataFrame,
    budget: int | None,
    worker_caps: pd.DataFrame | float | None = None,
    task_caps: pd.DataFrame | float | None = None,
    *,
    n_iter: int = 200,
    batch: int = 4,
    eta: float = 1.0,
    mode: Literal["box", "paper"] = "box",
    init: Literal["zero", "qlp"] = "zero",
    patience: int | None = 10,
    seed: int = 0,
    backend: str = "flow",
    eval_samples: int = 1000,
    eval_seed: int | None = None,
) -> AssignmentResult:
    """Assignment maximising the expected accuracy of Bayes-weighted voting by stochastic IHT.

    Spec §4.2 (paper §5.2): maximise ``Ẽ(W)`` (the sigmoid-smoothed expected MAP accuracy of
    spec §4.1) over the TVCS set (worker loads = view 1, task caps = view 2, budget = total)::

        for t = 1..n_iter:
            g  ← mean of ``batch`` corrected stochastic gradients (× m)   (smoothed_accuracy)
            Zt ← W + η g
            box:   c = clip(Zt, 0, 1); x = tvcs_select(Zt² − (Zt − c)²); W = c ⊙ x
            paper: x = tvcs_select(Zt²);                                   W = Zt ⊙ x
            stop early when supp(W) is unchanged for ``patience`` iterations
        X = 1[W > 0]

    Parameters
    ----------
    candidates : DataFrame
        ``task, worker, quality`` (``Q ∈ (0,1)``, clipped to [1e-3, 1−1e-3]; Q < 0.5 is
        allowed and logged), optional ``prior`` (``π_j``, constant per task; default 0.5).
    budget, worker_caps, task_caps
        As in :func:`assign_tasks`.
    n_iter, batch, eta, mode, init, patience, seed
        SIHT settings (spec defaults T=200, B=4, η=1, box mode, W0 = 0; ``init="qlp"`` warm
        starts from the Q-LP baseline). ``patience=None`` always runs ``n_iter`` iterations.
    backend : str
        Projection backend (:func:`tvcs_select`).
    eval_samples, eval_seed
        Monte-Carlo evaluation of the result on samples independent of training
        (``eval_seed`` default ``seed + 1``).

    Returns
    -------
    AssignmentResult
        ``objective`` = MC expected accuracy; ``assignment.score`` = final ``W``;
        ``trace`` has ``smoothed`` (Ẽ on each batch), ``support_changes`` and ``stopped``.
    """
    if mode not in ("box", "paper"):
        raise ValueError(f"mode must be 'box' or 'paper', got {mode!r}")
    if n_iter < 1 or batch < 1:
        raise ValueError("n_iter and batch must be >= 1")
    inst, q, prior = _quality_instance(candidates, budget, worker_caps, task_caps)
    eval_seed = seed + 1 if eval_seed is None else eval_seed
    p = inst.p
    if p == 0:
        return _accuracy_result(
            inst,
            np.zeros(0, bool),
            q,
            prior,
            np.zeros(0),
            method="siht",
            backend=backend,
            iterations=0,
            eval_samples=eval_samples,
            eval_seed=eval_seed,
            trace={},
        )
    proj = TVCSProjector(inst.constraints(), backend=backend)
    rng = _rng(seed, _TAG_SIHT)
    if init == "qlp":
        W = proj.select(q).x.astype(np.float64)
    elif init == "zero":
        W = np.zeros(p)
    else:
        raise ValueError(f"init must be 'zero' or 'qlp', got {init!r}")
    supp = W > 0
    smoothed: list[float] = []
    changes: list[int] = []
    stable = 0
    stopped = "n_iter"
    it = 0
    for it in range(1, n_iter + 1):
        Z1, Z0 = sample_votes(q, batch, rng)
        val, g = smoothed_accuracy(W, Z1, Z0, inst.t_idx, prior)
        smoothed.append(val)
        Zt = W + eta * g
        if mode == "box":
            c = np.clip(Zt, 0.0, 1.0)
            x = proj.select(Zt * Zt - (Zt - c) ** 2).x
            W = np.where(x, c, 0.0)
        else:
            x = proj.select(Zt * Zt).x
            W = np.where(x, Zt, 0.0)
        new_supp = W > 0
        ch = int(np.sum(new_supp != supp))
        changes.append(ch)
        supp = new_supp
        stable = stable + 1 if ch == 0 else 0
        if patience is not None and stable >= patience:
            stopped = "support_stable"
            break
    if stopped == "n_iter" and patience is not None:
        log.warning("assign_siht: support still changing after %d iterations (last change %d)", n_iter, changes[-1])
    X = W > 0
    trace = {"smoothed": smoothed, "support_changes": changes, "stopped": stopped, "mode": mode}
    return _accuracy_result(
        inst,
        X,
        q,
        prior,
        W,
        method="siht",
        backend=proj.backend,
        iterations=it,
        eval_samples=eval_samples,
        eval_seed=eval_seed,
        trace=trace,
    )


def assign_baseline(
    candidates: pd.DataFrame,
    budget: int | None,
    worker_caps: pd.DataFrame | float | None = None,
    task_caps: pd.DataFrame | float | None = None,
    *,
    method: Literal["qlp", "random"] = "qlp",
    seed: int = 0,
    backend: str = "flow",
    eval_samples: int = 1000,
    eval_seed: int | None = None,
) -> AssignmentResult:
    """Baselines of spec §4.2: ``"qlp"`` maximises ``Σ Q_ij X_ij`` under the same caps (Ho et al.
    2013 with the per-task cap); ``"random"`` selects ``tvcs_select(ξ)``, ``ξ ~ U(0,1)`` — a random
    feasible assignment that fills the budget. Evaluated like :func:`assign_siht`.
    """
    inst, q, prior = _quality_instance(candidates, budget, worker_caps, task_caps)
    eval_seed = seed + 1 if eval_seed is None else eval_seed
    if method == "qlp":
        w = q.copy()
    elif method == "random":
        w = _rng(seed, _TAG_RANDOM).random(inst.p)
    else:
        raise ValueError(f"method must be 'qlp' or 'random', got {method!r}")
    if inst.p == 0:
        x = np.zeros(0, bool)
        be, it = backend, 0
    else:
        res = TVCSProjector(inst.constraints(), backend=backend).select(w)
        x, be, it = res.x, res.backend, res.iterations
    return _accuracy_result(
        inst,
        x,
        q,
        prior,
        w,
        method=method,
        backend=be,
        iterations=it,
        eval_samples=eval_samples,
        eval_seed=eval_seed,
        trace={},
    )


def expected_accuracy(
    assignment: pd.DataFrame,
    tasks: Any = None,
    *,
    prior: float | pd.DataFrame = 0.5,
    samples: int | None = 1000,
    seed: int = 0,
) -> float:
    """Mean expected accuracy over tasks of the MAP vote for an assignment (spec §4.1).

    Parameters
    ----------
    assignment : DataFrame
        ``task, worker, quality`` of the assigned pairs.
    tasks : sequence of task ids, optional
        Tasks to average over (default: those in ``assignment``); tasks without workers score
        ``max(π, 1−π)``.
    prior : float or DataFrame (task, prior)
    samples : int or None
        Monte-Carlo samples; ``None`` = exact enumeration (≤ 12 workers per task).
    seed : int
    """
    df = _rename_aliases(assignment, _CAND_ALIASES)
    for col in ("task", "quality"):
        if col not in df.columns:
            raise ValueError(f"assignment: missing column '{col}'")
    t_ids = _ids_as_str(df["task"], "assignment", "task")
    q = _float_column(df, "quality", "assignment")
    if np.any((q <= 0) | (q >= 1)):
        raise ValueError("assignment: 'quality' must lie in (0, 1)")
    if tasks is None:
        all_tasks = np.unique(t_ids.astype(str))
    else:
        all_tasks = np.unique(np.asarray(list(tasks), dtype=object).astype(str))
    missing = np.setdiff1d(t_ids.astype(str), all_tasks)
    if missing.size:
        raise ValueError(f"assignment has tasks not in `tasks`: {missing[:10].tolist()}")
    if all_tasks.size == 0:
        raise ValueError("expected_accuracy: no tasks")
    t_idx = np.searchsorted(all_tasks, t_ids.astype(str))
    if isinstance(prior, pd.DataFrame):
        for col in ("task", "prior"):
            if col not in prior.columns:
                raise ValueError(f"prior table: missing column '{col}'")
        pser = pd.Series(_float_column(prior, "prior", "prior table"), index=prior["task"].astype(str).to_numpy())
        if pser.index.duplicated().any():
            raise ValueError("prior table: duplicate task ids")
        pr = pser.reindex(all_tasks).fillna(0.5).to_numpy(dtype=np.float64)
    else:
        pr = np.full(all_tasks.shape[0], float(prior))
    if np.any((pr <= 0) | (pr >= 1)):
        raise ValueError("prior must lie in (0, 1)")
    if samples is None:
        return float(map_accuracy_exact(q, t_idx, pr).mean())
    return float(map_accuracy_mc(q, t_idx, pr, samples=samples, seed=seed).mean())


# ---------------------------------------------------------------------------------------------
# Candidate scores from worker skills and task confidence
# ---------------------------------------------------------------------------------------------


def candidate_scores(
    skills: pd.DataFrame,
    consensus: pd.DataFrame | None = None,
    pairs: pd.DataFrame | None = None,
    *,
    missing: Literal["error", "drop"] = "error",
    max_pairs: int = 20_000_000,
) -> pd.DataFrame:
    """Candidate (task, worker) scores for :func:`assign_tasks` from skills and task confidence.

    Model (spec §4.1): worker ``i`` answers task ``j`` correctly with probability
    ``Q_ij = accuracy_i`` (skills column ``accuracy``; else binary one-coin skill ``s_i ∈ [−1,1]``
    → ``Q = (1 + s)/2``, skills spec §1.1), clipped to [1e-3, 1 − 1e-3]. The current consensus
    label of task ``j`` is right with prior ``π_j = confidence_j`` (0.5 when the task has no
    consensus row). The score is the first-order gain of the smoothed expected accuracy
    ``Ẽ`` (spec §4.1) when worker ``i`` is added to task ``j`` from the empty assignment, i.e.
    the expectation of the corrected gradient at ``W = 0``::

        E[∂Ẽ/∂W_ij]·m = π_j(1−π_j)·(2Q_ij − 1)·ln(Q_ij / (1 − Q_ij))

    (``S'(−r_j) = π_j(1−π_j)`` and ``E[Z¹] = −E[Z⁰] = (2Q−1)ℓ``): predicted worker informativeness
    ``(2Q−1)ℓ ≥ 0`` (a Q < ½ worker is informative once inverted) times task uncertainty
    ``π(1−π)``. Maximising the total score with :func:`assign_tasks` is one linearised SIHT
    step; :func:`assign_siht` optimises the full objective.

    Parameters
    ----------
    skills : DataFrame
        ``worker`` and ``accuracy`` (preferred) or ``skill``.
    consensus : DataFrame, optional
        ``task, confidence`` (confidence ∈ [0, 1]).
    pairs : DataFrame, optional
        Eligible ``task, worker`` pairs; default = every skills worker × every consensus task.
    missing : {"error", "drop"}
        Pairs whose worker has no usable accuracy/skill (absent or NaN, e.g. a flagged
        component): raise ``ValueError`` (default) or drop them (logged).
    max_pairs : int
        Guard on the size of the default cross product.

    Returns
    -------
    DataFrame
        ``task, worker, score, quality, prior`` (one row per eligible pair, sorted by task, worker).
    """
    if "worker" not in skills.columns:
        raise ValueError(f"skills: missing column 'worker' (columns: {list(skills.columns)})")
    sk_workers = _ids_as_str(skills["worker"], "skills", "worker").astype(str)
    if pd.Index(sk_workers).duplicated().any():
        raise ValueError("skills: duplicate worker ids")
    if "accuracy" in skills.columns:
        acc = pd.to_numeric(skills["accuracy"], errors="coerce").to_numpy(dtype=np.float64)
    elif "skill" in skills.columns:
        acc = (1.0 + pd.to_numeric(skills["skill"], errors="coerce").to_numpy(dtype=np.float64)) / 2.0
    else:
        raise ValueError("skills: need an 'accuracy' or a 'skill' column")
    finite = np.isfinite(acc)
    if np.any(finite & ((acc < 0) | (acc > 1))):
        raise ValueError("skills: accuracy outside [0, 1] (or skill outside [-1, 1])")
    if consensus is not None:
        for col in ("task", "confidence"):
            if col not in consensus.columns:
                raise ValueError(f"consensus: missing column '{col}'")
        c_tasks = _ids_as_str(consensus["task"], "consensus", "task").astype(str)
        if pd.Index(c_tasks).duplicated().any():
            raise ValueError("consensus: duplicate task ids")
        conf = pd.to_numeric(consensus["confidence"], errors="coerce").to_numpy(dtype=np.float64)
        if np.any(~np.isfinite(conf)) or np.any((conf < 0) | (conf > 1)):
            raise ValueError("consensus: 'confidence' must be finite and in [0, 1]")
    else:
        c_tasks, conf = np.array([], dtype=str), np.array([])
    if pairs is None:
        if consensus is None:
            raise ValueError("candidate_scores: give `pairs` or a `consensus` table listing the tasks")
        n = sk_workers.shape[0] * c_tasks.shape[0]
        if n > max_pairs:
            raise ValueError(f"cross product of {n} pairs exceeds max_pairs={max_pairs}; pass `pairs`")
        pt = np.repeat(c_tasks, sk_workers.shape[0])
        pw = np.tile(sk_workers, c_tasks.shape[0])
    else:
        for col in ("task", "worker"):
            if col not in pairs.columns:
                raise ValueError(f"pairs: missing column '{col}'")
        pt = _ids_as_str(pairs["task"], "pairs", "task").astype(str)
        pw = _ids_as_str(pairs["worker"], "pairs", "worker").astype(str)
        d = pd.DataFrame({"t": pt, "w": pw}).duplicated(keep=False)
        if d.any():
            raise ValueError(f"pairs: duplicate (task, worker) pairs, e.g. {list(zip(pt[d], pw[d], strict=True))[:10]}")
    smap = pd.Series(acc, index=sk_workers)
    q = smap.reindex(pw).to_numpy(dtype=np.float64)
    bad = ~np.isfinite(q)
    if bad.any():
        bad_workers = sorted(set(pw[bad].tolist()))
        if missing == "error":
            raise ValueError(
                f"candidate_scores: {len(bad_workers)} worker(s) without a usable accuracy/skill, "
                f"e.g. {bad_workers[:10]} (use missing='drop' to skip them)"
            )
        log.warning(
            "candidate_scores: dropping %d pair(s) of %d worker(s) without accuracy", int(bad.sum()), len(bad_workers)
        )
        pt, pw, q = pt[~bad], pw[~bad], q[~bad]
    q = np.clip(q, *_Q_CLIP)
    if np.any(q < 0.5):
        log.warning("candidate_scores: %d pair(s) with accuracy < 0.5 (votes count inverted)", int(np.sum(q < 0.5)))
    cmap = pd.Series(conf, index=c_tasks)
    prior = cmap.reindex(pt).to_numpy(dtype=np.float64)
    prior = np.where(np.isfinite(prior), prior, 0.5)
    prior_c = np.clip(prior, *_Q_CLIP)
    ell = np.log(q / (1.0 - q))
    score = prior_c * (1.0 - prior_c) * (2.0 * q - 1.0) * ell
    out = pd.DataFrame(
        {
            "task": pd.Series(pt, dtype=object),
            "worker": pd.Series(pw, dtype=object),
            "score": score,
            "quality": q,
            "prior": prior_c,
        }
    )
    return out.sort_values(["task", "worker"], kind="stable").reset_index(drop=True)


def synthetic_assignment(
    n_workers: int,
    n_tasks: int,
    rho: float,
    seed: int = 0,
    q_range: tuple[float, float] = (0.5, 0.9),
    budget_fraction: float = 0.8,
) -> tuple[pd.DataFrame, int, int, int]:
    """Synthetic crowdsourcing instance of spec §4.2 (paper §5.2).

    ``Q ~ U[q_range]`` i.i.d. for every worker × task pair, priors 0.5,
    ``max_tasks = ⌊ρ m⌋`` per worker, ``max_workers = ⌊ρ n⌋`` per task and
    ``budget = ⌊0.8·min(n·max_tasks, m·max_workers)⌋``.

    Returns
    -------
    (candidates, worker_cap, task_cap, budget)
        ``candidates`` has columns ``task, worker, quality, prior``; ids ``t0000…``/``w000…``.
    """
    rng = _rng(seed, _TAG_SYNTH)
    Q = rng.uniform(q_range[0], q_range[1], size=(n_workers, n_tasks))
    wi, tj = np.meshgrid(np.arange(n_workers), np.arange(n_tasks), indexing="ij")
    wpad, tpad = len(str(max(n_workers - 1, 0))), len(str(max(n_tasks - 1, 0)))
    cand = pd.DataFrame(
        {
            "task": pd.Series([f"t{j:0{tpad}d}" for j in tj.ravel()], dtype=object),
            "worker": pd.Series([f"w{i:0{wpad}d}" for i in wi.ravel()], dtype=object),
            "quality": Q.ravel(),
            "prior": 0.5,
        }
    )
    wcap = math.floor(rho * n_tasks)
    tcap = math.floor(rho * n_workers)
    budget = math.floor(budget_fraction * min(n_workers * wcap, n_tasks * tcap))
    return cand, wcap, tcap, budget
