"""Local losses f_i and their exact local solvers G_i (docs/methods/personal_models.md §1.4, §2.5).

Each loss family holds the data of all n agents and gives the values ``f_i(θ_i)``, gradients, Hessian
blocks and strong-convexity moduli ``m_i`` the certificate needs. ``losses.solver(a)`` returns a
solver for ``G_i(b) = argmin_x f_i(x) + (a_i/2)‖x‖² − bᵀx`` (``a_i`` = the weighted degree ``w_i``
for DJAM, another shift for CL-ADMM or the local minimisers):

- quadratic ``f_i(θ) = ½θᵀA_iθ − e_iᵀθ + k_i``: ``G_i(b) = (A_i + a_iI)^{-1}(e_i + b)``, inverse cached;
- scalar Huber ``f_i(θ) = Σ_s ω̃_s h_κ(y_s − θ) + (λ_i/2)(θ − μ_i)²``: exact root of a piecewise-linear
  increasing stationarity function with sorted breakpoints ``y_s ∓ κ``;
- logistic ``f_i(θ) = Σ_s ω_s log(1 + exp(−z_s d_sᵀθ)) + (λ_i/2)‖θ − θ̄_i‖²``: batched Newton with
  Armijo backtracking to an inner tolerance.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from scipy.special import expit

from crowdflow.personal_models.helpers import EPS, matvec, ragged, segsum

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuadraticLosses:
    """``f_i(θ) = ½θᵀA_iθ − e_iᵀθ + k_i`` with ``A_i = X_iᵀΩ_iX_i + λ_iI``, ``e_i = X_iᵀΩ_iy_i + λ_iθ̄_i``.

    docs/methods/personal_models.md §1.4, §2.5. ``m_i = λ_min(A_i)``.
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
        return cast(np.ndarray, matvec(self.A[idx], theta) - self.e[idx])

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
        return matvec(self.inv[idx], self.e[idx] + b)


@dataclass(frozen=True)
class HuberLosses:
    """Scalar Huber loss ``f_i(θ) = Σ_s ω̃_s h_κi(y_s − θ) + (λ_i/2)(θ − μ_i)²`` (docs/methods/personal_models.md §2.5).

    ``ω̃_s = c_i ω_s``; ``h_κ(r) = r²/2`` for ``|r| ≤ κ`` and ``κ|r| − κ²/2`` otherwise. Samples are
    stored CSR by agent (``ptr``). ``m_i = λ_i`` and ``M_i = λ_i + Σ_s ω̃_s``.

    The exact local solve sorts the 2K breakpoints ``y_s ∓ κ`` once per agent (O(K log K)) and keeps,
    after every breakpoint, the affine pieces of ``Σ_s ω̃_s clip(y_s − θ, −κ, κ) = S0 − θ·S1``; a solve
    is then one search for the segment containing the root of the increasing piecewise-linear
    stationarity function (docs/methods/personal_models.md §2.5).
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
        seg, pos = ragged(self.ptr, idx)
        k = self.kappa[idx][seg]
        r = np.clip(self.y[pos] - theta[seg, 0], -k, k)
        g = -np.bincount(seg, weights=self.w[pos] * r, minlength=idx.size)
        return cast(np.ndarray, (g + self.s[idx] * (theta[:, 0] - self.mu[idx]))[:, None])

    def hess(self, theta: np.ndarray) -> np.ndarray:
        """Generalised Hessian: λ_i + Σ_{inliers} ω̃_s (docs/methods/personal_models.md §4.1)."""
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
        seg, pos = ragged(2 * h.ptr, idx)
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
    """``f_i(θ) = Σ_s ω_s log(1 + exp(−z_s d_sᵀθ)) + (λ_i/2)‖θ − θ̄_i‖²`` (docs/methods/personal_models.md §2.5).

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
        seg, pos = ragged(self.ptr, idx)
        d = self.d[pos]
        m = np.einsum("sj,sj->s", d, theta[seg])
        coef = -self.w[pos] * self.z[pos] * expit(-self.z[pos] * m)
        return cast(
            np.ndarray, segsum(coef[:, None] * d, seg, idx.size) + self.lam[idx, None] * (theta - self.prior[idx])
        )

    def hess(self, theta: np.ndarray) -> np.ndarray:
        agent = self._agent()
        m = np.einsum("sj,sj->s", self.d, theta[agent])
        sig = expit(m)
        h = self.w * sig * (1.0 - sig)
        blocks = segsum(h[:, None, None] * self.d[:, :, None] * self.d[:, None, :], agent, self.n)
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
        seg, pos = ragged(self.ptr, idx)
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
    """Newton with Armijo backtracking on ``φ(x) = f_i(x) + (a_i/2)‖x‖² − bᵀx`` (docs/methods/personal_models.md §2.5).

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
            slack = 32 * EPS * mag  # round-off in evaluating φ: never reject a step for cancellation
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
