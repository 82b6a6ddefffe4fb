"""The one way crowdflow compiles a hot loop: numba ``njit``, cached on disk, GIL released.

Compiled loops live beside the math they speed up (the min-cost flow phases, the TVCS greedy seed,
the Dawid–Skene EM iterations); this module only holds the decorator, so every kernel is compiled
with the same options and mypy still sees each kernel's Python signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba

_F = TypeVar("_F", bound=Callable[..., Any])


def compiled_kernel(fn: _F) -> _F:
    """``numba.njit(cache=True, nogil=True)`` keeping the Python signature for mypy.

    Parameters
    ----------
    fn : callable
        A function in numba's nopython subset (numpy arrays and scalars in and out).

    Returns
    -------
    callable
        The compiled function (compiled on first call per argument types, then loaded from the
        on-disk cache in ``__pycache__``).
    """
    return cast(_F, numba.njit(cache=True, nogil=True)(fn))


def inlined_kernel(fn: _F) -> _F:
    """``numba.njit(inline="always")``: a compiled helper inlined into the compiled kernels that call it.

    For a loop body shared by several specialisations of one kernel: a caller that passes a literal (say the
    number of classes) gets loops with a compile-time trip count. Only compiled kernels call it (from Python it
    would compile, uncached, on first use); the caller's on-disk cache holds it.
    """
    return cast(_F, numba.njit(inline="always", nogil=True)(fn))
