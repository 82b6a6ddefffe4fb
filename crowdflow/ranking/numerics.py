"""Two small kernels shared by the HLASSO and LBI solvers: the weighted inner product and the soft threshold.

``wdot(w, a, b) = Σ_k w_k a_k b_k`` is the inner product of the W-metric in which the cycle projection is
orthogonal; ``shrink(z, τ) = sign(z)·max(|z| − τ, 0)`` is the proximal map of ``τ‖·‖₁``. See
docs/methods/ranking.md §1.1.
"""

from __future__ import annotations

from typing import cast

import numpy as np

__all__ = ["shrink", "wdot"]


def wdot(w: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Weighted inner product ``Σ_k w_k a_k b_k``.

    Uses ``einsum`` rather than BLAS ``dot``: on oversubscribed hosts a multi-threaded OpenBLAS level-1
    call can be ~50× slower than this single-threaded loop, and these products sit in the hot loops.
    """
    return float(np.einsum("i,i,i->", w, a, b))


def shrink(z: np.ndarray, tau: float | np.ndarray = 1.0) -> np.ndarray:
    """Soft threshold ``sign(z)·max(|z| − τ, 0)`` element-wise (docs/methods/ranking.md §1.1).

    Computed as ``z − clip(z, −τ, τ)``, which is exactly equal in floating point and cheaper.
    """
    return cast(np.ndarray, z - np.clip(z, -tau, tau))
