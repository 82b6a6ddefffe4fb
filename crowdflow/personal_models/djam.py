"""DJAM, the distributed Jacobi asynchronous method (docs/methods/personal_models.md §2).

Agent i keeps a copy ``C_i[k]`` of each neighbour's model and the weighted sum ``b_i = Σ_k W_ik C_i[k]``;
its model is the readout ``θ̂_i = G_i(b_i)`` with ``G_i(b) = argmin_x f_i(x) + (w_i/2)‖x‖² − bᵀx``.
Activating edge {i, j} (one round) sends the two readouts, computed from the copies before the
exchange, into each other's copies:

    b_j += W_ij (g_i − C_j[i]);  C_j[i] ← g_i;   b_i += W_ij (g_j − C_i[j]);  C_i[j] ← g_j.

No step size, no tuning. :func:`djam` runs one seeded edge sequence with the certified stopping rule,
one round at a time (``simulation``) or in vertex-disjoint batches (``matching``, the same result);
:func:`djam_monte_carlo` runs many edge seeds at once for error curves. Not implemented: a local
stopping rule for a distributed runtime and an actor engine; the engines here use the certified
global rule (docs/methods/personal_models.md §2.6, §6.1).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.personal_models.problem import PersonalProblem
from crowdflow.personal_models.result import PersonalModelsResult, certificate, make_result, rel_errors, trace_row
from crowdflow.personal_models.schedule import EdgeStream, Engine, Sampling, matching_batches
from crowdflow.progress import IterationProgress, ProgressFn

log = logging.getLogger(__name__)


def _apply_rounds(
    solver: Any,
    C: np.ndarray,
    b: np.ndarray,
    th: np.ndarray,
    r: np.ndarray,
    li: np.ndarray,
    lj: np.ndarray,
    aij: np.ndarray,
    aji: np.ndarray,
    w: np.ndarray,
    gi: np.ndarray,
    gj: np.ndarray,
) -> None:
    """Apply DJAM rounds to slots (replica r, edge {i, j}) at once (docs/methods/personal_models.md §2.2).

    Within one call no two slots may share (replica, agent). State arrays: copies C (R, A, p), sums
    b (R, n, p), readouts th (R, n, p); ``li/lj`` index the state, ``gi/gj`` the solver (global ids),
    ``aij`` is the arc of i's copy of j. The readouts th = G(b) are the values g_i, g_j sent.
    """
    ti = th[r, li]
    tj = th[r, lj]
    wv = w[:, None]
    b[r, lj] += wv * (ti - C[r, aji])
    C[r, aji] = ti
    b[r, li] += wv * (tj - C[r, aij])
    C[r, aij] = tj
    k = li.size
    new = solver.solve(np.concatenate([gi, gj]), np.concatenate([b[r, li], b[r, lj]]), np.concatenate([ti, tj]))
    th[r, li] = new[:k]
    th[r, lj] = new[k:]


def serial_rounds(
    solver: Any,
    C: np.ndarray,
    b: np.ndarray,
    th: np.ndarray,
    li: np.ndarray,
    lj: np.ndarray,
    aij: np.ndarray,
    aji: np.ndarray,
    w: np.ndarray,
    gi: np.ndarray,
    gj: np.ndarray,
) -> None:
    """Rounds one after another on a single replica (2-D state); same arithmetic as :func:`_apply_rounds`."""
    pair = np.empty(2, dtype=np.int64)
    lpair = np.empty(2, dtype=np.int64)
    for i, j, a1, a2, wt, g1, g2 in zip(
        li.tolist(), lj.tolist(), aij.tolist(), aji.tolist(), w.tolist(), gi.tolist(), gj.tolist(), strict=True
    ):
        ti = th[i].copy()
        tj = th[j].copy()
        b[j] += wt * (ti - C[a2])
        C[a2] = ti
        b[i] += wt * (tj - C[a1])
        C[a1] = tj
        pair[0], pair[1] = g1, g2
        lpair[0], lpair[1] = i, j
        th[lpair] = solver.solve(pair, b[lpair], th[lpair])


def batched_rounds(
    solver: Any,
    C: np.ndarray,
    b: np.ndarray,
    th: np.ndarray,
    li: np.ndarray,
    lj: np.ndarray,
    aij: np.ndarray,
    aji: np.ndarray,
    w: np.ndarray,
    gi: np.ndarray,
    gj: np.ndarray,
) -> None:
    """The rounds of :func:`serial_rounds`, applied as :func:`matching_batches` (vectorised, same result)."""
    for pos in matching_batches(np.arange(li.size), li, lj):
        i, j, a1, a2 = li[pos], lj[pos], aij[pos], aji[pos]
        ti = th[i]  # fancy indexing copies: the values sent, read before any write
        tj = th[j]
        wv = w[pos][:, None]
        b[j] += wv * (ti - C[a2])
        C[a2] = ti
        b[i] += wv * (tj - C[a1])
        C[a1] = tj
        ij = np.concatenate([i, j])
        th[ij] = solver.solve(np.concatenate([gi[pos], gj[pos]]), b[ij], np.concatenate([ti, tj]))


def _init_copies(problem: PersonalProblem, init: str | np.ndarray, R: int, solver0: Any) -> np.ndarray:
    g = problem.graph
    A, p = g.nbr.size, problem.p
    if isinstance(init, str):
        if init == "zeros":
            return np.zeros((R, A, p))
        if init == "local":
            # C_i[k] = argmin f_k = G_k(0) with shift 0 (one broadcast per directed edge)
            loc = solver0.solve(np.arange(problem.n), np.zeros((problem.n, p)), np.zeros((problem.n, p)))
            return np.broadcast_to(loc[g.nbr], (R, A, p)).copy()
        raise ValueError(f"unknown init '{init}' (zeros | local | array of models)")
    arr = np.asarray(init, dtype=np.float64).reshape(problem.n, p)
    return np.broadcast_to(arr[g.nbr], (R, A, p)).copy()


class DjamState:
    """Copies, cached sums and readouts of R independent DJAM replicas."""

    def __init__(self, problem: PersonalProblem, R: int, init: str | np.ndarray, inner_tol: float):
        self.problem = problem
        g = problem.graph
        self.solver = problem.losses.solver(g.degree, inner_tol=inner_tol)
        solver0 = None
        if isinstance(init, str) and init == "local":
            solver0 = problem.losses.solver(np.zeros(problem.n), inner_tol=inner_tol)
        self.C = _init_copies(problem, init, R, solver0)
        self.S = g.holder_matrix()
        self.R = R
        self.b = np.zeros((R, problem.n, problem.p))
        self.th = np.zeros((R, problem.n, problem.p))
        self.refresh()

    def refresh(self) -> None:
        """Recompute b = S C and the readouts θ̂ = G(b) exactly (drift removal, docs/methods/personal_models.md §2.4)."""
        n, p, R = self.problem.n, self.problem.p, self.R
        A = self.C.shape[1]
        flat = self.C.transpose(1, 0, 2).reshape(A, R * p)
        self.b = np.asarray(self.S @ flat).reshape(n, R, p).transpose(1, 0, 2).copy()
        idx = np.tile(np.arange(n), R)
        self.th = self.solver.solve(idx, self.b.reshape(R * n, p), self.th.reshape(R * n, p)).reshape(R, n, p)

    def run(self, seqs: np.ndarray, engine: Engine) -> None:
        """Apply the rounds ``seqs`` (R, k): replica r activates seqs[r, 0], seqs[r, 1], ..."""
        g = self.problem.graph
        R, k = seqs.shape
        if engine == "matching" and R == 1:
            e = seqs[0]
            i, j = g.u[e], g.v[e]
            batched_rounds(self.solver, self.C[0], self.b[0], self.th[0], i, j, g.a_uv[e], g.a_vu[e], g.w[e], i, j)
            return
        if R == 1:
            e = seqs[0]
            i, j = g.u[e], g.v[e]
            serial_rounds(self.solver, self.C[0], self.b[0], self.th[0], i, j, g.a_uv[e], g.a_vu[e], g.w[e], i, j)
            return
        reps = np.arange(R)
        for t in range(k):
            self._step(reps, seqs[:, t])

    def _step(self, r: np.ndarray, e: np.ndarray) -> None:
        g = self.problem.graph
        i, j = g.u[e], g.v[e]
        _apply_rounds(self.solver, self.C, self.b, self.th, r, i, j, g.a_uv[e], g.a_vu[e], g.w[e], i, j)


def djam(
    problem: PersonalProblem,
    *,
    seed: int = 0,
    tol: float = 1e-8,
    max_rounds: int | None = None,
    sampling: Sampling = "edge",
    engine: Engine = "matching",
    init: str | np.ndarray = "zeros",
    schedule: Sequence[int] | np.ndarray | None = None,
    reference: np.ndarray | None = None,
    trace_every: int | None = None,
    check_every: int | None = None,
    refresh_every: int | None = None,
    inner_tol: float = 1e-12,
    progress: ProgressFn | None = None,
) -> PersonalModelsResult:
    """Fit personal models with DJAM (docs/methods/personal_models.md §2) with the certified stop.

    Each round activates one edge {i, j} (docs/methods/personal_models.md §2.2): both endpoints send their readouts
    ``g_i = G_i(b_i)``, ``g_j = G_j(b_j)`` computed from their copies before the exchange, then
    ``b_j += W_ij(g_i − C_j[i]); C_j[i] ← g_i`` and symmetrically, and the two readouts are refreshed.
    Every ``refresh_every`` rounds (default |E|) b is recomputed exactly from the copies; every
    ``check_every`` rounds (default |E|) the certified rule of docs/methods/personal_models.md §2.6 is evaluated:

        stop when ‖r‖₂/m_min ≤ tol·max(1, ‖Θ̂‖₂),   r_i = ∇f_i(θ̂_i) + Σ_j W_ij(θ̂_i − θ̂_j),

    which guarantees ‖Θ̂ − Θ*‖₂ ≤ tol·max(1, ‖Θ̂‖₂). The run also stops at ``max_rounds`` (default
    500·|E|) with ``converged=False`` and a ``RuntimeWarning``.

    Parameters
    ----------
    problem : PersonalProblem
    seed : int
        Seed of ``numpy.random.default_rng`` for the edge draws (deterministic given the seed).
    tol : float
        Certified relative accuracy (default 1e-8). ``tol=0`` runs exactly ``max_rounds`` rounds.
    max_rounds : int, optional
    sampling : {"edge", "agent", "colour"}
        ``edge``: i.i.d. uniform edges (default); ``agent``: a uniform agent (among agents with
        neighbours) wakes and picks a uniform neighbour; ``colour``: deterministic sweeps over the colour
        classes of a greedy edge colouring (each sweep is an epoch). See docs/methods/personal_models.md §2.3.
    engine : {"matching", "simulation"}
        ``simulation`` applies one round at a time (the reference); ``matching`` (default, as
        :class:`~crowdflow.personal_models.options.PersonalModelsOptions`) splits the same edge sequence
        (between two checks) into :func:`matching_batches` — batches of vertex-disjoint rounds whose
        in-order application equals the sequence — and applies each batch at once (vectorised, same
        result; ~40× faster per round at n = 10⁴). Same rounds, same stopping checks, same trace
        (docs/methods/personal_models.md §6.1).
    init : {"zeros", "local"} or array (n, p)
        Initial copies: zeros, local minimisers ``argmin f_k``, or the given models (``C_i[k] = init[k]``).
    schedule : array of edge indices, optional
        Explicit edge order (indices into ``problem.graph.u/v``); overrides ``sampling`` and caps the run
        at its length.
    reference : array (n, p), optional
        Known optimum; adds ``mean_rel_err``, ``max_rel_err`` and ``V = max_{i,k} ‖C_i[k] − θ_k*‖`` to the trace.
    trace_every : int, optional
        Trace period in rounds (default |E|).
    check_every, refresh_every : int, optional
        Stopping-rule and exact-recompute periods (default |E|; ``refresh_every=0`` never recomputes).
    inner_tol : float
        Logistic inner Newton tolerance (docs/methods/personal_models.md §2.5; keep ≥ 100× below ``tol``).

    Returns
    -------
    PersonalModelsResult
        ``method="djam"``; ``iterations`` = rounds run; ``theta`` = readouts G_i(b_i).
    """
    t0 = time.perf_counter()
    g = problem.graph
    m = g.n_edges
    K = max(m, 1)
    sched = None if schedule is None else np.asarray(schedule, dtype=np.int64)
    if sched is not None and sched.size and (sched.min() < 0 or sched.max() >= m):
        raise ValueError(f"schedule: edge indices must lie in [0, {m})")
    if max_rounds is None:
        max_rounds = 500 * K if sched is None else int(sched.size)
    if sched is not None:
        max_rounds = min(int(max_rounds), int(sched.size))
    trace_every = K if trace_every is None else max(1, int(trace_every))
    check_every = K if check_every is None else max(1, int(check_every))
    refresh_every = K if refresh_every is None else int(refresh_every)
    if engine not in ("simulation", "matching"):
        raise ValueError(f"unknown engine '{engine}' (simulation | matching)")
    state = DjamState(problem, 1, init, inner_tol)
    stream = EdgeStream(g, [seed], sampling, sched) if m else None
    trace = [trace_row(problem, 0, state.th[0], state.C[0], reference)]
    converged = False
    t = 0
    if m == 0:  # isolated agents only: every readout already is argmin f_i
        converged = True
    else:
        kn, bound, _ = certificate(problem, state.th[0])  # noqa: RUF059
        converged = bound <= tol * max(1.0, float(np.linalg.norm(state.th[0])))
    tracker = IterationProgress(progress, max_rounds, tol)
    while not converged and t < max_rounds:
        nxt = [max_rounds, (t // trace_every + 1) * trace_every, (t // check_every + 1) * check_every]
        if refresh_every > 0:
            nxt.append((t // refresh_every + 1) * refresh_every)
        stop = min(nxt)
        assert stream is not None
        state.run(stream.take(stop - t), engine)
        t = stop
        if refresh_every > 0 and t % refresh_every == 0:
            state.refresh()
        if t % trace_every == 0 or t == max_rounds:
            trace.append(trace_row(problem, t, state.th[0], state.C[0], reference))
        if t % check_every == 0 or t == max_rounds:
            _kn, bound, _ = certificate(problem, state.th[0])
            scale = max(1.0, float(np.linalg.norm(state.th[0])))
            tracker.update(t, bound / scale)
            if bound <= tol * scale:
                converged = True
    tracker.done()
    if not converged:
        warnings.warn(
            f"DJAM stopped at max_rounds = {max_rounds} without certifying tol = {tol:g} "
            f"(bound {certificate(problem, state.th[0])[1]:.3g})",
            RuntimeWarning,
            stacklevel=2,
        )
    if trace[-1]["round"] != t:
        trace.append(trace_row(problem, t, state.th[0], state.C[0], reference))
    log.info("DJAM: %d rounds, converged=%s", t, converged)
    return make_result(
        problem,
        state.th[0].copy(),
        "djam",
        t,
        converged,
        trace,
        {
            "seed": seed,
            "tol": tol,
            "sampling": "schedule" if sched is not None else sampling,
            "engine": engine,
            "init": init if isinstance(init, str) else "array",
            "max_rounds": int(max_rounds),
            "wall_time_s": time.perf_counter() - t0,
        },
        copies=state.C[0].copy(),
    )


def djam_monte_carlo(
    problem: PersonalProblem,
    seeds: Sequence[int],
    n_rounds: int,
    reference: np.ndarray,
    *,
    record_every: int = 100,
    sampling: Sampling = "edge",
    init: str | np.ndarray = "zeros",
    refresh_every: int | None = None,
    inner_tol: float = 1e-12,
) -> pd.DataFrame:
    """Error curves of many DJAM runs (one per edge seed) on one instance, vectorised over the seeds.

    The metric of docs/methods/personal_models.md §5.1, ``mean_i ‖θ̂_i(t) − θ_i*‖/‖θ_i*‖``, per run. Replica s follows
    exactly the edge sequence of ``djam(problem, seed=s)`` (same refresh schedule), so its curve equals
    that run's.

    Returns
    -------
    pandas.DataFrame
        ``seed, round, mean_rel_err, max_rel_err, V`` every ``record_every`` rounds (and round 0).
    """
    g = problem.graph
    K = max(g.n_edges, 1)
    refresh_every = K if refresh_every is None else int(refresh_every)
    R = len(seeds)
    state = DjamState(problem, R, init, inner_tol)
    if g.n_edges == 0:
        n_rounds = 0
    stream = EdgeStream(g, list(seeds), sampling) if g.n_edges else None
    ref_nbr = reference[g.nbr]
    frames = []

    def record(t: int) -> None:
        rel = rel_errors(state.th, reference[None])
        V = np.max(np.linalg.norm(state.C - ref_nbr[None], axis=2), axis=1) if g.n_edges else np.zeros(R)
        frames.append(
            pd.DataFrame(
                {
                    "seed": np.asarray(seeds, dtype=np.int64),
                    "round": t,
                    "mean_rel_err": rel.mean(axis=1),
                    "max_rel_err": rel.max(axis=1),
                    "V": V,
                }
            )
        )

    record(0)
    t = 0
    while t < n_rounds:
        nxt = [n_rounds, (t // record_every + 1) * record_every]
        if refresh_every > 0:
            nxt.append((t // refresh_every + 1) * refresh_every)
        stop = min(nxt)
        assert stream is not None
        state.run(stream.take(stop - t), "simulation")
        t = stop
        if refresh_every > 0 and t % refresh_every == 0:
            state.refresh()
        if t % record_every == 0 or t == n_rounds:
            record(t)
    return pd.concat(frames, ignore_index=True)
