"""SQUAREM: squared extrapolation of an EM map, with the monotone safeguards (docs/methods/skills.md §7.2).

R. Varadhan and C. Roland, "Simple and globally convergent methods for accelerating the convergence of any
EM algorithm", Scandinavian Journal of Statistics 35(2), 2008 (scheme S3, with the step-length bounds of
their R package ``SQUAREM``).

An EM map F (one E-step and one M-step) has the maximiser θ* of an objective Φ (log-likelihood, or log
posterior with pseudo-counts) as a fixed point, F(θ*) = θ*, and never decreases Φ. Plain EM iterates
θ ← F(θ) and converges linearly, slowly when the fraction of missing information is large. One SQUAREM
cycle from θ₀ evaluates θ₁ = F(θ₀), θ₂ = F(θ₁), r = θ₁ − θ₀, v = θ₂ − 2θ₁ + θ₀ and the step
a = ‖r‖₂/‖v‖₂ clipped to [1, a_max]; the extrapolated point θ' = θ₀ + 2a r + a² v is (a = 1) the
plain point θ₂, and otherwise is stabilised by one more EM step, θ₀ ← F(θ'). Safeguards:

- feasibility: θ' must lie in the box [lower, upper] (probabilities ≥ 0, …); if not, a ← (a + 1)/2, at
  most ``max_halvings`` times, then a = 1 (θ₂);
- monotonicity: Φ(θ') is computed by the E-step of the stabilising step; θ' is kept only if
  Φ(θ') ≥ Φ(θ₁) − slack (``slack`` = 10⁻¹² |Φ(θ₁)|, rounding) and finite, else the cycle ends at θ₂, the
  plain EM point (the evaluation at θ' is then wasted). So the chain θ₀ of the cycles (and every point
  whose value is recorded) has non-decreasing Φ, as plain EM's;
- a_max starts at 1 (the first cycle is two plain EM steps), is multiplied by 4 when the step reached it
  and the point was kept, and divided by 4 (not below 1) when such a point was refused.

Stopping rule (the plain EM rule, checked after every evaluation of F at a point of the chain): stop when
one EM step moved no parameter by ``tol`` or more, max_k |F(θ)_k − θ_k| < tol, and return F(θ); or after
``max_iter`` evaluations of F (each one E-step and one M-step: one pass over the data, the cost unit of
plain EM), returning the last point of the chain. A fixed point of F is a fixed point of the cycle, so
the limit is the plain EM limit (for the same start; with several local maxima a cycle may cross from one
basin to another, which the monotone safeguard does not prevent: the tests compare the two over a family
of crowds).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: F(θ) → (F(θ), Φ(θ), trace value at θ): one EM step and the objective of its E-step
EMStep = Callable[[np.ndarray], tuple[np.ndarray, float, float]]


@dataclass(frozen=True)
class FixedPointRun:
    """The end of an accelerated EM run.

    Attributes
    ----------
    theta : numpy.ndarray
        The returned parameters (F of the last chain point when converged).
    trace : list of float
        The trace value (the E-step's log-likelihood) at every evaluated point of the monotone chain, in order
        (points refused by the monotone safeguard are not recorded).
    evaluations : int
        Evaluations of F (passes over the data), at most ``max_iter``.
    converged : bool
    extrapolations : int
        Extrapolated points kept.
    refused : int
        Extrapolated points refused by the monotone safeguard (each cost one evaluation).
    """

    theta: np.ndarray
    trace: list[float]
    evaluations: int
    converged: bool
    extrapolations: int
    refused: int


#: elements per block of the blockwise helpers: their temporaries are this size, not θ's (W·M² for Dawid–Skene)
_BLOCK = 1 << 16


def _moved(a: np.ndarray, b: np.ndarray) -> float:
    """max_k |a_k − b_k| (0 for empty), block by block (a maximum is exact in any order: the value of
    ``np.max(np.abs(a - b))`` without two θ-sized temporaries)."""
    top = 0.0
    for s in range(0, a.size, _BLOCK):
        top = max(top, float(np.max(np.abs(a[s : s + _BLOCK] - b[s : s + _BLOCK]))))
    return top


def _extrapolate(theta: np.ndarray, r: np.ndarray, v: np.ndarray, a: float, out: np.ndarray) -> np.ndarray:
    """``theta + (2a) r + a² v`` into ``out``, block by block: per element the operations and order of that
    expression (so its bits), with block-sized temporaries."""
    two_a, a2 = 2.0 * a, a * a
    for s in range(0, theta.size, _BLOCK):
        blk = slice(s, s + _BLOCK)
        out[blk] = theta[blk] + two_a * r[blk]
        out[blk] += a2 * v[blk]
    return out


def _inside(x: np.ndarray, lower: float | np.ndarray, upper: float | np.ndarray) -> bool:
    return bool(np.all(x >= lower) and np.all(x <= upper))


def squarem(
    step: EMStep,
    theta0: np.ndarray,
    tol: float,
    max_iter: int,
    lower: float | np.ndarray = -np.inf,
    upper: float | np.ndarray = np.inf,
    *,
    step_max0: float = 1.0,
    mstep: float = 4.0,
    max_halvings: int = 30,
    monitor: Callable[[int, float], None] | None = None,
) -> FixedPointRun:
    """Run SQUAREM-accelerated EM from ``theta0`` (see the module docstring for the cycle and the safeguards).

    Parameters
    ----------
    step : callable
        ``step(θ) -> (F(θ), Φ(θ), trace value at θ)``; it must not keep a reference to its argument, and F(θ) must
        be a new array it keeps no reference to either (the run overwrites it with the cycle's differences).
    theta0 : numpy.ndarray
        Start (a feasible point, flat).
    tol : float
        Stop when an EM step moves every parameter by less than ``tol`` (sup norm).
    max_iter : int
        Most evaluations of ``step``.
    lower, upper : float or numpy.ndarray
        The box an extrapolated point must lie in (broadcast against θ).
    mstep : float
        Factor of the step bound's growth and shrinkage.
    max_halvings : int
        Most feasibility halvings of the step before falling back to θ₂.
    monitor : callable, optional
        ``monitor(evaluations, move)`` after each evaluation at a point of the chain, with the sup-norm move
        max_k |F(θ)_k − θ_k| the stopping rule compares with ``tol`` (e.g.
        :meth:`crowdflow.progress.IterationProgress.update`); it sees the run, it changes nothing in it.

    Returns
    -------
    FixedPointRun
    """
    theta = np.array(theta0, dtype=np.float64, copy=True)
    trace: list[float] = []
    n, kept, refused = 0, 0, 0
    step_max = step_max0
    v_buf: np.ndarray | None = None  # reused work arrays (θ-sized), made at the first extrapolation
    cand = theta
    while True:
        t1, _, v0 = step(theta)
        n += 1
        trace.append(v0)
        move = _moved(t1, theta)
        if monitor is not None:
            monitor(n, move)
        if move < tol or n >= max_iter:
            return FixedPointRun(t1, trace, n, move < tol, kept, refused)
        t2, obj1, v1 = step(t1)
        n += 1
        trace.append(v1)
        move = _moved(t2, t1)
        if monitor is not None:
            monitor(n, move)
        if move < tol or n >= max_iter:
            return FixedPointRun(t2, trace, n, move < tol, kept, refused)
        # r = θ₁ − θ₀ and v = θ₂ − 2θ₁ + θ₀ = (θ₂ − θ₁) − r in place: r takes θ₁'s buffer (θ₁ is not used again) and
        # the extrapolated point one reused buffer, the same operations in the same order as the expressions
        # ``t1 - theta``, ``t2 - t1 - r`` and ``theta + (2a) r + a² v`` (so the same bits): θ₀, r, θ₂, v, the
        # extrapolated point and F of it are the θ-sized arrays alive, ten before (docs/scale.md, memory laws)
        if v_buf is None:
            v_buf, cand = np.empty_like(theta), np.empty_like(theta)
        v = np.subtract(t2, t1, out=v_buf)
        r = np.subtract(t1, theta, out=t1)
        v -= r
        sr, sv = float(r @ r), float(v @ v)
        a = math.sqrt(sr / sv) if sv > 0 else step_max
        a = min(max(a, 1.0), step_max)
        at_max = a == step_max
        tp = t2
        for _ in range(max_halvings):
            if a <= 1.0:
                break
            _extrapolate(theta, r, v, a, cand)
            if _inside(cand, lower, upper):
                tp = cand
                break
            a, at_max = (a + 1.0) / 2.0, False
        if tp is t2:  # a = 1: the plain EM point, nothing to check
            if at_max:
                step_max *= mstep
            theta = t2
            continue
        t3, obj_p, vp = step(tp)
        n += 1
        if math.isfinite(obj_p) and obj_p >= obj1 - 1e-12 * abs(obj1):
            kept += 1
            trace.append(vp)
            if at_max:
                step_max *= mstep
            move = _moved(t3, tp)
            if monitor is not None:
                monitor(n, move)
            if move < tol:
                return FixedPointRun(t3, trace, n, True, kept, refused)
            theta = t3
        else:
            refused += 1
            if at_max:
                step_max = max(step_max0, step_max / mstep)
            theta = t2
        if n >= max_iter:
            return FixedPointRun(theta, trace, n, False, kept, refused)
