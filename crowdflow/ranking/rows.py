"""Compiled passes over the comparison rows: input checks with orientation and degrees, divergence, fitted values.

Each pass computes, in one loop over the rows, what a few numpy expressions compute in several passes with
temporaries of m values (at 10^7 rows every such pass costs 20-60 ms), in the same floating-point order, so the
results are bit-identical to the expressions they replace (tests compare them):

* :func:`row_summary` — whether every row is valid (finite ``y``, finite ``w > 0``, ``0 ≤ i, j < n``, ``i ≠ j``),
  the orientation ``s_k = +1`` if ``i_k < j_k`` else ``−1`` and the weighted degrees
  ``d = bincount(i, w) + bincount(j, w)``;
* :func:`divergence` — ``XᵀWv = bincount(i, w·v) − bincount(j, w·v)``;
* :func:`fitted_and_residual` — ``f_k = θ_i − θ_j`` and ``y_k − f_k``;
* :func:`is_range` — ``array_equal(x, arange(m))`` without the (m,) ``arange``.

See docs/methods/ranking.md §1.3 (operators) and §2.1 (scores).
"""

from __future__ import annotations

import numpy as np

from crowdflow.compiled import compiled_kernel

__all__ = ["divergence", "fitted_and_residual", "is_range", "row_summary"]


@compiled_kernel
def _row_summary(
    i: np.ndarray, j: np.ndarray, y: np.ndarray, w: np.ndarray, n: int, sign: np.ndarray, di: np.ndarray, dj: np.ndarray
) -> bool:
    ok = True
    for k in range(i.size):
        a, b, wk = i[k], j[k], w[k]
        if a < 0 or b < 0 or a >= n or b >= n or a == b or not np.isfinite(y[k]) or not np.isfinite(wk) or wk <= 0:
            ok = False
            break
        sign[k] = 1.0 if a < b else -1.0
        di[a] += wk
        dj[b] += wk
    return ok


def row_summary(
    i: np.ndarray, j: np.ndarray, y: np.ndarray, w: np.ndarray, n: int
) -> tuple[bool, np.ndarray, np.ndarray]:
    """Validity of the rows, their orientation and the weighted degrees, in one pass.

    Parameters
    ----------
    i, j : numpy.ndarray
        (m,) int64 items of every row.
    y, w : numpy.ndarray
        (m,) float64 outcomes and weights.
    n : int
        Number of items.

    Returns
    -------
    ok : bool
        True when every row has a finite ``y``, a finite ``w > 0`` and items ``0 ≤ i ≠ j < n`` (otherwise the caller
        finds and reports the bad rows; the other two outputs are then undefined).
    sign : numpy.ndarray
        (m,) ``+1.0`` where ``i < j``, else ``−1.0``.
    deg : numpy.ndarray
        (n,) ``Σ_{k: i_k = x} w_k + Σ_{k: j_k = x} w_k``, each sum in row order (as ``numpy.bincount``).
    """
    sign = np.empty(i.size, dtype=np.float64)
    di = np.zeros(n, dtype=np.float64)
    dj = np.zeros(n, dtype=np.float64)
    ok = bool(_row_summary(i, j, y, w, int(n), sign, di, dj))
    return ok, sign, di + dj


@compiled_kernel
def _divergence(
    i: np.ndarray, j: np.ndarray, w: np.ndarray, v: np.ndarray, out_i: np.ndarray, out_j: np.ndarray
) -> None:
    for k in range(i.size):
        wv = w[k] * v[k]
        out_i[i[k]] += wv
        out_j[j[k]] += wv


def divergence(i: np.ndarray, j: np.ndarray, w: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """``XᵀWv`` (n,): ``Σ_{k: i_k = x} w_k v_k − Σ_{k: j_k = x} w_k v_k``, each sum in row order."""
    out_i = np.zeros(n, dtype=np.float64)
    out_j = np.zeros(n, dtype=np.float64)
    _divergence(i, j, w, np.asarray(v, dtype=np.float64), out_i, out_j)
    return out_i - out_j


@compiled_kernel
def _fitted(
    theta: np.ndarray, i: np.ndarray, j: np.ndarray, y: np.ndarray, fitted: np.ndarray, res: np.ndarray
) -> None:
    for k in range(i.size):
        f = theta[i[k]] - theta[j[k]]
        fitted[k] = f
        res[k] = y[k] - f


def fitted_and_residual(
    theta: np.ndarray, i: np.ndarray, j: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``θ_i − θ_j`` and ``y − (θ_i − θ_j)`` per row (two (m,) float64 arrays)."""
    fitted = np.empty(i.size, dtype=np.float64)
    res = np.empty(i.size, dtype=np.float64)
    _fitted(np.asarray(theta, dtype=np.float64), i, j, y, fitted, res)
    return fitted, res


@compiled_kernel
def _is_range(x: np.ndarray) -> bool:
    for k in range(x.size):  # noqa: SIM110 - a loop numba compiles (no generator)
        if x[k] != k:
            return False
    return True


def is_range(x: np.ndarray) -> bool:
    """True when the integer array ``x`` is ``0, 1, …, x.size − 1``."""
    return bool(_is_range(x))
