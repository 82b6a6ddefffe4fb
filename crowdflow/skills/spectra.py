"""Extreme eigenvalues for the skills diagnostics and the ``eg`` step size.

The signless Laplacian L_s = Deg(w) + Adj(w) of a weighted graph satisfies
xᵀ L_s x = Σ_{i<j} w_ij (x_i + x_j)², so its smallest eigenvalue is exactly 0 on a bipartite component
and positive otherwise: it measures how firmly a component pins down its skills. The largest eigenvalue
of a nonnegative weight matrix, ‖w‖₂, sets the step of exponentiated gradient and the Lipschitz constant
in the diagnostics. Dense LAPACK for small matrices; above a size limit (``dense_max``, by default the
``dense_eig_max`` of the options, :data:`DENSE_EIG_MAX`) the smallest eigenvalue by Jacobi-preconditioned
LOBPCG (a compiled single-vector loop, :func:`_lobpcg_loop`), checked by its residual, with dense LAPACK (up to
:data:`DENSE_FALLBACK_MAX`) or Lanczos (``eigsh``) as the fallback, and the largest by Lanczos. The iterative
solvers never form L_s: they apply Deg + Adj from the CSR arrays of the graph, or through one dense copy when
the graph fills at least a quarter of its n² entries (:class:`_Operator`). Every start vector is fixed, so the
outputs are deterministic. See docs/methods/skills.md §3.4 and §2.5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, eigsh

from crowdflow._typing import SparseMatrix
from crowdflow.compiled import compiled_kernel
from crowdflow.graphs import without_diagonal

#: Matrices up to this order get their extreme eigenvalues from dense LAPACK, larger ones from an iterative solver.
#: Dense ``eigvalsh`` is O(n³) whatever the graph (on this 2-core host, single-threaded BLAS: 0.005 s at 400,
#: 0.045 s at 1,000 and 0.36 s at 2,000 workers; 1.7 s at 3,000), where the verified LOBPCG takes 0.01-0.2 s and
#: Lanczos for the largest one 0.001-0.02 s, agreeing to ≤ 1e-13 relative (docs/methods/skills.md §3.4).
DENSE_EIG_MAX = 400
#: When LOBPCG's answer fails its residual check, matrices up to this order are solved densely, larger ones by
#: Lanczos on cI − L_s (whose convergence on dense co-label graphs can take thousands of products).
DENSE_FALLBACK_MAX = 2000
#: The iterative solvers apply a matrix of at most this order through a dense copy (BLAS ``gemv``, 8n² bytes:
#: 32 MB at 2,000) when at least a quarter of its entries are stored: a dense mat-vec reads its n² entries
#: in order, several times faster per entry than the indexed reads of CSR (0.15 ms against 0.9 ms at 1,000 workers
#: and 8.8·10^5 stored pairs; even at 3,000 workers and 22 % fill the CSR product is already the faster one).
DENSE_OPERATOR_MAX = 2000


@compiled_kernel
def _fill_dense(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, diag: np.ndarray, out: np.ndarray) -> None:
    """out += diag(diag) + A + Aᵀ for A the strict upper triangle in CSR arrays (``data`` empty: every entry 1)."""
    unit = data.size == 0
    for i in range(indptr.size - 1):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            a = 1.0 if unit else data[p]
            out[i, j] += a
            out[j, i] += a
        out[i, i] += diag[i]


@compiled_kernel
def _apply(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    diag: np.ndarray,
    dense: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
) -> None:
    """y = (diag(diag) + A + Aᵀ) x for A the strict upper triangle of a symmetric matrix in CSR arrays (each stored
    pair read once, for both of its entries; unsigned indices: no wrap-around test in the inner loop; an empty
    ``data`` means every stored entry is 1), or y = dense · x when a dense copy (all of it) is given."""
    n = x.size
    if dense.shape[0] == n and n > 0:
        np.dot(dense, x, y)
        return
    unit = data.size == 0
    for i in range(n):
        y[i] = 0.0
    for i in range(n):
        xi = x[i]
        acc = diag[i] * xi
        if unit:
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                acc += x[j]
                y[j] += xi
        else:
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                a = data[p]
                acc += a * x[j]
                y[j] += a * xi
        y[i] += acc


@dataclass(frozen=True)
class _Operator:
    """diag(diag) + A for a symmetric A without stored diagonal, applied by :func:`_apply` from the CSR arrays of its
    strict upper triangle (``data`` empty when every entry is 1, float32 when that is exact), or through ``dense``
    (diag included; 0 × 0 when not used) when A fills at least a quarter of its entries and n ≤
    :data:`DENSE_OPERATOR_MAX`. ``norm1`` = max_i (|diag_i| + Σ_j |a_ij|) bounds its 2-norm."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    diag: np.ndarray
    dense: np.ndarray
    norm1: float

    @classmethod
    def build(cls, a: SparseMatrix, signless: bool) -> _Operator:
        """``signless``: L_s = Deg + Adj of the graph ``a`` (its diagonal ignored); else ``a`` itself (diag 0 plus
        the stored diagonal of ``a``)."""
        m = sp.csr_matrix(a)
        n = m.shape[0]
        rows = np.repeat(np.arange(n, dtype=m.indices.dtype), np.diff(m.indptr))
        on_diag = m.indices == rows
        diag = np.zeros(n)
        if on_diag.any():  # rare: the graphs here have a zero diagonal; take it out of the CSR arrays
            if not signless:
                np.add.at(diag, rows[on_diag], np.asarray(m.data[on_diag], dtype=np.float64))
            m = without_diagonal(m)
            rows = np.repeat(np.arange(n, dtype=m.indices.dtype), np.diff(m.indptr))
        del on_diag
        data = np.asarray(m.data, dtype=np.float64)
        sums = np.asarray(m.sum(axis=1, dtype=np.float64)).ravel()
        abs_sums = sums if data.min(initial=0.0) >= 0 else np.asarray(abs(m).sum(axis=1, dtype=np.float64)).ravel()
        if signless:
            diag = sums
        norm1 = float(np.max(np.abs(diag) + abs_sums)) if n else 0.0
        # the strict upper triangle: A is symmetric, so each pair is stored (and read) once
        up = m.indices > rows
        indptr = np.zeros(n + 1, dtype=np.uint64)
        np.cumsum(np.bincount(rows[up], minlength=n), out=indptr[1:])
        indices = m.indices[up].view(np.uint32 if m.indices.dtype == np.int32 else np.uint64)
        data = data[up]
        del rows, up
        if np.all(data == 1.0):
            data = np.zeros(0)
        elif np.all(data.astype(np.float32) == data):  # co-label counts: 4 bytes an entry, the same products
            data = data.astype(np.float32)
        dense = np.zeros((0, 0))
        if 0 < n <= DENSE_OPERATOR_MAX and 4 * m.nnz >= n * n:
            dense = np.zeros((n, n))
            _fill_dense(indptr, indices, data, diag, dense)
        return cls(indptr, indices, data, diag, dense, norm1)

    def __matmul__(self, x: np.ndarray) -> np.ndarray:
        y = np.empty(self.diag.size)
        _apply(
            self.indptr, self.indices, self.data, self.diag, self.dense, np.ascontiguousarray(x, dtype=np.float64), y
        )
        return y

    def linear_operator(self) -> LinearOperator:
        n = self.diag.size
        return LinearOperator((n, n), matvec=lambda v: self @ np.ravel(v), dtype=np.float64)


def top_eigenvalue(a: SparseMatrix, dense_max: int = DENSE_EIG_MAX) -> float:
    """Largest eigenvalue of a symmetric matrix (||A||_2 for a nonnegative one)."""
    n = a.shape[0]
    if n == 0 or sp.csr_matrix(a).nnz == 0:
        return 0.0
    if n <= dense_max:
        return float(scipy.linalg.eigvalsh(sp.csr_matrix(a).toarray(), subset_by_index=[n - 1, n - 1])[0])
    v0 = np.random.default_rng(0).standard_normal(n)
    op = _Operator.build(a, signless=False).linear_operator()
    return float(eigsh(op, k=1, which="LA", v0=v0, return_eigenvectors=False)[0])


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
    LOBPCG with the Jacobi preconditioner Deg⁻¹ from a fixed pseudo-random start vector (:func:`_lobpcg_loop`, L_s
    applied without being formed): L_s = Deg + Adj is diagonally dominant, so the preconditioned iteration converges
    in tens of products where unpreconditioned Lanczos needs thousands on dense co-label graphs (2,300 products,
    2.7 s, against 0.12 s at 3,000 workers and 6.5·10^5 entries). Its answer is accepted only when the Ritz pair
    (λ, v), recomputed by an explicit product, has a residual ‖L_s v − λ v‖ ≤ 1e-8 ‖L_s‖₁ (then
    |λ − λ_min| ≤ residual²/gap, far below the diagnostics' needs); otherwise dense ``eigvalsh`` up to
    ``dense_fallback_max``, and above it ``eigsh`` on (c I − L_s) with c = 2 max row sum, ``which='LA'``,
    tol 1e-12, so λ_min = c − λ_top.

    Returns
    -------
    (float, str)
        λ_min and the method used (``"eigvalsh"``, ``"lobpcg"`` or ``"eigsh"``).
    """
    lam, method, _ = signless_min_pair(adj, dense_max, dense_fallback_max)
    return lam, method


def signless_min_pair(
    adj: SparseMatrix,
    dense_max: int = DENSE_EIG_MAX,
    dense_fallback_max: int = DENSE_FALLBACK_MAX,
    start: np.ndarray | None = None,
) -> tuple[float, str, np.ndarray | None]:
    """:func:`signless_lambda_min` with LOBPCG's start vector given and its verified vector returned (else None).

    The diagnostics solve the unit and the count-weighted L_s of one graph; their lowest eigenvectors are close
    (cosine 0.9997 at 3,000 workers and 2·10^6 pairs), so the weighted solve starts from the unit one's vector:
    75 → 34 LOBPCG steps there, 93 → 62 on a nearly complete 1,000-worker graph, the same λ to ~1e-15 relative.
    ``start`` defaults to the fixed pseudo-random vector.
    """
    n = adj.shape[0]
    if n == 0:
        return 0.0, "eigvalsh", None
    if n <= dense_max:
        return _dense_min(signless_laplacian(adj)), "eigvalsh", None
    found = _lobpcg_min(_Operator.build(adj, signless=True), start)
    if found is not None:
        return found[0], "lobpcg", found[1]
    ls = signless_laplacian(adj)
    if n <= dense_fallback_max:
        return _dense_min(ls), "eigvalsh", None
    c = 2.0 * float(ls.diagonal().max())
    shifted = sp.csr_matrix(sp.identity(n, format="csr") * c - ls)
    v0 = np.random.default_rng(0).standard_normal(n)
    top = eigsh(shifted, k=1, which="LA", v0=v0, tol=1e-12, maxiter=100 * n, return_eigenvectors=False)[0]
    return float(c - top), "eigsh", None


def _dense_min(ls: sp.csr_matrix) -> float:
    """λ_min by dense LAPACK (smallest eigenvalue only)."""
    return float(scipy.linalg.eigvalsh(ls.toarray(), subset_by_index=[0, 0])[0])


def _lobpcg_min(op: _Operator, start: np.ndarray | None = None, maxiter: int = 400) -> tuple[float, np.ndarray] | None:
    """λ_min of a symmetric positive semi-definite L_s = Deg + Adj by Jacobi-preconditioned LOBPCG, or None unverified.

    Iterates to a residual ≤ 1e-10 ‖L_s‖₁ (:func:`_lobpcg_loop`), then accepts the Rayleigh quotient of the last
    vector when an explicit product gives a residual ≤ 1e-8 ‖L_s‖₁; returns it with that (unit) vector.
    """
    n = op.diag.size
    if n < 5 or not np.all(op.diag > 0):  # an isolated vertex: Deg⁻¹ undefined (and λ_min = 0 is then exact elsewhere)
        return None
    scale = op.norm1
    if start is None or start.shape != (n,) or not np.all(np.isfinite(start)) or not np.any(start):
        x0 = np.random.default_rng(0).standard_normal(n)
    else:
        x0 = np.asarray(start, dtype=np.float64)
    x, _ = _lobpcg_loop(op.indptr, op.indices, op.data, op.diag, op.dense, x0, 1e-10 * scale, maxiter)
    norm = float(np.linalg.norm(x))
    if not np.all(np.isfinite(x)) or norm == 0.0:
        return None
    x /= norm
    ax = op @ x
    lam = float(x @ ax)
    residual = float(np.linalg.norm(ax - lam * x))
    if not math.isfinite(lam) or residual > 1e-8 * scale:
        return None
    return max(lam, 0.0), x


@compiled_kernel
def _lobpcg_loop(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    diag: np.ndarray,
    dense: np.ndarray,
    x0: np.ndarray,
    tol: float,
    maxiter: int,
) -> tuple[np.ndarray, int]:
    """Single-vector LOBPCG for the smallest eigenvalue of L = diag(diag) + A (A's diagonal ignored), preconditioner
    diag⁻¹ (Knyazev 2001, block size 1).

    Each step: residual r = L x − θ x (θ = xᵀ L x, ‖x‖ = 1), stop when ‖r‖ ≤ ``tol``; w = diag⁻¹ r made orthonormal
    to x (Gram–Schmidt, twice), one product L w; the previous direction p made orthonormal to x and w (its product
    L p updated alongside, no product) and dropped when it has (numerically) no component left; Rayleigh–Ritz on
    span{x, w, p} (a 3 × 3 ``eigh``): x ← the Ritz vector of the smallest Ritz value, p ← its w, p part. One product
    a step; L x and L p are carried as the same combinations as x and p. Returns the last x and the steps taken.
    """
    n = x0.size
    x = x0.copy()
    ax = np.empty(n)
    w = np.empty(n)
    aw = np.empty(n)
    p = np.zeros(n)
    ap = np.zeros(n)
    have_p = False
    nx = math.sqrt(np.dot(x, x))
    x /= nx
    _apply(indptr, indices, data, diag, dense, x, ax)
    steps = 0
    for steps in range(maxiter + 1):
        theta = np.dot(x, ax)
        rn2 = 0.0
        for i in range(n):
            r = ax[i] - theta * x[i]
            rn2 += r * r
            w[i] = r / diag[i]
        if math.sqrt(rn2) <= tol or steps == maxiter:
            break
        for _k in range(2):
            c = np.dot(x, w)
            for i in range(n):
                w[i] -= c * x[i]
        nw = math.sqrt(np.dot(w, w))
        if not nw > 0.0:
            break
        w /= nw
        _apply(indptr, indices, data, diag, dense, w, aw)
        use_p = have_p
        if use_p:
            npre = math.sqrt(np.dot(p, p))
            for _k in range(2):
                cx = np.dot(x, p)
                cw = np.dot(w, p)
                for i in range(n):
                    p[i] -= cx * x[i] + cw * w[i]
                    ap[i] -= cx * ax[i] + cw * aw[i]
            npp = math.sqrt(np.dot(p, p))
            if npp > 1e-10 * npre:
                p /= npp
                ap /= npp
            else:
                use_p = False
        k = 3 if use_p else 2
        h = np.zeros((k, k))
        h[0, 0] = theta
        h[0, 1] = h[1, 0] = 0.5 * (np.dot(x, aw) + np.dot(w, ax))
        h[1, 1] = np.dot(w, aw)
        if use_p:
            h[0, 2] = h[2, 0] = 0.5 * (np.dot(x, ap) + np.dot(p, ax))
            h[1, 2] = h[2, 1] = 0.5 * (np.dot(w, ap) + np.dot(p, aw))
            h[2, 2] = np.dot(p, ap)
        _, vecs = np.linalg.eigh(h)
        c0, c1 = vecs[0, 0], vecs[1, 0]
        c2 = vecs[2, 0] if use_p else 0.0
        for i in range(n):
            pi = c1 * w[i] + c2 * p[i]
            api = c1 * aw[i] + c2 * ap[i]
            p[i] = pi
            ap[i] = api
            x[i] = c0 * x[i] + pi
            ax[i] = c0 * ax[i] + api
        have_p = True
        nx = math.sqrt(np.dot(x, x))
        x /= nx
        ax /= nx
    return x, steps
