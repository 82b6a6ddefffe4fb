"""Smoothed low-rank BTL objective, two-factor quotient geometry and its solvers.

Numerical core of :mod:`crowdflow.personal_rankings.fit` (personalized rankings). Spec
``personal-rankings-manifold.md`` (Dong, Yang, Shi, "Ranking from Crowdsourced Pairwise Comparisons via
Smoothed Matrix Manifold Optimization"):

* :class:`PairData` — comparisons aggregated per (user, unordered item pair) with the two directed
  weights, sorted by user (spec §1.1);
* :class:`SmoothedBTLObjective` — ``F(X) = 𝓛(X) + λ μ log Σ exp(X²/μ)`` evaluated on factors
  ``X = L Rᵀ`` with vectorised gradients and Hessian-vector products (spec §2.1, §2.3, §2.4, §2.5),
  evaluated on dense row blocks of ``X`` (gather by flat index, scatter by ``np.bincount``) with a
  streaming log-sum-exp (spec §5);
* :class:`TwoFactorGeometry` — metric, horizontal projection, Riemannian gradient and Hessian of the
  quotient ``(R_*^{m×r} × R_*^{n×r}) / GL(r)`` (spec §2.5);
* :func:`retract` — ``R_x(ξ) = (L + ξ_L, R + ξ_R)`` with optional norm rebalancing (spec §2.5);
* :func:`riemannian_trust_region` — RTR with a truncated-CG (Steihaug–Toint) inner solver (spec §2.6);
* :func:`lbfgs_factors` — L-BFGS on ``(vec L, vec R)`` through :func:`scipy.optimize.minimize`
  (spec §2.10.1).

Everything here is pure numpy/scipy; nothing loops over comparisons in Python.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.optimize import minimize

logger = logging.getLogger(__name__)

__all__ = [
    "PairData",
    "PointEval",
    "SmoothedBTLObjective",
    "SolverOutput",
    "TwoFactorGeometry",
    "balance_factors",
    "lbfgs_factors",
    "paper_init",
    "paper_lambda",
    "retract",
    "riemannian_trust_region",
]

Tangent = tuple[np.ndarray, np.ndarray]
# single-block cache of a point: (X, Y = X²/μ, W, Q, G); W and Q are None when λ = 0
_DenseCache = tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]

DEFAULT_BLOCK_ENTRIES = 1 << 21  # ~2M entries (16 MB of float64) per dense row block


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Full inner product ``Σ a∘b`` (einsum: OpenBLAS's threaded ddot stalls on a busy machine)."""
    return float(np.einsum("i,i->", a.ravel(), b.ravel()))


def paper_lambda(m: int, n: int, rank: int, K: int | None = None) -> float:
    """The paper's regularization weight ``λ = r² √K ln K`` (spec §2.3, §7.1).

    Parameters
    ----------
    m, n : int
        Numbers of users and items.
    rank : int
        Target rank ``r``.
    K : int, optional
        Size parameter; default ``max(m, n)`` (spec [reading] for ``m ≠ n``).

    Returns
    -------
    float
        ``r² · sqrt(K) · ln K`` (0 when K = 1).
    """
    k = float(max(m, n) if K is None else K)
    if k < 1:
        raise ValueError(f"K must be >= 1, got {K}")
    return float(float(rank) ** 2 * np.sqrt(k) * np.log(k))


def paper_init(m: int, n: int, rank: int, seed: int | np.random.Generator = 0, target: float = 0.95) -> Tangent:
    """Initial factors of spec §2.7: i.i.d. N(0,1) entries scaled so that ``‖L0 R0ᵀ‖_∞ = target``.

    Parameters
    ----------
    m, n, rank : int
        Shapes ``L0 ∈ R^{m×r}``, ``R0 ∈ R^{n×r}``.
    seed : int or numpy.random.Generator
        Randomness.
    target : float
        ``‖X0‖_∞`` after scaling (0.95 in the paper).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``(L0, R0)``.
    """
    rng = np.random.default_rng(seed)
    L0 = rng.standard_normal((m, rank))
    R0 = rng.standard_normal((n, rank))
    mx = float(np.abs(L0 @ R0.T).max()) if m * n <= DEFAULT_BLOCK_ENTRIES else _blocked_absmax(L0, R0)
    c = np.sqrt(target / mx)
    return L0 * c, R0 * c


def _blocked_absmax(L: np.ndarray, R: np.ndarray, block_entries: int = DEFAULT_BLOCK_ENTRIES) -> float:
    rb = max(1, block_entries // max(1, R.shape[0]))
    out = 0.0
    for i0 in range(0, L.shape[0], rb):
        out = max(out, float(np.abs(L[i0 : i0 + rb] @ R.T).max()))
    return out


def balance_factors(L: np.ndarray, R: np.ndarray) -> Tangent:
    """Balanced representative ``(U Σ^{1/2}, V Σ^{1/2})`` of ``L Rᵀ = U Σ Vᵀ`` (spec §2.5).

    Computed from thin QR factorizations of both factors and an r×r SVD, O((m+n) r²); the result is
    unique up to the signs of singular-vector pairs (fixed here so that the largest-magnitude entry
    of each column of ``U`` is positive).

    Parameters
    ----------
    L, R : numpy.ndarray
        Factors ``m×r`` and ``n×r``.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Balanced factors with the same product, columns ordered by decreasing singular value.
    """
    Ql, Rl = np.linalg.qr(L)
    Qr, Rr = np.linalg.qr(R)
    u, s, vt = np.linalg.svd(Rl @ Rr.T)
    U = Ql @ u
    V = Qr @ vt.T
    idx = np.argmax(np.abs(U), axis=0)
    sign = np.sign(U[idx, np.arange(U.shape[1])])
    sign[sign == 0] = 1.0
    rs = np.sqrt(s) * sign
    return U * rs, V * rs


# ---------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairData:
    """Comparisons aggregated per (user, unordered item pair) (spec §1.1–1.2).

    Pair ``t`` is ``(user[t], a[t], b[t])`` with ``a[t] < b[t]``; ``w_pos[t]`` is the total weight of
    observations where ``a`` was preferred and ``w_neg[t]`` where ``b`` was preferred. Repeated rows are
    independent draws, so they simply add weight (spec §1.1). The negative log-likelihood is

        𝓛(X) = Σ_t w_pos[t] ℓ(Δ_t) + w_neg[t] ℓ(−Δ_t),   Δ_t = X[u_t, a_t] − X[u_t, b_t],
        ℓ(z) = log(1 + exp(−z/σ)).

    Attributes
    ----------
    m, n : int
        Numbers of users and items (dense ids ``0..m-1``, ``0..n-1``).
    user, a, b : numpy.ndarray
        int64 arrays of length P.
    w_pos, w_neg : numpy.ndarray
        float64 weights, ``w_pos + w_neg > 0``.
    """

    m: int
    n: int
    user: np.ndarray
    a: np.ndarray
    b: np.ndarray
    w_pos: np.ndarray
    w_neg: np.ndarray

    @classmethod
    def from_triples(
        cls,
        m: int,
        n: int,
        user: np.ndarray,
        winner: np.ndarray,
        loser: np.ndarray,
        weight: np.ndarray | None = None,
    ) -> PairData:
        """Aggregate directed comparisons ``(user, winner, loser)`` into :class:`PairData`.

        Parameters
        ----------
        m, n : int
            Numbers of users and items.
        user, winner, loser : numpy.ndarray
            Dense integer ids, one entry per comparison (``winner != loser``).
        weight : numpy.ndarray, optional
            Positive replication weights (default 1).

        Returns
        -------
        PairData
            Pairs sorted by (user, a, b).
        """
        user = np.asarray(user, dtype=np.int64)
        winner = np.asarray(winner, dtype=np.int64)
        loser = np.asarray(loser, dtype=np.int64)
        N = user.size
        if not (winner.size == N and loser.size == N):
            raise ValueError("user, winner and loser must have the same length")
        w = np.ones(N) if weight is None else np.asarray(weight, dtype=np.float64)
        if w.size != N:
            raise ValueError("weight must have one entry per comparison")
        if N and (user.min() < 0 or user.max() >= m):
            raise ValueError("user ids out of range")
        if N and (min(winner.min(), loser.min()) < 0 or max(winner.max(), loser.max()) >= n):
            raise ValueError("item ids out of range")
        if np.any(winner == loser):
            raise ValueError("a comparison has winner == loser")
        if np.any(~np.isfinite(w)) or np.any(w <= 0):
            raise ValueError("weights must be finite and > 0")
        a = np.minimum(winner, loser)
        b = np.maximum(winner, loser)
        pos = winner == a
        if float(m) * n * n < 2.0**62:
            uniq, inv = np.unique((user * n + a) * n + b, return_inverse=True)
            uu, rest = np.divmod(uniq, n * n)
            aa, bb = np.divmod(rest, n)
        else:  # pragma: no cover - astronomically many items
            keys, inv = np.unique(np.stack([user, a, b], axis=1), axis=0, return_inverse=True)
            uu, aa, bb = keys.T
        inv = inv.ravel()
        P = uu.size
        w_pos = np.bincount(inv, weights=np.where(pos, w, 0.0), minlength=P)
        w_neg = np.bincount(inv, weights=np.where(pos, 0.0, w), minlength=P)
        return cls.build(m, n, uu, aa, bb, w_pos, w_neg)

    @classmethod
    def build(
        cls,
        m: int,
        n: int,
        user: np.ndarray,
        a: np.ndarray,
        b: np.ndarray,
        w_pos: np.ndarray,
        w_neg: np.ndarray,
    ) -> PairData:
        """Already aggregated pairs (``a < b``) → :class:`PairData`, stably sorted by user."""
        user = np.asarray(user, dtype=np.int64)
        order = np.argsort(user, kind="stable")
        return cls(
            m=int(m),
            n=int(n),
            user=user[order],
            a=np.asarray(a, dtype=np.int64)[order],
            b=np.asarray(b, dtype=np.int64)[order],
            w_pos=np.asarray(w_pos, dtype=np.float64)[order],
            w_neg=np.asarray(w_neg, dtype=np.float64)[order],
        )

    @property
    def n_pairs(self) -> int:
        """Number of distinct (user, unordered pair) groups P."""
        return int(self.user.size)

    @property
    def total_weight(self) -> float:
        """Total comparison weight N (the number of comparisons when all weights are 1)."""
        return float(self.w_pos.sum() + self.w_neg.sum())

    def subset(self, mask: np.ndarray) -> PairData:
        """The pairs selected by a boolean mask (same m, n)."""
        return PairData.build(
            self.m, self.n, self.user[mask], self.a[mask], self.b[mask], self.w_pos[mask], self.w_neg[mask]
        )

    def scatter(self, c: np.ndarray) -> sp.csr_matrix:
        """The sparse m×n matrix ``S(c)`` of spec §2.4 (``+c`` at (u, a), ``−c`` at (u, b))."""
        return sp.csr_matrix(
            (np.r_[c, -c], (np.r_[self.user, self.user], np.r_[self.a, self.b])), shape=(self.m, self.n)
        )


# ---------------------------------------------------------------------------------------------------
# objective
# ---------------------------------------------------------------------------------------------------


@dataclass
class PointEval:
    """Value, Euclidean factor gradients and the caches a Hessian-vector product needs at ``(L, R)``.

    Attributes
    ----------
    L, R : numpy.ndarray
        The point.
    f, loss, reg : float
        ``F = loss + λ·reg`` with ``reg = μ log Σ exp(X²/μ)``.
    egrad_L, egrad_R : numpy.ndarray
        ``G(X) R`` and ``G(X)ᵀ L`` (spec §2.5).
    """

    L: np.ndarray
    R: np.ndarray
    f: float
    loss: float
    reg: float
    egrad_L: np.ndarray
    egrad_R: np.ndarray
    # caches (private): per-pair dℓ/dΔ and d²ℓ/dΔ², the log-sum-exp shift q and normaliser zs
    # (Z = e^q zs), Q R and Qᵀ L, and for a single block the dense (X, Y = X²/μ, W, Q, G)
    c1: np.ndarray = field(repr=False)
    h: np.ndarray = field(repr=False)
    q: float = 0.0
    zs: float = 1.0
    QR: np.ndarray | None = field(default=None, repr=False)
    QtL: np.ndarray | None = field(default=None, repr=False)
    dense: _DenseCache | None = field(default=None, repr=False)


class SmoothedBTLObjective:
    """``F(X) = 𝓛(X) + λ · μ log Σ_ij exp(X_ij²/μ)`` on factors ``X = L Rᵀ`` (spec §2.1, §2.3, §2.4).

    Derivatives (spec §2.4; per pair ``c = dℓ/dΔ``, ``h = d²ℓ/dΔ²``, ``W = softmax(X²/μ)``, ``Q = 2 X∘W``):

        G(X)      = S(c) + λ Q
        DG(X)[Ė]  = S(h · Δ(Ė)) + λ [2 W∘Ė∘(1 + 2X²/μ) − (1/μ) Q ⟨Q, Ė⟩]

    and on the factors ``egrad = (G R, Gᵀ L)``, ``ehess = (DG[Ė] R + G ξ_R, DG[Ė]ᵀ L + Gᵀ ξ_L)`` with
    ``Ė = ξ_L Rᵀ + L ξ_Rᵀ`` (spec §2.5). The regularizer needs every entry of ``X`` (O(m n r), spec §5), so
    the whole objective is evaluated on dense row blocks of ``X`` of at most ``block_entries`` entries:
    ``Δ`` is gathered from the block by flat index, ``S(c)`` is scattered with ``np.bincount``, and the
    log-sum-exp is streamed with a running max shift, so ``exp(X²)`` is never formed unshifted. With a
    single block the dense ``X, W, Q, G`` are kept for the Hessian-vector products at that point.

    Parameters
    ----------
    data : PairData
        Aggregated comparisons.
    sigma : float
        Logistic scale σ > 0 (0.18 in the paper).
    lam : float
        Regularization weight λ ≥ 0.
    mu : float
        Log-sum-exp smoothing μ > 0 (1 in the paper).
    block_entries : int
        Maximal number of entries of a dense row block of ``X``.
    """

    def __init__(
        self,
        data: PairData,
        sigma: float = 0.18,
        lam: float = 0.0,
        mu: float = 1.0,
        block_entries: int = DEFAULT_BLOCK_ENTRIES,
    ) -> None:
        if not (np.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be > 0, got {sigma}")
        if not (np.isfinite(lam) and lam >= 0):
            raise ValueError(f"lambda must be >= 0, got {lam}")
        if not (np.isfinite(mu) and mu > 0):
            raise ValueError(f"mu must be > 0, got {mu}")
        self.data = data
        self.sigma = float(sigma)
        self.lam = float(lam)
        self.mu = float(mu)
        self.m, self.n = data.m, data.n
        rb = max(1, int(block_entries) // max(1, self.n))
        bounds = np.arange(0, self.m + rb, rb)
        bounds[-1] = min(bounds[-1], self.m)
        bounds = np.unique(np.minimum(bounds, self.m))
        # pairs are sorted by user, so each row block owns a contiguous pair range
        pb = np.searchsorted(data.user, bounds)
        self.blocks = [(int(bounds[k]), int(bounds[k + 1]), int(pb[k]), int(pb[k + 1])) for k in range(bounds.size - 1)]
        self.single_block = len(self.blocks) == 1
        self.fa = data.user * self.n + data.a
        self.fb = data.user * self.n + data.b
        self.n_evals = 0
        self.n_hvps = 0

    # -- pieces ---------------------------------------------------------------------------------------
    def _pairs(self, delta: np.ndarray, p0: int, p1: int) -> tuple[float, np.ndarray, np.ndarray]:
        """Loss, dℓ/dΔ and d²ℓ/dΔ² of pairs p0:p1 given their Δ (spec §2.1)."""
        d = self.data
        wp = d.w_pos[p0:p1]
        wn = d.w_neg[p0:p1]
        wt = wp + wn
        z = delta / self.sigma
        # one exp for everything: e = exp(−|z|), softplus(−z) = log1p(e) + max(−z, 0),
        # softplus(z) = softplus(−z) + z, expit(±z) from e without overflow
        e = np.exp(-np.abs(z))
        inv = 1.0 / (1.0 + e)
        ei = e * inv
        pos = z >= 0
        sp_neg = np.log1p(e) + np.maximum(-z, 0.0)
        loss = float(_dot(wt, sp_neg) + _dot(wn, z))
        s_pos = np.where(pos, inv, ei)  # expit(z)
        s_neg = np.where(pos, ei, inv)  # expit(−z)
        c = (wn * s_pos - wp * s_neg) / self.sigma
        h = wt * (ei * inv) / self.sigma**2
        return loss, c, h

    def _scatter(self, c: np.ndarray, ia: np.ndarray, ib: np.ndarray, rows: int) -> np.ndarray:
        """Dense ``S(c)`` of a row block (``+c`` at (u, a), ``−c`` at (u, b)) via bincount."""
        size = rows * self.n
        out = np.bincount(ia, weights=c, minlength=size)
        out -= np.bincount(ib, weights=c, minlength=size)
        return out.reshape(rows, self.n)

    def _block_xy(self, Lb: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X = Lb @ R.T
        Y = np.square(X)
        if self.mu != 1.0:
            Y /= self.mu
        return X, Y

    # -- value and gradient ---------------------------------------------------------------------------
    def value(self, L: np.ndarray, R: np.ndarray) -> float:
        """``F(L Rᵀ)``."""
        return self.evaluate(L, R, cache=False).f

    def evaluate(self, L: np.ndarray, R: np.ndarray, cache: bool = True) -> PointEval:
        """Value, factor gradients ``(G R, Gᵀ L)`` and Hessian caches at ``(L, R)`` (spec §2.4–2.5).

        Parameters
        ----------
        L, R : numpy.ndarray
            Factors ``m×r``, ``n×r``.
        cache : bool
            Keep the dense single-block matrices for :meth:`ehess` (costs O(mn) memory).

        Returns
        -------
        PointEval
        """
        self.n_evals += 1
        m, n = self.m, self.n
        r = L.shape[1]
        lam, mu = self.lam, self.mu
        P = self.data.n_pairs
        c1 = np.empty(P)
        h = np.empty(P)
        loss = 0.0
        egL = np.empty((m, r))
        egR = np.zeros((n, r))
        if self.single_block:
            X, Y = self._block_xy(L, R)
            xf = X.ravel()
            loss, c1, h = self._pairs(xf[self.fa] - xf[self.fb], 0, P)
            G = self._scatter(c1, self.fa, self.fb, m)
            dense: _DenseCache | None
            reg, q, zs, dense, QR, QtL = 0.0, 0.0, 1.0, None, None, None
            if lam > 0:
                q = float(Y.max())
                W = np.exp(Y - q)
                zs = float(W.sum())
                W /= zs
                Q = 2.0 * X * W
                G += lam * Q
                reg = mu * (q + np.log(zs))
                if cache:
                    dense = (X, Y, W, Q, G)
            elif cache:
                dense = (X, Y, None, None, G)
            egL = G @ R
            egR = G.T @ L
        else:
            QR = np.empty((m, r))
            QtL = np.zeros((n, r))
            q_run, s_run = -np.inf, 0.0
            block_q: list[tuple[int, int, float]] = []
            for i0, i1, p0, p1 in self.blocks:
                Lb = L[i0:i1]
                X, Y = self._block_xy(Lb, R)
                xf = X.ravel()
                ia = self.fa[p0:p1] - i0 * n
                ib = self.fb[p0:p1] - i0 * n
                lb, c1[p0:p1], h[p0:p1] = self._pairs(xf[ia] - xf[ib], p0, p1)
                loss += lb
                S = self._scatter(c1[p0:p1], ia, ib, i1 - i0)
                egL[i0:i1] = S @ R
                egR += S.T @ Lb
                if lam > 0:
                    qb = float(Y.max())
                    E = np.exp(Y - qb)
                    sb = float(E.sum())
                    T = 2.0 * X * E
                    QR[i0:i1] = T @ R
                    if qb > q_run:
                        scale = float(np.exp(q_run - qb)) if np.isfinite(q_run) else 0.0
                        QtL *= scale
                        s_run *= scale
                        q_run = qb
                    fct = float(np.exp(qb - q_run))
                    QtL += fct * (T.T @ Lb)
                    s_run += fct * sb
                    block_q.append((i0, i1, qb))
            dense = None
            if lam > 0:
                for i0, i1, qb in block_q:
                    QR[i0:i1] *= np.exp(qb - q_run) / s_run
                QtL /= s_run
                egL += lam * QR
                egR += lam * QtL
                q, zs = q_run, s_run
                reg = mu * (q + np.log(zs))
            else:
                reg, q, zs, QR, QtL = 0.0, 0.0, 1.0, None, None
        f = loss + lam * float(reg)
        return PointEval(
            L=L,
            R=R,
            f=f,
            loss=loss,
            reg=float(reg),
            egrad_L=egL,
            egrad_R=egR,
            c1=c1,
            h=h,
            q=q,
            zs=zs,
            QR=QR,
            QtL=QtL,
            dense=dense,
        )

    # -- Hessian-vector product -----------------------------------------------------------------------
    def ehess(self, pt: PointEval, xiL: np.ndarray, xiR: np.ndarray) -> Tangent:
        """Euclidean Hessian of ``(L, R) ↦ F(L Rᵀ)`` along ``(ξ_L, ξ_R)`` (spec §2.5, eqs. 19–21).

        Returns ``(DG[Ė] R + G ξ_R, DG[Ė]ᵀ L + Gᵀ ξ_L)`` with ``Ė = ξ_L Rᵀ + L ξ_Rᵀ``.
        """
        self.n_hvps += 1
        m, n = self.m, self.n
        lam, mu = self.lam, self.mu
        L, R = pt.L, pt.R
        if self.single_block and pt.dense is not None:
            X, Y, W, Q, G = pt.dense
            E = xiL @ R.T + L @ xiR.T
            ef = E.ravel()
            DG = self._scatter(pt.h * (ef[self.fa] - ef[self.fb]), self.fa, self.fb, m)
            if lam > 0:
                assert W is not None and Q is not None  # cached whenever λ > 0
                inner = _dot(Q, E)
                DG += lam * (2.0 * W * E * (1.0 + 2.0 * Y) - (inner / mu) * Q)
            return DG @ R + G @ xiR, DG.T @ L + G.T @ xiL
        r = L.shape[1]
        hL = np.empty((m, r))
        hR = np.zeros((n, r))
        inner = 0.0
        for i0, i1, p0, p1 in self.blocks:
            Lb = L[i0:i1]
            xb = xiL[i0:i1]
            ia = self.fa[p0:p1] - i0 * n
            ib = self.fb[p0:p1] - i0 * n
            E = xb @ R.T + Lb @ xiR.T
            ef = E.ravel()
            rows = i1 - i0
            D1 = self._scatter(pt.h[p0:p1] * (ef[ia] - ef[ib]), ia, ib, rows)
            G = self._scatter(pt.c1[p0:p1], ia, ib, rows)
            if lam > 0:
                X, Y = self._block_xy(Lb, R)
                W = np.exp(Y - pt.q)
                W /= pt.zs
                Q = 2.0 * X * W
                inner += _dot(Q, E)
                D1 += lam * (2.0 * W * E * (1.0 + 2.0 * Y))
                G += lam * Q
            hL[i0:i1] = D1 @ R + G @ xiR
            hR += D1.T @ Lb + G.T @ xb
        if lam > 0:
            assert pt.QR is not None and pt.QtL is not None  # computed whenever λ > 0
            hL -= (lam * inner / mu) * pt.QR
            hR -= (lam * inner / mu) * pt.QtL
        return hL, hR

    # -- dense references (tests) -----------------------------------------------------------------------
    def log_sum_exp_sq(self, X: np.ndarray) -> float:
        """Stable ``μ log Σ exp(X²/μ)`` of a dense matrix (spec §2.3 numerics)."""
        Y = np.square(X) / self.mu
        q = float(Y.max())
        return self.mu * (q + float(np.log(np.exp(Y - q).sum())))

    def loss_from_deltas(self, delta: np.ndarray) -> float:
        """``𝓛 = Σ w_pos ℓ(Δ) + w_neg ℓ(−Δ)`` with ``ℓ(z) = softplus(−z/σ)`` (spec §2.1)."""
        return self._pairs(np.asarray(delta, dtype=float), 0, self.data.n_pairs)[0]

    def dense_value(self, X: np.ndarray) -> float:
        """``F(X)`` for a dense matrix (reference for tests)."""
        d = self.data
        out = self.loss_from_deltas(X[d.user, d.a] - X[d.user, d.b])
        if self.lam > 0:
            out += self.lam * self.log_sum_exp_sq(X)
        return out

    def dense_gradient(self, X: np.ndarray) -> np.ndarray:
        """``G(X)`` as a dense m×n matrix (reference for tests; sparse-matrix scatter)."""
        d = self.data
        _, c, _ = self._pairs(X[d.user, d.a] - X[d.user, d.b], 0, d.n_pairs)
        G = d.scatter(c).toarray()
        if self.lam > 0:
            Y = np.square(X) / self.mu
            W = np.exp(Y - Y.max())
            W /= W.sum()
            G += self.lam * 2.0 * X * W
        return G

    def dense_hvp(self, X: np.ndarray, E: np.ndarray) -> np.ndarray:
        """``DG(X)[E]`` as a dense matrix (reference for tests)."""
        d = self.data
        _, _, h = self._pairs(X[d.user, d.a] - X[d.user, d.b], 0, d.n_pairs)
        out = d.scatter(h * (E[d.user, d.a] - E[d.user, d.b])).toarray()
        if self.lam > 0:
            Y = np.square(X) / self.mu
            W = np.exp(Y - Y.max())
            W /= W.sum()
            Q = 2.0 * X * W
            out += self.lam * (2.0 * W * E * (1.0 + 2.0 * Y) - Q * _dot(Q, E) / self.mu)
        return out


# ---------------------------------------------------------------------------------------------------
# geometry
# ---------------------------------------------------------------------------------------------------


def _sym(M: np.ndarray) -> np.ndarray:
    return cast(np.ndarray, 0.5 * (M + M.T))


class TwoFactorGeometry:
    """Quotient geometry of ``(L, R) ~ (L M⁻¹, R Mᵀ)`` at one point (spec §2.5; Mishra et al.).

    Metric ``g(ξ, ζ) = tr((LᵀL)⁻¹ ξ_Lᵀ ζ_L) + tr((RᵀR)⁻¹ ξ_Rᵀ ζ_R)``; horizontal projection by an r×r
    Sylvester solve; Riemannian gradient ``(egrad_L LᵀL, egrad_R RᵀR)``; Riemannian Hessian = horizontal
    projection of the Levi-Civita derivative of the gradient.

    Parameters
    ----------
    L, R : numpy.ndarray
        Full-column-rank factors.
    """

    def __init__(self, L: np.ndarray, R: np.ndarray) -> None:
        self.L, self.R = L, R
        self.A = L.T @ L
        self.B = R.T @ R
        cond = max(np.linalg.cond(self.A), np.linalg.cond(self.B))
        if not np.isfinite(cond) or cond > 1e14:
            raise np.linalg.LinAlgError(f"factor Gram matrix is (numerically) singular (cond {cond:.2e})")
        self.Ai = np.linalg.inv(self.A)
        self.Bi = np.linalg.inv(self.B)
        self.P = self.A @ self.B
        # P = A B = T D T⁻¹ with T = A^{1/2} V, where A^{1/2} B A^{1/2} = V D Vᵀ (D > 0): the Sylvester
        # equation P Ω + Ω P = C becomes elementwise in the eigenbasis (faster than a Schur-based solve)
        ea, Va = np.linalg.eigh(self.A)
        ea = np.maximum(ea, np.finfo(float).tiny)
        Ah = (Va * np.sqrt(ea)) @ Va.T
        Ahi = (Va / np.sqrt(ea)) @ Va.T
        dd, V = np.linalg.eigh(Ah @ self.B @ Ah)
        self._T = Ah @ V
        self._Ti = V.T @ Ahi
        self._den = dd[:, None] + dd[None, :]

    def solve_sylvester(self, C: np.ndarray) -> np.ndarray:
        """Solve ``P Ω + Ω P = C`` for ``P = (LᵀL)(RᵀR)`` (equals ``scipy.linalg.solve_sylvester(P, P, C)``)."""
        return cast(np.ndarray, self._T @ ((self._Ti @ C @ self._T) / self._den) @ self._Ti)

    def inner(self, xi: Tangent, zeta: Tangent) -> float:
        """Metric ``g_x(ξ, ζ)``."""
        return _dot(xi[0] @ self.Ai, zeta[0]) + _dot(xi[1] @ self.Bi, zeta[1])

    def norm(self, xi: Tangent) -> float:
        """``sqrt(g_x(ξ, ξ))``."""
        return float(np.sqrt(max(self.inner(xi, xi), 0.0)))

    def proj(self, eta: Tangent) -> Tangent:
        """Horizontal projection ``Π_x(η)``: ``P Ω + Ω P = A Rᵀη_R − η_LᵀL B``, ``(η_L + LΩᵀ, η_R − RΩ)``."""
        rhs = self.A @ (self.R.T @ eta[1]) - (eta[0].T @ self.L) @ self.B
        Om = self.solve_sylvester(rhs)
        return eta[0] + self.L @ Om.T, eta[1] - self.R @ Om

    def horizontal_residual(self, xi: Tangent) -> float:
        """``‖A⁻¹ ξ_Lᵀ L − Rᵀ ξ_R B⁻¹‖_F`` (0 for horizontal vectors)."""
        return float(np.linalg.norm(self.Ai @ (xi[0].T @ self.L) - (self.R.T @ xi[1]) @ self.Bi))

    def rgrad(self, egrad_L: np.ndarray, egrad_R: np.ndarray) -> Tangent:
        """Riemannian gradient ``(egrad_L LᵀL, egrad_R RᵀR)`` (horizontal already)."""
        return egrad_L @ self.A, egrad_R @ self.B

    def grad_norm(self, egrad_L: np.ndarray, egrad_R: np.ndarray) -> float:
        """``‖grad‖_x = sqrt(tr(A egrad_Lᵀ egrad_L A A⁻¹) + …) = sqrt(⟨egrad_L A, egrad_L⟩ + ⟨egrad_R B, egrad_R⟩)``."""
        v = _dot(egrad_L @ self.A, egrad_L) + _dot(egrad_R @ self.B, egrad_R)
        return float(np.sqrt(max(v, 0.0)))

    def _conn(self, Z: np.ndarray, Zi: np.ndarray, G: np.ndarray, xi: np.ndarray, g: np.ndarray) -> np.ndarray:
        # Christoffel term Γ(ξ, g) of g(ξ,ζ) = tr(G⁻¹ ξᵀζ), G = ZᵀZ, derived from the Koszul formula:
        # Γ(ξ, ζ) = −ζ G⁻¹ sym(Zᵀξ) − ξ G⁻¹ sym(Zᵀζ) + Z sym(G⁻¹ ξᵀζ G⁻¹) G
        out: np.ndarray = -g @ (Zi @ _sym(Z.T @ xi)) - xi @ (Zi @ _sym(Z.T @ g)) + Z @ (_sym(Zi @ (xi.T @ g) @ Zi) @ G)
        return out

    def rhess(self, egrad: Tangent, ehess: Tangent, grad: Tangent, xi: Tangent) -> Tangent:
        """Riemannian Hessian ``Π_x(D grad[ξ] + Γ(ξ, grad))`` (spec §2.5, paper eqs. 17–18).

        ``D grad_L[ξ] = ehess_L A + 2 egrad_L sym(ξ_Lᵀ L)`` (same for R with B).
        """
        L, R = self.L, self.R
        HL = ehess[0] @ self.A + 2.0 * egrad[0] @ _sym(xi[0].T @ L) + self._conn(L, self.Ai, self.A, xi[0], grad[0])
        HR = ehess[1] @ self.B + 2.0 * egrad[1] @ _sym(xi[1].T @ R) + self._conn(R, self.Bi, self.B, xi[1], grad[1])
        return self.proj((HL, HR))


def retract(L: np.ndarray, R: np.ndarray, xi: Tangent, rebalance: bool = True) -> Tangent:
    """Retraction ``R_x(ξ) = (L + ξ_L, R + ξ_R)`` (paper eq. 26) with Manopt's optional rescaling
    ``L/c, R·c``, ``c = sqrt(‖L‖_F/‖R‖_F)`` at the new point (leaves ``L Rᵀ`` unchanged)."""
    Ln = L + xi[0]
    Rn = R + xi[1]
    if rebalance:
        c = np.sqrt(np.linalg.norm(Ln) / np.linalg.norm(Rn))
        if np.isfinite(c) and c > 0:
            Ln = Ln / c
            Rn = Rn * c
    return Ln, Rn


# ---------------------------------------------------------------------------------------------------
# solvers
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SolverOutput:
    """What a solver returns.

    Attributes
    ----------
    L, R : numpy.ndarray
        Final factors.
    objective : float
        Final ``F``.
    grad_norm : float
        Final Riemannian gradient norm ``‖grad‖_x`` (spec §2.5; the same quantity for every solver).
    iterations : int
        Outer iterations.
    converged : bool
        Whether the stopping rule (not the iteration/time cap) ended the run.
    stop_reason : str
        Human-readable reason.
    trace : pandas.DataFrame
        One row per iteration (``iteration, objective, grad_norm, time_s`` + solver-specific columns).
    n_evals, n_hvps : int
        Objective/gradient evaluations and Hessian-vector products.
    time_s : float
        Wall time.
    """

    L: np.ndarray
    R: np.ndarray
    objective: float
    grad_norm: float
    iterations: int
    converged: bool
    stop_reason: str
    trace: pd.DataFrame
    n_evals: int
    n_hvps: int
    time_s: float


def _tcg(
    obj: SmoothedBTLObjective,
    geo: TwoFactorGeometry,
    pt: PointEval,
    grad: Tangent,
    radius: float,
    max_inner: int,
    kappa: float,
    theta: float,
) -> tuple[Tangent, Tangent, str, int]:
    """Steihaug–Toint truncated CG for the trust-region subproblem (spec §2.6, no preconditioner)."""
    egrad = (pt.egrad_L, pt.egrad_R)

    def hess(v: Tangent) -> Tangent:
        return geo.rhess(egrad, obj.ehess(pt, v[0], v[1]), grad, v)

    etaL = np.zeros_like(grad[0])
    etaR = np.zeros_like(grad[1])
    HetaL = np.zeros_like(grad[0])
    HetaR = np.zeros_like(grad[1])
    rL, rR = grad
    rr = geo.inner((rL, rR), (rL, rR))
    r0 = np.sqrt(rr)
    dL, dR = -rL, -rR
    e_e, e_d, d_d = 0.0, 0.0, rr
    stop = "MAX_INNER"
    j = 0
    for j in range(1, max_inner + 1):
        HdL, HdR = hess((dL, dR))
        c = geo.inner((dL, dR), (HdL, HdR))
        gamma = rr / c if c > 0 else 0.0
        e_e_new = e_e + 2.0 * gamma * e_d + gamma**2 * d_d
        if c <= 0 or e_e_new >= radius**2:
            tau = (-e_d + np.sqrt(max(e_d**2 + d_d * (radius**2 - e_e), 0.0))) / d_d
            return (
                (etaL + tau * dL, etaR + tau * dR),
                (HetaL + tau * HdL, HetaR + tau * HdR),
                "NEG_CURV" if c <= 0 else "HIT_BOUNDARY",
                j,
            )
        etaL = etaL + gamma * dL
        etaR = etaR + gamma * dR
        HetaL = HetaL + gamma * HdL
        HetaR = HetaR + gamma * HdR
        e_e = e_e_new
        rL, rR = geo.proj((rL + gamma * HdL, rR + gamma * HdR))
        rr_old = rr
        rr = geo.inner((rL, rR), (rL, rR))
        if np.sqrt(rr) <= r0 * min(r0**theta, kappa):
            stop = "TARGET_REACHED"
            break
        beta = rr / rr_old
        dL, dR = geo.proj((-rL + beta * dL, -rR + beta * dR))
        e_d = beta * (e_d + gamma * d_d)
        d_d = rr + beta**2 * d_d
    return (etaL, etaR), (HetaL, HetaR), stop, j


def riemannian_trust_region(
    obj: SmoothedBTLObjective,
    L0: np.ndarray,
    R0: np.ndarray,
    *,
    max_iter: int = 500,
    gtol: float = 1e-6,
    delta_bar: float | None = None,
    delta0: float | None = None,
    rho_prime: float = 0.1,
    kappa: float = 0.1,
    theta: float = 1.0,
    max_inner: int | None = None,
    rebalance: bool = True,
    time_limit: float | None = None,
) -> SolverOutput:
    """Riemannian trust-region method with truncated CG on the two-factor quotient (spec §2.6).

    Stopping rule: ``‖grad‖_x < gtol`` (absolute; paper 1e-6) → converged. Caps: ``max_iter`` outer
    iterations (paper 500), optional ``time_limit`` seconds, and a collapsed radius
    (``Δ < 1e-12 Δ̄``, i.e. no further decrease is attainable in floating point) — all reported as not
    converged.

    Parameters
    ----------
    obj : SmoothedBTLObjective
        The objective.
    L0, R0 : numpy.ndarray
        Initial factors.
    max_iter : int
        Maximal outer iterations.
    gtol : float
        Gradient-norm tolerance (metric norm of spec §2.5).
    delta_bar, delta0 : float, optional
        Maximal and initial radius; defaults ``10 r`` and ``Δ̄/8`` (Manopt).
    rho_prime : float
        Acceptance threshold ρ′.
    kappa, theta : float
        tCG stopping parameters (``‖r‖ ≤ ‖r0‖ min(‖r0‖^θ, κ)``).
    max_inner : int, optional
        tCG iteration cap; default ``min((m+n−r) r, 200)``.
    rebalance : bool
        Apply the norm-balancing step after each retraction.
    time_limit : float, optional
        Wall-clock cap in seconds.

    Returns
    -------
    SolverOutput
    """
    t_start = time.perf_counter()
    m, r = L0.shape
    n = R0.shape[0]
    dim = (m + n - r) * r
    if delta_bar is None:
        delta_bar = 10.0 * r
    if delta0 is None:
        delta0 = delta_bar / 8.0
    if max_inner is None:
        max_inner = min(dim, 200)
    evals0, hvps0 = obj.n_evals, obj.n_hvps
    L, R = L0.copy(), R0.copy()
    pt = obj.evaluate(L, R)
    geo = TwoFactorGeometry(L, R)
    grad = geo.rgrad(pt.egrad_L, pt.egrad_R)
    gnorm = geo.norm(grad)
    radius = delta0
    eps = np.finfo(float).eps
    rows: list[dict[str, Any]] = [
        {
            "iteration": 0,
            "objective": pt.f,
            "grad_norm": gnorm,
            "radius": radius,
            "rho": np.nan,
            "inner_iterations": 0,
            "tcg_stop": "",
            "accepted": True,
            "time_s": time.perf_counter() - t_start,
        }
    ]
    converged = False
    reason = f"reached max_iter={max_iter}"
    it = 0
    for it in range(1, max_iter + 1):
        if gnorm < gtol:
            converged = True
            reason = f"gradient norm {gnorm:.3e} < gtol {gtol:g}"
            it -= 1
            break
        if time_limit is not None and time.perf_counter() - t_start > time_limit:
            reason = f"time limit {time_limit:g}s reached"
            it -= 1
            break
        eta, Heta, why, n_inner = _tcg(obj, geo, pt, grad, radius, max_inner, kappa, theta)
        Lc, Rc = retract(L, R, eta, rebalance)
        ptc = obj.evaluate(Lc, Rc)
        try:
            geoc: TwoFactorGeometry | None = TwoFactorGeometry(Lc, Rc)
        except np.linalg.LinAlgError:  # candidate lost rank: treat as a failed step
            geoc = None
        reg = 1e3 * eps * max(1.0, abs(pt.f))
        num = pt.f - ptc.f + reg
        den = -geo.inner(grad, eta) - 0.5 * geo.inner(eta, Heta) + reg
        rho = num / den if den != 0 else -np.inf
        ok = np.isfinite(ptc.f) and geoc is not None
        if den < 0 or rho < 0.25 or not ok:
            radius /= 4.0
        elif rho > 0.75 and why in ("NEG_CURV", "HIT_BOUNDARY"):
            radius = min(2.0 * radius, delta_bar)
        accepted = bool(den >= 0 and rho > rho_prime and ok)
        if accepted:
            L, R, pt = Lc, Rc, ptc
            geo = geoc  # type: ignore[assignment]
            grad = geo.rgrad(pt.egrad_L, pt.egrad_R)
            gnorm = geo.norm(grad)
        rows.append(
            {
                "iteration": it,
                "objective": pt.f,
                "grad_norm": gnorm,
                "radius": radius,
                "rho": float(rho),
                "inner_iterations": n_inner,
                "tcg_stop": why,
                "accepted": accepted,
                "time_s": time.perf_counter() - t_start,
            }
        )
        logger.debug(
            "RTR it %d f=%.10g |grad|=%.3e radius=%.3g rho=%.3g inner=%d %s", it, pt.f, gnorm, radius, rho, n_inner, why
        )
        if radius < 1e-12 * delta_bar:
            reason = "trust radius collapsed (no attainable decrease)"
            break
    else:
        if gnorm < gtol:
            converged = True
            reason = f"gradient norm {gnorm:.3e} < gtol {gtol:g}"
    return SolverOutput(
        L=L,
        R=R,
        objective=pt.f,
        grad_norm=gnorm,
        iterations=it,
        converged=converged,
        stop_reason=reason,
        trace=pd.DataFrame(rows),
        n_evals=obj.n_evals - evals0,
        n_hvps=obj.n_hvps - hvps0,
        time_s=time.perf_counter() - t_start,
    )


def lbfgs_factors(
    obj: SmoothedBTLObjective,
    L0: np.ndarray,
    R0: np.ndarray,
    *,
    max_iter: int = 2000,
    gtol: float = 1e-6,
    grad_rtol: float = 1e-5,
    ftol: float = 1e-12,
    maxcor: int = 20,
    max_restarts: int = 3,
    time_limit: float | None = None,
) -> SolverOutput:
    """L-BFGS on ``z = [vec L; vec R]`` with value ``F(L Rᵀ)`` and gradient ``[vec(G R); vec(Gᵀ L)]``
    (spec §2.10.1, via ``scipy.optimize.minimize(method="L-BFGS-B")``).

    The start is rebalanced to ``‖L‖_F = ‖R‖_F`` (same ``X0``; equalises the curvature of the two blocks
    when m ≠ n, without it L-BFGS stalls far from the optimum on e.g. 6000 users × 5 items).

    Stopping rule: each scipy run ends by its own tests (max-abs gradient ≤ ``gtol`` or relative
    objective reduction ≤ ``ftol``). The run counts as converged when the Riemannian gradient norm of
    spec §2.5 satisfies ``‖grad‖_x ≤ max(gtol, grad_rtol·‖grad(x0)‖_x)``; otherwise L-BFGS is restarted
    from the rebalanced current point (fresh curvature memory), at most ``max_restarts`` times. Caps:
    ``max_iter`` iterations in total, ``20 max_iter`` evaluations per run, optional ``time_limit`` —
    all reported as not converged.

    Parameters
    ----------
    obj : SmoothedBTLObjective
        The objective.
    L0, R0 : numpy.ndarray
        Initial factors.
    max_iter, gtol, ftol, maxcor :
        scipy L-BFGS-B options (``maxiter``, ``gtol``, ``ftol``, ``maxcor``); ``gtol`` is also the absolute
        Riemannian-gradient tolerance.
    grad_rtol : float
        Relative Riemannian-gradient tolerance.
    max_restarts : int
        Restarts allowed when scipy stops before the gradient test holds.
    time_limit : float, optional
        Wall-clock cap in seconds (checked once per iteration).

    Returns
    -------
    SolverOutput
    """
    t_start = time.perf_counter()
    m, r = L0.shape
    n = R0.shape[0]
    evals0, hvps0 = obj.n_evals, obj.n_hvps
    last: dict[str, Any] = {}

    def split(z: np.ndarray) -> Tangent:
        return z[: m * r].reshape(m, r), z[m * r :].reshape(n, r)

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        L, R = split(z)
        pt = obj.evaluate(L, R, cache=False)
        last["z"] = z.copy()
        last["pt"] = pt
        return pt.f, np.concatenate([pt.egrad_L.ravel(), pt.egrad_R.ravel()])

    def rgnorm(pt: PointEval) -> float:
        A = pt.L.T @ pt.L
        B = pt.R.T @ pt.R
        v = _dot(pt.egrad_L @ A, pt.egrad_L) + _dot(pt.egrad_R @ B, pt.egrad_R)
        return float(np.sqrt(max(v, 0.0)))

    def rebalanced(L: np.ndarray, R: np.ndarray) -> Tangent:
        c = np.sqrt(np.linalg.norm(L) / np.linalg.norm(R))
        if np.isfinite(c) and c > 0:
            return L / c, R * c
        return L, R

    rows: list[dict[str, Any]] = []
    timed_out = False

    def callback(intermediate_result: Any) -> None:
        nonlocal timed_out
        z = intermediate_result.x
        pt = last.get("pt")
        if pt is None or not np.array_equal(cast(Any, last.get("z")), z):
            fun(z)
            pt = last["pt"]
        rows.append(
            {
                "iteration": len(rows),
                "objective": pt.f,
                "grad_norm": rgnorm(pt),
                "run": run,
                "time_s": time.perf_counter() - t_start,
            }
        )
        if time_limit is not None and time.perf_counter() - t_start > time_limit:
            timed_out = True
            raise StopIteration

    L, R = rebalanced(np.array(L0, dtype=float), np.array(R0, dtype=float))
    z = np.concatenate([L.ravel(), R.ravel()])
    f0, _ = fun(z)
    g0 = rgnorm(last["pt"])
    rows.append({"iteration": 0, "objective": f0, "grad_norm": g0, "run": 0, "time_s": time.perf_counter() - t_start})
    target = max(gtol, grad_rtol * g0)
    total_it = 0
    converged = False
    msg = ""
    run = 0
    gnorm = g0
    for run in range(max_restarts + 1):
        if g0 <= target:
            converged, msg = True, "initial point already stationary"
            break
        res = minimize(
            fun,
            z,
            jac=True,
            method="L-BFGS-B",
            callback=callback,
            options={
                "maxiter": max_iter - total_it,
                "maxfun": 20 * max_iter,
                "gtol": gtol,
                "ftol": ftol,
                "maxcor": maxcor,
            },
        )
        total_it += int(res.nit)
        L, R = split(np.asarray(res.x, dtype=float).copy())
        pt = obj.evaluate(L, R, cache=False)
        gnorm = rgnorm(pt)
        msg = str(res.message)
        if timed_out:
            msg = f"time limit {time_limit:g}s reached"
            break
        if gnorm <= target:
            converged = bool(res.success)
            break
        if not res.success or total_it >= max_iter:
            break
        logger.info("L-BFGS stopped (%s) with |grad|=%.3e > %.3e: restart %d", msg, gnorm, target, run + 1)
        L, R = rebalanced(L, R)
        z = np.concatenate([L.ravel(), R.ravel()])
    else:
        msg = f"{msg}; |grad| {gnorm:.3e} > {target:.3e} after {max_restarts} restarts"
    for k, row in enumerate(rows):
        row["iteration"] = k
    if converged:
        msg = f"{msg}; |grad| {gnorm:.3e} <= {target:.3e}"
    pt = obj.evaluate(L, R, cache=False)
    return SolverOutput(
        L=L,
        R=R,
        objective=pt.f,
        grad_norm=gnorm,
        iterations=total_it,
        converged=converged,
        stop_reason=msg,
        trace=pd.DataFrame(rows),
        n_evals=obj.n_evals - evals0,
        n_hvps=obj.n_hvps - hvps0,
        time_s=time.perf_counter() - t_start,
    )


SolverName = Literal["lbfgs", "rtr"]
