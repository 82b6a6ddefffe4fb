"""The agent graph in the layouts DJAM needs (docs/methods/personal_models.md §1.1, §2.1).

Undirected edges ``{u, v}`` (``u < v``) with weights ``W_uv > 0``, and one directed arc per copy
``C_i[k]`` (CSR by holder i), so that ``b_i = Σ_k W_ik C_i[k]`` is one sparse product; weighted degrees
``w_i = Σ_k W_ik``, the Laplacian ``L = D − W`` and a greedy proper edge colouring (matchings).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import cast

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components


@dataclass(frozen=True)
class AgentGraph:
    """Undirected weighted agent graph in the two layouts DJAM needs.

    Edges: ``u < v`` (dense ids), weight ``w``; arcs (directed, one per copy ``C_i[k]``): CSR by holder
    ``i`` with neighbour ``nbr`` and weight ``warc``; ``rev[α]`` is the reverse arc; ``a_uv[e]`` is the
    arc holding u's copy of v, ``a_vu[e]`` v's copy of u.
    """

    n: int
    u: np.ndarray
    v: np.ndarray
    w: np.ndarray
    ptr: np.ndarray
    holder: np.ndarray
    nbr: np.ndarray
    warc: np.ndarray
    rev: np.ndarray
    edge_of_arc: np.ndarray
    a_uv: np.ndarray
    a_vu: np.ndarray

    @staticmethod
    def build(n: int, u: np.ndarray, v: np.ndarray, w: np.ndarray) -> AgentGraph:
        u = np.asarray(u, dtype=np.int64)
        v = np.asarray(v, dtype=np.int64)
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        order = np.lexsort((hi, lo))
        u, v, w = lo[order], hi[order], np.asarray(w, dtype=np.float64)[order]
        m = u.size
        holder = np.concatenate([u, v])
        nbr = np.concatenate([v, u])
        eid = np.concatenate([np.arange(m), np.arange(m)])
        aorder = np.lexsort((nbr, holder))
        holder, nbr, eid = holder[aorder], nbr[aorder], eid[aorder]
        pos = np.empty(2 * m, dtype=np.int64)
        pos[aorder] = np.arange(2 * m)
        a_uv, a_vu = pos[:m], pos[m:]
        rev = np.empty(2 * m, dtype=np.int64)
        rev[a_uv] = a_vu
        rev[a_vu] = a_uv
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(holder, minlength=n), out=ptr[1:])
        return AgentGraph(
            n=n,
            u=u,
            v=v,
            w=w,
            ptr=ptr,
            holder=holder,
            nbr=nbr,
            warc=w[eid],
            rev=rev,
            edge_of_arc=eid,
            a_uv=a_uv,
            a_vu=a_vu,
        )

    @property
    def n_edges(self) -> int:
        return int(self.u.size)

    @property
    def degree(self) -> np.ndarray:
        """Weighted degree w_i = Σ_k W_ik."""
        return np.bincount(self.holder, weights=self.warc, minlength=self.n).astype(np.float64)

    @property
    def n_neighbours(self) -> np.ndarray:
        return np.diff(self.ptr)

    def weights(self) -> sp.csr_matrix:
        """Symmetric W (CSR, rows = holders)."""
        return sp.csr_matrix((self.warc, self.nbr, self.ptr), shape=(self.n, self.n))

    @cached_property
    def lap(self) -> sp.csr_matrix:
        """L = D − W (cached)."""
        return cast(sp.csr_matrix, (sp.diags(self.degree) - self.weights()).tocsr())

    def laplacian(self) -> sp.csr_matrix:
        """L = D − W."""
        return self.lap

    def holder_matrix(self) -> sp.csr_matrix:
        """S (n × 2|E|) with S[holder α, α] = W_α, so that b = S C."""
        a = np.arange(self.holder.size)
        return sp.csr_matrix((self.warc, (self.holder, a)), shape=(self.n, a.size))

    def components(self) -> np.ndarray:
        _, lab = connected_components(self.weights(), directed=False)
        return lab

    def edge_colouring(self) -> list[np.ndarray]:
        """Greedy edge colouring (≤ 2Δ − 1 colours), each class a matching (docs/methods/personal_models.md §6.2)."""
        used: list[set[int]] = [set() for _ in range(self.n)]
        colour = np.empty(self.n_edges, dtype=np.int64)
        for e, (a, b) in enumerate(zip(self.u.tolist(), self.v.tolist(), strict=True)):
            c = 0
            ua, ub = used[a], used[b]
            while c in ua or c in ub:
                c += 1
            colour[e] = c
            ua.add(c)
            ub.add(c)
        return [np.flatnonzero(colour == c) for c in range(int(colour.max(initial=-1)) + 1)]
