"""Seeded synthetic personal comparisons with their ground truth (the paper's synthetic protocol).

``U, V ~ Uniform[−0.5, 0.5]^{K×r}``, ``X* = U Vᵀ / ‖U Vᵀ‖_∞``; ``N = round(d r K ln K)`` comparisons,
each with a uniform user and a uniform ordered pair of distinct items (drawn with replacement);
``outcome = +1`` with probability ``f(X*[i,a] − X*[i,b])``, else −1. Used by the tests (recovery
against X*), the benchmarks and the sample data.

Protocol: docs/methods/personal_rankings.md §5.1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import expit

from crowdflow.personal_rankings.types import DEFAULT_SIGMA

__all__ = ["SyntheticPersonalComparisons", "synthetic_personal_comparisons"]


@dataclass(frozen=True)
class SyntheticPersonalComparisons:
    """Synthetic comparisons with ground truth (docs/methods/personal_rankings.md §5.1).

    Attributes
    ----------
    comparisons : pandas.DataFrame
        ``annotator, item_a, item_b, outcome`` (±1), one row per comparison.
    X_star : numpy.ndarray
        True score matrix (‖X*‖_∞ = 1), rows = ``users``, columns = ``items``.
    users, items : numpy.ndarray
        Zero-padded string ids (sorted-id order = index order).
    rank, d : float
        Rank and rescaled sample size.
    sigma : float
        Logistic scale used.
    """

    comparisons: pd.DataFrame
    X_star: np.ndarray
    users: np.ndarray
    items: np.ndarray
    rank: int
    d: float
    sigma: float


def synthetic_personal_comparisons(
    K: int,
    rank: int,
    d: float,
    *,
    sigma: float = DEFAULT_SIGMA,
    seed: int = 0,
    n_items: int | None = None,
    n_comparisons: int | None = None,
) -> SyntheticPersonalComparisons:
    """The paper's synthetic protocol (docs/methods/personal_rankings.md §5.1).

    ``U, V ~ Uniform[−0.5, 0.5]^{K×r}``, ``X* = U Vᵀ / ‖U Vᵀ‖_∞``; ``N = round(d r K ln K)`` comparisons,
    each with a uniform user and a uniform ordered pair of distinct items (with replacement);
    ``outcome = +1`` with probability ``f(X*[i,a] − X*[i,b])``, else −1.

    Parameters
    ----------
    K : int
        Number of users (and items unless ``n_items`` is given).
    rank : int
        True rank r.
    d : float
        Rescaled sample size.
    sigma : float
        Logistic scale.
    seed : int
        Randomness.
    n_items : int, optional
        Items n if different from K (K is then the number of users; N uses ``max(K, n)``).
    n_comparisons : int, optional
        Override N.

    Returns
    -------
    SyntheticPersonalComparisons
    """
    m = int(K)
    n = int(n_items) if n_items is not None else m
    if m < 1 or n < 2 or rank < 1:
        raise ValueError("need K >= 1 users, >= 2 items and rank >= 1")
    rng = np.random.default_rng(seed)
    U = rng.uniform(-0.5, 0.5, (m, rank))
    V = rng.uniform(-0.5, 0.5, (n, rank))
    X = U @ V.T
    X /= np.abs(X).max()
    kk = max(m, n)
    N = round(d * rank * kk * np.log(kk)) if n_comparisons is None else int(n_comparisons)
    u = rng.integers(0, m, N)
    a = rng.integers(0, n, N)
    b = (a + rng.integers(1, n, N)) % n
    p = expit((X[u, a] - X[u, b]) / sigma)
    y = np.where(rng.random(N) < p, 1, -1)
    wu = len(str(m - 1))
    wi = len(str(n - 1))
    users = np.array([f"u{i:0{wu}d}" for i in range(m)], dtype=object)
    items = np.array([f"i{j:0{wi}d}" for j in range(n)], dtype=object)
    df = pd.DataFrame({"annotator": users[u], "item_a": items[a], "item_b": items[b], "outcome": y.astype(np.int64)})
    return SyntheticPersonalComparisons(comparisons=df, X_star=X, users=users, items=items, rank=rank, d=d, sigma=sigma)
