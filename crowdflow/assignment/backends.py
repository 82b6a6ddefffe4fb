"""The reference backends of the selection: HiGHS LP, the paper's PGD, and brute force.

- :func:`_lp_select`: the LP relaxation ``max ⟨u, x⟩ s.t. A x ≤ s, 0 ≤ x ≤ 1`` by HiGHS
  (``scipy.optimize.linprog``); its vertices are integral (``A`` is totally unimodular), which is
  checked, with ``scipy.optimize.milp`` as the fallback. The row marginals are the dual ``y_G``.
- :func:`_pgd_select`: TVCS-PGD of Yang et al. (ICML 2017): projected gradient on the primal–dual
  penalty ``F(x, y) = ½ r² + ½‖[u − Aᵀy_G − y_B]₊‖² + ½‖[A x − s]₊‖²`` (``r`` = duality gap, see
  :func:`tvcs_penalty`), step ``1/L`` with ``L`` from power iteration, stopped by a duality-gap
  certificate on a rounded (and greedily repaired) iterate; optional FISTA with adaptive restart
  and a block-coordinate polish of the dual bound.
- :func:`_brute_select`: enumeration of all supports (p ≤ 20), the test oracle.
- :func:`greedy_select`: greedy by descending weight, not exact, a baseline only.

See docs/methods/assignment.md §3.5–§3.7.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from crowdflow._typing import SparseMatrix
from crowdflow.assignment.constraints import TVCSConstraints

log = logging.getLogger(__name__)

_BRUTE_MAX_P = 20


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
    # docs/methods/assignment.md §3.5: fractional vertex (e.g. IPM without crossover) -> MILP
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
# Paper's projection method: PGD on the primal–dual penalty (docs/methods/assignment.md §3.6)
# ---------------------------------------------------------------------------------------------


def tvcs_penalty(
    u: np.ndarray, A: SparseMatrix, s: np.ndarray, x: np.ndarray, yG: np.ndarray, yB: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Penalty ``F(x, y)`` of docs/methods/assignment.md §3.6 and its gradient.

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
    """``L = ‖J‖₂²`` by power iteration on ``JᵀJ`` (docs/methods/assignment.md §3.6), times 1.01."""
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
    # closed-form bound of docs/methods/assignment.md §3.6
    bound = float(u @ u + s @ s + p) + (math.sqrt(3.0 * p) + 1.0) ** 2 + 3.0 * p
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
    """Greedy selection by descending ``u`` (NOT exact: the counterexample of docs/methods/assignment.md §2.1)."""
    u = np.asarray(u, dtype=np.float64)
    cons = TVCSConstraints.build(u.shape[0], view1, view2, caps1, caps2, total)
    order = np.lexsort((np.arange(u.shape[0]), -u))
    return _greedy_fill(order[u[order] > 0], cons)


def _pgd_round(x: np.ndarray, u: np.ndarray, cons: TVCSConstraints, ub: float | None, tol: float) -> np.ndarray:
    """Rounding of a PGD iterate (docs/methods/assignment.md §3.6): ``1[x > ½]`` if feasible, else the greedy repair
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
    """TVCS-PGD (docs/methods/assignment.md §3.6). Returns (x, certified, iterations, trace, dual bound in u units).

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
