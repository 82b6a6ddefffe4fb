"""Extreme eigenvalues for the skills diagnostics and the ``eg`` step size.

The signless Laplacian L_s = Deg(w) + Adj(w) of a weighted graph satisfies
xᵀ L_s x = Σ_{i<j} w_ij (x_i + x_j)², so its smallest eigenvalue is exactly 0 on a bipartite component
and positive otherwise: it measures how firmly a component pins down its skills. The largest eigenvalue
of a nonnegative weight matrix, ‖w‖₂, sets the step of exponentiated gradient and the Lipschitz constant
in the diagnostics. Dense LAPACK for small matrices; above a size limit (``dense_max``, by default the
``dense_eig_max`` of the options, :data:`DENSE_EIG_MAX`) the smallest eigenvalue by Jacobi-preconditioned
LOBPCG, checked by its residual, with dense LAPACK (up to :data:`DENSE_FALLBACK_MAX`) or Lanczos (``eigsh``) as
the fallback, and the largest by Lanczos; every start vector is fixed, so the outputs are deterministic. See
docs/methods/skills.md §3.4 and §2.5.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh, lobpcg

from crowdflow._typing import SparseMatrix
from crowdflow.graphs import without_diagonal

#: Matrices up to this order get their extreme eigenvalues from dense LAPACK, larger ones from an iterative solver.
#: Dense ``eigvalsh`` is O(n³) whatever the graph: on this 2-core host (single-threaded BLAS) 0.04 s at 400, 0.7 s at
#: 1,000 and 6.5 s at 2,000 workers, where verified LOBPCG takes 0.05-0.5 s and Lanczos for the largest one
#: 0.001-0.04 s, agreeing to ≤ 3e-15 relative (docs/methods/skills.md §3.4).
DENSE_EIG_MAX = 400
#: When LOBPCG's answer fails its residual check, matrices up to this order are solved densely, larger ones by
#: Lanczos on cI − L_s (whose convergence on dense co-label graphs can take thousands of products).
DENSE_FALLBACK_MAX = 2000


def top_eigenvalue(a: SparseMatrix, dense_max: int = DENSE_EIG_MAX) -> float:
    """Largest eigenvalue of a symmetric matrix (||A||_2 for a nonnegative one)."""
    n = a.shape[0]
    if n == 0 or sp.csr_matrix(a).nnz == 0:
        return 0.0
    if n <= dense_max:
        return float(scipy.linalg.eigvalsh(sp.csr_matrix(a).toarray(), subset_by_index=[n - 1, n - 1])[0])
    v0 = np.random.default_rng(0).standard_normal(n)
    return float(eigsh(sp.csr_matrix(a), k=1, which="LA", v0=v0, return_eigenvectors=False)[0])


def signless_laplacian(adj: SparseMatrix) -> sp.csr_matrix:
    """L_s = Deg(w) + Adj(w) (docs/methods/skills.md §3.4); xᵀ L_s x = Σ_{i<j} w_ij (x_i + x_j)²."""
    a = without_diagonal(adj).astype(np.float64)
    deg = np.asarray(a.sum(axis=1)).ravel()
    return sp.csr_matrix(sp.diags(deg) + a)


def signless_lambda_min(
    adj: SparseMatrix, dense_max: int = DENSE_EIG_MAX, dense_fallback_max: int = DENSE_FALLBACK_MAX
) -> tuple[float, str]:
    """Smallest eigenvalue of the signless Laplacian of ``adj`` (docs/methods/skills.md §3.4).

    Dense LAPACK ``eigvalsh`` (``scipy.linalg``, smallest eigenvalue only) for n ≤ ``dense_max``. Above it,
    LOBPCG (``scipy.sparse.linalg.lobpcg``) with the Jacobi preconditioner Deg⁻¹ from a fixed pseudo-random
    block of start vectors: L_s = Deg + Adj is diagonally dominant, so the preconditioned iteration converges in
    tens of products where unpreconditioned Lanczos needs thousands on dense co-label graphs (2,300 products,
    2.7 s, against 0.12 s at 3,000 workers and 6.5·10^5 entries). Its answer is accepted only when the Ritz pair
    (λ, v) has a residual ‖L_s v − λ v‖ ≤ 1e-8 ‖L_s‖₁ (then |λ − λ_min| ≤ residual²/gap, far below the
    diagnostics' needs); otherwise dense ``eigvalsh`` up to ``dense_fallback_max``, and above it ``eigsh`` on
    (c I − L_s) with c = 2 max row sum, ``which='LA'``, tol 1e-12, so λ_min = c − λ_top.

    Returns
    -------
    (float, str)
        λ_min and the method used (``"eigvalsh"``, ``"lobpcg"`` or ``"eigsh"``).
    """
    ls = signless_laplacian(adj)
    n = ls.shape[0]
    if n == 0:
        return 0.0, "eigvalsh"
    if n <= dense_max:
        return _dense_min(ls), "eigvalsh"
    lam = _lobpcg_min(ls)
    if lam is not None:
        return lam, "lobpcg"
    if n <= dense_fallback_max:
        return _dense_min(ls), "eigvalsh"
    c = 2.0 * float(ls.diagonal().max())
    shifted = sp.csr_matrix(sp.identity(n, format="csr") * c - ls)
    v0 = np.random.default_rng(0).standard_normal(n)
    top = eigsh(shifted, k=1, which="LA", v0=v0, tol=1e-12, maxiter=100 * n, return_eigenvectors=False)[0]
    return float(c - top), "eigsh"


def _dense_min(ls: sp.csr_matrix) -> float:
    """λ_min by dense LAPACK (smallest eigenvalue only)."""
    return float(scipy.linalg.eigvalsh(ls.toarray(), subset_by_index=[0, 0])[0])


def _lobpcg_min(ls: sp.csr_matrix, block: int = 1, maxiter: int = 400) -> float | None:
    """λ_min of a symmetric positive semi-definite matrix by Jacobi-preconditioned LOBPCG, or None unverified."""
    n = ls.shape[0]
    if n < 5 * block:
        return None
    diag = ls.diagonal()
    if not np.all(diag > 0):  # an isolated vertex: Deg⁻¹ undefined (and λ_min = 0 is then exact elsewhere)
        return None
    scale = float(abs(ls).sum(axis=1).max())  # ‖L_s‖₁ = ‖L_s‖_∞ ≥ ‖L_s‖₂
    x0 = np.random.default_rng(0).standard_normal((n, block))
    precond = sp.diags(1.0 / diag)
    try:
        with warnings.catch_warnings():  # "not reaching the requested tolerance": the residual is checked below
            warnings.simplefilter("ignore", UserWarning)
            vals, vecs = lobpcg(ls, x0, M=precond, largest=False, tol=1e-10 * scale, maxiter=maxiter)
    except (np.linalg.LinAlgError, ValueError):
        return None
    i = int(np.argmin(vals))
    lam, v = float(vals[i]), vecs[:, i]
    norm = float(np.linalg.norm(v))
    if not np.isfinite(lam) or norm == 0.0:
        return None
    residual = float(np.linalg.norm(ls @ v - lam * v)) / norm
    if residual > 1e-8 * scale:
        return None
    return max(lam, 0.0)
