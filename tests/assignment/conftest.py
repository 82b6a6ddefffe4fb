"""Random TVCS instances and the brute-force oracle shared by the selection tests.

The acceptance-test instance generator (docs/methods/assignment.md §7.3): a worker × task grid with a candidate density,
caps per view drawn from ``[0, size of the other side]``, a random or ``⌊0.8·min(Σcaps)⌋`` total,
continuous (``N(0,1)²``) or small-integer (tie-heavy) weights. Exposed as fixtures that return the
functions, since test modules cannot import each other under ``--import-mode=importlib``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from crowdflow.assignment.constraints import TVCSConstraints


def _random_instance(rng, a, b, density=0.8, weights="cont", total_mode="random", nogroup=0.0):
    """Worker×task grid (a, b) with candidate density; caps per view from [0, other side]."""
    while True:
        mask = rng.random((a, b)) < density
        r, c = np.nonzero(mask)
        if r.size:
            break
    p = r.size
    caps1 = rng.integers(0, b + 1, size=a)
    caps2 = rng.integers(0, a + 1, size=b)
    if total_mode == "random":
        total = int(rng.integers(0, p + 1))
    else:
        total = int(0.8 * min(caps1.sum(), caps2.sum()))
    if weights == "cont":
        u = rng.standard_normal(p) ** 2
    else:
        u = rng.integers(0, 4, size=p).astype(float)
    v1, v2 = r.astype(np.int64), c.astype(np.int64)
    if nogroup:
        v1 = np.where(rng.random(p) < nogroup, -1, v1)
        v2 = np.where(rng.random(p) < nogroup, -1, v2)
    return u, v1, v2, caps1, caps2, total


def _brute_opt(u, cons: TVCSConstraints) -> float:
    """Independent oracle: enumerate all 2^p subsets with itertools (p ≤ 14)."""
    A, s = cons.matrix()
    A = A.toarray()
    best = 0.0
    for bits in itertools.product((0, 1), repeat=cons.p):
        x = np.array(bits, dtype=float)
        if np.all(A @ x <= s + 1e-9):
            best = max(best, float(u @ x))
    return best


def _generic_instance(rng: np.random.Generator, i: int, positive: bool = False):
    """A tiny TVCS instance with repeated (view1, view2) keys and ungrouped elements (key −1):
    weights continuous on odd ``i``, small integers (ties) on even ``i``; ``positive`` keeps every
    weight and the budget ≥ 1."""
    p = int(rng.integers(1, 13))
    v1 = rng.integers(-1, 3, size=p)
    v2 = rng.integers(-1, 3, size=p)
    c1 = rng.integers(0, 4, size=3)
    c2 = rng.integers(0, 4, size=3)
    tot = int(rng.integers(int(positive), p + 1))
    u = rng.standard_normal(p) ** 2 if i % 2 else rng.integers(int(positive), 3, size=p).astype(float)
    return u, v1, v2, c1, c2, tot, TVCSConstraints.build(p, v1, v2, c1, c2, tot)


@pytest.fixture(scope="session")
def random_instance() -> Callable[..., Any]:
    """:func:`_random_instance`: ``(u, view1, view2, caps1, caps2, total)`` on a random worker × task grid."""
    return _random_instance


@pytest.fixture(scope="session")
def generic_instance() -> Callable[..., Any]:
    """:func:`_generic_instance`: tiny structures with repeated key pairs and ungrouped elements."""
    return _generic_instance


@pytest.fixture(scope="session")
def brute_opt() -> Callable[..., float]:
    """:func:`_brute_opt`: the optimum by enumerating every subset with itertools (p ≤ 14)."""
    return _brute_opt
