"""Extreme eigenvalues for the skills diagnostics and the ``eg`` step size.

The signless Laplacian L_s = Deg(w) + Adj(w) of a weighted graph satisfies
xᵀ L_s x = Σ_{i<j} w_ij (x_i + x_j)², so its smallest eigenvalue is exactly 0 on a bipartite component
and positive otherwise: it measures how firmly a component pins down its skills. The largest eigenvalue
of a nonnegative weight matrix, ‖w‖₂, sets the step of exponentiated gradient and the Lipschitz constant
in the diagnostics. Dense LAPACK for small matrices, Lanczos (``eigsh``) with a fixed start vector above
a size limit (``dense_max``, by default the ``dense_eig_max`` of the options), so the outputs are
deterministic. See docs/methods/skills.md §3.4 and §2.5.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh

from crowdflow._typing import SparseMatrix
from crowdflow.graphs import without_diagonal


def top_eigenvalue(a: SparseMatrix, dense_max: int = 2000) -> float:
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


def signless_lambda_min(adj: SparseMatrix, dense_max: int = 2000) -> tuple[float, str]:
    """Smallest eigenvalue of the signless Laplacian of ``adj`` (docs/methods/skills.md §3.4).

    Dense LAPACK ``eigvalsh`` (``scipy.linalg``, smallest eigenvalue only) for n ≤ ``dense_max``;
    otherwise ``scipy.sparse.linalg.eigsh`` on (c I − L_s) with c = 2 max row sum, ``which='LA'``,
    so λ_min = c − λ_top (no shift-invert).
    The Lanczos start vector is a fixed pseudo-random vector (deterministic output).

    Returns
    -------
    (float, str)
        λ_min and the method used (``"eigvalsh"`` or ``"eigsh"``).
    """
    ls = signless_laplacian(adj)
    n = ls.shape[0]
    if n == 0:
        return 0.0, "eigvalsh"
    if n <= dense_max:
        return float(scipy.linalg.eigvalsh(ls.toarray(), subset_by_index=[0, 0])[0]), "eigvalsh"
    c = 2.0 * float(ls.diagonal().max())
    shifted = sp.csr_matrix(sp.identity(n, format="csr") * c - ls)
    v0 = np.random.default_rng(0).standard_normal(n)
    top = eigsh(shifted, k=1, which="LA", v0=v0, tol=1e-12, maxiter=100 * n, return_eigenvectors=False)[0]
    return float(c - top), "eigsh"
