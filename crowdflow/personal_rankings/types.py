"""Shared types of the personal-rankings package: the aggregated comparisons and small helpers.

:class:`PairData` holds the comparisons aggregated per (user, unordered item pair) with the two
directed weights; every other module (encoding, objective, solvers, baselines, the fit) reads it, so
it lives here and no two modules import each other. Also: the solver names (:data:`Method`), the
defaults shared by the options model and the lower-level functions (so they cannot disagree: the
logistic scale σ of ``P(a ≻ b) = 1/(1 + exp(−(X[u,a] − X[u,b])/σ))``, the smoothing μ, the ∞-norm α of
the exported scores, the gradient tolerance and the iteration caps), the ``Tangent`` pair ``(ξ_L, ξ_R)``
of factor-shaped arrays and :func:`dot`, the full inner product.

Method, notation and references: docs/methods/personal_rankings.md §1.1–1.2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_GTOL",
    "DEFAULT_MAX_ITER",
    "DEFAULT_MU",
    "DEFAULT_SIGMA",
    "InvalidPolicy",
    "Method",
    "PairData",
    "RankCriterion",
    "Tangent",
    "dot",
]

Method = Literal["lbfgs", "rtr"]
InvalidPolicy = Literal["raise", "drop"]
RankCriterion = Literal["nll", "accuracy"]
Tangent = tuple[np.ndarray, np.ndarray]

DEFAULT_SIGMA = 0.18  # logistic scale σ (the paper's experiments)
DEFAULT_MU = 1.0  # log-sum-exp smoothing μ (implicit in the paper)
DEFAULT_ALPHA = 1.0  # ∞-norm of the exported scores
DEFAULT_GTOL = 1e-6  # gradient tolerance (the paper's RTR stopping rule)
DEFAULT_MAX_ITER: dict[str, int] = {"lbfgs": 2000, "rtr": 500}  # iteration caps by solver (RTR: the paper's)


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """Full inner product ``Σ a∘b`` (einsum: OpenBLAS's threaded ddot stalls on a busy machine)."""
    return float(np.einsum("i,i->", a.ravel(), b.ravel()))


@dataclass(frozen=True)
class PairData:
    """Comparisons aggregated per (user, unordered item pair) (docs/methods/personal_rankings.md §1.1–1.2).

    Pair ``t`` is ``(user[t], a[t], b[t])`` with ``a[t] < b[t]``; ``w_pos[t]`` is the total weight of
    observations where ``a`` was preferred and ``w_neg[t]`` where ``b`` was preferred. Repeated rows are
    independent draws, so they simply add weight. The negative log-likelihood is

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
        """The sparse m×n matrix ``S(c)``: ``+c`` at (u, a), ``−c`` at (u, b).

        See docs/methods/personal_rankings.md §2.3.
        """
        return sp.csr_matrix(
            (np.r_[c, -c], (np.r_[self.user, self.user], np.r_[self.a, self.b])), shape=(self.m, self.n)
        )
