"""Quotient geometry of the two-factor parametrisation ``X = L Rᵀ``, ``(L, R) ~ (L M⁻¹, R Mᵀ)``.

:class:`TwoFactorGeometry` (Mishra et al.; Manopt's ``fixedrankfactory_2factors``) at one point:
the metric ``g(ξ, ζ) = tr((LᵀL)⁻¹ ξ_Lᵀ ζ_L) + tr((RᵀR)⁻¹ ξ_Rᵀ ζ_R)``, the horizontal projection (an
r×r Sylvester solve), the Riemannian gradient ``(egrad_L LᵀL, egrad_R RᵀR)`` and the Riemannian Hessian
(the projected Levi-Civita derivative of the gradient). Also :func:`retract` (``(L + ξ_L, R + ξ_R)``
with an optional norm rebalancing) and :func:`balance_factors` (the representative
``(U Σ^{1/2}, V Σ^{1/2})`` of ``L Rᵀ = U Σ Vᵀ``).

Formulas: docs/methods/personal_rankings.md §2.4.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from crowdflow.personal_rankings.types import Tangent, dot

__all__ = ["TwoFactorGeometry", "balance_factors", "rebalance_norms", "retract", "riemannian_grad_norm"]


def balance_factors(L: np.ndarray, R: np.ndarray) -> Tangent:
    """Balanced representative ``(U Σ^{1/2}, V Σ^{1/2})`` of ``L Rᵀ = U Σ Vᵀ`` (docs/methods/personal_rankings.md §2.4).

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


def _sym(M: np.ndarray) -> np.ndarray:
    return cast(np.ndarray, 0.5 * (M + M.T))


class TwoFactorGeometry:
    """Quotient geometry of ``(L, R) ~ (L M⁻¹, R Mᵀ)`` at one point (Mishra et al.).

    Formulas: docs/methods/personal_rankings.md §2.4.

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
        return dot(xi[0] @ self.Ai, zeta[0]) + dot(xi[1] @ self.Bi, zeta[1])

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
        return riemannian_grad_norm(self.A, self.B, egrad_L, egrad_R)

    def _conn(self, Z: np.ndarray, Zi: np.ndarray, G: np.ndarray, xi: np.ndarray, g: np.ndarray) -> np.ndarray:
        # Christoffel term Γ(ξ, g) of g(ξ,ζ) = tr(G⁻¹ ξᵀζ), G = ZᵀZ, derived from the Koszul formula:
        # Γ(ξ, ζ) = −ζ G⁻¹ sym(Zᵀξ) − ξ G⁻¹ sym(Zᵀζ) + Z sym(G⁻¹ ξᵀζ G⁻¹) G
        out: np.ndarray = -g @ (Zi @ _sym(Z.T @ xi)) - xi @ (Zi @ _sym(Z.T @ g)) + Z @ (_sym(Zi @ (xi.T @ g) @ Zi) @ G)
        return out

    def rhess(self, egrad: Tangent, ehess: Tangent, grad: Tangent, xi: Tangent) -> Tangent:
        """Riemannian Hessian ``Π_x(D grad[ξ] + Γ(ξ, grad))`` (the paper's eqs. 17–18).

        See docs/methods/personal_rankings.md §2.4.

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
        return rebalance_norms(Ln, Rn)
    return Ln, Rn


def rebalance_norms(L: np.ndarray, R: np.ndarray) -> Tangent:
    """``(L/c, R·c)`` with ``c = sqrt(‖L‖_F/‖R‖_F)``, so that ``‖L‖_F = ‖R‖_F`` and ``L Rᵀ`` is unchanged.

    Returns the factors as given when ``c`` is not a finite positive number (a zero factor).
    """
    c = np.sqrt(np.linalg.norm(L) / np.linalg.norm(R))
    if np.isfinite(c) and c > 0:
        return L / c, R * c
    return L, R


def riemannian_grad_norm(A: np.ndarray, B: np.ndarray, egrad_L: np.ndarray, egrad_R: np.ndarray) -> float:
    """``‖grad‖_x = sqrt(⟨egrad_L A, egrad_L⟩ + ⟨egrad_R B, egrad_R⟩)`` from the Gram matrices ``A = LᵀL``, ``B = RᵀR``.

    The norm of the Riemannian gradient in the quotient metric, without building the geometry (no
    inverse or eigendecomposition of the Gram matrices): the stopping quantity of every solver.
    """
    v = dot(egrad_L @ A, egrad_L) + dot(egrad_R @ B, egrad_R)
    return float(np.sqrt(max(v, 0.0)))
