"""The rank-one objective and its solvers: projected gradient descent (``gd``), its per-worker scaled
variant (``scaled``) and exponentiated gradient (``eg``).

Skills x are fitted to the moments inside a box per worker,

    min_x L(x) = 1/2 Σ_{i<j, N_ij>0} w_ij (C^_ij − x_i x_j)²,   lo_i ≤ x_i ≤ hi_i,

with ∇L(x) = −((w∘C^) x − x ∘ (w (x∘x))): two sparse mat-vecs per update. Every solver stops when
max_i |x_i^{k+1} − x_i^k| < tol or after max_iter updates (then a ``RuntimeWarning``) and records the loss
trace. :func:`fit_active` runs a solver on the identified workers only and fixes the sign of each
component. See docs/methods/skills.md §2.2–§2.3 (objective, ``gd``), §2.9 (``scaled``), §2.5 (``eg``),
docs/methods/skills.md §2.4 and §2.8 (signs, the active set).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import scipy.sparse as sp

from crowdflow._typing import SparseMatrix
from crowdflow.compiled import compiled_kernel
from crowdflow.graphs import Components, restrict_to
from crowdflow.progress import IterationProgress, ProgressFn
from crowdflow.skills.consensus import resolve_signs
from crowdflow.skills.spectra import DENSE_EIG_MAX, top_eigenvalue
from crowdflow.skills.types import SignMode, Solver


def rank_one_loss(c_hat: SparseMatrix, weights: SparseMatrix, x: np.ndarray) -> float:
    """L(x) = 1/2 Σ_{i<j} w_ij (C^_ij − x_i x_j)² over the stored (symmetric) entries (docs/methods/skills.md §2.2).

    Computed from the residuals directly (no cancellation). ``weights`` and ``c_hat`` must be
    symmetric; entries of ``c_hat`` are read at the nonzeros of ``weights``.
    """
    wt = sp.coo_matrix(weights)
    c = np.asarray(sp.csr_matrix(c_hat)[wt.row, wt.col]).ravel()
    x = np.asarray(x, dtype=np.float64)
    mask = wt.row != wt.col
    res = c[mask] - x[wt.row[mask]] * x[wt.col[mask]]
    return float(0.25 * np.sum(wt.data[mask] * res * res))


def rank_one_gradient(c_hat: SparseMatrix, weights: SparseMatrix, x: np.ndarray) -> np.ndarray:
    """∇L(x)_i = −Σ_j w_ij (C^_ij − x_i x_j) x_j = −((w∘C^) x − x ∘ (w (x∘x)))_i (docs/methods/skills.md §2.3)."""
    w = sp.csr_matrix(weights)
    wc = sp.csr_matrix(w.multiply(c_hat))
    x = np.asarray(x, dtype=np.float64)
    return cast(np.ndarray, -(wc @ x - x * (w @ (x * x))))


@dataclass(frozen=True)
class RankOneFit:
    """Result of a rank-one fit on a given moment matrix.

    Attributes
    ----------
    x : numpy.ndarray
        Final iterate (before any sign resolution).
    iterations : int
        Number of updates performed.
    converged : bool
        True iff the stopping rule max_i |x_i^{k+1} − x_i^k| < tol fired before max_iter.
    loss_trace : numpy.ndarray
        L(x^0), L(x^1), …, L(x^k) (length iterations + 1; see :func:`fit_rank_one`).
    final_loss : float
        L at the returned x, computed from residuals.
    eta : float
        Step size (``gd``: the scalar η; ``scaled``: the smallest fallback step 1/(4 r_i); ``eg``: α).
    solver : str
    last_step : float
        max_i |x_i^{k+1} − x_i^k| of the last update.
    n_fallback_steps : int
        ``scaled`` only: updates where the Newton-scaled step was rejected (it would have increased
        L) and the majorisation step 1/(4 r_i) was taken instead.
    """

    x: np.ndarray
    iterations: int
    converged: bool
    loss_trace: np.ndarray
    final_loss: float
    eta: float
    solver: str
    last_step: float
    n_fallback_steps: int = 0


def fit_rank_one(
    c_hat: SparseMatrix,
    weights: SparseMatrix,
    lower: np.ndarray | float,
    upper: np.ndarray | float,
    *,
    x0: float | np.ndarray = 0.5,
    eta: float | None = None,
    tol: float = 1e-7,
    max_iter: int = 5000,
    solver: Solver = "scaled",
    progress: ProgressFn | None = None,
) -> RankOneFit:
    """Fit x xᵀ to C^ on the observed entries by projected (or exponentiated) gradient descent.

    docs/methods/skills.md §2.3 (``gd``): x̃ = x^k + η Σ_j w_ij (C^_ij − x_i^k x_j^k) x_j^k for all i at once
    (two sparse mat-vecs: (w∘C^) x and w (x∘x)), then x^{k+1} = clip(x̃, lower, upper). Default
    η = 1/(4 max_i r_i), r_i = Σ_j w_ij: by Gershgorin the Hessian of L on [−1, 1]^W is bounded by
    4 max_i r_i, so L decreases monotonically. Stop when max_i |x_i^{k+1} − x_i^k| < tol or after
    max_iter updates (then a ``RuntimeWarning``).

    ``scaled`` (an addition, same objective, same stopping rule, same fixed points): projected
    gradient steps with a per-worker step size, safeguarded so that L never increases.
    The trial step is half a coordinate-Newton step, η_i = 1/(2 b_i) with b_i = Σ_j w_ij x_j² =
    ∂²L/∂x_i² (the exact coordinate minimiser of L in x_i is x_i − g_i/b_i, i.e. x_i = a_i/b_i with
    a = (w∘C^) x: one step of alternating least squares). The factor ½ matters: at a fixed point
    the Jacobi iteration matrix −D⁻¹H_off has the eigenvalue −1 along x itself (rescaling x by
    1 + ε moves the full ALS update by 1/(1 + ε)), so the undamped step oscillates in scale;
    halving it sends that eigenvalue to 0. If the trial point does not decrease L sufficiently
    (Armijo test with σ = 1e-4, up to rounding), the step falls back to η_i = 1/(4 r_i),
    r_i = Σ_j w_ij: D = diag(4 r_i) dominates the Hessian on the box (row-wise Gershgorin:
    H_ii + Σ_j |H_ij| ≤ 4 r_i), so that projected step is a majorise–minimise step and decreases
    L. Either way the update is x ← clip(x − η∘∇L), whose
    fixed points are exactly the KKT points of ``gd``; the loss trace is non-increasing. Cost per
    update: two sparse mat-vecs (four after a fallback). Iterations to tol 1e-7: Snow RTE 41
    (η_i = 1/(4 r_i) alone: 394; ``gd``: > 5000), 10^6 synthetic labels 25 (195).

    ``eg`` (docs/methods/skills.md §2.5, positive skills only; requires 0 < lower ≤ upper): with C^ clipped to
    [κ², K²] (κ = min lower, K = max upper), D_i = Σ_j w_ij (x_i x_j − C^_ij) and
    x^{k+1} = clip(x^k ∘ exp(−α D), lower, upper), α = 1/(2 √W ||w||_2 K²) unless ``eta`` is given.
    Its fixed point differs from ``gd``'s by O(noise).

    Loss trace: L(x^k) for every k, obtained at no extra cost from the mat-vecs already computed,
    L(x) = 1/2 Σ_{i<j} w C^² − 1/2 xᵀ(w∘C^)x + 1/4 (x∘x)ᵀ w (x∘x); the last entry (and
    ``final_loss``) is computed from the residuals.

    Parameters
    ----------
    c_hat, weights : scipy.sparse matrix
        Symmetric W×W with zero diagonal; C^ is read on the nonzeros of ``weights``.
    lower, upper : array_like
        Box per coordinate (a coordinate with lower = upper = 0 is fixed at 0).
    x0 : float or array
        Start (clipped into the box). Never 0: x = 0 is a stationary point.
    eta : float, optional
        Step size (``gd``) or α (``eg``); must be None for ``scaled``.
    tol : float
        Stopping tolerance on max |Δx|.
    max_iter : int
        Update cap.
    solver : {"scaled", "gd", "eg"}
        ``scaled`` (the default, as in :class:`~crowdflow.skills.SkillsOptions`), the paper's ``gd``, or ``eg``.
    progress : callable, optional
        ``progress(fraction)``: called as the iterations go (``crowdflow.progress.IterationProgress``:
        iteration share or log-distance of max|Δx| to ``tol``, whichever is further) and with 1.0 at the end.

    Returns
    -------
    RankOneFit
    """
    w = sp.csr_matrix(weights, dtype=np.float64)
    if w.shape[0] != w.shape[1]:
        raise ValueError(f"weights must be square, got shape {w.shape}")
    nw = w.shape[0]
    c = sp.csr_matrix(c_hat, dtype=np.float64)
    lo = np.broadcast_to(np.asarray(lower, dtype=np.float64), (nw,)).copy()
    hi = np.broadcast_to(np.asarray(upper, dtype=np.float64), (nw,)).copy()
    if np.any(lo > hi):
        raise ValueError("lower bound above upper bound for some coordinates")
    if max_iter < 0:
        raise ValueError("max_iter must be >= 0")
    # C^ on the pattern of w (aligned data arrays when both share one canonical pattern)
    if (
        c.shape == w.shape
        and c.nnz == w.nnz
        and np.array_equal(c.indptr, w.indptr)
        and np.array_equal(c.indices, w.indices)
    ):
        c_on_w = c.data  # read only (``eg`` clips into a new array)
    else:
        w = sp.csr_matrix(w, copy=True)
        w.sum_duplicates()
        w.sort_indices()
        c_on_w = np.asarray(c[np.repeat(np.arange(nw), np.diff(w.indptr)), w.indices]).ravel()
    if solver == "eg":
        if np.any(lo <= 0):
            raise ValueError("solver 'eg' needs a positive box (lower > 0)")
        kappa, big_k = float(lo.min()), float(hi.max())
        c_on_w = np.clip(c_on_w, kappa**2, big_k**2)
    wc = sp.csr_matrix((w.data * c_on_w, w.indices, w.indptr), shape=w.shape)
    c0 = 0.25 * float(np.sum(w.data * c_on_w * c_on_w))
    r = np.asarray(w.sum(axis=1)).ravel()
    r_max = float(r.max()) if nw else 0.0
    x = np.clip(np.broadcast_to(np.asarray(x0, dtype=np.float64), (nw,)).copy(), lo, hi)
    safe = np.divide(1.0, 4.0 * r, out=np.zeros(nw), where=r > 0)

    if solver == "gd":
        default = 1.0 / (4.0 * r_max) if r_max > 0 else 0.0
        step_size: float | np.ndarray = default if eta is None else float(eta)
        eta_report = float(step_size)
    elif solver == "scaled":
        if eta is not None:
            raise ValueError("solver 'scaled' chooses its steps per worker; do not pass eta")
        step_size = safe
        eta_report = float(safe[r > 0].min()) if np.any(r > 0) else 0.0
    elif solver == "eg":
        if eta is None:
            norm2 = top_eigenvalue(w, DENSE_EIG_MAX)
            step_size = 1.0 / (2.0 * math.sqrt(nw) * norm2 * big_k**2) if norm2 > 0 else 0.0
        else:
            step_size = float(eta)
        eta_report = float(step_size)
    else:
        raise ValueError(f"unknown solver {solver!r}; use 'gd', 'scaled' or 'eg'")

    trace = np.empty(max_iter + 1, dtype=np.float64)
    converged = False
    last_step = 0.0
    n_fallback = 0
    k = 0
    tracker = IterationProgress(progress, max_iter, tol)

    # small dense-ish problems: dense mat-vecs (no sparse dispatch overhead; ≤ 8 MB per matrix); otherwise both
    # products in one compiled pass over the stored entries (:func:`_two_products`: the sums of scipy's CSR mat-vec
    # in the same order, so the same bits, reading the column indices once)
    dense = solver == "scaled" and nw <= 1000 and w.nnz >= 0.05 * nw * nw
    wc_op: Any = wc.toarray() if dense else None
    w_op: Any = w.toarray() if dense else None
    ptr = w.indptr.astype(np.uint64)
    idx = w.indices.view(np.uint32 if w.indices.dtype == np.int32 else np.uint64)

    def evaluate(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        x2 = x * x
        if dense:
            a = wc_op @ x
            b = w_op @ x2
        else:
            a, b = np.empty(nw), np.empty(nw)
            _two_products(ptr, idx, wc.data, w.data, x, x2, a, b)
        return a, b, c0 - 0.5 * float(x @ a) + 0.25 * float(x2 @ b)

    if r_max <= 0:  # no edges: nothing to fit
        converged = True
    elif solver == "scaled":
        a, b, loss = evaluate(x)
        slack = 1e-12 * max(c0, 1.0)  # rounding noise of the loss identity
        for k in range(max_iter):
            trace[k] = loss
            g = a - x * b  # = −∇L
            newton = np.divide(0.5, b, out=safe.copy(), where=b > 0)
            x_new = np.clip(x + newton * g, lo, hi)
            a_new, b_new, loss_new = evaluate(x_new)
            # safeguard (Armijo, σ = 1e-4): the trial step must decrease L by a fraction of the
            # first-order prediction −∇L·Δx = g·Δx ≥ 0, so equal-loss jumps (e.g. x → −x, L is even)
            # are refused; otherwise the majorisation step, which always decreases L
            if loss_new > loss - 1e-4 * float(g @ (x_new - x)) + slack:
                n_fallback += 1
                x_new = np.clip(x + safe * g, lo, hi)
                a_new, b_new, loss_new = evaluate(x_new)
            last_step = float(np.abs(x_new - x).max())
            x, a, b, loss = x_new, a_new, b_new, loss_new
            tracker.update(k + 1, last_step)
            if last_step < tol:
                converged = True
                k += 1
                break
        else:
            k = max_iter
    else:
        ones_wc = np.asarray(wc.sum(axis=1)).ravel() if solver == "eg" else None
        for k in range(max_iter):
            x2 = x * x
            a = wc @ x
            b = w @ x2
            trace[k] = c0 - 0.5 * float(x @ a) + 0.25 * float(x2 @ b)
            if solver == "eg":
                x_new = x * np.exp(-step_size * (x * (w @ x) - ones_wc))
            else:
                x_new = x + step_size * (a - x * b)
            np.minimum(np.maximum(x_new, lo, out=x_new), hi, out=x_new)
            last_step = float(np.abs(x_new - x).max())
            x = x_new
            tracker.update(k + 1, last_step)
            if last_step < tol:
                converged = True
                k += 1
                break
        else:
            k = max_iter
    final = _residual_loss(w.indptr, w.indices, w.data, c_on_w, x)
    trace = trace[: k + 1].copy()
    trace[k] = final
    tracker.done()
    if not converged:
        warnings.warn(
            f"rank-one {solver} stopped after {max_iter} iterations without converging "
            f"(last max|dx| = {last_step:.3e} >= tol {tol:g}); raise max_iter or try solver='scaled'",
            RuntimeWarning,
            stacklevel=2,
        )
    return RankOneFit(
        x=x,
        iterations=int(k),
        converged=bool(converged),
        loss_trace=trace,
        final_loss=final,
        eta=eta_report,
        solver=solver,
        last_step=last_step,
        n_fallback_steps=n_fallback,
    )


@compiled_kernel
def _two_products(
    indptr: np.ndarray,
    indices: np.ndarray,
    wc: np.ndarray,
    w: np.ndarray,
    x: np.ndarray,
    x2: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
) -> None:
    """a = (w∘C^) x and b = w (x∘x) on one CSR pattern in one pass: each row summed from 0 in stored order, as
    scipy's ``csr_matvec`` sums it (unsigned indices: no wrap-around test in the loop)."""
    for i in range(a.size):
        sa = 0.0
        sb = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            sa += wc[p] * x[j]
            sb += w[p] * x2[j]
        a[i] = sa
        b[i] = sb


@compiled_kernel
def _residual_sums(
    indptr: np.ndarray, indices: np.ndarray, w: np.ndarray, c: np.ndarray, x: np.ndarray, out: np.ndarray
) -> None:
    for i in range(indptr.size - 1):
        acc = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            r = c[p] - x[i] * x[indices[p]]
            acc += w[p] * r * r
        out[i] = acc


def _residual_loss(indptr: np.ndarray, indices: np.ndarray, w: np.ndarray, c: np.ndarray, x: np.ndarray) -> float:
    """1/4 Σ_ij w_ij (C^_ij − x_i x_j)² over the stored entries, from the residuals (no cancellation): row sums in a
    compiled pass (O(W) scratch, no per-entry temporary), then a pairwise sum over the rows."""
    rows = np.empty(indptr.size - 1, dtype=np.float64)
    _residual_sums(indptr, indices, w, c, np.asarray(x, dtype=np.float64), rows)
    return 0.25 * float(np.sum(rows))


def _same_pattern(a: sp.csr_matrix, b: sp.csr_matrix) -> bool:
    return bool(
        a.shape == b.shape
        and a.nnz == b.nnz
        and (np.shares_memory(a.indices, b.indices) or np.array_equal(a.indices, b.indices))
        and np.array_equal(a.indptr, b.indptr)
    )


def fit_active(
    active: np.ndarray,
    ag: Components,
    w_all: sp.csr_matrix,
    c_hat: sp.csr_matrix,
    lo: np.ndarray,
    hi: np.ndarray,
    *,
    x0: float,
    eta: float | None,
    tol: float,
    max_iter: int,
    solver: Solver,
    sign_mode: SignMode,
    progress: ProgressFn | None = None,
) -> tuple[np.ndarray, np.ndarray, RankOneFit | None]:
    """PGD on the active subgraph, signs per component, skills clipped into the box.

    See docs/methods/skills.md §2.3, §2.4 and §2.8 (the active set).
    """
    n_workers = active.size
    idx = np.flatnonzero(active)
    skills = np.full(n_workers, np.nan)
    fit_comp = np.full(n_workers, -1, dtype=np.int64)
    if not idx.size:
        return skills, fit_comp, None
    if idx.size == n_workers:
        w_sub, c_sub = w_all, c_hat
    elif _same_pattern(w_all, c_hat):
        w_sub, c_sub = restrict_to(active, w_all, c_hat)
    else:
        w_sub = w_all[idx][:, idx]
        c_sub = c_hat[idx][:, idx]
    # components of the active subgraph = active components of ag, renumbered 0.. in order
    sub_labels = np.unique(ag.labels[idx], return_inverse=True)[1].astype(np.int64)
    lo_s, hi_s = lo[idx], hi[idx]
    if sign_mode == "bfs":
        eps = 1e-3
        lo_fit = np.minimum(np.full(idx.size, eps), hi_s)
        c_fit = sp.csr_matrix((np.abs(c_sub.data), c_sub.indices, c_sub.indptr), shape=c_sub.shape)
        fit = fit_rank_one(
            c_fit, w_sub, lo_fit, hi_s, x0=x0, eta=eta, tol=tol, max_iter=max_iter, solver=solver, progress=progress
        )
        wt = w_sub.tocoo()
        conf = sp.csr_matrix((fit.x[wt.row] * fit.x[wt.col] * np.sqrt(wt.data), (wt.row, wt.col)), shape=w_sub.shape)
        x = resolve_signs(fit.x, sub_labels, "bfs", c_hat=c_sub, confidence=conf)
    else:
        fit = fit_rank_one(
            c_sub, w_sub, lo_s, hi_s, x0=x0, eta=eta, tol=tol, max_iter=max_iter, solver=solver, progress=progress
        )
        x = resolve_signs(fit.x, sub_labels, "sum_rule")
    x = np.clip(x, lo_s, hi_s)  # multiclass box is asymmetric: keep the flipped solution inside
    skills[idx] = x
    fit_comp[idx] = sub_labels
    return skills, fit_comp, fit
