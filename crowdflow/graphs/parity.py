"""The worker graph without the worker pairs: a parity union-find over the labels.

docs/methods/skills.md §3.2, docs/scale.md (memory laws). Workers i, j are adjacent in the worker
interaction graph iff they labelled a common task. A task with k ≥ 3 distinct workers puts a triangle
(an odd cycle) in their component, so that component is not bipartite whatever else it holds; only
tasks with exactly two workers can leave a component bipartite. A union-find whose every node keeps the
parity of its path to its root (0: same side, 1: other side of a 2-colouring) decides, in one pass over
the labels grouped by task:

- each task with k ≥ 2 workers joins its workers to its first one with parity 1 (they are adjacent);
  joining two workers of one set with equal parities closes an odd cycle, and so does any task with
  k ≥ 3 distinct workers: the set's root is marked ``odd``;
- at the end, the sets are the connected components, ``odd`` is "not bipartite", a set of one worker is
  an isolated worker, and the parity to the root is a proper 2-colouring of a bipartite component.

Memory O(workers) for the forest (plus the labels the caller already holds), never O(worker pairs);
time O(labels · α(workers)). The partitioned path (tasks split over buckets, a worker's tasks in many
buckets) runs the same union-find in each bucket and merges the buckets' forests in the flow
(:meth:`ParityForest.merge`): O(workers) numbers per bucket.

``n_partners`` (distinct co-labellers of a worker) is the one column that counts pairs; it is computed
exactly without storing them (:func:`distinct_partners`: a marker array over workers, the same
Σ_t k_t² work as the pair count, O(workers + labels) memory).
"""

from __future__ import annotations

import numpy as np

from crowdflow.compiled import compiled_kernel
from crowdflow.graphs.structure import Components


@compiled_kernel
def _find(parent: np.ndarray, par: np.ndarray, x: int) -> tuple[int, int]:
    """Root of ``x`` and the parity of its path to the root, compressing the path."""
    r = x
    p = 0
    while parent[r] != r:
        p ^= par[r]
        r = parent[r]
    y = x
    py = p
    while parent[y] != y:
        nxt = parent[y]
        pn = py ^ par[y]
        parent[y] = r
        par[y] = py
        y = nxt
        py = pn
    return r, p


@compiled_kernel
def _join(parent: np.ndarray, par: np.ndarray, rank: np.ndarray, odd: np.ndarray, a: int, b: int, d: int) -> None:
    """Record parity(a) XOR parity(b) = d; a contradiction marks the set odd (an odd cycle)."""
    ra, pa = _find(parent, par, a)
    rb, pb = _find(parent, par, b)
    if ra == rb:
        if (pa ^ pb) != d:
            odd[ra] = True
        return
    link = pa ^ pb ^ d  # parity of the attached root to the new root
    if rank[ra] < rank[rb]:
        ra, rb = rb, ra
    parent[rb] = ra
    par[rb] = link
    if rank[ra] == rank[rb]:
        rank[ra] += 1
    if odd[rb]:
        odd[ra] = True


@compiled_kernel
def _parity_forest(
    task_indptr: np.ndarray, workers: np.ndarray, n_workers: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    parent = np.arange(n_workers)
    par = np.zeros(n_workers, dtype=np.int64)
    rank = np.zeros(n_workers, dtype=np.int64)
    odd = np.zeros(n_workers, dtype=np.bool_)
    for t in range(task_indptr.size - 1):
        s = task_indptr[t]
        e = task_indptr[t + 1]
        if e - s < 2:
            continue
        a = workers[s]
        distinct = 1
        for j in range(s + 1, e):
            b = workers[j]
            if b == a:
                continue
            _join(parent, par, rank, odd, a, b, 1)
            distinct += 1
        if distinct >= 3:
            r, _ = _find(parent, par, a)
            odd[r] = True
    return parent, par, rank, odd


@compiled_kernel
def _merge(
    parent: np.ndarray,
    par: np.ndarray,
    rank: np.ndarray,
    odd: np.ndarray,
    f_parent: np.ndarray,
    f_par: np.ndarray,
    f_odd: np.ndarray,
) -> None:
    for x in range(f_parent.size):
        if f_parent[x] != x:
            _join(parent, par, rank, odd, x, f_parent[x], f_par[x])
        if f_odd[x]:
            r, _ = _find(parent, par, x)
            odd[r] = True


@compiled_kernel
def _flatten(parent: np.ndarray, par: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = parent.size
    root = np.empty(n, dtype=np.int64)
    parity = np.empty(n, dtype=np.int64)
    for x in range(n):
        r, p = _find(parent, par, x)
        root[x] = r
        parity[x] = p
    return root, parity


@compiled_kernel
def _distinct_partners(task_indptr: np.ndarray, workers: np.ndarray, n_workers: int) -> np.ndarray:
    # each worker's tasks by one counting sort of the labels (O(labels + workers), no comparison sort), then a
    # marker pass: worker i counts the co-labellers v of its tasks whose mark is not yet i
    n_tasks = task_indptr.size - 1
    w_indptr = np.zeros(n_workers + 1, dtype=np.int64)
    for j in range(workers.size):
        w_indptr[workers[j] + 1] += 1
    for i in range(n_workers):
        w_indptr[i + 1] += w_indptr[i]
    fill = w_indptr[:-1].copy()
    w_tasks = np.empty(workers.size, dtype=np.int32)  # task codes < 2^31 (LabelMatrix's int32 codes)
    for t in range(n_tasks):
        for j in range(task_indptr[t], task_indptr[t + 1]):
            v = workers[j]
            w_tasks[fill[v]] = t
            fill[v] += 1
    mark = np.full(n_workers, -1, dtype=np.int32)
    out = np.zeros(n_workers, dtype=np.int64)
    for i in range(n_workers):
        c = 0
        for q in range(w_indptr[i], w_indptr[i + 1]):
            t = w_tasks[q]
            for j in range(task_indptr[t], task_indptr[t + 1]):
                v = workers[j]
                if v != i and mark[v] != i:
                    mark[v] = i
                    c += 1
        out[i] = c
    return out


class ParityForest:
    """A parity union-find forest over ``n`` workers (arrays owned by the instance; small: 4 numbers a worker)."""

    def __init__(self, parent: np.ndarray, par: np.ndarray, rank: np.ndarray, odd: np.ndarray) -> None:
        self.parent, self.par, self.rank, self.odd = parent, par, rank, odd

    @classmethod
    def from_labels(cls, task_indptr: np.ndarray, workers: np.ndarray, n_workers: int) -> ParityForest:
        """One pass over labels grouped by task (``task_indptr``, worker code per label, one label a (task, worker))."""
        if n_workers == 0:
            z = np.zeros(0, dtype=np.int64)
            return cls(z, z.copy(), z.copy(), np.zeros(0, dtype=bool))
        p, q, r, o = _parity_forest(
            np.ascontiguousarray(task_indptr, dtype=np.int64), np.ascontiguousarray(workers, dtype=np.int64), n_workers
        )
        return cls(p, q, r, o)

    def merge(self, other: ParityForest) -> None:
        """Add another forest over the same workers (e.g. another bucket's tasks): O(workers)."""
        if other.parent.size != self.parent.size:
            raise ValueError(f"forests over {self.parent.size} and {other.parent.size} workers")
        _merge(self.parent, self.par, self.rank, self.odd, other.parent, other.par, other.odd)

    def components(self) -> Components:
        """The worker graph's :class:`~crowdflow.graphs.structure.Components` (numbered by smallest worker,
        BFS colouring)."""
        n = self.parent.size
        if n == 0:
            e = np.zeros(0, dtype=np.int64)
            return Components(labels=e, n_components=0, bipartite=np.zeros(0, bool), colour=e.astype(np.int8), sizes=e)
        root, parity = _flatten(self.parent, self.par)
        odd_root = np.zeros(n, dtype=bool)
        odd_root[root[self.odd]] = True  # odd flags sit on roots, but merged sets may have moved
        first = np.full(n, n, dtype=np.int64)
        np.minimum.at(first, root, np.arange(n, dtype=np.int64))
        roots = np.flatnonzero(first < n)
        order = roots[np.argsort(first[roots], kind="stable")]  # components by their smallest worker
        comp_of_root = np.empty(n, dtype=np.int64)
        comp_of_root[order] = np.arange(order.size)
        labels = comp_of_root[root]
        bipartite = ~odd_root[order]
        # BFS colour: depth parity from the smallest worker, i.e. parity relative to that worker
        smallest = first[order]
        colour = (parity ^ parity[smallest][labels]).astype(np.int8)
        colour[~bipartite[labels]] = 0
        sizes = np.bincount(labels, minlength=order.size)
        return Components(labels=labels, n_components=int(order.size), bipartite=bipartite, colour=colour, sizes=sizes)


@compiled_kernel
def _distinct_partners_bits(task_indptr: np.ndarray, workers: np.ndarray, n_workers: int) -> np.ndarray:
    # the pairs of each task set bits of a W × W bit matrix (tasks in order: the labels are read once, in order,
    # and the bits stay in cache for a few thousand workers), then each row's bits are counted
    words = (n_workers + 63) >> 6
    bits = np.zeros(n_workers * words, dtype=np.uint64)
    one = np.uint64(1)
    for t in range(task_indptr.size - 1):
        a, b = task_indptr[t], task_indptr[t + 1]
        for p in range(a, b):
            base = workers[p] * words
            for q in range(a, b):
                v = workers[q]
                bits[base + (v >> 6)] |= one << np.uint64(v & 63)
    out = np.zeros(n_workers, dtype=np.int64)
    m1, m2, m4 = np.uint64(0x5555555555555555), np.uint64(0x3333333333333333), np.uint64(0x0F0F0F0F0F0F0F0F)
    h01 = np.uint64(0x0101010101010101)
    for i in range(n_workers):
        c = 0
        for j in range(i * words, (i + 1) * words):
            x = bits[j]
            x = x - ((x >> one) & m1)
            x = (x & m2) + ((x >> np.uint64(2)) & m2)
            x = (x + (x >> np.uint64(4))) & m4
            c += int((x * h01) >> np.uint64(56))
        # a worker's own bit is set by each of its tasks (one label a (task, worker)): not a partner
        own = bits[i * words + (i >> 6)] >> np.uint64(i & 63) & one
        out[i] = c - int(own)
    return out


#: workers up to which :func:`distinct_partners` counts with a W × W bit matrix (W²/8 bytes: 2 MB here)
BITSET_WORKERS = 4096


def distinct_partners(task_indptr: np.ndarray, workers: np.ndarray, n_workers: int) -> np.ndarray:
    """Distinct co-labellers per worker (the row lengths of N) without forming N.

    Up to ``BITSET_WORKERS`` workers the pairs of each task set bits of a W × W bit matrix, read once in task
    order (W²/8 bytes, issue #36: ~10× faster than the markers at 10⁶ labels and 3,000 workers); above, a marker
    array over the workers' tasks, O(workers + labels) memory. Both count exactly, so they give the same integers.
    """
    w = np.asarray(workers)
    if w.dtype not in (np.int32, np.int64):
        w = w.astype(np.int64)
    indptr = np.asarray(task_indptr, dtype=np.int64)
    if 0 < n_workers <= BITSET_WORKERS:
        return _distinct_partners_bits(indptr, w, int(n_workers))
    return _distinct_partners(indptr, w, int(n_workers))


def worker_strength(task_indptr: np.ndarray, workers: np.ndarray, n_workers: int) -> np.ndarray:
    """Σ_j N_ij = Σ_{t ∋ i} (k_t − 1) per worker (the row sums of N, the skills table's ``strength``) without N.

    One label per (task, worker): each of worker i's tasks adds its k_t − 1 co-labellers. Exact (float64 of an
    integer count), O(labels); a sum over tasks, so the sum over task buckets is the statistic of all the labels.
    """
    k: np.ndarray = np.diff(np.asarray(task_indptr, dtype=np.int64))
    per_label = np.repeat(k - 1, k).astype(np.float64)
    return np.bincount(np.asarray(workers, dtype=np.int64), weights=per_label, minlength=n_workers)
