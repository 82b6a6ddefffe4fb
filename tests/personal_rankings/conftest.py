"""Fixtures of the personal-rankings tests: one BLAS thread per module, seeded synthetic instances."""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from crowdflow.personal_rankings import PersonalComparisons, encode_personal_comparisons
from crowdflow.personal_rankings.btl import paper_lambda
from crowdflow.personal_rankings.manifold import TwoFactorGeometry
from crowdflow.personal_rankings.objective import SmoothedBTLObjective
from crowdflow.synth.personal_rankings import synthetic_personal_comparisons

SIGMA = 0.18


def _openblas_thread_setters() -> list[tuple[object, object]]:
    """(setter, getter) pairs of the OpenBLAS copies bundled with numpy and scipy (none if not found)."""
    out = []
    for pkg in (np, __import__("scipy")):
        libdir = os.path.join(os.path.dirname(os.path.dirname(pkg.__file__)), f"{pkg.__name__}.libs")
        for path in glob.glob(os.path.join(libdir, "*openblas*.so*")):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for suffix in ("64_", ""):
                setter = getattr(lib, f"scipy_openblas_set_num_threads{suffix}", None)
                getter = getattr(lib, f"scipy_openblas_get_num_threads{suffix}", None)
                if setter is not None and getter is not None:
                    getter.restype = ctypes.c_int
                    out.append((setter, getter))
                    break
    return out


@pytest.fixture(scope="module", autouse=True)
def _single_threaded_blas() -> Iterator[None]:
    """Run each test module with one BLAS thread (restored afterwards): on the shared 2-core host a
    multi-threaded OpenBLAS spin-waits under contention and the small dense products here get 5–30×
    slower. Results do not depend on it."""
    setters = _openblas_thread_setters()
    before = [int(g()) for _, g in setters]  # type: ignore[operator]
    for s, _ in setters:
        s(1)  # type: ignore[operator]
    yield
    for (s, _), n in zip(setters, before, strict=False):
        s(n)  # type: ignore[operator]


def _encoded(K: int, r: int, d: float, seed: int) -> tuple[PersonalComparisons, np.ndarray]:
    syn = synthetic_personal_comparisons(K, r, d, seed=seed)
    enc = encode_personal_comparisons(syn.comparisons)
    assert list(enc.users) == list(syn.users) and list(enc.items) == list(syn.items)
    return enc, syn.X_star


def _rand_point(m: int, n: int, r: int, seed: int = 0, scale: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, r)) * scale, rng.standard_normal((n, r)) * scale


@pytest.fixture(scope="session")
def encoded() -> Callable[[int, int, float, int], tuple[PersonalComparisons, np.ndarray]]:
    """``encoded(K, r, d, seed)``: the encoded synthetic instance and its true score matrix."""
    return _encoded


@pytest.fixture(scope="session")
def rand_point() -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """``rand_point(m, n, r, seed=0, scale=0.5)``: random factors (L, R)."""
    return _rand_point


@pytest.fixture(scope="module")
def small() -> tuple[PersonalComparisons, np.ndarray]:
    return _encoded(30, 3, 5, 1)


@pytest.fixture(scope="module")
def small_obj(small: tuple[PersonalComparisons, np.ndarray]) -> SmoothedBTLObjective:
    enc, _ = small
    return SmoothedBTLObjective(enc.pairs, SIGMA, paper_lambda(enc.m, enc.n, 3))


@pytest.fixture
def geo_point() -> tuple[np.ndarray, np.ndarray, TwoFactorGeometry]:
    """A 25×18 rank-4 point with unbalanced, non-orthogonal factors and its geometry."""
    L, R = _rand_point(25, 18, 4, seed=11, scale=1.0)
    R[:, 0] *= 3.0  # unbalanced, non-orthogonal factors
    return L, R, TwoFactorGeometry(L, R)
