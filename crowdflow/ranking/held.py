"""Comparison rows encoded once and held in memory across the passes of a partitioned ranking fit.

A block (one or more partitions) is read and encoded once (:func:`encode_block`) into :class:`HeldRows`: the rows
grouped by their pair ``u < v`` (a stable counting sort, so a pair's rows keep their input order), with per pair
``u, v`` (int32) and the offsets of its rows, and per row only the oriented outcome ``y° = s·y`` (int8 when every
value is a small integer, float32 when that is exact, float64 otherwise) and the weight (none stored when every
weight is 1). That is 1–16 bytes a row instead of a file read, a canonicalisation and an id lookup per pass.

Every pass is one compiled loop over the held rows (:func:`held_sums`, :func:`held_histogram`), the keep rule, the
changed count and the capped residual sum fused with the per-pair sums. Per pair the sums run over its rows in
input order, as ``numpy.bincount`` does on the rows, so a block's sums equal the row-wise sums of
:mod:`crowdflow.ranking.partitioned` up to the order in which different blocks are added.

Bytes read per pass: ``b_y + b_w`` per row plus 16 per pair (docs/scale.md, the bandwidth limit).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from crowdflow.compiled import compiled_kernel
from crowdflow.ranking.pairs import pair_table

__all__ = ["HeldRows", "add_at", "encode_block", "held_histogram", "held_kept", "held_sums", "smallest_levels"]

#: Histogram grid of |r|/scale (the same as :mod:`crowdflow.ranking.partitioned`'s): bins per decade, lower end,
#: decades; under/overflow bins at both ends.
SKETCH_PER_DECADE, SKETCH_LO, SKETCH_DECADES = 1000, 1e-6, 12
SKETCH_BINS = SKETCH_PER_DECADE * SKETCH_DECADES + 2


@dataclass(frozen=True)
class HeldRows:
    """One block's rows grouped by pair (see the module docstring).

    Attributes
    ----------
    pu, pv : numpy.ndarray
        (|E_b|,) int32 pair endpoints ``u < v``, sorted by ``(u, v)``.
    ptr : numpy.ndarray
        (|E_b| + 1,) int64 offsets: the rows of pair ``e`` are ``ptr[e]:ptr[e+1]``.
    yo : numpy.ndarray
        (m,) oriented outcomes (int8, float32 or float64, whichever holds them exactly).
    w : numpy.ndarray
        (m,) float64 weights, or (0,) when every weight is 1.
    n : int
        Items of the dictionary (pairs are keyed ``u·n + v``).
    """

    pu: np.ndarray
    pv: np.ndarray
    ptr: np.ndarray
    yo: np.ndarray
    w: np.ndarray
    n: int

    @property
    def n_rows(self) -> int:
        return int(self.yo.size)

    @property
    def nbytes(self) -> int:
        """Bytes held (what one pass reads)."""
        return int(self.pu.nbytes + self.pv.nbytes + self.ptr.nbytes + self.yo.nbytes + self.w.nbytes)

    def keys(self) -> np.ndarray:
        return self.pu.astype(np.int64) * np.int64(self.n) + self.pv.astype(np.int64)


def _compact_outcome(yo: np.ndarray) -> np.ndarray:
    """``yo`` in the narrowest of int8, float32, float64 that holds every value exactly."""
    if yo.size and np.all(np.abs(yo) <= 127) and np.array_equal(np.round(yo), yo):
        return yo.astype(np.int8)
    y32 = yo.astype(np.float32)
    if np.array_equal(y32.astype(np.float64), yo):
        return y32
    return np.ascontiguousarray(yo, dtype=np.float64)


@compiled_kernel
def _smallest_abs_kernel(y: np.ndarray, k: int) -> np.ndarray:
    out = np.empty(k, dtype=np.float64)
    c = 0
    for t in range(y.size):
        a = abs(float(y[t]))
        if c == k and a >= out[k - 1]:
            continue
        p = c  # insertion point in the sorted distinct values held so far
        while p > 0 and out[p - 1] > a:
            p -= 1
        if p > 0 and out[p - 1] == a:
            continue
        last = c if c < k else k - 1
        for q in range(last, p, -1):
            out[q] = out[q - 1]
        out[p] = a
        if c < k:
            c += 1
    return out[:c].copy()


def smallest_levels(y: np.ndarray, k: int = 3) -> np.ndarray:
    """The ``k`` smallest distinct values of ``|y|`` (sorted; fewer when there are fewer): ``np.unique(np.abs(y))[:k]``
    in one pass instead of a sort of every row (the scan's outcome levels, 58 ms against ~2 ms for 10⁶ rows)."""
    return np.asarray(_smallest_abs_kernel(np.ascontiguousarray(y), int(k)))


@compiled_kernel
def _counting_order(edge: np.ndarray, n_edges: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable counting sort of the rows by pair index: (offsets, row order)."""
    m = edge.size
    ptr = np.zeros(n_edges + 1, dtype=np.int64)
    for k in range(m):
        ptr[edge[k] + 1] += 1
    for e in range(n_edges):
        ptr[e + 1] += ptr[e]
    fill = ptr[:-1].copy()
    order = np.empty(m, dtype=np.int64)
    for k in range(m):
        e = edge[k]
        order[fill[e]] = k
        fill[e] += 1
    return ptr, order


def encode_block(u: np.ndarray, v: np.ndarray, yo: np.ndarray, w: np.ndarray, n: int) -> HeldRows:
    """Group rows (pairs ``u < v`` as int64, oriented outcomes, weights; input order) by pair, stably."""
    m = int(u.size)
    edge, eu, ev, _ = pair_table(u, v, np.ones(m), n)
    ptr, order = _counting_order(edge, int(eu.size))
    y = _compact_outcome(yo[order])
    unit = bool(np.all(w == 1.0))
    wh = np.zeros(0, dtype=np.float64) if unit else np.ascontiguousarray(w[order], dtype=np.float64)
    return HeldRows(eu.astype(np.int32), ev.astype(np.int32), ptr, y, wh, n)


@compiled_kernel
def _keep(r: float, d: float, yv: float, cut: float, kind: int) -> bool:
    if kind == 0:
        return abs(r) <= cut
    return not ((yv * d < 0.0) and (abs(d) >= cut))


@compiled_kernel
def _row_step(
    yv: float, wv: float, d: float, pd_: float, cut: float, cut2: float, kind: int, pcut: float, pkind: int, mode: int
) -> tuple[bool, float, int]:
    """One row of a trimming step: ``(kept, w·min(r², cut²), 1 if its kept status differs under the previous rule)``.

    ``r = y° − (θ_u − θ_v)``; the rule keeps ``|r| ≤ cut`` (kind 0) or drops upsets at ``|d| ≥ cut`` (kind 1);
    ``mode`` 2 compares with the previous rule ``(pd_, pcut, pkind)``. The one per-row step of every pass below.
    """
    r = yv - d
    kept = _keep(r, d, yv, cut, kind)
    changed = 0
    if mode > 1 and kept != _keep(yv - pd_, pd_, yv, pcut, pkind):
        changed = 1
    return kept, wv * min(r * r, cut2), changed


@compiled_kernel
def _sums_kernel(
    pu: np.ndarray,
    pv: np.ndarray,
    ptr: np.ndarray,
    yo: np.ndarray,
    w: np.ndarray,
    theta: np.ndarray,
    cut: float,
    kind: int,
    ptheta: np.ndarray,
    pcut: float,
    pkind: int,
    mode: int,
) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Per pair (count, ties) and (w, wy, wy2, ymin, ymax, wpos, wneg) of the kept rows; changed rows; capped sum.

    ``mode`` 0: every row; 1: the rows ``(theta, cut, kind)`` keeps; 2: also count the rows whose kept status
    differs under ``(ptheta, pcut, pkind)``.
    """
    ne = pu.size
    unit = w.size == 0
    cnt = np.zeros((ne, 2), dtype=np.int64)
    acc = np.zeros((ne, 7), dtype=np.float64)
    changed = 0
    capped = 0.0
    cut2 = cut * cut
    for e in range(ne):
        lo, hi = ptr[e], ptr[e + 1]
        d = 0.0
        pd_ = 0.0
        if mode > 0:
            d = theta[pu[e]] - theta[pv[e]]
        if mode > 1:
            pd_ = ptheta[pu[e]] - ptheta[pv[e]]
        c = 0
        ties = 0
        sw = 0.0
        swy = 0.0
        swy2 = 0.0
        ymin = np.inf
        ymax = -np.inf
        wpos = 0.0
        wneg = 0.0
        ys = yo[lo:hi]  # slices indexed from 0: no wrap-around test per row (:func:`_pair_status`)
        ws = w[lo:hi]
        for k in range(ys.size):
            yv = float(ys[k])
            wv = 1.0 if unit else ws[k]
            if mode > 0:
                kept, cap, ch = _row_step(yv, wv, d, pd_, cut, cut2, kind, pcut, pkind, mode)
                capped += cap
                changed += ch
                if not kept:
                    continue
            c += 1
            sw += wv
            swy += wv * yv
            swy2 += wv * yv * yv
            ymin = min(ymin, yv)
            ymax = max(ymax, yv)
            # branch-free (a sign that flips at random within a pair mispredicts): adding an exact +0.0 to a sum
            # of positive weights leaves its bits unchanged, so these are the sums of the branching loop
            wpos += wv if yv > 0.0 else 0.0
            wneg += wv if yv < 0.0 else 0.0
            ties += yv == 0.0
        cnt[e, 0] = c
        cnt[e, 1] = ties
        acc[e, 0] = sw
        acc[e, 1] = swy
        acc[e, 2] = swy2
        acc[e, 3] = ymin
        acc[e, 4] = ymax
        acc[e, 5] = wpos
        acc[e, 6] = wneg
    return cnt, acc, changed, capped


def held_sums(
    rows: HeldRows,
    rule: tuple[np.ndarray, float, int] | None,
    prev: tuple[np.ndarray, float, int] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, float]:
    """The kept rows' per-pair sums of one block: ``(keys, counts (|E|, 2), sums (|E|, 7), changed, capped)``.

    ``rule``/``prev`` are ``(θ, cut, kind)`` with kind 0 (keep ``|r| ≤ cut``) or 1 (drop upsets at ``|d| ≥ cut``);
    pairs without a kept row are left out. ``changed`` is -1 without ``prev``; ``capped`` NaN without ``rule``.
    """
    empty = np.zeros(0)
    mode = 0 if rule is None else (1 if prev is None else 2)
    theta, cut, kind = rule if rule is not None else (empty, 0.0, 0)
    ptheta, pcut, pkind = prev if prev is not None else (empty, 0.0, 0)
    cnt, acc, changed, capped = _sums_kernel(
        rows.pu, rows.pv, rows.ptr, rows.yo, rows.w, theta, float(cut), int(kind), ptheta, float(pcut), int(pkind), mode
    )
    keys = rows.keys()
    if mode > 0:
        live = cnt[:, 0] > 0
        keys, cnt, acc = keys[live], cnt[live], acc[live]
    return keys, cnt, acc, (changed if mode == 2 else -1), (capped if mode > 0 else float("nan"))


@compiled_kernel
def _kept01(yv: float, d: float, cut: float, kind: int, big: bool) -> int:
    """1 if a row is kept (kind 0: ``|y° − d| ≤ cut``; kind 1: not an upset at a pair gap ``|d| ≥ cut``, ``big``),
    else 0; without a data-dependent branch."""
    if kind == 0:
        return int(abs(yv - d) <= cut)
    return int((yv * d >= 0.0) | (not big))


@compiled_kernel
def _pair_status(
    yo: np.ndarray, lo: int, hi: int, d: float, cut: float, kind: int, pd_: float, pcut: float, pkind: int, prev: bool
) -> tuple[int, int]:
    """One pair's kept rows and rows whose kept status differs under the previous rule: a loop of integer sums only
    (no floating-point sum), which the compiler runs several rows to an instruction.

    The loop runs over the slice ``yo[lo:hi]`` from 0: an index the compiler knows is not negative needs no
    wrap-around test per row, which otherwise keeps the loop from being vectorised (3.1 → 0.23 ns a row in one long
    float64 pair, 0.3 ns a row in pairs of 50 rows, one core at load 3).
    """
    seg = yo[lo:hi]
    big = abs(d) >= cut
    pbig = abs(pd_) >= pcut
    nk = 0
    nch = 0
    if prev and kind == 0 and pkind == 0:  # the trimming steps: the loop spelled out
        for t in range(seg.size):
            yv = float(seg[t])
            a = abs(yv - d) <= cut
            b = abs(yv - pd_) <= pcut
            nk += a
            nch += a ^ b
    elif prev:
        for t in range(seg.size):
            yv = float(seg[t])
            kt = _kept01(yv, d, cut, kind, big)
            nk += kt
            nch += kt ^ _kept01(yv, pd_, pcut, pkind, pbig)
    else:
        for t in range(seg.size):
            nk += _kept01(float(seg[t]), d, cut, kind, big)
    return nk, nch


@compiled_kernel
def _kept_kernel(
    ptr: np.ndarray,
    pu: np.ndarray,
    pv: np.ndarray,
    yo: np.ndarray,
    w: np.ndarray,
    theta: np.ndarray,
    cut: float,
    kind: int,
    ptheta: np.ndarray,
    pcut: float,
    pkind: int,
    mode: int,
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Per pair (w, wy, wy2) of the kept rows, kept rows, changed rows: :func:`_sums_kernel` with only what a
    trimming step needs. ``mode`` 1: no previous rule, every pair; 2: with the previous rule, every pair; 3: with
    the previous rule, only the pairs with a row whose kept status changed (``idx``: their positions).

    Per pair, a first loop counts the kept and the changed rows (:func:`_pair_status`); a second adds ``k·w``,
    ``k·w·y°``, ``k·w·y°²`` row after row, ``k`` the 0/1 keep factor, skipped in mode 3 for a pair none of whose
    rows changed: its sums are the previous step's, bit for bit (the same rows kept, added in the same order).
    Adding an exact 0 leaves a sum's bits unchanged, so the sums equal those of the loop that skips a dropped row,
    term for term in the same order.
    """
    ne = pu.size
    unit = w.size == 0
    prev = mode > 1
    only = mode == 3
    idx = np.empty(ne if only else 0, dtype=np.int64)
    acc = np.empty((3, ne), dtype=np.float64) if only else np.zeros((3, ne), dtype=np.float64)
    nout = 0
    kept_rows = 0
    changed = 0
    for e in range(ne):
        lo = ptr[e]
        hi = ptr[e + 1]
        d = theta[pu[e]] - theta[pv[e]]
        pd_ = ptheta[pu[e]] - ptheta[pv[e]] if prev else 0.0
        nk, nch = _pair_status(yo, lo, hi, d, cut, kind, pd_, pcut, pkind, prev)
        kept_rows += nk
        changed += nch
        if only and nch == 0:
            continue
        big = abs(d) >= cut
        sw = 0.0
        swy = 0.0
        swy2 = 0.0
        ys = yo[lo:hi]
        ws = w[lo:hi]
        for t in range(ys.size):
            yv = float(ys[t])
            wv = 1.0 if unit else ws[t]
            kf = float(_kept01(yv, d, cut, kind, big))
            wy = wv * yv
            sw += wv * kf
            swy += wy * kf
            swy2 += wy * yv * kf
        at = e
        if only:
            idx[nout] = e
            at = nout
            nout += 1
        acc[0, at] = sw
        acc[1, at] = swy
        acc[2, at] = swy2
    if only:
        return idx[:nout].copy(), acc[:, :nout].copy(), kept_rows, changed
    return idx, acc, kept_rows, changed


def held_kept(
    rows: HeldRows,
    rule: tuple[np.ndarray, float, int],
    prev: tuple[np.ndarray, float, int] | None,
    changed_only: bool = False,
) -> tuple[np.ndarray | None, np.ndarray, int, int]:
    """A trimming step's sums of one block: ``(idx, acc (3, ·), kept rows, changed)``.

    ``acc`` holds ``Σw, Σw·y°, Σw·y°²`` of the kept rows for *every* pair of the block in the block's pair order
    (0 where no row is kept; ``idx`` None), so the caller adds it at the block's global pair positions, fixed after
    the first pass: 24 bytes per pair of the block and no key lookups. With ``changed_only`` (and ``prev``, the rule
    of this block's previous step) only the pairs with a row whose kept status differs under ``prev``: ``idx`` their
    positions in the block's pair order and ``acc`` their sums; every other pair's sums are the previous step's
    (the same rows kept, added in the same order: the same bits), so the caller keeps them. The values equal
    :func:`held_sums`'s for the pairs it keeps (the same loop order). ``changed`` is -1 without ``prev``. (The
    capped sum ``Σ w·min(r², cut²)`` of the ``|r| ≤ cut`` rule needs no pass: it is the kept rows' ``Σ w r²`` from
    these sums plus ``cut²`` times the dropped weight.)
    """
    theta, cut, kind = rule
    empty = np.zeros(0)
    ptheta, pcut, pkind = prev if prev is not None else (empty, 0.0, 0)
    mode = 1 if prev is None else (3 if changed_only else 2)
    idx, acc, kept_rows, changed = _kept_kernel(
        rows.ptr, rows.pu, rows.pv, rows.yo, rows.w, theta, float(cut), int(kind), ptheta, float(pcut), int(pkind),
        mode,
    )  # fmt: skip
    return (idx if mode == 3 else None), acc, int(kept_rows), (int(changed) if prev is not None else -1)


@compiled_kernel
def _bin_log10(z: float) -> int:
    """The histogram bin of ``z = |r|/scale ≥ 0`` by its definition: ``⌊1000·log10(z/10⁻⁶)⌋ + 1`` clipped to
    ``[0, SKETCH_BINS − 1]`` (bin 0 below ``SKETCH_LO``, the last at or above the top). The reference the tables
    of :func:`bin_tables` are built from; the passes use :func:`_bin_of`, equal to it for every double."""
    b = np.floor(np.log10(max(z, 1e-300) / SKETCH_LO) * SKETCH_PER_DECADE) + 1.0
    return int(min(max(b, 0.0), SKETCH_BINS - 1.0))


#: Mantissa bits of ``z`` that, with its exponent, index the bin table: a table slot spans a relative width of at
#: most 2⁻¹⁰ < 10^(1/1000) − 1 (a bin's), so it holds at most one bin edge and one comparison finds the bin.
_TABLE_BITS = 10
_SHIFT = 52 - _TABLE_BITS


@compiled_kernel
def _bin_tables_kernel() -> tuple[np.ndarray, np.ndarray, int]:
    nb = SKETCH_BINS
    edge = np.full(nb + 1, np.inf)  # edge[b]: the smallest double z with bin(z) >= b (edge[0] = 0)
    edge[0] = 0.0
    buf = np.zeros(1, dtype=np.float64)
    bits = buf.view(np.int64)
    inf_bits = np.int64(0x7FF0000000000000)
    for b in range(1, nb):
        lo = np.int64(0)  # bin(lo) < b (bin(0) = 0)
        hi = inf_bits  # bin(hi) >= b (bin(inf) = nb - 1)
        while hi - lo > 1:
            mid = lo + (hi - lo) // 2
            bits[0] = mid
            if _bin_log10(buf[0]) >= b:
                hi = mid
            else:
                lo = mid
        bits[0] = hi
        edge[b] = buf[0]
    buf[0] = edge[1]
    k0 = bits[0] >> _SHIFT
    buf[0] = edge[nb - 1]
    k1 = bits[0] >> _SHIFT
    table = np.zeros(k1 - k0 + 1, dtype=np.int32)
    for k in range(k0, k1 + 1):
        bits[0] = k << _SHIFT  # the smallest double of the slot
        table[k - k0] = _bin_log10(buf[0])
    return edge, table, k0


@functools.cache
def bin_tables() -> tuple[np.ndarray, np.ndarray, int]:
    """The histogram grid as comparisons (built once per process, ~20 ms): ``edge`` ((SKETCH_BINS + 1,), the
    smallest double of each bin, ``inf`` past the last), ``table`` (the bin of the smallest double of each slot of
    ``_TABLE_BITS`` mantissa bits between ``edge[1]`` and ``edge[-2]``) and the first slot's index ``k0``.

    The edges are found by bisection over the doubles' bit patterns with the definition itself
    (:func:`_bin_log10`), so a bin found by comparison is the bin ``log10`` gives, for every double (the bin is
    non-decreasing in ``z``; ``tests/ranking/test_held.py`` checks it at every edge and its neighbours).
    """
    return _bin_tables_kernel()


@compiled_kernel
def _hist_kernel(
    pu: np.ndarray,
    pv: np.ndarray,
    ptr: np.ndarray,
    yo: np.ndarray,
    w: np.ndarray,
    theta: np.ndarray,
    scale: float,
    edge: np.ndarray,
    table: np.ndarray,
    k0: int,
) -> np.ndarray:
    """Weights of ``|y° − d|/scale`` per bin: the bin by a table slot and one comparison with the next edge (no
    ``log10`` per row); the rows are added in the same order as before, so the histogram has the same bits."""
    nb = SKETCH_BINS
    h = np.zeros(nb, dtype=np.float64)
    unit = w.size == 0
    buf = np.zeros(1, dtype=np.float64)
    bits = buf.view(np.int64)
    lo = edge[1]
    top = edge[nb - 1]
    for e in range(pu.size):
        d = theta[pu[e]] - theta[pv[e]]
        ys = yo[ptr[e] : ptr[e + 1]]
        ws = w[ptr[e] : ptr[e + 1]]
        for k in range(ys.size):
            z = abs(float(ys[k]) - d) / scale
            if z < lo:
                i = 0
            elif z >= top:
                i = nb - 1
            else:
                buf[0] = z
                i = table[(bits[0] >> _SHIFT) - k0]
                i += z >= edge[i + 1]
            h[i] += 1.0 if unit else ws[k]
    return h


def _bin_of(z: np.ndarray) -> np.ndarray:
    """Bins of an array of ``z ≥ 0`` through the tables (what :func:`_hist_kernel` does per row; for tests)."""
    edge, table, k0 = bin_tables()
    return np.asarray(_bins_kernel(np.ascontiguousarray(z, dtype=np.float64), edge, table, k0))


@compiled_kernel
def _bins_kernel(z: np.ndarray, edge: np.ndarray, table: np.ndarray, k0: int) -> np.ndarray:
    nb = SKETCH_BINS
    out = np.empty(z.size, dtype=np.int64)
    buf = np.zeros(1, dtype=np.float64)
    bits = buf.view(np.int64)
    for k in range(z.size):
        x = z[k]
        if x < edge[1]:
            out[k] = 0
        elif x >= edge[nb - 1]:
            out[k] = nb - 1
        else:
            buf[0] = x
            i = table[(bits[0] >> _SHIFT) - k0]
            out[k] = i + (x >= edge[i + 1])
    return out


@compiled_kernel
def _bins_log10_kernel(z: np.ndarray) -> np.ndarray:
    out = np.empty(z.size, dtype=np.int64)
    for k in range(z.size):
        out[k] = _bin_log10(z[k])
    return out


def held_histogram(rows: HeldRows, theta: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The non-empty bins of ``|r|/scale`` on the log grid and their weights (one block)."""
    edge, table, k0 = bin_tables()
    h = _hist_kernel(rows.pu, rows.pv, rows.ptr, rows.yo, rows.w, theta, float(scale), edge, table, k0)
    nz = np.flatnonzero(h)
    return nz.astype(np.int32), h[nz]


@compiled_kernel
def _add_at_kernel(acc: np.ndarray, at: np.ndarray, r: np.ndarray) -> None:
    for c in range(acc.shape[0]):
        for k in range(at.size):
            acc[c, at[k]] += r[c, k]


def add_at(acc: np.ndarray, at: np.ndarray, r: np.ndarray) -> None:
    """``acc[:, at] += r`` for distinct positions ``at`` (a block's pairs among the global pairs), in one compiled
    loop: the same additions as numpy's fancy-index add, ~1 ns an element instead of ~10 (a trimming step's fold in
    the flow: 3 × ~5·10⁵ elements per block per pass at 10⁸ comparisons)."""
    _add_at_kernel(acc, np.ascontiguousarray(at, dtype=np.int64), np.ascontiguousarray(r, dtype=np.float64))
