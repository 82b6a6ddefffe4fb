"""Personal models on a similarity graph, solved with DJAM (distributed Jacobi asynchronous method).

Spec: /work/shared/specs/personal-models-djam.md (I. Almeida, J. Xavier, "DJAM: distributed Jacobi
asynchronous method for learning personal models", IEEE SPL 2018, arXiv 1803.09737).

Problem (spec §1.2). Agents ``i = 1..n`` hold a parameter ``θ_i ∈ R^p`` and a private, strongly convex
loss ``f_i``; an undirected graph with weights ``W_ij = W_ji > 0`` couples them:

    J(Θ) = ½ Σ_{{i,j}∈E} W_ij ‖θ_i − θ_j‖² + Σ_i f_i(θ_i) = ½ tr(Θᵀ L Θ) + Σ_i f_i(θ_i),

every unordered edge counted once. Losses (spec §1.4, §2.5), all with a ridge towards a prior mean θ̄_i:

- ``quadratic`` (alias ``ridge``): ``f_i(θ) = ½ Σ_s ω_s (y_s − x_sᵀθ)² + (λ_i/2)‖θ − θ̄_i‖²``;
- ``huber`` (scalar, p = 1): ``f_i(θ) = c_i Σ_s ω_s h_κ(y_s − θ) + (λ_i/2)(θ − θ̄_i)²``;
- ``logistic``: ``f_i(θ) = Σ_s ω_s log(1 + exp(−z_s x_sᵀθ)) + (λ_i/2)‖θ − θ̄_i‖²``, ``z_s = ±1``.

DJAM (spec §2): agent i keeps a copy ``C_i[k]`` of each neighbour's model and the weighted sum
``b_i = Σ_k W_ik C_i[k]``; its model is the readout ``θ̂_i = G_i(b_i)`` with
``G_i(b) = argmin_x f_i(x) + (w_i/2)‖x‖² − bᵀx``. Activating edge {i, j} swaps the two readouts
(computed from the copies before the exchange) into each other's copies. No step size, no tuning.

Solvers provided here:

- :func:`djam` — the reference simulation engine (spec §2.4) with the certified stopping rule of §2.6
  and a ``matching`` engine (the same rounds, applied in batches of vertex-disjoint rounds, spec §6;
  see :func:`matching_batches` for why the result is the sequential one);
- :func:`djam_monte_carlo` — many edge seeds at once (vectorised over replicas) for error curves;
- :func:`djam_blocked` — partitioned execution: blocks of edge activations run as independent work
  items through a pluggable executor, boundary copies exchanged between block rounds;
- :func:`centralized` — the reference optimum (sparse solve for quadratic, Newton + Armijo otherwise,
  spec §4.1);
- ``crowdflow.personal_models.baselines.cl_admm`` — the CL-ADMM baseline (spec §4.2).

Instances: :func:`field_estimation_instance` (the paper's experiment, spec §5 generator) and
:func:`field_estimation_instance_scaled` (the same model at n = 10⁴ and beyond, sparse generator),
:func:`worker_calibration_tables` (per-worker accuracy/bias from a few gold answers, smoothed over a
worker-similarity graph) and :func:`preference_tables` (personalised Bradley–Terry from comparisons).

Not implemented: the distributed runtime's "quiet" stopping rule and the Ray actor engine (spec §2.6,
§6); the simulation engines use the certified global rule instead.

Inputs (design.md §3): an ``agents`` table (``agent``, ``y``, features as columns or an ``x`` list
column, optional ``weight``; one row per local sample) and an ``edges`` table (``source, target,
weight``). :func:`build_problem` validates them (spec §3 table) and
:func:`crowdflow.personal_models.fit.fit_personal_models` is the one-call entry point for the pipeline.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, connected_components
from scipy.sparse.linalg import spsolve
from scipy.special import expit

from crowdflow.errors import DegenerateInput
from crowdflow.graphs import agent_graph_report
from crowdflow.progress import IterationProgress, ProgressFn

log = logging.getLogger(__name__)

LossName = Literal["quadratic", "ridge", "huber", "huber_scalar", "logistic"]
Sampling = Literal["edge", "agent", "colour"]
Engine = Literal["simulation", "matching"]
Method = Literal["djam", "centralized", "cl_admm", "djam_blocked"]

_LOSS_ALIASES = {
    "quadratic": "quadratic",
    "ridge": "quadratic",
    "least_squares": "quadratic",
    "huber": "huber",
    "huber_scalar": "huber",
    "logistic": "logistic",
}
_RESERVED = {"agent", "y", "x", "weight", "reg", "prior_mean", "huber_c", "huber_kappa"}
_SC_RTOL = 1e-10  # spec §3: quadratic strong convexity λ_min(A_i) > 1e-10·‖A_i‖
_EPS = np.finfo(np.float64).eps


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------
def _ragged(ptr: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the CSR segments ``ptr[idx[k]] : ptr[idx[k] + 1]``.

    Returns
    -------
    seg : numpy.ndarray
        For every gathered position, the k it belongs to.
    pos : numpy.ndarray
        The gathered flat positions.
    """
    starts = ptr[idx]
    lens = ptr[idx + 1] - starts
    seg = np.repeat(np.arange(idx.size), lens)
    offs = np.cumsum(lens) - lens
    pos = np.arange(seg.size) - offs[seg] + starts[seg]
    return seg, pos


def _segsum(vals: np.ndarray, seg: np.ndarray, k: int) -> np.ndarray:
    """Sum rows of ``vals`` by segment id (unbuffered, exact per segment)."""
    out = np.zeros((k, *vals.shape[1:]), dtype=np.float64)
    np.add.at(out, seg, vals)
    return out


def _fmt_ids(ids: Iterable[Any], limit: int = 10) -> str:
    ids = list(ids)
    shown = ", ".join(str(i) for i in ids[:limit])
    more = f", … (+{len(ids) - limit} more)" if len(ids) > limit else ""
    return f"[{shown}{more}]"


def _matvec(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Batched ``m[k] @ v[k]`` for m (K, p, p), v (K, p)."""
    return cast(np.ndarray, np.matmul(m, v[..., None])[..., 0])


# --------------------------------------------------------------------------------------------
# Local losses and their exact local solvers G_i (spec §2.5)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QuadraticLosses:
    """``f_i(θ) = ½θᵀA_iθ − e_iᵀθ + k_i`` with ``A_i = X_iᵀΩ_iX_i + λ_iI``, ``e_i = X_iᵀΩ_iy_i + λ_iθ̄_i``.

    Spec §2.5 (quadratic) and §1.4 A. ``m_i = λ_min(A_i)``.
    """

    A: np.ndarray  # (n, p, p)
    e: np.ndarray  # (n, p)
    const: np.ndarray  # (n,)

    kind = "quadratic"

    @property
    def n(self) -> int:
        return int(self.e.shape[0])

    @property
    def p(self) -> int:
        return int(self.e.shape[1])

    def value(self, theta: np.ndarray) -> np.ndarray:
        """f_i(θ_i) for every agent (theta: (n, p))."""
        quad = 0.5 * np.einsum("ki,kij,kj->k", theta, self.A, theta)
        return cast(np.ndarray, quad - np.einsum("ki,ki->k", self.e, theta) + self.const)

    def grad(self, idx: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """∇f_i(θ) = A_iθ − e_i for the agents ``idx`` (theta: (K, p))."""
        return cast(np.ndarray, _matvec(self.A[idx], theta) - self.e[idx])

    def hess(self, theta: np.ndarray) -> np.ndarray:
        """Hessian blocks A_i (n, p, p)."""
        return self.A

    def strong_convexity(self) -> np.ndarray:
        """m_i = λ_min(A_i)."""
        return np.linalg.eigvalsh(self.A)[:, 0]

    def solver(self, shift: np.ndarray, **_: Any) -> QuadraticSolver:
        """Cached factorisation of ``A_i + a_i I`` for the shifts ``a`` (n,)."""
        p = self.p
        m = self.A + shift[:, None, None] * np.eye(p)[None]
        chol = np.linalg.cholesky(m)  # raises LinAlgError if not SPD
        linv = np.linalg.solve(chol, np.broadcast_to(np.eye(p), m.shape))
        inv = np.matmul(np.swapaxes(linv, 1, 2), linv)  # (L Lᵀ)^{-1} = L^{-T} L^{-1}
        return QuadraticSolver(inv=inv, e=self.e)


@dataclass(frozen=True)
class QuadraticSolver:
    """``G_i(b) = (A_i + a_i I)^{-1}(e_i + b)`` with the inverse cached from a Cholesky factor (O(p²)/call)."""

    inv: np.ndarray
    e: np.ndarray

    def solve(self, idx: np.ndarray, b: np.ndarray, warm: np.ndarray | None = None) -> np.ndarray:
        return _matvec(self.inv[idx], self.e[idx] + b)


@dataclass(frozen=True)
class HuberLosses:
    """Scalar Huber loss ``f_i(θ) = Σ_s ω̃_s h_κi(y_s − θ) + (λ_i/2)(θ − μ_i)²`` (spec §1.4 C, §2.5).

    ``ω̃_s = c_i ω_s``; ``h_κ(r) = r²/2`` for ``|r| ≤ κ`` and ``κ|r| − κ²/2`` otherwise. Samples are
    stored CSR by agent (``ptr``). ``m_i = λ_i`` and ``M_i = λ_i + Σ_s ω̃_s``.

    The exact local solve sorts the 2K breakpoints ``y_s ∓ κ`` once per agent (O(K log K)) and keeps,
    after every breakpoint, the affine pieces of ``Σ_s ω̃_s clip(y_s − θ, −κ, κ) = S0 − θ·S1``; a solve
    is then one search for the segment containing the root of the increasing piecewise-linear
    stationarity function (spec §2.5, "sorting the breakpoints").
    """

    ptr: np.ndarray  # (n+1,)
    y: np.ndarray  # (N,)
    w: np.ndarray  # (N,) = c_i ω_s
    kappa: np.ndarray  # (n,)
    s: np.ndarray  # (n,) prior precision λ_i
    mu: np.ndarray  # (n,) prior mean
    ev_t: np.ndarray  # (2N,) breakpoints sorted per agent (CSR with 2·ptr)
    ev_s0: np.ndarray  # (2N,) S0 after each breakpoint
    ev_s1: np.ndarray  # (2N,) S1 after each breakpoint
    s0_base: np.ndarray  # (n,) S0 left of every breakpoint = κ Σ ω̃

    kind = "huber"

    @property
    def n(self) -> int:
        return int(self.s.size)

    @property
    def p(self) -> int:
        return 1

    @staticmethod
    def build(
        ptr: np.ndarray, y: np.ndarray, w: np.ndarray, kappa: np.ndarray, s: np.ndarray, mu: np.ndarray
    ) -> HuberLosses:
        n = s.size
        counts = np.diff(ptr)
        agent = np.repeat(np.arange(n), counts)
        k_s = kappa[agent]
        t = np.concatenate([y - k_s, y + k_s])
        ev_agent = np.concatenate([agent, agent])
        # entering the inlier set at y − κ: S0 += ω̃y − κω̃, S1 += ω̃; leaving at y + κ: S0 −= ω̃y + κω̃, S1 −= ω̃
        d0 = np.concatenate([w * y - k_s * w, -(w * y) - k_s * w])
        d1 = np.concatenate([w, -w])
        order = np.lexsort((t, ev_agent))
        t, ev_agent, d0, d1 = t[order], ev_agent[order], d0[order], d1[order]
        ev_ptr = 2 * ptr
        rank = np.arange(t.size) - ev_ptr[ev_agent]
        s0_base = kappa * np.bincount(agent, weights=w, minlength=n)
        cur0 = s0_base.copy()
        cur1 = np.zeros(n)
        s0 = np.empty(t.size)
        s1 = np.empty(t.size)
        # per-agent running sums, one pass per breakpoint rank (exact, no global cumsum cancellation)
        by_rank = np.argsort(rank, kind="stable")
        bounds = np.searchsorted(rank[by_rank], np.arange(int(rank.max(initial=-1)) + 2))
        for r in range(bounds.size - 1):
            sel = by_rank[bounds[r] : bounds[r + 1]]
            a = ev_agent[sel]
            cur0[a] += d0[sel]
            cur1[a] += d1[sel]
            s0[sel] = cur0[a]
            s1[sel] = cur1[a]
        return HuberLosses(ptr=ptr, y=y, w=w, kappa=kappa, s=s, mu=mu, ev_t=t, ev_s0=s0, ev_s1=s1, s0_base=s0_base)

    def _clip_sums(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        agent = np.repeat(np.arange(self.n), np.diff(self.ptr))
        r = self.y - theta[agent, 0]
        return agent, r, self.kappa[agent]

    def value(self, theta: np.ndarray) -> np.ndarray:
        agent, r, k = self._clip_sums(theta)
        a = np.abs(r)
        h = np.where(a <= k, 0.5 * r * r, k * a - 0.5 * k * k)
        return cast(
            np.ndarray,
            np.bincount(agent, weights=self.w * h, minlength=self.n) + 0.5 * self.s * (theta[:, 0] - self.mu) ** 2,
        )

    def grad(self, idx: np.ndarray, theta: np.ndarray) -> np.ndarray:
        seg, pos = _ragged(self.ptr, idx)
        k = self.kappa[idx][seg]
        r = np.clip(self.y[pos] - theta[seg, 0], -k, k)
        g = -np.bincount(seg, weights=self.w[pos] * r, minlength=idx.size)
        return cast(np.ndarray, (g + self.s[idx] * (theta[:, 0] - self.mu[idx]))[:, None])

    def hess(self, theta: np.ndarray) -> np.ndarray:
        """Generalised Hessian: λ_i + Σ_{inliers} ω̃_s (spec §4.1)."""
        agent, r, k = self._clip_sums(theta)
        inl = np.bincount(agent, weights=self.w * (np.abs(r) <= k), minlength=self.n)
        return (self.s + inl)[:, None, None]

    def strong_convexity(self) -> np.ndarray:
        return self.s.astype(np.float64)

    def solver(self, shift: np.ndarray, **_: Any) -> HuberSolver:
        a = self.s + shift
        ev_agent = np.repeat(np.arange(self.n), 2 * np.diff(self.ptr))
        # φ'(t_k) + q = A t_k − (S0_k − t_k S1_k): increasing in k; root segment = #{k : τ_k ≤ q}
        tau = a[ev_agent] * self.ev_t + self.ev_t * self.ev_s1 - self.ev_s0
        counts = 2 * np.diff(self.ptr)
        kmax = int(counts.max(initial=0))
        padded = None
        if kmax <= 16 and self.n * kmax <= 4 * tau.size + 64:
            # small, even sample counts: padded tables make a solve a few dense ops (no ragged gather)
            rank = np.arange(tau.size) - 2 * self.ptr[ev_agent]
            tp = np.full((self.n, kmax), np.inf)
            tp[ev_agent, rank] = tau
            s0p = np.repeat(self.s0_base[:, None], kmax + 1, axis=1)
            s1p = np.zeros((self.n, kmax + 1))
            s0p[ev_agent, rank + 1] = self.ev_s0
            s1p[ev_agent, rank + 1] = self.ev_s1
            padded = (tp, s0p, s1p)
        return HuberSolver(a=a, tau=tau, losses=self, padded=padded)


@dataclass(frozen=True)
class HuberSolver:
    """Exact ``G_i(b) = argmin_θ (A_i/2)θ² − qθ + Σ ω̃ h_κ(y − θ)`` with ``A_i = λ_i + a_i``, ``q = b + λ_iμ_i``."""

    a: np.ndarray
    tau: np.ndarray
    losses: HuberLosses
    padded: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def solve(self, idx: np.ndarray, b: np.ndarray, warm: np.ndarray | None = None) -> np.ndarray:
        h = self.losses
        q = b[:, 0] + h.s[idx] * h.mu[idx]
        if self.padded is not None:
            tp, s0p, s1p = self.padded
            k = np.count_nonzero(tp[idx] <= q[:, None], axis=1)
            return cast(np.ndarray, ((q + s0p[idx, k]) / (self.a[idx] + s1p[idx, k]))[:, None])
        seg, pos = _ragged(2 * h.ptr, idx)
        kstar = np.bincount(seg, weights=(self.tau[pos] <= q[seg]), minlength=idx.size).astype(np.int64)
        at = 2 * h.ptr[idx] + kstar - 1
        left = kstar == 0
        at[left] = 0
        if h.ev_s0.size:
            s0 = np.where(left, h.s0_base[idx], h.ev_s0[at])
            s1 = np.where(left, 0.0, h.ev_s1[at])
        else:
            s0 = h.s0_base[idx]
            s1 = np.zeros(idx.size)
        return cast(np.ndarray, ((q + s0) / (self.a[idx] + s1))[:, None])


@dataclass(frozen=True)
class LogisticLosses:
    """``f_i(θ) = Σ_s ω_s log(1 + exp(−z_s d_sᵀθ)) + (λ_i/2)‖θ − θ̄_i‖²`` (spec §1.4 B, §2.5).

    Samples CSR by agent (``ptr``); ``m_i = λ_i``, ``M_i = λ_i + ¼‖Ω_i^{1/2}D_i‖₂²``.
    """

    ptr: np.ndarray
    d: np.ndarray  # (N, p)
    z: np.ndarray  # (N,) ±1
    w: np.ndarray  # (N,)
    lam: np.ndarray  # (n,)
    prior: np.ndarray  # (n, p)

    kind = "logistic"

    @property
    def n(self) -> int:
        return int(self.lam.size)

    @property
    def p(self) -> int:
        return int(self.prior.shape[1])

    def _agent(self) -> np.ndarray:
        return np.repeat(np.arange(self.n), np.diff(self.ptr))

    def value(self, theta: np.ndarray) -> np.ndarray:
        agent = self._agent()
        m = np.einsum("sj,sj->s", self.d, theta[agent])
        loss = np.bincount(agent, weights=self.w * np.logaddexp(0.0, -self.z * m), minlength=self.n)
        return cast(np.ndarray, loss + 0.5 * self.lam * np.sum((theta - self.prior) ** 2, axis=1))

    def grad(self, idx: np.ndarray, theta: np.ndarray) -> np.ndarray:
        seg, pos = _ragged(self.ptr, idx)
        d = self.d[pos]
        m = np.einsum("sj,sj->s", d, theta[seg])
        coef = -self.w[pos] * self.z[pos] * expit(-self.z[pos] * m)
        return cast(
            np.ndarray, _segsum(coef[:, None] * d, seg, idx.size) + self.lam[idx, None] * (theta - self.prior[idx])
        )

    def hess(self, theta: np.ndarray) -> np.ndarray:
        agent = self._agent()
        m = np.einsum("sj,sj->s", self.d, theta[agent])
        sig = expit(m)
        h = self.w * sig * (1.0 - sig)
        blocks = _segsum(h[:, None, None] * self.d[:, :, None] * self.d[:, None, :], agent, self.n)
        return blocks + self.lam[:, None, None] * np.eye(self.p)[None]

    def strong_convexity(self) -> np.ndarray:
        return self.lam.astype(np.float64)

    def solver(self, shift: np.ndarray, inner_tol: float = 1e-12, max_newton: int = 100, **_: Any) -> LogisticSolver:
        counts = np.diff(self.ptr)
        smax = int(counts.max(initial=0))
        padded = None
        if self.n * smax <= 4 * counts.sum() + 64:
            padded = self.gather(np.arange(self.n))
        return LogisticSolver(
            losses=self, a=shift.astype(np.float64), tol=inner_tol, max_newton=max_newton, padded=padded
        )

    def gather(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Samples of the agents ``idx`` zero-padded to (K, S, p), (K, S), (K, S) (padding has ω = 0)."""
        seg, pos = _ragged(self.ptr, idx)
        counts = self.ptr[idx + 1] - self.ptr[idx]
        S = int(counts.max(initial=0))
        rank = np.arange(seg.size) - (np.cumsum(counts) - counts)[seg]
        D = np.zeros((idx.size, S, self.p))
        z = np.zeros((idx.size, S))
        w = np.zeros((idx.size, S))
        D[seg, rank] = self.d[pos]
        z[seg, rank] = self.z[pos]
        w[seg, rank] = self.w[pos]
        return D, z, w


@dataclass(frozen=True)
class LogisticSolver:
    """Newton with Armijo backtracking on ``φ(x) = f_i(x) + (a_i/2)‖x‖² − bᵀx`` (spec §2.5).

    Batched over agents on zero-padded sample blocks; warm start from ``warm`` (the last readout);
    stops per agent when ``‖∇φ‖ ≤ tol·max(1, ‖b‖)`` (default 1e-12). The Armijo test allows a round-off
    slack of ``32ε`` times the magnitude of φ's terms so that the final tiny Newton steps are not
    rejected because of cancellation.
    """

    losses: LogisticLosses
    a: np.ndarray
    tol: float
    max_newton: int
    padded: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def solve(self, idx: np.ndarray, b: np.ndarray, warm: np.ndarray | None = None) -> np.ndarray:
        L = self.losses
        p = L.p
        if self.padded is not None:
            D, z, w = (arr[idx] for arr in self.padded)
        else:
            D, z, w = L.gather(idx)
        wz = w * z
        lam = L.lam[idx]
        reg = (lam + self.a[idx])[:, None]
        lin = lam[:, None] * L.prior[idx] + b  # φ(x) = f_loss(x) + ½(λ + a)‖x‖² − (λθ̄ + b)ᵀx + const
        x = np.zeros_like(b) if warm is None else np.array(warm, dtype=np.float64, copy=True)
        thresh = self.tol * np.maximum(1.0, np.linalg.norm(b, axis=1))
        eye = np.eye(p)[None]

        def phi(xx: np.ndarray, mm: np.ndarray, sl: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray]:
            t1 = np.einsum("ks,ks->k", w[sl], np.logaddexp(0.0, -z[sl] * mm))
            t2 = 0.5 * reg[sl, 0] * np.einsum("kj,kj->k", xx, xx)
            t3 = np.einsum("kj,kj->k", lin[sl], xx)
            return t1 + t2 - t3, t1 + t2 + np.abs(t3)  # value and the magnitude of its terms

        m = np.einsum("ksj,kj->ks", D, x)
        val, mag = phi(x, m, slice(None))
        thresh2 = thresh**2
        active = np.zeros(idx.size, dtype=bool)
        for _ in range(self.max_newton):
            g = np.einsum("ks,ksj->kj", -wz * expit(-z * m), D) + reg * x - lin
            active = np.einsum("kj,kj->k", g, g) > thresh2
            if not active.any():
                break
            sig = expit(m)
            H = np.einsum("ks,ksi,ksj->kij", w * sig * (1.0 - sig), D, D) + reg[:, :, None] * eye
            step = -np.linalg.solve(H, g[..., None])[..., 0]
            step[~active] = 0.0  # converged agents stay put
            slope = np.einsum("kj,kj->k", g, step)
            slack = 32 * _EPS * mag  # round-off in evaluating φ: never reject a step for cancellation
            t = 1.0
            todo = np.arange(idx.size)
            for _bt in range(60):
                cand = x[todo] + t * step[todo]
                mc = np.einsum("ksj,kj->ks", D[todo], cand)
                v1, m1 = phi(cand, mc, todo)
                ok = v1 <= val[todo] + 1e-4 * t * slope[todo] + slack[todo]
                acc = todo[ok]
                x[acc], m[acc], val[acc], mag[acc] = cand[ok], mc[ok], v1[ok], m1[ok]
                todo = todo[~ok]
                if todo.size == 0:
                    break
                t *= 0.5
        if active.any():
            log.debug(
                "logistic inner Newton: %d agents not at tolerance after %d steps", int(active.sum()), self.max_newton
            )
        return x


Losses = QuadraticLosses | HuberLosses | LogisticLosses


# --------------------------------------------------------------------------------------------
# Agent graph
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AgentGraph:
    """Undirected weighted agent graph in the two layouts DJAM needs.

    Edges: ``u < v`` (dense ids), weight ``w``; arcs (directed, one per copy ``C_i[k]``): CSR by holder
    ``i`` with neighbour ``nbr`` and weight ``warc``; ``rev[α]`` is the reverse arc; ``a_uv[e]`` is the
    arc holding u's copy of v, ``a_vu[e]`` v's copy of u.
    """

    n: int
    u: np.ndarray
    v: np.ndarray
    w: np.ndarray
    ptr: np.ndarray
    holder: np.ndarray
    nbr: np.ndarray
    warc: np.ndarray
    rev: np.ndarray
    edge_of_arc: np.ndarray
    a_uv: np.ndarray
    a_vu: np.ndarray

    @staticmethod
    def build(n: int, u: np.ndarray, v: np.ndarray, w: np.ndarray) -> AgentGraph:
        u = np.asarray(u, dtype=np.int64)
        v = np.asarray(v, dtype=np.int64)
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        order = np.lexsort((hi, lo))
        u, v, w = lo[order], hi[order], np.asarray(w, dtype=np.float64)[order]
        m = u.size
        holder = np.concatenate([u, v])
        nbr = np.concatenate([v, u])
        eid = np.concatenate([np.arange(m), np.arange(m)])
        aorder = np.lexsort((nbr, holder))
        holder, nbr, eid = holder[aorder], nbr[aorder], eid[aorder]
        pos = np.empty(2 * m, dtype=np.int64)
        pos[aorder] = np.arange(2 * m)
        a_uv, a_vu = pos[:m], pos[m:]
        rev = np.empty(2 * m, dtype=np.int64)
        rev[a_uv] = a_vu
        rev[a_vu] = a_uv
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(holder, minlength=n), out=ptr[1:])
        return AgentGraph(
            n=n,
            u=u,
            v=v,
            w=w,
            ptr=ptr,
            holder=holder,
            nbr=nbr,
            warc=w[eid],
            rev=rev,
            edge_of_arc=eid,
            a_uv=a_uv,
            a_vu=a_vu,
        )

    @property
    def n_edges(self) -> int:
        return int(self.u.size)

    @property
    def degree(self) -> np.ndarray:
        """Weighted degree w_i = Σ_k W_ik."""
        return np.bincount(self.holder, weights=self.warc, minlength=self.n).astype(np.float64)

    @property
    def n_neighbours(self) -> np.ndarray:
        return np.diff(self.ptr)

    def weights(self) -> sp.csr_matrix:
        """Symmetric W (CSR, rows = holders)."""
        return sp.csr_matrix((self.warc, self.nbr, self.ptr), shape=(self.n, self.n))

    @cached_property
    def lap(self) -> sp.csr_matrix:
        """L = D − W (cached)."""
        return cast(sp.csr_matrix, (sp.diags(self.degree) - self.weights()).tocsr())

    def laplacian(self) -> sp.csr_matrix:
        """L = D − W."""
        return self.lap

    def holder_matrix(self) -> sp.csr_matrix:
        """S (n × 2|E|) with S[holder α, α] = W_α, so that b = S C."""
        a = np.arange(self.holder.size)
        return sp.csr_matrix((self.warc, (self.holder, a)), shape=(self.n, a.size))

    def components(self) -> np.ndarray:
        _, lab = connected_components(self.weights(), directed=False)
        return lab

    def edge_colouring(self) -> list[np.ndarray]:
        """Greedy proper edge colouring (≤ 2Δ − 1 colours); each class is a matching (spec §6)."""
        used: list[set[int]] = [set() for _ in range(self.n)]
        colour = np.empty(self.n_edges, dtype=np.int64)
        for e, (a, b) in enumerate(zip(self.u.tolist(), self.v.tolist(), strict=True)):
            c = 0
            ua, ub = used[a], used[b]
            while c in ua or c in ub:
                c += 1
            colour[e] = c
            ua.add(c)
            ub.add(c)
        return [np.flatnonzero(colour == c) for c in range(int(colour.max(initial=-1)) + 1)]


# --------------------------------------------------------------------------------------------
# Problem: validated inputs
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PersonalProblem:
    """A validated personal-models problem (agents, losses, graph), dense ids by sorted agent id.

    Attributes
    ----------
    agents : numpy.ndarray
        Agent ids (str), sorted; row i of every array is agent ``agents[i]``.
    param_names : tuple of str
        Names of the p parameters (feature names, ``x_0..`` for an ``x`` list column, ``theta`` for Huber).
    loss : str
        ``quadratic`` | ``huber`` | ``logistic``.
    losses : QuadraticLosses | HuberLosses | LogisticLosses
    graph : AgentGraph
    n_samples : numpy.ndarray
        Local samples per agent.
    component : numpy.ndarray
        Connected component of every agent (0..).
    """

    agents: np.ndarray
    param_names: tuple[str, ...]
    loss: str
    losses: Any
    graph: AgentGraph
    n_samples: np.ndarray
    component: np.ndarray

    @property
    def n(self) -> int:
        return int(self.agents.size)

    @property
    def p(self) -> int:
        return len(self.param_names)

    @property
    def m(self) -> np.ndarray:
        """Strong-convexity moduli m_i."""
        return cast(np.ndarray, self.losses.strong_convexity())

    @property
    def beta(self) -> float:
        """Epoch contraction bound β = max_i w_i/(m_i + w_i) (spec §3)."""
        w = self.graph.degree
        return float(np.max(w / (self.m + w))) if self.n else 0.0

    def objective(self, theta: np.ndarray) -> float:
        """J(Θ) = ½ Σ_{edges} W_ij‖θ_i − θ_j‖² + Σ f_i(θ_i) (spec §1.2, edges counted once)."""
        g = self.graph
        diff = theta[g.u] - theta[g.v]
        return float(0.5 * np.sum(g.w * np.sum(diff * diff, axis=1)) + np.sum(self.losses.value(theta)))

    def kkt(self, theta: np.ndarray) -> np.ndarray:
        """Per-agent KKT residual r_i = ∇f_i(θ_i) + Σ_j W_ij(θ_i − θ_j) (spec §2.6), shape (n, p)."""
        return cast(np.ndarray, self.losses.grad(np.arange(self.n), theta) + self.graph.laplacian() @ theta)


def _per_agent(
    name: str,
    arg: float | Mapping[str, Any] | None,
    rows: pd.DataFrame,
    agents: np.ndarray,
    default: float | None,
) -> np.ndarray:
    """Per-agent scalar parameter: a column of ``rows`` (constant per agent) or a scalar / mapping."""
    if name in rows.columns:
        g = rows.groupby("agent", sort=True)[name]
        if (g.nunique(dropna=False) > 1).any():
            bad = g.nunique(dropna=False)
            raise ValueError(f"agents: column '{name}' varies within agent(s) {_fmt_ids(bad[bad > 1].index)}")
        vals = pd.to_numeric(g.first(), errors="coerce").reindex(agents)
        out = vals.to_numpy(dtype=np.float64)
    elif isinstance(arg, Mapping):
        missing = [a for a in agents if a not in arg]
        if missing:
            raise ValueError(f"{name}: no value for agent(s) {_fmt_ids(missing)}")
        out = np.array([float(arg[a]) for a in agents], dtype=np.float64)
    else:
        val = default if arg is None else arg
        out = np.full(agents.size, np.nan if val is None else float(val), dtype=np.float64)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name}: missing or non-finite value for agent(s) {_fmt_ids(agents[~np.isfinite(out)])}")
    return out


def _features(rows: pd.DataFrame, feature_cols: Sequence[str] | None, loss: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Feature matrix (N, p) from an ``x`` list column or feature columns."""
    if loss == "huber":
        if feature_cols:
            raise ValueError("huber loss is scalar (p = 1): feature columns are not used; drop feature_cols")
        if "x" in rows.columns:
            raise ValueError("huber loss is scalar (p = 1): drop the 'x' column")
        return np.ones((len(rows), 1)), ("theta",)
    if feature_cols is None and "x" in rows.columns:
        # pandas-stubs cannot type a lambda over an object column (values are lists here)
        lens = rows["x"].map(lambda v: -1 if v is None or (np.isscalar(v) and pd.isna(v)) else len(v))  # type: ignore[misc, arg-type]
        obs = rows["y"].notna().to_numpy()
        lens_obs = lens[obs]
        if lens_obs.size and ((lens_obs < 0).any() or lens_obs.nunique() != 1):
            raise ValueError(
                "observations: inconsistent dimension of 'x' (lengths "
                f"{sorted(set(lens_obs.tolist()))[:5]}); p must be the same for every sample"
            )
        p = int(lens_obs.iloc[0]) if lens_obs.size else int(lens.max())
        if p <= 0:
            raise ValueError("observations: empty feature vectors in 'x'")
        x = np.zeros((len(rows), p))
        if obs.any():
            x[obs] = np.array([np.asarray(v, dtype=np.float64) for v in rows.loc[obs, "x"]])
        return x, tuple(f"x_{k}" for k in range(p))
    if feature_cols is None:
        feature_cols = [c for c in rows.columns if c not in _RESERVED and pd.api.types.is_numeric_dtype(rows[c])]
    if not feature_cols:
        log.info("no feature columns: intercept-only personal models")
        return np.ones((len(rows), 1)), ("intercept",)
    missing = [c for c in feature_cols if c not in rows.columns]
    if missing:
        raise ValueError(f"agents: missing feature column(s) {missing}")
    x = rows[list(feature_cols)].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    return x, tuple(str(c) for c in feature_cols)


def _validate_edges(
    edges: pd.DataFrame, agents: np.ndarray, allow_disconnected: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Spec §3 edge checks; returns dense (u, v, w) with u < v, one row per unordered pair."""
    for c in ("source", "target", "weight"):
        if c not in edges.columns:
            raise ValueError(f"edges: missing column '{c}' (need source, target, weight)")
    e = pd.DataFrame(
        {
            "source": edges["source"].astype(str).to_numpy(),
            "target": edges["target"].astype(str).to_numpy(),
            "weight": pd.to_numeric(edges["weight"], errors="coerce").to_numpy(dtype=np.float64),
        }
    )
    if edges["source"].isna().any() or edges["target"].isna().any():
        raise ValueError("edges: null source/target")
    loops = e[e["source"] == e["target"]]
    if len(loops):
        raise ValueError(f"edges: self-loop on {_fmt_ids(loops['source'].unique())}")
    w = e["weight"].to_numpy()
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        ex = e[bad].head(5)
        pairs = ", ".join(f"({r.source}, {r.target}, {r.weight})" for r in ex.itertuples())
        raise ValueError(f"edges: non-positive or non-finite weight on {int(bad.sum())} edge(s), e.g. {pairs}")
    zero = w == 0
    if zero.any():
        ex = e[zero].head(5)
        warnings.warn(
            f"edges: dropping {int(zero.sum())} zero-weight edge(s), e.g. "
            + ", ".join(f"({r.source}, {r.target})" for r in ex.itertuples()),
            RuntimeWarning,
            stacklevel=3,
        )
        e = e[~zero].reset_index(drop=True)
    rep = agent_graph_report(e, agents)
    if rep.unknown_agents:
        raise ValueError(f"edges: unknown agent id(s) {_fmt_ids(rep.unknown_agents)}")
    if not rep.nonpositive_weights.empty:  # pragma: no cover - excluded above
        raise ValueError("edges: non-positive or non-finite weight")
    asym = e.merge(
        e.rename(columns={"source": "target", "target": "source", "weight": "reverse_weight"}),
        on=["source", "target"],
    )
    asym = asym[asym["source"] < asym["target"]]
    tol = 1e-9 * np.maximum(asym["weight"], asym["reverse_weight"])
    asym = asym[np.abs(asym["weight"] - asym["reverse_weight"]) > tol]
    if len(asym):
        pairs = ", ".join(
            f"({r.source}, {r.target}: {r.weight} vs {r.reverse_weight})" for r in asym.head(5).itertuples()
        )
        raise ValueError(f"edges: asymmetric weights for pairs [{pairs}]")
    index = pd.Index(agents)
    i = index.get_indexer(e["source"].to_numpy())
    j = index.get_indexer(e["target"].to_numpy())
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    key = pd.DataFrame({"lo": lo, "hi": hi, "d": i < j, "w": e["weight"].to_numpy()})
    dup = key.duplicated(["lo", "hi", "d"], keep=False)
    if dup.any():
        ex = key[dup].drop_duplicates(["lo", "hi"]).head(5)
        pairs = ", ".join(f"({agents[r.lo]}, {agents[r.hi]})" for r in ex.itertuples())  # type: ignore[index]
        raise ValueError(f"edges: duplicate pair {pairs}")
    key = key.drop_duplicates(["lo", "hi"])  # both directions with equal weight: keep one
    u, v, w = key["lo"].to_numpy(), key["hi"].to_numpy(), key["w"].to_numpy()
    if rep.n_components > 1 and not allow_disconnected:
        adj = sp.csr_matrix((np.ones(u.size), (u, v)), shape=(agents.size, agents.size))
        _, lab = connected_components(adj, directed=False)
        sizes = np.bincount(lab)
        order = np.argsort(-sizes, kind="stable")
        examples = "; ".join(f"component of {sizes[c]}: {_fmt_ids(agents[lab == c], 3)}" for c in order[1:4])
        raise ValueError(
            f"graph is not connected: {rep.n_components} components (sizes "
            f"{sorted(sizes.tolist(), reverse=True)[:10]}; e.g. agents {examples}); "
            "pass allow_disconnected=True to solve each component separately"
        )
    return u.astype(np.int64), v.astype(np.int64), w.astype(np.float64)


def build_problem(
    agents: pd.DataFrame,
    edges: pd.DataFrame,
    *,
    loss: LossName = "quadratic",
    reg: float | Mapping[str, float] | None = None,
    prior_mean: float | Sequence[float] | np.ndarray | Mapping[str, Any] = 0.0,
    huber_c: float | Mapping[str, float] = 1.0,
    huber_kappa: float | Mapping[str, float] = 1.345,
    feature_cols: Sequence[str] | None = None,
    allow_disconnected: bool = False,
) -> PersonalProblem:
    """Validate the ``agents``/``edges`` tables and build the losses and the agent graph.

    Spec §1.3–1.4 (data model, instantiations) and §3 (pipeline checks).

    Parameters
    ----------
    agents : pandas.DataFrame
        One row per local sample: ``agent`` (id), ``y`` (target), features as numeric columns or one
        ``x`` list column, optional ``weight`` (sample weight ω ≥ 0, default 1). A row with ``y`` NaN
        declares an agent without data (it then needs a prior, ``reg > 0``). Optional per-agent
        columns (constant within an agent) override the arguments of the same name: ``reg``,
        ``prior_mean`` (scalar), ``huber_c``, ``huber_kappa``. ``agent_id`` is accepted for ``agent``.
    edges : pandas.DataFrame
        ``source, target, weight`` (``u, v`` accepted), undirected; both directions allowed if equal.
    loss : {"quadratic", "ridge", "huber", "logistic"}
        ``ridge`` is ``quadratic`` with ``reg > 0`` required for every agent. ``logistic`` targets are
        ``{0, 1}`` or ``{−1, +1}``. ``huber`` is the scalar robust estimate (p = 1; features unused).
    reg : float or mapping agent → float, optional
        Ridge/prior precision λ_i (Huber: ``s_i``). Default 0.1 (quadratic, logistic) and 0.1 (huber).
        Strong convexity is checked, never silently enforced: quadratic agents need
        ``λ_min(X_iᵀΩ_iX_i + λ_iI) > 1e-10·‖·‖``; logistic and huber agents need ``λ_i > 0``.
    prior_mean : float, array (p,) or mapping agent → array
        θ̄_i in ``(λ_i/2)‖θ − θ̄_i‖²``.
    huber_c, huber_kappa : float or mapping
        Huber scale c_i > 0 and threshold κ_i > 0.
    feature_cols : sequence of str, optional
        Feature columns; default: every numeric column outside the reserved names (intercept-only
        model when there is none).
    allow_disconnected : bool
        Solve each connected component separately instead of rejecting a disconnected graph.

    Returns
    -------
    PersonalProblem

    Raises
    ------
    ValueError
        With the spec §3 message prefixes (``edges: unknown agent id(s) [...]``, ``graph is not
        connected: K components ...``, ``agent X: loss not strongly convex (...)``, ...).
    """
    name = _LOSS_ALIASES.get(str(loss))
    if name is None:
        raise ValueError(f"unknown loss '{loss}'; expected one of {sorted(_LOSS_ALIASES)}")
    rows = agents.copy()
    if "agent" not in rows.columns and "agent_id" in rows.columns:
        rows = rows.rename(columns={"agent_id": "agent"})
    edges = edges.rename(columns={"u": "source", "v": "target"}) if "u" in edges.columns else edges
    for colname in ("agent", "y"):
        if colname not in rows.columns:
            raise ValueError(f"agents: missing column '{colname}' (need agent, y and features)")
    if rows["agent"].isna().any():
        bad_rows = np.flatnonzero(rows["agent"].isna().to_numpy())
        raise ValueError(f"agents: duplicate/null agent_id: null agent id on rows {_fmt_ids(bad_rows)}")
    rows["agent"] = rows["agent"].astype(str)
    ids = np.array(sorted(rows["agent"].unique()), dtype=object)
    n = ids.size
    if n == 0:
        raise ValueError("agents: empty table")
    rows = rows.sort_values("agent", kind="stable").reset_index(drop=True)
    codes = pd.Index(ids).get_indexer(rows["agent"].to_numpy())
    y = pd.to_numeric(rows["y"], errors="coerce").to_numpy(dtype=np.float64)
    if np.isinf(y).any():
        bad_ids = ids[np.unique(codes[np.isinf(y)])]
        raise ValueError(f"observations: non-finite target y for agent(s) {_fmt_ids(bad_ids)}")
    x, names = _features(rows, feature_cols, name)
    obs = ~np.isnan(y)
    if obs.any() and not np.all(np.isfinite(x[obs])):
        bad = obs & ~np.all(np.isfinite(x), axis=1)
        raise ValueError(f"observations: non-finite features for agent(s) {_fmt_ids(ids[np.unique(codes[bad])])}")
    if "weight" in rows.columns:
        om = pd.to_numeric(rows["weight"], errors="coerce").to_numpy(dtype=np.float64)
        badw = obs & (~np.isfinite(om) | (om < 0))
        if badw.any():
            bad_ids = ids[np.unique(codes[badw])]
            raise ValueError(f"observations: non-finite or negative sample weight for agent(s) {_fmt_ids(bad_ids)}")
    else:
        om = np.ones(len(rows))
    p = len(names)
    lam = _per_agent("reg", reg, rows, ids, 0.1)
    if (lam < 0).any():
        raise ValueError(f"reg: negative ridge for agent(s) {_fmt_ids(ids[lam < 0])}")
    # prior mean θ̄_i (n, p)
    if "prior_mean" in rows.columns:
        prior = np.repeat(_per_agent("prior_mean", None, rows, ids, None)[:, None], p, axis=1)
    elif isinstance(prior_mean, Mapping):
        missing = [a for a in ids if a not in prior_mean]
        if missing:
            raise ValueError(f"prior_mean: no value for agent(s) {_fmt_ids(missing)}")
        prior = np.array([np.broadcast_to(np.asarray(prior_mean[a], dtype=np.float64), (p,)) for a in ids])
    else:
        prior = np.broadcast_to(np.asarray(prior_mean, dtype=np.float64), (n, p)).copy()
    if not np.all(np.isfinite(prior)):
        raise ValueError("prior_mean: non-finite values")

    # keep only real samples, CSR by agent
    xs, ys, ws, cs = x[obs], y[obs], om[obs], codes[obs]
    n_samples = np.bincount(cs, minlength=n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(n_samples, out=ptr[1:])
    no_prior = (n_samples == 0) & (lam <= 0)
    if no_prior.any():
        raise DegenerateInput(
            f"agent(s) {_fmt_ids(ids[no_prior])}: no data and no prior (reg = 0): loss not strongly convex; "
            "give these agents data or set reg > 0",
            "no_data_no_prior",
        )

    if name == "quadratic":
        outer = ws[:, None, None] * xs[:, :, None] * xs[:, None, :]
        A = _segsum(outer, cs, n) + lam[:, None, None] * np.eye(p)[None]
        e = _segsum(ws[:, None] * ys[:, None] * xs, cs, n) + lam[:, None] * prior
        const = 0.5 * np.bincount(cs, weights=ws * ys * ys, minlength=n) + 0.5 * lam * np.sum(prior**2, axis=1)
        if str(loss) == "ridge" and (lam <= 0).any():
            raise ValueError(f"agent(s) {_fmt_ids(ids[lam <= 0])}: loss not strongly convex (ridge needs reg > 0)")
        ev = np.linalg.eigvalsh(A)
        weak = ev[:, 0] <= _SC_RTOL * np.maximum(ev[:, -1], 0.0)
        if weak.any():
            k = int(np.flatnonzero(weak)[0])
            raise ValueError(
                f"agent {ids[k]}: loss not strongly convex (λ_min(XᵀΩX + λI) = {ev[k, 0]:.3g} with "
                f"{int(n_samples[k])} samples for p = {p}, reg = {lam[k]:.3g}); "
                f"{int(weak.sum())} agent(s) affected: {_fmt_ids(ids[weak])}. Use reg > 0."
            )
        losses: Any = QuadraticLosses(A=A, e=e, const=const)
    elif name == "huber":
        c = _per_agent("huber_c", huber_c, rows, ids, None)
        kap = _per_agent("huber_kappa", huber_kappa, rows, ids, None)
        bad = (lam <= 0) | (c <= 0) | (kap <= 0)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"agent {ids[k]}: loss not strongly convex (huber needs s = reg > 0, c > 0, κ > 0; got "
                f"s = {lam[k]:.3g}, c = {c[k]:.3g}, κ = {kap[k]:.3g}); agent(s) {_fmt_ids(ids[bad])}"
            )
        losses = HuberLosses.build(ptr, ys, c[cs] * ws, kap, lam, prior[:, 0].copy())
    else:
        if (lam <= 0).any():
            raise ValueError(f"agent(s) {_fmt_ids(ids[lam <= 0])}: loss not strongly convex (logistic needs reg > 0)")
        vals = set(np.unique(ys).tolist())
        if vals <= {0.0, 1.0}:
            z = 2.0 * ys - 1.0
        elif vals <= {-1.0, 1.0}:
            z = ys.copy()
        else:
            raise ValueError(f"observations: logistic targets must be 0/1 or ±1, got {sorted(vals)[:5]}")
        losses = LogisticLosses(ptr=ptr, d=xs, z=z, w=ws, lam=lam, prior=prior)

    u, v, w = _validate_edges(edges, ids, allow_disconnected)
    graph = AgentGraph.build(n, u, v, w)
    comp = _canonical_components(graph.components())
    return PersonalProblem(
        agents=ids,
        param_names=names,
        loss=name,
        losses=losses,
        graph=graph,
        n_samples=n_samples.astype(np.int64),
        component=comp,
    )


def _canonical_components(lab: np.ndarray) -> np.ndarray:
    first = np.full(lab.max(initial=-1) + 1, lab.size, dtype=np.int64)
    np.minimum.at(first, lab, np.arange(lab.size))
    remap = np.empty_like(first)
    remap[np.argsort(first, kind="stable")] = np.arange(first.size)
    return cast(np.ndarray, remap[lab])


# --------------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PersonalModelsResult:
    """Fitted personal models and convergence diagnostics.

    Attributes
    ----------
    personal_models : pandas.DataFrame
        ``agent``, one ``theta_<param>`` column per parameter (``theta`` for Huber), ``residual``
        (‖r_i‖, the agent's KKT residual), ``component``, ``n_samples``.
    diagnostics : pandas.DataFrame
        Convergence trace: ``round`` (or Newton iteration), ``kkt_norm`` (‖r‖₂), ``error_bound``
        (certified ‖Θ̂ − Θ*‖₂ ≤ ‖r‖₂/m_min), ``rel_error_bound`` (error_bound/max(1, ‖Θ̂‖₂)) and, when a
        reference is known, ``mean_rel_err``, ``max_rel_err``, ``V`` (max copy error, spec §3).
    theta : numpy.ndarray
        (n, p) models, rows in ``agents`` order.
    agents : numpy.ndarray
    param_names : tuple of str
    method : str
    iterations : int
        Rounds (edge activations) for DJAM / CL-ADMM; Newton iterations for ``centralized``.
    converged : bool
    kkt_norm : float
    error_bound : float
        Certified bound on ‖Θ̂ − Θ*‖₂ (spec §2.6 step 2).
    beta : float
        Epoch contraction bound (spec §3).
    metadata : dict
        n, n_edges, p, loss, sampling, init, tol, seed, wall time, ... (JSON-friendly scalars).
    copies : numpy.ndarray, optional
        DJAM only: the final copies ``C_i[k]`` (2|E|, p), arcs in ``problem.graph`` order.
    """

    personal_models: pd.DataFrame
    diagnostics: pd.DataFrame
    theta: np.ndarray
    agents: np.ndarray
    param_names: tuple[str, ...]
    method: str
    iterations: int
    converged: bool
    kkt_norm: float
    error_bound: float
    beta: float
    metadata: dict[str, Any] = field(default_factory=dict)
    copies: np.ndarray | None = None


def _column_names(problem: PersonalProblem) -> list[str]:
    if problem.loss == "huber":
        return ["theta"]
    return [f"theta_{nm}" for nm in problem.param_names]


def certificate(problem: PersonalProblem, theta: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Certified error bound (spec §2.6): ``‖Θ̂ − Θ*‖₂ ≤ ‖r‖₂ / m_min``.

    J is ``m_min = min_i m_i`` strongly convex (the Laplacian term is PSD), so for any Θ̂ the KKT
    residual ``r = ∇J(Θ̂)`` bounds the distance to the unique minimiser.

    Returns
    -------
    kkt_norm, error_bound : float
    residual : numpy.ndarray
        (n, p) per-agent KKT residuals.
    """
    r = problem.kkt(theta)
    kn = float(np.linalg.norm(r))
    return kn, kn / float(np.min(problem.m)), r


def rel_errors(theta: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per-agent ‖θ̂_i − θ_i*‖/‖θ_i*‖ (absolute error where θ_i* = 0), for theta (..., n, p)."""
    den = np.linalg.norm(reference, axis=-1)
    den = np.where(den > 0, den, 1.0)
    return cast(np.ndarray, np.linalg.norm(theta - reference, axis=-1) / den)


def _make_result(
    problem: PersonalProblem,
    theta: np.ndarray,
    method: str,
    iterations: int,
    converged: bool,
    trace: list[dict[str, Any]],
    metadata: dict[str, Any],
    copies: np.ndarray | None = None,
) -> PersonalModelsResult:
    kn, bound, r = certificate(problem, theta)
    cols = _column_names(problem)
    pm = pd.DataFrame({"agent": problem.agents.astype(str)})
    for k, c in enumerate(cols):
        pm[c] = theta[:, k]
    pm["residual"] = np.linalg.norm(r, axis=1)
    pm["component"] = problem.component.astype(np.int64)
    pm["n_samples"] = problem.n_samples
    diag_cols = ["round", "kkt_norm", "error_bound", "rel_error_bound", "mean_rel_err", "max_rel_err", "V"]
    diag = pd.DataFrame(trace, columns=diag_cols) if trace else pd.DataFrame(columns=diag_cols)
    meta = {
        "n": problem.n,
        "n_edges": problem.graph.n_edges,
        "p": problem.p,
        "loss": problem.loss,
        "beta": problem.beta,
        "m_min": float(np.min(problem.m)),
        "n_components": int(problem.component.max(initial=-1) + 1),
    }
    meta.update(metadata)
    return PersonalModelsResult(
        personal_models=pm,
        diagnostics=diag.astype({"round": np.int64}),
        theta=theta,
        agents=problem.agents,
        param_names=problem.param_names,
        method=method,
        iterations=int(iterations),
        converged=bool(converged),
        kkt_norm=kn,
        error_bound=bound,
        beta=problem.beta,
        metadata=meta,
        copies=copies,
    )


def _trace_row(
    problem: PersonalProblem, t: int, theta: np.ndarray, copies: np.ndarray | None, reference: np.ndarray | None
) -> dict[str, Any]:
    kn, bound, _ = certificate(problem, theta)
    row: dict[str, Any] = {
        "round": int(t),
        "kkt_norm": kn,
        "error_bound": bound,
        "rel_error_bound": bound / max(1.0, float(np.linalg.norm(theta))),
        "mean_rel_err": np.nan,
        "max_rel_err": np.nan,
        "V": np.nan,
    }
    if reference is not None:
        rel = rel_errors(theta, reference)
        row["mean_rel_err"] = float(rel.mean())
        row["max_rel_err"] = float(rel.max())
        if copies is not None and copies.shape[0]:
            row["V"] = float(np.max(np.linalg.norm(copies - reference[problem.graph.nbr], axis=1)))
        elif copies is not None:
            row["V"] = 0.0
    return row


# --------------------------------------------------------------------------------------------
# Centralised reference (spec §4.1)
# --------------------------------------------------------------------------------------------
def _block_diag(blocks: np.ndarray) -> sp.csr_matrix:
    n, p, _ = blocks.shape
    return sp.bsr_matrix((blocks, np.arange(n), np.arange(n + 1)), shape=(n * p, n * p)).tocsr()


def centralized(
    problem: PersonalProblem,
    *,
    tol: float = 1e-13,
    max_iter: int = 100,
    theta0: np.ndarray | None = None,
) -> PersonalModelsResult:
    """The exact minimiser Θ* of J (spec §4.1).

    - quadratic: one sparse SPD solve ``(L ⊗ I_p + blkdiag(A_i)) vec(Θ) = vec(e_i)`` (row-major, θ_i is
      block i);
    - huber / logistic: Newton on J with Armijo backtracking; gradient ``LΘ + [∇f_i]``, Hessian
      ``L ⊗ I_p + blkdiag(∇²f_i)`` (Huber: generalised Hessian, c on inliers, 0 on outliers). Stops
      when ``‖∇J‖_∞ ≤ tol·max(1, ‖Θ‖_∞)`` (default 1e-13) or after ``max_iter`` steps (warning).

    Parameters
    ----------
    problem : PersonalProblem
    tol : float
    max_iter : int
    theta0 : numpy.ndarray, optional
        Newton start (default zeros).

    Returns
    -------
    PersonalModelsResult
        ``method="centralized"``, ``iterations`` = Newton steps (1 for quadratic).
    """
    t0 = time.perf_counter()
    g = problem.graph
    n, p = problem.n, problem.p
    lap = sp.kron(g.laplacian(), sp.identity(p), format="csr")
    L = problem.losses
    trace: list[dict[str, Any]] = []
    if problem.loss == "quadratic":
        H = (lap + _block_diag(L.A)).tocsc()
        theta = np.asarray(spsolve(H, L.e.ravel())).reshape(n, p)
        kn = float(np.abs(problem.kkt(theta)).max())
        trace.append(_trace_row(problem, 1, theta, None, None))
        converged = True
        iters = 1
    else:
        theta = np.zeros((n, p)) if theta0 is None else np.array(theta0, dtype=np.float64).reshape(n, p)
        idx = np.arange(n)
        converged = False
        iters = 0
        Jx = problem.objective(theta)
        for iters in range(1, max_iter + 1):
            grad = (L.grad(idx, theta) + g.laplacian() @ theta).ravel()
            if np.abs(grad).max() <= tol * max(1.0, float(np.abs(theta).max())):
                converged = True
                iters -= 1
                break
            H = (lap + _block_diag(L.hess(theta))).tocsc()
            step = -np.asarray(spsolve(H, grad))
            slope = float(grad @ step)
            t = 1.0
            accepted = False
            for _ in range(60):
                cand = theta + t * step.reshape(n, p)
                Jc = problem.objective(cand)
                if Jc <= Jx + 1e-4 * t * slope + 8 * _EPS * abs(Jx):
                    accepted = True
                    break
                t *= 0.5
            if not accepted:
                log.debug("centralized Newton: line search stalled at iteration %d", iters)
                break
            theta, Jx = cand, Jc
            trace.append(_trace_row(problem, iters, theta, None, None))
        else:
            iters = max_iter
        if not converged:
            grad = L.grad(idx, theta) + g.laplacian() @ theta
            gi = float(np.abs(grad).max())
            # round-off floor: accept if within 1e3 ε of the scale of the terms
            converged = gi <= max(tol, 1e3 * _EPS) * max(1.0, float(np.abs(theta).max()))
            if not converged:
                warnings.warn(
                    f"centralized Newton stopped after {iters} iterations with ‖∇J‖_∞ = {gi:.3g} > tol",
                    RuntimeWarning,
                    stacklevel=2,
                )
        kn = float(np.abs(problem.kkt(theta)).max())
    log.info("centralized %s: %d iteration(s), max KKT %.3g", problem.loss, iters, kn)
    return _make_result(
        problem,
        theta,
        "centralized",
        iters,
        converged,
        trace,
        {"wall_time_s": time.perf_counter() - t0, "tol": tol},
    )


# --------------------------------------------------------------------------------------------
# DJAM engine (spec §2)
# --------------------------------------------------------------------------------------------
class _EdgeStream:
    """Per-replica random edge sequences, drawn in fixed-size blocks so that the sequence of a seed is
    independent of how it is consumed (a single run with seed s equals replica s of a Monte Carlo)."""

    _BLOCK = 4096

    def __init__(self, graph: AgentGraph, seeds: Sequence[int], sampling: str, schedule: np.ndarray | None = None):
        if graph.n_edges == 0 and schedule is None:
            raise ValueError("the agent graph has no edges: there is nothing to activate")
        if sampling not in ("edge", "agent", "colour"):
            raise ValueError(f"unknown sampling '{sampling}' (edge | agent | colour)")
        self.graph = graph
        self.sampling = sampling
        self.rngs = [np.random.default_rng(int(s)) for s in seeds]
        self.R = len(self.rngs)
        self.buf = np.zeros((self.R, 0), dtype=np.int64)
        if schedule is not None:
            sched = np.asarray(schedule, dtype=np.int64)
            self.fixed: np.ndarray | None = np.broadcast_to(sched, (self.R, sched.size))
            self.fixed_pos = 0
        elif sampling == "colour":
            self.fixed = None
            self.sweep = np.concatenate(graph.edge_colouring()) if graph.n_edges else np.zeros(0, np.int64)
        else:
            self.fixed = None
        if sampling == "agent":
            self.active = np.flatnonzero(graph.n_neighbours > 0)

    def _draw(self, rng: np.random.Generator, k: int) -> np.ndarray:
        g = self.graph
        if self.sampling == "edge":
            return rng.integers(0, g.n_edges, size=k)
        if self.sampling == "agent":
            a = self.active[rng.integers(0, self.active.size, size=k)]
            deg = g.ptr[a + 1] - g.ptr[a]
            pick = np.minimum((rng.random(k) * deg).astype(np.int64), deg - 1)
            return cast(np.ndarray, g.edge_of_arc[g.ptr[a] + pick])
        raise ValueError(f"unknown sampling '{self.sampling}'")

    def take(self, k: int) -> np.ndarray:
        if self.fixed is not None:
            out = self.fixed[:, self.fixed_pos : self.fixed_pos + k]
            self.fixed_pos += k
            return out
        if self.sampling == "colour":
            m = self.sweep.size
            start = getattr(self, "_pos", 0)
            idx = (start + np.arange(k)) % m
            self._pos = (start + k) % m
            return np.broadcast_to(self.sweep[idx], (self.R, k))
        while self.buf.shape[1] < k:
            more = np.stack([self._draw(r, self._BLOCK) for r in self.rngs])
            self.buf = np.concatenate([self.buf, more], axis=1)
        out, self.buf = self.buf[:, :k], self.buf[:, k:]
        return out


def matching_batches(seq: np.ndarray, u: np.ndarray, v: np.ndarray) -> list[np.ndarray]:
    """Split a sequence of edge activations into matchings whose in-order application equals the sequence.

    Round t activates edge ``seq[t] = {u, v}``. Its *level* is ``ℓ(t) = 1 + max ℓ(s)`` over the earlier
    rounds s < t that share an agent with it (``ℓ(t) = 1`` if none): the length of the longest chain of
    agent-sharing rounds ending at t. Batch ℓ holds the positions t with ``ℓ(t) = ℓ``, in sequence order.

    Why applying the batches one after another, all rounds of a batch at once, gives exactly the
    state of applying the rounds one by one (DJAM, spec §2.2, and CL-ADMM, spec §4.2):

    1. *Each batch is a matching.* If s < t share an agent, ``ℓ(t) ≥ ℓ(s) + 1``, so two rounds of one
       batch never share an agent.
    2. *A round only touches its endpoints' state.* A DJAM round on {i, j} reads and writes only state
       held by i and j: the copies ``C_i[·]``, ``C_j[·]``, the sums ``b_i``, ``b_j`` and the readouts
       ``θ̂_i``, ``θ̂_j`` (it writes ``C_j[i]``, which j holds). So rounds of a matching touch disjoint
       state and applying them simultaneously equals applying them in any order.
    3. *Every agent sees its rounds in the original order.* The rounds touching agent x have strictly
       increasing levels in sequence order (by 1.), so the batch schedule is a topological order of the
       "shares an agent" precedence graph. By induction over the batches: when round t is applied,
       its two endpoints have received exactly the rounds s < t that touch them (lower levels, already
       applied) and none of the later ones (higher levels), i.e. the same inputs as in the sequence.

    Hence the final state is the sequential one, operation for operation; with the same per-element
    floating-point arithmetic (as :func:`_apply_rounds` vs :func:`_serial_rounds`) it is the same bits.
    On a random sequence of |E| rounds over a graph of bounded degree the levels are few (41 for the
    n = 10⁴, |E| ≈ 31,000 field instance, i.e. batches of ~770 rounds, against ~58 for runs of
    consecutive disjoint rounds), which is what makes the vectorised ``matching`` engine fast.

    Parameters
    ----------
    seq : array of int
        Edge indices in activation order.
    u, v : array of int
        Endpoints per edge index (agent ids).

    Returns
    -------
    list of numpy.ndarray
        Positions into ``seq`` per batch (batch 1 first), each in increasing order.
    """
    seq = np.asarray(seq, dtype=np.int64)
    k = seq.size
    if k == 0:
        return []
    return _level_batches(u[seq], v[seq])


def _level_batches(a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    """Level sets of ℓ(t) = 1 + max(ℓ(prev_a(t)), ℓ(prev_b(t))) for rounds on agent pairs (a[t], b[t]).

    ``prev_x(t)`` / ``next_x(t)`` are the last round before / first round after t touching agent x,
    found with one sort of the 2k (agent, round) occurrences. The levels are then peeled like a
    topological sort (Kahn): level 1 is the rounds without predecessors; removing a level releases the
    rounds all of whose predecessors are removed. Total work O(k log k) for the sort plus O(k) in
    small per-level array operations (see :func:`matching_batches`).
    """
    k = a.size
    occ_agent = np.concatenate([a, b]).astype(np.int64)
    occ_t = np.concatenate([np.arange(k), np.arange(k)])
    order = np.argsort(occ_agent * (k + 1) + occ_t)  # by agent, then round (keys are distinct)
    sa, st = occ_agent[order], occ_t[order]
    same = sa[1:] == sa[:-1]
    prev_sorted = np.full(2 * k, k, dtype=np.int64)  # k = none
    prev_sorted[1:][same] = st[:-1][same]
    next_sorted = np.full(2 * k, k, dtype=np.int64)
    next_sorted[:-1][same] = st[1:][same]
    prev = np.empty(2 * k, dtype=np.int64)
    prev[order] = prev_sorted
    nxt = np.empty(2 * k, dtype=np.int64)
    nxt[order] = next_sorted
    indeg = np.zeros(k + 1, dtype=np.int64)  # indeg[k] absorbs releases of the "none" sentinel
    indeg[:k] = (prev[:k] < k).astype(np.int64) + (prev[k:] < k)
    na, nb = nxt[:k], nxt[k:]
    batches: list[np.ndarray] = []
    front = np.flatnonzero(indeg[:k] == 0)
    while front.size:
        batches.append(front)
        succ = np.concatenate([na[front], nb[front]])
        np.subtract.at(indeg, succ, 1)
        succ = succ[succ < k]
        succ = np.sort(succ[indeg[succ] == 0])
        if succ.size > 1:  # a round released through both of its agents appears twice
            succ = succ[np.concatenate(([True], succ[1:] != succ[:-1]))]
        front = succ
    return batches


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
    """Apply DJAM rounds (spec §2.2, merged form (5)) to slots (replica r, edge {i, j}) at once.

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


def _serial_rounds(
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


def _batched_rounds(
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
    """The rounds of :func:`_serial_rounds`, applied as :func:`matching_batches` (vectorised, same result)."""
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


class _DjamState:
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
        """Recompute b = S C exactly and every readout θ̂ = G(b) (spec §2.4, drift removal)."""
        n, p, R = self.problem.n, self.problem.p, self.R
        A = self.C.shape[1]
        flat = self.C.transpose(1, 0, 2).reshape(A, R * p)
        self.b = np.asarray(self.S @ flat).reshape(n, R, p).transpose(1, 0, 2).copy()
        idx = np.tile(np.arange(n), R)
        self.th = self.solver.solve(idx, self.b.reshape(R * n, p), self.th.reshape(R * n, p)).reshape(R, n, p)

    def run(self, seqs: np.ndarray, engine: str) -> None:
        """Apply the rounds ``seqs`` (R, k): replica r activates seqs[r, 0], seqs[r, 1], ..."""
        g = self.problem.graph
        R, k = seqs.shape
        if engine == "matching" and R == 1:
            e = seqs[0]
            i, j = g.u[e], g.v[e]
            _batched_rounds(self.solver, self.C[0], self.b[0], self.th[0], i, j, g.a_uv[e], g.a_vu[e], g.w[e], i, j)
            return
        if R == 1:
            e = seqs[0]
            i, j = g.u[e], g.v[e]
            _serial_rounds(self.solver, self.C[0], self.b[0], self.th[0], i, j, g.a_uv[e], g.a_vu[e], g.w[e], i, j)
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
    engine: Engine = "simulation",
    init: str | np.ndarray = "zeros",
    schedule: Sequence[int] | np.ndarray | None = None,
    reference: np.ndarray | None = None,
    trace_every: int | None = None,
    check_every: int | None = None,
    refresh_every: int | None = None,
    inner_tol: float = 1e-12,
    progress: ProgressFn | None = None,
) -> PersonalModelsResult:
    """Fit personal models with DJAM (spec §2), reference simulation engine with a certified stop.

    Each round activates one edge {i, j} (spec §2.2, merged form (5)): both endpoints send their readouts
    ``g_i = G_i(b_i)``, ``g_j = G_j(b_j)`` computed from their copies before the exchange, then
    ``b_j += W_ij(g_i − C_j[i]); C_j[i] ← g_i`` and symmetrically, and the two readouts are refreshed.
    Every ``refresh_every`` rounds (default |E|) b is recomputed exactly from the copies; every
    ``check_every`` rounds (default |E|) the certified rule of spec §2.6 is evaluated:

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
        ``edge``: i.i.d. uniform edges (default, spec §2.3); ``agent``: a uniform agent (among agents with
        neighbours) wakes and picks a uniform neighbour; ``colour``: deterministic sweeps over the colour
        classes of a greedy edge colouring (each sweep is an epoch).
    engine : {"simulation", "matching"}
        ``simulation`` applies one round at a time (spec §2.4); ``matching`` splits the same edge sequence
        (between two checks) into :func:`matching_batches` — batches of vertex-disjoint rounds whose
        in-order application equals the sequence — and applies each batch at once (vectorised, same
        result, spec §6; ~40× faster per round at n = 10⁴). Same rounds, same stopping checks, same
        trace; the default stays the reference ``simulation`` engine.
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
        Logistic inner Newton tolerance (spec §2.5; keep ≥ 100× below ``tol``).

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
    state = _DjamState(problem, 1, init, inner_tol)
    stream = _EdgeStream(g, [seed], sampling, sched) if m else None
    trace = [_trace_row(problem, 0, state.th[0], state.C[0], reference)]
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
            trace.append(_trace_row(problem, t, state.th[0], state.C[0], reference))
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
        trace.append(_trace_row(problem, t, state.th[0], state.C[0], reference))
    log.info("DJAM: %d rounds, converged=%s", t, converged)
    return _make_result(
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

    Spec §5 metric: ``mean_i ‖θ̂_i(t) − θ_i*‖/‖θ_i*‖`` per run. Replica s follows exactly the edge
    sequence of ``djam(problem, seed=s)`` (same refresh schedule), so its curve equals that run's.

    Returns
    -------
    pandas.DataFrame
        ``seed, round, mean_rel_err, max_rel_err, V`` every ``record_every`` rounds (and round 0).
    """
    g = problem.graph
    K = max(g.n_edges, 1)
    refresh_every = K if refresh_every is None else int(refresh_every)
    R = len(seeds)
    state = _DjamState(problem, R, init, inner_tol)
    if g.n_edges == 0:
        n_rounds = 0
    stream = _EdgeStream(g, list(seeds), sampling) if g.n_edges else None
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


# --------------------------------------------------------------------------------------------
# Partitioned / blocked execution
# --------------------------------------------------------------------------------------------
def partition_agents(graph: AgentGraph, n_blocks: int) -> np.ndarray:
    """Split the agents into ``n_blocks`` contiguous pieces of a BFS order (block id per agent).

    Each connected component is ordered breadth-first from a pseudo-peripheral agent (the farthest
    agent of a first BFS), components are concatenated, and the order is cut into equal-size chunks,
    so blocks are connected-ish and the cut stays small on geometric graphs.
    """
    n = graph.n
    n_blocks = max(1, min(int(n_blocks), n))
    W = graph.weights()
    seen = np.zeros(n, dtype=bool)
    order: list[np.ndarray] = []
    for start in range(n):
        if seen[start]:
            continue
        first = breadth_first_order(W, start, directed=False, return_predecessors=False)
        far = int(first[-1])
        bfs = breadth_first_order(W, far, directed=False, return_predecessors=False)
        seen[bfs] = True
        order.append(bfs)
    full = np.concatenate(order)
    block = np.empty(n, dtype=np.int64)
    block[full] = (np.arange(n) * n_blocks) // n
    return block


@dataclass(frozen=True)
class BlockTask:
    """One work item of :func:`djam_blocked`: DJAM rounds on the edges internal to one block.

    Only the block's own state travels: the copies held by its agents (``C``, arcs in local numbering),
    their sums ``b`` and readouts ``th``. Copies of outside neighbours are read through ``b`` and are
    not changed by internal rounds, so blocks are independent and may run in any order or in parallel.
    """

    solver: Any
    agents: np.ndarray  # global ids of the block's agents
    li: np.ndarray  # local endpoint ids of the rounds, in order
    lj: np.ndarray
    aij: np.ndarray  # local arc ids
    aji: np.ndarray
    w: np.ndarray
    C: np.ndarray  # (A_b, p)
    b: np.ndarray  # (n_b, p)
    th: np.ndarray  # (n_b, p)
    engine: str = "simulation"  # "matching": the same rounds in vertex-disjoint batches


def run_block(task: BlockTask) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Execute a :class:`BlockTask` (pure: returns new ``C, b, th``; picklable for process/Dask executors)."""
    C, b, th = task.C.copy(), task.b.copy(), task.th.copy()
    ga, gb = task.agents[task.li], task.agents[task.lj]
    rounds = _batched_rounds if task.engine == "matching" else _serial_rounds
    rounds(task.solver, C, b, th, task.li, task.lj, task.aij, task.aji, task.w, ga, gb)
    return C, b, th


def _executor_map(executor: Any, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    if executor is None:
        return [fn(it) for it in items]
    if hasattr(executor, "map"):
        return list(executor.map(fn, items))
    if callable(executor):
        return list(executor(fn, items))
    raise ValueError("executor must be None, have a .map(fn, items) method, or be a callable (fn, items) -> results")


def djam_blocked(
    problem: PersonalProblem,
    *,
    n_blocks: int = 4,
    partition: np.ndarray | None = None,
    executor: Any = None,
    seed: int = 0,
    tol: float = 1e-8,
    max_sweeps: int = 1000,
    inner_sweeps: int = 1,
    engine: Engine = "simulation",
    init: str | np.ndarray = "zeros",
    reference: np.ndarray | None = None,
    inner_tol: float = 1e-12,
    progress: ProgressFn | None = None,
) -> PersonalModelsResult:
    """DJAM on a partitioned agent graph: block work items through a pluggable executor.

    One sweep =
      1. every block runs ``inner_sweeps`` random permutations of its internal edges as DJAM rounds
         (:func:`run_block`, one work item per block, dispatched with ``executor``);
      2. the coordinator activates every cut edge once, in random order (the exchange of boundary
         copies: each such round swaps the two endpoints' readouts across the cut);
      3. the certified rule of spec §2.6 is checked on the readouts.
    Every round is an ordinary DJAM round (spec §2.2) and every edge is activated in each sweep, so a
    sweep is an epoch and V contracts by β per sweep (spec §2.3 [reading], §3). Internal rounds of
    different blocks touch disjoint state, so the result does not depend on the executor.

    Parameters
    ----------
    problem : PersonalProblem
    n_blocks : int
        Number of blocks for :func:`partition_agents` (ignored when ``partition`` is given).
    partition : array (n,), optional
        Block id per agent.
    executor : None, ``concurrent.futures.Executor``-like, or callable
        ``None`` runs the items sequentially; an object with ``.map(fn, items)`` (e.g.
        ``ThreadPoolExecutor``, a Dask ``Client`` wrapper) or a callable ``executor(fn, items) -> results``.
    seed : int
    tol : float
        Certified relative accuracy, as :func:`djam`.
    max_sweeps : int
    inner_sweeps : int
        Passes over the internal edges per work item and sweep.
    engine : {"simulation", "matching"}
        How a work item (and the cut pass) applies its rounds: one by one, or in vertex-disjoint batches
        (:func:`matching_batches`; same result, much faster on large blocks).
    init, reference, inner_tol
        As :func:`djam`.

    Returns
    -------
    PersonalModelsResult
        ``method="djam_blocked"``; ``iterations`` = total rounds; ``metadata["sweeps"]``.
    """
    t0 = time.perf_counter()
    if engine not in ("simulation", "matching"):
        raise ValueError(f"unknown engine '{engine}' (simulation | matching)")
    g = problem.graph
    n, _p = problem.n, problem.p
    block = partition_agents(g, n_blocks) if partition is None else np.asarray(partition, dtype=np.int64)
    if block.shape != (n,):
        raise ValueError(f"partition must have one block id per agent ({n})")
    blocks = np.unique(block)
    state = _DjamState(problem, 1, init, inner_tol)
    C, b, th = state.C[0], state.b[0], state.th[0]
    solver = state.solver
    internal = block[g.u] == block[g.v]
    cut = np.flatnonzero(~internal)
    specs = []
    for k in blocks:
        ag = np.flatnonzero(block == k)
        _seg, arcs = _ragged(g.ptr, ag)
        local_arc = np.full(g.nbr.size, -1, dtype=np.int64)
        local_arc[arcs] = np.arange(arcs.size)
        local_agent = np.full(n, -1, dtype=np.int64)
        local_agent[ag] = np.arange(ag.size)
        edges = np.flatnonzero(internal & (block[g.u] == k))
        specs.append((ag, arcs, local_arc, local_agent, edges))
    rng = np.random.default_rng(seed)
    trace = [_trace_row(problem, 0, th, C, reference)]
    converged = False
    rounds = 0
    sweeps = 0
    kn, bound, _ = certificate(problem, th)  # noqa: RUF059
    converged = bound <= tol * max(1.0, float(np.linalg.norm(th)))
    tracker = IterationProgress(progress, max_sweeps, tol)
    while not converged and sweeps < max_sweeps:
        sweeps += 1
        tasks = []
        for ag, arcs, local_arc, local_agent, edges in specs:
            seq = np.concatenate([rng.permutation(edges) for _ in range(inner_sweeps)]) if edges.size else edges
            tasks.append(
                BlockTask(
                    solver=solver,
                    agents=ag,
                    li=local_agent[g.u[seq]],
                    lj=local_agent[g.v[seq]],
                    aij=local_arc[g.a_uv[seq]],
                    aji=local_arc[g.a_vu[seq]],
                    w=g.w[seq],
                    C=C[arcs],
                    b=b[ag],
                    th=th[ag],
                    engine=engine,
                )
            )
            rounds += seq.size
        results = _executor_map(executor, run_block, tasks)
        for (ag, arcs, *_), (Cb, bb, thb) in zip(specs, results, strict=True):
            C[arcs], b[ag], th[ag] = Cb, bb, thb
        if cut.size:
            seq = rng.permutation(cut)
            state.run(seq[None], engine)
            rounds += seq.size
        state.refresh()
        C, b, th = state.C[0], state.b[0], state.th[0]
        trace.append(_trace_row(problem, rounds, th, C, reference))
        _kn, bound, _ = certificate(problem, th)
        scale = max(1.0, float(np.linalg.norm(th)))
        tracker.update(sweeps, bound / scale)
        converged = bound <= tol * scale
    tracker.done()
    if not converged:
        warnings.warn(
            f"blocked DJAM stopped after {max_sweeps} sweeps without certifying tol = {tol:g} (bound {bound:.3g})",
            RuntimeWarning,
            stacklevel=2,
        )
    return _make_result(
        problem,
        th.copy(),
        "djam_blocked",
        rounds,
        converged,
        trace,
        {
            "seed": seed,
            "tol": tol,
            "sweeps": sweeps,
            "n_blocks": int(blocks.size),
            "cut_edges": int(cut.size),
            "engine": engine,
            "wall_time_s": time.perf_counter() - t0,
        },
        copies=C.copy(),
    )


# --------------------------------------------------------------------------------------------
# Instances: the paper's field estimation (spec §5) and a crowdsourcing instantiation
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FieldInstance:
    """Spec §5 default generator output: tables, the latent field and the geometry."""

    agents: pd.DataFrame
    edges: pd.DataFrame
    field: np.ndarray
    positions: np.ndarray
    outlier: np.ndarray
    huber_c: float
    huber_kappa: float
    s: float
    mu0: float
    radius: float = 0.3
    bridges: int = 0

    def problem(self) -> PersonalProblem:
        return build_problem(
            self.agents,
            self.edges,
            loss="huber",
            reg=self.s,
            prior_mean=self.mu0,
            huber_c=self.huber_c,
            huber_kappa=self.huber_kappa,
        )


def field_estimation_instance(
    seed: int,
    n: int = 30,
    radius: float = 0.3,
    weight_range: tuple[float, float] = (0.5, 1.5),
    s: float = 0.1,
    mu0: float = 0.0,
    sigma_nu: float = 0.5,
    p_out: float = 0.1,
    max_tries: int = 1000,
) -> FieldInstance:
    """The field-estimation experiment of the paper §IV with the spec §5 default generator.

    Draws, in this order from ``numpy.random.default_rng(seed)``: positions U[0,1]² until the
    radius-``radius`` geometric graph is connected; edge weights σ_ij ~ U[0.5, 1.5] in row-major order
    over the edges i < j; the field θ = μ0 + R^{-T}z with ``Q = L_σ + s I = R Rᵀ``; Gaussian noise
    σ_ν·N(0, 1), replaced with probability ``p_out`` by an outlier 10σ_ν·N(0, 1). Huber ``c = 1/σ_ν²``,
    ``κ = 1.345σ_ν``. Agents are ``a000, a001, ...`` (sorted = generation order).
    """
    rng = np.random.default_rng(seed)
    iu, ju = np.triu_indices(n, 1)
    for _ in range(max_tries):
        pos = rng.random((n, 2))
        d = np.linalg.norm(pos[iu] - pos[ju], axis=1)
        keep = d <= radius
        adj = sp.csr_matrix((np.ones(int(keep.sum())), (iu[keep], ju[keep])), shape=(n, n))
        if connected_components(adj, directed=False)[0] == 1:
            break
    else:
        raise ValueError(f"no connected radius-{radius} graph on {n} points after {max_tries} draws")
    u, v = iu[keep], ju[keep]
    w = rng.uniform(weight_range[0], weight_range[1], size=u.size)
    W = sp.csr_matrix((w, (u, v)), shape=(n, n))
    W = W + W.T
    Q = cast(sp.csr_matrix, sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W + s * sp.identity(n)).toarray()
    R = np.linalg.cholesky(Q)
    z = rng.standard_normal(n)
    field_ = mu0 + np.linalg.solve(R.T, z)
    noise = sigma_nu * rng.standard_normal(n)
    out = rng.random(n) < p_out
    big = 10 * sigma_nu * rng.standard_normal(n)
    noise = np.where(out, big, noise)
    ids = np.array([f"a{k:03d}" for k in range(n)], dtype=object)
    agents = pd.DataFrame({"agent": ids, "y": field_ + noise})
    edges = pd.DataFrame({"source": ids[u], "target": ids[v], "weight": w})
    return FieldInstance(
        agents=agents,
        edges=edges,
        field=field_,
        positions=pos,
        outlier=out,
        huber_c=1.0 / sigma_nu**2,
        huber_kappa=1.345 * sigma_nu,
        s=s,
        mu0=mu0,
        radius=radius,
    )


def geometric_radius(n: int, mean_degree: float) -> float:
    """Radius r at which the geometric graph on n uniform points of [0,1]² has the given expected degree.

    Solves ``(n − 1)·P(‖U − U'‖ ≤ r) = mean_degree`` with the exact unit-square probability
    ``P = πr² − 8r³/3 + r⁴/2`` (r ≤ 1; boundary effects included) by bisection.
    """
    if not 0 < mean_degree < n - 1:
        raise ValueError(f"mean_degree must lie in (0, n − 1), got {mean_degree} for n = {n}")
    lo, hi = 0.0, 1.0
    for _ in range(100):
        r = 0.5 * (lo + hi)
        if (n - 1) * (math.pi * r * r - 8 * r**3 / 3 + r**4 / 2) < mean_degree:
            lo = r
        else:
            hi = r
    return 0.5 * (lo + hi)


def field_estimation_instance_scaled(
    seed: int,
    n: int = 10_000,
    mean_degree: float = 6.23,
    weight_range: tuple[float, float] = (0.5, 1.5),
    s: float = 0.1,
    mu0: float = 0.0,
    sigma_nu: float = 0.5,
    p_out: float = 0.1,
) -> FieldInstance:
    """The spec §5 field-estimation generator scaled to large n (sparse, O(n log n)) **[reading]**.

    Same model as :func:`field_estimation_instance` (σ_ij ~ U[0.5, 1.5], σ_ii = s, Gaussian field with
    precision ``Q = L_σ + sI``, σ_ν noise with ``p_out`` outliers of 10σ_ν, Huber ``c = 1/σ_ν²``,
    ``κ = 1.345σ_ν``), with three changes that make n = 10⁴…10⁵ cheap:

    1. **Radius from the mean degree.** ``r = geometric_radius(n, mean_degree)``; the default 6.23 is the
       expected degree of the n = 30, r = 0.3 setup (``29·(π·0.09 − 8·0.027/3 + 0.0081/2)``), so the
       local graph looks like the paper's at any n. Pairs come from a k-d tree, not all n² distances.
    2. **Bridging instead of redrawing.** At degree ≈ 6 a large geometric graph is almost never
       connected (a few dozen isolated points), so positions are drawn once and every component other
       than the largest is joined to the largest by one edge: its point nearest to the largest component
       and that nearest point (components in order of their smallest agent). ``bridges`` counts them.
    3. **Field sampler.** ``θ = μ0 + Q⁻¹(Bᵀ diag(√σ) z₁ + √s z₂)`` with B the edge–agent incidence matrix
       and z₁ ∈ R^|E|, z₂ ∈ R^n standard normal: covariance ``Q⁻¹(BᵀΣB + sI)Q⁻¹ = Q⁻¹``, the same law as the
       spec's ``R⁻ᵀz`` but with one sparse solve instead of a dense Cholesky (the numbers differ).

    Draw order from ``numpy.random.default_rng(seed)``: positions, weights (edges sorted i < j, row-major,
    bridges included), z₁, z₂, noise, outlier flags, outlier values. Agents ``a00000, ...``.
    """
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    radius = geometric_radius(n, mean_degree)
    pos = rng.random((n, 2))
    pairs = cKDTree(pos).query_pairs(radius, output_type="ndarray").astype(np.int64)
    u, v = pairs[:, 0], pairs[:, 1]
    adj = sp.csr_matrix((np.ones(u.size), (u, v)), shape=(n, n))
    ncomp, lab = connected_components(adj, directed=False)
    extra_u: list[int] = []
    extra_v: list[int] = []
    if ncomp > 1:
        sizes = np.bincount(lab)
        giant = int(np.argmax(sizes))
        in_giant = np.flatnonzero(lab == giant)
        tree = cKDTree(pos[in_giant])
        first = np.full(ncomp, n, dtype=np.int64)
        np.minimum.at(first, lab, np.arange(n))
        for c in np.argsort(first, kind="stable"):
            if c == giant:
                continue
            members = np.flatnonzero(lab == c)
            dist, near = tree.query(pos[members], k=1)
            k = int(np.argmin(dist))
            a, b = int(members[k]), int(in_giant[np.atleast_1d(near)[k]])
            extra_u.append(min(a, b))
            extra_v.append(max(a, b))
    u = np.concatenate([u, np.asarray(extra_u, dtype=np.int64)])
    v = np.concatenate([v, np.asarray(extra_v, dtype=np.int64)])
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    w = rng.uniform(weight_range[0], weight_range[1], size=u.size)
    W = sp.csr_matrix((w, (u, v)), shape=(n, n))
    W = W + W.T
    Q = (sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W + s * sp.identity(n)).tocsc()
    m = u.size
    B = sp.csr_matrix(
        (np.concatenate([np.ones(m), -np.ones(m)]), (np.tile(np.arange(m), 2), np.concatenate([u, v]))),
        shape=(m, n),
    )
    z1 = rng.standard_normal(m)
    z2 = rng.standard_normal(n)
    rhs = B.T @ (np.sqrt(w) * z1) + math.sqrt(s) * z2
    field_ = mu0 + np.asarray(spsolve(Q, rhs))
    noise = sigma_nu * rng.standard_normal(n)
    out = rng.random(n) < p_out
    big = 10 * sigma_nu * rng.standard_normal(n)
    noise = np.where(out, big, noise)
    width = max(3, len(str(n - 1)))
    ids = np.array([f"a{k:0{width}d}" for k in range(n)], dtype=object)
    agents = pd.DataFrame({"agent": ids, "y": field_ + noise})
    edges = pd.DataFrame({"source": ids[u], "target": ids[v], "weight": w})
    log.info("scaled field instance: n=%d, |E|=%d, r=%.4g, %d bridge edge(s)", n, m, radius, len(extra_u))
    return FieldInstance(
        agents=agents,
        edges=edges,
        field=field_,
        positions=pos,
        outlier=out,
        huber_c=1.0 / sigma_nu**2,
        huber_kappa=1.345 * sigma_nu,
        s=s,
        mu0=mu0,
        radius=radius,
        bridges=len(extra_u),
    )


def worker_calibration_tables(
    labels: pd.DataFrame,
    truth: pd.DataFrame,
    *,
    target: Literal["accuracy", "bias"] = "accuracy",
    k: int = 5,
    min_overlap: int = 3,
    strength: float = 1.0,
    reg: float = 1.0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``agents``/``edges`` tables for per-worker calibration smoothed over a worker-similarity graph.

    Spec §1.4 A/B instantiated for crowdsourcing: each worker i has a parameter θ_i estimated from the
    few gold tasks it labelled, and borrows strength from workers that behave like it on all tasks.

    - ``target="accuracy"`` (categorical labels, ``loss="logistic"``): one sample per gold task the
      worker labelled, ``y = 1[label == gold]``, intercept feature; θ_i is the worker's log-odds of
      being right. Prior mean = pooled log-odds of all gold answers, precision ``reg``.
    - ``target="bias"`` (numeric labels, ``loss="quadratic"``): ``y = label − gold``, intercept
      feature; θ_i is the worker's additive bias. Prior mean 0, precision ``reg``.

    Edges: for workers with at least ``min_overlap`` co-labelled tasks (all tasks, gold or not), the
    similarity is the agreement rate (accuracy: share of co-labelled tasks with equal labels) or
    ``1/(1 + RMS label difference/σ)`` (bias; σ = std of all labels); each worker keeps its ``k`` most
    similar partners (union of the k-NN lists, so the graph is symmetric) and the weight is
    ``strength·similarity``. Co-label counts and agreements are sparse products (no dense W×W).
    Workers without gold get a prior-only row (``y`` NaN) and are estimated through the graph.
    The graph may be disconnected (e.g. workers sharing no task): check or fit with
    ``allow_disconnected=True``.

    Parameters
    ----------
    labels : pandas.DataFrame
        ``task, worker, label``.
    truth : pandas.DataFrame
        ``task, label`` (gold; may cover a few tasks only).
    target : {"accuracy", "bias"}
    k, min_overlap : int
    strength : float
        Multiplier of all edge weights (how much a worker borrows from its neighbours).
    reg : float
        Prior precision λ of every worker.

    Returns
    -------
    agents : pandas.DataFrame
        ``agent, y, intercept, reg, prior_mean``.
    edges : pandas.DataFrame
        ``source, target, weight``.

    Examples
    --------
    >>> from pathlib import Path
    >>> import pandas as pd
    >>> from crowdflow.personal_models.fit import fit_personal_models
    >>> d = Path(__file__).resolve().parents[1] / "data" / "snow_temp"
    >>> labels, truth = pd.read_csv(d / "labels.csv"), pd.read_csv(d / "truth.csv")
    >>> gold = truth.sample(40, random_state=0)               # pretend only 40 tasks have gold
    >>> agents, edges = worker_calibration_tables(labels, gold, k=5)
    >>> res = fit_personal_models(agents, edges, loss="logistic", method="centralized",
    ...                           allow_disconnected=True)
    >>> acc = 1 / (1 + np.exp(-res.personal_models["theta_intercept"]))   # smoothed accuracy
    >>> bool(acc.between(0, 1).all())
    True
    """
    for colname in ("task", "worker", "label"):
        if colname not in labels.columns:
            raise ValueError(f"labels: missing column '{colname}'")
    for colname in ("task", "label"):
        if colname not in truth.columns:
            raise ValueError(f"truth: missing column '{colname}'")
    lab = labels[["task", "worker", "label"]].copy()
    lab["task"] = lab["task"].astype(str)
    lab["worker"] = lab["worker"].astype(str)
    gold = truth[["task", "label"]].copy()
    gold["task"] = gold["task"].astype(str)
    gold = gold.drop_duplicates("task", keep="last").rename(columns={"label": "gold"})
    workers = np.array(sorted(lab["worker"].unique()), dtype=object)
    tasks = np.array(sorted(lab["task"].unique()), dtype=object)
    wi = pd.Index(workers).get_indexer(lab["worker"])
    ti = pd.Index(tasks).get_indexer(lab["task"])
    nw, nt = workers.size, tasks.size
    B = sp.csr_matrix((np.ones(len(lab)), (wi, ti)), shape=(nw, nt))
    N = (B @ B.T).tocoo()
    if target == "accuracy":
        codes, _ = pd.factorize(lab["label"].astype(str))
        agree = sp.csr_matrix((nw, nw))
        for code in range(int(codes.max(initial=-1)) + 1):
            sel = codes == code
            Bc = sp.csr_matrix((np.ones(int(sel.sum())), (wi[sel], ti[sel])), shape=(nw, nt))
            agree = agree + Bc @ Bc.T
        sim_num = agree.tocsr()
    elif target == "bias":
        val = pd.to_numeric(lab["label"], errors="coerce").to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(val)):
            raise ValueError("labels: target='bias' needs numeric labels")
        Bv = sp.csr_matrix((val, (wi, ti)), shape=(nw, nt))
        Bv2 = sp.csr_matrix((val * val, (wi, ti)), shape=(nw, nt))
        ssd = (Bv2 @ B.T + B @ Bv2.T - 2 * (Bv @ Bv.T)).tocsr()  # Σ over co-labelled tasks of (l_i − l_j)²
        sim_num = ssd
        scale = float(np.std(val)) or 1.0
    else:
        raise ValueError(f"unknown target '{target}' (accuracy | bias)")
    r, c, cnt = N.row, N.col, N.data
    ok = (r != c) & (cnt >= min_overlap)
    r, c, cnt = r[ok], c[ok], cnt[ok]
    num = np.asarray(sim_num[r, c]).ravel()
    if target == "accuracy":
        sim = num / cnt
    else:
        sim = 1.0 / (1.0 + np.sqrt(np.maximum(num, 0.0) / cnt) / scale)
    order = np.lexsort((-cnt, -sim, r))
    r, c, sim = r[order], c[order], sim[order]
    first = np.searchsorted(r, r, side="left")
    rank = np.arange(r.size) - first
    keep = (rank < k) & (sim > 0)
    lo, hi = np.minimum(r[keep], c[keep]), np.maximum(r[keep], c[keep])
    e = pd.DataFrame({"lo": lo, "hi": hi, "weight": strength * sim[keep]}).drop_duplicates(["lo", "hi"])
    edges = pd.DataFrame(
        {
            "source": workers[e["lo"].to_numpy()],
            "target": workers[e["hi"].to_numpy()],
            "weight": e["weight"].to_numpy(),
        }
    )
    g = lab.merge(gold, on="task", how="inner")
    if target == "accuracy":
        y = (g["label"].astype(str) == g["gold"].astype(str)).astype(np.float64)
        pooled = float(np.clip(y.mean(), 0.02, 0.98)) if len(y) else 0.5
        prior = math.log(pooled / (1 - pooled))
    else:
        y = pd.to_numeric(g["label"], errors="coerce") - pd.to_numeric(g["gold"], errors="coerce")
        prior = 0.0
    rows = pd.DataFrame({"agent": g["worker"].to_numpy(), "y": y.to_numpy(dtype=np.float64)})
    no_gold = np.setdiff1d(workers, rows["agent"].unique())
    rows = pd.concat([rows, pd.DataFrame({"agent": no_gold, "y": np.nan})], ignore_index=True)
    rows["intercept"] = 1.0
    rows["reg"] = float(reg)
    rows["prior_mean"] = prior
    return rows.sort_values("agent", kind="stable").reset_index(drop=True), edges


def preference_tables(
    comparisons: pd.DataFrame,
    items: pd.DataFrame,
    *,
    feature_cols: Sequence[str] | None = None,
) -> pd.DataFrame:
    """``agents`` table for personalised Bradley–Terry preferences (spec §1.4 B, ``loss="logistic"``).

    Each comparison of user i between items a and b becomes one local sample with ``x = x_a − x_b``
    and ``y = 1`` if a was preferred (``outcome > 0``), ``0`` if b was (``outcome < 0``). A tie
    (``outcome == 0``) becomes two samples, y = 1 and y = 0, each with half the weight (its expected
    Bradley–Terry log-likelihood). Pair it with a user-similarity ``edges`` table and fit with
    ``fit_personal_models(agents, edges, loss="logistic", reg=λ)``; θ_i scores item x as xᵀθ_i.

    Parameters
    ----------
    comparisons : pandas.DataFrame
        ``annotator, item_a, item_b, outcome`` (design.md §3; ``worker``/``user`` accepted for
        ``annotator``), optional ``weight``.
    items : pandas.DataFrame
        ``item`` (or ``item_id``) and numeric feature columns.
    feature_cols : sequence of str, optional
        Item features to use (default: every numeric column but the id).

    Returns
    -------
    pandas.DataFrame
        ``agent, x, y, weight``.

    Examples
    --------
    >>> comps = pd.DataFrame({"annotator": ["u1", "u1", "u2"], "item_a": ["p", "q", "p"],
    ...                       "item_b": ["q", "r", "r"], "outcome": [1, -1, 0]})
    >>> items = pd.DataFrame({"item": ["p", "q", "r"], "price": [1.0, 2.0, 3.0], "size": [0.0, 1.0, 0.0]})
    >>> preference_tables(comps, items)[["agent", "y", "weight"]].to_dict("list")
    {'agent': ['u1', 'u1', 'u2', 'u2'], 'y': [1.0, 0.0, 1.0, 0.0], 'weight': [1.0, 1.0, 0.5, 0.5]}
    """
    comps = comparisons.copy()
    for alias in ("worker", "user", "agent"):
        if "annotator" not in comps.columns and alias in comps.columns:
            comps = comps.rename(columns={alias: "annotator"})
    for c in ("annotator", "item_a", "item_b", "outcome"):
        if c not in comps.columns:
            raise ValueError(f"comparisons: missing column '{c}'")
    it = items.rename(columns={"item_id": "item"}) if "item" not in items.columns else items
    if "item" not in it.columns:
        raise ValueError("items: missing column 'item'")
    if feature_cols is None:
        feature_cols = [c for c in it.columns if c != "item" and pd.api.types.is_numeric_dtype(it[c])]
    if not feature_cols:
        raise ValueError("items: no numeric feature columns")
    if it["item"].astype(str).duplicated().any():
        raise ValueError("items: duplicate item ids")
    feats = it[list(feature_cols)].to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(feats)):
        raise ValueError("items: non-finite features")
    index = pd.Index(it["item"].astype(str))
    ia = index.get_indexer(pd.Index(comps["item_a"].astype(str)))
    ib = index.get_indexer(pd.Index(comps["item_b"].astype(str)))
    missing = sorted(set(comps["item_a"].astype(str)[ia < 0]) | set(comps["item_b"].astype(str)[ib < 0]))
    if missing:
        raise ValueError(f"comparisons: unknown item id(s) {_fmt_ids(missing)}")
    out = pd.to_numeric(comps["outcome"], errors="coerce").to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(out)):
        raise ValueError("comparisons: non-finite outcome")
    if "weight" in comps.columns:
        w = pd.to_numeric(comps["weight"], errors="coerce").to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(w) & (w >= 0)):
            raise ValueError("comparisons: non-finite or negative weight")
    else:
        w = np.ones(len(comps))
    d = feats[ia] - feats[ib]
    tie = out == 0
    agent = comps["annotator"].astype(str).to_numpy()
    y = (out > 0).astype(np.float64)
    rows_idx = np.concatenate([np.flatnonzero(~tie), np.flatnonzero(tie), np.flatnonzero(tie)])
    y_all = np.concatenate([y[~tie], np.ones(int(tie.sum())), np.zeros(int(tie.sum()))])
    w_all = np.concatenate([w[~tie], 0.5 * w[tie], 0.5 * w[tie]])
    res = pd.DataFrame({"agent": agent[rows_idx], "x": list(d[rows_idx]), "y": y_all, "weight": w_all, "_o": rows_idx})
    res = res.sort_values(["agent", "_o", "y"], ascending=[True, True, False], kind="stable")
    return res.drop(columns="_o").reset_index(drop=True)
