"""Linearized Bregman Iterations (LBI) for robust HodgeRank: Algorithms 2, 3 and 4.

With damping κ, step Δt and ``h = κΔt``, every iteration takes a step on the scores θ, accumulates the
residual in a dual variable z and sets ``γ = κ·shrink(z)``; path time ``t = kΔt`` plays the role of 1/λ,
so one run gives the whole regularisation path, and the fit is chosen by early stopping.

* Algorithm 2 (:func:`lbi_alg2`): ``r = y − Xθ − γ``, ``θ += h·XᵀWr``, ``z += Δt·r``, ``γ = κ·shrink(z)``;
  stable for ``h(λ_max(L) + 1) < 2``;
* Algorithm 3 (:func:`lbi_alg3`): the θ-step replaced by the exact LS minimiser, ``z += Δt·P(y − γ)``,
  one Laplacian solve (reused factorisation) per iteration; stable for ``κΔt < 2`` whatever the degrees;
* Algorithm 4 (:func:`sync_lbi`): synchronous parallel Algorithm 2 over row / item blocks on a thread
  pool (numpy and scipy.sparse mat-vecs release the GIL); its iterates equal Algorithm 2's up to the
  summation order of the per-block partial gradients;
* :func:`lbi`: the dispatch over the three.

Conventions: ``γ^{k+1} = κ·shrink(z^{k+1})`` (no one-step lag); loss ``½‖y − Xθ − γ‖²_W``; weights are
replication counts, so ``z`` is updated with the *unweighted* residual and θ with ``XᵀW r`` (the
row-expanded problem has identical z and γ on replicated rows). Entry times, checkpoints, the trace and
the stop rules are kept by :class:`crowdflow.ranking.lbi_path._Monitor`; every run is capped by
``max_iter`` (a RuntimeWarning if the rule has not fired by then), and Algorithm 3 also ends as soon as
``P(y − γ) = 0`` (nothing can change any more). Stopping near ``τ̄ ≈ 1/λ̄`` gives sign-consistent γ
under the irrepresentability condition.

See docs/methods/ranking.md §4.1–4.3 (algorithms), §4.4 (stopping), §4.5 (bias), §5.3 (theory) and §10.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np

from crowdflow.contracts.errors import DegenerateInput
from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.lbi_path import LBIPath, _check_stop_args, _DZView, _Monitor, _resid_target
from crowdflow.ranking.least_squares import LaplacianSolver, cycle_projector, hodgerank_scores, laplacian_lambda_max
from crowdflow.ranking.numerics import shrink, wdot
from crowdflow.ranking.options import LBI_MAX_ITER, StopRule
from crowdflow.ranking.scale import adaptive_lambda

__all__ = ["lbi", "lbi_alg2", "lbi_alg3", "sync_lbi"]


def _adaptive_stop(
    g: ComparisonGraph, solver: LaplacianSolver | None, stop_rule: StopRule, t_stop: float | None
) -> tuple[StopRule, float | None]:
    """``stop_rule='adaptive'`` is the time rule at ``t = 1/λ*`` of the adaptive rule (docs/methods/ranking.md §4.4).

    λ* with the default ``fdr_q`` and ``t_min``; :func:`crowdflow.ranking.fit_lbi` passes the options'
    values as ``stop_rule='time'``. Other rules pass through.
    """
    if stop_rule != "adaptive":
        return stop_rule, t_stop
    return "time", adaptive_lambda(g, solver=solver).t_stop


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
        raise DegenerateInput(
            f"LBI step too large: kappa*dt*(lambda_max(L)+1) = {h * (lm + 1.0):.4g} >= 2 "
            f"(lambda_max(L) = {lm:.4g}); the iteration would diverge. Use dt < {2.0 / ((lm + 1.0) * kappa):.4g}",
            reason="lbi_step_too_large",
        )
    return float(h), float(dt)


def lbi_alg2(
    g: ComparisonGraph,
    *,
    kappa: float = 100.0,
    dt: float | None = None,
    theta0: Literal["ls", "zero"] | np.ndarray = "ls",
    stop_rule: StopRule = "adaptive",
    budget: float = 0.05,
    t_stop: float | None = None,
    sigma: float | None = None,
    t_max: float | None = None,
    max_iter: int = LBI_MAX_ITER[2],
    checkpoint_every: int | None = None,
    solver: LaplacianSolver | None = None,
    guard: bool = True,
    lam_max: float | None = None,
) -> LBIPath:
    """Algorithm 2 — LBI for the Huber-LASSO problem (docs/methods/ranking.md §4.1).

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
        Initial θ (LS warm start preferred; docs/methods/ranking.md §4.1, §10).
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
    stop_rule, t_stop = _adaptive_stop(g, solver, stop_rule, t_stop)
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
    stop_rule: StopRule = "adaptive",
    budget: float = 0.05,
    t_stop: float | None = None,
    sigma: float | None = None,
    t_max: float | None = None,
    max_iter: int = LBI_MAX_ITER[3],
    checkpoint_every: int | None = None,
    solver: LaplacianSolver | None = None,
) -> LBIPath:
    """Algorithm 3 — LBI on the projected problem (docs/methods/ranking.md §4.2).

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
    stop_rule, t_stop = _adaptive_stop(g, solver, stop_rule, t_stop)
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
    stop_rule: StopRule = "adaptive",
    budget: float = 0.05,
    t_stop: float | None = None,
    sigma: float | None = None,
    t_max: float | None = None,
    max_iter: int = LBI_MAX_ITER[4],
    checkpoint_every: int | None = None,
    solver: LaplacianSolver | None = None,
    guard: bool = True,
    lam_max: float | None = None,
    executor: ThreadPoolExecutor | None = None,
) -> LBIPath:
    """Algorithm 4 — Sync-LBI: synchronous parallel Algorithm 2 (docs/methods/ranking.md §4.3).

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
    stop_rule, t_stop = _adaptive_stop(g, solver, stop_rule, t_stop)
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


def lbi(g: ComparisonGraph, *, algorithm: Literal[2, 3, 4] = 3, **kwargs: Any) -> LBIPath:
    """Dispatch to :func:`lbi_alg2` (2), :func:`lbi_alg3` (3) or :func:`sync_lbi` (4)."""
    if algorithm == 2:
        return lbi_alg2(g, **kwargs)
    if algorithm == 3:
        return lbi_alg3(g, **kwargs)
    if algorithm == 4:
        return sync_lbi(g, **kwargs)
    raise ValueError(f"algorithm must be 2, 3 or 4, got {algorithm!r}")
