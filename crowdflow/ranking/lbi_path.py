"""The record of one LBI run and the monitor that keeps it: entry times, trace, checkpoints, stop rules.

:class:`_Monitor` is shared by Algorithms 2, 3 and 4. At every iterate k it records the rows whose γ became
non-zero (entry time ``kΔt``, sign, and the interpolated time at which ``|z_k|`` crossed 1 as a
tie-breaker), the support size and weight, the residual norm, γ at checkpoints, and fires the early-stopping
rule (``stop_rule``):

* ``'budget'``: first iterate whose flagged weight ``Σ_{γ_k≠0} w_k`` reaches ``budget·Σw``;
* ``'time'``: first iterate with ``t_k ≥ t_stop`` (``'adaptive'`` is this rule at ``t_stop = 1/λ*``);
* ``'discrepancy'`` (our addition): first iterate with ``‖P(y − γ)‖²_W ≤ σ²·l_w`` (``l_w = Σw − n + c``);
* ``'none'``: run to ``t_max`` / ``max_iter``.

The state at the stop iterate is the fit; the run may continue to ``t_max`` to extend the path.
:class:`LBIPath` is the result.

See docs/methods/ranking.md §4.4.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.numerics import wdot
from crowdflow.ranking.types import _rank_desc

logger = logging.getLogger(__name__)

__all__ = ["LBIPath"]


@dataclass(frozen=True)
class LBIPath:
    """Result of one LBI run (docs/methods/ranking.md §4.4).

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
            elif rule == "time":
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


def _check_stop_args(stop_rule: str, t_stop: float | None, resid_target: float | None, budget: float) -> None:
    if stop_rule not in ("budget", "time", "discrepancy", "none"):
        raise ValueError(f"unknown stop_rule {stop_rule!r}")
    if stop_rule == "time" and (t_stop is None or not t_stop >= 0):
        raise ValueError(f"stop_rule={stop_rule!r} needs t_stop >= 0")
    if stop_rule == "discrepancy" and resid_target is None:
        raise ValueError("stop_rule='discrepancy' needs sigma")
    if stop_rule == "budget" and not 0 < budget <= 1:
        raise ValueError(f"budget must be in (0, 1], got {budget}")


def _resid_target(g: ComparisonGraph, sigma: float | None) -> float | None:
    if sigma is None:
        return None
    l_w = float(g.w.sum()) - g.n + g.n_components
    return float(sigma) ** 2 * l_w


class _DZView:
    """Index adaptor: the block's z-increment addressed with global row indices (for the monitor)."""

    def __init__(self, s: slice, dz: np.ndarray) -> None:
        self.start = s.start
        self.dz = dz

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        return cast(np.ndarray, self.dz[np.asarray(idx) - self.start])
