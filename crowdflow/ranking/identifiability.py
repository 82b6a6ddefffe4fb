"""The identifiability conditions of the outlier model for a hypothesised outlier set S (dense, small m).

With ``H = W^{1/2}XL†XᵀW^{1/2}`` and ``P = I − H``: C1 (restricted eigenvalue) ``C_min = λ_min(P_SS) > 0``;
C2 (irrepresentability) ``max_{j∉S} Σ_{i∈S} |(P_{SᶜS}P_SS⁻¹)_{ji}| < 1``, with margin η; the incoherence
``μ_Ψ = max_{j∉S} P_jj``; C0 (mutual incoherence, sufficient) ``ρ = max|H_ij| < 1/(2|S|)``. Simulation and
diagnostic use only: S is unknown on real data.

See docs/methods/ranking.md §5.2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.least_squares import LaplacianSolver

__all__ = ["Identifiability", "identifiability"]


@dataclass(frozen=True)
class Identifiability:
    """Identifiability conditions (docs/methods/ranking.md §5.2) for a hypothesised outlier set S.

    Attributes
    ----------
    c_min : float
        C1: ``λ_min(P_SS)`` (W-symmetrised P).
    irrepresentability : float
        ``max_{j∉S} Σ_{i∈S} |(P_{SᶜS}P_SS⁻¹)_{ji}|``.
    eta : float
        ``1 − irrepresentability`` (C2 holds iff η > 0).
    mu_psi : float
        ``max_{j∉S} P_jj``.
    rho : float
        C0 mutual incoherence ``max_{i,j} |H_ij|``.
    c1, c2, c0 : bool
        ``c_min > 0``; ``eta > 0``; ``rho < 1/(2s)``.
    """

    c_min: float
    irrepresentability: float
    eta: float
    mu_psi: float
    rho: float
    c1: bool
    c2: bool
    c0: bool


def identifiability(g: ComparisonGraph, support: np.ndarray, *, max_rows: int = 5000) -> Identifiability:
    """Check C0, C1, C2 (docs/methods/ranking.md §5.2) for a hypothesised outlier set, with a dense ``P``.

    Dense in m: refused above ``max_rows`` rows.

    ``H = W^{1/2}XL†XᵀW^{1/2}``, ``P = I − H`` (equal to ``U2U2ᵀ`` when unweighted).

    Parameters
    ----------
    g : ComparisonGraph
    support : numpy.ndarray
        Bool mask (m,) or row indices of S.
    """
    if g.m > max_rows:
        raise ValueError(f"identifiability: m = {g.m} exceeds max_rows = {max_rows} (dense m×m P)")
    S = np.zeros(g.m, dtype=bool)
    S[np.asarray(support)] = True
    s = int(S.sum())
    solver = LaplacianSolver.from_graph(g)
    Lp = solver.solve(np.eye(g.n))
    B = g.X.multiply(np.sqrt(g.w)[:, None]).toarray()
    H = B @ Lp @ B.T
    P = np.eye(g.m) - H
    rho = float(np.abs(H).max())
    if s == 0:
        return Identifiability(np.inf, 0.0, 1.0, float(np.diag(P).max()), rho, True, True, True)
    Pss = P[np.ix_(S, S)]
    c_min = float(np.linalg.eigvalsh(Pss)[0])
    if s == g.m:
        return Identifiability(c_min, 0.0, 1.0, 0.0, rho, c_min > 1e-12, True, rho < 1 / (2 * s))
    M = P[np.ix_(~S, S)] @ np.linalg.pinv(Pss)
    irr = float(np.abs(M).sum(axis=1).max())
    mu = float(np.diag(P)[~S].max())
    return Identifiability(c_min, irr, 1.0 - irr, mu, rho, c_min > 1e-12, irr < 1.0, rho < 1 / (2 * s))
