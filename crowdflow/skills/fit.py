"""Worker skills by sparse rank-one completion (PGD) and MAP weighted-vote consensus.

Spec: /work/shared/specs/skills-rank-one.md (Ma, Olshevsky, Saligrama, Szepesvari, JMLR,
"Gradient Descent for Sparse Rank-One Matrix Completion for Crowd-Sourced Aggregation of Sparsely
Interacting Workers").

Model (spec §1): one-coin Dawid–Skene with M classes. Worker i is right with probability p_i and
otherwise picks one of the M − 1 wrong classes uniformly; the skill is s_i = (M p_i − 1)/(M − 1)
(binary: s_i = 2 p_i − 1). For two workers labelling the same task the agreement indicator has mean
((M−1)/M) s_i s_j + 1/M, so the moment

    C^_ij = (M a_ij − 1)/(M − 1),   a_ij = agreements_ij / N_ij                     (§2.1)

has E[C^_ij] = s_i s_j on every observed pair (N_ij = #tasks labelled by both). Skills are fitted by

    min_x  L(x) = 1/2 Σ_{i<j, N_ij>0} w_ij (C^_ij − x_i x_j)²,   w_ij = B(N_ij)         (§2.2)

with projected gradient descent inside the box ±(1 − τ/√n_i) (§2.3), the sign fixed per connected
component by Σ_K x_i > 0 (§2.4, S1) and labels predicted by the plug-in MAP vote with log-odds
weights v_i = log((1 + (M−1) s_i)/(1 − s_i)) (§2.7). Skills are identifiable exactly on the
non-bipartite components of the worker interaction graph (§3), which is checked first
(``crowdflow.graphs``).

The single entry point for the pipeline is :func:`fit_skills` (``method = pgd | onecoin_ds | ds |
mv``). Lower-level pieces (:func:`label_moments`, :func:`fit_rank_one`, :func:`resolve_signs`,
:func:`weighted_consensus`, :func:`component_diagnostics`, :func:`graph_structure`, …) are public
for tests and notebooks. Streaming for inputs larger than memory (design.md §4): pass 1
:func:`accumulate_moments` over pyarrow record batches (sufficient statistics N, agreements, n_i),
:func:`skills_from_moments`, pass 2 :func:`stream_consensus`.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, connected_components, dijkstra, minimum_spanning_tree
from scipy.sparse.linalg import eigsh

from crowdflow._typing import SparseMatrix
from crowdflow.graphs import Components, WorkerGraphReport, components, labels_by_task, pair_counts
from crowdflow.labels import DuplicatePolicy, LabelMatrix, encode_canonical, natural_order, task_major_order
from crowdflow.metrics import gold_metrics
from crowdflow.progress import IterationProgress, ProgressFn
from crowdflow.skills.dawid_skene import dawid_skene, one_coin_dawid_skene
from crowdflow.skills.majority import TieBreak, weighted_vote
from crowdflow.skills.rows import row_argmax, row_max, row_sum, softmax_rows

log = logging.getLogger(__name__)

Weighting = Literal["count", "binary", "square"]
Solver = Literal["gd", "scaled", "eg"]
SignMode = Literal["sum_rule", "bfs"]
Policy = Literal["raise", "flag"]
Fallback = Literal["zero", "mv"]
Method = Literal["pgd", "onecoin_ds", "ds", "mv"]

STATUSES = ("ok", "isolated", "bipartite_component", "too_few_labels")
_LOG_ODDS_MARGIN = 1e-9  # spec §2.7: clip s to [lo + 1e-9, hi − 1e-9] before the log


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------
def _check_no_duplicates(lm: LabelMatrix) -> None:
    _canonical_order(lm)


def _canonical_order(lm: LabelMatrix) -> np.ndarray:
    """Order of the entries by (task, worker); ``ValueError`` on a repeated (task, worker) pair."""
    order, key = task_major_order(lm.task_idx, lm.worker_idx, lm.n_workers)
    dup = key[1:] == key[:-1]
    if dup.any():
        w = max(lm.n_workers, 1)
        bad = np.unique(key[1:][dup])[:5]
        pairs = ", ".join(f"(task={lm.tasks[k // w]}, worker={lm.workers[k % w]})" for k in bad)
        raise ValueError(
            f"{int(dup.sum())} repeated (task, worker) pairs in the label matrix, e.g. {pairs}; "
            "deduplicate first (crowdflow.labels.deduplicate)"
        )
    return order


def canonical_label_matrix(lm: LabelMatrix) -> LabelMatrix:
    """The same labels with entries sorted by (task, worker).

    Floating-point sums over a task's labels then run in a fixed order, so outputs are
    byte-identical under any permutation of the input rows (spec AT-P2). Returns ``lm`` itself when
    it is already in that order.
    """
    order, _ = task_major_order(lm.task_idx, lm.worker_idx, lm.n_workers)
    if order.size and order[-1] == order.size - 1 and bool(np.all(order[1:] > order[:-1])):
        return lm
    return LabelMatrix(
        workers=lm.workers,
        tasks=lm.tasks,
        classes=lm.classes,
        worker_idx=np.ascontiguousarray(lm.worker_idx[order]),
        task_idx=np.ascontiguousarray(lm.task_idx[order]),
        class_idx=np.ascontiguousarray(lm.class_idx[order]),
    )


def prepare_labels(
    labels: pd.DataFrame | LabelMatrix,
    classes: list[str] | None = None,
    duplicates: DuplicatePolicy = "error",
) -> tuple[LabelMatrix, int]:
    """Validate and encode a label table (spec §1.3, §8 validation suite).

    DataFrame input goes through :func:`crowdflow.labels.encode_canonical` (hash-based codes, the
    duplicate policy applied on integer codes, one stable sort by (task, worker)); a LabelMatrix is
    checked for repeated pairs and sorted the same way.

    Parameters
    ----------
    labels : pandas.DataFrame or LabelMatrix
        Long table with columns ``task, worker, label`` (no nulls), or an encoded matrix.
    classes : list of str, optional
        Declared label set; wins over the observed labels (spec §1.3).
    duplicates : {"error", "keep_last", "keep_first"}
        Policy for repeated (task, worker) pairs (DataFrame input only).

    Returns
    -------
    (LabelMatrix, int)
        Canonically ordered label matrix and the number of duplicate rows dropped.
    """
    dropped = 0
    if isinstance(labels, LabelMatrix):
        lm = labels
        if lm.n_labels == 0:
            raise ValueError("label matrix is empty")
        if classes is not None and [str(c) for c in classes] != lm.classes.astype(str).tolist():
            raise ValueError(
                f"declared classes {list(classes)} differ from the label matrix's classes "
                f"{lm.classes.tolist()}; encode with crowdflow.labels.encode_labels(df, classes)"
            )
        order = _canonical_order(lm)
        if not (order.size and order[-1] == order.size - 1 and bool(np.all(order[1:] > order[:-1]))):
            lm = LabelMatrix(
                workers=lm.workers,
                tasks=lm.tasks,
                classes=lm.classes,
                worker_idx=np.ascontiguousarray(lm.worker_idx[order]),
                task_idx=np.ascontiguousarray(lm.task_idx[order]),
                class_idx=np.ascontiguousarray(lm.class_idx[order]),
            )
    elif isinstance(labels, pd.DataFrame):
        lm, dropped = encode_canonical(labels, classes, duplicates)
    else:
        raise ValueError(f"labels must be a pandas DataFrame or a LabelMatrix, got {type(labels).__name__}")
    if lm.n_classes < 2:
        raise ValueError(
            f"need at least 2 classes, the labels use only {lm.classes.tolist()}; "
            "declare the label set with classes=[...]"
        )
    return lm, dropped


# --------------------------------------------------------------------------------------------
# §2.1 Moments
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LabelMoments:
    """Sparse pairwise statistics of a label matrix (spec §1.4, §2.1).

    All three matrices are symmetric W×W CSR with zero diagonal and *identical* canonical sparsity
    pattern (the nonzeros of N), so their ``data`` arrays are aligned entry by entry.

    Attributes
    ----------
    co_labels : scipy.sparse.csr_matrix
        N_ij = number of tasks labelled by both i and j (float64).
    agreements : scipy.sparse.csr_matrix
        Number of those tasks on which i and j gave the same label (may hold explicit zeros).
    c_hat : scipy.sparse.csr_matrix
        C^_ij = (M a_ij − 1)/(M − 1), a_ij = agreements_ij / N_ij (may hold explicit zeros).
    n_classes : int
        M.
    """

    co_labels: sp.csr_matrix
    agreements: sp.csr_matrix
    c_hat: sp.csr_matrix
    n_classes: int


def _zero_diag_canonical(m: SparseMatrix) -> sp.csr_matrix:
    """Zero the diagonal (O(nnz) mask, no re-sorting as in ``setdiag``) and canonicalise."""
    m = sp.csr_matrix(m, copy=True)
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    m.data[m.indices == rows] = 0
    m.eliminate_zeros()
    m.sum_duplicates()
    m.sort_indices()
    return m


def moments_from_counts(
    co_labels: sp.csr_matrix, agreements: np.ndarray, n_classes: int, min_pair_count: int = 1
) -> LabelMoments:
    """C^ = (M a − 1)/(M − 1), a = Agree/N, on the stored entries of N (spec §2.1).

    Parameters
    ----------
    co_labels : scipy.sparse.csr_matrix
        N (symmetric, zero diagonal, no explicit zeros).
    agreements : numpy.ndarray
        Agreement count of every stored entry of ``co_labels`` (aligned with its ``data``).
    n_classes : int
        M ≥ 2.
    min_pair_count : int
        Pairs with N_ij < min_pair_count are dropped.
    """
    m = int(n_classes)
    if m < 2:
        raise ValueError("label moments need at least 2 classes")
    n = sp.csr_matrix(co_labels)
    nd = n.data.astype(np.float64)
    ag = np.asarray(agreements, dtype=np.float64)
    indices, indptr = n.indices, n.indptr
    if min_pair_count > 1:
        keep = nd >= min_pair_count
        rows = np.repeat(np.arange(n.shape[0]), np.diff(indptr))
        indptr = np.zeros(n.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows[keep], minlength=n.shape[0]), out=indptr[1:])
        nd, ag, indices = nd[keep], ag[keep], indices[keep]
    c = (m * (ag / nd) - 1.0) / (m - 1.0)

    def mk(data: np.ndarray) -> sp.csr_matrix:
        out = sp.csr_matrix((data, indices, indptr), shape=n.shape)
        out.has_sorted_indices = n.has_sorted_indices
        return out

    return LabelMoments(co_labels=mk(nd), agreements=mk(ag), c_hat=mk(c), n_classes=m)


def label_moments(lm: LabelMatrix, co_labels: sp.csr_matrix | None = None, min_pair_count: int = 1) -> LabelMoments:
    """Co-label counts N, agreements and the moment matrix C^ by sparse products (spec §2.1).

    N = B Bᵀ (B the W×T incidence) and agreements = Σ_l B_l B_lᵀ, both with zeroed diagonal, come
    out of *one* integer sparse product (``crowdflow.graphs.pair_counts``: P = Xᵀ Z with
    P_ij = N_ij + K·Agree_ij), so they share one sparsity pattern by construction.
    C^ = (M a − 1)/(M − 1) on the nonzeros of N; for M = 2 this equals the ±1 product moment
    C~_ij = (1/N_ij) Σ_t Y_it Y_jt exactly. Never allocates a dense W×W. The same statistics can be
    accumulated chunk by chunk from a stream (:func:`accumulate_moments`).

    Parameters
    ----------
    lm : LabelMatrix
        De-duplicated labels.
    co_labels : scipy.sparse.csr_matrix, optional
        Accepted for compatibility (e.g. ``WorkerGraphReport.co_labels``) and not needed: the
        agreement product yields N at no extra cost.
    min_pair_count : int
        Pairs with N_ij < min_pair_count are dropped (spec §3.2, §8; default 1 keeps all).

    Returns
    -------
    LabelMoments
    """
    if lm.n_classes < 2:
        raise ValueError("label moments need at least 2 classes")
    indptr, w, c = labels_by_task(lm)
    n, agree = pair_counts(indptr, w, c, lm.n_workers, lm.n_classes)
    return moments_from_counts(n, agree, lm.n_classes, min_pair_count)


def prune_spammer_edges(moments: LabelMoments, delta: float, c: float) -> tuple[LabelMoments, int]:
    """Optional spammer pruning (spec §2.6; off by default).

    Drops pair (i, j) when |C^_ij| < δ + c √(log W / N_ij) ([AMBIG] resolved to the per-pair N_ij).
    Workers whose skill is ≈ 0 then lose their edges and become isolated (weight 0); re-run the
    identifiability check on the result.

    Returns
    -------
    (LabelMoments, int)
        Moments restricted to the kept pairs, and the number of unordered pairs dropped.
    """
    n = moments.co_labels
    w = n.shape[0]
    thresh = delta + c * np.sqrt(np.log(max(w, 2)) / n.data)
    keep = np.abs(moments.c_hat.data) >= thresh
    mask = sp.csr_matrix((keep.astype(np.float64), n.indices.copy(), n.indptr.copy()), shape=n.shape)
    mask.eliminate_zeros()

    def restrict(m: sp.csr_matrix) -> sp.csr_matrix:
        # same canonical pattern as N, so entries align with ``keep``
        out = sp.csr_matrix((m.data[keep], mask.indices.copy(), mask.indptr.copy()), shape=m.shape)
        return out

    pruned = LabelMoments(
        co_labels=restrict(n),
        agreements=restrict(moments.agreements),
        c_hat=restrict(moments.c_hat),
        n_classes=moments.n_classes,
    )
    return pruned, int((~keep).sum() // 2)


def edge_weights(co_labels: sp.csr_matrix, weighting: Weighting = "count") -> sp.csr_matrix:
    """w_ij = B(N_ij) on the nonzeros of N (spec §2.2).

    ``count``: B(N) = N (inverse-variance weight, default); ``binary``: B(N) = 1{N > 0};
    ``square``: B(N) = N².
    """
    n = sp.csr_matrix(co_labels)
    if weighting == "count":
        data = n.data.astype(np.float64)
    elif weighting == "binary":
        data = np.ones_like(n.data, dtype=np.float64)
    elif weighting == "square":
        data = n.data.astype(np.float64) ** 2
    else:
        raise ValueError(f"unknown weighting {weighting!r}; use 'count', 'binary' or 'square'")
    return sp.csr_matrix((data, n.indices.copy(), n.indptr.copy()), shape=n.shape)


# --------------------------------------------------------------------------------------------
# §2.2 Objective and gradient
# --------------------------------------------------------------------------------------------
def rank_one_loss(c_hat: SparseMatrix, weights: SparseMatrix, x: np.ndarray) -> float:
    """L(x) = 1/2 Σ_{i<j} w_ij (C^_ij − x_i x_j)² over the stored (symmetric) entries (spec §2.2).

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
    """∇L(x)_i = −Σ_j w_ij (C^_ij − x_i x_j) x_j = −((w∘C^) x − x ∘ (w (x∘x)))_i (spec §2.3)."""
    w = sp.csr_matrix(weights)
    wc = sp.csr_matrix(w.multiply(c_hat))
    x = np.asarray(x, dtype=np.float64)
    return cast(np.ndarray, -(wc @ x - x * (w @ (x * x))))


# --------------------------------------------------------------------------------------------
# §2.3 / §2.5 Solvers
# --------------------------------------------------------------------------------------------
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


def _top_eigenvalue(a: SparseMatrix, dense_max: int = 2000) -> float:
    """Largest eigenvalue of a symmetric matrix (||A||_2 for a nonnegative one)."""
    n = a.shape[0]
    if n == 0 or sp.csr_matrix(a).nnz == 0:
        return 0.0
    if n <= dense_max:
        return float(scipy.linalg.eigvalsh(sp.csr_matrix(a).toarray(), subset_by_index=[n - 1, n - 1])[0])
    v0 = np.random.default_rng(0).standard_normal(n)
    return float(eigsh(sp.csr_matrix(a), k=1, which="LA", v0=v0, return_eigenvectors=False)[0])


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
    solver: Solver = "gd",
    progress: ProgressFn | None = None,
) -> RankOneFit:
    """Fit x xᵀ to C^ on the observed entries by projected (or exponentiated) gradient descent.

    Spec §2.3 (``gd``): x̃ = x^k + η Σ_j w_ij (C^_ij − x_i^k x_j^k) x_j^k for all i at once
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

    ``eg`` (spec §2.5, positive skills only; requires 0 < lower ≤ upper): with C^ clipped to
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
    solver : {"gd", "scaled", "eg"}
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
        c_on_w = c.data.copy()
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
            norm2 = _top_eigenvalue(w)
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

    # small dense-ish problems: dense mat-vecs (no sparse dispatch overhead; ≤ 8 MB per matrix)
    if solver == "scaled" and nw <= 1000 and w.nnz >= 0.05 * nw * nw:
        wc_op: Any = wc.toarray()
        w_op: Any = w.toarray()
    else:
        wc_op, w_op = wc, w

    def evaluate(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        x2 = x * x
        a = wc_op @ x
        b = w_op @ x2
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
    rows = np.repeat(np.arange(nw), np.diff(w.indptr))
    final = 0.25 * float(np.sum(w.data * (c_on_w - x[rows] * x[w.indices]) ** 2))
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


# --------------------------------------------------------------------------------------------
# §2.3 box, §2.4 signs, §2.7 votes
# --------------------------------------------------------------------------------------------
def skill_box(n_labels: np.ndarray, n_classes: int, tau: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Per-worker box (spec §2.3 and [AMBIG] (a)–(c)).

    hi_i = 1 − τ/√n_i, lo_i = −hi_i (binary) or max(−1/(M−1), −hi_i) (multiclass), n_i = labels of
    worker i. If τ/√n_i ≥ 1 the box is empty and lo_i = hi_i = 0 (status ``too_few_labels``).
    """
    n = np.asarray(n_labels, dtype=np.float64)
    if tau < 0:
        raise ValueError("tau must be >= 0")
    with np.errstate(divide="ignore"):
        hi = 1.0 - tau / np.sqrt(n)
    hi = np.where(np.isfinite(hi), hi, 0.0)
    hi = np.maximum(hi, 0.0)
    lo = -hi
    if n_classes > 2:
        lo = np.maximum(lo, -1.0 / (n_classes - 1))
    return lo, hi


def resolve_signs(
    x: np.ndarray,
    component_labels: np.ndarray,
    mode: SignMode = "sum_rule",
    c_hat: SparseMatrix | None = None,
    active: np.ndarray | None = None,
    confidence: SparseMatrix | None = None,
) -> np.ndarray:
    """Fix the global sign of each connected component (spec §2.4).

    ``sum_rule`` (S1): flip x_K when Σ_{i∈K} x_i < 0. ``bfs`` (S2): x holds |s|; root each
    component at its smallest node with sign +1, give each BFS child the sign
    sign(parent) · sign(C^_parent,child) (a zero C^ counts as +), then apply the sum rule.
    The BFS runs on a spanning tree of maximal ``confidence`` (default |C^|; :func:`fit_skills`
    passes x_i x_j √w_ij), so signs travel along the most reliable pairs — with noise any
    spanning tree can propagate a wrong sign; a random BFS tree does so often (spec §2.4).

    Parameters
    ----------
    x : numpy.ndarray
    component_labels : numpy.ndarray
        Component id per coordinate (e.g. ``Components.labels`` of the fitted graph).
    mode : {"sum_rule", "bfs"}
    c_hat : scipy.sparse matrix, optional
        Needed for ``bfs``; its nonzero pattern defines the BFS graph.
    active : numpy.ndarray of bool, optional
        Coordinates to consider (others are returned unchanged).
    """
    x = np.asarray(x, dtype=np.float64).copy()
    lab = np.asarray(component_labels)
    act = np.ones(x.size, dtype=bool) if active is None else np.asarray(active, dtype=bool)
    if mode == "bfs":
        if c_hat is None:
            raise ValueError("sign mode 'bfs' needs c_hat")
        c = sp.csr_matrix(c_hat)
        cc = c.tocoo()
        if confidence is None:
            vals = np.abs(cc.data)
        else:
            vals = np.abs(np.asarray(sp.csr_matrix(confidence)[cc.row, cc.col]).ravel())
        # maximum-confidence spanning forest: MST on a decreasing transform (cost >= 1 on every edge)
        top = float(vals.max()) if vals.size else 0.0
        cost = sp.csr_matrix((1.0 + top - vals, (cc.row, cc.col)), shape=c.shape)
        tree = minimum_spanning_tree(cost)
        nz: Any = tree  # scipy-stubs leave sparse `!=` as object.__ne__ (bool); at runtime it is elementwise
        pattern = sp.csr_matrix(((nz != 0) + (nz.T != 0)).astype(np.float64))
        ncomp = int(lab.max()) + 1 if lab.size else 0
        roots = np.full(ncomp, x.size, dtype=np.int64)
        idx = np.flatnonzero(act)
        np.minimum.at(roots, lab[idx], idx)
        roots = roots[roots < x.size]
        dist, pred, _ = dijkstra(
            pattern, directed=False, indices=roots, unweighted=True, return_predecessors=True, min_only=True
        )
        sign = np.ones(x.size)
        reach = np.isfinite(dist) & act
        depth = np.where(reach, dist, -1).astype(np.int64)
        for d in range(1, int(depth.max()) + 1 if depth.size else 1):
            nodes = np.flatnonzero(depth == d)
            parents = pred[nodes]
            cs = np.asarray(c[parents, nodes]).ravel()
            sign[nodes] = sign[parents] * np.where(cs < 0, -1.0, 1.0)
        x = np.where(act, np.abs(x) * sign, x)
    elif mode != "sum_rule":
        raise ValueError(f"unknown sign mode {mode!r}; use 'sum_rule' or 'bfs'")
    idx = np.flatnonzero(act)
    if idx.size:
        ncomp = int(lab[idx].max()) + 1
        sums = np.bincount(lab[idx], weights=x[idx], minlength=ncomp)
        flip = sums[lab[idx]] < 0
        x[idx[flip]] = -x[idx[flip]]
    return x


def vote_weights(
    skills: np.ndarray,
    n_classes: int,
    lower: np.ndarray | None = None,
    upper: np.ndarray | None = None,
) -> np.ndarray:
    """Log-odds MAP weights v_i = log((1 + (M−1) s_i)/(1 − s_i)) (spec §2.7).

    Binary: log((1+s)/(1−s)). s is clipped to [lo + 1e-9, hi − 1e-9] (default box
    [−1/(M−1), 1]); NaN skills (unidentified workers) get weight 0.
    """
    s = np.asarray(skills, dtype=np.float64)
    m = n_classes
    lo = np.full(s.shape, -1.0 / (m - 1)) if lower is None else np.asarray(lower, dtype=np.float64)
    hi = np.ones(s.shape) if upper is None else np.asarray(upper, dtype=np.float64)
    lo = np.maximum(lo, -1.0 / (m - 1))
    hi = np.minimum(hi, 1.0)
    sc = np.clip(s, lo + _LOG_ODDS_MARGIN, hi - _LOG_ODDS_MARGIN)
    sc = np.where(hi - lo <= 2 * _LOG_ODDS_MARGIN, 0.0, sc)  # empty box → s = 0 → weight 0
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.log1p((m - 1) * sc) - np.log1p(-sc)
    return np.where(np.isfinite(s), v, 0.0)


@dataclass(frozen=True)
class ConsensusOutput:
    """MAP consensus (spec §2.7).

    Attributes
    ----------
    consensus : pandas.DataFrame
        task, label, confidence, n_labels, fallback.
    scores : numpy.ndarray
        T×M scores Σ_i v_i 1{Y_it = l} (binary score of the spec = column 1 − column 0).
    posterior : numpy.ndarray
        T×M softmax of the scores.
    n_ties : int
        Tasks decided by the weighted vote whose top score was shared.
    n_fallback : int
        Tasks with no identified labeller.
    """

    consensus: pd.DataFrame
    scores: np.ndarray
    posterior: np.ndarray
    n_ties: int
    n_fallback: int


def weighted_consensus(
    lm: LabelMatrix,
    weights: np.ndarray,
    identified: np.ndarray | None = None,
    fallback: Fallback = "mv",
    tie_break: TieBreak = "random",
    seed: int = 0,
) -> ConsensusOutput:
    """Plug-in MAP label per task with posterior confidence (spec §2.7, §3.3).

    score_t(l) = Σ_{i labels t} v_i 1{Y_it = l}; label = argmax_l (ties by
    ``majority.weighted_vote``); posterior = softmax_l score_t(l) (binary: 1/(1 + e^{−score})),
    confidence = posterior of the chosen label. A task none of whose labellers is identified is a
    fallback task (``fallback = True``): with ``fallback="mv"`` it gets the plain majority vote and
    confidence = winning vote share; with ``"zero"`` all its weights are 0, so its label is the
    tie-break among the classes and its confidence 1/M. Identified labellers always keep their
    log-odds weights.

    Parameters
    ----------
    lm : LabelMatrix
    weights : numpy.ndarray
        v_i per worker (0 for unidentified workers).
    identified : numpy.ndarray of bool, optional
        Workers whose skill was estimated (default: all).
    fallback : {"mv", "zero"}
    tie_break : {"random", "smallest"}
    seed : int
    """
    if fallback not in ("mv", "zero"):
        raise ValueError(f"unknown fallback {fallback!r}; use 'zero' or 'mv'")
    v = np.asarray(weights, dtype=np.float64)
    ident = np.ones(lm.n_workers, dtype=bool) if identified is None else np.asarray(identified, dtype=bool)
    v = np.where(ident, v, 0.0)
    winner, scores, _ = weighted_vote(lm, v, tie_break, seed)
    post, _ = softmax_rows(scores)
    top = row_max(scores)[:, None]
    n_ident = np.bincount(lm.task_idx, weights=ident[lm.worker_idx].astype(np.float64), minlength=lm.n_tasks)
    is_fb = n_ident == 0
    is_top = np.isclose(scores, top, rtol=1e-12, atol=1e-12)
    n_ties = int(((row_sum(is_top) > 1) & ~is_fb).sum())
    tasks_range = np.arange(lm.n_tasks)
    confidence = post[tasks_range, winner]
    n_labels = lm.labels_per_task()
    if fallback == "mv" and is_fb.any():
        mv_winner, mv_scores, _ = weighted_vote(lm, None, tie_break, seed)
        winner = np.where(is_fb, mv_winner, winner)
        share = mv_scores[tasks_range, mv_winner] / np.maximum(n_labels, 1)
        confidence = np.where(is_fb, share, confidence)
    table = pd.DataFrame(
        {
            "task": lm.tasks,
            "label": lm.classes[winner],
            "confidence": confidence.astype(np.float64),
            "n_labels": n_labels.astype(np.int64),
            "fallback": is_fb,
        }
    )
    return ConsensusOutput(consensus=table, scores=scores, posterior=post, n_ties=n_ties, n_fallback=int(is_fb.sum()))


def prediction_error(consensus: pd.DataFrame, truth: pd.DataFrame) -> float:
    """PE = (1/T) Σ_t 1{ĝ_t ≠ g_t} over tasks that have both a prediction and a gold label (spec §5).

    Parameters
    ----------
    consensus : pandas.DataFrame
        Columns task, label.
    truth : pandas.DataFrame
        Columns task, label (compared as strings).
    """
    m = gold_metrics(consensus, truth.drop_duplicates("task"))
    if m.n_gold == 0:
        raise ValueError("no task has both a prediction and a gold label")
    return m.error


# --------------------------------------------------------------------------------------------
# §3 Identifiability diagnostics
# --------------------------------------------------------------------------------------------
def signless_laplacian(adj: SparseMatrix) -> sp.csr_matrix:
    """L_s = Deg(w) + Adj(w) (spec §3.4); xᵀ L_s x = Σ_{i<j} w_ij (x_i + x_j)²."""
    a = _zero_diag_canonical(adj).astype(np.float64)
    deg = np.asarray(a.sum(axis=1)).ravel()
    return sp.csr_matrix(sp.diags(deg) + a)


def signless_lambda_min(adj: SparseMatrix, dense_max: int = 2000) -> tuple[float, str]:
    """Smallest eigenvalue of the signless Laplacian of ``adj`` (spec §3.4).

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


@dataclass(frozen=True)
class GraphStructure:
    """Components, bipartiteness and a BFS forest of an undirected graph (spec §3.2).

    Attributes
    ----------
    graph : Components
        As ``crowdflow.graphs.components`` (same component ids: numbered by smallest member; same
        bipartite flags); ``colour`` = BFS depth mod 2, a proper 2-colouring of bipartite components.
    depth : numpy.ndarray
        BFS level of each node from its component's root (the smallest node of the component).
    pred : numpy.ndarray
        BFS parent of each node (−1 for roots).
    odd_edge : numpy.ndarray
        (n_components, 2): per non-bipartite component the lexicographically smallest edge (u, v),
        u < v, joining two nodes of the same level (−1 for bipartite components).
    """

    graph: Components
    depth: np.ndarray
    pred: np.ndarray
    odd_edge: np.ndarray


def graph_structure(adj: SparseMatrix, symmetric: bool = False) -> GraphStructure:
    """Components, bipartiteness and odd-cycle edges from one BFS per component (spec §3.2).

    Steps (all O(n + |E|), no Python loop over nodes or edges): connected components
    (``scipy.sparse.csgraph``, strong connectivity of the symmetric digraph = undirected
    components, no transpose needed); one ``breadth_first_order`` from a virtual super-root joined
    to the smallest node of every component; BFS levels recovered level by level from the
    predecessor positions (which are non-decreasing along a BFS order); a component is
    non-bipartite iff some edge joins two nodes of the same level (BFS layers alternate colours, so
    such an edge closes an odd cycle, and conversely a 2-colouring by level parity is proper when
    no such edge exists).

    Parameters
    ----------
    adj : scipy.sparse matrix
        n×n; any nonzero off-diagonal entry is an edge.
    symmetric : bool
        Set when ``adj`` is already a symmetric CSR with zero diagonal and sorted indices (e.g. N
        from :func:`label_moments`), to skip the symmetrisation.
    """
    if symmetric:
        a = sp.csr_matrix(adj)
    else:
        a = _zero_diag_canonical(adj)
        nz: Any = a  # scipy-stubs leave sparse `!=` as object.__ne__ (bool); at runtime it is elementwise
        a = sp.csr_matrix(((nz != 0) + (nz.T != 0)).astype(np.float64))
        a.sort_indices()
    n = a.shape[0]
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        g = Components(
            labels=empty, n_components=0, bipartite=np.zeros(0, bool), colour=empty.astype(np.int8), sizes=empty
        )
        return GraphStructure(graph=g, depth=empty, pred=empty, odd_edge=np.zeros((0, 2), dtype=np.int64))
    pattern = sp.csr_matrix((np.ones(a.nnz), a.indices, a.indptr), shape=a.shape)
    n_comp, raw = connected_components(pattern, directed=True, connection="strong")
    _, first = np.unique(raw, return_index=True)  # smallest node of each raw component
    rank = np.argsort(first, kind="stable")
    remap = np.empty(n_comp, dtype=np.int64)
    remap[rank] = np.arange(n_comp)
    comp = remap[raw]
    roots = first[rank]  # roots[c] = smallest node of component c
    sizes = np.bincount(comp, minlength=n_comp)
    # BFS from a super-root (node n) whose children are the component roots
    indptr = np.concatenate([pattern.indptr, [pattern.indptr[-1] + n_comp]])
    indices = np.concatenate([pattern.indices, roots]).astype(pattern.indices.dtype, copy=False)
    sup = sp.csr_matrix((np.ones(indices.size), indices, indptr), shape=(n + 1, n + 1))
    order, pred_all = breadth_first_order(sup, n, directed=True, return_predecessors=True)
    pos = np.empty(n + 1, dtype=np.int64)
    pos[order] = np.arange(n + 1)
    parent_pos = pos[pred_all[order[1:]]]  # non-decreasing
    level_of_pos = np.empty(n + 1, dtype=np.int64)
    level_of_pos[0] = 0
    end, level = 1, 0  # level `level` occupies positions [previous end, end)
    while end < n + 1:
        nxt = 1 + int(np.searchsorted(parent_pos, end, side="left"))
        level += 1
        level_of_pos[end:nxt] = level
        end = nxt
    depth = level_of_pos[pos[:n]] - 1
    pred = pred_all[:n].astype(np.int64)
    pred[pred == n] = -1
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(pattern.indptr))
    cols = pattern.indices.astype(np.int64)
    same = (depth[rows] == depth[cols]) & (rows < cols)
    su, sv = rows[same], cols[same]
    odd = np.zeros(n_comp, dtype=bool)
    odd[comp[su]] = True
    odd_edge = np.full((n_comp, 2), -1, dtype=np.int64)
    if su.size:  # CSR order = (u, v) lexicographic: the first hit per component is the smallest
        cs, first_hit = np.unique(comp[su], return_index=True)
        odd_edge[cs, 0] = su[first_hit]
        odd_edge[cs, 1] = sv[first_hit]
    g = Components(
        labels=comp, n_components=int(n_comp), bipartite=~odd, colour=(depth % 2).astype(np.int8), sizes=sizes
    )
    return GraphStructure(graph=g, depth=depth, pred=pred, odd_edge=odd_edge)


def _witness_cycles(structure: GraphStructure) -> dict[int, np.ndarray]:
    odd = np.flatnonzero(structure.odd_edge[:, 0] >= 0)
    if odd.size == 0:
        return {}
    pred = structure.pred
    cu = structure.odd_edge[odd, 0].copy()
    cv = structure.odd_edge[odd, 1].copy()
    us, vs = [cu.copy()], [cv.copy()]
    while np.any(cu != cv):  # climb both branches (same depth) to the lowest common ancestor
        m = cu != cv
        cu[m] = pred[cu[m]]
        cv[m] = pred[cv[m]]
        us.append(cu.copy())
        vs.append(cv.copy())
    us_a, vs_a = np.vstack(us), np.vstack(vs)
    ks = np.argmax(us_a == vs_a, axis=0)
    out: dict[int, np.ndarray] = {}
    for j, c in enumerate(odd):
        k = int(ks[j])
        out[int(c)] = np.concatenate([us_a[: k + 1, j], vs_a[:k, j][::-1]]).astype(np.int64)
    return out


def odd_cycle_witnesses(adj: SparseMatrix, graph: Components | None = None) -> dict[int, np.ndarray]:
    """One odd cycle per non-bipartite component (spec §3.2 step 2).

    A BFS from the smallest node of each component assigns levels; a non-bipartite component
    has an edge (u, v) joining two nodes of the same level. The witness is u → … → lca → … → v
    along the BFS tree (both branches have the same length k), closed by the edge (v, u): an odd
    cycle of 2k + 1 distinct nodes. All components are processed together (vectorised ascent);
    see :func:`graph_structure`.

    Parameters
    ----------
    adj : scipy.sparse matrix
        Symmetric adjacency (nonzero = edge).
    graph : Components, optional
        Accepted for compatibility; component ids are those of :func:`graph_structure` (the same
        numbering as ``crowdflow.graphs.components``).

    Returns
    -------
    dict
        component id → node ids of the cycle in order (consecutive nodes adjacent, last adjacent
        to first).
    """
    return _witness_cycles(graph_structure(adj))


def theorem12_error_bound(co_labels: SparseMatrix, kappa: float, big_k: float, max_delta: float) -> float:
    """Theorem 12 limit-error bound ||x* − s||_2 ≤ K √W ||N||_∞ / μ · max|Δ| (spec §3.4).

    μ = κ² λ_min(L_s^unit) N_min with L_s^unit the unit-weight signless Laplacian of the pattern
    of N, N_min the smallest positive N_ij and ||N||_∞ the largest row sum. Infinite when
    μ = 0 (bipartite graph).
    """
    n = _zero_diag_canonical(co_labels).astype(np.float64)
    if n.nnz == 0:
        return float("inf")
    unit = sp.csr_matrix((np.ones(n.nnz), n.indices, n.indptr), shape=n.shape)
    lam, _ = signless_lambda_min(unit)
    mu = kappa**2 * lam * float(n.data.min())
    if mu <= 0:
        return float("inf")
    norm_inf = float(np.asarray(n.sum(axis=1)).max())
    return float(big_k * math.sqrt(n.shape[0]) * norm_inf / mu * max_delta)


def _group_stats(groups: np.ndarray, values: np.ndarray, n_groups: int) -> tuple[np.ndarray, ...]:
    """Per-group min, median and max of ``values`` (NaN for empty groups), by one sort."""
    out_min = np.full(n_groups, np.nan)
    out_med = np.full(n_groups, np.nan)
    out_max = np.full(n_groups, np.nan)
    if values.size == 0:
        return out_min, out_med, out_max
    order = np.lexsort((values, groups))
    g, v = groups[order], values[order]
    cnt = np.bincount(g, minlength=n_groups)
    start = np.concatenate([[0], np.cumsum(cnt)[:-1]])
    has = cnt > 0
    s, c = start[has], cnt[has]
    out_min[has] = v[s]
    out_max[has] = v[s + c - 1]
    out_med[has] = 0.5 * (v[s + (c - 1) // 2] + v[s + c // 2])
    return out_min, out_med, out_max


def _group_quantile(groups: np.ndarray, values: np.ndarray, n_groups: int, q: float) -> np.ndarray:
    """Per-group quantile with linear interpolation (numpy's default), NaN for empty groups."""
    out = np.full(n_groups, np.nan)
    if values.size == 0:
        return out
    order = np.lexsort((values, groups))
    g, v = groups[order], values[order]
    cnt = np.bincount(g, minlength=n_groups)
    start = np.concatenate([[0], np.cumsum(cnt)[:-1]])
    has = cnt > 0
    s, c = start[has], cnt[has]
    h = (c - 1) * q
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, c - 1)
    out[has] = v[s + lo] + (h - lo) * (v[s + hi] - v[s + lo])
    return out


def component_diagnostics(
    lm: LabelMatrix,
    co_labels: sp.csr_matrix,
    weights: sp.csr_matrix,
    graph: Components,
    skills: np.ndarray | None = None,
    worker_status: np.ndarray | None = None,
    *,
    spectral: bool = True,
    dense_max: int = 500,
    witness: bool = True,
    delta: float = 0.05,
    spectral_max_nnz: int | None = 2_000_000,
    witnesses: dict[int, np.ndarray] | None = None,
) -> pd.DataFrame:
    """Per-component diagnostics table of spec §3.4.

    Columns: component, status, n_workers, n_ok_workers, n_edges, n_tasks, n_labels, bipartite,
    odd_cycle_witness_len, d_max, D_sum, N_min, N_median, N_max, norm_N_inf, norm_N_2,
    lambda_min_signless_unit, lambda_min_signless_weighted, eig_method, kappa, K, mu_hat, lip_hat,
    cond_hat, error_bound_hat.

    κ, K = 5th/95th percentile of |ŝ| over the component's fitted workers; μ̂ = κ² λ_min^unit
    N_min; lip̂ = 2 √W_K ||N||_2 K²; cond̂ = lip̂/μ̂; error_bound_hat = K √W_K ||N||_∞ / μ̂ ·
    log(D/δ)/√N_min with D = D_sum (the number of observed entries; the paper leaves D
    unspecified, [AMBIG]) and δ = 0.05.

    Cost. Everything except the eigenvalues is O(|labels| + |E|) and vectorised. Eigenvalues
    (``spectral=True``), per component: bipartite components get λ_min = 0 exactly (no solve;
    x = ±1 on the two colour classes is a null vector of L_s); otherwise dense LAPACK ``eigvalsh``
    for components of at most ``dense_max`` workers, else ``eigsh`` on cI − L_s (column
    ``eig_method``). A component with more than ``spectral_max_nnz`` stored entries of N is
    skipped (NaN, ``eig_method = "skipped"``): Lanczos needs some hundred mat-vecs there (≈ 0.5 s
    per eigenvalue at 3.6·10^6 entries); pass ``spectral_max_nnz=None`` to compute them anyway.

    Parameters
    ----------
    witnesses : dict, optional
        Precomputed odd-cycle witnesses (component → cycle), e.g. from :func:`graph_structure`.
    """
    n_mat = sp.csr_matrix(co_labels, dtype=np.float64)
    w_mat = sp.csr_matrix(weights, dtype=np.float64)
    g_lab = graph.labels
    nc = graph.n_components
    deg = np.diff(n_mat.indptr)
    rowsum = np.asarray(n_mat.sum(axis=1)).ravel()
    n_edges = np.bincount(g_lab, weights=deg, minlength=nc) / 2
    lab_comp = g_lab[lm.worker_idx]
    n_lab = np.bincount(lab_comp, minlength=nc)
    # tasks touching each component: the largest component by a bincount over tasks, the rest
    # (usually few labels) by a unique over (task, component) pairs
    n_tasks = np.zeros(nc, dtype=np.int64)
    if nc:
        big = int(np.argmax(n_lab))
        in_big = lab_comp == big
        n_tasks[big] = int(np.count_nonzero(np.bincount(lm.task_idx[in_big], minlength=lm.n_tasks)))
        if not in_big.all():
            pairs = np.unique(lm.task_idx[~in_big] * nc + lab_comp[~in_big])
            n_tasks += np.bincount(pairs % nc, minlength=nc)
    d_max = np.zeros(nc, dtype=np.int64)
    np.maximum.at(d_max, g_lab, deg)
    norm_inf = np.zeros(nc)
    np.maximum.at(norm_inf, g_lab, rowsum)
    rows = np.repeat(np.arange(n_mat.shape[0]), deg)
    upper = rows < n_mat.indices
    n_min, n_med, n_max = _group_stats(g_lab[rows[upper]], n_mat.data[upper], nc)
    del rows, upper

    comp_status = np.where(graph.bipartite, "bipartite_component", "ok").astype(object)
    comp_status[graph.sizes == 1] = "isolated"
    if worker_status is None:
        n_ok = np.where(comp_status == "ok", graph.sizes, 0)
    else:
        n_ok = np.bincount(g_lab, weights=(np.asarray(worker_status) == "ok"), minlength=nc)

    wit_len = np.zeros(nc, dtype=np.int64)
    if witness:
        cycles = witnesses if witnesses is not None else odd_cycle_witnesses(n_mat)
        for c, cyc in cycles.items():
            wit_len[c] = cyc.size

    lam_u = np.zeros(nc)
    lam_w = np.zeros(nc)
    norm2 = np.zeros(nc)
    method = np.array(["none"] * nc, dtype=object)
    if spectral:
        nnz_comp = np.bincount(g_lab, weights=deg, minlength=nc)
        todo = np.flatnonzero((graph.sizes >= 2) & ~graph.bipartite)
        method[graph.sizes >= 2] = "exact"  # bipartite: λ_min = 0 exactly
        if spectral_max_nnz is not None:
            skip = todo[nnz_comp[todo] > spectral_max_nnz]
            method[skip] = "skipped"
            lam_u[skip] = lam_w[skip] = norm2[skip] = np.nan
            todo = todo[nnz_comp[todo] <= spectral_max_nnz]
        bip2 = np.flatnonzero((graph.sizes >= 2) & graph.bipartite)
        if todo.size or bip2.size:
            order = np.argsort(g_lab, kind="stable")
            starts = np.concatenate([[0], np.cumsum(graph.sizes)])
            whole = nc == 1
            pn = n_mat if whole else n_mat[order][:, order]
            pw = w_mat if whole else w_mat[order][:, order]
            for c in bip2:  # type: ignore[assignment]  # numpy ints, indices like c above; ||N||_2 still needs a solve; λ_min = 0
                s, e = starts[c], starts[c + 1]
                norm2[c] = _top_eigenvalue(pn[s:e, s:e], dense_max)
            for c in todo:  # type: ignore[assignment]  # numpy ints, indices like c above
                s, e = starts[c], starts[c + 1]
                sub_n = pn if whole else pn[s:e, s:e]
                sub_w = pw if whole else pw[s:e, s:e]
                unit = sp.csr_matrix((np.ones(sub_n.nnz), sub_n.indices, sub_n.indptr), shape=sub_n.shape)
                lam_u[c], method[c] = signless_lambda_min(unit, dense_max)
                lam_w[c], _ = signless_lambda_min(sub_w, dense_max)
                norm2[c] = _top_eigenvalue(sub_n, dense_max)
    else:
        lam_u[:] = np.nan
        lam_w[:] = np.nan
        norm2[:] = np.nan

    kappa = np.full(nc, np.nan)
    big_k = np.full(nc, np.nan)
    if skills is not None:
        s_abs = np.abs(np.asarray(skills, dtype=np.float64))
        fin = np.isfinite(s_abs)
        if fin.any():
            kappa = _group_quantile(g_lab[fin], s_abs[fin], nc, 0.05)
            big_k = _group_quantile(g_lab[fin], s_abs[fin], nc, 0.95)
    sizes = graph.sizes.astype(np.float64)
    d_sum = 2 * n_edges
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = kappa**2 * lam_u * n_min
        lip = 2 * np.sqrt(sizes) * norm2 * big_k**2
        cond = lip / mu
        dev = np.log(d_sum / delta) / np.sqrt(n_min)
        bound = big_k * np.sqrt(sizes) * norm_inf / mu * dev
    bad = ~(mu > 0)
    cond[bad] = np.nan
    bound[bad] = np.nan
    return pd.DataFrame(
        {
            "component": np.arange(nc, dtype=np.int64),
            "status": comp_status.astype(str),
            "n_workers": graph.sizes.astype(np.int64),
            "n_ok_workers": np.asarray(n_ok).astype(np.int64),
            "n_edges": n_edges.astype(np.int64),
            "n_tasks": n_tasks.astype(np.int64),
            "n_labels": n_lab.astype(np.int64),
            "bipartite": graph.bipartite.astype(bool),
            "odd_cycle_witness_len": wit_len,
            "d_max": d_max,
            "D_sum": d_sum.astype(np.int64),
            "N_min": n_min,
            "N_median": n_med,
            "N_max": n_max,
            "norm_N_inf": norm_inf,
            "norm_N_2": norm2,
            "lambda_min_signless_unit": lam_u,
            "lambda_min_signless_weighted": lam_w,
            "eig_method": method.astype(str),
            "kappa": kappa,
            "K": big_k,
            "mu_hat": mu,
            "lip_hat": lip,
            "cond_hat": cond,
            "error_bound_hat": bound,
        }
    )


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SkillsResult:
    """Worker skills, consensus labels and diagnostics of one aggregation run.

    Attributes
    ----------
    skills : pandas.DataFrame
        One row per worker (sorted id order): worker, skill, accuracy, vote_weight, n_labels,
        n_partners, component, status, identifiable, strength, lower, upper, fit_component.
        ``skill`` = ŝ_i (NaN unless status ``ok`` for pgd; NaN for mv), ``accuracy`` =
        ((M−1) ŝ + 1)/M (mv: agreement rate with the MV label), ``vote_weight`` = v_i used in the
        vote, ``component`` = component of the interaction graph (as in
        ``crowdflow.graphs.worker_graph_report``), ``status`` ∈ ok | isolated |
        bipartite_component | too_few_labels, ``strength`` = Σ_j N_ij, ``lower/upper`` = PGD box,
        ``fit_component`` = component of the fitted (active) subgraph, −1 if not fitted.
    consensus : pandas.DataFrame
        task, label, confidence, n_labels, fallback.
    diagnostics : pandas.DataFrame
        Per-component table (:func:`component_diagnostics`).
    metadata : dict
        fit_status (``converged`` | ``not_converged`` (max_iter hit) | ``no_identifiable_worker`` (nothing
        to fit: every task falls back) | ``closed_form`` (mv)), undefined numbers are NaN (``eta`` of
        mv/DS, ``final_loss`` of mv),
        method, solver, iterations, converged, final_loss, eta, tau, weighting, x0, tol, max_iter,
        sign_mode, fallback, identifiability_policy, n_classes, classes, n_workers, n_tasks,
        n_labels, n_duplicates_dropped, n_ties, n_fallback_tasks, frac_workers_identified,
        frac_labels_identified, frac_tasks_identified.
    loss_trace : numpy.ndarray
        PGD: L(x^k) per iteration; DS: negative log-likelihood per EM iteration; mv: empty.
    timings : dict
        Wall-clock seconds per step of :func:`fit_skills` (encode, moments, graph, fit, consensus,
        diagnostics); not part of the (deterministic) outputs.
    """

    skills: pd.DataFrame
    consensus: pd.DataFrame
    diagnostics: pd.DataFrame
    metadata: dict[str, Any]
    loss_trace: np.ndarray = field(default_factory=lambda: np.empty(0))
    timings: dict[str, float] = field(default_factory=dict)

    def metadata_frame(self) -> pd.DataFrame:
        """The metadata as a one-row DataFrame (lists are joined with ``,``)."""
        row = {k: (",".join(map(str, v)) if isinstance(v, list | tuple) else v) for k, v in self.metadata.items()}
        return pd.DataFrame([row])


def _fit_status(converged: bool) -> str:
    return "converged" if converged else "not_converged"


def _failure_message(
    lm: LabelMatrix,
    labels_c: np.ndarray,
    comp_ids: np.ndarray,
    reasons: dict[int, str],
    colour: np.ndarray | None,
    where: str,
    max_listed: int = 20,
) -> list[str]:
    lines = []
    per_worker_labels = lm.labels_per_worker()
    for c in comp_ids:
        members = np.flatnonzero(labels_c == c)
        ids = lm.workers[members[:max_listed]].astype(str).tolist()
        more = f" (+{members.size - max_listed} more)" if members.size > max_listed else ""
        reason = reasons[int(c)]
        if reason == "bipartite_component" and colour is not None:
            c1 = int(colour[members].sum())
            reason += f", colour classes {members.size - c1}/{c1}"
        on = np.isin(lm.worker_idx, members)
        n_tasks = np.unique(lm.task_idx[on]).size
        lines.append(
            f"{where} component {int(c)}: {reason}, {members.size} workers, "
            f"{int(per_worker_labels[members].sum())} labels on {n_tasks} tasks: [{','.join(ids)}]{more}"
        )
    return lines


def _active_workers(
    graph: Components, base: np.ndarray, w_all: sp.csr_matrix, n_i: np.ndarray, m: int, tau: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Components, list[tuple[Components, np.ndarray]]]:
    """Statuses and the active set of spec §2.8 (too_few_labels dropped until the graph is stable)."""
    status = base[graph.labels].copy()
    lo, hi = skill_box(n_i, m, tau)
    too_few = hi <= 0.0
    status[(status == "ok") & too_few] = "too_few_labels"
    active = status == "ok"
    # §2.8: drop inactive workers, recompute components and bipartiteness until stable. Without
    # too_few_labels drops the active graph is the union of the ok components: already stable.
    ag = graph
    drops: list[tuple[Components, np.ndarray]] = []  # (graph of the pass, workers lost in it)
    if np.any((base[graph.labels] == "ok") & too_few):
        while True:
            keep = sp.diags(active.astype(np.float64))
            sub = sp.csr_matrix(keep @ w_all @ keep)
            sub.eliminate_zeros()
            ag = components(sub)
            still = active & ~ag.bipartite[ag.labels]
            if np.array_equal(still, active):
                break
            lost = active & ~still
            drops.append((ag, lost))
            status[lost & (ag.sizes[ag.labels] == 1)] = "isolated"
            status[lost & (ag.sizes[ag.labels] > 1)] = "bipartite_component"
            active = still
    return status, active, lo, hi, ag, drops


def _fit_active(
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
    """PGD on the active subgraph, signs per component, skills clipped into the box (spec §2.3–2.4)."""
    n_workers = active.size
    idx = np.flatnonzero(active)
    skills = np.full(n_workers, np.nan)
    fit_comp = np.full(n_workers, -1, dtype=np.int64)
    if not idx.size:
        return skills, fit_comp, None
    if idx.size == n_workers:
        w_sub, c_sub = w_all, c_hat
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


def fit_skills(
    labels: pd.DataFrame | LabelMatrix,
    method: Method = "pgd",
    *,
    classes: list[str] | None = None,
    duplicates: DuplicatePolicy = "error",
    weighting: Weighting = "count",
    tau: float = 1.0,
    x0: float = 0.5,
    eta: float | None = None,
    tol: float = 1e-7,
    max_iter: int = 5000,
    solver: Solver = "gd",
    sign_mode: SignMode = "sum_rule",
    identifiability_policy: Policy = "flag",
    fallback: Fallback = "mv",
    tie_break: TieBreak = "random",
    seed: int = 0,
    min_pair_count: int = 1,
    prune_spammers: tuple[float, float] | None = None,
    spectral: bool = False,
    dense_eig_max: int = 500,
    witness: bool = True,
    spectral_max_nnz: int | None = 2_000_000,
    ds_tol: float = 1e-6,
    ds_max_iter: int = 100,
    ds_smoothing: float = 0.01,
    graph_report: WorkerGraphReport | None = None,
    moments: LabelMoments | None = None,
    progress: ProgressFn | None = None,
) -> SkillsResult:
    """Estimate worker skills and consensus labels (spec skills-rank-one.md §2.8, §3, §7).

    ``method="pgd"`` (spec §2.8):
      1. dense ids, de-duplication, N and C^ by sparse products (:func:`label_moments`);
      2. components of the interaction graph (``crowdflow.graphs``); status per worker:
         ``isolated`` / ``bipartite_component`` from the graph, else ``too_few_labels`` if
         n_i ≤ τ² (empty box), else ``ok`` if the worker stays in a non-bipartite component of the
         active graph (workers with n_i ≤ τ² removed; recomputed until stable);
      3. PGD (:func:`fit_rank_one`) on the active subgraph with w = B(N), box
         ±(1 − τ/√n_i) (multiclass lower bound max(−1/(M−1), ·)), x^0, η = 1/(4 max_i r_i);
      4. signs per fitted component (:func:`resolve_signs`; S1 default; S2 = ``sign_mode="bfs"``
         fits |C^| on the box [1e-3, hi_i] and propagates signs by BFS);
      5. MAP weighted vote (:func:`weighted_consensus`), unidentified workers weight 0;
      6. diagnostics per component (:func:`component_diagnostics`).
    Steps 1–2 run once for every method: labels encoded by hash (``encode_canonical``), N and the
    agreements from one integer sparse product, components/bipartiteness/odd-cycle witnesses from
    one BFS (:func:`graph_structure`). Wall time per step is in ``SkillsResult.timings``. For data
    that does not fit in memory see :func:`accumulate_moments` (streaming, two passes).
    ``identifiability_policy="raise"`` raises ``ValueError`` listing every failing component
    (id, reason, size, labels, tasks, worker ids) when any worker is isolated or in a bipartite
    component; ``"flag"`` fits the ok workers and marks the rest (skill NaN, weight 0).

    ``method="onecoin_ds" | "ds"``: Dawid–Skene EM baselines (``crowdflow.skills.dawid_skene``,
    spec §7); skills table from the EM accuracies (status informational, from the graph).
    ``method="mv"``: majority vote (``crowdflow.skills.majority``); skill NaN, accuracy =
    agreement rate of the worker with the MV labels, vote_weight 1.

    Parameters
    ----------
    labels : pandas.DataFrame or LabelMatrix
        Columns ``task, worker, label``.
    method : {"pgd", "onecoin_ds", "ds", "mv"}
    classes : list of str, optional
        Declared label set (M); wins over observed labels.
    duplicates : {"error", "keep_last", "keep_first"}
    weighting : {"count", "binary", "square"}
        B(N) of spec §2.2.
    tau : float
        Box shrinkage τ (0 = box [−1, 1] / [−1/(M−1), 1]).
    x0 : float
        Positive constant start.
    eta : float, optional
        PGD step; default 1/(4 max_i r_i).
    tol, max_iter : float, int
        Stop when max|Δx| < tol or after max_iter updates (warning when not converged).
    solver : {"gd", "scaled", "eg"}
        ``gd`` = spec PGD (default); ``scaled`` = per-worker Newton-scaled steps with a monotone
        safeguard, same objective and fixed points (:func:`fit_rank_one`; the pipeline default);
        ``eg`` = exponentiated gradient (only with ``sign_mode="bfs"``).
    sign_mode : {"sum_rule", "bfs"}
    identifiability_policy : {"flag", "raise"}
    fallback : {"mv", "zero"}
        Rule for tasks without any identified labeller (spec §3.3; ``mv`` default).
    tie_break : {"random", "smallest"}
    seed : int
    min_pair_count : int
        Drop pairs with N_ij below this before everything else.
    prune_spammers : (delta, c), optional
        Spec §2.6 pruning (:func:`prune_spammer_edges`), off by default; the identifiability
        check runs on the pruned graph.
    spectral : bool
        Signless-Laplacian eigenvalues, ||N||_2 and the Theorem-12 quantities in the diagnostics.
        Off by default in the library (they cost more than the fit itself on small data: three
        dense eigensolves per component, ~1 ms each at 160 workers; Lanczos at scale); the
        pipeline's ``SkillsOptions.spectral`` turns them on. Everything else in the diagnostics
        (components, bipartiteness, odd-cycle witness, degree and N statistics) is always computed.
    dense_eig_max : int
        Components up to this many workers use dense ``eigvalsh``, larger ones ``eigsh``.
    witness : bool
        Odd-cycle witness lengths (from the BFS of the identifiability check: no extra cost).
    spectral_max_nnz : int or None
        Components with more stored entries of N skip the eigenvalues (``eig_method="skipped"``);
        None = no limit.
    ds_tol, ds_max_iter, ds_smoothing
        EM settings of the DS baselines.
    graph_report : WorkerGraphReport, optional
        The interaction-graph report of these labels when the caller already has it (the pipeline's
        graph check), so N = B Bᵀ and the components are not computed twice.
    moments : LabelMoments, optional
        N, agreements and C^ of these labels computed elsewhere (e.g. summed over partitions by
        :func:`partition_pair_counts` / :func:`moments_from_partitions`), with workers in the order of
        the encoded labels and ``min_pair_count`` already applied; skips :func:`label_moments`.
    progress : callable, optional
        ``progress(fraction)`` with a fraction in [0, 1], called during the PGD iterations (see
        :func:`fit_rank_one`) and with 1.0 at the end.

    Returns
    -------
    SkillsResult
    """
    if method not in ("pgd", "onecoin_ds", "ds", "mv"):
        raise ValueError(f"unknown method {method!r}; use 'pgd', 'onecoin_ds', 'ds' or 'mv'")
    if identifiability_policy not in ("raise", "flag"):
        raise ValueError(f"unknown identifiability_policy {identifiability_policy!r}; use 'raise' or 'flag'")
    if fallback not in ("zero", "mv"):
        raise ValueError(f"unknown fallback {fallback!r}; use 'zero' or 'mv'")
    if weighting not in ("count", "binary", "square"):
        raise ValueError(f"unknown weighting {weighting!r}; use 'count', 'binary' or 'square'")
    if solver == "eg" and sign_mode != "bfs":
        raise ValueError("solver 'eg' fits positive skills only: use it with sign_mode='bfs'")
    if not x0 > 0:
        raise ValueError("x0 must be > 0 (x = 0 is a stationary point)")
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[step] = timings.get(step, 0.0) + now - clock
        clock = now

    lm, dropped = prepare_labels(labels, classes, duplicates)
    m = lm.n_classes
    lap("encode")
    if moments is None:
        moments = label_moments(lm, min_pair_count=min_pair_count)
    elif moments.co_labels.shape != (lm.n_workers, lm.n_workers) or moments.n_classes != m:
        raise ValueError(
            f"moments are for {moments.co_labels.shape[0]} workers / {moments.n_classes} classes, "
            f"the labels have {lm.n_workers} / {m}"
        )
    n_pruned = 0
    if prune_spammers is not None:
        moments, n_pruned = prune_spammer_edges(moments, *prune_spammers)
    n_mat = moments.co_labels
    lap("moments")
    structure: GraphStructure | None = None
    if graph_report is not None and min_pair_count <= 1 and prune_spammers is None:
        graph = graph_report.graph
    else:
        structure = graph_structure(n_mat, symmetric=True)
        graph = structure.graph
    w_all = edge_weights(n_mat, weighting)
    n_i = lm.labels_per_worker()
    n_partners = np.diff(n_mat.indptr).astype(np.int64)
    strength = np.asarray(n_mat.sum(axis=1)).ravel()

    base = np.where(graph.bipartite, "bipartite_component", "ok").astype(object)
    base[graph.sizes == 1] = "isolated"
    status = base[graph.labels].copy()

    meta: dict[str, Any] = {
        "method": method,
        "n_classes": m,
        "classes": lm.classes.astype(str).tolist(),
        "n_workers": lm.n_workers,
        "n_tasks": lm.n_tasks,
        "n_labels": lm.n_labels,
        "n_duplicates_dropped": int(dropped),
        "weighting": weighting,
        "tau": float(tau),
        "x0": float(x0),
        "tol": float(tol),
        "max_iter": int(max_iter),
        "solver": solver,
        "sign_mode": sign_mode,
        "identifiability_policy": identifiability_policy,
        "fallback": fallback,
        "tie_break": tie_break,
        "seed": int(seed),
        "min_pair_count": int(min_pair_count),
        "prune_spammers": "" if prune_spammers is None else ",".join(map(str, prune_spammers)),
        "n_pairs_pruned": n_pruned,
    }

    if method != "pgd":
        return _fit_baseline(
            lm,
            method,
            graph,
            n_mat,
            w_all,
            status,
            n_i,
            n_partners,
            strength,
            meta,
            tie_break=tie_break,
            seed=seed,
            spectral=spectral,
            dense_eig_max=dense_eig_max,
            witness=witness,
            spectral_max_nnz=spectral_max_nnz,
            witnesses=_witness_cycles(structure) if (witness and structure is not None) else None,
            ds_tol=ds_tol,
            ds_max_iter=ds_max_iter,
            ds_smoothing=ds_smoothing,
            timings=timings,
        )

    lap("graph")
    status, active, lo, hi, ag, drops = _active_workers(graph, base, w_all, n_i, m, tau)
    failing = np.isin(status, ["isolated", "bipartite_component"])
    if identifiability_policy == "raise" and (failing.any() or not active.any()):
        fail_comps = np.unique(graph.labels[failing & (base[graph.labels] != "ok")])
        reasons = {int(c): str(base[c]) for c in fail_comps}
        lines = _failure_message(lm, graph.labels, fail_comps, reasons, graph.colour, "interaction-graph")
        for g_d, lost_d in drops:
            pc = np.unique(g_d.labels[lost_d])
            reasons2 = {int(c): ("isolated" if g_d.sizes[c] == 1 else "bipartite_component") for c in pc}
            lines += _failure_message(
                lm, g_d.labels, pc, reasons2, g_d.colour, "after dropping too_few_labels workers, active-graph"
            )
        if not active.any() and not lines:
            lines.append("no worker has more than tau^2 labels in a non-bipartite component")
        raise ValueError(
            "skills are not identifiable (spec §3): every component of the worker interaction graph "
            "must contain an odd cycle.\n" + "\n".join(lines)
        )

    lap("graph")
    skills, fit_comp, fit = _fit_active(
        active,
        ag,
        w_all,
        moments.c_hat,
        lo,
        hi,
        x0=x0,
        eta=eta,
        tol=tol,
        max_iter=max_iter,
        solver=solver,
        sign_mode=sign_mode,
        progress=progress,
    )
    if fit is None:
        log.warning("no identifiable worker: every task falls back to %s", fallback)

    lap("fit")
    v = vote_weights(skills, m, lo, hi)
    cons = weighted_consensus(lm, v, identified=active, fallback=fallback, tie_break=tie_break, seed=seed)
    lap("consensus")
    accuracy = ((m - 1) * skills + 1) / m
    table = pd.DataFrame(
        {
            "worker": lm.workers,
            "skill": skills,
            "accuracy": accuracy,
            "vote_weight": v.astype(np.float64),
            "n_labels": n_i.astype(np.int64),
            "n_partners": n_partners,
            "component": graph.labels.astype(np.int64),
            "status": status.astype(str),
            "identifiable": active,
            "strength": strength.astype(np.float64),
            "lower": lo,
            "upper": hi,
            "fit_component": fit_comp,
        }
    )
    diag = component_diagnostics(
        lm,
        n_mat,
        w_all,
        graph,
        skills,
        status.astype(str),
        spectral=spectral,
        dense_max=dense_eig_max,
        witness=witness,
        spectral_max_nnz=spectral_max_nnz,
        witnesses=_witness_cycles(structure) if (witness and structure is not None) else None,
    )
    lap("diagnostics")
    labels_ok = float(active[lm.worker_idx].mean())
    meta.update(
        {
            "iterations": fit.iterations if fit else 0,
            "converged": fit.converged if fit else True,
            "final_loss": fit.final_loss if fit else 0.0,
            "eta": fit.eta if fit else float("nan"),
            "last_step": fit.last_step if fit else 0.0,
            "n_ties": cons.n_ties,
            "n_fallback_tasks": cons.n_fallback,
            "frac_workers_identified": float(active.mean()),
            "frac_labels_identified": labels_ok,
            "frac_tasks_identified": float(1.0 - cons.n_fallback / lm.n_tasks),
            "n_fallback_steps": fit.n_fallback_steps if fit else 0,
            "fit_status": "no_identifiable_worker" if fit is None else _fit_status(fit.converged),
        }
    )
    if cons.n_ties:
        log.info("MAP vote: %d tied tasks (tie_break=%s)", cons.n_ties, tie_break)
    return SkillsResult(
        skills=table,
        consensus=cons.consensus,
        diagnostics=diag,
        metadata=meta,
        loss_trace=fit.loss_trace if fit else np.empty(0),
        timings=timings,
    )


def _fit_baseline(
    lm: LabelMatrix,
    method: str,
    graph: Components,
    n_mat: sp.csr_matrix,
    w_all: sp.csr_matrix,
    status: np.ndarray,
    n_i: np.ndarray,
    n_partners: np.ndarray,
    strength: np.ndarray,
    meta: dict[str, Any],
    *,
    tie_break: TieBreak,
    seed: int,
    spectral: bool,
    dense_eig_max: int,
    witness: bool,
    spectral_max_nnz: int | None,
    witnesses: dict[int, np.ndarray] | None,
    ds_tol: float,
    ds_max_iter: int,
    ds_smoothing: float,
    timings: dict[str, float],
) -> SkillsResult:
    clock = time.perf_counter()
    nan = np.full(lm.n_workers, np.nan)
    trace = np.empty(0)
    if method == "mv":
        winner, scores, n_ties = weighted_vote(lm, None, tie_break, seed)
        agree = (lm.class_idx == winner[lm.task_idx]).astype(np.float64)
        accuracy = np.bincount(lm.worker_idx, weights=agree, minlength=lm.n_workers) / np.maximum(n_i, 1)
        skill = nan
        weight = np.ones(lm.n_workers)
        n_labels = lm.labels_per_task()
        cons = pd.DataFrame(
            {
                "task": lm.tasks,
                "label": lm.classes[winner],
                "confidence": (scores[np.arange(lm.n_tasks), winner] / np.maximum(n_labels, 1)).astype(np.float64),
                "n_labels": n_labels.astype(np.int64),
                "fallback": np.zeros(lm.n_tasks, dtype=bool),
            }
        )
        meta.update(
            {
                "iterations": 0,
                "converged": True,
                "final_loss": float("nan"),
                "n_ties": n_ties,
                "fit_status": "closed_form",
            }
        )
    else:
        fn = one_coin_dawid_skene if method == "onecoin_ds" else dawid_skene
        ds = fn(lm, tol=ds_tol, max_iter=ds_max_iter, smoothing=ds_smoothing, tie_break=tie_break, seed=seed)
        accuracy = ds.workers["accuracy"].to_numpy(dtype=np.float64)
        skill = ds.workers["skill"].to_numpy(dtype=np.float64)
        weight = ds.workers["vote_weight"].to_numpy(dtype=np.float64)
        cons = ds.consensus.assign(fallback=False)
        trace = -ds.log_likelihood
        meta.update(
            {
                "iterations": ds.iterations,
                "converged": ds.converged,
                "final_loss": float(-ds.log_likelihood[-1]) if ds.log_likelihood.size else float("nan"),
                "n_ties": ds.n_ties,
                "fit_status": _fit_status(ds.converged),
            }
        )
    ok = status == "ok"
    table = pd.DataFrame(
        {
            "worker": lm.workers,
            "skill": skill,
            "accuracy": accuracy,
            "vote_weight": weight,
            "n_labels": n_i.astype(np.int64),
            "n_partners": n_partners,
            "component": graph.labels.astype(np.int64),
            "status": status.astype(str),
            "identifiable": ok,
            "strength": strength.astype(np.float64),
            "lower": nan,
            "upper": nan,
            "fit_component": np.full(lm.n_workers, -1, dtype=np.int64),
        }
    )
    cons = cons[["task", "label", "confidence", "n_labels", "fallback"]].reset_index(drop=True)
    now = time.perf_counter()
    timings["fit"] = now - clock
    clock = now
    diag = component_diagnostics(
        lm,
        n_mat,
        w_all,
        graph,
        skill,
        status.astype(str),
        spectral=spectral,
        dense_max=dense_eig_max,
        witness=witness,
        spectral_max_nnz=spectral_max_nnz,
        witnesses=witnesses,
    )
    timings["diagnostics"] = time.perf_counter() - clock
    meta.update(
        {
            "eta": float("nan"),
            "n_fallback_tasks": 0,
            "frac_workers_identified": float(ok.mean()),
            "frac_labels_identified": float(ok[lm.worker_idx].mean()),
            "frac_tasks_identified": float(np.unique(lm.task_idx[ok[lm.worker_idx]]).size / lm.n_tasks),
        }
    )
    return SkillsResult(
        skills=table, consensus=cons, diagnostics=diag, metadata=meta, loss_trace=trace, timings=timings
    )


# --------------------------------------------------------------------------------------------
# Streaming (design.md §4 scale-out): sufficient statistics from record batches, two passes
# --------------------------------------------------------------------------------------------
_STREAM_K = np.int64(1) << np.int64(32)  # P = N + K·Agree packs both counts in one exact int64


@dataclass(frozen=True)
class StreamedMoments:
    """Sufficient statistics of a label stream (:func:`accumulate_moments`).

    Attributes
    ----------
    workers, classes : numpy.ndarray
        Sorted ids (as :func:`crowdflow.labels.encode_labels` sorts them); position = dense id.
    n_labels : numpy.ndarray
        Labels per worker (n_i).
    moments : LabelMoments
        N, agreements and C^ over the whole stream, workers in ``workers`` order.
    n_tasks, n_rows, n_duplicates_dropped, n_batches : int
    """

    workers: np.ndarray
    classes: np.ndarray
    n_labels: np.ndarray
    moments: LabelMoments
    n_tasks: int
    n_rows: int
    n_duplicates_dropped: int
    n_batches: int


def _factorize_str(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """Codes (order of first appearance) of ids compared as strings, and the distinct strings."""
    codes, uniq = pd.factorize(values)
    ustr = pd.Index(uniq).astype(str).to_numpy(dtype=object)
    c2, u2 = pd.factorize(ustr)
    if len(u2) != len(ustr):
        return np.asarray(c2, dtype=np.int64)[codes], np.asarray(u2, dtype=object)
    return np.asarray(codes, dtype=np.int64), ustr


class _Codebook:
    """Growing string → code mapping (codes in order of first appearance)."""

    def __init__(self, fixed: list[str] | None = None) -> None:
        self.fixed = fixed is not None
        self.index = pd.Index([] if fixed is None else [str(c) for c in fixed], dtype=object)

    def codes(self, values: np.ndarray, what: str) -> np.ndarray:
        codes, uniq = _factorize_str(values)
        pos = self.index.get_indexer(pd.Index(uniq))
        new = pos < 0
        if new.any():
            if self.fixed:
                raise ValueError(
                    f"labels outside the declared label set {self.index.tolist()}: {sorted(uniq[new].tolist())[:5]}"
                )
            start = len(self.index)
            self.index = self.index.append(pd.Index(np.asarray(uniq, dtype=object)[new], dtype=object))
            pos[new] = np.arange(start, start + int(new.sum()))
        return cast(np.ndarray, pos.astype(np.int64)[codes])


def _whole_task_chunks(batches: Iterable[Any], counts: dict[str, int] | None = None) -> Iterator[pd.DataFrame]:
    """Regroup a label stream into frames that each hold whole tasks.

    The rows of the last task of a batch are carried over to the next batch, so a task split across
    consecutive batches is processed once, complete. ``counts`` (optional) receives the number of rows
    and batches read.
    """
    carry: pd.DataFrame | None = None
    for batch in batches:
        df = _batch_frame(batch)
        if counts is not None:
            counts["rows"] += len(df)
            counts["batches"] += 1
        if carry is not None:
            df = pd.concat([carry, df], ignore_index=True)
        if len(df) == 0:
            carry = None
            continue
        tail = (df["task"] == df["task"].iloc[-1]).to_numpy()
        start = len(df) - int(np.argmin(tail[::-1])) if not tail.all() else 0
        carry = df.iloc[start:]
        if start:
            yield df.iloc[:start]
    if carry is not None and len(carry):
        yield carry


def _batch_frame(batch: Any) -> pd.DataFrame:
    if isinstance(batch, pd.DataFrame):
        df = batch
    elif hasattr(batch, "to_pandas"):  # pyarrow RecordBatch / Table
        df = batch.to_pandas()
    else:
        raise ValueError(f"batches must be pyarrow RecordBatches/Tables or DataFrames, got {type(batch).__name__}")
    for col in ("task", "worker", "label"):
        if col not in df.columns:
            raise ValueError(f"labels batch has no column '{col}' (columns: {list(df.columns)})")
        n_null = int(df[col].isna().sum())
        if n_null:
            raise ValueError(f"labels column '{col}' has {n_null} null values")
    return df[["task", "worker", "label"]]


def _grow(m: sp.csr_matrix, n: int) -> sp.csr_matrix:
    if m.shape[0] == n:
        return m
    indptr = np.concatenate([m.indptr, np.full(n - m.shape[0], m.indptr[-1], dtype=m.indptr.dtype)])
    return sp.csr_matrix((m.data, m.indices, indptr), shape=(n, n))


def accumulate_moments(
    batches: Any,
    *,
    classes: list[str] | None = None,
    duplicates: DuplicatePolicy = "error",
    check_tasks: bool = True,
) -> StreamedMoments:
    """Co-label counts N, agreement counts and labels per worker from a stream of label batches.

    The statistics of spec §2.1 are sums over tasks, so they can be accumulated chunk by chunk
    (design.md §4): for each chunk, P_b = N_b + K·Agree_b by one integer sparse product
    (``crowdflow.graphs.pair_counts``); the running sum of P_b and of the per-worker label counts
    is all that is kept (memory O(|E| + W), never the labels). Equal, entry for entry, to
    :func:`label_moments` on the concatenated labels.

    **Requirement: a task's labels must be contiguous in the stream** (e.g. the table is sorted or
    grouped by task). A task may straddle the boundary between two consecutive batches: the rows
    of each batch's last task are carried into the next batch. A task whose labels reappear after
    another task started cannot be handled in one pass; with ``check_tasks=True`` (default) this
    is detected — within a batch directly, across batches by a 64-bit hash per finished task
    (8 bytes per task, checked at the end) — and raises ``ValueError``.

    Parameters
    ----------
    batches : iterable
        pyarrow ``RecordBatch`` / ``Table`` or pandas DataFrames with columns ``task, worker,
        label`` (e.g. ``pyarrow.parquet.ParquetFile(path).iter_batches()``).
    classes : list of str, optional
        Declared label set (M); otherwise the labels seen in the stream.
    duplicates : {"error", "keep_last", "keep_first"}
        Policy for a repeated (task, worker) pair (within a task's group).
    check_tasks : bool
        Verify the contiguity requirement.

    Returns
    -------
    StreamedMoments
    """
    worker_book = _Codebook()
    class_book = _Codebook(classes)
    acc = sp.csr_matrix((0, 0), dtype=np.int64)  # type: ignore[arg-type]  # (M, N) shape form; not in the stubs
    n_lab = np.zeros(0, dtype=np.int64)
    task_hashes: list[np.ndarray] = []
    n_tasks = dropped = 0

    def process(df: pd.DataFrame) -> None:
        nonlocal acc, n_lab, n_tasks, dropped
        t_codes, t_uniq = _factorize_str(df["task"].to_numpy())
        if check_tasks and t_codes.size > 1 and bool(np.any(np.diff(t_codes) < 0)):
            bad = t_uniq[int(t_codes[1:][np.diff(t_codes) < 0][0])]
            raise ValueError(
                f"task {bad!r} has labels that are not contiguous in the stream; sort or group the "
                "labels by task before streaming (accumulate_moments)"
            )
        w_codes = worker_book.codes(df["worker"].to_numpy(), "worker")
        c_codes = class_book.codes(df["label"].to_numpy(), "label")
        n_w = len(worker_book.index)
        key = t_codes * n_w + w_codes
        order = np.argsort(key, kind="stable")
        ks = key[order]
        same = ks[1:] == ks[:-1]
        if same.any():
            if duplicates == "error":
                r = order[1:][same][0]
                raise ValueError(
                    f"{int(same.sum())} rows repeat a (task, worker) pair, e.g. "
                    f"(task={t_uniq[t_codes[r]]}, worker={worker_book.index[w_codes[r]]}); "
                    "set duplicates: keep_last or keep_first"
                )
            keep = np.ones(ks.size, dtype=bool)
            if duplicates == "keep_last":
                keep[:-1] = ~same
            else:
                keep[1:] = ~same
            dropped += int((~keep).sum())
            order = order[keep]
        t_sorted = t_codes[order]
        indptr = np.zeros(len(t_uniq) + 1, dtype=np.int64)
        np.cumsum(np.bincount(t_sorted, minlength=len(t_uniq)), out=indptr[1:])
        m_b = max(int(c_codes.max()) + 1 if c_codes.size else 1, 2)
        n_b, ag_b = pair_counts(indptr, w_codes[order], c_codes[order], n_w, m_b)
        p_b = sp.csr_matrix((n_b.data + _STREAM_K * ag_b, n_b.indices, n_b.indptr), shape=n_b.shape)
        acc = _grow(acc, n_w) + p_b
        grown = np.zeros(n_w, dtype=np.int64)
        grown[: n_lab.size] = n_lab
        n_lab = grown + np.bincount(w_codes[order], minlength=n_w)
        n_tasks += len(t_uniq)
        if check_tasks:
            task_hashes.append(pd.util.hash_array(np.asarray(t_uniq, dtype=object)))

    counts = {"rows": 0, "batches": 0}
    for chunk in _whole_task_chunks(batches, counts):
        process(chunk)
    n_rows, n_batches = counts["rows"], counts["batches"]
    if n_rows == 0:
        raise ValueError("labels stream is empty")
    if check_tasks:
        h = np.sort(np.concatenate(task_hashes))
        if h.size > 1 and bool(np.any(h[1:] == h[:-1])):
            raise ValueError(
                f"{int((h[1:] == h[:-1]).sum())} task(s) have labels in non-adjacent parts of the stream; "
                "sort or group the labels by task before streaming (accumulate_moments)"
            )
    raw_workers = np.asarray(worker_book.index, dtype=object)
    perm = natural_order(raw_workers)  # final dense id = natural order, as encode_labels
    acc = sp.csr_matrix(_grow(acc, raw_workers.size)[perm][:, perm])
    acc.sum_duplicates()
    acc.sort_indices()
    n_mat = sp.csr_matrix((acc.data & (_STREAM_K - 1), acc.indices, acc.indptr), shape=acc.shape)
    agree = acc.data >> np.int64(32)
    if classes is None:
        cls_raw = np.asarray(class_book.index, dtype=object)
        cls = cls_raw[natural_order(cls_raw)]
    else:
        cls = np.asarray([str(c) for c in classes], dtype=object)
    if cls.size < 2:
        raise ValueError(f"need at least 2 classes, the labels use only {cls.tolist()}; declare classes=[...]")
    return StreamedMoments(
        workers=raw_workers[perm],
        classes=cls,
        n_labels=n_lab[perm],
        moments=moments_from_counts(n_mat, agree, int(cls.size)),
        n_tasks=int(n_tasks),
        n_rows=int(n_rows),
        n_duplicates_dropped=int(dropped),
        n_batches=int(n_batches),
    )


def skills_from_moments(
    streamed: StreamedMoments,
    *,
    weighting: Weighting = "count",
    tau: float = 1.0,
    x0: float = 0.5,
    eta: float | None = None,
    tol: float = 1e-7,
    max_iter: int = 5000,
    solver: Solver = "scaled",
    sign_mode: SignMode = "sum_rule",
) -> tuple[pd.DataFrame, RankOneFit | None]:
    """Rank-one PGD skills from accumulated statistics (the first pass of a streaming fit).

    The same identifiability check (components, bipartiteness, too_few_labels pruning, policy
    ``flag``), PGD and sign rule as :func:`fit_skills`; the skills table has the columns worker,
    skill, accuracy, vote_weight, n_labels, n_partners, component, status, identifiable, lower,
    upper. Feed it to :func:`stream_consensus` for the second pass over the labels.
    """
    mo = streamed.moments
    m = int(streamed.classes.size)
    n_mat = mo.co_labels
    structure = graph_structure(n_mat, symmetric=True)
    graph = structure.graph
    w_all = edge_weights(n_mat, weighting)
    base = np.where(graph.bipartite, "bipartite_component", "ok").astype(object)
    base[graph.sizes == 1] = "isolated"
    n_i = streamed.n_labels
    status, active, lo, hi, ag, _ = _active_workers(graph, base, w_all, n_i, m, tau)
    skills, _, fit = _fit_active(
        active,
        ag,
        w_all,
        mo.c_hat,
        lo,
        hi,
        x0=x0,
        eta=eta,
        tol=tol,
        max_iter=max_iter,
        solver=solver,
        sign_mode=sign_mode,
    )
    v = vote_weights(skills, m, lo, hi)
    table = pd.DataFrame(
        {
            "worker": streamed.workers.astype(str),
            "skill": skills,
            "accuracy": ((m - 1) * skills + 1) / m,
            "vote_weight": np.where(active, v, 0.0),
            "n_labels": n_i.astype(np.int64),
            "n_partners": np.diff(n_mat.indptr).astype(np.int64),
            "component": graph.labels.astype(np.int64),
            "status": status.astype(str),
            "identifiable": active,
            "lower": lo,
            "upper": hi,
        }
    )
    return table, fit


def stream_consensus(
    batches: Any,
    skills: pd.DataFrame,
    classes: list[str] | np.ndarray,
    *,
    fallback: Fallback = "mv",
    duplicates: DuplicatePolicy = "error",
) -> pd.DataFrame:
    """Second pass: MAP weighted vote per task from a label stream (spec §2.7, §3.3).

    Same contiguity requirement and carry-over as :func:`accumulate_moments`. Per task:
    score_t(l) = Σ_i v_i 1{Y_it = l} with v from ``skills["vote_weight"]`` (0 for unidentified
    workers), posterior softmax; tasks without an identified labeller fall back to majority vote
    (``fallback="mv"``) or zero weights. Ties go to the first class in label order (the
    in-memory ``tie_break="smallest"`` rule: a random draw indexed by the global task position
    is not available in one pass). Rows come out in stream order of the tasks.

    Parameters
    ----------
    batches : iterable
        The same stream as the first pass (a fresh iterator).
    skills : pandas.DataFrame
        Columns worker, vote_weight, identifiable (e.g. from :func:`skills_from_moments`).
    classes : list of str
        The label set (``StreamedMoments.classes``).
    fallback : {"mv", "zero"}
    duplicates : {"error", "keep_last", "keep_first"}

    Returns
    -------
    pandas.DataFrame
        task, label, confidence, n_labels, fallback.
    """
    cls = np.asarray([str(c) for c in classes], dtype=object)
    m = cls.size
    wid = pd.Index(skills["worker"].astype(str).to_numpy(), dtype=object)
    weight = skills["vote_weight"].to_numpy(dtype=np.float64)
    ident = skills["identifiable"].to_numpy(dtype=bool)
    out: list[pd.DataFrame] = []

    def vote(df: pd.DataFrame) -> None:
        t_codes, t_uniq = _factorize_str(df["task"].to_numpy())
        wc_, wu = _factorize_str(df["worker"].to_numpy())
        w = wid.get_indexer(pd.Index(wu))[wc_]
        if np.any(w < 0):
            raise ValueError("the second pass sees workers that the skills table does not have")
        cc_, cu = _factorize_str(df["label"].to_numpy())
        c = pd.Index(cls).get_indexer(cu)[cc_]
        if np.any(c < 0):
            raise ValueError(f"labels outside the label set {cls.tolist()}")
        key = t_codes * max(len(wid), 1) + w
        order = np.argsort(key, kind="stable")
        ks = key[order]
        same = ks[1:] == ks[:-1]
        if same.any():
            if duplicates == "error":
                raise ValueError("rows repeat a (task, worker) pair; set duplicates: keep_last or keep_first")
            keep = np.ones(ks.size, dtype=bool)
            if duplicates == "keep_last":
                keep[:-1] = ~same
            else:
                keep[1:] = ~same
            order = order[keep]
        t, w, c = t_codes[order], w[order], c[order]
        nt = len(t_uniq)
        cell = t * m + c
        scores = np.bincount(cell, weights=np.where(ident[w], weight[w], 0.0), minlength=nt * m).reshape(nt, m)
        winner = row_argmax(scores)
        post, _ = softmax_rows(scores)
        confidence = post[np.arange(nt), winner]
        n_labels = np.bincount(t, minlength=nt)
        is_fb = np.bincount(t, weights=ident[w].astype(np.float64), minlength=nt) == 0
        if fallback == "mv" and is_fb.any():
            counts = np.bincount(cell, minlength=nt * m).reshape(nt, m)
            mv = row_argmax(counts)
            winner = np.where(is_fb, mv, winner)
            confidence = np.where(is_fb, counts[np.arange(nt), mv] / np.maximum(n_labels, 1), confidence)
        out.append(
            pd.DataFrame(
                {
                    "task": np.asarray(t_uniq, dtype=object).astype(str),
                    "label": cls[winner].astype(str),
                    "confidence": confidence.astype(np.float64),
                    "n_labels": n_labels.astype(np.int64),
                    "fallback": is_fb,
                }
            )
        )

    for chunk in _whole_task_chunks(batches):
        vote(chunk)
    if not out:
        raise ValueError("labels stream is empty")
    return pd.concat(out, ignore_index=True)


# --------------------------------------------------------------------------------------------
# Partitioned statistics (design.md §4 scale-out): N and the agreements summed over partitions
# --------------------------------------------------------------------------------------------
def write_label_partitions(lm: LabelMatrix, folder: str | Path, n_partitions: int) -> list[str]:
    """Write the encoded labels as Parquet files, each holding whole tasks (task code mod ``n_partitions``).

    Columns ``task, worker, label`` are the dense int64 codes of ``lm``. Because no task is split
    across files, the pair statistics of the files add up exactly to those of ``lm``
    (:func:`partition_pair_counts`, :func:`moments_from_partitions`). Empty partitions are not written.

    Returns
    -------
    list of str
        The written file paths, in partition order.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if n_partitions < 1:
        raise ValueError("n_partitions must be >= 1")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    part = lm.task_idx % n_partitions
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(n_partitions + 1))
    paths = []
    for p in range(n_partitions):
        rows = order[bounds[p] : bounds[p + 1]]
        if not rows.size:
            continue
        table = pa.table({"task": lm.task_idx[rows], "worker": lm.worker_idx[rows], "label": lm.class_idx[rows]})
        path = out / f"part-{p:05d}.parquet"
        pq.write_table(table, path)
        paths.append(str(path))
    return paths


def partition_pair_counts(path: str, n_workers: int, n_classes: int) -> sp.csr_matrix:
    """P = N + 2³²·Agree (int64, W×W CSR) of the tasks in one partition file of :func:`write_label_partitions`.

    Runs anywhere (e.g. a Dask worker): it reads the file, groups its labels by task and makes one
    integer sparse product (``crowdflow.graphs.pair_counts``). Partitions are summed by
    :func:`moments_from_partitions`.
    """
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["task", "worker", "label"])
    task = t.column("task").to_numpy().astype(np.int64)
    worker = t.column("worker").to_numpy().astype(np.int64)
    label = t.column("label").to_numpy().astype(np.int64)
    order, _ = task_major_order(task, worker, n_workers)
    _, local = np.unique(task[order], return_inverse=True)
    indptr = np.zeros(int(local.max()) + 2 if local.size else 1, dtype=np.int64)
    np.cumsum(np.bincount(local, minlength=indptr.size - 1), out=indptr[1:])
    n_b, ag_b = pair_counts(indptr, worker[order], label[order], n_workers, n_classes)
    return sp.csr_matrix((n_b.data + _STREAM_K * ag_b, n_b.indices, n_b.indptr), shape=n_b.shape)


def moments_from_partitions(parts: Iterable[sp.csr_matrix], n_classes: int, min_pair_count: int = 1) -> LabelMoments:
    """Sum the packed counts of :func:`partition_pair_counts` and build N, agreements and C^.

    Integer sums, so the result equals :func:`label_moments` on all the labels entry for entry,
    provided every task lies in exactly one partition.
    """
    total: sp.csr_matrix | None = None
    for p in parts:
        total = p.copy() if total is None else total + p
    if total is None:
        raise ValueError("no partitions to sum")
    total = sp.csr_matrix(total)
    total.sum_duplicates()
    total.sort_indices()
    n_mat = sp.csr_matrix((total.data & (_STREAM_K - 1), total.indices, total.indptr), shape=total.shape)
    n_mat.has_sorted_indices = True
    agree = total.data >> np.int64(32)
    return moments_from_counts(n_mat, agree, n_classes, min_pair_count)
