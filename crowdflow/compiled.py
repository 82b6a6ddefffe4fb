"""The one way crowdflow compiles a hot loop: numba ``njit``, cached on disk, GIL released.

Compiled loops live beside the math they speed up (the min-cost flow phases, the TVCS greedy seed,
the Dawid–Skene EM iterations); this module only holds the decorators, so every kernel is compiled
with the same options and mypy still sees each kernel's Python signature, and the cache-prefetch hints
(:data:`prefetch_read`, :data:`prefetch_write`) compiled kernels may call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

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


def _prefetch(write: int) -> Any:
    """A compiled-only intrinsic ``fn(array, index)``: LLVM's ``llvm.prefetch`` of ``&array[index]`` (a hint: no
    load, no fault, no effect on any value; ``write`` 1 asks for the line to be written)."""

    def typer(typingctx: Any, arr: Any, idx: Any) -> Any:
        sig = types.void(arr, idx)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            aryty, idxty = signature.args
            ary = context.make_array(aryty)(context, builder, args[0])
            at = context.cast(builder, args[1], idxty, types.intp)
            item = cgutils.get_item_pointer  # numba's code generation helpers are not annotated
            ptr = item(context, builder, aryty, ary, [at], wraparound=False, boundscheck=False)  # type: ignore[no-untyped-call]
            i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")  # type: ignore[no-untyped-call]
            # (address, read 0 / write 1, locality 3: keep in every cache level, data cache 1)
            builder.call(fn, [builder.bitcast(ptr, i8p), i32(write), i32(3), i32(1)])
            return context.get_dummy_value()

        return sig, codegen

    typer.__name__ = "prefetch_write" if write else "prefetch_read"
    return intrinsic(typer)


#: ``prefetch_read(a, i)`` / ``prefetch_write(a, i)`` inside a compiled kernel: ask for the cache line of ``a[i]``
#: ahead of its use (a kernel whose loads land at random in a table larger than the core's cache, e.g. the held
#: Dawid–Skene pass at 2·10⁵ workers, would otherwise wait for each line; docs/scale.md). They change no value.
prefetch_read = _prefetch(0)
prefetch_write = _prefetch(1)
