"""From a score matrix to per-user rankings, and the accuracy metrics against a known truth.

* :func:`rankings_from_scores`: rank 1 = highest score in each row, ties broken by item position;
* :func:`borda_scores`: ``τ_j^{(i)} = (1/n) Σ_k f(X[i,j] − X[i,k])``, the probability that user i prefers
  item j to a uniformly random item (same order as row i of X, since f is increasing);
* :func:`relative_error`: ``‖X̂ − X*‖_F² / ‖X*‖_F²`` after rescaling both to ``‖·‖_∞ = 1`` (the paper's metric);
* :func:`mean_kendall_tau`: mean over users of Kendall's τ-a between rows of X̂ and X*.

Definitions: docs/methods/personal_rankings.md §2.8 (rankings) and §3 (metrics).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from crowdflow.personal_rankings.types import DEFAULT_SIGMA

__all__ = ["borda_scores", "mean_kendall_tau", "rankings_from_scores", "relative_error"]


def rankings_from_scores(X: np.ndarray) -> np.ndarray:
    """Per-row ranks of a score matrix, 1 = best (docs/methods/personal_rankings.md §2.8).

    Parameters
    ----------
    X : numpy.ndarray
        m×n scores (higher = preferred).

    Returns
    -------
    numpy.ndarray
        int64 m×n ranks; ties are broken by item position (= sorted item id), lower first.
    """
    order = np.argsort(-X, axis=1, kind="stable")
    ranks = np.empty(X.shape, dtype=np.int64)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(1, X.shape[1] + 1), X.shape), axis=1)
    return ranks


def borda_scores(X: np.ndarray, sigma: float = DEFAULT_SIGMA, block_entries: int = 1 << 22) -> np.ndarray:
    """Borda-type scores ``τ_j^{(i)} = (1/n) Σ_k f(X[i,j] − X[i,k])`` (docs/methods/personal_rankings.md §2.8).

    The probability that user i prefers item j over a uniformly random item; its order within a row
    equals the order of ``X[i]`` (f is increasing). O(m n²), computed in row blocks.

    Parameters
    ----------
    X : numpy.ndarray
        m×n scores.
    sigma : float
        Logistic scale.
    block_entries : int
        Max entries of an intermediate m_b×n×n block.

    Returns
    -------
    numpy.ndarray
        m×n Borda scores in (0, 1).
    """
    m, n = X.shape
    out = np.empty((m, n))
    rb = max(1, block_entries // max(1, n * n))
    for i0 in range(0, m, rb):
        Xb = X[i0 : i0 + rb]
        out[i0 : i0 + rb] = expit((Xb[:, :, None] - Xb[:, None, :]) / sigma).mean(axis=2)
    return out


def relative_error(X_hat: np.ndarray, X_star: np.ndarray, *, rescale: bool = True, center: bool = False) -> float:
    """Relative squared error ``‖X̂ − X*‖_F² / ‖X*‖_F²`` (docs/methods/personal_rankings.md §3.1).

    Parameters
    ----------
    X_hat, X_star : numpy.ndarray
        Estimate and truth (same shape).
    rescale : bool
        Scale both to ``‖·‖_∞ = 1`` first (the paper's metric).
    center : bool
        Remove row means of both first (offset-free variant, docs/methods/personal_rankings.md §1.3, §3.1).

    Returns
    -------
    float
    """
    A = np.asarray(X_hat, dtype=float)
    B = np.asarray(X_star, dtype=float)
    if A.shape != B.shape:
        raise ValueError(f"shape mismatch {A.shape} vs {B.shape}")
    if center:
        A = A - A.mean(axis=1, keepdims=True)
        B = B - B.mean(axis=1, keepdims=True)
    if rescale:
        A = A / max(np.abs(A).max(), np.finfo(float).tiny)
        B = B / max(np.abs(B).max(), np.finfo(float).tiny)
    return float(np.sum((A - B) ** 2) / np.sum(B**2))


def mean_kendall_tau(X_hat: np.ndarray, X_star: np.ndarray, block_entries: int = 1 << 23) -> float:
    """Mean over users of Kendall's τ-a between rows of ``X̂`` and ``X*`` (docs/methods/personal_rankings.md §3.2).

    ``τ_i = Σ_{j<k} sign(X̂_ij − X̂_ik) sign(X*_ij − X*_ik) / (n(n−1)/2)``, vectorised over pairs in
    blocks of users.

    Parameters
    ----------
    X_hat, X_star : numpy.ndarray
        m×n matrices.
    block_entries : int
        Max entries of an intermediate users×pairs block.

    Returns
    -------
    float
    """
    m: int
    n: int
    m, n = X_hat.shape
    j, k = np.triu_indices(n, 1)
    npairs: int = j.size
    rb = max(1, block_entries // max(1, npairs))
    total = 0.0
    for i0 in range(0, m, rb):
        A = X_hat[i0 : i0 + rb]
        B = X_star[i0 : i0 + rb]
        total += float(np.sum(np.sign(A[:, j] - A[:, k]) * np.sign(B[:, j] - B[:, k])))
    return total / (m * npairs)
