"""One fused pass of the in-memory Dawid–Skene EM map: E-step and M-step sums over the labels in one sweep.

docs/methods/skills.md §7.2 (issue #36). The accelerated in-memory fit (:class:`crowdflow.skills.dawid_skene._EMMap`)
evaluates the EM map F(θ) = M-step(E-step at θ) some 30–200 times per fit. The reference kernels
(``dawid_skene._e_step``, ``_full_m_step``, ``_class_prior``) make 2M + 1 passes over the labels, class by class,
and hold a T × M table of posteriors between them. Here one sweep over the labels grouped by task does it all, a
block of tasks at a time:

1. per task t and class l the sum ℓ_tl = Σ_{labels k of t} log π_{i_k}[l, Y_k] (the M values of a label are
   contiguous: ``lp[(i·M + y)·M + l] = log π_i[l, y]``), written into a block buffer;
2. per task ℓ_tl ← log q_l + ℓ_tl, the posterior exp(ℓ_tl − max_l ℓ_tl)/Z_t, the log-likelihood term, the pin of a
   gold task to its answer, and Σ_t T_tl;
3. per label the M-step's sums: G_i[l, m] += T_tl (full model, into ``counts[(i·M + m)·M + l]``) or
   S_i += T_{t, Y_it} (one-coin).

**Bit for bit the reference with** ``exact=True``. Every quantity is then the same IEEE operations in the same order
as in the reference kernels: each ℓ_tl starts at 0.0 and adds its labels' terms in label order; the normalisation,
the running product of the Z_t and its fold (``_fold``), the M = 2 form with one exponential, Σ_t T_tl in task
order, and each count G_i[l, m] gets its terms in label order (tasks in order, labels in order within a task: the
order the class-major reference scatters them). So F(θ), Φ(θ) and ℓ(θ) are the reference's bits
(``tests/skills/test_fused_em.py`` compares them on a family of crowds).

**The default** (``exact=False``, issue #36): the exponentials of a block are computed together by the branch-free
polynomial :func:`_exp_block` (relative error ≤ 2.5e-16, vectorised by the compiler: ~1.5 ns an exponential against
~10 ns for libm's scalar ``exp``) and each task divides once (e · (1/Z_t)); everything else as above. The map is
within a few ulps of the reference; the fits' bound (against the fit run to 1e-10) is stated and tested in
docs/methods/skills.md §7.2.

**Two classes, the default** (:func:`_sweep2`, issue #36, session 23): the sweep above with the same block structure and
these changes, each measured on the held benchmark's crowd (``benchmarks/held_pass.py``): the indices into the tables
are unsigned (numba adds a wrap-around test for a negative index to every signed one: ~1/3 of the task-sum loop's
instructions); a label's task is the running sum of marks at each task's first label, taken in the task-sum loop and
again in the M-step loop (no label → task map is stored; three loops built one before); while the tables are in cache
the previous block's M-step sums are added in the task-sum loop (independent work beside its chain of adds; past the
cache they stay in their own loop, where the hint's lines arrive one block on); each task divides once (T = e·(1/Z));
the log-likelihood's sum of maxima and product of normalisers, and the class sums, run in four lanes (the product folded
past 1e200 once a block). A task's larger posterior is the general sweep's bits, the smaller within 1 ulp (e·(1/Z) for
e/Z); the M-step sums add those in the same order; the log-likelihood and class sums differ in their rounding (F(θ) and
ℓ within 1.1e-14 relative of the reference on the test family's two-class crowds; ``tests/skills/test_fused_em.py``
bounds 1e-12). With ``paired`` (held passes past the cache) a (worker, answer)'s log π pair and counts pair are one
32-byte record (:func:`paired_table`), so a label touches one cache line, not two; the same operations, the same bits.
Tried and dropped (no gain or slower, measured): two or four label streams side by side for the task sums, pairs of
labels (one add of the chain for two); session 24 (docs/scale.md): a block's tasks grouped by label count (the E-step
gains what the M-step, no longer beside a chain, loses), the label loops as compiled functions of their own with the
flags constants and IEEE division (the same bits, 0.85–0.87× a label over 2,000 workers, 0.92× over 2·10⁵: below the
bar set for it). ``exact=True`` runs the general sweep.

**Both EM paths run it.** The partitioned fit's pass over a held bucket (:mod:`crowdflow.skills.held`) is this sweep
on the bucket's int32 codes, adding into one counts array over a Dask worker's buckets (``add``) or, for the
consensus, the E-step alone (``sums=False``): a bucket's posteriors and sums are the in-memory default's bits on the
same labels (one rule in one place; issue #36, session 22).

**Why it is faster.** The posteriors never leave a block buffer (L1-resident) and the labels are read twice per
evaluation, not 2M + 1 times; the inner loops over the classes have a compile-time trip count for M ≤ 6
(one compiled specialisation each, compiled on first use), so a label's M terms are one vector load and add. At
10⁶ labels and 5 classes an evaluation is ~11 ms of CPU (load 10–14): the two indexed passes over the labels
~3.5 ms each, the exponentials ~1.2 ms.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from crowdflow.compiled import compiled_kernel, inlined_kernel, prefetch_read, prefetch_write

#: tasks per block: the block buffer (BLOCK × M doubles) stays in L1
BLOCK = 256
#: labels ahead whose table rows a sweep asks the cache for (:func:`crowdflow.compiled.prefetch_read`): past the
#: second-level cache (W·M² ≳ 6·10⁴ floats, W ≳ 1.5·10⁴ workers at M = 2) every label's log π row and counts row are
#: a random line of a table in the shared third-level cache or memory, and without the hint the loop waits for each
#: one. Measured in process on 5·10⁶ labels over 1.9·10⁵ workers (M = 2, one core's CPU time, the held pass of issue
#: #36 before its blocks): 22 ns a label without, 11 / 7.2 / 7.0 / 7.3 ns at 16 / 32 / 64 / 128 labels ahead; over
#: 2,000 workers (tables in cache) no change. This sweep walks its labels faster, so further ahead: the two-class
#: sweep over 2·10⁵ workers (5·10⁶ labels, CPU, load 6.5) 5.3 / 5.3 / 4.75 / 4.9 ns a label at 48 / 96 / 128 / 256.
#: The hint changes no value (``tests/skills/test_held_binary.py``).
AHEAD = 128
#: tables of at most this many floats (log π: 512 KB, with the counts the second-level cache of a core here) are
#: read without the hint (it cost ~15 % a label over 2,000 workers, where every row is in cache)
NEAR = 1 << 16
#: the running product of the normalisers is folded into its logarithm past this value (``dawid_skene._FOLD``)
_FOLD = 1e250


#: exp by range reduction: x = k ln 2 + r, |r| ≤ ln 2 / 2, ln 2 in two parts (fdlibm's: k · hi is exact for |k| < 2²⁰)
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
#: below this argument :func:`_exp_block` returns 0 (exp(−700) ≈ 1e-304: an absolute error under 1e-304)
_EXP_FLOOR = -700.0


@inlined_kernel
def _exp_block(x: np.ndarray, n: int, scale: np.ndarray) -> None:
    """x[:n] ← exp(x[:n]) for x ≤ 0 (and −∞, NaN), branch-free so that the loops vectorise (``scale`` is scratch).

    exp(x) = 2^k · p(r) with k = ⌊x log₂e + ½⌋, r = (x − k hi) − k lo (Cody–Waite, hi + lo = ln 2) and p the
    degree-13 Taylor polynomial of exp at 0 in Horner form; |r| ≤ 0.3466 (plus rounding), where the truncated term
    r¹⁴/14! is below 5e-18 relative. 2^k is built from its exponent bits (k + 1023 ≥ 13 for x ≥ −700). Relative
    error ≤ 2.5e-16 against numpy's exp for x in [−700, 0] (about one unit in the last place:
    ``tests/skills/test_fused_em.py::test_the_fast_exponential_is_within_its_bound`` checks 4·10⁶ arguments and the
    ends); 0 below −700 and at −∞; NaN stays NaN. About 1.5 ns an element here against 10 ns for libm's scalar
    ``exp`` (docs/methods/skills.md §7.2).
    """
    bits = scale.view(np.int64)
    for i in range(n):
        xi = max(x[i], _EXP_FLOOR)
        k = np.floor(xi * _LOG2E + 0.5)
        r = (xi - k * _LN2_HI) - k * _LN2_LO
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        bits[i] = (np.int64(k) + 1023) << 52
        x[i] = p * r + 1.0 if x[i] >= _EXP_FLOOR else (x[i] if x[i] != x[i] else 0.0)
    for i in range(n):
        x[i] = x[i] * scale[i] if x[i] != 0.0 else 0.0


@compiled_kernel
def fast_exp(x: np.ndarray) -> np.ndarray:
    """exp of every entry of ``x`` (≤ 0, −∞ or NaN) by :func:`_exp_block`: for tests and the docs."""
    out = x.copy()
    _exp_block(out, out.size, np.empty(out.size))
    return out


@inlined_kernel
def _sweep(
    indptr: np.ndarray,
    rows: np.ndarray,
    lp: np.ndarray,
    lanes: int,
    log_q: np.ndarray,
    gold: np.ndarray,
    one_coin: bool,
    sums: bool,
    counts: np.ndarray,
    class_sums: np.ndarray,
    hits: np.ndarray,
    post_t: np.ndarray,
    exact: bool,
) -> float:
    """The pass of :func:`fused_pass` with ``lanes`` = M (a constant where the caller passes a literal)."""
    m = lanes
    n_tasks = indptr.size - 1
    store = post_t.shape[1] == n_tasks and n_tasks > 0
    pinned = gold.size > 0
    last = rows.size - 1
    far = lp.size > NEAR and last >= 0
    cs = np.zeros(m)
    buf = np.empty(BLOCK * m)
    ex = np.empty(BLOCK * m)  # the exponents of a block, then their exponentials
    scale = np.empty(BLOCK * m)
    tops = np.empty(BLOCK)
    zs = np.empty(BLOCK)
    widest = 0
    for t0 in range(0, n_tasks, BLOCK):
        widest = max(widest, indptr[min(n_tasks, t0 + BLOCK)] - indptr[t0])
    tid = np.empty(widest + 1, dtype=np.int32)  # a block's labels' task (in the block)
    shift, prod = 0.0, 1.0
    n_hit = 0
    for t0 in range(0, n_tasks, BLOCK):
        t1 = min(n_tasks, t0 + BLOCK)
        base, n_lab = indptr[t0], indptr[t1] - indptr[t0]
        # the task of each label, without a loop per task (whose exit, at 3-7 labels a task, is a mispredicted
        # branch a task): a mark at each task's first label, then their running count
        for i in range(n_lab + 1):
            tid[i] = 0
        for t in range(t0 + 1, t1):
            tid[indptr[t] - base] += 1
        run = 0
        for i in range(n_lab):
            run += tid[i]
            tid[i] = run
        for j in range((t1 - t0) * m):
            buf[j] = 0.0
        prev, s0, s1 = -1, 0.0, 0.0
        for i in range(n_lab):  # each task's sums in label order
            k = base + i
            if far:  # the rows of the label AHEAD on (a hint: no value changes)
                ahead = rows[min(k + AHEAD, last)]
                prefetch_read(lp, ahead * m)
                if sums:
                    prefetch_write(counts, ahead // m if one_coin else ahead * m)
            r = rows[k] * m
            j = tid[i] * m
            if m == 2:  # the two sums in registers, restarted at a task's first label (no chain through memory)
                first = tid[i] != prev
                prev = tid[i]
                s0 = (0.0 if first else s0) + lp[r]
                s1 = (0.0 if first else s1) + lp[r + 1]
                buf[j] = s0
                buf[j + 1] = s1
            else:
                for c in range(m):
                    buf[j + c] += lp[r + c]
        # the exponents: M = 2, −|ℓ₁ − ℓ₀| (dawid_skene._normalise_binary); else ℓ_tl − max_l ℓ_tl (_e_step)
        for t in range(t0, t1):
            j = (t - t0) * m
            for c in range(m):
                buf[j + c] = log_q[c] + buf[j + c]
            if m == 2:
                a, b = buf[j], buf[j + 1]
                ex[t - t0] = -abs(b - a) if max(a, b) > -np.inf else np.nan
            else:
                top = buf[j]
                for c in range(1, m):
                    top = max(top, buf[j + c])
                tops[t - t0] = top
                for c in range(m):
                    ex[j + c] = buf[j + c] - top
        n_blk = (t1 - t0) * (1 if m == 2 else m)
        if exact:  # libm's exp, the reference kernels' bits
            for s in range(n_blk):
                ex[s] = np.exp(ex[s])
        else:
            _exp_block(ex, n_blk, scale)
        for t in range(t0, t1):  # no value carried from task to task: the compiler may vectorise it
            j = (t - t0) * m
            if m == 2:  # dawid_skene._normalise_binary
                a, b = buf[j], buf[j + 1]
                tops[t - t0] = max(a, b)
                e = ex[t - t0]
                z = 1.0 + e
                hi, lo = 1.0 / z, e / z
                buf[j] = hi if a >= b else lo
                buf[j + 1] = lo if a >= b else hi
            else:  # dawid_skene._e_step's normalisation
                z = 0.0
                for c in range(m):
                    z += ex[j + c]
                if exact:
                    for c in range(m):
                        buf[j + c] = ex[j + c] / z
                else:  # one division a task (≤ 1 more rounding a posterior)
                    inv = 1.0 / z
                    for c in range(m):
                        buf[j + c] = ex[j + c] * inv
            zs[t - t0] = z
        for t in range(t0, t1):  # dawid_skene._fold, in task order
            prod *= zs[t - t0]
            if prod > _FOLD:
                shift, prod = shift + tops[t - t0] + math.log(prod), 1.0
            else:
                shift = shift + tops[t - t0]
            if pinned and gold[t] >= 0:  # _EMMap.pin
                j = (t - t0) * m
                hits[n_hit] = buf[j + gold[t]]
                n_hit += 1
                for c in range(m):
                    buf[j + c] = 0.0
                buf[j + gold[t]] = 1.0
        for c in range(m):  # Σ_t T_tl in task order, in a register
            acc = cs[c]
            for j in range(c, (t1 - t0) * m, m):
                acc += buf[j]
            cs[c] = acc
        if store:
            for t in range(t0, t1):
                for c in range(m):
                    post_t[c, t] = buf[(t - t0) * m + c]
        if sums and one_coin:
            for i in range(n_lab):
                r = rows[base + i]
                w = r // m
                counts[w] += buf[tid[i] * m + r - w * m]
        elif sums:
            for i in range(n_lab):
                r = rows[base + i] * m
                j = tid[i] * m
                for c in range(m):
                    counts[r + c] += buf[j + c]
    class_sums[:] = cs
    return shift + math.log(prod)


@compiled_kernel
def _pass2(
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
    exact: bool,
) -> float:
    return _sweep(indptr, rows, lp, 2, log_q, gold, one_coin, sums, counts, class_sums, hits, post_t, exact)


@compiled_kernel
def _pass3(
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
    exact: bool,
) -> float:
    return _sweep(indptr, rows, lp, 3, log_q, gold, one_coin, sums, counts, class_sums, hits, post_t, exact)


@compiled_kernel
def _pass4(
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
    exact: bool,
) -> float:
    return _sweep(indptr, rows, lp, 4, log_q, gold, one_coin, sums, counts, class_sums, hits, post_t, exact)


@compiled_kernel
def _pass5(
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
    exact: bool,
) -> float:
    return _sweep(indptr, rows, lp, 5, log_q, gold, one_coin, sums, counts, class_sums, hits, post_t, exact)


@compiled_kernel
def _pass6(
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
    exact: bool,
) -> float:
    return _sweep(indptr, rows, lp, 6, log_q, gold, one_coin, sums, counts, class_sums, hits, post_t, exact)


@compiled_kernel
def _pass_any(
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
    exact: bool,
) -> float:
    m = log_q.size
    return _sweep(indptr, rows, lp, m, log_q, gold, one_coin, sums, counts, class_sums, hits, post_t, exact)


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
        # chain of adds; when the tables are past the cache, after it: the hint's lines are then asked one block on)
        both = min(n_lab, p_n) if sums and not far else 0
        tt, x, y, pt = -1, 0.0, 0.0, -1
        for i in range(n_lab):
            if far:  # the rows of the label AHEAD on (a hint: no value changes)
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
            if i < both:
                pt += pmark[i]
                _add_sums2(prb, pt, pbuf, sink, one_coin, step, off, i)
        if sums:
            for i in range(both, p_n):
                pt += pmark[i]
                _add_sums2(prb, pt, pbuf, sink, one_coin, step, off, i)
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


@compiled_kernel
def _pass2_fast(
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
) -> float:
    return _sweep2(indptr, rows, lp, log_q, gold, one_coin, sums, counts, class_sums, hits, post_t, False)


@compiled_kernel
def _pass2_paired(
    indptr: np.ndarray,
    rows: np.ndarray,
    lp: np.ndarray,
    log_q: np.ndarray,
    gold: np.ndarray,
    sums: bool,
    class_sums: np.ndarray,
    hits: np.ndarray,
    post_t: np.ndarray,
) -> float:
    return _sweep2(indptr, rows, lp, log_q, gold, False, sums, lp, class_sums, hits, post_t, True)


#: one compiled kernel a class count (each compiles, once, on first use: a cold compile is paid for the M a user
#: fits, not for every M), the generic one for the rest
_PASSES = {2: _pass2, 3: _pass3, 4: _pass4, 5: _pass5, 6: _pass6}


def fused_pass(
    indptr: np.ndarray,
    rows: np.ndarray,
    lp: np.ndarray,
    log_q: np.ndarray,
    gold: np.ndarray,
    one_coin: bool,
    counts: np.ndarray,
    class_sums: np.ndarray,
    hits: np.ndarray,
    post_t: np.ndarray,
    exact: bool = False,
    add: bool = False,
    sums: bool = True,
    paired: bool = False,
) -> float:
    """One E-step and the M-step's sums in one sweep (module docstring); returns the observed-data log-likelihood.

    The one sweep of both Dawid–Skene EM paths: the in-memory map (``dawid_skene._EMMap``) and a held bucket's pass
    (:mod:`crowdflow.skills.held`, which adds into one counts array over a worker's buckets, ``add``).

    Parameters
    ----------
    indptr, rows : numpy.ndarray
        The labels grouped by task (``dawid_skene._label_arrays``, or a held bucket's ``indptr`` and ``code``): task
        t owns ``indptr[t]:indptr[t + 1]``, ``rows = worker · M + given`` (int32 or int64).
    lp : numpy.ndarray
        ``lp[(i·M + y)·M + l] = log π_i[l, y]`` (:func:`log_lanes`). Past :data:`NEAR` floats the sweep asks the
        cache for the rows of the label :data:`AHEAD` places on (a hint: the same values).
    log_q : numpy.ndarray
        log q (length M).
    gold : numpy.ndarray
        Empty, or a class code per task (−1: not gold); gold tasks' posteriors are pinned to their answer after
        the E-step and before the sums, their pre-pin posterior of the answer written to ``hits`` in task order.
    one_coin : bool
        Sums of the one-coin model (S_i = Σ_{labels of i} T_{t, Y_it} into ``counts``, length W) instead of the
        full model's G (``counts[(i·M + m)·M + l]``, length W·M²).
    counts, class_sums, hits : numpy.ndarray
        Outputs: the M-step's sums (zeroed first unless ``add``: then each label's terms are added to what
        ``counts`` holds, in label order), Σ_t T_tl (summed in task order) and the gold hits (overwritten).
    post_t : numpy.ndarray
        M × T to receive the posteriors, or an empty (M, 0) array to skip writing them.
    exact : bool
        libm's ``exp`` (the reference kernels' bits) instead of the vectorised :func:`_exp_block` (relative error
        ≤ 2.5e-16: the default, docs/methods/skills.md §7.2).
    sums : bool
        False: the E-step alone (posteriors, class sums, log-likelihood); ``counts`` is not read nor written.
    paired : bool
        Two classes, the full model, the default sweep only: ``lp`` holds four floats a (worker, answer) ``r``, its
        log π pair ``lp[4r], lp[4r + 1]`` (``lp[2r + l]`` of the plain layout) then its M-step sums
        ``lp[4r + 2], lp[4r + 3]`` (``counts[2r + l]``), which are the outputs instead of ``counts`` (not used): a
        label reads and adds to one cache line, not two (:func:`paired_table`). The same operations in the same
        order as the plain layout, so the same bits.
    """
    if paired:
        if log_q.size != 2 or one_coin or exact:
            raise ValueError("paired tables are for the two-class full model's default sweep")
        if sums and not add:
            lp.reshape(-1, 4)[:, 2:] = 0.0
        return float(_pass2_paired(indptr, rows, lp, log_q, gold, sums, class_sums, hits, post_t))
    if sums and not add:
        counts[:] = 0.0
    if log_q.size == 2 and not exact:
        return float(_pass2_fast(indptr, rows, lp, log_q, gold, one_coin, sums, counts, class_sums, hits, post_t))
    kernel = _PASSES.get(log_q.size, _pass_any)
    return float(kernel(indptr, rows, lp, log_q, gold, one_coin, sums, counts, class_sums, hits, post_t, bool(exact)))


#: labels from which the in-memory map sweeps in two halves (:class:`Halves`): a rule on the input's size only, so the
#: answers do not depend on the machine's cores
SPLIT_LABELS = 1 << 16


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - platforms without affinity masks


class Halves:
    """One evaluation's sweep as two task ranges with their own sums, run on two threads (docs/methods/skills.md §7.2).

    The tasks are cut once, where the labels are halved: [0, s) and [s, T). Each half is :func:`fused_pass` on its
    rows (views of the arrays, the compiled kernel is the same), the first into the caller's outputs, the second into
    this object's ``counts``/``class_sums``; then G ← G_first + G_second, Σ_t T_tl likewise, and ℓ = ℓ_first +
    ℓ_second. Every posterior is the unsplit sweep's (a task's E-step reads only its own labels); a sum differs from
    the unsplit one by its rounding (the two partial sums are added last), so the map is within a few ulps of the
    unsplit map. The cut depends only on the data, so the answers are the same with one thread or two: with ``pool``
    None the halves run one after the other in the calling thread. The kernels release the GIL (``nogil``), so with
    a pool the second half runs on another core while the calling thread does the first: about half the wall time of
    an evaluation when a second core is free, the same CPU seconds. Memory: one more table of the sums (W·M²
    doubles for the full model, W one-coin) and the pool's one thread; :meth:`close` ends the thread.
    """

    def __init__(self, indptr: np.ndarray, gold: np.ndarray, n_sums: int, n_classes: int, threads: bool) -> None:
        n_tasks = indptr.size - 1
        self.split = min(max(int(np.searchsorted(indptr, indptr[-1] // 2)), 1), max(n_tasks - 1, 1))
        self.hit0 = int(np.count_nonzero(gold[: self.split] >= 0)) if gold.size else 0
        self.counts = np.empty(n_sums)
        self.class_sums = np.empty(n_classes)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="crowdflow-em") if threads else None

    def close(self) -> None:
        """End the pool's thread (idempotent)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    def run(
        self,
        indptr: np.ndarray,
        rows: np.ndarray,
        lp: np.ndarray,
        log_q: np.ndarray,
        gold: np.ndarray,
        one_coin: bool,
        counts: np.ndarray,
        class_sums: np.ndarray,
        hits: np.ndarray,
        post_t: np.ndarray,
        exact: bool = False,
    ) -> float:
        """:func:`fused_pass`'s arguments and result, the sweep in two halves (class docstring)."""
        s = self.split
        stored = post_t.shape[1] > 0

        def half(lo: int, hi: int, sums: np.ndarray, cls: np.ndarray, hit: np.ndarray) -> float:
            return fused_pass(
                indptr[lo : hi + 1],
                rows,
                lp,
                log_q,
                gold[lo:hi] if gold.size else gold,
                one_coin,
                sums,
                cls,
                hit,
                post_t[:, lo:hi] if stored else post_t,
                exact,
            )

        n_tasks = indptr.size - 1
        second = (s, n_tasks, self.counts, self.class_sums, hits[self.hit0 :])
        if self.pool is not None:
            job = self.pool.submit(half, *second)
            ll_first = half(0, s, counts, class_sums, hits)
            ll_second = job.result()
        else:
            ll_first = half(0, s, counts, class_sums, hits)
            ll_second = half(*second)
        np.add(counts, self.counts, out=counts)
        np.add(class_sums, self.class_sums, out=class_sums)
        return ll_first + ll_second


@compiled_kernel
def log_lanes(pi: np.ndarray, lp: np.ndarray) -> None:
    """``lp[(i·M + y)·M + l] = log π_i[l, y]`` (the label-major layout of ``dawid_skene._full_log_pi``)."""
    n_workers, m, _ = pi.shape
    for i in range(n_workers):
        for y in range(m):
            r = (i * m + y) * m
            for c in range(m):
                lp[r + c] = np.log(pi[i, c, y])


@compiled_kernel
def log_prior_lanes(lp: np.ndarray, log_q: np.ndarray, alpha: float, beta: float) -> float:
    """``dawid_skene._log_prior`` from the label-major table, summed in its (class-major) order: the same bits."""
    m = log_q.size
    cols = lp.size // m
    total = 0.0
    for c in range(m):
        for j in range(cols):
            wgt = alpha + (beta if j % m == c else 0.0)
            if wgt != 0.0:
                total += wgt * lp[j * m + c]
        if alpha != 0.0:
            total += alpha * log_q[c]
    return total


@compiled_kernel
def confusion_in_place(theta: np.ndarray, n_workers: int, m: int, alpha: float, beta: float) -> None:
    """π from the full model's label-major sums, in place: ``theta[(i·M + m)·M + l] = G_i[l, m]`` on entry,
    ``theta[(i·M + l)·M + m] = π_i[l, m]`` (the layout of θ) on return, with ``dawid_skene._confusion_from_counts``'s
    operations: π_i[l, m] = (G_i[l, m] + α + β 1{m = l})/Σ_m' (G_i[l, m'] + α + β 1{m' = l}) (uniform for a row
    without mass). One worker's M × M block at a time goes through a small buffer, so no second W·M² array."""
    blk = np.empty(m * m)
    for i in range(n_workers):
        base = i * m * m
        for s in range(m * m):
            blk[s] = theta[base + s]
        for c in range(m):
            tot = 0.0
            for y in range(m):
                tot += blk[y * m + c] + alpha + (beta if y == c else 0.0)
            for y in range(m):
                num = blk[y * m + c] + alpha + (beta if y == c else 0.0)
                theta[base + c * m + y] = num / tot if tot > 0 else 1.0 / m


@compiled_kernel
def counts_from_posteriors(task: np.ndarray, rows: np.ndarray, post_t: np.ndarray, counts: np.ndarray) -> None:
    """The full model's sums G of given posteriors (``post_t``, M × T) in the label-major layout of
    :func:`fused_pass`: ``counts[(i·M + m)·M + l] = Σ_{labels (i, t, m)} T_tl``, each in label order (the bits of
    ``dawid_skene._confusion_counts``)."""
    m = post_t.shape[0]
    counts[:] = 0.0
    for k in range(task.size):
        r = rows[k] * m
        t = task[k]
        for c in range(m):
            counts[r + c] += post_t[c, t]


@compiled_kernel
def prior_from_sums(class_sums: np.ndarray, n_tasks: int, alpha: float, q: np.ndarray) -> None:
    """q_l = (Σ_t T_tl + α)/(T + M α) into ``q`` (``dawid_skene._class_prior`` from its sums)."""
    m = class_sums.size
    for c in range(m):
        q[c] = (class_sums[c] + alpha) / (n_tasks + m * alpha)


def pairs_past_cache(n_classes: int, one_coin: bool, table_size: int) -> bool:
    """Whether a sweep over this table runs on a paired one (:func:`fused_pass` ``paired``): two classes, the full
    model, and a log π table past :data:`NEAR` floats (where a label's two rows are two misses of the cache)."""
    return n_classes == 2 and not one_coin and table_size > NEAR


@compiled_kernel
def paired_table(lp: np.ndarray, order: np.ndarray, out: np.ndarray) -> None:
    """The paired table of :func:`fused_pass` for M = 2: ``out[4r : 4r + 2]`` the log π pair of (worker, answer)
    ``r = k·2 + y`` (``lp[2r'], lp[2r' + 1]`` with r' = order[k]·2 + y, or r' = r where ``order`` is empty), its
    counts pair ``out[4r + 2 : 4r + 4]`` zero."""
    n = out.size // 8
    for k in range(n):
        src = (order[k] if order.size else k) * 4
        for c in range(4):
            out[8 * k + (c // 2) * 4 + c % 2] = lp[src + c]
            out[8 * k + (c // 2) * 4 + 2 + c % 2] = 0.0


@compiled_kernel
def paired_counts(table: np.ndarray, order: np.ndarray, counts: np.ndarray) -> None:
    """The M-step sums of a paired table in the plain layout, ``counts[2r' + l] = table[4r + 2 + l]`` (r, r' as in
    :func:`paired_table`; the run's worker order)."""
    n = table.size // 8
    for k in range(n):
        dst = (order[k] if order.size else k) * 4
        for c in range(4):
            counts[dst + c] = table[8 * k + (c // 2) * 4 + 2 + c % 2]
