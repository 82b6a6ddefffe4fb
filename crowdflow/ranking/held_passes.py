"""The flow side of the passes over held blocks of a partitioned ranking fit (:mod:`crowdflow.ranking.partitioned`).

:class:`_Passes` runs each pass over the blocks the executor holds (:func:`crowdflow.executors.hold`) with one task
per place that holds blocks, and combines the blocks' answers in block order, so a sum has the same bits however
the blocks are placed: the first pass's keyed edge sums, the trimming steps' kept sums at each block's fixed pair
positions (after a start's first step only the pairs whose kept rows changed come back) and the histograms.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from crowdflow.executors import MapFn, fold, held_groups, on_group_with, on_held
from crowdflow.ranking.held import HeldRows, add_at
from crowdflow.ranking.passes import (
    SKETCH_BINS,
    EdgeSums,
    _BlockKept,
    _Ctx,
    _each,
    _held_edges,
    _held_kept,
    _held_sketch,
    _KeptSums,
    _Rule,
)


@dataclass(frozen=True)
class _Kept:
    """A trimming step's sums on the pairs with a kept row (key order): keys, ``Σw, Σw·y°, Σw·y°²``, kept rows."""

    key: np.ndarray
    w: np.ndarray
    wy: np.ndarray
    wy2: np.ndarray
    n_rows: int


@dataclass(frozen=True)
class _Step:
    sums: _Kept
    n_changed: int


@dataclass
class _Dense:
    """Running sums of a trimming step over the global pairs, and the next block to add (blocks come in order)."""

    acc: np.ndarray
    n_kept: int = 0
    n_changed: int = 0
    block: int = 0


@dataclass
class _Passes:
    """The held blocks (:func:`crowdflow.executors.hold`), the executor, a pass counter and, after the first edge
    pass, the global pair keys and each block's pairs' positions among them."""

    handles: list[Any]
    executor: MapFn
    ctx: _Ctx
    count: int = 0
    key: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    where: list[np.ndarray | None] = field(default_factory=list)  # None: the block holds every pair, in key order
    held_passes: int = 0
    held_s: float = 0.0  # wall seconds of the passes over the held rows (the flow's fold included)
    blocks: list[np.ndarray] = field(default_factory=list)  # each block's (3, |E_b|) sums of the last step
    last: _Rule | None = None  # the rule of that step
    sent: int = 0  # numbers the trimming steps' blocks sent back
    groups: list[list[int]] | None = None  # the blocks grouped by where they are held

    def blockwise(self, fn: Callable[[HeldRows], Any], combine: Callable[[Any, Any], Any], acc: Any) -> Any:
        """``acc = combine(acc, fn(block))`` over the held blocks in block order, with one task per place that holds
        blocks (:func:`crowdflow.executors.held_groups`, asked once: held blocks do not move), not one per block: a
        pass's round trips do not grow with the blocks. Results that arrive ahead of their turn wait."""
        if self.groups is None:
            self.groups = held_groups(self.executor, self.handles)
        groups = self.groups
        items = [([self.handles[i] for i in g], None) for g in groups]
        pending: dict[int, Any] = {}
        turn = [0, 0]  # next group to arrive (the fold is ordered), next block to combine

        def take(a: Any, results: list[Any]) -> Any:
            pending.update(zip(groups[turn[0]], results, strict=True))
            turn[0] += 1
            while turn[1] in pending:
                a = combine(a, pending.pop(turn[1]))
                turn[1] += 1
            return a

        return fold(self.executor, on_group_with(partial(_each, fn)), items, take, acc, ordered=True)

    def base(self) -> EdgeSums:
        """Every row's edge sums, folded in block order; fixes the global pairs and each block's positions."""
        self.count += 1
        self.held_passes += 1
        t0 = time.perf_counter()
        out, keys = self.blockwise(partial(_held_edges, None, None), _add_base, (None, []))
        sums: EdgeSums = out.sums if out is not None else EdgeSums.combine([])
        self.key = sums.key
        # a block that holds every pair (the usual case at scale: a few blocks of many rows) adds its arrays as they
        # are, without a gather and scatter of every pair (the same additions)
        self.where = [None if k.size == sums.key.size else np.searchsorted(sums.key, k) for k in keys]
        self.held_s += time.perf_counter() - t0
        return sums

    def edges(self, rule: _Rule, prev: _Rule | None = None) -> _Step:
        """A trimming step: the kept rows' sums, each block's per-pair arrays added at its fixed positions in block
        order (the same additions, in the same order, as a fold of keyed sums: the same bits).

        Each block's arrays of the last step are kept here (``blocks``); a step whose ``prev`` is that step's rule
        asks each block only for the pairs with a row whose kept status changed (every other pair's sums are the
        kept ones, bit for bit), so a late step sends a few pairs instead of every pair of every block."""
        self.count += 1
        self.held_passes += 1
        t0 = time.perf_counter()
        delta = prev is not None and prev is self.last and len(self.blocks) == len(self.handles)
        if not delta:
            self.blocks = [np.zeros((3, 0)) for _ in self.handles]

        def add(acc: _Dense, r: _BlockKept) -> _Dense:
            b = acc.block
            if r.idx is None:
                self.blocks[b] = r.acc if r.acc.flags.writeable else r.acc.copy()  # updated in place below
            elif r.idx.size:
                self.blocks[b][:, r.idx] = r.acc
            at = self.where[b]
            if at is None:
                acc.acc += self.blocks[b]
            else:
                add_at(acc.acc, at, self.blocks[b])
            acc.n_kept += r.n_kept
            acc.n_changed += r.n_changed
            acc.block += 1
            self.sent += r.acc.size
            return acc

        out = self.blockwise(partial(_held_kept, rule, prev, delta), add, _Dense(np.zeros((3, self.key.size))))
        self.last = rule
        w, wy, wy2 = out.acc
        live = w > 0  # weights are > 0: the pairs with a kept row
        kept = _Kept(self.key[live], w[live], wy[live], wy2[live], out.n_kept)
        self.held_s += time.perf_counter() - t0
        return _Step(kept, out.n_changed if prev is not None else -1)

    def histogram(self, theta: np.ndarray, scale: float) -> np.ndarray:
        self.count += 1
        self.held_passes += 1
        t0 = time.perf_counter()

        def add(h: np.ndarray, r: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
            np.add.at(h, r[0].astype(np.int64), r[1])
            return h

        h: np.ndarray = self.blockwise(partial(_held_sketch, theta, scale), add, np.zeros(SKETCH_BINS))
        self.held_s += time.perf_counter() - t0
        return h

    def held_bytes(self) -> int:
        """Bytes the held blocks occupy (what one pass over them reads)."""
        return int(sum(self.executor(on_held(_nbytes), self.handles)))


def _nbytes(rows: HeldRows) -> int:
    return rows.nbytes


def _add_base(
    acc: tuple[_KeptSums | None, list[np.ndarray]], r: _KeptSums
) -> tuple[_KeptSums | None, list[np.ndarray]]:
    total, keys = acc
    keys.append(r.sums.key)
    if total is None:
        return r, keys
    return _KeptSums(
        EdgeSums.combine([total.sums, r.sums]), total.n_changed + r.n_changed, total.capped + r.capped
    ), keys
