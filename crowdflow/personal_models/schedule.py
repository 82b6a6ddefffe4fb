"""Which edges are activated, and in which batches (docs/methods/personal_models.md §2.3, §6.1).

:class:`EdgeStream` draws the per-replica edge sequences (``edge``: i.i.d. uniform edges; ``agent``: a
uniform agent wakes and picks a uniform neighbour; ``colour``: sweeps over the classes of an edge
colouring), in fixed-size blocks so that a seed's sequence does not depend on how it is consumed.
:func:`matching_batches` splits a sequence into vertex-disjoint batches whose in-order application is
the sequence itself: the ``matching`` engine of DJAM and CL-ADMM applies each batch at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast

import numpy as np

from crowdflow.personal_models.graph import AgentGraph

Sampling = Literal["edge", "agent", "colour"]
Engine = Literal["simulation", "matching"]


class EdgeStream:
    """Per-replica random edge sequences, drawn in fixed-size blocks so that the sequence of a seed is
    independent of how it is consumed (a single run with seed s equals replica s of a Monte Carlo)."""

    _BLOCK = 4096

    def __init__(self, graph: AgentGraph, seeds: Sequence[int], sampling: str, schedule: np.ndarray | None = None):
        if graph.n_edges == 0 and schedule is None:
            raise ValueError("the agent graph has no edges: there is nothing to activate")
        if sampling not in ("edge", "agent", "colour"):
            raise ValueError(f"unknown sampling '{sampling}' (edge | agent | colour)")
        self.graph = graph
        self.sampling = sampling
        self.rngs = [np.random.default_rng(int(s)) for s in seeds]
        self.R = len(self.rngs)
        self.buf = np.zeros((self.R, 0), dtype=np.int64)
        if schedule is not None:
            sched = np.asarray(schedule, dtype=np.int64)
            self.fixed: np.ndarray | None = np.broadcast_to(sched, (self.R, sched.size))
            self.fixed_pos = 0
        elif sampling == "colour":
            self.fixed = None
            self.sweep = np.concatenate(graph.edge_colouring()) if graph.n_edges else np.zeros(0, np.int64)
        else:
            self.fixed = None
        if sampling == "agent":
            self.active = np.flatnonzero(graph.n_neighbours > 0)

    def _draw(self, rng: np.random.Generator, k: int) -> np.ndarray:
        g = self.graph
        if self.sampling == "edge":
            return rng.integers(0, g.n_edges, size=k)
        if self.sampling == "agent":
            a = self.active[rng.integers(0, self.active.size, size=k)]
            deg = g.ptr[a + 1] - g.ptr[a]
            pick = np.minimum((rng.random(k) * deg).astype(np.int64), deg - 1)
            return cast(np.ndarray, g.edge_of_arc[g.ptr[a] + pick])
        raise ValueError(f"unknown sampling '{self.sampling}'")

    def take(self, k: int) -> np.ndarray:
        if self.fixed is not None:
            out = self.fixed[:, self.fixed_pos : self.fixed_pos + k]
            self.fixed_pos += k
            return out
        if self.sampling == "colour":
            m = self.sweep.size
            start = getattr(self, "_pos", 0)
            idx = (start + np.arange(k)) % m
            self._pos = (start + k) % m
            return np.broadcast_to(self.sweep[idx], (self.R, k))
        while self.buf.shape[1] < k:
            more = np.stack([self._draw(r, self._BLOCK) for r in self.rngs])
            self.buf = np.concatenate([self.buf, more], axis=1)
        out, self.buf = self.buf[:, :k], self.buf[:, k:]
        return out


def matching_batches(seq: np.ndarray, u: np.ndarray, v: np.ndarray) -> list[np.ndarray]:
    """Split a sequence of edge activations into matchings whose in-order application equals the sequence.

    Round t activates edge ``seq[t] = {u, v}``. Its *level* is ``ℓ(t) = 1 + max ℓ(s)`` over the earlier
    rounds s < t that share an agent with it (``ℓ(t) = 1`` if none): the length of the longest chain of
    agent-sharing rounds ending at t. Batch ℓ holds the positions t with ``ℓ(t) = ℓ``, in sequence order.

    Why applying the batches one after another, all rounds of a batch at once, gives exactly the
    state of applying the rounds one by one (DJAM and CL-ADMM, docs/methods/personal_models.md §6.1):

    1. *Each batch is a matching.* If s < t share an agent, ``ℓ(t) ≥ ℓ(s) + 1``, so two rounds of one
       batch never share an agent.
    2. *A round only touches its endpoints' state.* A DJAM round on {i, j} reads and writes only state
       held by i and j: the copies ``C_i[·]``, ``C_j[·]``, the sums ``b_i``, ``b_j`` and the readouts
       ``θ̂_i``, ``θ̂_j`` (it writes ``C_j[i]``, which j holds). So rounds of a matching touch disjoint
       state and applying them simultaneously equals applying them in any order.
    3. *Every agent sees its rounds in the original order.* The rounds touching agent x have strictly
       increasing levels in sequence order (by 1.), so the batch schedule is a topological order of the
       "shares an agent" precedence graph. By induction over the batches: when round t is applied,
       its two endpoints have received exactly the rounds s < t that touch them (lower levels, already
       applied) and none of the later ones (higher levels), i.e. the same inputs as in the sequence.

    Hence the final state is the sequential one, operation for operation; with the same per-element
    floating-point arithmetic (as :func:`_apply_rounds` vs :func:`serial_rounds`) it is the same bits.
    On a random sequence of |E| rounds over a graph of bounded degree the levels are few (41 for the
    n = 10⁴, |E| ≈ 31,000 field instance, i.e. batches of ~770 rounds, against ~58 for runs of
    consecutive disjoint rounds), which is what makes the vectorised ``matching`` engine fast.

    Parameters
    ----------
    seq : array of int
        Edge indices in activation order.
    u, v : array of int
        Endpoints per edge index (agent ids).

    Returns
    -------
    list of numpy.ndarray
        Positions into ``seq`` per batch (batch 1 first), each in increasing order.
    """
    seq = np.asarray(seq, dtype=np.int64)
    k = seq.size
    if k == 0:
        return []
    return _level_batches(u[seq], v[seq])


def _level_batches(a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    """Level sets of ℓ(t) = 1 + max(ℓ(prev_a(t)), ℓ(prev_b(t))) for rounds on agent pairs (a[t], b[t]).

    ``prev_x(t)`` / ``next_x(t)`` are the last round before / first round after t touching agent x,
    found with one sort of the 2k (agent, round) occurrences. The levels are then peeled like a
    topological sort (Kahn): level 1 is the rounds without predecessors; removing a level releases the
    rounds all of whose predecessors are removed. Total work O(k log k) for the sort plus O(k) in
    small per-level array operations (see :func:`matching_batches`).
    """
    k = a.size
    occ_agent = np.concatenate([a, b]).astype(np.int64)
    occ_t = np.concatenate([np.arange(k), np.arange(k)])
    order = np.argsort(occ_agent * (k + 1) + occ_t)  # by agent, then round (keys are distinct)
    sa, st = occ_agent[order], occ_t[order]
    same = sa[1:] == sa[:-1]
    prev_sorted = np.full(2 * k, k, dtype=np.int64)  # k = none
    prev_sorted[1:][same] = st[:-1][same]
    next_sorted = np.full(2 * k, k, dtype=np.int64)
    next_sorted[:-1][same] = st[1:][same]
    prev = np.empty(2 * k, dtype=np.int64)
    prev[order] = prev_sorted
    nxt = np.empty(2 * k, dtype=np.int64)
    nxt[order] = next_sorted
    indeg = np.zeros(k + 1, dtype=np.int64)  # indeg[k] absorbs releases of the "none" sentinel
    indeg[:k] = (prev[:k] < k).astype(np.int64) + (prev[k:] < k)
    na, nb = nxt[:k], nxt[k:]
    batches: list[np.ndarray] = []
    front = np.flatnonzero(indeg[:k] == 0)
    while front.size:
        batches.append(front)
        succ = np.concatenate([na[front], nb[front]])
        np.subtract.at(indeg, succ, 1)
        succ = succ[succ < k]
        succ = np.sort(succ[indeg[succ] == 0])
        if succ.size > 1:  # a round released through both of its agents appears twice
            succ = succ[np.concatenate(([True], succ[1:] != succ[:-1]))]
        front = succ
    return batches
