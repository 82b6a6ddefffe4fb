"""Linearized Bregman Iterations for robust HodgeRank (spec robust-hodgerank.md §4).

* Algorithm 2 (:func:`lbi_alg2`): gradient steps on θ, dual accumulation on z, ``γ = κ·shrink(z)``;
* Algorithm 3 (:func:`lbi_alg3`): the θ-step replaced by the exact LS minimiser (projected problem),
  one Laplacian solve (reused factorisation) per iteration;
* Algorithm 4 (:func:`sync_lbi`): synchronous parallel Algorithm 2 over row / item blocks on a thread
  pool (numpy and scipy.sparse mat-vecs release the GIL); its iterates equal Algorithm 2's up to the
  summation order of the per-block partial gradients.

One run returns the whole regularisation path: every comparison's entry time (the first ``t = kΔt``
with ``γ_k ≠ 0``), γ at checkpoints, and the state at the early-stopping iterate chosen by the stop rule.

Conventions (spec §10): ``γ^{k+1} = κ·shrink(z^{k+1})`` (no one-step lag); loss ``½‖y − Xθ − γ‖²_W``;
weights are replication counts, so ``z`` is updated with the *unweighted* residual and θ with ``XᵀW r``
(the row-expanded problem has identical z and γ on replicated rows).

Early stopping (spec §4.4), ``stop_rule``:

* ``'budget'``: first iterate whose flagged weight ``Σ_{γ_k≠0} w_k`` reaches ``budget·Σw``;
* ``'time'``: first iterate with ``t_k ≥ t_stop`` (fixed t / k);
* ``'discrepancy'`` [our addition]: first iterate with ``‖P(y − γ)‖²_W ≤ σ̂²·l_w`` (``l_w = Σw − n + c``);
  Algorithm 2 / 4 use their current residual ``‖y − Xθ − γ‖_W ≥ ‖P(y − γ)‖_W`` (conservative);
* ``'cv'``: random-projection cross-validation over t (spec §3.4.2 with t in place of 1/λ), small m;
* ``'none'``: run to ``t_max`` / ``max_iter``.

The run continues after the stop iterate up to ``t_max`` (if given) to extend the path; the stop
iterate's state is what is reported as the fit. Every run is capped by ``max_iter`` (a RuntimeWarning
is issued if the rule has not fired by then); Algorithm 3 also ends as soon as ``P(y − γ) = 0`` (the
path is exhausted: nothing can change any more). Theory (spec §5, Thm 4.2): stopping near
``τ̄ ≈ 1/λ̄`` gives sign-consistent γ under the irrepresentability condition.
"""

from __future__ import annotations

import itertools
import logging
import math
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.ranking.hodge import (
    HUBER_A,
    HUBER_M,
    ComparisonGraph,
    LaplacianSolver,
    RobustRankingResult,
    _cv_folds,
    _group_or_identity,
    _prepare,
    _rank_desc,
    assemble_robust_result,
    cycle_basis,
    cycle_projector,
    hodgerank_scores,
    huber_concomitant_scale,
    laplacian_lambda_max,
    shrink,
    wdot,
)

logger = logging.getLogger(__name__)

__all__ = ["LBIPath", "cv_stop_time", "fit_lbi", "lbi", "lbi_alg2", "lbi_alg3", "sync_lbi"]

StopRule = Literal["budget", "time", "discrepancy", "cv", "none"]


@dataclass(frozen=True)
class LBIPath:
    """Result of one LBI run (spec §4.4).

    Attributes
    ----------
    algorithm : str
        ``'alg2'``, ``'alg3'`` or ``'sync'``.
    kappa, dt, h : float
        Damping κ, step Δt and ``h = κΔt``.
    theta, gamma, z : numpy.ndarray
        State at the stop iterate (θ for Algorithm 3 is the exact ``L†XᵀW(y − γ)``).
    stop_iter : int
        Index k of the stop iterate (``t = k·Δt``).
    stop_time : float
    stop_rule : str
    stop_fired : bool
        False if the stop rule never fired before ``max_iter`` (then the last iterate is reported).
        Also True when Algorithm 3's path was exhausted (``P(y − γ) = 0``, nothing can change any more)
        before the rule fired; the exhausted iterate is then reported.
    n_iter : int
        Iterations run (≥ ``stop_iter``; more when the path was extended to ``t_max``).
    theta_end, gamma_end, z_end : numpy.ndarray
        State after the last iteration.
    entry_time : numpy.ndarray
        (m,) ``(k+1)Δt`` of the first iteration with ``γ_k ≠ 0``; ``inf`` if never.
    entry_sign : numpy.ndarray
        (m,) sign of γ at entry (0 if never).
    crossing_time : numpy.ndarray
        (m,) linearly interpolated time at which ``|z_k|`` crossed 1 (tie-breaker for rows entering at
        the same step); ``inf`` if never.
    order_key : numpy.ndarray
        (m,) larger = more outlying: ``−crossing_time`` for rows that entered, ``−t_end/|z_end|`` (linear
        extrapolation of the crossing) for the others.
    trace : pandas.DataFrame
        Per iterate ``iteration, t, support_size, support_weight, residual_norm`` (``residual_norm`` =
        ``‖P(y−γ)‖_W`` for Algorithm 3, ``‖y − Xθ − γ‖_W`` for Algorithms 2 and 4).
    checkpoint_iters : numpy.ndarray
        Iterations at which γ was stored.
    checkpoint_gammas : scipy.sparse.csc_matrix
        (m × K) γ at the checkpoints.
    """

    algorithm: str
    kappa: float
    dt: float
    h: float
    theta: np.ndarray
    gamma: np.ndarray
    z: np.ndarray
    stop_iter: int
    stop_time: float
    stop_rule: str
    stop_fired: bool
    n_iter: int
    theta_end: np.ndarray
    gamma_end: np.ndarray
    z_end: np.ndarray
    entry_time: np.ndarray
    entry_sign: np.ndarray
    crossing_time: np.ndarray
    order_key: np.ndarray
    trace: pd.DataFrame
    checkpoint_iters: np.ndarray
    checkpoint_gammas: sp.csc_matrix

    @property
    def path_rank(self) -> np.ndarray:
        """(m,) 1 = first row to enter the path."""
        return _rank_desc(self.order_key)

    @property
    def support(self) -> np.ndarray:
        """Bool mask of rows flagged at the stop iterate."""
        return cast(np.ndarray, self.gamma != 0)


class _Monitor:
    """Entry bookkeeping, trace, checkpoints and the stop rule shared by Algorithms 2–4."""

    def __init__(
        self,
        g: ComparisonGraph,
        dt: float,
        *,
        stop_rule: str,
        budget: float,
        t_stop: float | None,
        resid_target: float | None,
        t_max: float | None,
        max_iter: int,
        checkpoint_every: int | None,
    ) -> None:
        m = g.m
        self.w = g.w
        self.dt = dt
        self.entered = np.zeros(m, dtype=bool)
        self.entry_iter = np.full(m, -1, dtype=np.int64)
        self.entry_sign = np.zeros(m, dtype=np.int8)
        self.crossing = np.full(m, np.inf)
        self.stop_rule = stop_rule
        self.budget_w = budget * float(g.w.sum())
        self.t_stop = t_stop
        self.resid_target = resid_target
        self.max_iter = int(max_iter)
        self.k_tmax = None if t_max is None else math.ceil(t_max / dt - 1e-9)
        if checkpoint_every is None:
            horizon = self.k_tmax if self.k_tmax is not None else None
            checkpoint_every = max(1, horizon // 50) if horizon else 100
        self.every = int(checkpoint_every)
        self.tr_k: list[int] = []
        self.tr_size: list[int] = []
        self.tr_w: list[float] = []
        self.tr_res: list[float] = []
        self.cp_iters: list[int] = []
        self.cp_cols: list[np.ndarray] = []
        self.cp_vals: list[np.ndarray] = []
        self.stop_iter: int | None = None
        self.snapshot: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.exhausted = False
        self.res_floor = 1e-13 * (np.sqrt(wdot(g.w, g.y, g.y)) + 1e-300)

    def record(
        self, sl: slice, k1: int, z: np.ndarray, gamma: np.ndarray, dz: np.ndarray | _DZView
    ) -> tuple[int, float]:
        """Record first entries among rows ``sl`` at iterate ``k1``; return (support size, weight) of ``sl``.

        ``dz`` is the z-increment of this step (for the interpolated crossing time). Thread-safe for
        disjoint slices.
        """
        gs = gamma[sl]
        nz = gs != 0
        new = nz & ~self.entered[sl]
        if new.any():
            idx = np.flatnonzero(new) + (sl.start or 0)
            self.entered[idx] = True
            self.entry_iter[idx] = k1
            self.entry_sign[idx] = np.sign(gamma[idx]).astype(np.int8)
            zn = np.abs(z[idx])
            zo = np.abs(z[idx] - dz[idx])
            step = zn - zo
            frac = np.where(step > 0, np.clip((zn - 1.0) / np.where(step > 0, step, 1.0), 0.0, 1.0), 1.0)
            self.crossing[idx] = (k1 - frac) * self.dt
        return int(np.count_nonzero(nz)), float(self.w[sl][nz].sum())

    def observe(self, k: int, size: int, weight: float, resid: float, state: Any) -> bool:
        """Log iterate k; fire the stop rule; return True when the run should end after this iterate.

        ``state()`` returns copies of (θ, γ, z) at iterate k (called only when needed).
        """
        self.tr_k.append(k)
        self.tr_size.append(size)
        self.tr_w.append(weight)
        self.tr_res.append(resid)
        fire = False
        if self.stop_iter is None:
            rule = self.stop_rule
            if rule == "budget":
                fire = weight >= self.budget_w * (1 - 1e-12)
            elif rule in ("time", "cv"):
                assert self.t_stop is not None  # required for these rules (checked on entry)
                fire = k * self.dt >= self.t_stop * (1 - 1e-12)
            elif rule == "discrepancy":
                assert self.resid_target is not None  # set from sigma for this rule (checked on entry)
                fire = resid * resid <= self.resid_target
            elif rule == "none":
                fire = k >= (self.k_tmax if self.k_tmax is not None else self.max_iter)
            if fire:
                self.stop_iter = k
                self.snapshot = state()
        if fire or k % self.every == 0:
            gam = state()[1] if not fire else self.snapshot[1]  # type: ignore[index]  # taken just above
            nz = np.flatnonzero(gam)
            self.cp_iters.append(k)
            self.cp_cols.append(nz)
            self.cp_vals.append(gam[nz])
        if k >= self.max_iter:
            return True
        if self.stop_iter is None:
            return False
        return self.k_tmax is None or k >= self.k_tmax

    def exhaust(self, k: int, state: Any) -> None:
        """The path is complete at iterate k (``P(y − γ) = 0``: z and γ no longer move)."""
        logger.info("LBI path exhausted at iteration %d (cycle-space residual vanished)", k)
        self.exhausted = True
        if self.stop_iter is None:
            self.stop_iter = k
            self.snapshot = state()
            if self.cp_iters and self.cp_iters[-1] == k:
                return
            nz = np.flatnonzero(self.snapshot[1])
            self.cp_iters.append(k)
            self.cp_cols.append(nz)
            self.cp_vals.append(self.snapshot[1][nz])

    def finish(
        self,
        *,
        algorithm: str,
        kappa: float,
        h: float,
        m: int,
        k_last: int,
        end_state: tuple[np.ndarray, np.ndarray, np.ndarray],
        z_end: np.ndarray,
    ) -> LBIPath:
        fired = self.stop_iter is not None
        if self.exhausted:
            fired = True
        if not fired:
            warnings.warn(
                f"LBI ({algorithm}): stop rule '{self.stop_rule}' did not fire within max_iter={self.max_iter} "
                f"(t = {k_last * self.dt:.4g}); reporting the last iterate",
                RuntimeWarning,
                stacklevel=3,
            )
            self.stop_iter = k_last
            self.snapshot = end_state
            if not self.cp_iters or self.cp_iters[-1] != k_last:
                nz = np.flatnonzero(end_state[1])
                self.cp_iters.append(k_last)
                self.cp_cols.append(nz)
                self.cp_vals.append(end_state[1][nz])
        assert self.snapshot is not None and self.stop_iter is not None  # set at the stop or just above
        theta, gamma, z = self.snapshot
        t_end = k_last * self.dt
        entry_time = np.where(self.entry_iter >= 0, self.entry_iter * self.dt, np.inf)
        az = np.abs(z_end)
        with np.errstate(divide="ignore"):
            est = np.where(az > 0, t_end / np.where(az > 0, az, 1.0), np.inf)
        key = np.where(self.entered, -self.crossing, -np.maximum(est, t_end))
        ptr = np.r_[0, np.cumsum([c.size for c in self.cp_cols])]
        cps = sp.csc_matrix(
            (
                np.concatenate(self.cp_vals) if self.cp_vals else np.zeros(0),
                np.concatenate(self.cp_cols) if self.cp_cols else np.zeros(0, np.int64),
                ptr,
            ),
            shape=(m, len(self.cp_cols)),
        )
        trace = pd.DataFrame(
            {
                "iteration": np.asarray(self.tr_k, dtype=np.int64),
                "t": np.asarray(self.tr_k, dtype=float) * self.dt,
                "support_size": np.asarray(self.tr_size, dtype=np.int64),
                "support_weight": np.asarray(self.tr_w, dtype=float),
                "residual_norm": np.asarray(self.tr_res, dtype=float),
            }
        )
        return LBIPath(
            algorithm=algorithm,
            kappa=float(kappa),
            dt=float(self.dt),
            h=float(h),
            theta=theta,
            gamma=gamma,
            z=z,
            stop_iter=int(self.stop_iter),
            stop_time=float(self.stop_iter * self.dt),
            stop_rule=self.stop_rule,
            stop_fired=fired or self.exhausted,
            n_iter=int(k_last),
            theta_end=end_state[0],
            gamma_end=end_state[1],
            z_end=end_state[2],
            entry_time=entry_time,
            entry_sign=self.entry_sign,
            crossing_time=self.crossing,
            order_key=key,
            trace=trace,
            checkpoint_iters=np.asarray(self.cp_iters, dtype=np.int64),
            checkpoint_gammas=cps,
        )


def _theta0(g: ComparisonGraph, solver: LaplacianSolver | None, theta0: Any) -> np.ndarray:
    if isinstance(theta0, str):
        if theta0 == "ls":
            return hodgerank_scores(g, solver)
        if theta0 == "zero":
            return np.zeros(g.n)
        raise ValueError(f"theta0 must be 'ls', 'zero' or an array, got {theta0!r}")
    t = np.asarray(theta0, dtype=float).ravel()
    if t.size != g.n:
        raise ValueError(f"theta0 has {t.size} entries, expected n = {g.n}")
    return t.copy()


def _check_stop_args(stop_rule: str, t_stop: float | None, resid_target: float | None, budget: float) -> None:
    if stop_rule not in ("budget", "time", "discrepancy", "cv", "none"):
        raise ValueError(f"unknown stop_rule {stop_rule!r}")
    if stop_rule in ("time", "cv") and (t_stop is None or not t_stop >= 0):
        raise ValueError(f"stop_rule={stop_rule!r} needs t_stop >= 0")
    if stop_rule == "discrepancy" and resid_target is None:
        raise ValueError("stop_rule='discrepancy' needs sigma")
    if stop_rule == "budget" and not 0 < budget <= 1:
        raise ValueError(f"budget must be in (0, 1], got {budget}")


def _alg2_steps(
    g: ComparisonGraph, kappa: float, dt: float | None, guard: bool, lam_max: float | None
) -> tuple[float, float]:
    """Default ``h = 1/(λ_max(L)+1)``, ``Δt = h/κ``; raise if ``h(λ_max(L)+1) ≥ 2`` (Remark 1)."""
    if not kappa > 0:
        raise ValueError(f"kappa must be > 0, got {kappa}")
    lm = laplacian_lambda_max(g.L) if lam_max is None else float(lam_max)
    if dt is None:
        h = 1.0 / (lm + 1.0)
        dt = h / kappa
    h = kappa * dt
    if guard and h * (lm + 1.0) >= 2.0:
        raise ValueError(
            f"LBI step too large: kappa*dt*(lambda_max(L)+1) = {h * (lm + 1.0):.4g} >= 2 "
            f"(lambda_max(L) = {lm:.4g}); the iteration would diverge. Use dt < {2.0 / ((lm + 1.0) * kappa):.4g}"
        )
    return float(h), float(dt)


def _resid_target(g: ComparisonGraph, sigma: float | None) -> float | None:
    if sigma is None:
        return None
    l_w = float(g.w.sum()) - g.n + g.n_components
    return float(sigma) ** 2 * l_w


def lbi_alg2(
    g: ComparisonGraph,
    *,
    kappa: float = 100.0,
    dt: float | None = None,
    theta0: Literal["ls", "zero"] | np.ndarray = "ls",
    stop_rule: StopRule = "budget",
    budget: float = 0.05,
    t_stop: float | None = None,
    sigma: float | None = None,
    t_max: float | None = None,
    max_iter: int = 200_000,
    checkpoint_every: int | None = None,
    solver: LaplacianSolver | None = None,
    guard: bool = True,
    lam_max: float | None = None,
) -> LBIPath:
    """Algorithm 2 — LBI for the Huber-LASSO problem (spec §4.1).

    ::

        r^k     = y − Xθ^k − γ^k
        θ^{k+1} = θ^k + κΔt · XᵀW r^k
        z^{k+1} = z^k + Δt · r^k
        γ^{k+1} = κ · shrink(z^{k+1}, 1)

    Step condition (Remark 1): ``κΔt(λ_max(L) + 1) < 2``; default ``h = κΔt = 1/(λ_max(L)+1)``.

    Parameters
    ----------
    g : ComparisonGraph
    kappa : float
        Damping κ (larger = closer to the unbiased inverse-scale-space limit, more iterations per unit t).
    dt : float, optional
        Step Δt (default ``1/((λ_max(L)+1)κ)``).
    theta0 : {'ls', 'zero'} or array
        Initial θ (LS warm start preferred; spec §10.3).
    stop_rule, budget, t_stop, sigma : see module docstring.
    t_max : float, optional
        Extend the run (path) up to this time after the stop iterate.
    max_iter : int
        Hard cap on iterations (RuntimeWarning if the stop rule has not fired by then).
    checkpoint_every : int, optional
        Store γ every this many iterations (default: ~50 checkpoints over ``t_max``, else every 100).
    solver : LaplacianSolver, optional
        Only used for the LS warm start.
    guard : bool
        Raise if the step condition fails (set False only to demonstrate divergence).
    lam_max : float, optional
        Precomputed ``λ_max(L)``.

    Returns
    -------
    LBIPath
    """
    h, dt = _alg2_steps(g, kappa, dt, guard, lam_max)
    target = _resid_target(g, sigma)
    _check_stop_args(stop_rule, t_stop, target, budget)
    theta = _theta0(g, solver, theta0)
    m = g.m
    y, w, X = g.y, g.w, g.X
    # Xᵀ as the CSC view of X: its matvec streams over the rows of X and scatters into the (cache-resident)
    # n-vector, ~2.5× faster than a CSR Xᵀ gathering from the m-vector
    XT = X.T
    z = np.zeros(m)
    gam = np.zeros(m)
    mon = _Monitor(
        g,
        dt,
        stop_rule=stop_rule,
        budget=budget,
        t_stop=t_stop,
        resid_target=target,
        t_max=t_max,
        max_iter=max_iter,
        checkpoint_every=checkpoint_every,
    )
    full = slice(0, m)
    size, weight = 0, 0.0
    k = 0
    while True:
        r = y - X @ theta - gam
        res = float(np.sqrt(wdot(w, r, r)))
        if not np.isfinite(res):
            warnings.warn(f"LBI (alg2) diverged at iteration {k}", RuntimeWarning, stacklevel=2)
            mon.max_iter = k
        if mon.observe(k, size, weight, res, lambda: (theta.copy(), gam.copy(), z.copy())):
            break
        theta = theta + h * (XT @ (w * r))
        dz = dt * r
        z += dz
        gam = kappa * shrink(z)
        k += 1
        size, weight = mon.record(full, k, z, gam, dz)
    return mon.finish(
        algorithm="alg2", kappa=kappa, h=h, m=m, k_last=k, end_state=(theta.copy(), gam.copy(), z.copy()), z_end=z
    )


def lbi_alg3(
    g: ComparisonGraph,
    *,
    kappa: float = 100.0,
    dt: float | None = None,
    stop_rule: StopRule = "budget",
    budget: float = 0.05,
    t_stop: float | None = None,
    sigma: float | None = None,
    t_max: float | None = None,
    max_iter: int = 100_000,
    checkpoint_every: int | None = None,
    solver: LaplacianSolver | None = None,
) -> LBIPath:
    """Algorithm 3 — LBI on the projected problem (spec §4.2).

    ::

        θ^k     = L†XᵀW(y − γ^k)                 (one solve; factorisation reused)
        z^{k+1} = z^k + Δt · P(y − γ^k),  P(y − γ) = y − γ − Xθ^k
        γ^{k+1} = κ · shrink(z^{k+1}, 1)

    Step condition (Thm 4.2): ``κΔt < 2`` since ``‖P‖ = 1``; default ``Δt = 1/κ``.

    Parameters
    ----------
    See :func:`lbi_alg2`.

    Returns
    -------
    LBIPath
        ``theta`` is the exact LS fit of ``y − γ`` at the stop iterate.
    """
    if not kappa > 0:
        raise ValueError(f"kappa must be > 0, got {kappa}")
    dt = 1.0 / kappa if dt is None else float(dt)
    if kappa * dt >= 2.0:
        raise ValueError(f"LBI (alg3) step too large: kappa*dt = {kappa * dt:.4g} >= 2")
    target = _resid_target(g, sigma)
    _check_stop_args(stop_rule, t_stop, target, budget)
    solver = solver or LaplacianSolver.from_graph(g)
    m = g.m
    y, w = g.y, g.w
    z = np.zeros(m)
    gam = np.zeros(m)
    theta = None
    project = cycle_projector(g, solver)
    mon = _Monitor(
        g,
        dt,
        stop_rule=stop_rule,
        budget=budget,
        t_stop=t_stop,
        resid_target=target,
        t_max=t_max,
        max_iter=max_iter,
        checkpoint_every=checkpoint_every,
    )
    full = slice(0, m)
    size, weight = 0, 0.0
    k = 0
    while True:
        p, theta = project(y - gam, theta)
        res = float(np.sqrt(wdot(w, p, p)))
        snap = lambda: (theta.copy(), gam.copy(), z.copy())  # noqa: E731
        if mon.observe(k, size, weight, res, snap):
            break
        if res <= mon.res_floor:
            mon.exhaust(k, snap)
            break
        dz = dt * p
        z += dz
        gam = kappa * shrink(z)
        k += 1
        size, weight = mon.record(full, k, z, gam, dz)
    return mon.finish(
        algorithm="alg3",
        kappa=kappa,
        h=kappa * dt,
        m=m,
        k_last=k,
        end_state=(theta.copy(), gam.copy(), z.copy()),
        z_end=z,
    )


def _blocks(total: int, parts: int, sizes: Sequence[int] | None) -> list[slice]:
    if sizes is None:
        bounds = np.linspace(0, total, parts + 1).round().astype(int)
    else:
        sizes = [int(s) for s in sizes]
        if len(sizes) != parts or sum(sizes) != total or min(sizes) < 0:
            raise ValueError(f"block sizes {sizes} must be {parts} non-negative ints summing to {total}")
        bounds = np.r_[0, np.cumsum(sizes)]
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def sync_lbi(
    g: ComparisonGraph,
    *,
    n_workers: int = 2,
    row_blocks: Sequence[int] | None = None,
    item_blocks: Sequence[int] | None = None,
    kappa: float = 100.0,
    dt: float | None = None,
    theta0: Literal["ls", "zero"] | np.ndarray = "ls",
    stop_rule: StopRule = "budget",
    budget: float = 0.05,
    t_stop: float | None = None,
    sigma: float | None = None,
    t_max: float | None = None,
    max_iter: int = 200_000,
    checkpoint_every: int | None = None,
    solver: LaplacianSolver | None = None,
    guard: bool = True,
    lam_max: float | None = None,
    executor: ThreadPoolExecutor | None = None,
) -> LBIPath:
    """Algorithm 4 — Sync-LBI: synchronous parallel Algorithm 2 (spec §4.3).

    Rows are split into P contiguous blocks ``I_p`` and items into P blocks ``J_p``. Each iteration runs
    two parallel phases on a thread pool separated by barriers (the ``map`` joins)::

        phase A, worker p:  res_{I_p} = y_{I_p} − X_{I_p}θ^k − γ^k_{I_p};  upd^p = X_{I_p}ᵀW_{I_p} res_{I_p}
        (main: stop rule / trace on iterate k)
        phase B, worker p:  z_{I_p} += Δt·res_{I_p};  γ_{I_p} = κ·shrink(z_{I_p});
                            θ_{J_p} += κΔt · Σ_q upd^q_{J_p}

    The only cross-worker traffic is the n-vector reduction. Iterates equal :func:`lbi_alg2`'s with the
    same arguments up to floating-point summation order.

    Parameters
    ----------
    n_workers : int
        P (threads).
    row_blocks, item_blocks : sequence of int, optional
        Block sizes (default: as even as possible).
    executor : ThreadPoolExecutor, optional
        Reuse an existing pool (must have ≥ 1 worker); by default one with ``n_workers`` threads.
    Other parameters as in :func:`lbi_alg2`.

    Returns
    -------
    LBIPath
    """
    if n_workers < 1:
        raise ValueError("n_workers must be >= 1")
    h, dt = _alg2_steps(g, kappa, dt, guard, lam_max)
    target = _resid_target(g, sigma)
    _check_stop_args(stop_rule, t_stop, target, budget)
    theta = _theta0(g, solver, theta0)
    m, n = g.m, g.n
    P = int(n_workers)
    rows = _blocks(m, P, row_blocks)
    cols = _blocks(n, P, item_blocks)
    y, w = g.y, g.w
    Xb = [g.X[s] for s in rows]
    XTb = [M.T for M in Xb]  # CSC views (see lbi_alg2)
    z = np.zeros(m)
    gam = np.zeros(m)
    r = np.zeros(m)
    upd = np.zeros((P, n))
    part_res = np.zeros(P)
    part_size = np.zeros(P, dtype=np.int64)
    part_w = np.zeros(P)
    mon = _Monitor(
        g,
        dt,
        stop_rule=stop_rule,
        budget=budget,
        t_stop=t_stop,
        resid_target=target,
        t_max=t_max,
        max_iter=max_iter,
        checkpoint_every=checkpoint_every,
    )
    state = {"k": 0}

    def phase_a(p: int) -> None:
        s = rows[p]
        rp = y[s] - Xb[p] @ theta - gam[s]
        r[s] = rp
        wr = w[s] * rp
        part_res[p] = float(np.einsum("i,i->", wr, rp))
        upd[p] = XTb[p] @ wr

    def phase_b(p: int) -> None:
        s = rows[p]
        dz = dt * r[s]
        z[s] += dz
        gam[s] = kappa * shrink(z[s])
        c = cols[p]
        if c.stop > c.start:
            acc = upd[0, c].copy()
            for q in range(1, P):
                acc += upd[q, c]
            theta[c] += h * acc
        # entries of this block at iterate k+1 (dz only needed on the block)
        dz_full = _DZView(s, dz)
        part_size[p], part_w[p] = mon.record(s, state["k"] + 1, z, gam, dz_full)

    own = executor is None
    pool = executor or ThreadPoolExecutor(max_workers=P, thread_name_prefix="sync-lbi")
    try:
        k = 0
        while True:
            list(pool.map(phase_a, range(P)))
            res = float(np.sqrt(part_res.sum()))
            if not np.isfinite(res):
                warnings.warn(f"Sync-LBI diverged at iteration {k}", RuntimeWarning, stacklevel=2)
                mon.max_iter = k
            snap = lambda: (theta.copy(), gam.copy(), z.copy())  # noqa: E731
            if mon.observe(k, int(part_size.sum()), float(part_w.sum()), res, snap):
                break
            state["k"] = k
            list(pool.map(phase_b, range(P)))
            k += 1
    finally:
        if own:
            pool.shutdown(wait=True)
    return mon.finish(
        algorithm="sync", kappa=kappa, h=h, m=m, k_last=k, end_state=(theta.copy(), gam.copy(), z.copy()), z_end=z
    )


class _DZView:
    """Index adaptor: the block's z-increment addressed with global row indices (for the monitor)."""

    def __init__(self, s: slice, dz: np.ndarray) -> None:
        self.start = s.start
        self.dz = dz

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        return cast(np.ndarray, self.dz[np.asarray(idx) - self.start])


def lbi(g: ComparisonGraph, *, algorithm: Literal[2, 3, 4] = 3, **kwargs: Any) -> LBIPath:
    """Dispatch to :func:`lbi_alg2` (2), :func:`lbi_alg3` (3) or :func:`sync_lbi` (4)."""
    if algorithm == 2:
        return lbi_alg2(g, **kwargs)
    if algorithm == 3:
        return lbi_alg3(g, **kwargs)
    if algorithm == 4:
        return sync_lbi(g, **kwargs)
    raise ValueError(f"algorithm must be 2, 3 or 4, got {algorithm!r}")


def cv_stop_time(
    g: ComparisonGraph,
    *,
    kappa: float = 100.0,
    dt: float | None = None,
    t_max: float,
    folds: int = 5,
    seed: int = 0,
    rescale: Literal["sqrt", "linear"] = "sqrt",
    n_eval: int = 200,
    max_rows: int = 4000,
) -> tuple[float, pd.DataFrame]:
    """Random-projection cross-validation of the LBI stopping time (spec §4.4(b), §3.4.2).

    The l rows of ``Ψ = QᵀW^{1/2}`` (dense cycle basis, small m) are split into K folds; on the training
    rows the projected LBI ``z += Δt·W^{-1/2}Q_trQ_trᵀW^{1/2}(y − γ)``, ``γ = κ·shrink(z)`` runs to ``t_max``
    and is scored at ``n_eval`` times by ``‖Ψ_val(y − γ_t)‖²``. The minimising training time is mapped to
    the full problem by ``t = t_tr·s`` with ``s = √(l_tr/l)`` (spec's choice) or ``l_tr/l`` (``'linear'``),
    mirroring ``λ_full = λ_tr/s``.

    Returns
    -------
    (t_star, table)
        ``table``: ``t`` (full-problem scale), ``cv_error``, ``cv_se``.
    """
    dt = 1.0 / kappa if dt is None else float(dt)
    Q = cycle_basis(g, max_rows=max_rows)
    l = Q.shape[1]
    if l < folds or folds < 2:
        raise ValueError(f"cv needs at least {max(folds, 2)} cycle dimensions (have l = {l})")
    sw = np.sqrt(g.w)
    K = math.ceil(t_max / dt)
    eval_at = np.unique(np.linspace(0, K, n_eval).round().astype(int))
    errs = np.zeros((folds, eval_at.size))
    scale = []
    for f, val in enumerate(_cv_folds(l, folds, seed)):
        tr = np.setdiff1d(np.arange(l), val)
        Qt, Qv = Q[:, tr], Q[:, val]
        scale.append(np.sqrt(tr.size / l) if rescale == "sqrt" else tr.size / l)
        z = np.zeros(g.m)
        gam = np.zeros(g.m)
        e = 0
        for k in range(K + 1):
            if k == eval_at[e]:
                errs[f, e] = float(np.sum((Qv.T @ (sw * (g.y - gam))) ** 2))
                e += 1
                if e == eval_at.size:
                    break
            z += dt * (Qt @ (Qt.T @ (sw * (g.y - gam)))) / sw
            gam = kappa * shrink(z)
    s = float(np.mean(scale))
    mean = errs.mean(axis=0)
    se = errs.std(axis=0, ddof=1) / np.sqrt(folds)
    best = int(np.argmin(mean))
    t_full = eval_at * dt * s
    return float(t_full[best]), pd.DataFrame({"t": t_full, "cv_error": mean, "cv_se": se})


def fit_lbi(
    comparisons: pd.DataFrame | ComparisonGraph,
    *,
    items: Sequence[Any] | None = None,
    allow_disconnected: bool = False,
    algorithm: Literal[2, 3, 4] = 3,
    kappa: float = 100.0,
    dt: float | None = None,
    stop_rule: StopRule = "budget",
    budget: float = 0.05,
    t_stop: float | None = None,
    sigma: float | None = None,
    t_max: float | None = None,
    max_iter: int | None = None,
    theta0: Literal["ls", "zero"] = "ls",
    n_workers: int = 2,
    group_identical: bool = True,
    debias: bool = True,
    cv_folds: int = 5,
    cv_rescale: Literal["sqrt", "linear"] = "sqrt",
    seed: int = 0,
    solver: Literal["auto", "splu", "cg"] = "auto",
    diagnostics: bool = True,
    checkpoint_every: int | None = None,
) -> RobustRankingResult:
    """Outlier detection and robust ranking by LBI (spec §4), returning the output tables.

    Parameters
    ----------
    comparisons : pandas.DataFrame or ComparisonGraph
    items, allow_disconnected : see :func:`crowdflow.ranking.hodge.fit_hodgerank`.
    algorithm : {2, 3, 4}
        Algorithm 2 (gradient θ-steps), 3 (exact θ; default: Δt = 1/κ whatever the degrees) or 4
        (Sync-LBI, ``n_workers`` threads).
    kappa, dt : float
        κ (default 100) and Δt (default 1/κ for Alg. 3, ``1/((λ_max(L)+1)κ)`` for Alg. 2/4).
    stop_rule : {'budget', 'time', 'discrepancy', 'cv', 'none'}
        Early-stopping rule (module docstring). ``'discrepancy'`` uses ``sigma`` or, if None, the Huber
        concomitant scale estimate. ``'cv'`` needs ``t_max`` (the CV horizon).
    budget, t_stop, sigma : float
        Rule parameters.
    t_max : float, optional
        Extend the path to this time (entry times for more rows).
    max_iter : int, optional
        Iteration cap (default 100 000 for Alg. 3, 200 000 otherwise).
    theta0 : {'ls', 'zero'}
        Initial θ for Alg. 2/4.
    group_identical : bool
        Merge identical rows first (exactly equivalent; spec §1.3).
    debias : bool
        Report LS-refit scores without the flagged rows as ``score``.

    Returns
    -------
    RobustRankingResult
    """
    g, rep = _prepare(comparisons, items, allow_disconnected)
    gf, group, sign = _group_or_identity(g, group_identical)
    sol = LaplacianSolver.from_graph(gf, method=solver)
    theta_ls = hodgerank_scores(gf, sol)
    params: dict[str, Any] = {
        "method": "lbi",
        "algorithm": int(algorithm),
        "kappa": float(kappa),
        "stop_rule": stop_rule,
        "solver": sol.method,
        "group_identical": group_identical,
    }
    if stop_rule == "discrepancy" and sigma is None:
        est = huber_concomitant_scale(gf, M=HUBER_M, a=HUBER_A, solver=sol)
        sigma = est.sigma
        params["sigma_source"] = "huber_concomitant"
    if stop_rule == "cv":
        if t_max is None:
            raise ValueError("stop_rule='cv' needs t_max (the cross-validation horizon)")
        dt_cv = dt if (dt is not None and algorithm == 3) else 1.0 / kappa
        t_stop, _ = cv_stop_time(gf, kappa=kappa, dt=dt_cv, t_max=t_max, folds=cv_folds, seed=seed, rescale=cv_rescale)
        params.update(cv_folds=cv_folds, cv_rescale=cv_rescale)
    common: dict[str, Any] = {
        "kappa": kappa,
        "dt": dt,
        "stop_rule": stop_rule,
        "budget": budget,
        "t_stop": t_stop,
        "sigma": sigma,
        "t_max": t_max,
        "checkpoint_every": checkpoint_every,
    }
    if algorithm == 3:
        path = lbi_alg3(gf, solver=sol, max_iter=max_iter or 100_000, **common)
    elif algorithm == 2:
        path = lbi_alg2(gf, solver=sol, theta0=theta0, max_iter=max_iter or 200_000, **common)
    elif algorithm == 4:
        path = sync_lbi(gf, solver=sol, theta0=theta0, n_workers=n_workers, max_iter=max_iter or 200_000, **common)
        params["n_workers"] = n_workers
    else:
        raise ValueError(f"algorithm must be 2, 3 or 4, got {algorithm!r}")
    params.update(
        dt=path.dt,
        h=path.h,
        budget=budget,
        t_stop=path.stop_time,
        stop_iter=path.stop_iter,
        n_iter=path.n_iter,
        stop_fired=path.stop_fired,
        sigma=sigma,
        t_max=t_max,
    )
    theta_rob = path.theta
    if algorithm == 3:
        theta_rob = sol.solve(gf.divergence(gf.y - path.gamma))
    logger.info(
        "LBI (algorithm %s, kappa=%g, dt=%.3g): stop rule %r at t=%.4g (iteration %d, fired=%s); "
        "%d of %d fitted rows flagged",
        algorithm,
        kappa,
        path.dt,
        stop_rule,
        path.stop_time,
        path.stop_iter,
        path.stop_fired,
        int(np.count_nonzero(path.gamma)),
        gf.m,
    )
    cps = [(i, k * path.dt, path.checkpoint_gammas[:, i]) for i, k in enumerate(path.checkpoint_iters)]
    return assemble_robust_result(
        method="lbi",
        g=g,
        rep=rep,
        gf=gf,
        group=group,
        sign=sign,
        theta_ls=theta_ls,
        theta_robust=theta_rob,
        gamma_fit=path.gamma,
        entry_time_fit=path.entry_time,
        order_key_fit=path.order_key,
        entry_sign_fit=path.entry_sign,
        trace=path.trace,
        checkpoints=cps,
        params=params,
        converged=path.stop_fired,
        debias=debias,
        diagnostics=diagnostics,
        solver_method=solver,
    )
