"""Pairwise statistics of a label matrix: co-label counts N, agreements and the moment matrix C^.

For workers i ≠ j, N_ij counts the tasks both labelled and Agree_ij those on which both gave the same
label. Under the one-coin model with M classes the agreement rate a_ij = Agree_ij / N_ij has mean
((M − 1)/M) s_i s_j + 1/M, so

    C^_ij = (M a_ij − 1)/(M − 1)

estimates s_i s_j without bias on every observed pair (docs/methods/skills.md §2.1). N and Agree come
from one exact integer sparse product (``crowdflow.graphs.pair_counts``); nothing dense W×W is ever
allocated. Also here: the optional spammer pruning, the edge weights w_ij = B(N_ij) of the objective,
and the packing P = N + 2³²·Agree in which streamed and partitioned counts are summed
(docs/methods/skills.md §2.6, §2.2, §4.2, §4.3).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from crowdflow.graphs import labels_by_task, pair_counts
from crowdflow.labels import LabelMatrix
from crowdflow.skills.types import Weighting

#: P = N + K·Agree packs both counts of a worker pair in one exact int64 (K = 2³², N and Agree < K)
_PACK_K = np.int64(1) << np.int64(32)

#: Peak bytes rank-one PGD takes per stored worker pair in the flow: the stored moments (N int32 + C^ float64 on
#: shared int32 indices: 16 bytes, :class:`LabelMoments`) plus the fit's working arrays (edge weights, the active
#: subgraph, w∘C^, the diagnostics' temporaries). Measured by benchmarks/skills_memory.py as the pgd fit's peak
#: over the pair-free mv fit's, per stored pair: 22–52 bytes from 10^3 to 2·10^5 workers at 10^6 labels
#: (benchmarks/results/skills_memory.md); 56 is that worst case rounded up (60 before: float64 N, agreements, C^
#: and weights, each with its own indices, and growing buffers). docs/scale.md, memory laws.
PGD_BYTES_PER_PAIR = 56


class LabelMoments:
    """Sparse pairwise statistics of a label matrix (docs/methods/skills.md §1.4, §2.1).

    The matrices are symmetric W×W CSR with zero diagonal and *identical* canonical sparsity pattern (the
    nonzeros of N), so their ``data`` arrays are aligned entry by entry. Stored: N with int32 counts and int32
    column indices, and C^ (float64) on the same index arrays: **16 bytes per stored entry** (plus the row
    pointer, 8 bytes a worker). The agreements are not stored: :attr:`agreements` derives them exactly from N and
    C^ when asked (Agree = round(N·((M − 1) C^ + 1)/M), exact for counts far below 2⁵⁰), unless given.

    Attributes
    ----------
    co_labels : scipy.sparse.csr_matrix
        N_ij = number of tasks labelled by both i and j (int32 counts from :func:`label_moments`; any numeric
        dtype accepted).
    agreements : scipy.sparse.csr_matrix
        Number of those tasks on which i and j gave the same label (may hold explicit zeros).
    c_hat : scipy.sparse.csr_matrix
        C^_ij = (M a_ij − 1)/(M − 1), a_ij = agreements_ij / N_ij (may hold explicit zeros).
    n_classes : int
        M.
    """

    __slots__ = ("_agreements", "c_hat", "co_labels", "n_classes")

    def __init__(
        self, co_labels: sp.csr_matrix, agreements: sp.csr_matrix | None, c_hat: sp.csr_matrix, n_classes: int
    ) -> None:
        self.co_labels = co_labels
        self._agreements = agreements
        self.c_hat = c_hat
        self.n_classes = n_classes

    @property
    def agreements(self) -> sp.csr_matrix:
        """Agree on the pattern of N (float64): the stored one if given, else derived from N and C^."""
        if self._agreements is not None:
            return self._agreements
        m = self.n_classes
        n = self.co_labels
        data = np.rint(n.data.astype(np.float64) * (((m - 1) * self.c_hat.data + 1.0) / m))
        return sp.csr_matrix((data, n.indices, n.indptr), shape=n.shape)

    @property
    def nbytes(self) -> int:
        """Bytes held: N's and C^'s data, their shared index arrays (and stored agreements, if any)."""
        n, c = self.co_labels, self.c_hat
        out = n.data.nbytes + n.indices.nbytes + n.indptr.nbytes + c.data.nbytes
        if not np.shares_memory(c.indices, n.indices):
            out += c.indices.nbytes + c.indptr.nbytes
        if self._agreements is not None:
            out += self._agreements.data.nbytes
        return int(out)


def moments_from_counts(
    co_labels: sp.csr_matrix, agreements: np.ndarray, n_classes: int, min_pair_count: int = 1
) -> LabelMoments:
    """C^ = (M a − 1)/(M − 1), a = Agree/N, on the stored entries of N (docs/methods/skills.md §2.1).

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
    counts = n.data if n.data.dtype == np.int32 or n.data.max(initial=0) >= 2**31 else n.data.astype(np.int32)
    ag = np.asarray(agreements)
    indices, indptr = n.indices, n.indptr
    if min_pair_count > 1:
        keep, indptr = _frequent_pairs(counts, indptr, min_pair_count)
        counts, ag, indices = counts[keep], ag[keep], indices[keep]
    # C^ = (M·(Agree/N) − 1)/(M − 1), the same operations in place: one float64 array, no temporaries
    c = counts.astype(np.float64)
    np.divide(ag, c, out=c)
    del ag
    c *= m
    c -= 1.0
    c /= m - 1.0

    def mk(data: np.ndarray) -> sp.csr_matrix:
        out = sp.csr_matrix((data, indices, indptr), shape=n.shape)
        out.has_sorted_indices = n.has_sorted_indices
        return out

    co = mk(counts)
    c_hat = sp.csr_matrix((c, co.indices, co.indptr), shape=n.shape)  # the same index arrays as N
    c_hat.has_sorted_indices = co.has_sorted_indices
    return LabelMoments(co_labels=co, agreements=None, c_hat=c_hat, n_classes=m)


def _frequent_pairs(nd: np.ndarray, indptr: np.ndarray, min_pair_count: int) -> tuple[np.ndarray, np.ndarray]:
    """The stored entries with N_ij ≥ min_pair_count and the row pointer of the matrix they make."""
    w = indptr.size - 1
    keep = nd >= min_pair_count
    rows = np.repeat(np.arange(w), np.diff(indptr))
    out = np.zeros(w + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=w), out=out[1:])
    return keep, out


def co_label_matrix(lm: LabelMatrix, min_pair_count: int = 1) -> sp.csr_matrix:
    """N alone, equal to ``label_moments(lm, min_pair_count=...).co_labels`` (float64, sorted indices).

    What the methods that fit no moments (mv, ds, onecoin_ds) need for their worker table and diagnostics:
    one pass without the agreements and C^ (docs/methods/skills.md §2.1).
    """
    indptr, w, _ = labels_by_task(lm)
    n, _ = pair_counts(indptr, w, None, lm.n_workers, lm.n_classes)
    nd = n.data.astype(np.float64)
    indices, rowptr = n.indices, n.indptr
    if min_pair_count > 1:
        keep, rowptr = _frequent_pairs(nd, rowptr, min_pair_count)
        nd, indices = nd[keep], indices[keep]
    out = sp.csr_matrix((nd, indices, rowptr), shape=n.shape)
    out.has_sorted_indices = True
    return out


def label_moments(lm: LabelMatrix, co_labels: sp.csr_matrix | None = None, min_pair_count: int = 1) -> LabelMoments:
    """Co-label counts N, agreements and the moment matrix C^ by sparse products (docs/methods/skills.md §2.1).

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
        Pairs with N_ij < min_pair_count are dropped (docs/methods/skills.md §2.1, §8.1; default 1 keeps all).

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
    """Optional spammer pruning (docs/methods/skills.md §2.6; off by default).

    Drops pair (i, j) when |C^_ij| < δ + c √(log W / N_ij) (the paper writes T where we read the
    per-pair N_ij). Workers whose skill is ≈ 0 then lose their edges and become isolated (weight 0);
    re-run the identifiability check on the result.

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
    """w_ij = B(N_ij) on the nonzeros of N (docs/methods/skills.md §2.2).

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
    out = sp.csr_matrix((data, n.indices, n.indptr), shape=n.shape)  # N's index arrays, shared (read-only use)
    out.has_sorted_indices = n.has_sorted_indices
    return out


def pack_counts(co_labels: sp.csr_matrix, agreements: np.ndarray) -> sp.csr_matrix:
    """P = N + 2³²·Agree on the pattern of N (int64): both counts in one matrix that sums exactly.

    Counts of disjoint sets of tasks (record batches, partitions) are added as packed matrices and
    unpacked once by :func:`moments_from_packed` (docs/methods/skills.md §4.2, §4.3).

    Parameters
    ----------
    co_labels : scipy.sparse.csr_matrix
        N (int64), e.g. from ``crowdflow.graphs.pair_counts``.
    agreements : numpy.ndarray
        Agreement count of every stored entry of ``co_labels``.
    """
    return sp.csr_matrix(
        (co_labels.data + _PACK_K * agreements, co_labels.indices, co_labels.indptr), shape=co_labels.shape
    )


def moments_from_packed(packed: sp.csr_matrix, n_classes: int, min_pair_count: int = 1) -> LabelMoments:
    """N, agreements and C^ from a sum of :func:`pack_counts` matrices.

    Sums the duplicate entries and sorts the indices of ``packed`` in place, then unpacks
    N = P mod 2³² and Agree = P div 2³² and builds the moments (:func:`moments_from_counts`).
    """
    total = sp.csr_matrix(packed)
    total.sum_duplicates()
    total.sort_indices()
    n_mat = sp.csr_matrix((total.data & (_PACK_K - 1), total.indices, total.indptr), shape=total.shape)
    n_mat.has_sorted_indices = True
    agree = total.data >> np.int64(32)
    return moments_from_counts(n_mat, agree, n_classes, min_pair_count)


def co_labels_from_packed(packed: sp.csr_matrix) -> sp.csr_matrix:
    """N alone (float64, W×W) from a summed, duplicate-free :func:`pack_counts` matrix: N = P mod 2³².

    What the worker-graph check needs, without building the agreements and C^ (:func:`moments_from_packed`).
    """
    n_mat = sp.csr_matrix(
        ((packed.data & (_PACK_K - 1)).astype(np.float64), packed.indices, packed.indptr), shape=packed.shape
    )
    n_mat.has_sorted_indices = packed.has_sorted_indices
    return n_mat
