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
:func:`weighted_consensus`, :func:`component_diagnostics`, …) are public for tests and notebooks.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra, minimum_spanning_tree
from scipy.sparse.linalg import eigsh

from crowdflow.graphs import Components, WorkerGraphReport, components, worker_graph_report
from crowdflow.labels import DuplicatePolicy, LabelMatrix, deduplicate, encode_labels
from crowdflow.models import dawid_skene
from crowdflow.models.majority import TieBreak, majority_vote, weighted_vote

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
    key = lm.worker_idx.astype(np.int64) * max(lm.n_tasks, 1) + lm.task_idx
    uniq, counts = np.unique(key, return_counts=True)
    if uniq.size != key.size:
        bad = uniq[counts > 1][:5]
        pairs = ", ".join(f"(task={lm.tasks[k % lm.n_tasks]}, worker={lm.workers[k // lm.n_tasks]})" for k in bad)
        raise ValueError(
            f"{key.size - uniq.size} repeated (task, worker) pairs in the label matrix, e.g. {pairs}; "
            "deduplicate first (crowdflow.labels.deduplicate)"
        )


def canonical_label_matrix(lm: LabelMatrix) -> LabelMatrix:
    """The same labels with entries sorted by (task, worker).

    Floating-point sums over a task's labels then run in a fixed order, so outputs are
    byte-identical under any permutation of the input rows (spec AT-P2).
    """
    order = np.lexsort((lm.worker_idx, lm.task_idx))
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
    elif isinstance(labels, pd.DataFrame):
        for col in ("task", "worker", "label"):
            if col not in labels.columns:
                raise ValueError(f"labels table has no column '{col}' (columns: {list(labels.columns)})")
        if len(labels) == 0:
            raise ValueError("labels table is empty")
        for col in ("task", "worker", "label"):
            n_null = int(labels[col].isna().sum())
            if n_null:
                raise ValueError(f"labels column '{col}' has {n_null} null values")
        df = labels[["task", "worker", "label"]].astype(str)
        df, dropped = deduplicate(df, duplicates)
        lm = encode_labels(df, classes)
    else:
        raise ValueError(f"labels must be a pandas DataFrame or a LabelMatrix, got {type(labels).__name__}")
    if lm.n_classes < 2:
        raise ValueError(
            f"need at least 2 classes, the labels use only {lm.classes.tolist()}; "
            "declare the label set with classes=[...]"
        )
    _check_no_duplicates(lm)
    return canonical_label_matrix(lm), dropped


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
        N_ij = number of tasks labelled by both i and j.
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


def _zero_diag_canonical(m: sp.spmatrix) -> sp.csr_matrix:
    """Zero the diagonal (O(nnz) mask, no re-sorting as in ``setdiag``) and canonicalise."""
    m = sp.csr_matrix(m, copy=True)
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    m.data[m.indices == rows] = 0
    m.eliminate_zeros()
    m.sum_duplicates()
    m.sort_indices()
    return m


def label_moments(lm: LabelMatrix, co_labels: sp.csr_matrix | None = None, min_pair_count: int = 1) -> LabelMoments:
    """Co-label counts N, agreements and the moment matrix C^ by sparse products (spec §2.1).

    N = B Bᵀ with B the W×T incidence; agreements = Σ_l B_l B_lᵀ computed as one product
    B̃ B̃ᵀ with B̃ the W×(T·M) matrix B̃[i, t·M + l] = 1{Y_it = l}; both with zeroed diagonal.
    C^ = (M a − 1)/(M − 1) on the nonzeros of N; for M = 2 this equals the ±1 product moment
    C~_ij = (1/N_ij) Σ_t Y_it Y_jt exactly. Never allocates a dense W×W.

    Parameters
    ----------
    lm : LabelMatrix
        De-duplicated labels.
    co_labels : scipy.sparse.csr_matrix, optional
        A precomputed N (e.g. ``WorkerGraphReport.co_labels``).
    min_pair_count : int
        Pairs with N_ij < min_pair_count are dropped (spec §3.2, §8; default 1 keeps all).

    Returns
    -------
    LabelMoments
    """
    m = lm.n_classes
    if m < 2:
        raise ValueError("label moments need at least 2 classes")
    w, t = lm.n_workers, lm.n_tasks
    if co_labels is None:
        b = lm.incidence()
        n = b @ b.T
    else:
        n = co_labels
    n = _zero_diag_canonical(n).astype(np.float64)
    if min_pair_count > 1:
        n.data[n.data < min_pair_count] = 0.0
        n.eliminate_zeros()
    bx = sp.csr_matrix((np.ones(lm.n_labels), (lm.worker_idx, lm.task_idx * m + lm.class_idx)), shape=(w, t * m))
    agree = _zero_diag_canonical(bx @ bx.T)
    if min_pair_count > 1:
        agree = sp.csr_matrix(agree.multiply(n > 0))
    # agree ⊂ pattern(N) entrywise, and N ≥ 1 there: N + agree has exactly N's pattern
    union = sp.csr_matrix(n + agree)
    union.sum_duplicates()
    union.sort_indices()
    if not (np.array_equal(union.indptr, n.indptr) and np.array_equal(union.indices, n.indices)):
        raise RuntimeError("agreement pattern is not contained in the co-label pattern")
    agree_data = union.data - n.data
    a = agree_data / n.data
    c = (m * a - 1.0) / (m - 1.0)
    agreements = sp.csr_matrix((agree_data, n.indices.copy(), n.indptr.copy()), shape=n.shape)
    c_hat = sp.csr_matrix((c, n.indices.copy(), n.indptr.copy()), shape=n.shape)
    return LabelMoments(co_labels=n, agreements=agreements, c_hat=c_hat, n_classes=m)


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
def rank_one_loss(c_hat: sp.spmatrix, weights: sp.spmatrix, x: np.ndarray) -> float:
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


def rank_one_gradient(c_hat: sp.spmatrix, weights: sp.spmatrix, x: np.ndarray) -> np.ndarray:
    """∇L(x)_i = −Σ_j w_ij (C^_ij − x_i x_j) x_j = −((w∘C^) x − x ∘ (w (x∘x)))_i (spec §2.3)."""
    w = sp.csr_matrix(weights)
    wc = sp.csr_matrix(w.multiply(c_hat))
    x = np.asarray(x, dtype=np.float64)
    return -(wc @ x - x * (w @ (x * x)))


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
        Step size (``gd``: the scalar η; ``scaled``: the smallest per-worker η_i; ``eg``: α).
    solver : str
    last_step : float
        max_i |x_i^{k+1} − x_i^k| of the last update.
    """

    x: np.ndarray
    iterations: int
    converged: bool
    loss_trace: np.ndarray
    final_loss: float
    eta: float
    solver: str
    last_step: float


def _top_eigenvalue(a: sp.spmatrix, dense_max: int = 2000) -> float:
    """Largest eigenvalue of a symmetric matrix (||A||_2 for a nonnegative one)."""
    n = a.shape[0]
    if n == 0 or sp.csr_matrix(a).nnz == 0:
        return 0.0
    if n <= dense_max:
        return float(scipy.linalg.eigvalsh(sp.csr_matrix(a).toarray(), subset_by_index=[n - 1, n - 1])[0])
    v0 = np.random.default_rng(0).standard_normal(n)
    return float(eigsh(sp.csr_matrix(a), k=1, which="LA", v0=v0, return_eigenvectors=False)[0])


def fit_rank_one(
    c_hat: sp.spmatrix,
    weights: sp.spmatrix,
    lower: np.ndarray | float,
    upper: np.ndarray | float,
    *,
    x0: float | np.ndarray = 0.5,
    eta: float | None = None,
    tol: float = 1e-7,
    max_iter: int = 5000,
    solver: Solver = "gd",
) -> RankOneFit:
    """Fit x xᵀ to C^ on the observed entries by projected (or exponentiated) gradient descent.

    Spec §2.3 (``gd``): x̃ = x^k + η Σ_j w_ij (C^_ij − x_i^k x_j^k) x_j^k for all i at once
    (two sparse mat-vecs: (w∘C^) x and w (x∘x)), then x^{k+1} = clip(x̃, lower, upper). Default
    η = 1/(4 max_i r_i), r_i = Σ_j w_ij: by Gershgorin the Hessian of L on [−1, 1]^W is bounded by
    4 max_i r_i, so L decreases monotonically. Stop when max_i |x_i^{k+1} − x_i^k| < tol or after
    max_iter updates (then a ``RuntimeWarning``).

    ``scaled`` (an addition, same objective and stopping rule): Jacobi-preconditioned PGD with a
    per-worker step η_i = 1/(4 r_i). Since D = diag(4 r_i) dominates the Hessian on the box
    (row-wise Gershgorin: H_ii + Σ_j |H_ij| ≤ 4 r_i), the projected step in the D-metric is a
    majorise–minimise step, so L is still non-increasing and the fixed points are the same KKT
    points as ``gd``. It removes the dependence on the spread of r_i (on Snow RTE: 394 instead of
    ~10⁴ iterations to tol 1e-7, same optimum to 1e-10 at tight tolerance).

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
    # C^ on the pattern of w
    wt = w.tocoo()
    c_on_w = np.asarray(c[wt.row, wt.col]).ravel()
    if solver == "eg":
        if np.any(lo <= 0):
            raise ValueError("solver 'eg' needs a positive box (lower > 0)")
        kappa, big_k = float(lo.min()), float(hi.max())
        c_on_w = np.clip(c_on_w, kappa**2, big_k**2)
    wc = sp.csr_matrix((wt.data * c_on_w, (wt.row, wt.col)), shape=w.shape)
    wc.sort_indices()
    c0 = 0.25 * float(np.sum(wt.data * c_on_w * c_on_w))
    r = np.asarray(w.sum(axis=1)).ravel()
    r_max = float(r.max()) if nw else 0.0
    x = np.clip(np.broadcast_to(np.asarray(x0, dtype=np.float64), (nw,)).copy(), lo, hi)

    if solver == "gd":
        default = 1.0 / (4.0 * r_max) if r_max > 0 else 0.0
        step_size: float | np.ndarray = default if eta is None else float(eta)
        eta_report = float(step_size)
    elif solver == "scaled":
        if eta is not None:
            raise ValueError("solver 'scaled' uses eta_i = 1/(4 r_i); do not pass eta")
        step_size = np.divide(1.0, 4.0 * r, out=np.zeros(nw), where=r > 0)
        eta_report = float(step_size[r > 0].min()) if np.any(r > 0) else 0.0
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
    k = 0
    if r_max <= 0:  # no edges: nothing to fit
        converged = True
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
            if last_step < tol:
                converged = True
                k += 1
                break
        else:
            k = max_iter
    final = 0.25 * float(np.sum(wt.data * (c_on_w - x[wt.row] * x[wt.col]) ** 2))
    trace = trace[: k + 1].copy()
    trace[k] = final
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
    c_hat: sp.spmatrix | None = None,
    active: np.ndarray | None = None,
    confidence: sp.spmatrix | None = None,
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
        pattern = sp.csr_matrix(((tree != 0) + (tree.T != 0)).astype(np.float64))
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
    top = scores.max(axis=1, keepdims=True)
    post = np.exp(scores - top)
    post /= post.sum(axis=1, keepdims=True)
    n_ident = np.bincount(lm.task_idx, weights=ident[lm.worker_idx].astype(np.float64), minlength=lm.n_tasks)
    is_fb = n_ident == 0
    is_top = np.isclose(scores, top, rtol=1e-12, atol=1e-12)
    n_ties = int(((is_top.sum(axis=1) > 1) & ~is_fb).sum())
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
            "task": lm.tasks.astype(str),
            "label": lm.classes[winner].astype(str),
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
    pred = consensus[["task", "label"]].astype(str)
    gold = truth[["task", "label"]].astype(str).drop_duplicates("task")
    both = pred.merge(gold, on="task", suffixes=("_pred", "_true"))
    if both.empty:
        raise ValueError("no task has both a prediction and a gold label")
    return float((both["label_pred"] != both["label_true"]).mean())


# --------------------------------------------------------------------------------------------
# §3 Identifiability diagnostics
# --------------------------------------------------------------------------------------------
def signless_laplacian(adj: sp.spmatrix) -> sp.csr_matrix:
    """L_s = Deg(w) + Adj(w) (spec §3.4); xᵀ L_s x = Σ_{i<j} w_ij (x_i + x_j)²."""
    a = _zero_diag_canonical(adj).astype(np.float64)
    deg = np.asarray(a.sum(axis=1)).ravel()
    return sp.csr_matrix(sp.diags(deg) + a)


def signless_lambda_min(adj: sp.spmatrix, dense_max: int = 2000) -> tuple[float, str]:
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


def odd_cycle_witnesses(adj: sp.spmatrix, graph: Components | None = None) -> dict[int, np.ndarray]:
    """One odd cycle per non-bipartite component (spec §3.2 step 2).

    A BFS from the smallest node of each component assigns levels; a non-bipartite component
    has an edge (u, v) joining two nodes of the same level. The witness is u → … → lca → … → v
    along the BFS tree (both branches have the same length k), closed by the edge (v, u): an odd
    cycle of 2k + 1 distinct nodes. All components are processed together (vectorised ascent).

    Parameters
    ----------
    adj : scipy.sparse matrix
        Symmetric adjacency (nonzero = edge).
    graph : Components, optional
        ``crowdflow.graphs.components(adj)`` if already computed.

    Returns
    -------
    dict
        component id → node ids of the cycle in order (consecutive nodes adjacent, last adjacent
        to first).
    """
    a = _zero_diag_canonical(adj)
    g = components(a) if graph is None else graph
    n = a.shape[0]
    odd = np.flatnonzero(~g.bipartite)
    if odd.size == 0:
        return {}
    first = np.full(g.n_components, n, dtype=np.int64)
    np.minimum.at(first, g.labels, np.arange(n))
    roots = first[odd]
    pattern = sp.csr_matrix((np.ones(a.nnz), a.indices, a.indptr), shape=a.shape)
    dist, pred, _ = dijkstra(
        pattern, directed=False, indices=roots, unweighted=True, return_predecessors=True, min_only=True
    )
    up = sp.triu(pattern, k=1).tocoo()
    u, v = up.row.astype(np.int64), up.col.astype(np.int64)
    same = np.isfinite(dist[u]) & (dist[u] == dist[v])
    u, v = u[same], v[same]
    comp = g.labels[u]
    order = np.lexsort((v, u, comp))
    comp, u, v = comp[order], u[order], v[order]
    comp_ids, first_edge = np.unique(comp, return_index=True)
    cu, cv = u[first_edge].copy(), v[first_edge].copy()
    us, vs = [cu.copy()], [cv.copy()]
    while np.any(cu != cv):
        m = cu != cv
        cu[m] = pred[cu[m]]
        cv[m] = pred[cv[m]]
        us.append(cu.copy())
        vs.append(cv.copy())
    us_a, vs_a = np.vstack(us), np.vstack(vs)
    ks = np.argmax(us_a == vs_a, axis=0)  # steps to the lowest common ancestor
    out: dict[int, np.ndarray] = {}
    for j, c in enumerate(comp_ids):
        k = int(ks[j])
        out[int(c)] = np.concatenate([us_a[: k + 1, j], vs_a[:k, j][::-1]]).astype(np.int64)
    return out


def theorem12_error_bound(co_labels: sp.spmatrix, kappa: float, big_k: float, max_delta: float) -> float:
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


def component_diagnostics(
    lm: LabelMatrix,
    co_labels: sp.csr_matrix,
    weights: sp.csr_matrix,
    graph: Components,
    skills: np.ndarray | None = None,
    worker_status: np.ndarray | None = None,
    *,
    spectral: bool = True,
    dense_max: int = 2000,
    witness: bool = True,
    delta: float = 0.05,
) -> pd.DataFrame:
    """Per-component diagnostics table of spec §3.4.

    Columns: component, status, n_workers, n_ok_workers, n_edges, n_tasks, n_labels, bipartite,
    odd_cycle_witness_len, d_max, D_sum, N_min, N_median, N_max, norm_N_inf, norm_N_2,
    lambda_min_signless_unit, lambda_min_signless_weighted, eig_method, kappa, K, mu_hat, lip_hat,
    cond_hat, error_bound_hat.

    κ, K = 5th/95th percentile of |ŝ| over the component's fitted workers; μ̂ = κ² λ_min^unit
    N_min; lip̂ = 2 √W_K ||N||_2 K²; cond̂ = lip̂/μ̂; error_bound_hat = K √W_K ||N||_∞ / μ̂ ·
    log(D/δ)/√N_min with D = D_sum (the number of observed entries; the paper leaves D
    unspecified, [AMBIG]) and δ = 0.05. λ's: dense ``eigvalsh`` for components of at most
    ``dense_max`` workers, else ``eigsh`` on cI − L_s (column ``eig_method``).
    """
    n_mat = sp.csr_matrix(co_labels, dtype=np.float64)
    w_mat = sp.csr_matrix(weights, dtype=np.float64)
    g_lab = graph.labels
    nc = graph.n_components
    deg = np.diff(n_mat.indptr)
    rowsum = np.asarray(n_mat.sum(axis=1)).ravel()
    n_edges = np.bincount(g_lab, weights=deg, minlength=nc) / 2
    n_lab = np.bincount(g_lab[lm.worker_idx], minlength=nc)
    task_comp = np.unique(lm.task_idx * nc + g_lab[lm.worker_idx])
    n_tasks = np.bincount(task_comp % nc, minlength=nc)
    d_max = np.zeros(nc, dtype=np.int64)
    np.maximum.at(d_max, g_lab, deg)
    norm_inf = np.zeros(nc)
    np.maximum.at(norm_inf, g_lab, rowsum)
    up = sp.triu(n_mat, k=1).tocoo()
    edge_df = pd.DataFrame({"c": g_lab[up.row], "n": up.data})
    grp = edge_df.groupby("c")["n"]
    n_min = grp.min().reindex(range(nc)).to_numpy(dtype=np.float64)
    n_med = grp.median().reindex(range(nc)).to_numpy(dtype=np.float64)
    n_max = grp.max().reindex(range(nc)).to_numpy(dtype=np.float64)

    comp_status = np.where(graph.bipartite, "bipartite_component", "ok").astype(object)
    comp_status[graph.sizes == 1] = "isolated"
    if worker_status is None:
        n_ok = np.where(comp_status == "ok", graph.sizes, 0)
    else:
        n_ok = np.bincount(g_lab, weights=(np.asarray(worker_status) == "ok"), minlength=nc)

    wit_len = np.zeros(nc, dtype=np.int64)
    if witness:
        for c, cyc in odd_cycle_witnesses(n_mat, graph).items():
            wit_len[c] = cyc.size

    lam_u = np.zeros(nc)
    lam_w = np.zeros(nc)
    norm2 = np.zeros(nc)
    method = np.array(["eigvalsh"] * nc, dtype=object)
    if spectral:
        order = np.argsort(g_lab, kind="stable")
        starts = np.concatenate([[0], np.cumsum(graph.sizes)])
        pn = n_mat[order][:, order]
        pw = w_mat[order][:, order]
        for c in np.flatnonzero(graph.sizes >= 2):
            s, e = starts[c], starts[c + 1]
            sub_n = pn[s:e, s:e]
            sub_w = pw[s:e, s:e]
            unit = sp.csr_matrix((np.ones(sub_n.nnz), sub_n.indices, sub_n.indptr), shape=sub_n.shape)
            lam_u[c], method[c] = signless_lambda_min(unit, dense_max)
            lam_w[c], _ = signless_lambda_min(sub_w, dense_max)
            norm2[c] = _top_eigenvalue(sub_n, dense_max)
        bip = graph.bipartite
        lam_u[bip] = np.where(np.abs(lam_u[bip]) < 1e-9, 0.0, lam_u[bip])
        lam_w[bip] = np.where(np.abs(lam_w[bip]) < 1e-9, 0.0, lam_w[bip])
    else:
        lam_u[:] = np.nan
        lam_w[:] = np.nan
        norm2[:] = np.nan
        method[:] = "none"

    kappa = np.full(nc, np.nan)
    big_k = np.full(nc, np.nan)
    if skills is not None:
        s = np.abs(np.asarray(skills, dtype=np.float64))
        fin = np.isfinite(s)
        if fin.any():
            df = pd.DataFrame({"c": g_lab[fin], "s": s[fin]})
            q = df.groupby("c")["s"]
            kappa = q.quantile(0.05).reindex(range(nc)).to_numpy(dtype=np.float64)
            big_k = q.quantile(0.95).reindex(range(nc)).to_numpy(dtype=np.float64)
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
        method, solver, iterations, converged, final_loss, eta, tau, weighting, x0, tol, max_iter,
        sign_mode, fallback, identifiability_policy, n_classes, classes, n_workers, n_tasks,
        n_labels, n_duplicates_dropped, n_ties, n_fallback_tasks, frac_workers_identified,
        frac_labels_identified, frac_tasks_identified.
    loss_trace : numpy.ndarray
        PGD: L(x^k) per iteration; DS: negative log-likelihood per EM iteration; mv: empty.
    """

    skills: pd.DataFrame
    consensus: pd.DataFrame
    diagnostics: pd.DataFrame
    metadata: dict[str, Any]
    loss_trace: np.ndarray = field(default_factory=lambda: np.empty(0))

    def metadata_frame(self) -> pd.DataFrame:
        """The metadata as a one-row DataFrame (lists are joined with ``,``)."""
        row = {k: (",".join(map(str, v)) if isinstance(v, list | tuple) else v) for k, v in self.metadata.items()}
        return pd.DataFrame([row])


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
    spectral: bool = True,
    dense_eig_max: int = 2000,
    witness: bool = True,
    ds_tol: float = 1e-6,
    ds_max_iter: int = 100,
    ds_smoothing: float = 0.01,
    graph_report: WorkerGraphReport | None = None,
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
    ``identifiability_policy="raise"`` raises ``ValueError`` listing every failing component
    (id, reason, size, labels, tasks, worker ids) when any worker is isolated or in a bipartite
    component; ``"flag"`` fits the ok workers and marks the rest (skill NaN, weight 0).

    ``method="onecoin_ds" | "ds"``: Dawid–Skene EM baselines (``crowdflow.models.dawid_skene``,
    spec §7); skills table from the EM accuracies (status informational, from the graph).
    ``method="mv"``: majority vote (``crowdflow.models.majority``); skill NaN, accuracy =
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
        ``gd`` = spec PGD (default); ``scaled`` = Jacobi-preconditioned PGD of the same objective;
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
    spectral, dense_eig_max, witness
        Diagnostics options (eigenvalues; dense/eigsh threshold; odd-cycle witnesses).
    ds_tol, ds_max_iter, ds_smoothing
        EM settings of the DS baselines.
    graph_report : WorkerGraphReport, optional
        The interaction-graph report of these labels when the caller already has it (the pipeline's
        graph check), so N = B Bᵀ and the components are not computed twice.

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
    lm, dropped = prepare_labels(labels, classes, duplicates)
    m = lm.n_classes
    report = graph_report if graph_report is not None else worker_graph_report(lm)
    moments = label_moments(lm, co_labels=report.co_labels, min_pair_count=min_pair_count)
    n_pruned = 0
    if prune_spammers is not None:
        moments, n_pruned = prune_spammer_edges(moments, *prune_spammers)
    n_mat = moments.co_labels
    graph = report.graph if (min_pair_count <= 1 and prune_spammers is None) else components(n_mat)
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
            ds_tol=ds_tol,
            ds_max_iter=ds_max_iter,
            ds_smoothing=ds_smoothing,
        )

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

    idx = np.flatnonzero(active)
    skills = np.full(lm.n_workers, np.nan)
    fit_comp = np.full(lm.n_workers, -1, dtype=np.int64)
    fit: RankOneFit | None = None
    if idx.size:
        w_sub = w_all[idx][:, idx]
        c_sub = moments.c_hat[idx][:, idx]
        # components of the active subgraph = active components of ag, renumbered 0.. in order
        sub_labels = np.unique(ag.labels[idx], return_inverse=True)[1].astype(np.int64)
        lo_s, hi_s = lo[idx], hi[idx]
        if sign_mode == "bfs":
            eps = 1e-3
            lo_fit = np.minimum(np.full(idx.size, eps), hi_s)
            c_fit = sp.csr_matrix((np.abs(c_sub.data), c_sub.indices, c_sub.indptr), shape=c_sub.shape)
            fit = fit_rank_one(c_fit, w_sub, lo_fit, hi_s, x0=x0, eta=eta, tol=tol, max_iter=max_iter, solver=solver)
            wt = w_sub.tocoo()
            conf = sp.csr_matrix(
                (fit.x[wt.row] * fit.x[wt.col] * np.sqrt(wt.data), (wt.row, wt.col)), shape=w_sub.shape
            )
            x = resolve_signs(fit.x, sub_labels, "bfs", c_hat=c_sub, confidence=conf)
        else:
            fit = fit_rank_one(c_sub, w_sub, lo_s, hi_s, x0=x0, eta=eta, tol=tol, max_iter=max_iter, solver=solver)
            x = resolve_signs(fit.x, sub_labels, "sum_rule")
        x = np.clip(x, lo_s, hi_s)  # multiclass box is asymmetric: keep the flipped solution inside
        skills[idx] = x
        fit_comp[idx] = sub_labels
    else:
        log.warning("no identifiable worker: every task falls back to %s", fallback)

    v = vote_weights(skills, m, lo, hi)
    cons = weighted_consensus(lm, v, identified=active, fallback=fallback, tie_break=tie_break, seed=seed)
    accuracy = ((m - 1) * skills + 1) / m
    table = pd.DataFrame(
        {
            "worker": lm.workers.astype(str),
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
    )
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
    ds_tol: float,
    ds_max_iter: int,
    ds_smoothing: float,
) -> SkillsResult:
    nan = np.full(lm.n_workers, np.nan)
    trace = np.empty(0)
    if method == "mv":
        res = majority_vote(lm, tie_break=tie_break, seed=seed)
        winner = pd.Categorical(res.consensus["label"], categories=lm.classes).codes
        agree = (lm.class_idx == winner[lm.task_idx]).astype(np.float64)
        accuracy = np.bincount(lm.worker_idx, weights=agree, minlength=lm.n_workers) / np.maximum(n_i, 1)
        skill = nan
        weight = np.ones(lm.n_workers)
        cons = res.consensus.assign(fallback=False)
        meta.update({"iterations": 0, "converged": True, "final_loss": float("nan"), "n_ties": res.n_ties})
    else:
        fn = dawid_skene.one_coin_dawid_skene if method == "onecoin_ds" else dawid_skene.dawid_skene
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
            }
        )
    ok = status == "ok"
    table = pd.DataFrame(
        {
            "worker": lm.workers.astype(str),
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
    )
    meta.update(
        {
            "eta": float("nan"),
            "n_fallback_tasks": 0,
            "frac_workers_identified": float(ok.mean()),
            "frac_labels_identified": float(ok[lm.worker_idx].mean()),
            "frac_tasks_identified": float(np.unique(lm.task_idx[ok[lm.worker_idx]]).size / lm.n_tasks),
        }
    )
    return SkillsResult(skills=table, consensus=cons, diagnostics=diag, metadata=meta, loss_trace=trace)
