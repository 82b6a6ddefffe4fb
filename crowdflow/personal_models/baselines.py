"""CL-ADMM: the asynchronous edge-based ADMM baseline DJAM is compared with.

Collaborative-learning ADMM of Vanhaesebrouck et al. (AISTATS 2017) in the asynchronous edge-based
form of Wei & Ozdaglar, as we reconstruct it in docs/methods/personal_models.md §4.2 (the DJAM paper only
names the method).

Agent k holds its model ``u_k`` and a copy ``x_kl`` of each neighbour l; its local cost is
``f_k(u_k) + Σ_l (a_kl/2)‖u_k − x_kl‖²`` with ``a_kl = W_kl/2`` (each edge in two local costs gives
½W_kl in total, the scaling of J). Each edge e = {i, j} carries ``Z_e^i, Z_e^j`` and four duals for
``u_i = Z_e^i``, ``x_ji = Z_e^i``, ``u_j = Z_e^j``, ``x_ij = Z_e^j``. Activating e:

    primal(k), k ∈ {i, j}:  v_l = Z_kl^l − λ_{k,kl}^l/ρ,  z_l = Z_kl^k − λ_{k,kl}^k/ρ,  ω_l = a_kl ρ/(a_kl + ρ)
                            u_k = argmin f_k(u) + Σ_l (ω_l/2)‖u − v_l‖² + (ρ/2)‖u − z_l‖²
                            x_kl = (a_kl u_k + ρ Z_kl^l − λ_{k,kl}^l)/(a_kl + ρ)
    Z_e^i = ½(u_i + x_ji) + (λ_{i,e}^i + λ_{j,e}^i)/(2ρ),   Z_e^j symmetric
    λ_{i,e}^i += ρ(u_i − Z_e^i), λ_{j,e}^i += ρ(x_ji − Z_e^i), λ_{j,e}^j += ρ(u_j − Z_e^j), λ_{i,e}^j += ρ(x_ij − Z_e^j)

The u-update is the local solver of docs/methods/personal_models.md §2.5 with shift ``Σ_l (ω_l + ρ)`` and linear term
``Σ_l (ω_l v_l + ρ z_l)`` (same closed forms / Newton as DJAM). The error readout is ``u``. All
variables start at 0. One activation is one round (the DJAM unit).

Storage per arc α = (k → l) (CSR by holder k, see :class:`crowdflow.personal_models.graph.AgentGraph`):
``x[α] = x_kl``, ``Zown[α] = Z_kl^k``, ``lam_own[α] = λ_{k,kl}^k``, ``lam_copy[α] = λ_{k,kl}^l``; so
``Z_kl^l = Zown[rev α]``. Replicas (independent edge seeds) are vectorised like DJAM's Monte Carlo.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.personal_models.helpers import ragged
from crowdflow.personal_models.problem import PersonalProblem
from crowdflow.personal_models.result import PersonalModelsResult, certificate, make_result, rel_errors, trace_row
from crowdflow.personal_models.schedule import EdgeStream, Engine, Sampling, matching_batches

log = logging.getLogger(__name__)

RHO_GRID = (0.1, 0.316, 1.0, 3.16, 10.0)  # the paper's grid, docs/methods/personal_models.md §4.2


class _AdmmState:
    """CL-ADMM variables of R replicas (flat arc arrays of shape (R·A, p)); replica r uses penalty rho[r]."""

    def __init__(self, problem: PersonalProblem, rho: np.ndarray, inner_tol: float):
        rho = np.asarray(rho, dtype=np.float64)
        if not np.all(rho > 0):
            raise ValueError(f"rho must be > 0, got {rho.tolist()}")
        g = problem.graph
        self.problem = problem
        self.rho = rho
        self.R = R = rho.size
        n, p, A = problem.n, problem.p, g.nbr.size
        self.A = A
        self.a = g.warc / 2.0  # a_kl = W_kl/2 per arc
        self.levels, self.level_of = np.unique(rho, return_inverse=True)
        self.solvers = []
        for lv in self.levels:
            om = self.a * lv / (self.a + lv)
            shift = np.bincount(g.holder, weights=om + lv, minlength=n)  # Σ_l (ω_l + ρ)
            self.solvers.append(problem.losses.solver(shift, inner_tol=inner_tol))
        self.u = np.zeros((R, n, p))
        self.x = np.zeros((R * A, p))
        self.Zown = np.zeros((R * A, p))
        self.lam_own = np.zeros((R * A, p))
        self.lam_copy = np.zeros((R * A, p))

    def _primal(self, r: np.ndarray, k: np.ndarray) -> None:
        g = self.problem.graph
        seg, arcs = ragged(g.ptr, k)
        rs = r[seg]
        flat = rs * self.A + arcs
        frev = rs * self.A + g.rev[arcs]
        rho = self.rho[rs][:, None]
        a = self.a[arcs][:, None]
        om = a * rho / (a + rho)
        Zl = self.Zown[frev]
        lc = self.lam_copy[flat]
        v = Zl - lc / rho
        z = self.Zown[flat] - self.lam_own[flat] / rho
        lin = np.zeros((k.size, self.problem.p))
        np.add.at(lin, seg, om * v + rho * z)
        warm = self.u[r, k]
        if len(self.solvers) == 1:
            unew = self.solvers[0].solve(k, lin, warm)
        else:
            unew = np.empty_like(lin)
            lev = self.level_of[r]
            for q, solver in enumerate(self.solvers):
                sel = np.flatnonzero(lev == q)
                if sel.size:
                    unew[sel] = solver.solve(k[sel], lin[sel], warm[sel])
        self.u[r, k] = unew
        self.x[flat] = (a * unew[seg] + rho * Zl - lc) / (a + rho)

    def step(self, r: np.ndarray, e: np.ndarray) -> None:
        """Activate edge e[s] in replica r[s] for all slots s at once (distinct replicas)."""
        g = self.problem.graph
        rho = self.rho[r][:, None]
        i, j = g.u[e], g.v[e]
        self._primal(np.concatenate([r, r]), np.concatenate([i, j]))
        al = r * self.A + g.a_uv[e]  # arc i→j
        ar = r * self.A + g.a_vu[e]  # arc j→i
        ui, uj = self.u[r, i], self.u[r, j]
        xl, xr = self.x[al], self.x[ar]
        lo_l, lo_r = self.lam_own[al], self.lam_own[ar]
        lc_l, lc_r = self.lam_copy[al], self.lam_copy[ar]
        Zi = 0.5 * (ui + xr) + (lo_l + lc_r) / (2 * rho)
        Zj = 0.5 * (uj + xl) + (lo_r + lc_l) / (2 * rho)
        self.Zown[al] = Zi
        self.Zown[ar] = Zj
        self.lam_own[al] = lo_l + rho * (ui - Zi)
        self.lam_copy[ar] = lc_r + rho * (xr - Zi)
        self.lam_own[ar] = lo_r + rho * (uj - Zj)
        self.lam_copy[al] = lc_l + rho * (xl - Zj)

    def run(self, seqs: np.ndarray, engine: Engine) -> None:
        """Activate ``seqs[r, t]`` in replica r, t = 0, 1, ...

        ``engine="matching"`` (one replica): the sequence is applied as
        :func:`crowdflow.personal_models.schedule.matching_batches`. That is exact for CL-ADMM too: activating
        {i, j} reads and writes only variables on arcs with an endpoint in {i, j} (``u_i, u_j``, the
        copies ``x`` held by i and j, ``Z``/duals of arcs into or out of i and j) and writes ``Z``/duals
        only on the two arcs of {i, j}; so rounds on vertex-disjoint edges touch disjoint state.
        """
        if engine == "matching" and self.R == 1:
            g = self.problem.graph
            seq = seqs[0]
            zero = np.zeros(1, dtype=np.int64)
            for pos in matching_batches(seq, g.u, g.v):
                self.step(np.broadcast_to(zero, pos.shape), seq[pos])
            return
        reps = np.arange(self.R)
        for t in range(seqs.shape[1]):
            self.step(reps, seqs[:, t])


def cl_admm(
    problem: PersonalProblem,
    *,
    rho: float = 0.316,
    seed: int = 0,
    tol: float = 1e-8,
    max_rounds: int | None = None,
    sampling: Sampling = "edge",
    engine: Engine = "matching",
    reference: np.ndarray | None = None,
    trace_every: int | None = None,
    check_every: int | None = None,
    inner_tol: float = 1e-12,
) -> PersonalModelsResult:
    """CL-ADMM baseline with the certified stopping rule of DJAM on ``u`` (docs/methods/personal_models.md §4.2, §2.6).

    Parameters
    ----------
    problem : PersonalProblem
    rho : float
        ADMM penalty ρ > 0 (the paper's grid is :data:`RHO_GRID`; the best value is problem dependent).
    seed : int
        Edge-draw seed; the same seed draws the same edge sequence as :func:`crowdflow.personal_models.djam.djam`.
    tol : float
        Stop when ``‖r(u)‖₂/m_min ≤ tol·max(1, ‖u‖₂)`` (checked every ``check_every`` = |E| rounds).
    max_rounds : int, optional
        Default 500·|E|; reaching it gives ``converged=False`` and a ``RuntimeWarning``.
    sampling : {"edge", "agent", "colour"}
    engine : {"matching", "simulation"}
        ``matching`` (default) applies the same activations in batches of vertex-disjoint rounds (same
        result as one at a time, see ``_AdmmState.run``); ``simulation`` applies them one by one.
    reference : array (n, p), optional
        Adds ``mean_rel_err``/``max_rel_err`` to the trace.
    trace_every, check_every : int, optional
    inner_tol : float
        Logistic inner Newton tolerance.

    Returns
    -------
    PersonalModelsResult
        ``method="cl_admm"``, ``metadata["rho"]``.
    """
    t0 = time.perf_counter()
    g = problem.graph
    K = max(g.n_edges, 1)
    max_rounds = 500 * K if max_rounds is None else int(max_rounds)
    trace_every = K if trace_every is None else max(1, int(trace_every))
    check_every = K if check_every is None else max(1, int(check_every))
    if engine not in ("simulation", "matching"):
        raise ValueError(f"unknown engine '{engine}' (simulation | matching)")
    st = _AdmmState(problem, np.array([rho], dtype=np.float64), inner_tol)
    # u starts at 0 (docs/methods/personal_models.md §4.2); the readout of an isolated agent is argmin f_i: it is
    # never activated
    iso = np.flatnonzero(g.n_neighbours == 0)
    if iso.size:
        st.u[0, iso] = problem.losses.solver(np.zeros(problem.n), inner_tol=inner_tol).solve(
            iso, np.zeros((iso.size, problem.p)), np.zeros((iso.size, problem.p))
        )
    stream = EdgeStream(g, [seed], sampling) if g.n_edges else None
    trace = [trace_row(problem, 0, st.u[0], None, reference)]
    t = 0
    converged = g.n_edges == 0
    while not converged and t < max_rounds:
        stop = min(max_rounds, (t // trace_every + 1) * trace_every, (t // check_every + 1) * check_every)
        assert stream is not None
        st.run(stream.take(stop - t), engine)
        t = stop
        if t % trace_every == 0 or t == max_rounds:
            trace.append(trace_row(problem, t, st.u[0], None, reference))
        if t % check_every == 0 or t == max_rounds:
            _, bound, _ = certificate(problem, st.u[0])
            converged = bound <= tol * max(1.0, float(np.linalg.norm(st.u[0])))
    if not converged:
        warnings.warn(
            f"CL-ADMM (rho = {rho:g}) stopped at max_rounds = {max_rounds} without certifying tol = {tol:g}",
            RuntimeWarning,
            stacklevel=2,
        )
    if trace[-1]["round"] != t:
        trace.append(trace_row(problem, t, st.u[0], None, reference))
    return make_result(
        problem,
        st.u[0].copy(),
        "cl_admm",
        t,
        converged,
        trace,
        {
            "rho": float(rho),
            "seed": seed,
            "tol": tol,
            "sampling": sampling,
            "engine": engine,
            "max_rounds": max_rounds,
            "wall_time_s": time.perf_counter() - t0,
        },
    )


def cl_admm_monte_carlo(
    problem: PersonalProblem,
    seeds: Sequence[int],
    n_rounds: int,
    reference: np.ndarray,
    *,
    rho: float | Sequence[float] = 0.316,
    record_every: int = 100,
    sampling: Sampling = "edge",
    inner_tol: float = 1e-12,
) -> pd.DataFrame:
    """CL-ADMM error curves for many edge seeds (and penalties) at once (docs/methods/personal_models.md §5.1 metric).

    Every (ρ, seed) pair is one replica of a single vectorised state; replica (ρ, s) follows the edge
    sequence of ``cl_admm(problem, rho=ρ, seed=s)``.

    Returns
    -------
    pandas.DataFrame
        ``seed, rho, round, mean_rel_err, max_rel_err`` every ``record_every`` rounds (and round 0).
    """
    g = problem.graph
    rhos = np.atleast_1d(np.asarray(rho, dtype=np.float64))
    seed_arr = np.asarray(list(seeds), dtype=np.int64)
    rep_rho = np.repeat(rhos, seed_arr.size)
    rep_seed = np.tile(seed_arr, rhos.size)
    st = _AdmmState(problem, rep_rho, inner_tol)
    if g.n_edges == 0:
        n_rounds = 0
    stream = EdgeStream(g, rep_seed.tolist(), sampling) if g.n_edges else None
    frames = []

    def record(t: int) -> None:
        rel = rel_errors(st.u, reference[None])
        frames.append(
            pd.DataFrame(
                {
                    "seed": rep_seed,
                    "rho": rep_rho,
                    "round": t,
                    "mean_rel_err": rel.mean(axis=1),
                    "max_rel_err": rel.max(axis=1),
                }
            )
        )

    record(0)
    t = 0
    while t < n_rounds:
        stop = min(n_rounds, (t // record_every + 1) * record_every)
        assert stream is not None
        st.run(stream.take(stop - t), "simulation")
        t = stop
        record(t)
    return pd.concat(frames, ignore_index=True)


def rounds_to(curve: pd.DataFrame, level: float, column: str = "mean_rel_err") -> float:
    """First recorded round at which ``column`` ≤ ``level`` (NaN if never), for one curve."""
    hit = curve.loc[curve[column] <= level, "round"]
    return float(hit.iloc[0]) if len(hit) else float("nan")


__all__: list[Any] = ["RHO_GRID", "cl_admm", "cl_admm_monte_carlo", "rounds_to"]
