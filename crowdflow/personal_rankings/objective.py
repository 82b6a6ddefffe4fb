"""The smoothed low-rank BTL objective on factors ``X = L Rᵀ``, with gradients and Hessian-vector products.

:class:`SmoothedBTLObjective` evaluates

    F(X) = 𝓛(X) + λ · μ log Σ_ij exp(X_ij²/μ),
    𝓛(X) = Σ_t w_pos[t] ℓ(Δ_t) + w_neg[t] ℓ(−Δ_t),   Δ_t = X[u_t, a_t] − X[u_t, b_t],   ℓ(z) = log(1 + e^{−z/σ}),

its Euclidean gradient ``G(X) = S(c) + λ Q`` (``Q = 2 X∘W``, ``W = softmax(X²/μ)``) and its directional
derivative, both mapped to the factors as ``(G R, Gᵀ L)``. The regularizer needs every entry of X, so
the evaluation runs over dense row blocks of X (gather by flat index, scatter by ``np.bincount``)
with a streaming log-sum-exp that never forms ``exp(X²)`` unshifted. Dense references
(``dense_value``, ``dense_gradient``, ``dense_hvp``) check the blocked code in the tests.

Derivation and numerics: docs/methods/personal_rankings.md §2.1–2.4 and §2.10.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

from crowdflow.personal_rankings.types import DEFAULT_MU, PairData, Tangent, dot

__all__ = ["DEFAULT_BLOCK_ENTRIES", "PointEval", "SmoothedBTLObjective", "pair_nll", "pair_nll_slope"]

# single-block cache of a point: (X, Y = X²/μ, W, Q, G); W and Q are None when λ = 0
_DenseCache = tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]

DEFAULT_BLOCK_ENTRIES = 1 << 21  # ~2M entries (16 MB of float64) per dense row block


def pair_nll(z: np.ndarray, w_pos: np.ndarray, w_neg: np.ndarray) -> float:
    """``Σ w_pos·log(1 + e^{−z}) + w_neg·log(1 + e^{z})`` for scaled differences ``z = Δ/σ``.

    The plain (``logaddexp``) form of the negative log-likelihood 𝓛, used by the baselines and by the
    held-out scores; :class:`SmoothedBTLObjective` evaluates the same sum fused with its derivatives
    (and is checked against it in the tests).
    """
    return float(np.einsum("i,i->", w_pos, np.logaddexp(0.0, -z)) + np.einsum("i,i->", w_neg, np.logaddexp(0.0, z)))


def pair_nll_slope(z: np.ndarray, w_pos: np.ndarray, w_neg: np.ndarray, sigma: float) -> np.ndarray:
    """``d/dΔ`` of each term of :func:`pair_nll`: ``(w_neg·f(z) − w_pos·f(−z))/σ`` with ``f`` the logistic."""
    out: np.ndarray = (w_neg * expit(z) - w_pos * expit(-z)) / sigma
    return out


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
        ``G(X) R`` and ``G(X)ᵀ L`` (docs/methods/personal_rankings.md §2.4).
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
    """``F(X) = 𝓛(X) + λ · μ log Σ_ij exp(X_ij²/μ)`` on factors ``X = L Rᵀ`` (docs/methods/personal_rankings.md §2.2).

    Derivatives (per pair ``c = dℓ/dΔ``, ``h = d²ℓ/dΔ²``, ``W = softmax(X²/μ)``, ``Q = 2 X∘W``;
    docs/methods/personal_rankings.md §2.3):

        G(X)      = S(c) + λ Q
        DG(X)[Ė]  = S(h · Δ(Ė)) + λ [2 W∘Ė∘(1 + 2X²/μ) − (1/μ) Q ⟨Q, Ė⟩]

    and on the factors ``egrad = (G R, Gᵀ L)``, ``ehess = (DG[Ė] R + G ξ_R, DG[Ė]ᵀ L + Gᵀ ξ_L)`` with
    ``Ė = ξ_L Rᵀ + L ξ_Rᵀ`` (docs/methods/personal_rankings.md §2.4). The regularizer needs every entry of ``X``
    (O(m n r), docs/methods/personal_rankings.md §2.10), so the whole objective is evaluated on dense row
    blocks of ``X`` of at most ``block_entries`` entries: ``Δ`` is gathered from the block by flat
    index, ``S(c)`` is scattered with ``np.bincount``, and the log-sum-exp is streamed with a running max
    shift, so ``exp(X²)`` is never formed unshifted. With a single block the dense ``X, W, Q, G`` are kept
    for the Hessian-vector products at that point.

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
        sigma: float,
        lam: float,
        mu: float = DEFAULT_MU,
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
        """Loss, dℓ/dΔ and d²ℓ/dΔ² of pairs p0:p1 given their Δ (docs/methods/personal_rankings.md §2.1)."""
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
        loss = float(dot(wt, sp_neg) + dot(wn, z))
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
        """Value, factor gradients ``(G R, Gᵀ L)`` and Hessian caches at ``(L, R)``.

        Formulas: docs/methods/personal_rankings.md §2.3–2.4.

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
        """Euclidean Hessian of ``(L, R) ↦ F(L Rᵀ)`` along ``(ξ_L, ξ_R)``.

        Returns ``(DG[Ė] R + G ξ_R, DG[Ė]ᵀ L + Gᵀ ξ_L)`` with ``Ė = ξ_L Rᵀ + L ξ_Rᵀ`` (the paper's eqs.
        19–21; docs/methods/personal_rankings.md §2.4).
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
                inner = dot(Q, E)
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
                inner += dot(Q, E)
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
        """Stable ``μ log Σ exp(X²/μ)`` of a dense matrix (docs/methods/personal_rankings.md §2.2, numerics)."""
        Y = np.square(X) / self.mu
        q = float(Y.max())
        return self.mu * (q + float(np.log(np.exp(Y - q).sum())))

    def loss_from_deltas(self, delta: np.ndarray) -> float:
        """``𝓛 = Σ w_pos ℓ(Δ) + w_neg ℓ(−Δ)``, ``ℓ(z) = softplus(−z/σ)`` (docs/methods/personal_rankings.md §2.1)."""
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
            out += self.lam * (2.0 * W * E * (1.0 + 2.0 * Y) - Q * dot(Q, E) / self.mu)
        return out
