"""The public selection and projection API of the TVCS set.

:class:`TVCSProjector` builds one structure once (flow network, LP matrix) and then solves
``max ⟨u, x⟩ s.t. Σ_i x_i ≤ s_total, Σ_{i∈g} x_i ≤ s_g (every group of both views), x ∈ {0,1}^p``
exactly for any weights (:meth:`TVCSProjector.select`), or the Euclidean projection of ``v`` onto
``Ω = {w : ‖w_g‖₀ ≤ s_g ∀g}``, which is ``v ⊙ x*`` for ``u = v²`` (:meth:`TVCSProjector.project`).
The LP relaxation is exact (the constraint matrix is totally unimodular), so every result carries a
weak-duality certificate.

Backends: ``flow`` (default, exact min-cost flow on the network of
:mod:`crowdflow.assignment.flow_backend`, solved by OR-Tools and made exact on the float weights in
:mod:`crowdflow.assignment.ortools_flow`, with reduced-cost column generation on large instances),
``lp (HiGHS), ``pgd`` (the paper's
iteration) and ``brute`` (enumeration), the last three in :mod:`crowdflow.assignment.backends`.
:func:`tvcs_select` / :func:`tvcs_project` are one-shot wrappers; :func:`project_elements` projects a
table of elements keyed by view.

Yang, Gui, Ke, Stefankovic, Fujimaki, Liu, "On The Projection Operator to A Three-view Cardinality
Constrained Set", ICML 2017. See docs/methods/assignment.md §1.2, §2 and §3.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from typing import Any, Literal

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.assignment.backends import _brute_select, _lp_select, _pgd_select
from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.assignment.flow_backend import _FlowNetwork, _greedy_windows, _group_tops
from crowdflow.assignment.ortools_flow import solve_ortools
from crowdflow.assignment.problem import _caps_vector, _float_column, _ids_as_str
from crowdflow.assignment.types import SelectResult

log = logging.getLogger(__name__)

Backend = Literal["flow", "lp", "pgd", "brute"]
BACKENDS: tuple[str, ...] = ("flow", "lp", "pgd", "brute")

_CERT_RTOL = 1e-9  # docs/methods/assignment.md §2.2: relative gap of a certified answer
PRUNE_MIN_P = 50_000  # flow backend: reduced-cost column generation from this many elements on
CG_BUDGET = 0.25  # flow backend: column generation while its candidate sets add up to <= this share of u > 0
SEED_WINDOW = 0.25  # flow backend: half-width of the greedy seed's rank windows, as a fraction of the cap


def _certified(obj: float, ub: float) -> bool:
    return ub - obj <= _CERT_RTOL * max(1.0, abs(ub))


class TVCSProjector:
    """Reusable selector/projector for one TVCS structure (docs/methods/assignment.md §1–§3).

    Builds the structure once (flow network and CSR patterns, LP matrix) so that IHT/GradMP and
    stochastic IHT can call :meth:`select` / :meth:`project` every iteration.

    Flow backend (docs/methods/assignment.md §3.1–§3.4): the min-cost flow on the network of
    :class:`_FlowNetwork` is solved by OR-Tools' ``SimpleMinCostFlow`` on integer costs (whole-number
    weights as they are, otherwise the grid ``2^-40·max u``, divided by their gcd), with potentials by
    Bellman–Ford on the residual graph and the float certificate (:func:`solve_ortools`). It won the
    worst family of the issue #19 benchmark (``benchmarks/assignment_family.py``) against the
    hand-written compiled cost-scaling kernel it replaced. Large instances are solved on a reduced
    candidate set when its duals prove it is enough (:meth:`_solve_flow`). When one view can never
    bind (every cap ≥ its group size, or the view is absent) the problem is a laminar matroid and the
    flow backend uses the exact greedy closed form instead (:func:`_group_tops`); more generally the
    greedy of one view alone is returned whenever it respects the other view's caps (a feasible optimum
    of a relaxation, :meth:`_one_view_relaxation`).
    Every flow result carries the weak-duality certificate; if it ever failed numerically (not
    observed) the LP backend would be used and a warning logged.

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
        certificate also tries a block-coordinate-polished dual bound; False = the dual bound of the iterate only).
    prune_factor, prune_min_p : float, int
        Flow backend on ``p ≥ prune_min_p`` (default ``PRUNE_MIN_P``) elements: the first reduced problem keeps the
        ``prune_factor·min(s_total, fill bound)`` largest weights, or a capped-greedy seed when the caps bind hard
        (see :meth:`_solve_flow`; the result is exact whatever the value, which only trades
        first-solve size against extra rounds).
    relaxation_check : bool
        Flow backend: first solve each view alone (the other view's caps dropped, the exact compiled greedy
        :func:`_group_tops`) and return that selection when it respects the dropped caps
        (:meth:`_one_view_relaxation`; default ``True``; ``False`` keeps only the closed form of a view
        that never binds).
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
        relaxation_check: bool = True,
    ) -> None:
        if not prune_factor >= 1.0:
            raise ValueError(f"prune_factor must be >= 1, got {prune_factor!r}")
        self.prune_factor = float(prune_factor)
        self.prune_min_p = int(prune_min_p)
        self.relaxation_check = bool(relaxation_check)
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
        """Exact maximiser of ``⟨u, x⟩`` over the TVCS selections (docs/methods/assignment.md §1.2).

        Elements with ``u_i ≤ 0`` are never selected (docs/methods/assignment.md §2.3). ``u`` must be finite.
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
        relaxed = self._one_view_relaxation(u) if backend == "flow" else None
        if relaxed is not None:
            x, ub, trace = relaxed
            obj = float(u[x].sum())
        elif backend == "flow":
            try:
                x, stats = self._solve_flow(u)
            except RuntimeError as exc:  # numerical safety net; never expected
                log.warning("flow backend failed (%s); falling back to the HiGHS LP", exc)
                return self._select_lp(u, "flow->lp")
            a, b, lam = stats.pop("duals")
            obj = float(u[x].sum())
            ub = cons.dual_bound(u, a, b, lam)
            pr = stats.get("pruning", {})
            iters = pr.get("rounds", 0) + (0 if pr.get("candidates") else 1)  # OR-Tools solves
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

    def _one_view_relaxation(self, u: np.ndarray) -> tuple[np.ndarray, float, dict[str, Any]] | None:
        """Exact answer from one view alone, when it is feasible for the other (docs/methods/assignment.md §3.4).

        Dropping the caps of one view leaves one partition truncated at ``s_total``, a laminar matroid
        solved exactly by the compiled greedy :func:`_group_tops` with its tight duals. That problem is a
        relaxation, so when its selection also respects the dropped caps it is optimal for the full
        problem, and its duals with ``0`` for the dropped view are dual-feasible and give the bound
        (equal to the objective). A view that never binds (every cap ≥ its group size) always passes
        the test: that is the closed form. Tried with view 2's caps dropped first, then view 1's
        (when ``relaxation_check``); ``None`` when neither selection is feasible.
        """
        cons = self.cons
        if self._free_view is not None:
            order = [self._free_view]
        elif self.relaxation_check:
            order = [1, 2]
        else:
            return None
        for dropped in order:
            keep_view, keep_caps = (cons.view1, cons.caps1) if dropped == 2 else (cons.view2, cons.caps2)
            x, d, lam = _group_tops(np.ascontiguousarray(u), keep_view, keep_caps, cons.total)
            if dropped != self._free_view:
                view, caps = (cons.view1, cons.caps1) if dropped == 1 else (cons.view2, cons.caps2)
                g = view[x]
                if np.any(np.bincount(g[g >= 0], minlength=caps.shape[0]) > caps):
                    continue
            a, b = (d, np.zeros(cons.n2)) if dropped == 2 else (np.zeros(cons.n1), d)
            why = "never binds" if dropped == self._free_view else "is respected by the greedy of the other view"
            trace = {"closed_form": f"view {dropped} {why}: laminar-matroid greedy"}
            return x, cons.dual_bound(u, a, b, lam), trace
        return None

    def _solve_network(self, net: _FlowNetwork, u: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """OR-Tools on ``net`` (its own constraints) with that problem's certificate deciding the duals."""
        cons = net.cons
        return solve_ortools(net, u, lambda x, d: _certified(float(u[x].sum()), cons.dual_bound(u, *d)))

    def _solve_full_network(self, u: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """The flow solve on every element (network built once per projector, reused across calls)."""
        if self._net is None:
            self._net = _FlowNetwork(self.cons)
        return self._solve_network(self._net, u)

    def _seed(self, u: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray | None, bool]:
        """First candidate set of the column generation (sorted), or ``None`` = solve the full network.

        The ``⌈prune_factor·k⌉ + 1`` largest positive weights, ``k = min(s_total, fill bound of all
        positive weights)`` (the most elements any selection can hold); when the caps leave them unable
        to fill ``k`` slots, the capped-greedy seed (:func:`_greedy_windows`). ``None`` below
        ``prune_min_p`` elements or when the seed exceeds ``CG_BUDGET`` of the positive weights.
        """
        cons = self.cons
        limit = CG_BUDGET * pos.shape[0]
        if cons.p < self.prune_min_p:
            return None, False
        k = min(cons.total, cons.fill_bound(pos))
        q = math.ceil(self.prune_factor * k) + 1
        if q > limit:
            return None, False
        sub = np.sort(pos[np.argpartition(-u[pos], q - 1)[:q]])
        reseeded = cons.fill_bound(sub) < k
        if reseeded:  # the caps leave the top weights unable to fill what the full set can
            sub = self._greedy_seed(u, pos)
        return (sub if sub.shape[0] <= limit else None), reseeded

    def _solve_flow(self, u: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """Exact flow solve, on a reduced candidate set when that is provably enough.

        Large instances (``p ≥ prune_min_p``) are solved by *reduced-cost column generation*: the
        flow is solved on a candidate set ``C`` only (:meth:`_seed`); its optimal duals ``(a, b, λ)``
        are dual-feasible for the full LP exactly when no left-out element has a positive reduced gain
        ``u_i − a_{g(i)} − b_{h(i)} − λ`` (then ``y_i = 0`` for all of them and the full bound equals
        the reduced optimum, so the reduced selection is optimal for the full problem). Violators are
        added and the reduced problem solved again until none is left. OR-Tools has no warm start, so
        every round costs a solve of its candidate set: the rounds stop paying when their candidate
        sets add up to more than ``CG_BUDGET`` (¼) of the positive weights, and then the full network
        is solved (at most ¼ of a full solve lost; one successful round saves about ¾). The
        weak-duality certificate is always evaluated on the full problem (docs/methods/assignment.md
        §3.3).
        """
        cons = self.cons
        pos = np.flatnonzero(u > 0)
        sub, reseeded = self._seed(u, pos)
        if sub is None:
            return self._solve_full_network(u)
        umax = float(u[pos].max())
        sizes: list[int] = []
        while True:
            if sum(sizes) + sub.shape[0] > CG_BUDGET * pos.shape[0]:  # reduction no longer pays
                x, stats = self._solve_full_network(u)
                stats["pruning"] = {"rounds": len(sizes), "reseeded": reseeded, "abandoned": True, "sizes": sizes}
                return x, stats
            sc = TVCSConstraints(
                view1=cons.view1[sub], view2=cons.view2[sub], caps1=cons.caps1, caps2=cons.caps2, total=cons.total
            )
            xs, stats = self._solve_network(_FlowNetwork(sc), u[sub])
            sizes.append(int(sub.shape[0]))
            a, b, lam = stats["duals"]
            red = cons.reduced_gain(u, np.maximum(a, 0.0), np.maximum(b, 0.0), max(lam, 0.0))
            red[sub] = 0.0
            viol = np.flatnonzero(red > 1e-12 * umax)
            if viol.shape[0] == 0:
                break
            sub = np.union1d(sub, viol)
        x = np.zeros(cons.p, bool)
        x[sub[xs]] = True
        stats["pruning"] = {"rounds": len(sizes), "reseeded": reseeded, "candidates": sizes[-1], "sizes": sizes}
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
    """Maximum-weight TVCS selection (docs/methods/assignment.md §1.2).

    Solves ``max ⟨u, x⟩ s.t. Σx ≤ total, per-view-1-group counts ≤ caps1, per-view-2-group counts
    ≤ caps2, x ∈ {0,1}^p`` exactly (the LP relaxation is integral, docs/methods/assignment.md §2.1).

    Parameters
    ----------
    u : ndarray, shape (p,)
        Finite weights; elements with ``u_i ≤ 0`` are never selected.
    view1, view2 : array-like of int or None
        Group index of every element per view, negative = no group (docs/methods/assignment.md §1.1).
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
    """Euclidean projection onto ``Ω(𝒢, s)`` (docs/methods/assignment.md §1.2, Lemma 1): ``v ⊙ tvcs_select(v²).x``.

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
    """Generic TVCS projection of a table of elements (docs/methods/assignment.md §1.3, generic use).

    Parameters
    ----------
    elements : DataFrame
        ``element_id, value, view1_key, view2_key``; keys may be null (element in no group of
        that view). One row per element: a repeated ``element_id`` is rejected, so an element
        can never carry two keys of one view (the TVCS structure is enforced by the schema,
        docs/methods/assignment.md §7.4 T6). ``value`` must be finite.
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
        all_keys, capv = _caps_vector(ctab, keys, view_name, "key", "cap", {}, None)
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
