"""What the fused Dawid–Skene sweeps share: the block of tasks, the cache hint's distances, the vectorised exponential.

The general sweep (:mod:`crowdflow.skills.fused_em`) and the two-class default sweep (:mod:`crowdflow.skills.sweep2`)
walk the labels a block of :data:`BLOCK` tasks at a time, ask the cache for the table rows of the label :data:`AHEAD`
on past :data:`NEAR` floats, and take a block's exponentials by :func:`_exp_block` (docs/methods/skills.md §7.2).
"""

from __future__ import annotations

import numpy as np

from crowdflow.compiled import compiled_kernel, inlined_kernel

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
    for i in range(n):  # both loads unconditional: a select, so the loop vectorises (a load under the branch kept it
        v = x[i]  # scalar, a test and a jump an element)
        s = scale[i]
        x[i] = v * s if v != 0.0 else 0.0


@compiled_kernel
def fast_exp(x: np.ndarray) -> np.ndarray:
    """exp of every entry of ``x`` (≤ 0, −∞ or NaN) by :func:`_exp_block`: for tests and the docs."""
    out = x.copy()
    _exp_block(out, out.size, np.empty(out.size))
    return out
