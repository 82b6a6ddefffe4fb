"""HodgeRank least squares: Laplacian solves per connected component, scores, the cycle projection.

``θ̂ = argmin_{Σ_c θ = 0} ½ Σ_k w_k (θ_i − θ_j − y_k)²`` solves ``Lθ = XᵀWy``; :class:`LaplacianSolver`
grounds one node per component (its grounded Laplacian is positive definite), factorises it once by
sparse LU or runs Jacobi-preconditioned CG, and centres the result in every component, which gives
``θ̂ = L†XᵀWy``. The same solve applies the W-orthogonal projection onto the cycle space,
``P v = v − X L†XᵀW v`` (:func:`cycle_projector`), used by HLASSO and LBI, and the debiased refit
without flagged rows (:func:`refit_without`).

See docs/methods/ranking.md §2.1 (scores and solver), §2.2 (P) and §3.3 (the refit).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any, Literal, cast

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse import csgraph
from scipy.sparse import linalg as spla

from crowdflow._typing import SparseMatrix
from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.pairs import drop_nodes

logger = logging.getLogger(__name__)

__all__ = [
    "CycleOp",
    "LaplacianSolver",
    "auto_solver_method",
    "center_per_component",
    "cycle_projector",
    "hodgerank_scores",
    "laplacian_lambda_max",
    "ls_on_rows",
    "refit_without",
]


#: ``'auto'`` factorises the grounded Laplacian by sparse LU up to this many kept nodes (docs/methods/ranking.md §2.1).
SPLU_MAX_N = 1000
#: ... and up to this many when the graph has at most :data:`SPARSE_PAIRS_PER_ITEM` compared pairs per item.
SPARSE_SPLU_MAX_N = 3000
SPARSE_PAIRS_PER_ITEM = 2.5
#: A grounded Laplacian picked for ``'splu'`` with at least this share of stored entries is factorised densely
#: (Cholesky): at 1,000 items and 90,000 compared pairs (18 % dense) SuperLU took 0.24 s, dense Cholesky ~0.02 s.
DENSE_FACTOR_MIN_DENSITY = 0.05


def auto_solver_method(
    Lg: SparseMatrix,
    *,
    splu_max_n: int = SPLU_MAX_N,
    sparse_splu_max_n: int = SPARSE_SPLU_MAX_N,
    diagonal: np.ndarray | None = None,
) -> Literal["splu", "cg"]:
    """The solver ``'auto'`` picks for a grounded Laplacian ``Lg`` (docs/methods/ranking.md §2.1).

    Sparse LU when ``n ≤ splu_max_n``, or when ``n ≤ sparse_splu_max_n`` and the graph has at most 2.5
    distinct compared pairs per item; Jacobi-preconditioned CG otherwise. The LU factor of a
    well-connected graph (random pairs, a few dozen per item) fills in almost completely: with 20 rows
    per item the factorisation took 150 ms at n = 1,500 and 0.9 s at n = 3,000 (1.5 s with 50 rows per
    item), where one CG solve takes 1–4 ms; per solve after factorising, LU is 0.8 ms against CG's 1.0 ms
    at n = 1,500 and 4.1 ms against 1.3 ms at n = 3,000. Graphs with few pairs per item (paths, trees,
    thin bands, 4 rows per item) factorise with little fill (58 ms at n = 3,000, then 0.4 ms per solve
    against CG's 2.4 ms) and are the ones whose poor conditioning slows CG down. ``diagonal``: ``Lg``'s diagonal when
    the caller has it (reading it off a CSR matrix scans every row: 35 ms at 2·10^7 entries).
    """
    n = Lg.shape[0]
    if n <= splu_max_n:
        return "splu"
    diag = Lg.diagonal() if diagonal is None else diagonal
    pairs = (Lg.nnz - int(np.count_nonzero(diag))) / 2.0
    if n <= sparse_splu_max_n and pairs <= SPARSE_PAIRS_PER_ITEM * n:
        return "splu"
    return "cg"


def center_per_component(x: np.ndarray, component: np.ndarray, n_components: int) -> np.ndarray:
    """A copy of ``x`` ((n,) or (n, k)) with the mean of every component subtracted (docs/methods/ranking.md §2.1)."""
    x = np.array(x, dtype=float, copy=True)
    if n_components == 1:
        x -= x.mean(axis=0)
        return x
    sizes = np.maximum(np.bincount(component, minlength=n_components), 1).astype(float)
    if x.ndim == 1:
        x -= (np.bincount(component, weights=x, minlength=n_components) / sizes)[component]
        return x
    for c in range(x.shape[1]):
        x[:, c] -= (np.bincount(component, weights=x[:, c], minlength=n_components) / sizes)[component]
    return x


class LaplacianSolver:
    """Solve ``L θ = b`` for the weighted Laplacian, per connected component (docs/methods/ranking.md §2.1).

    One node per component (the one of largest weighted degree) is grounded, i.e. its row and column
    are deleted; the grounded Laplacian is symmetric positive definite. It is factorised once with
    sparse LU (``method='splu'``) or solved by Jacobi-preconditioned conjugate gradients
    (``method='cg'``). The result is centred inside every component, which gives the minimum-norm
    solution ``θ = L†b`` for right-hand sides in the range of ``L`` (b is first projected onto the
    range by removing its per-component mean).

    Parameters
    ----------
    L : scipy.sparse matrix
        n×n Laplacian.
    component : numpy.ndarray
        Component id per node (0..c−1).
    n_components : int
    method : {'auto', 'splu', 'cg'}
        ``'splu'`` factorises once: sparse LU (SuperLU), or dense Cholesky when the grounded Laplacian has at
        least :data:`DENSE_FACTOR_MIN_DENSITY` of its entries stored (and ≥ 64 kept nodes), where SuperLU
        fills in anyway. ``'auto'`` (:func:`auto_solver_method`) uses a factorisation for ``n ≤ splu_max_n``
        kept nodes, and up to ``sparse_splu_max_n`` kept nodes when the graph has at most 2.5 compared pairs
        per item (near-trees, paths, bands: little fill-in, and conditioning too poor for CG); CG otherwise
        (the LU factor of a well-connected graph fills in almost completely, while CG converges in a few
        dozen iterations).
    rtol : float
        CG relative residual tolerance ``‖b − L_g x‖ ≤ rtol·‖b‖``.
    maxiter : int, optional
        CG iteration cap (default ``max(1000, 10·n)``); a :class:`RuntimeWarning` is issued when hit.
    splu_max_n, sparse_splu_max_n : int
        Size thresholds of the ``'auto'`` rule.

    Attributes
    ----------
    n_solves : int
        Number of solves performed.
    cg_iterations : list of int
        Iterations of recent CG solves (last 1000; empty for LU).
    """

    def __init__(
        self,
        L: SparseMatrix,
        component: np.ndarray,
        n_components: int,
        *,
        method: Literal["auto", "splu", "cg"] = "auto",
        rtol: float = 1e-11,
        maxiter: int | None = None,
        splu_max_n: int = SPLU_MAX_N,
        sparse_splu_max_n: int = SPARSE_SPLU_MAX_N,
    ) -> None:
        L = sp.csr_matrix(L)
        n = L.shape[0]
        self.n = n
        self.component = np.asarray(component, dtype=np.int64)
        self.n_components = int(n_components)
        self.sizes = np.bincount(self.component, minlength=self.n_components).astype(float)
        deg = L.diagonal()
        order = np.lexsort((np.arange(n), -deg, self.component))
        starts = np.r_[0, np.flatnonzero(np.diff(self.component[order])) + 1]
        self.ground = order[starts]  # ground node of component c at position c
        keep = np.ones(n, dtype=bool)
        keep[self.ground] = False
        self.keep = np.flatnonzero(keep)
        Lg = drop_nodes(L if L.has_sorted_indices else sp.csr_matrix(L.sorted_indices()), self.keep)
        deg_kept = deg[self.keep]  # the diagonal of Lg = L[keep][:, keep]
        if method == "auto":
            method = auto_solver_method(
                Lg, splu_max_n=splu_max_n, sparse_splu_max_n=sparse_splu_max_n, diagonal=deg_kept
            )
        if method not in ("splu", "cg"):
            raise ValueError(f"unknown Laplacian solver method {method!r}")
        self.method = method
        self.rtol = float(rtol)
        self.maxiter = int(maxiter) if maxiter is not None else max(1000, 10 * n)
        self.n_solves = 0
        self.cg_iterations: list[int] = []
        self._lu = None
        self._chol: tuple[np.ndarray, bool] | None = None
        if self.keep.size == 0:
            return
        if method == "splu":
            k = self.keep.size
            if k >= 64 and Lg.nnz >= DENSE_FACTOR_MIN_DENSITY * k * k:
                try:  # the grounded Laplacian is symmetric positive definite
                    self._chol = sla.cho_factor(Lg.toarray(), check_finite=False)
                except np.linalg.LinAlgError:  # numerically not: SuperLU below
                    self._chol = None
            if self._chol is None:
                self._lu = spla.splu(sp.csc_matrix(Lg), permc_spec="MMD_AT_PLUS_A")
        else:
            self._Lg = sp.csr_matrix(Lg)
            self._dinv = 1.0 / deg_kept

    @classmethod
    def from_graph(cls, g: ComparisonGraph, **kwargs: Any) -> LaplacianSolver:
        """Solver for ``g.L`` with ``g``'s components."""
        return cls(g.L, g.component, g.n_components, **kwargs)

    def center(self, x: np.ndarray) -> np.ndarray:
        """Subtract the per-component mean (works on (n,) and (n, k) arrays)."""
        return center_per_component(x, self.component, self.n_components)

    def solve(self, b: np.ndarray, x0: np.ndarray | None = None) -> np.ndarray:
        """Return ``L†b`` (centred per component); ``x0`` warm-starts CG."""
        b = self.center(b)
        self.n_solves += 1
        out = np.zeros_like(b)
        if self.keep.size == 0:
            return out
        bg = b[self.keep]
        if self._chol is not None:
            xg = sla.cho_solve(self._chol, bg, check_finite=False)
        elif self._lu is not None:
            xg = self._lu.solve(bg)
        elif b.ndim == 1:
            xg = self._cg(bg, x0)
        else:
            xg = np.column_stack([self._cg(bg[:, c], None if x0 is None else x0[:, c]) for c in range(b.shape[1])])
        out[self.keep] = xg
        return self.center(out)

    def _cg(self, bg: np.ndarray, x0: np.ndarray | None) -> np.ndarray:
        """Jacobi-preconditioned conjugate gradients on the grounded (SPD) Laplacian.

        Stopping rule: ``‖b − L_g x‖₂ ≤ rtol·‖b‖₂``; cap ``maxiter`` (RuntimeWarning). Inner products use
        ``einsum`` (see :func:`wdot`), so no multi-threaded BLAS call sits in the loop.
        """
        A, dinv = self._Lg, self._dinv
        dot: Callable[[np.ndarray, np.ndarray], float] = lambda a, b: float(np.einsum("i,i->", a, b))  # noqa: E731
        bnorm = np.sqrt(dot(bg, bg))
        if x0 is not None:
            x0 = np.asarray(x0, dtype=float)
            x = x0[self.keep] - x0[self.ground[self.component[self.keep]]]
            r = bg - A @ x
        else:
            x = np.zeros_like(bg)
            r = bg.copy()
        tol = self.rtol * bnorm
        it = 0
        rr = dot(r, r)
        if bnorm == 0.0 or np.sqrt(rr) <= tol:
            self._log_cg(0)
            return x if bnorm > 0 else np.zeros_like(bg)
        zv = dinv * r
        p = zv.copy()
        rz = dot(r, zv)
        converged = False
        for it in range(1, self.maxiter + 1):
            Ap = A @ p
            alpha = rz / dot(p, Ap)
            x += alpha * p
            r -= alpha * Ap
            rr = dot(r, r)
            if np.sqrt(rr) <= tol:
                converged = True
                break
            zv = dinv * r
            rz_new = dot(r, zv)
            p *= rz_new / rz
            p += zv
            rz = rz_new
        self._log_cg(it)
        if not converged:
            warnings.warn(
                f"Laplacian CG did not reach rtol={self.rtol:g} in {self.maxiter} iterations "
                f"(relative residual {np.sqrt(rr) / bnorm:.2e}; ill-conditioned comparison graph, small "
                "Fiedler value?)",
                RuntimeWarning,
                stacklevel=3,
            )
        return cast(np.ndarray, x)

    def _log_cg(self, it: int) -> None:
        self.cg_iterations.append(int(it))
        if len(self.cg_iterations) > 1000:
            del self.cg_iterations[:-1000]


def laplacian_lambda_max(L: SparseMatrix, *, dense_max_n: int = 1500) -> float:
    """Largest eigenvalue of the Laplacian (step-size guard of Algorithm 2, docs/methods/ranking.md §4.1).

    Dense ``eigvalsh`` for ``n ≤ dense_max_n``; otherwise Lanczos (``eigsh``), falling back to the
    bound ``2·max weighted degree`` if Lanczos fails.
    """
    n = L.shape[0]
    if n == 0:
        return 0.0
    if n <= dense_max_n:
        return float(np.linalg.eigvalsh(sp.csr_matrix(L).toarray())[-1])
    try:
        # scipy-stubs finds no eigsh overload for a csr_matrix of unknown dtype
        val = spla.eigsh(sp.csr_matrix(L, dtype=float), k=1, which="LA", tol=1e-8, return_eigenvectors=False)  # type: ignore[call-overload]
        return float(val[0])
    except Exception:  # pragma: no cover - ARPACK failure is rare
        logger.warning("eigsh failed for lambda_max(L); using the 2·max degree bound")
        return float(2 * L.diagonal().max())


def hodgerank_scores(g: ComparisonGraph, solver: LaplacianSolver | None = None) -> np.ndarray:
    """HodgeRank least-squares scores ``θ̂ = L† XᵀW y``, centred per component (docs/methods/ranking.md §2.1).

    ``θ̂ = argmin_{Σ_c θ = 0} ½ Σ_k w_k (θ_i − θ_j − y_k)²`` on every connected component c.
    """
    solver = solver or LaplacianSolver.from_graph(g)
    return solver.solve(g.divergence(g.y))


def _project_cycles(
    g: ComparisonGraph, solver: LaplacianSolver, v: np.ndarray, x0: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``P v = v − X L† XᵀW v`` (W-orthogonal projection onto the cycle space) and ``θ = L†XᵀWv``."""
    theta = solver.solve(g.divergence(v), x0=x0)
    return cast(np.ndarray, v - g.X @ theta), theta


# cycle projector: op(v, θ_prev) -> (P v, θ), see cycle_projector
CycleOp = Callable[[np.ndarray, np.ndarray | None], tuple[np.ndarray, np.ndarray]]


def cycle_projector(g: ComparisonGraph, solver: LaplacianSolver, *, dense_max_entries: int = 100_000) -> CycleOp:
    """Operator ``op(v, θ_prev) -> (P v, θ)`` with ``θ = L†XᵀWv`` and ``Pv = v − Xθ`` (docs/methods/ranking.md §2.2).

    For tiny problems (LU solver, ``n ≤ 400`` and ``n·m ≤ dense_max_entries``) the n×m matrix
    ``K = L†XᵀW`` is formed once (multi-right-hand-side solve) and every application is one dense
    mat-vec (cheaper only where per-call overhead dominates); otherwise each application is one
    Laplacian solve (warm-started by ``θ_prev`` for CG). Never forms P (m×m).
    """
    if solver.method == "splu" and g.n <= 400 and g.n * g.m <= dense_max_entries and g.m > 0:
        K = solver.solve(g.XT.multiply(g.w[None, :]).toarray())
        X = g.X

        def dense_op(v: np.ndarray, theta: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
            th = K @ v
            return v - X @ th, th

        return dense_op

    def op(v: np.ndarray, theta: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        return _project_cycles(g, solver, v, x0=theta)

    return op


def ls_on_rows(
    g: ComparisonGraph,
    keep: np.ndarray,
    theta_ref: np.ndarray,
    *,
    method: str = "auto",
    splu_max_n: int = SPLU_MAX_N,
    rtol: float = 1e-11,
) -> tuple[np.ndarray, int]:
    """Least squares on the rows ``keep`` and the number of components those rows leave (docs/methods/ranking.md §3.3).

    ``θ = θ_ref + L_keep†X_keepᵀW(y_keep − X_keepθ_ref)``, centred per component of ``g``: the LS fit on the
    kept rows, with the offsets between pieces that the kept rows no longer connect taken from ``θ_ref``.
    ``L_keep = L − X_dropᵀW_dropX_drop`` is formed without rebuilding the graph. The second value counts
    the connected components of the kept rows over all n items (an item left without rows is its own
    component), so ``n − c_keep`` is the number of score differences the kept rows identify. With
    ``method='cg'`` the solve starts from ``θ_ref`` (a small correction converges in few iterations);
    iterative trimming passes a small ``splu_max_n`` so that a refit does not pay an LU factorisation.
    """
    keep = np.asarray(keep, dtype=bool)
    if not keep.any():
        return np.asarray(theta_ref, dtype=float).copy(), g.n
    if keep.all():
        Lk, labels, n_comp = g.L, g.component, g.n_components
    else:
        drop = ~keep
        Xd = g.X[drop]
        Lk = sp.csr_matrix(g.L - Xd.T @ sp.diags(g.w[drop]) @ Xd)
        Lk.eliminate_zeros()
        n_comp, labels = csgraph.connected_components(Lk, directed=True, connection="strong")
    m_ = cast(Literal["auto", "splu", "cg"], method)
    solver = LaplacianSolver(Lk, labels, int(n_comp), method=m_, splu_max_n=splu_max_n, rtol=rtol)
    r = np.where(keep, g.y - g.gradient(theta_ref), 0.0)
    theta = theta_ref + solver.solve(g.divergence(r))
    return center_per_component(theta, g.component, g.n_components), int(n_comp)


def refit_without(
    g: ComparisonGraph, drop: np.ndarray, theta_ref: np.ndarray, *, solver_method: str = "auto"
) -> np.ndarray:
    """Debiased scores: LS refit on the rows not in ``drop`` ("LASSO+L2", docs/methods/ranking.md §3.3 step 5).

    ``θ = θ_ref + L_keep† X_keepᵀW(y_keep − X_keepθ_ref)``, re-centred per original component. This is the
    LS fit on the kept rows; if dropping rows splits a component, the offsets between the pieces (which
    the kept rows cannot identify) are taken from ``θ_ref``.
    """
    drop = np.asarray(drop, dtype=bool)
    if not drop.any():
        return LaplacianSolver.from_graph(g, method=solver_method).solve(g.divergence(g.y))
    return ls_on_rows(g, ~drop, theta_ref, method=solver_method)[0]
