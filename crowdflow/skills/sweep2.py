"""The default Dawid–Skene sweep for two classes: the E-step and the M-step's sums in one pass (issue #36).

:func:`crowdflow.skills.fused_em.fused_pass` runs it for M = 2 without ``exact``, for the in-memory map and the held
passes alike (one kernel); the module docstring of :mod:`crowdflow.skills.fused_em` (*two classes*) states what it
computes and in which order, docs/scale.md what each piece of its structure measured.
"""

from __future__ import annotations

import math

import numpy as np

from crowdflow.compiled import compiled_kernel, ieee_kernel, inlined_kernel, prefetch_read, prefetch_write
from crowdflow.skills.sweep_base import AHEAD, BLOCK, NEAR, _exp_block

#: unsigned index constants of the two-class sweep (an unsigned index needs no negative-index wrap-around code)
_U1 = np.uint64(1)
_U2 = np.uint64(2)
#: the two-class sweep folds its running product of normalisers into its logarithm past this (a block's product
#: is at most 2^BLOCK ≈ 1.2e77, so the product stays finite)
_FOLD2 = 1e200


@inlined_kernel
def _add_sums2(
    rows: np.ndarray,
    tid: int,
    post: np.ndarray,
    counts: np.ndarray,
    one_coin: bool,
    step: np.uint64,
    off: np.uint64,
    i: int,
) -> None:
    """Label ``i`` of a block of :func:`_sweep2` (``rows`` from the block's first label): the posteriors of its task
    ``tid`` (in the block; ``post``, a pair a task) added to its M-step sums, the pair at ``counts[(code << step) +
    off]`` (one-coin: the one of its worker, ``counts[code >> 1]``)."""
    if one_coin:
        r = np.uint64(rows[i])
        counts[r >> _U1] += post[(np.uint64(tid) << _U1) + (r & _U1)]
    else:
        r = (np.uint64(rows[i]) << step) + off
        j = np.uint64(tid) << _U1
        counts[r] += post[j]
        counts[r + _U1] += post[j + _U1]


@compiled_kernel
def _task_sums2(
    rb: np.ndarray,
    n_lab: int,
    mark: np.ndarray,
    buf: np.ndarray,
    lp: np.ndarray,
    step: np.uint64,
    prb: np.ndarray,
    pmark: np.ndarray,
    pbuf: np.ndarray,
    sink: np.ndarray,
    p_n: int,
    one_coin: bool,
    off: np.uint64,
) -> None:
    """A block's task sums of :func:`_sweep2` (tables in cache): label i (``rb[i]``, its task the running sum of
    ``mark``) adds its log π pair ``lp[rb[i] << step]`` to its task's (ℓ₀, ℓ₁) in ``buf``, restarted at 0.0 at a
    task's first label (the sums in registers; each label's running pair stored, the task's last one stays); beside
    it label i of the previous block (``prb``, ``pmark``, its posteriors ``pbuf``; ``p_n`` labels, 0 for none) adds
    its task's posteriors to its M-step sums (:func:`_add_sums2`): independent work beside the chain of adds."""
    both = min(n_lab, p_n)
    tt, x, y, pt = -1, 0.0, 0.0, -1
    for i in range(both):
        r = np.uint64(rb[i]) << step
        mk = mark[i]
        tt += mk
        x = (0.0 if mk != 0 else x) + lp[r]
        y = (0.0 if mk != 0 else y) + lp[r + _U1]
        at = np.uint64(tt) << _U1
        buf[at] = x
        buf[at + _U1] = y
        pt += pmark[i]
        _add_sums2(prb, pt, pbuf, sink, one_coin, step, off, i)
    for i in range(both, n_lab):
        r = np.uint64(rb[i]) << step
        mk = mark[i]
        tt += mk
        x = (0.0 if mk != 0 else x) + lp[r]
        y = (0.0 if mk != 0 else y) + lp[r + _U1]
        at = np.uint64(tt) << _U1
        buf[at] = x
        buf[at + _U1] = y
    for i in range(both, p_n):
        pt += pmark[i]
        _add_sums2(prb, pt, pbuf, sink, one_coin, step, off, i)


@compiled_kernel
def _task_sums2_far(
    rows: np.ndarray,
    base: int,
    n_lab: int,
    mark: np.ndarray,
    buf: np.ndarray,
    lp: np.ndarray,
    counts: np.ndarray,
    paired: bool,
    one_coin: bool,
    sums: bool,
    step: np.uint64,
) -> None:
    """:func:`_task_sums2` past the cache, for the block from label ``base`` of ``rows``: the task sums alone, each
    label asking for the table rows of the label :data:`AHEAD` on (a hint: no value changes)."""
    last = rows.size - 1
    rb = rows[base:]
    tt, x, y = -1, 0.0, 0.0
    for i in range(n_lab):
        ahead = rows[min(base + i + AHEAD, last)]
        if paired:
            prefetch_write(lp, ahead * 4)
        else:
            prefetch_read(lp, ahead * 2)
            if sums:
                prefetch_write(counts, ahead // 2 if one_coin else ahead * 2)
        r = np.uint64(rb[i]) << step
        mk = mark[i]
        tt += mk
        x = (0.0 if mk != 0 else x) + lp[r]
        y = (0.0 if mk != 0 else y) + lp[r + _U1]
        at = np.uint64(tt) << _U1
        buf[at] = x
        buf[at + _U1] = y


@inlined_kernel
def _sweep2(
    indptr: np.ndarray,
    rows: np.ndarray,
    lp: np.ndarray,
    log_q: np.ndarray,
    gold: np.ndarray,
    one_coin: bool,
    sums: bool,
    counts: np.ndarray,
    class_sums: np.ndarray,
    hits: np.ndarray,
    post_t: np.ndarray,
    paired: bool,
) -> float:
    """The default sweep for M = 2 (module docstring, *two classes*); ``paired``: ``lp`` holds four floats a
    (worker, answer), its log π pair then its counts pair (``counts`` unused; the full model only)."""
    n_tasks = indptr.size - 1
    store = post_t.shape[1] == n_tasks and n_tasks > 0
    pinned = gold.size > 0
    last = rows.size - 1
    far = lp.size > (2 * NEAR if paired else NEAR) and last >= 0
    lq0, lq1 = log_q[0], log_q[1]
    sink = lp if paired else counts  # where the M-step sums go: the pair of code c at sink[(c << step) + off]
    step = _U2 if paired else _U1
    off = _U2 if paired else np.uint64(0)
    bufs = np.zeros((2, 2 * BLOCK))  # a block's (ℓ₀, ℓ₁) a task, then its posteriors; the previous block's
    ex = np.empty(BLOCK)
    scale = np.empty(BLOCK)
    tops = np.empty(BLOCK)
    zs = np.empty(BLOCK)
    widest = 0
    for t0 in range(0, n_tasks, BLOCK):
        widest = max(widest, indptr[min(n_tasks, t0 + BLOCK)] - indptr[t0])
    # tasks starting at each label of a block (a label's task is their running sum); the previous block's
    marks = np.zeros((2, widest + 1), dtype=np.int32)
    shift, prod = 0.0, 1.0
    c00, c01, c02, c03, c10, c11, c12, c13 = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    n_hit, cur, p_base, p_n = 0, 0, 0, 0
    for t0 in range(0, n_tasks, BLOCK):
        t1 = min(n_tasks, t0 + BLOCK)
        nb = t1 - t0
        base, n_lab = indptr[t0], indptr[t1] - indptr[t0]
        buf, mark, pbuf, pmark = bufs[cur], marks[cur], bufs[1 - cur], marks[1 - cur]
        rb, prb = rows[base:], rows[p_base:]
        for i in range(n_lab + 1):
            mark[i] = 0
        for t in range(t0, t1):
            mark[indptr[t] - base] += 1
        for j in range(2 * nb):
            buf[j] = 0.0
        # the task sums, label by label, with the previous block's M-step sums in the same loop (independent of the
        # chain of adds; when the tables are past the cache, after it: the hint's lines are then asked one block on).
        # Each is its own compiled function (a call a block): inlined here, the loop's values did not fit the
        # registers beside the sweep's and were reloaded from the stack at every label.
        if far:
            _task_sums2_far(rows, base, n_lab, mark, buf, lp, counts, paired, one_coin, sums, step)
            if sums:
                pt = -1
                for i in range(p_n):
                    pt += pmark[i]
                    _add_sums2(prb, pt, pbuf, sink, one_coin, step, off, i)
        else:
            _task_sums2(rb, n_lab, mark, buf, lp, step, prb, pmark, pbuf, sink, p_n if sums else 0, one_coin, off)
        for t in range(nb):  # the exponents, −|ℓ₁ − ℓ₀| (dawid_skene._normalise_binary)
            a = lq0 + buf[2 * t]
            b = lq1 + buf[2 * t + 1]
            buf[2 * t] = a
            buf[2 * t + 1] = b
            ex[t] = -abs(b - a) if max(a, b) > -np.inf else np.nan
        _exp_block(ex, nb, scale)
        for t in range(nb):  # the posteriors: one division a task
            a, b = buf[2 * t], buf[2 * t + 1]
            tops[t] = max(a, b)
            e = ex[t]
            z = 1.0 + e
            hi = 1.0 / z
            lo = e * hi
            buf[2 * t] = hi if a >= b else lo
            buf[2 * t + 1] = lo if a >= b else hi
            zs[t] = z
        # the log-likelihood Σ_t (max_l ℓ_tl + log Z_t): the block's maxima and normalisers in four lanes, then
        # added to the running sum and product (folded into its logarithm past 1e200; a block's product is ≤ 2²⁵⁶)
        s0, s1, s2, s3, q0, q1, q2, q3 = 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0
        n4 = nb - nb % 4
        for t in range(0, n4, 4):
            s0 += tops[t]
            s1 += tops[t + 1]
            s2 += tops[t + 2]
            s3 += tops[t + 3]
            q0 *= zs[t]
            q1 *= zs[t + 1]
            q2 *= zs[t + 2]
            q3 *= zs[t + 3]
        for t in range(n4, nb):
            s0 += tops[t]
            q0 *= zs[t]
        shift += (s0 + s1) + (s2 + s3)
        prod *= (q0 * q1) * (q2 * q3)
        if prod > _FOLD2:
            shift, prod = shift + math.log(prod), 1.0
        if pinned:
            for t in range(t0, t1):
                if gold[t] >= 0:  # _EMMap.pin
                    j = 2 * (t - t0)
                    hits[n_hit] = buf[j + gold[t]]
                    n_hit += 1
                    buf[j] = 0.0
                    buf[j + 1] = 0.0
                    buf[j + gold[t]] = 1.0
        for t in range(0, n4, 4):  # Σ_t T_tl in four lanes a class
            c00 += buf[2 * t]
            c10 += buf[2 * t + 1]
            c01 += buf[2 * t + 2]
            c11 += buf[2 * t + 3]
            c02 += buf[2 * t + 4]
            c12 += buf[2 * t + 5]
            c03 += buf[2 * t + 6]
            c13 += buf[2 * t + 7]
        for t in range(n4, nb):
            c00 += buf[2 * t]
            c10 += buf[2 * t + 1]
        if store:
            for t in range(nb):
                post_t[0, t0 + t] = buf[2 * t]
                post_t[1, t0 + t] = buf[2 * t + 1]
        p_base, p_n, cur = base, n_lab, 1 - cur
    if sums:  # the last block's M-step sums
        prb, pbuf, pmark, pt = rows[p_base:], bufs[1 - cur], marks[1 - cur], -1
        for i in range(p_n):
            pt += pmark[i]
            _add_sums2(prb, pt, pbuf, sink, one_coin, step, off, i)
    class_sums[0] = (c00 + c01) + (c02 + c03)
    class_sums[1] = (c10 + c11) + (c12 + c13)
    return shift + math.log(prod)


@ieee_kernel
def _pass2_full(
    indptr: np.ndarray,
    rows: np.ndarray,
    lp: np.ndarray,
    log_q: np.ndarray,
    gold: np.ndarray,
    counts: np.ndarray,
    class_sums: np.ndarray,
    hits: np.ndarray,
    post_t: np.ndarray,
) -> float:
    return _sweep2(indptr, rows, lp, log_q, gold, False, True, counts, class_sums, hits, post_t, False)


@ieee_kernel
def _pass2_coin(
    indptr: np.ndarray,
    rows: np.ndarray,
    lp: np.ndarray,
    log_q: np.ndarray,
    gold: np.ndarray,
    counts: np.ndarray,
    class_sums: np.ndarray,
    hits: np.ndarray,
    post_t: np.ndarray,
) -> float:
    return _sweep2(indptr, rows, lp, log_q, gold, True, True, counts, class_sums, hits, post_t, False)


@ieee_kernel
def _pass2_e(
    indptr: np.ndarray,
    rows: np.ndarray,
    lp: np.ndarray,
    log_q: np.ndarray,
    gold: np.ndarray,
    counts: np.ndarray,
    class_sums: np.ndarray,
    hits: np.ndarray,
    post_t: np.ndarray,
) -> float:
    return _sweep2(indptr, rows, lp, log_q, gold, False, False, counts, class_sums, hits, post_t, False)


@ieee_kernel
def _pass2_paired(
    indptr: np.ndarray,
    rows: np.ndarray,
    lp: np.ndarray,
    log_q: np.ndarray,
    gold: np.ndarray,
    counts: np.ndarray,
    class_sums: np.ndarray,
    hits: np.ndarray,
    post_t: np.ndarray,
) -> float:
    return _sweep2(indptr, rows, lp, log_q, gold, False, True, lp, class_sums, hits, post_t, True)


@ieee_kernel
def _pass2_paired_e(
    indptr: np.ndarray,
    rows: np.ndarray,
    lp: np.ndarray,
    log_q: np.ndarray,
    gold: np.ndarray,
    counts: np.ndarray,
    class_sums: np.ndarray,
    hits: np.ndarray,
    post_t: np.ndarray,
) -> float:
    return _sweep2(indptr, rows, lp, log_q, gold, False, False, lp, class_sums, hits, post_t, True)


#: the two-class default sweep's compiled kernels by (paired, one-coin, sums): the flags are constants in each (no
#: test of them at every label, a specialisation of the label loops each); a kernel compiles, once, on first use
PASSES2 = {
    (False, False, True): _pass2_full,
    (False, True, True): _pass2_coin,
    (False, False, False): _pass2_e,
    (False, True, False): _pass2_e,
    (True, False, True): _pass2_paired,
    (True, False, False): _pass2_paired_e,
}
